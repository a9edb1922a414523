//! Elastic fleets keep replay and virtual-clock live byte-identical: the
//! fleet and its scale events travel in the fault plan, so both drivers
//! run the same lifecycle (transcript, final worker states, report with
//! its scaling section).

use handoff_core::Backend;
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_engine::fault::FaultPlan;
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

fn deployment(backend: Backend, plan: &str) -> (DeploymentConfig, Vec<EngineSpec>) {
    let block_size = if backend == Backend::Sglang { 1 } else { 16 };
    let spec = EngineSpec {
        backend,
        block_size,
        ..EngineSpec::default()
    };
    let cfg = DeploymentConfig {
        backend,
        policy: backend.native_policy(),
        prefill_workers: 3,
        decode_workers: 3,
        router: RouterMode::KvAware,
        block_size: spec.event_block_tokens(),
        faults: FaultPlan::parse(plan).expect("plan"),
        ..DeploymentConfig::default()
    };
    (cfg, vec![spec; 6])
}

#[test]
fn replay_equals_virtual_live_with_scale_up_drain_and_remove() {
    let plan = "fleet 0 prefill; fleet 1 prefill; fleet 2 prefill absent; \
                fleet 3 decode; fleet 4 decode; fleet 5 decode absent; startup-delay 2s; \
                scale-up prefill at 1s; scale-up decode at 1s; \
                drain 1 at 4s; drain 4 at 5s; remove 3 at 7s";
    for backend in [Backend::Vllm, Backend::Sglang] {
        let (cfg, specs) = deployment(backend, plan);
        let (report, _) = replay_run(&cfg, &specs, items(250, 25.0));
        let s = report
            .scaling
            .as_ref()
            .expect("an elastic run reports scaling");
        let kinds: Vec<&str> = s.events.iter().map(|e| e.event).collect();
        assert!(
            kinds.contains(&"drained") && kinds.contains(&"removed"),
            "{kinds:?}"
        );
        // The costs the drivers must agree on are there to agree on:
        // decode 3's removal at 7 s unwinds the roles it held.
        assert!(
            s.unwound_by_removal.contains_key("teardown"),
            "{} {:?}",
            backend.name(),
            s.unwound_by_removal
        );
        assert_eq!(
            report.completed_requests + report.failed_requests,
            250,
            "{}",
            backend.name()
        );
        assert_eq!(
            compare(&cfg, &specs, items(250, 25.0)).0,
            None,
            "{}",
            backend.name()
        );
    }
}
