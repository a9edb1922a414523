//! A client's cancel through replay, under vLLM's rule (the default) and
//! the earlier free-at-cancel one (`--cancel-frees immediately`): one
//! request on 1P1D whose read takes 2 s, cancelled 1 s into the run, while
//! its decode worker reads. Upstream keeps both sides' KV until the read
//! ends (vllm-project/vllm PRs #25067, #32255), so the prefill worker holds
//! its KV about twice as long; the immediate rule frees both at the cancel.
//! Either way the request fails as the client's cancel, at the cancel.

use handoff_core::{CancelFrees, CancelReason, Duration, FailureReason, Instant};
use handoff_deployment::DeploymentConfig;
use handoff_engine::fault::FaultPlan;
use handoff_engine::TransferModel;
use handoff_replay::{Replay, Report};

fn run(rule: CancelFrees) -> Report {
    let mut cfg = DeploymentConfig {
        prefill_workers: 1,
        decode_workers: 1,
        transfer: TransferModel::Fixed(Duration::from_secs(2)),
        faults: FaultPlan::parse("cancel 0 at 1s").expect("plan"),
        ..DeploymentConfig::default()
    };
    cfg.handoff.cancel_frees = rule;
    cfg.engines = vec![handoff_deployment::EngineSpec::default(); 2];
    let items = handoff_workload::SyntheticWorkload::new(handoff_workload::SyntheticConfig {
        requests: 1,
        start: Instant::ZERO,
        ..Default::default()
    });
    let spec = handoff_deployment::EngineSpec::default();
    Replay::new(cfg, items, move |_, _| {
        handoff_deployment::make_core(&spec).expect("valid spec")
    })
    .expect("the cores publish at the deployment's block size")
    .run_all()
    .report
}

fn pool_blocks_seconds(r: &Report, pool: &str) -> (f64, f64) {
    let w = r.workers.iter().find(|w| w.pool == pool).expect("worker");
    (w.pinned_block_seconds, w.reserved_block_seconds)
}

#[test]
fn a_cancel_during_the_read_keeps_the_kv_until_the_read_ends_as_upstream() {
    let upstream = run(CancelFrees::Upstream);
    let immediate = run(CancelFrees::Immediately);
    for r in [&upstream, &immediate] {
        assert_eq!(r.failed_requests, 1, "{:?}", r.lifecycle.failure_reasons);
        assert_eq!(
            r.lifecycle
                .failure_reasons
                .get(&FailureReason::Handoff(CancelReason::Client)),
            Some(&1)
        );
        assert!(r
            .workers
            .iter()
            .all(|w| w.drained && w.final_kv_used_blocks == 0));
    }
    let (pinned_up, _) = pool_blocks_seconds(&upstream, "prefill");
    let (pinned_now, _) = pool_blocks_seconds(&immediate, "prefill");
    let (_, reserved_up) = pool_blocks_seconds(&upstream, "decode");
    let (_, reserved_now) = pool_blocks_seconds(&immediate, "decode");
    assert!(pinned_now > 0.0 && reserved_now > 0.0);
    // The read started well before the cancel and ends about 1 s after it.
    assert!(pinned_up > 1.5 * pinned_now, "{pinned_up} vs {pinned_now}");
    assert!(
        reserved_up > 1.5 * reserved_now,
        "{reserved_up} vs {reserved_now}"
    );
    // Upstream, only the decode ends for the client (when its load ends);
    // its read notice ends the source well. Immediately, both end at once.
    assert_eq!(upstream.lifecycle.early_ends.get("client"), Some(&1));
    assert_eq!(immediate.lifecycle.early_ends.get("client"), Some(&2));
    assert_eq!(upstream.config.timers.cancel_frees, None);
    assert_eq!(immediate.config.timers.cancel_frees, Some("immediately"));
}
