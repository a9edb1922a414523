//! Every role in one process: one thread per worker, the frontend on the
//! caller's thread, facts over in-process channels.

use crate::clock::WallClock;
use crate::frontend::{FrontendNode, LiveOutcome};
use crate::node::{NodeConfig, NodeStats, WorkerNode};
use handoff_core::{CoreBox, Generation, HandoffConfig, HandoffPolicy, TransferModel, WorkerId};
use router::{Frontend, FrontendConfig, Pool, FRONTEND_ID};
use std::collections::BTreeMap;
use transport::ChannelNet;
use workload::TraceItem;

/// How an in-process live run is set up.
#[derive(Clone, Copy, Debug)]
pub struct LiveConfig {
    /// Routing and ordering (shared with replay).
    pub frontend: FrontendConfig,
    /// Lifecycle timers.
    pub handoff: HandoffConfig,
    /// Transfer timing (each worker times its own transfers).
    pub transfer: TransferModel,
    /// Model time runs this many times faster than wall time.
    pub speed: f64,
}

/// Runs `items` on workers built from `cores` (id order gives ids 0..n).
pub fn run_in_process(
    cfg: LiveConfig,
    cores: Vec<(Pool, CoreBox)>,
    items: impl Iterator<Item = TraceItem>,
) -> (LiveOutcome, Vec<NodeStats>) {
    let net = ChannelNet::new();
    let fe = net.endpoint(FRONTEND_ID, Generation(0));
    let clock = WallClock::start(cfg.speed);
    let policy = if cfg.frontend.aggregated {
        HandoffPolicy::Disabled
    } else {
        cfg.frontend.policy
    };
    let mut pools = BTreeMap::new();
    let mut handles = Vec::new();
    for (i, (pool, core)) in cores.into_iter().enumerate() {
        let id = WorkerId(i as u32);
        pools.insert(id, pool);
        let ep = net.endpoint(id, Generation(0));
        let node_cfg = NodeConfig {
            id,
            generation: Generation(0),
            policy,
            handoff: cfg.handoff,
            frontend: FRONTEND_ID,
            transfer: cfg.transfer,
        };
        let node = WorkerNode::new(node_cfg, core, ep, clock);
        handles.push(std::thread::spawn(move || node.run().0));
    }
    let routing: Vec<(WorkerId, Pool)> = pools.iter().map(|(w, p)| (*w, *p)).collect();
    let frontend = Frontend::new(cfg.frontend, &routing);
    let outcome = FrontendNode::new(frontend, pools, fe, clock, items).run();
    let stats = handles
        .into_iter()
        .map(|h| h.join().unwrap_or_default())
        .collect();
    (outcome, stats)
}
