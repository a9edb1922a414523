//! Wall-clock live measures transfers as replay does: the worker that times
//! a transfer tells the frontend when it ended (`Frame::TransferDone`), so
//! the report's transfer times are the transfers' and not zero; and it
//! says how far model time fell behind the wall clock.

use handoff_deployment::{deployment, DeploymentConfig, EngineSpec};
use handoff_live_adapter::run_in_process;
use handoff_workload::{SyntheticConfig, SyntheticWorkload};

#[test]
fn wall_clock_live_reports_its_transfers() {
    let cfg = DeploymentConfig::default();
    let specs = vec![EngineSpec::default(); deployment(&cfg).len()];
    let items = SyntheticWorkload::new(SyntheticConfig {
        requests: 12,
        ..SyntheticConfig::default()
    });
    let (o, _) = run_in_process(&cfg, &specs, 50.0, items).expect("runs");
    assert_eq!(o.report.completed_requests, 12);
    let t = o.report.lifecycle.transfer_ms;
    // The default transfer model takes a fixed 10 ms of model time.
    assert!(t.p50 >= 10.0 && t.max >= t.p50, "{t:?}");
}

/// A run far faster than this machine can follow says so: at a million
/// model seconds per wall second, every arrival is taken in late.
#[test]
fn a_run_that_cannot_keep_up_reports_its_lag() {
    let cfg = DeploymentConfig::default();
    let specs = vec![EngineSpec::default(); deployment(&cfg).len()];
    let items = SyntheticWorkload::new(SyntheticConfig {
        requests: 20,
        ..SyntheticConfig::default()
    });
    let (o, _) = run_in_process(&cfg, &specs, 1e6, items).expect("runs");
    assert_eq!(o.report.completed_requests, 20);
    assert!(o.run.arrival_lag_max_ms >= o.run.arrival_lag_p99_ms);
    assert!(!o.run.kept_up(), "{:?}", o.run);
}
