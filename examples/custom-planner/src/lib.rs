//! A downstream autoscaler plugged into an elastic replay: [`QueuePlanner`]
//! implements [`handoff_planner::Planner`] outside the mocker's crates, in
//! the style of queue-driven autoscalers (llm-d's workload-variant
//! autoscaler reads `vllm:num_requests_waiting`): a pool whose ready
//! workers hold more than `high` requests each on average grows by one, one
//! under `low` shrinks by one.

use handoff_core::{Duration, WorkerId};
use handoff_engine::FaultPlan;
use handoff_planner::{Decision, FleetSnapshot, Planner, PlannerPool, WorkerPhase};
use handoff_replay::{make_core, DeploymentConfig, EngineSpec, Replay, ReplayOutcome};
use handoff_workload::{RateCurve, SyntheticConfig, SyntheticWorkload};
use std::cell::Cell;
use std::rc::Rc;

/// See the crate docs.
#[derive(Debug)]
pub struct QueuePlanner {
    /// Mean requests per ready worker above which a pool grows.
    pub high: f64,
    /// Mean requests per ready worker below which a pool shrinks.
    pub low: f64,
    /// Between ticks.
    pub interval: Duration,
    /// Ticks so far (shared with the caller, to show the planner ran).
    pub ticks: Rc<Cell<u64>>,
}

impl QueuePlanner {
    fn target(&self, s: &FleetSnapshot, pool: PlannerPool) -> u32 {
        let ready: Vec<u64> = s
            .workers
            .iter()
            .filter(|w| w.pool == pool && w.phase == WorkerPhase::Ready)
            .map(|w| w.load())
            .collect();
        let size = s.size(pool);
        if ready.is_empty() {
            return size;
        }
        let mean = ready.iter().sum::<u64>() as f64 / ready.len() as f64;
        if mean > self.high {
            size + 1
        } else if mean < self.low {
            size.saturating_sub(1)
        } else {
            size
        }
    }
}

impl Planner for QueuePlanner {
    fn tick(&mut self, s: &FleetSnapshot) -> Decision {
        self.ticks.set(self.ticks.get() + 1);
        Decision {
            prefill_target: self.target(s, PlannerPool::Prefill),
            decode_target: self.target(s, PlannerPool::Decode),
            next_tick: s.now + self.interval,
        }
    }

    fn name(&self) -> &str {
        "queue"
    }
}

/// An elastic replay of `requests` synthetic requests whose rate steps
/// from 2/s to 24/s at 30 s and back at 60 s, on vLLM cores with up to 4
/// prefill and 4 decode workers (1 of each to start, 5 s to provision),
/// driven by `planner`.
pub fn replay(requests: u64, planner: QueuePlanner) -> ReplayOutcome {
    let mut text = String::from("startup-delay 5s\n");
    for w in 0..8u32 {
        let pool = if w < 4 { "prefill" } else { "decode" };
        let absent = if w % 4 == 0 { "" } else { " absent" };
        text.push_str(&format!("fleet {w} {pool}{absent}\n"));
    }
    let cfg = DeploymentConfig {
        prefill_workers: 4,
        decode_workers: 4,
        faults: FaultPlan::parse(&text).expect("the fleet parses"),
        ..DeploymentConfig::default()
    };
    let spec = EngineSpec::default();
    let items = SyntheticWorkload::new(SyntheticConfig {
        requests,
        rate_curve: Some(RateCurve::parse("step:0=2,30=24,60=2").expect("the curve parses")),
        ..SyntheticConfig::default()
    });
    let interval = planner.interval;
    Replay::new(cfg, items, |_: WorkerId, _| {
        make_core(&spec).expect("the default engine is valid")
    })
    .expect("the cores publish at the deployment's block size")
    .with_planner(Box::new(planner), interval)
    .run_all()
}
