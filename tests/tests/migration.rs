//! A request whose worker is lost is migrated once to a worker still up,
//! as a new attempt, and fails only when no worker can take it; in replay
//! and in virtual-clock live alike.

use handoff_core::{Backend, Instant, WorkerId};
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_engine::fault::{Fault, FaultPlan};
use handoff_router::RouterMode;
use handoff_tests::parity::{compare, replay_run};
use handoff_workload::{SyntheticConfig, SyntheticWorkload, TraceItem};

fn items(n: u64, rate_per_sec: f64) -> Vec<TraceItem> {
    SyntheticWorkload::new(SyntheticConfig {
        requests: n,
        rate_per_sec,
        ..SyntheticConfig::default()
    })
    .collect()
}

fn deployment(
    backend: Backend,
    decode: u32,
    faults: FaultPlan,
) -> (DeploymentConfig, Vec<EngineSpec>) {
    let block_size = if backend == Backend::Sglang { 1 } else { 16 };
    let spec = EngineSpec {
        backend,
        block_size,
        ..EngineSpec::default()
    };
    let cfg = DeploymentConfig {
        backend,
        policy: backend.native_policy(),
        prefill_workers: 2,
        decode_workers: decode,
        router: RouterMode::RoundRobin,
        block_size: spec.event_block_tokens(),
        faults,
        ..DeploymentConfig::default()
    };
    (cfg, vec![spec; 2 + decode as usize])
}

fn kill_at(w: u32, secs: u64) -> FaultPlan {
    let mut plan = FaultPlan::none();
    plan.push(
        Instant::from_millis(secs * 1000),
        Fault::Kill {
            worker: WorkerId(w),
        },
    );
    plan
}

#[test]
fn requests_on_a_killed_decode_worker_migrate_and_complete() {
    for backend in [Backend::Vllm, Backend::Sglang] {
        let (cfg, specs) = deployment(backend, 2, kill_at(3, 5));
        let (report, _) = replay_run(&cfg, &specs, items(300, 20.0));
        let l = &report.lifecycle;
        assert!(
            l.migrated_requests > 0,
            "{backend:?}: the kill hit requests: {l:?}"
        );
        assert_eq!(report.failed_requests, 0, "{backend:?}: {l:?}");
        assert_eq!(report.completed_requests, 300, "{backend:?}");
        // The same plan, the same run, in virtual-clock live.
        assert_eq!(
            compare(&cfg, &specs, items(300, 20.0)).0,
            None,
            "{backend:?}"
        );
    }
}

#[test]
fn requests_on_a_killed_prefill_worker_migrate_and_complete() {
    for backend in [Backend::Vllm, Backend::Sglang] {
        // Loaded, so that prefills are under way when the worker dies.
        let (cfg, specs) = deployment(backend, 2, kill_at(0, 2));
        let (report, _) = replay_run(&cfg, &specs, items(300, 100.0));
        assert!(report.lifecycle.migrated_requests > 0, "{backend:?}");
        assert_eq!(
            report.failed_requests, 0,
            "{backend:?}: {:?}",
            report.lifecycle
        );
        assert_eq!(report.completed_requests, 300, "{backend:?}");
    }
}

#[test]
fn with_no_decode_worker_left_a_request_fails_with_its_reason() {
    let (cfg, specs) = deployment(Backend::Vllm, 1, kill_at(2, 5));
    let (report, _) = replay_run(&cfg, &specs, items(300, 20.0));
    assert!(report.failed_requests > 0);
    assert_eq!(report.completed_requests + report.failed_requests, 300);
    let reasons: u64 = report.lifecycle.failure_reasons.values().sum();
    assert_eq!(
        reasons, report.failed_requests,
        "every failure has a reason"
    );
}
