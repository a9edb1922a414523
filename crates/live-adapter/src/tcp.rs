//! Live over TCP: each worker behind its own [`TcpEndpoint`] (its own
//! process, or a thread of one), the frontend dialling them. The same
//! nodes as over channels: on the virtual clock the one engine runs on the
//! frontend with a [`RemotePort`] ([`run_tcp_virtual`], byte-identical to
//! replay) and each worker applies the operations it is sent
//! ([`serve_worker_virtual`]); on the wall clock each worker is a
//! [`WorkerNode`] ([`serve_worker_wall`]) and the frontend a
//! [`crate::FrontendNode`].

use crate::remote::{serve_virtual, RemoteError, RemotePort};
use crate::virtual_run::{VirtualOutcome, NODE_TIMEOUT};
use crate::{NodeConfig, NodeStats, WallClock, WorkerNode};
use handoff_core::host::HostFinal;
use handoff_core::{
    CoreBox, Generation, HandoffConfig, HandoffPolicy, Worker, WorkerHost, WorkerId,
};
use handoff_deployment::EngineSpec;
use handoff_deployment::{deployment, engine_config, make_core, DeploymentConfig, EngineError};
use handoff_engine::{Engine, TransferModel};
use handoff_router::{Pool, FRONTEND_ID};
use handoff_serving::serving;
use handoff_transport::{ConnectError, PeerHello, PeerRole, TcpEndpoint};
use handoff_workload::TraceItem;
use std::time::Duration as StdDuration;

/// How long [`connect_retry`] keeps retrying a peer that is not up yet.
pub const CONNECT_DEADLINE: StdDuration = StdDuration::from_secs(20);

/// The role a worker of `pool` announces.
pub fn peer_role(pool: Pool) -> PeerRole {
    match pool {
        Pool::Prefill => PeerRole::Prefill,
        Pool::Decode => PeerRole::Decode,
        Pool::Aggregated => PeerRole::Aggregated,
    }
}

/// Why a TCP deployment could not be assembled or run.
#[derive(Debug)]
pub enum TcpError {
    /// A peer did not accept a connection before [`CONNECT_DEADLINE`].
    Connect {
        /// The address dialled.
        addr: String,
        /// The last error.
        error: ConnectError,
    },
    /// The worker at `addr` announced another id than the one listed.
    WrongWorker {
        /// The id the deployment expects there.
        listed: WorkerId,
        /// The address.
        addr: String,
        /// The id it announced.
        says: WorkerId,
    },
    /// The worker at `addr` serves another pool than the deployment's.
    WrongRole {
        /// The worker.
        worker: WorkerId,
        /// The pool the deployment puts it in.
        pool: Pool,
        /// The address.
        addr: String,
        /// The role it announced.
        serves: PeerRole,
    },
    /// The deployment has another number of schedulers than addresses.
    Count {
        /// Schedulers of the deployment.
        deployment: usize,
        /// Addresses given.
        listed: usize,
    },
    /// A worker's engine spec builds no core.
    Engine(EngineError),
}

impl std::fmt::Display for TcpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TcpError::Connect { addr, error } => write!(
                f,
                "{addr}: {error} (gave up after {} s)",
                CONNECT_DEADLINE.as_secs()
            ),
            TcpError::WrongWorker { listed, addr, says } => {
                write!(
                    f,
                    "{listed}@{addr}: the worker at {addr} says it is worker {says}"
                )
            }
            TcpError::WrongRole {
                worker,
                pool,
                addr,
                serves,
            } => write!(
                f,
                "{worker}={}@{addr}: the worker at {addr} serves as {serves}, not {}",
                pool.name(),
                pool.name()
            ),
            TcpError::Count { deployment, listed } => write!(
                f,
                "the deployment has {deployment} schedulers, {listed} worker addresses were given"
            ),
            TcpError::Engine(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for TcpError {}

/// Connects `ep` to `addr`, retrying with backoff until the peer is up or
/// [`CONNECT_DEADLINE`] passes (processes started together come up in any
/// order).
pub fn connect_retry(ep: &TcpEndpoint, addr: &str) -> Result<PeerHello, TcpError> {
    let deadline = std::time::Instant::now() + CONNECT_DEADLINE;
    let mut wait = StdDuration::from_millis(20);
    loop {
        match ep.connect_peer(addr) {
            Ok(who) => return Ok(who),
            Err(_) if std::time::Instant::now() + wait < deadline => {
                std::thread::sleep(wait);
                wait = (wait * 2).min(StdDuration::from_millis(500));
            }
            Err(error) => {
                return Err(TcpError::Connect {
                    addr: addr.to_string(),
                    error,
                })
            }
        }
    }
}

/// Dials every scheduler of `cfg`'s deployment at its address in
/// `addrs` (in id order) from the frontend's `ep`, and checks each answers
/// with the id and the pool the deployment gives it.
pub fn connect_workers(
    ep: &TcpEndpoint,
    cfg: &DeploymentConfig,
    addrs: &[String],
) -> Result<(), TcpError> {
    let pools = deployment(cfg);
    if pools.len() != addrs.len() {
        return Err(TcpError::Count {
            deployment: pools.len(),
            listed: addrs.len(),
        });
    }
    for (addr, (id, pool)) in addrs.iter().zip(&pools) {
        let hello = connect_retry(ep, addr)?;
        if hello.worker != *id {
            return Err(TcpError::WrongWorker {
                listed: *id,
                addr: addr.clone(),
                says: hello.worker,
            });
        }
        if hello.role != peer_role(*pool) && hello.role != PeerRole::Any {
            return Err(TcpError::WrongRole {
                worker: *id,
                pool: *pool,
                addr: addr.clone(),
                serves: hello.role,
            });
        }
    }
    Ok(())
}

/// The virtual-clock frontend over TCP: `cfg`'s engine on this thread,
/// its `workers` hosts on the connected peers of `ep`
/// ([`connect_workers`] first). Byte-identical to replay.
pub fn run_tcp_virtual(
    cfg: &DeploymentConfig,
    ep: TcpEndpoint,
    workers: u32,
    items: impl Iterator<Item = TraceItem>,
) -> Result<VirtualOutcome, RemoteError> {
    let port = RemotePort::new(ep, workers, NODE_TIMEOUT);
    let engine = Engine::new(engine_config(cfg), port, serving(cfg, items));
    let (mut director, port) = engine.run();
    if let Some(e) = port.error() {
        return Err(e.clone());
    }
    let calls = port.calls();
    port.close();
    let session_log = director.take_session_lines();
    let (report, transcript) = director.into_outcome();
    let report = report.ok_or(RemoteError::Closed)?;
    Ok(VirtualOutcome {
        report,
        transcript,
        calls,
        session_log,
    })
}

/// One worker of a TCP deployment: who it is and what it runs.
#[derive(Clone, Debug)]
pub struct WorkerSetup {
    /// Its scheduler id.
    pub id: WorkerId,
    /// Its incarnation (a restarted worker's is higher).
    pub generation: Generation,
    /// The handoff policy it runs (disabled when aggregated).
    pub policy: HandoffPolicy,
    /// Lifecycle timers.
    pub handoff: HandoffConfig,
    /// Its engine.
    pub spec: EngineSpec,
}

impl WorkerSetup {
    fn core(&self) -> Result<CoreBox, EngineError> {
        make_core(&self.spec)
    }
}

/// A worker on the virtual clock: serves coordinator sessions on `ep`, each
/// on a fresh worker (a session is a new run), until `sessions` have ended
/// (0: for ever). Returns the sessions served and the host operations
/// applied.
pub fn serve_worker_virtual(
    w: &WorkerSetup,
    ep: &TcpEndpoint,
    sessions: u64,
) -> Result<(u64, u64), TcpError> {
    let mut served = 0u64;
    let mut ops = 0u64;
    loop {
        let core = w.core().map_err(TcpError::Engine)?;
        let worker = Worker::new(w.id, w.generation, w.policy, w.handoff, core);
        let mut host = WorkerHost::new(worker);
        // The spec built a core just above, so it builds every restart's.
        let spec = w.spec.clone();
        let mut fresh = move |_w: WorkerId| match make_core(&spec) {
            Ok(c) => c,
            Err(e) => unreachable!("the spec built a core before: {e}"),
        };
        ops += serve_virtual(&mut host, &mut fresh, ep, FRONTEND_ID).ops;
        served += 1;
        if sessions != 0 && served >= sessions {
            return Ok((served, ops));
        }
    }
}

/// A worker on the wall clock: serves frontend sessions on `ep`, each a
/// new run on a fresh [`WorkerNode`] (the frontend's clock frame sets its
/// clock), until `sessions` have ended (0: for ever); `each` sees every
/// session's stats and final state as it ends.
pub fn serve_worker_wall(
    w: &WorkerSetup,
    transfer: TransferModel,
    ep: &TcpEndpoint,
    speed: f64,
    sessions: u64,
    mut each: impl FnMut(u64, &NodeStats, &HostFinal),
) -> Result<u64, TcpError> {
    let cfg = NodeConfig {
        id: w.id,
        generation: w.generation,
        policy: w.policy,
        handoff: w.handoff,
        frontend: FRONTEND_ID,
        transfer,
    };
    let mut served = 0u64;
    loop {
        let core = w.core().map_err(TcpError::Engine)?;
        let node = WorkerNode::new(cfg, core, ep, WallClock::start(speed));
        let (stats, fin) = node.run();
        served += 1;
        each(served, &stats, &fin);
        if sessions != 0 && served >= sessions {
            return Ok(served);
        }
    }
}
