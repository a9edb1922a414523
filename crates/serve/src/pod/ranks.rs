//! An engine process's ranks: each a [`WorkerNode`] (the wall-clock
//! worker `live` runs in its worker processes) on its own thread, behind
//! its own [`TcpEndpoint`] on the side-channel port plus its rank, as vLLM
//! offsets `VLLM_NIXL_SIDE_CHANNEL_PORT` by the data-parallel rank
//! (`NixlConnectorScheduler.__init__`,
//! `vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py`).
//! A decode engine's rank dials the prefill rank's endpoint named in
//! `kv_transfer_params`, and from then on the lifecycle's facts (reserve,
//! heartbeats, read completion, aborts) cross that connection as they
//! cross it between `live` worker processes; the transport's pings and
//! silence limit are how each side sees the other's loss.
//!
//! The process's driver ([`super::driver`]) is the nodes' frontend: it
//! dials each rank over loopback as the transport's frontend id and sends
//! them their requests, and hears their events and final states.

use crate::error::ServeError;
use crate::pod::ids::PodIds;
use handoff_core::{Generation, HandoffConfig, HandoffPolicy, HostFinal, WorkerId};
use handoff_deployment::{make_core, EngineSpec};
use handoff_engine::TransferModel;
use handoff_live_adapter::{NodeConfig, WallClock, WorkerNode};
use handoff_router::Pool;
use handoff_transport::{
    AcceptPolicy, Frame, Incoming, Liveness, PeerRole, SendError, TcpEndpoint, Transport, FRONTEND,
};
use std::sync::Arc;
use std::thread::JoinHandle;

/// An endpoint shared between a node's thread and the driver (which dials
/// peers from it).
pub(crate) struct Shared(pub Arc<TcpEndpoint>);

impl Transport for Shared {
    fn me(&self) -> WorkerId {
        self.0.me()
    }
    fn generation(&self) -> Generation {
        self.0.generation()
    }
    fn send(&self, to: WorkerId, frame: Frame) -> Result<(), SendError> {
        self.0.send(to, frame)
    }
    fn incoming(&self) -> &crossbeam_channel::Receiver<Incoming> {
        self.0.incoming()
    }
    fn close(&self) {
        self.0.close()
    }
}

/// What the ranks are built from.
pub(crate) struct RankSetup {
    /// Who the engine is.
    pub ids: PodIds,
    /// This incarnation (a restarted engine announces a higher one).
    pub generation: Generation,
    /// Prefill, decode or aggregated.
    pub role: Pool,
    /// The handoff ordering (none when aggregated).
    pub policy: HandoffPolicy,
    /// Lifecycle timers.
    pub handoff: HandoffConfig,
    /// How long this engine's reads take.
    pub transfer: TransferModel,
    /// Each rank's engine.
    pub specs: Vec<EngineSpec>,
    /// Where the side channel binds, and its base port (0: any).
    pub bind_host: String,
    /// See `bind_host`.
    pub base_port: u16,
    /// Pings and the silence limit.
    pub liveness: Liveness,
    /// The clock every rank stamps its events on.
    pub clock: WallClock,
}

/// The running ranks.
pub(crate) struct Ranks {
    /// Each rank's endpoint, by rank.
    pub endpoints: Vec<Arc<TcpEndpoint>>,
    /// The driver's endpoint (the nodes' frontend).
    pub frontend: TcpEndpoint,
    threads: Vec<JoinHandle<HostFinal>>,
}

fn peer_role(p: Pool) -> PeerRole {
    match p {
        Pool::Prefill => PeerRole::Prefill,
        Pool::Decode => PeerRole::Decode,
        Pool::Aggregated => PeerRole::Aggregated,
    }
}

/// Who may connect to a rank of a `role` engine whose ranks are `ranks`:
/// its driver once over loopback, and a decode engine's ranks when it is a
/// prefill engine (vLLM's decode dials the prefill's side channel, SGLang's
/// the prefill's bootstrap server); never one of `ranks`, nor an id already
/// connected.
fn rank_policy(role: Pool, ranks: Vec<WorkerId>) -> AcceptPolicy {
    let inbound = match role {
        Pool::Prefill => vec![PeerRole::Decode],
        Pool::Decode | Pool::Aggregated => Vec::new(),
    };
    AcceptPolicy::engine(ranks, inbound)
}

impl Ranks {
    /// Builds every rank's core, binds its endpoint, starts its node and
    /// connects the driver to it (first, so that no one else is taken for
    /// the driver).
    pub fn start(s: RankSetup) -> Result<Ranks, ServeError> {
        let mut cores = Vec::new();
        for spec in &s.specs {
            cores.push(make_core(spec).map_err(ServeError::Engine)?);
        }
        let mut endpoints = Vec::new();
        for r in 0..cores.len() {
            let port = if s.base_port == 0 {
                0
            } else {
                u16::try_from(usize::from(s.base_port) + r).map_err(|_| ServeError::PortRange {
                    flag: "--side-channel-port".into(),
                    value: s.base_port.to_string(),
                    worker: r,
                })?
            };
            let addr = format!("{}:{port}", s.bind_host);
            let siblings = (0..cores.len()).map(|x| s.ids.scheduler(x)).collect();
            let ep = TcpEndpoint::bind_policy(
                s.ids.scheduler(r),
                s.generation,
                peer_role(s.role),
                s.liveness,
                rank_policy(s.role, siblings),
                addr.as_str(),
            )
            .map_err(|e| ServeError::socket("--side-channel-port", &addr, e))?;
            endpoints.push(Arc::new(ep));
        }
        // The driver dials its ranks and takes no connection itself.
        let frontend = TcpEndpoint::bind_policy(
            FRONTEND,
            s.generation,
            PeerRole::Frontend,
            s.liveness,
            AcceptPolicy::engine(Vec::new(), Vec::new()),
            "127.0.0.1:0",
        )
        .map_err(|e| ServeError::socket("--side-channel-port", "127.0.0.1:0", e))?;
        let mut threads = Vec::new();
        for (r, (core, ep)) in cores.into_iter().zip(&endpoints).enumerate() {
            let cfg = NodeConfig {
                id: s.ids.scheduler(r),
                generation: s.generation,
                policy: s.policy,
                handoff: s.handoff,
                frontend: FRONTEND,
                transfer: s.transfer,
            };
            // The driver's gauges and `/debug/workers` follow the load live.
            // A read completes only if its source says it holds that KV.
            let node = WorkerNode::new(cfg, core, Shared(ep.clone()), s.clock)
                .reporting_load()
                .confirming_sources(s.liveness.silence_limit);
            let t = std::thread::Builder::new()
                .name(format!("rank-{r}"))
                .spawn(move || node.run().1)
                .map_err(|source| ServeError::Spawn {
                    what: "a rank's thread",
                    source,
                })?;
            threads.push(t);
        }
        for ep in &endpoints {
            let local = ("127.0.0.1", ep.local_addr().port());
            frontend
                .connect_peer(local)
                .map_err(|e| ServeError::socket("--side-channel-port", ep.local_addr(), e))?;
        }
        Ok(Ranks {
            endpoints,
            frontend,
            threads,
        })
    }

    /// Rank `r`'s side-channel port.
    pub fn port(&self, r: usize) -> u16 {
        self.endpoints.get(r).map_or(0, |e| e.local_addr().port())
    }

    /// Ends every node (each tears down what it holds, which tells its
    /// peers), then closes the endpoints; returns each rank's final state.
    pub fn stop(self) -> Vec<HostFinal> {
        self.frontend.close();
        let finals = self
            .threads
            .into_iter()
            .filter_map(|t| t.join().ok())
            .collect();
        for ep in &self.endpoints {
            ep.close();
        }
        finals
    }
}
