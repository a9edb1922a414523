//! The DEP's replay acceptance criteria, on small synthetic workloads with
//! the real backend cores.

use handoff_core::{
    Backend, DestinationEventKind as DE, DestinationState as DS, Duration, HandoffPolicy,
    LifecycleEvent, RoleState, SourceEventKind as SE, SourceState as SS, Transcript, WorkerId,
};
use handoff_replay::{
    make_core, DeploymentConfig, EngineSpec, Pool, Replay, Report, TransferModel,
};
use handoff_router::RouterMode;
use handoff_workload::{LengthDist, SyntheticConfig, SyntheticWorkload};

fn workload(requests: u64, rate: f64) -> SyntheticWorkload {
    SyntheticWorkload::new(SyntheticConfig {
        seed: 7,
        requests,
        rate_per_sec: rate,
        input_tokens: LengthDist::Uniform {
            min: 1024,
            max: 4096,
        },
        output_tokens: LengthDist::Uniform { min: 16, max: 96 },
        ..SyntheticConfig::default()
    })
}

fn run_with(
    backend: Backend,
    policy: HandoffPolicy,
    decode: u32,
    decode_kv_tokens: u64,
    requests: u64,
    multi_step: bool,
) -> (Report, Transcript) {
    let block_size = 16;
    let spec = |kv_tokens| EngineSpec {
        backend,
        kv_tokens,
        block_size,
        ..EngineSpec::default()
    };
    let cfg = DeploymentConfig {
        backend,
        policy,
        prefill_workers: 2,
        decode_workers: decode,
        router: RouterMode::KvAware,
        block_size: spec(1).event_block_tokens(),
        transfer: TransferModel::Fixed(Duration::from_millis(5)),
        multi_step,
        transcript: true,
        ..DeploymentConfig::default()
    };
    let make = |_w: WorkerId, pool: Pool| {
        let kv = if pool == Pool::Decode {
            decode_kv_tokens
        } else {
            1 << 18
        };
        make_core(&spec(kv)).expect("core")
    };
    let (r, t) = Replay::new(cfg, workload(requests, 20.0), make)
        .expect("the cores publish at the deployment's block size")
        .run();
    (r, t.expect("transcript requested"))
}

fn run(backend: Backend, policy: HandoffPolicy) -> (Report, Transcript) {
    run_with(backend, policy, 2, 1 << 18, 120, true)
}

fn json(r: &Report) -> String {
    serde_json::to_string_pretty(r).expect("report serialises")
}

#[test]
fn same_inputs_byte_identical_report() {
    for backend in [Backend::Vllm, Backend::Sglang] {
        let policy = backend.native_policy();
        let (a, ta) = run(backend, policy);
        let (b, tb) = run(backend, policy);
        assert_eq!(json(&a), json(&b));
        assert_eq!(ta.render(), tb.render());
        assert_eq!(a.completed_requests, 120, "{}", json(&a));
    }
}

#[test]
fn multi_step_report_equals_one_pass_per_event() {
    for backend in [Backend::Vllm, Backend::Sglang] {
        let policy = backend.native_policy();
        let (fast, tf) = run_with(backend, policy, 2, 1 << 18, 60, true);
        let (slow, ts) = run_with(backend, policy, 2, 1 << 18, 60, false);
        assert_eq!(tf.render(), ts.render());
        let strip = |r: &Report| {
            let mut v: serde_json::Value = serde_json::to_value(r).expect("json");
            // Pass counts (and the configuration saying how they were
            // stepped) differ by construction; everything else must not.
            v["config"]["multi_step"] = serde_json::Value::Null;
            for w in v["workers"].as_array_mut().expect("workers") {
                w["steps"] = serde_json::Value::Null;
            }
            v.to_string()
        };
        assert_eq!(strip(&fast), strip(&slow), "{}", backend.name());
        let steps = |r: &Report| r.workers.iter().map(|w| w.steps).sum::<u64>();
        assert_eq!(
            steps(&fast),
            steps(&slow),
            "pass counts are passes, not events"
        );
    }
}

#[test]
fn vllm_pins_atomically_and_releases_after_activation() {
    let (report, t) = run(Backend::Vllm, HandoffPolicy::SourceFirst);
    assert!(report.lifecycle.handoffs_pinned > 0);
    for (id, rec) in t.iter() {
        let src: Vec<(LifecycleEvent, RoleState)> =
            rec.source.iter().map(|l| (l.event, l.to)).collect();
        // Prefill completion is the pin: one transition from Computing.
        assert_eq!(
            src[1],
            (SE::PrefillPinned.into(), SS::Pinned.into()),
            "{id}: {src:?}"
        );
        assert!(rec.source[1].delta.pinned > 0);
        // The source is released by its reader (never before), and the
        // destination had activated: the reader's notification is sent at
        // activation.
        assert_eq!(
            src.last(),
            Some(&(SE::ReaderCompleted.into(), SS::Released.into())),
            "{id}: {src:?}"
        );
        assert!(
            rec.destination
                .iter()
                .any(|l| l.to == RoleState::Destination(DS::Active)),
            "{id}"
        );
        // Booking (Routed) precedes the physical reservation.
        assert_eq!(
            rec.destination[0].event,
            LifecycleEvent::Destination(DE::Routed)
        );
        let reserved = LifecycleEvent::Destination(DE::Reserved);
        assert!(rec.destination.iter().position(|l| l.event == reserved) > Some(0));
    }
}

#[test]
fn sglang_never_dispatches_prefill_before_reservation() {
    let (report, t) = run(Backend::Sglang, HandoffPolicy::DestinationFirst);
    assert_eq!(report.completed_requests, 120);
    for (id, rec) in t.iter() {
        let into_computing: Vec<LifecycleEvent> = rec
            .source
            .iter()
            .filter(|l| l.to == RoleState::Source(SS::Computing))
            .map(|l| l.event)
            .collect();
        assert_eq!(
            into_computing,
            vec![LifecycleEvent::Source(SE::DestinationReserved)],
            "{id}"
        );
        let dst: Vec<LifecycleEvent> = rec.destination.iter().map(|l| l.event).collect();
        assert_eq!(&dst[..2], &[DE::Routed.into(), DE::Reserved.into()], "{id}");
    }
}

#[test]
fn aggregated_report_ignores_the_handoff_machinery() {
    let (a, ta) = run_with(
        Backend::Vllm,
        HandoffPolicy::SourceFirst,
        0,
        1 << 18,
        80,
        true,
    );
    let (b, _) = run_with(Backend::Vllm, HandoffPolicy::Disabled, 0, 1 << 18, 80, true);
    assert_eq!(ta.handoffs(), 0);
    assert_eq!(a.lifecycle.handoffs_pinned, 0);
    let mut va = serde_json::to_value(&a).expect("json");
    let mut vb = serde_json::to_value(&b).expect("json");
    va["config"]["policy"] = serde_json::Value::Null;
    vb["config"]["policy"] = serde_json::Value::Null;
    assert_eq!(va, vb);
}

#[test]
fn disabled_policy_has_no_ownership() {
    let (r, t) = run(Backend::Vllm, HandoffPolicy::Disabled);
    assert_eq!(t.handoffs(), 0);
    assert_eq!(r.completed_requests, 120);
    assert!(r
        .workers
        .iter()
        .all(|w| w.peak_pinned_blocks == 0 && w.peak_reserved_blocks == 0));
}

/// Decode short of memory: vLLM strands prefill KV (pinned block-seconds
/// rise on the prefill workers); SGLang gates the prefill instead (its
/// prefill workers hold almost nothing while decode is full).
#[test]
fn decode_pressure_strands_vllm_and_gates_sglang() {
    let small = 6 * 1024; // decode KV tokens: room for ~1-2 requests
    let (v, _) = run_with(
        Backend::Vllm,
        HandoffPolicy::SourceFirst,
        2,
        small,
        60,
        true,
    );
    let (s, _) = run_with(
        Backend::Sglang,
        HandoffPolicy::DestinationFirst,
        2,
        small,
        60,
        true,
    );
    let pinned = |r: &Report| -> f64 {
        r.workers
            .iter()
            .filter(|w| w.pool == "prefill")
            .map(|w| w.pinned_block_seconds)
            .sum()
    };
    assert!(
        v.completed_requests + v.failed_requests == 60
            && s.completed_requests + s.failed_requests == 60
    );
    assert!(
        pinned(&v) > 5.0 * pinned(&s).max(1.0),
        "vLLM pinned {} vs SGLang {}",
        pinned(&v),
        pinned(&s)
    );
    assert!(v.lifecycle.source_pinned_ms.p50 > s.lifecycle.source_pinned_ms.p50);
    // SGLang's wait happens before prefill: reservation wait, not stranding.
    assert!(s.lifecycle.reservation_wait_ms.p90 > 0.0, "{}", json(&s));
    for r in [&v, &s] {
        assert!(
            r.workers
                .iter()
                .all(|w| w.drained && w.final_kv_used_blocks == 0),
            "{}",
            json(r)
        );
    }
}

/// Per-request records (`--per-request-jsonl`) and the capacity timelines
/// do not depend on how passes are stepped, agree with the report, and a
/// closed loop never holds more than its concurrency.
#[test]
fn records_timelines_and_closed_loop() {
    use std::cell::RefCell;
    use std::rc::Rc;
    let run = |multi_step: bool, concurrency: Option<usize>, points: usize| {
        let backend = Backend::Vllm;
        let spec = |kv_tokens| EngineSpec {
            backend,
            kv_tokens,
            ..EngineSpec::default()
        };
        let cfg = DeploymentConfig {
            decode_workers: 2,
            multi_step,
            block_size: spec(1).event_block_tokens(),
            ..DeploymentConfig::default()
        };
        let make = move |_w: WorkerId, pool: Pool| {
            let kv = if pool == Pool::Decode {
                20_000
            } else {
                1 << 18
            };
            make_core(&spec(kv)).expect("core")
        };
        let records = Rc::new(RefCell::new(Vec::new()));
        let sink = records.clone();
        let replay = match concurrency {
            Some(n) => Replay::closed_loop(cfg, workload(60, 20.0), n, make)
                .expect("the cores publish at the deployment's block size"),
            None => Replay::new(cfg, workload(60, 20.0), make)
                .expect("the cores publish at the deployment's block size"),
        };
        let o = replay
            .with_request_sink(Box::new(move |r| sink.borrow_mut().push(r.clone())))
            .keep_details(points)
            .run_all();
        let recs = records.borrow().clone();
        (o, recs)
    };
    let (fast, a) = run(true, None, 1 << 20);
    let (_, b) = run(false, None, 64);
    assert_eq!(a, b, "records do not depend on multi-step");
    assert_eq!(a.len(), 60);
    let r = &fast.report;
    assert_eq!(r.completed_requests, 60);
    let ttst: Vec<f64> = a.iter().filter_map(|x| x.ttst_ms).collect();
    let mean = ttst.iter().sum::<f64>() / ttst.len() as f64;
    assert!(
        (mean - r.flat.ttst.mean).abs() < 0.01,
        "{mean} vs {}",
        r.flat.ttst.mean
    );
    assert_eq!(
        a.iter().map(|x| u64::from(x.input_tokens)).sum::<u64>(),
        r.total_input_tokens
    );
    for x in &a {
        let h = &x.handoff;
        assert!(
            h.pinned_ms <= h.source_released_ms && h.reserved_ms <= h.activated_ms,
            "{x:?}"
        );
        assert!(x.ttft_ms.unwrap() <= x.e2e_ms.unwrap());
    }
    assert!(r.prefix_cache_reused_ratio > 0.0 && r.prefix_cache_reused_ratio < 1.0);
    // Timelines, unbounded here: the physical pinned peak sampled from the
    // hosts is at most the report's, which sums each attempt's lease (two
    // pinned prefills sharing a cached prefix hold its blocks once).
    let d = fast.details.expect("details");
    assert_eq!(d.timelines.len(), 4);
    for (w, pool, s) in &d.timelines {
        let peak = s.points().iter().map(|p| p.pinned).max().unwrap_or(0);
        let reported = r.workers[w.0 as usize].peak_pinned_blocks;
        assert!(peak <= reported, "worker {w}: {peak} > {reported}");
        assert_eq!(peak > 0, *pool == "prefill", "worker {w}");
    }
    assert_eq!(fast.live_bookings, 0);
    // Closed loop: at most 3 in flight, arrivals at completions.
    let (closed, c) = run(true, Some(3), 64);
    assert_eq!(closed.report.completed_requests, 60);
    for (_, _, s) in &closed.details.as_ref().expect("details").timelines {
        assert!(s.points().len() <= 64 && !s.points().is_empty());
    }
    for x in &c {
        let at = x.arrival_ms;
        let n = c
            .iter()
            .filter(|y| y.arrival_ms <= at && y.end_ms > at)
            .count();
        assert!(n <= 3, "{n} in flight at {at}");
    }
    assert_eq!(c.iter().filter(|x| x.arrival_ms == 0.0).count(), 3);
}

/// Where the first token comes from in P/D. SGLang's prefill samples it and
/// ships it with the KV: the decode worker streams it when the request joins
/// its batch, with no pass (an idle decode worker: at activation), and
/// decodes the other N−1 (`disaggregation/decode.py`
/// `_commit_transfer_to_req`, `process_batch_result_prebuilt`). vLLM's
/// decode samples it in its first pass (the proxy discards the prefill's
/// token), so its TTFT carries that pass.
#[test]
fn first_token_source_by_backend() {
    use std::cell::RefCell;
    use std::rc::Rc;
    for backend in [Backend::Sglang, Backend::Vllm] {
        let spec = EngineSpec {
            backend,
            block_size: 16,
            ..EngineSpec::default()
        };
        let cfg = DeploymentConfig {
            backend,
            policy: backend.native_policy(),
            prefill_workers: 1,
            decode_workers: 1,
            block_size: spec.event_block_tokens(),
            transfer: TransferModel::Fixed(Duration::from_millis(5)),
            ..DeploymentConfig::default()
        };
        let records = Rc::new(RefCell::new(Vec::new()));
        let sink = records.clone();
        // Spaced out: every decode worker is idle when a transfer lands.
        let o = Replay::new(cfg, workload(8, 0.5), |_, _| {
            make_core(&spec).expect("core")
        })
        .expect("the cores publish at the deployment's block size")
        .with_request_sink(Box::new(move |r| sink.borrow_mut().push(r.clone())))
        .run_all();
        assert_eq!(o.report.completed_requests, 8);
        for x in records.borrow().iter() {
            let ttft = x.ttft_ms.expect("ttft");
            let activated = x.handoff.activated_ms.expect("activated") - x.arrival_ms;
            if backend == Backend::Sglang {
                assert!((ttft - activated).abs() < 1e-6, "{x:?}");
            } else {
                assert!(ttft > activated + 1.0, "a decode pass: {x:?}");
            }
            // TPOT spans the N−1 tokens after the first either way.
            assert!(x.tpot_ms.expect("tpot") > 0.0);
        }
    }
}

/// SGLang's prefill sends each finished chunk's KV (`send_kv_chunk`), so
/// under the bytes model the transfer of a long prompt overlaps its prefill:
/// after the pin only the last chunk's bytes remain. Two 8K chunks of 128
/// KiB tokens at 25 GB/s: the whole prompt would take 86 ms after the pin,
/// the last chunk takes 43 ms.
#[test]
fn sglang_streams_kv_per_prefill_chunk() {
    use std::cell::RefCell;
    use std::rc::Rc;
    let spec = EngineSpec {
        backend: Backend::Sglang,
        block_size: 1,
        ..EngineSpec::default()
    };
    let (bytes_per_token, bandwidth) = (131_072u64, 25e9);
    let cfg = DeploymentConfig {
        backend: Backend::Sglang,
        policy: HandoffPolicy::DestinationFirst,
        prefill_workers: 1,
        decode_workers: 1,
        block_size: spec.event_block_tokens(),
        transfer: TransferModel::Bytes {
            base: Duration::from_millis(1),
            bytes_per_token,
            bandwidth,
        },
        ..DeploymentConfig::default()
    };
    let workload = SyntheticWorkload::new(SyntheticConfig {
        seed: 3,
        requests: 3,
        rate_per_sec: 0.2,
        input_tokens: LengthDist::Fixed(16_384),
        output_tokens: LengthDist::Fixed(4),
        ..SyntheticConfig::default()
    });
    let records = Rc::new(RefCell::new(Vec::new()));
    let sink = records.clone();
    let o = Replay::new(cfg, workload, |_, _| make_core(&spec).expect("core"))
        .expect("the cores publish at the deployment's block size")
        .with_request_sink(Box::new(move |r| sink.borrow_mut().push(r.clone())))
        .run_all();
    assert_eq!(o.report.completed_requests, 3);
    let whole_ms = 16_384.0 * bytes_per_token as f64 / bandwidth * 1e3;
    for x in records.borrow().iter() {
        let h = &x.handoff;
        let after_pin = h.activated_ms.expect("activated") - h.pinned_ms.expect("pinned");
        assert!(
            after_pin < 0.6 * whole_ms,
            "{after_pin} ms after the pin, whole transfer {whole_ms} ms: {x:?}"
        );
        assert!(
            after_pin > 0.45 * whole_ms,
            "the last chunk still moves: {x:?}"
        );
    }
}
