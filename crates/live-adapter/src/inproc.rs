//! Wall-clock live in one process: one thread per worker node, the frontend
//! on the caller's thread, facts over in-process channels.

use crate::clock::WallClock;
use crate::frontend::{FrontendNode, LiveOutcome};
use crate::node::{NodeConfig, NodeStats, WorkerNode};
use crate::remote::RemoteError;
use handoff_core::{Generation, WorkerId};
use handoff_deployment::{
    check_core, check_wall_driver, deployment, make_core, worker_policy, DeploymentConfig,
    EngineSpec, WallDriver,
};
use handoff_router::FRONTEND_ID;
use handoff_serving::serving;
use handoff_transport::ChannelNet;
use handoff_workload::TraceItem;

/// Runs `items` on `cfg`'s deployment, worker `i` built from `specs[i]`,
/// with model time running `speed` times faster than wall time. Fails
/// before starting when a spec cannot build a core or the deployment
/// refuses it (lockstep ranks among them: each node steps on its own,
/// [`handoff_deployment::check_wall_driver`]).
pub fn run_in_process(
    cfg: &DeploymentConfig,
    specs: &[EngineSpec],
    speed: f64,
    items: impl Iterator<Item = TraceItem>,
) -> Result<(LiveOutcome, Vec<NodeStats>), RemoteError> {
    check_wall_driver(cfg, WallDriver::LiveWallThreads).map_err(RemoteError::Deployment)?;
    let mut cores = Vec::new();
    for (i, s) in specs.iter().enumerate() {
        let id = WorkerId(i as u32);
        let core = make_core(s).map_err(|e| RemoteError::Engine(id, e))?;
        check_core(cfg, id, core.as_ref()).map_err(RemoteError::Deployment)?;
        cores.push(core);
    }
    let net = ChannelNet::new();
    let fe = net.endpoint(FRONTEND_ID, Generation(0));
    let clock = WallClock::start(speed);
    let policy = worker_policy(cfg);
    let mut handles = Vec::new();
    let workers: Vec<WorkerId> = deployment(cfg).iter().map(|(w, _)| *w).collect();
    for (id, core) in workers.iter().copied().zip(cores) {
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
    let outcome = FrontendNode::new(serving(cfg, items), workers, fe, clock).run();
    let stats = handles
        .into_iter()
        .map(|h| h.join().unwrap_or_default())
        .collect();
    Ok((outcome, stats))
}
