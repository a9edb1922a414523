//! Virtual-clock live in one process: every worker on its own thread behind
//! an in-process channel endpoint, the engine on the caller's thread.

use crate::remote::{serve_virtual, RemoteError, RemotePort};
use handoff_core::{CoreBox, Generation, Transcript, Worker, WorkerHost, WorkerId};
use handoff_deployment::{
    check_core, engine_config, make_core, worker_policy, DeploymentConfig, EngineSpec,
    SessionServing,
};
use handoff_engine::{run_closed_loop, Engine};
use handoff_router::FRONTEND_ID;
use handoff_serving::report::RequestSink;
use handoff_serving::{serving, Report};
use handoff_transport::ChannelNet;
use handoff_workload::TraceItem;
use std::time::Duration as StdDuration;

/// How long a node may take to answer one operation before the run is
/// declared broken (a node thread that died, a deadlock).
pub const NODE_TIMEOUT: StdDuration = StdDuration::from_secs(60);

/// What a virtual-clock live run produced: the same report and transcript
/// replay produces, plus how many operations crossed the channels.
#[derive(Debug)]
pub struct VirtualOutcome {
    /// The report, as replay writes it.
    pub report: Report,
    /// The lifecycle transcript, when asked for.
    pub transcript: Option<Transcript>,
    /// Host operations sent to the nodes.
    pub calls: u64,
    /// The seed's §6 session log, JSONL (session runs only).
    pub session_log: Vec<String>,
}

/// Builds the core of one worker from its spec; a spec that cannot build
/// one was refused before the run started.
fn build(spec: &EngineSpec) -> CoreBox {
    match make_core(spec) {
        Ok(c) => c,
        Err(e) => panic!("engine spec validated before the run: {e}"),
    }
}

/// Runs `items` on `cfg`'s deployment with worker `i` built from
/// `specs[i]`, each worker on its own thread, on the virtual clock.
pub fn run_virtual_threads(
    cfg: &DeploymentConfig,
    specs: &[EngineSpec],
    items: impl Iterator<Item = TraceItem>,
) -> Result<VirtualOutcome, RemoteError> {
    run_virtual(cfg, specs, items, None, None)
}

/// [`run_virtual_threads`] with closed-loop sessions and session-affine
/// routing, as `handoff_replay::Replay::sessions` runs them.
pub fn run_virtual_sessions(
    cfg: &DeploymentConfig,
    specs: &[EngineSpec],
    items: impl Iterator<Item = TraceItem>,
    sessions: SessionServing,
) -> Result<VirtualOutcome, RemoteError> {
    run_virtual(cfg, specs, items, Some(sessions), None)
}

/// [`run_virtual_sessions`] with every finished request's record handed to
/// `sink` as it ends (as `handoff_replay::Replay::with_request_sink`).
pub fn run_virtual_sessions_recorded(
    cfg: &DeploymentConfig,
    specs: &[EngineSpec],
    items: impl Iterator<Item = TraceItem>,
    sessions: SessionServing,
    sink: RequestSink,
) -> Result<VirtualOutcome, RemoteError> {
    run_virtual(cfg, specs, items, Some(sessions), Some(sink))
}

fn run_virtual(
    cfg: &DeploymentConfig,
    specs: &[EngineSpec],
    items: impl Iterator<Item = TraceItem>,
    sessions: Option<SessionServing>,
    sink: Option<RequestSink>,
) -> Result<VirtualOutcome, RemoteError> {
    for (i, s) in specs.iter().enumerate() {
        let id = WorkerId(i as u32);
        let core = make_core(s).map_err(|e| RemoteError::Engine(id, e))?;
        check_core(cfg, id, core.as_ref()).map_err(RemoteError::Deployment)?;
    }
    let net = ChannelNet::new();
    let coordinator = net.endpoint(FRONTEND_ID, Generation(0));
    let policy = worker_policy(cfg);
    let mut threads = Vec::new();
    for (i, spec) in specs.iter().cloned().enumerate() {
        let id = WorkerId(i as u32);
        let ep = net.endpoint(id, Generation(0));
        let handoff = cfg.handoff;
        threads.push(std::thread::spawn(move || {
            let worker = Worker::new(id, Generation(0), policy, handoff, build(&spec));
            let mut host = WorkerHost::new(worker);
            let mut fresh = move |_w: WorkerId| build(&spec);
            serve_virtual(&mut host, &mut fresh, &ep, FRONTEND_ID)
        }));
    }
    let port = RemotePort::new(coordinator, specs.len() as u32, NODE_TIMEOUT);
    let mut engine = Engine::new(engine_config(cfg), port, serving(cfg, items));
    if let Some(sink) = sink {
        engine.director_mut().set_request_sink(sink);
    }
    if let Some(s) = sessions {
        engine
            .director_mut()
            .set_sessions(s.routing, s.close_delay, s.evict_after_turn);
        engine.director_mut().set_session_overheads(s.overheads);
        run_closed_loop(&mut engine, |_, _| {});
    }
    let (mut director, port) = engine.run();
    let session_log = director.take_session_lines();
    let result = match port.error() {
        Some(e) => Err(e.clone()),
        None => {
            let (report, transcript) = director.into_outcome();
            match report {
                Some(report) => Ok(VirtualOutcome {
                    report,
                    transcript,
                    calls: port.calls(),
                    session_log,
                }),
                None => Err(RemoteError::Closed),
            }
        }
    };
    port.close();
    drop(port);
    for t in threads {
        let _ = t.join();
    }
    result
}
