//! vLLM's `kv_recompute_threshold` across the engine: a decode whose pull
//! would move fewer tokens than the threshold past its own prefix hit reads
//! nothing and prefills them itself, and the prefill's pinned KV is freed by
//! the notice (`vllm/distributed/kv_transfer/kv_connector/v1/nixl/
//! pull_scheduler.py`, `NixlPullConnectorScheduler.get_num_new_matched_tokens`
//! and `_should_recompute_remote_kv`).

use handoff_core::{Duration, Instant, Request, RequestId};
use handoff_deployment::EngineSpec;
use handoff_engine::TransferModel;
use handoff_replay::{DeploymentConfig, Replay};
use handoff_serving::RequestRecord;
use handoff_workload::TraceItem;
use std::cell::RefCell;
use std::rc::Rc;

/// A 1,024-token prompt, then 5 s later a 1,060-token one sharing its
/// first 1,024 tokens, on one prefill and one decode worker at `threshold`;
/// every transfer costs 20 ms plus 1 ms per 100 tokens.
fn run(threshold: u64) -> handoff_replay::Report {
    run_with_records(threshold).0
}

/// [`run`] with the requests' records, in completion order.
fn run_with_records(threshold: u64) -> (handoff_replay::Report, Vec<RequestRecord>) {
    let cfg = DeploymentConfig {
        prefill_workers: 1,
        decode_workers: 1,
        transfer: TransferModel::Bytes {
            base: Duration::from_millis(20),
            bytes_per_token: 100_000,
            bandwidth: 1e10,
        },
        ..DeploymentConfig::default()
    };
    let item = |id: u64, prompt: u32, hashes: Vec<u64>, at_s: u64| TraceItem {
        request: Request {
            id: RequestId(id),
            prompt_tokens: prompt,
            max_output_tokens: 4,
            prefix_hashes: hashes,
            hash_block_tokens: 512,
            session: None,
            arrival: Instant::ZERO + Duration::from_secs(at_s),
            lora: None,
        },
        turn: None,
        delay: None,
    };
    let items = vec![
        item(0, 1024, vec![1, 2], 0),
        item(1, 1060, vec![1, 2, 3], 5),
    ];
    let spec = EngineSpec {
        kv_recompute_threshold: threshold,
        ..EngineSpec::default()
    };
    let make = move |_, _| handoff_deployment::make_core(&spec).expect("valid spec");
    let records = Rc::new(RefCell::new(Vec::new()));
    let sink = Rc::clone(&records);
    let report = Replay::new(cfg, items.into_iter(), make)
        .expect("the cores publish at the deployment's block size")
        .with_request_sink(Box::new(move |r: &RequestRecord| {
            sink.borrow_mut().push(r.clone())
        }))
        .run_all()
        .report;
    let records = records.borrow().clone();
    (report, records)
}

fn decode_prefill_tokens(r: &handoff_replay::Report) -> u64 {
    r.workers
        .iter()
        .find(|w| w.pool == "decode")
        .expect("a decode worker")
        .prefill_tokens
}

#[test]
fn below_the_threshold_the_decode_computes_the_unshared_tail() {
    let r = run(64);
    assert_eq!(r.completed_requests, 2, "{:?}", r.lifecycle);
    // The second prompt's 36 tokens past the decode's cached 1,024.
    assert_eq!(decode_prefill_tokens(&r), 36, "{:?}", r.workers);
}

#[test]
fn at_or_above_it_or_disabled_the_tail_is_read() {
    for threshold in [0, 16, 36] {
        let r = run(threshold);
        assert_eq!(r.completed_requests, 2, "{:?}", r.lifecycle);
        assert_eq!(decode_prefill_tokens(&r), 0, "threshold {threshold}");
    }
    // 37 > 36: recomputed.
    assert_eq!(decode_prefill_tokens(&run(37)), 36);
}

#[test]
fn the_notice_takes_only_the_fixed_latency_and_still_frees_the_source() {
    // The second request's tail pulled: 20 ms + 36 tokens × 100 kB at
    // 10 GB/s (0.36 ms); its notice: the fixed 20 ms alone. Either way the
    // source is released when it ends, and every request completes.
    let transfer_ms = |threshold: u64| {
        let (r, records) = run_with_records(threshold);
        assert_eq!((r.completed_requests, r.failed_requests), (2, 0));
        let rec = records
            .iter()
            .find(|x| x.id == 1)
            .expect("request 1's record");
        let h = &rec.handoff;
        let (start, end) = (h.transfer_start_ms.unwrap(), h.transfer_end_ms.unwrap());
        assert!(
            h.source_released_ms.is_some_and(|t| t >= end),
            "released by the notice"
        );
        end - start
    };
    let (pulled, notice) = (transfer_ms(0), transfer_ms(64));
    assert!((pulled - 20.36).abs() < 1e-6, "{pulled}");
    assert!((notice - 20.0).abs() < 1e-6, "{notice}");
}
