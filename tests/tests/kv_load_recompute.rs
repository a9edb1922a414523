//! vLLM's `kv_load_failure_policy = recompute` keeps the valid prefix: a
//! failed NIXL transfer marks every block it was loading invalid
//! (`nixl_connector.py`, `_handle_failed_transfer`), and the decode
//! scheduler truncates the request's computed tokens at the first invalid
//! block (`vllm/v1/core/sched/scheduler.py`,
//! `_update_requests_with_invalid_blocks`), so what it keeps is the decode
//! worker's own cached prefix and it computes only the rest. A failed
//! transfer on a source-first destination is such a load failure here.

use handoff_core::{
    CancelReason, Duration, FailureReason, Instant, KvLoadFailurePolicy, Request, RequestId,
};
use handoff_engine::fault::FaultPlan;
use handoff_replay::{DeploymentConfig, Replay};
use handoff_workload::TraceItem;

/// Two 1,024-token prompts sharing their first 512 tokens, 5 s apart, on
/// one prefill and one decode worker, every transfer failing.
fn run(policy: KvLoadFailurePolicy) -> handoff_replay::Report {
    let mut cfg = DeploymentConfig {
        prefill_workers: 1,
        decode_workers: 1,
        ..DeploymentConfig::default()
    };
    cfg.handoff.kv_load_failure = policy;
    cfg.faults = FaultPlan::default();
    cfg.faults.transfer_fail = 1.0;
    let item = |id: u64, second_chunk: u64, at_s: u64| TraceItem {
        request: Request {
            id: RequestId(id),
            prompt_tokens: 1024,
            max_output_tokens: 4,
            prefix_hashes: vec![1, second_chunk],
            hash_block_tokens: 512,
            session: None,
            arrival: Instant::ZERO + Duration::from_secs(at_s),
            lora: None,
        },
        turn: None,
        delay: None,
    };
    let items = vec![item(0, 2, 0), item(1, 3, 5)];
    let make = |_, _| handoff_deployment::make_core(&Default::default()).expect("valid spec");
    Replay::new(cfg, items.into_iter(), make)
        .expect("the cores publish at the deployment's block size")
        .run_all()
        .report
}

#[test]
fn recompute_keeps_the_decode_workers_cached_prefix() {
    let r = run(KvLoadFailurePolicy::Recompute);
    assert_eq!(r.completed_requests, 2, "{:?}", r.lifecycle);
    let decode = r
        .workers
        .iter()
        .find(|w| w.pool == "decode")
        .expect("a decode worker");
    // The first prompt whole, then only the second's unshared half.
    assert_eq!(decode.prefill_tokens, 1024 + 512, "{:?}", r.workers);
}

#[test]
fn fail_fails_a_failed_transfer_as_a_kv_load_failure() {
    let r = run(KvLoadFailurePolicy::Fail);
    assert_eq!(r.failed_requests, 2);
    assert_eq!(
        r.lifecycle
            .failure_reasons
            .get(&FailureReason::Handoff(CancelReason::KvLoadFailed)),
        Some(&2)
    );
}
