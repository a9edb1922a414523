//! A downstream routing policy set in the `DeploymentConfig` routes live runs
//! too: the virtual-clock threads and the wall-clock in-process run build
//! their frontend from the same configuration as replay.

use handoff_core::{Instant, Request};
use handoff_deployment::{deployment, DeploymentConfig, EngineSpec};
use handoff_live_adapter::{run_in_process, run_virtual_threads};
use handoff_router::{CustomPolicy, RouterMode, RouterView, RoutingChoice, RoutingPolicy};
use handoff_workload::{SyntheticConfig, SyntheticWorkload};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The last selectable worker, counting calls.
#[derive(Debug)]
struct Last(Arc<AtomicU64>);

impl RoutingPolicy for Last {
    fn select(
        &mut self,
        _: &Request,
        view: &mut RouterView<'_>,
        _: Instant,
    ) -> Option<RoutingChoice> {
        self.0.fetch_add(1, Ordering::Relaxed);
        view.workers().next_back().map(RoutingChoice::worker)
    }
}

fn setup(
    requests: u64,
) -> (
    DeploymentConfig,
    Vec<EngineSpec>,
    SyntheticWorkload,
    Arc<AtomicU64>,
) {
    let calls = Arc::new(AtomicU64::new(0));
    let c = calls.clone();
    let last = CustomPolicy::new("last", move |_| Box::new(Last(c.clone())));
    let cfg = DeploymentConfig {
        router: RouterMode::Custom(last),
        ..DeploymentConfig::default()
    };
    let specs = vec![EngineSpec::default(); deployment(&cfg).len()];
    let items = SyntheticWorkload::new(SyntheticConfig {
        requests,
        ..SyntheticConfig::default()
    });
    (cfg, specs, items, calls)
}

#[test]
fn virtual_clock_live_routes_with_a_custom_policy() {
    let (cfg, specs, items, calls) = setup(30);
    let o = run_virtual_threads(&cfg, &specs, items).expect("runs");
    assert_eq!(o.report.config.router, "last");
    assert_eq!(o.report.completed_requests, 30);
    // One prefill and one decode selection per request.
    assert_eq!(calls.load(Ordering::Relaxed), 60);
}

#[test]
fn wall_clock_live_routes_with_a_custom_policy() {
    let (cfg, specs, items, calls) = setup(10);
    let (o, _) = run_in_process(&cfg, &specs, 50.0, items).expect("runs");
    assert_eq!(o.report.config.router, "last");
    assert_eq!(o.report.completed_requests, 10);
    assert_eq!(calls.load(Ordering::Relaxed), 20);
}
