//! Wall-clock live judges reads as replay does: a decode worker whose read
//! ends after its prefill worker freed the KV (vLLM's lease ran out while
//! the reservation waited) completes it as vLLM does and the report counts
//! it stale; under the strict `StaleReadPolicy::Fail` the destination
//! unwinds with `kv-load-failed` and the request follows
//! `kv_load_failure_policy`. Replay's counterpart is `tests/tests/kv_lease.rs`.

use handoff_core::{CancelReason, Duration, FailureReason, KvLoadFailurePolicy, StaleReadPolicy};
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_live_adapter::run_in_process;
use handoff_serving::Report;
use handoff_workload::{SyntheticConfig, SyntheticWorkload};

const REQUESTS: u64 = 120;

/// vLLM, decode pools too small to reserve at once, a 1 s lease and no
/// heartbeats (`--kv-lease abort-timeout --lease-ttl-s 1`), so sources
/// expire before their readers ever speak to them.
fn tight(stale: StaleReadPolicy, policy: KvLoadFailurePolicy) -> (Report, u64) {
    let mut cfg = DeploymentConfig::default();
    cfg.handoff.kv_load_failure = policy;
    cfg.handoff.stale_read = stale;
    cfg.handoff.heartbeat = None;
    let spec = |kv_tokens: u64| EngineSpec {
        kv_tokens,
        source_lease_ttl: Some(Duration::from_secs(1)),
        ..EngineSpec::default()
    };
    let specs = vec![spec(1_000_000), spec(1_000_000), spec(20_000), spec(20_000)];
    cfg.engines = specs.clone();
    let items = SyntheticWorkload::new(SyntheticConfig {
        requests: REQUESTS,
        ..Default::default()
    });
    let (o, stats) = run_in_process(&cfg, &specs, 20.0, items).expect("runs");
    assert!(!o.run.stalled, "{:?}", o.run);
    let judged = stats.iter().map(|s| s.reads_of_released).sum();
    (o.report, judged)
}

fn load_failures(r: &Report) -> u64 {
    r.lifecycle
        .failure_reasons
        .get(&FailureReason::Handoff(CancelReason::KvLoadFailed))
        .copied()
        .unwrap_or(0)
}

#[test]
fn wall_clock_completes_stale_reads_and_counts_them() {
    let (r, judged) = tight(StaleReadPolicy::Complete, KvLoadFailurePolicy::Fail);
    let s = r.lifecycle.stale_reads;
    assert_eq!(r.completed_requests, REQUESTS, "{:?}", r.lifecycle);
    assert!(s.reads > 0 && judged >= s.reads, "{judged} judged, {s:?}");
    assert_eq!(s.reads, s.reused + s.not_reused);
}

#[test]
fn wall_clock_strict_choice_fails_or_recomputes_what_it_cannot_read() {
    let (failed, judged) = tight(StaleReadPolicy::Fail, KvLoadFailurePolicy::Fail);
    let by_reason = load_failures(&failed);
    assert!(
        by_reason > 0 && judged >= by_reason,
        "no failed load ({judged} reads judged released): {:?}",
        failed.lifecycle.failure_reasons
    );
    assert_eq!(failed.completed_requests + failed.failed_requests, REQUESTS);
    assert!(
        failed
            .workers
            .iter()
            .all(|w| w.drained && w.final_kv_used_blocks == 0),
        "{:?}",
        failed.workers
    );

    let (recomputed, judged) = tight(StaleReadPolicy::Fail, KvLoadFailurePolicy::Recompute);
    assert!(judged > 0, "no read judged released");
    assert_eq!(
        recomputed.failed_requests, 0,
        "{:?}",
        recomputed.lifecycle.failure_reasons
    );
    assert_eq!(recomputed.completed_requests, REQUESTS);
}
