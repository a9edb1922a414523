//! Running one schedule with every check.

use super::checker::*;
use super::director::*;
use super::paths::*;
use super::schedule::*;
use super::violations::*;
use handoff_core::{CoreBox, Generation, Instant, Worker, WorkerHost, WorkerId};
use handoff_engine::fault::FaultCounts;
use handoff_engine::{Engine, LocalHosts};
use handoff_router::Pool;
use handoff_workload::TraceItem;

/// What one checked run found.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Broken rules, in the order seen (at most a few dozen).
    pub violations: Vec<Violation>,
    /// Faults the engine injected.
    pub faults: FaultCounts,
    /// Lifecycle paths reached.
    pub paths: Paths,
    /// Engine units run.
    pub units: u64,
}

/// Runs `s` with every check; a panic is reported as a [`Kind::Panic`]
/// violation.
pub fn check(s: &Schedule) -> Outcome {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_checked(s))) {
        Ok(o) => o,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "non-string panic".into());
            Outcome {
                violations: vec![Violation {
                    kind: Kind::Panic,
                    at: Instant::ZERO,
                    detail: msg,
                }],
                faults: FaultCounts::default(),
                paths: Paths::default(),
                units: 0,
            }
        }
    }
}

/// The shortest lease and renewal the schedule's sources get.
fn lease_terms(s: &Schedule) -> LeaseTerms {
    let ttl = s.specs.iter().map(|e| e.effective_source_lease_ttl()).min();
    let h = &s.cfg.handoff;
    let extension = [h.heartbeat.map(|hb| hb.extend), h.renew_source_lease]
        .into_iter()
        .flatten()
        .min();
    LeaseTerms { ttl, extension }
}

pub(crate) fn run_checked(s: &Schedule) -> Outcome {
    let cfg = &s.cfg;
    let workers = handoff_deployment::deployment(cfg);
    let policy = handoff_deployment::worker_policy(cfg);
    let make = |w: WorkerId| -> CoreBox {
        let spec = s.specs.get(w.0 as usize).cloned().unwrap_or_default();
        handoff_deployment::make_core(&spec).expect("generated specs are valid")
    };
    let hosts = workers
        .iter()
        .map(|&(id, _)| {
            WorkerHost::new(Worker::new(
                id,
                Generation(0),
                policy,
                cfg.handoff,
                make(id),
            ))
        })
        .collect();
    let port = LocalHosts::new(hosts, make);
    let pools: Vec<Pool> = workers.iter().map(|(_, p)| *p).collect();
    let arrivals = s.items.iter().map(|i| i.request.id).collect();
    let terms = lease_terms(s);
    let check = Checker::new(pools, cfg.block_size, arrivals).with_lease_terms(terms);
    let director = Dst::new(
        handoff_serving::serving(cfg, s.items.clone().into_iter()),
        check,
    );
    let mut engine = Engine::new(handoff_deployment::engine_config(cfg), port, director);
    engine.director_mut().trace = std::env::var_os("DST_TRACE").is_some();
    let mut units = 0u64;
    while engine.run_event() {
        units += 1;
        check_hosts(&mut engine);
    }
    check_hosts(&mut engine);
    let n = engine.port().hosts().len();
    let up: Vec<bool> = (0..n as u32).map(|w| engine.is_up(WorkerId(w))).collect();
    quiescent(&mut engine, &up);
    let (director, port) = engine.run();
    let (serving, mut check) = director.into_parts();
    check.drained(port.hosts(), &up);
    let (report, _) = serving.into_outcome();
    if let Some(rep) = report {
        let (fin, fail) = (check.paths.finished, check.paths.failed);
        if rep.completed_requests != fin
            || rep.failed_requests != fail
            || rep.num_requests != s.items.len() as u64
        {
            check.flag(Kind::Terminal, || {
                format!(
                    "report counts {} requests, {} completed, {} failed; the checker saw {} requests, {fin} finished, {fail} failed",
                    rep.num_requests,
                    rep.completed_requests,
                    rep.failed_requests,
                    s.items.len()
                )
            });
        }
    }
    Outcome {
        violations: check.violations,
        faults: check.faults,
        paths: check.paths,
        units,
    }
}

pub(crate) type DstEngine<'a> = Engine<LocalHosts<'a, CoreBox>, Dst<std::vec::IntoIter<TraceItem>>>;

pub(crate) fn check_hosts(engine: &mut DstEngine<'_>) {
    let steps = engine.director().check.new_steps(engine.port().hosts());
    if !steps.is_empty() {
        engine.director_mut().check.follow_steps(steps);
    }
    let mut found = Vec::new();
    engine
        .director()
        .check
        .hosts(engine.port().hosts(), &mut found);
    if !found.is_empty() {
        engine.director_mut().check.extend(found);
    }
}

pub(crate) fn quiescent(engine: &mut DstEngine<'_>, up: &[bool]) {
    let mut found = Vec::new();
    engine
        .director()
        .check
        .quiescent(engine.port().hosts(), up, &mut found);
    if !found.is_empty() {
        engine.director_mut().check.extend(found);
    }
}
