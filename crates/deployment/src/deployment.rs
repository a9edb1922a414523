//! The deployment a run serves, as every driver builds it: which workers
//! exist and in which pool ([`deployment`]), the policy they run, and the
//! frontend's and the engine's configurations, all from one
//! [`DeploymentConfig`].

use crate::engines::EngineSpec;
use handoff_core::{Backend, DpLayout, Duration, HandoffConfig, HandoffPolicy, WorkerId};
use handoff_engine::fault::{FaultPlan, Heartbeat, PeerLossDetection};
use handoff_engine::{EngineConfig, FanIssuer, RankFan, TransferModel};
use handoff_router::{FrontendConfig, KvKnobs, Pool, RouterMode};

/// The deployment every driver runs: its workers and pools, the handoff
/// policy, routing, transfers, timers and faults, and the engines' specs.
/// Everything a run needs besides the workload and the cores.
#[derive(Clone, Debug)]
pub struct DeploymentConfig {
    /// The engine imitated (for the report).
    pub backend: Backend,
    /// The handoff ordering.
    pub policy: HandoffPolicy,
    /// Prefill workers (aggregated workers when `decode_workers == 0`).
    pub prefill_workers: u32,
    /// Decode workers; 0 runs aggregated (no disaggregation).
    pub decode_workers: u32,
    /// Attention data-parallel ranks per worker (`--dp-size`): each rank is
    /// its own scheduler, core and host, with the whole engine spec's KV
    /// pool, so [`deployment`] lists `workers × dp_size` schedulers.
    pub dp: DpLayout,
    /// How both routers choose: a built-in mode, or a downstream
    /// [`handoff_router::RoutingPolicy`] as [`RouterMode::Custom`] (see
    /// [`handoff_router::CustomPolicy`]). It reaches the frontend through
    /// [`frontend_config`], so replay, virtual-clock live, wall-clock live
    /// and serve all route with it; the report names it by
    /// [`RouterMode::name`].
    pub router: RouterMode,
    /// The `kv` mode's knobs (Dynamo's names and defaults).
    pub router_kv: KvKnobs,
    /// KV block size the routers hash requests with.
    pub block_size: u32,
    /// Transfer timing.
    pub transfer: TransferModel,
    /// One-way latency of a control message between workers (and the
    /// frontend hop that routes decode after a source-first prefill).
    pub message_latency: Duration,
    /// Lifecycle timers. The default is `HandoffConfig::for_backend` of the
    /// default backend (vLLM: reservations never expire); set it with the
    /// backend.
    pub handoff: HandoffConfig,
    /// Seed for the routers.
    pub seed: u64,
    /// Advance stable decode passes as one event (off: one pass per event).
    pub multi_step: bool,
    /// Record the lifecycle transcript (parity tests).
    pub transcript: bool,
    /// Faults to inject (kills, restarts, partitions, lossy facts, failed
    /// transfers, client cancels).
    pub faults: FaultPlan,
    /// SGLang's decode→prefill heartbeat (`None`: SGLang's defaults, 5 s
    /// and 2 failures, on an SGLang deployment); see [`peer_loss`].
    pub heartbeat: Option<Heartbeat>,
    /// The workers' engines, by worker id, for the report's configuration
    /// only (the cores come from the caller's factory; empty: not
    /// reported).
    pub engines: Vec<EngineSpec>,
    /// What the report judges and sizes the run by (`--slo`, GPUs per
    /// rank, `--gpu-hour-usd`), for the report only; `None`: the report
    /// carries no SLO, goodput, GPU or cost figure.
    pub sizing: Option<crate::ReportSizing>,
}

impl Default for DeploymentConfig {
    fn default() -> Self {
        DeploymentConfig {
            backend: Backend::Vllm,
            policy: HandoffPolicy::SourceFirst,
            prefill_workers: 2,
            decode_workers: 2,
            dp: DpLayout::SINGLE,
            router: RouterMode::KvAware,
            router_kv: KvKnobs::default(),
            block_size: 16,
            transfer: TransferModel::default(),
            message_latency: Duration::from_micros(500),
            handoff: HandoffConfig::for_backend(Backend::Vllm),
            seed: 0,
            multi_step: true,
            transcript: false,
            faults: FaultPlan::none(),
            heartbeat: None,
            engines: Vec::new(),
            sizing: None,
        }
    }
}

impl DeploymentConfig {
    /// Sets how each worker's data-parallel ranks step
    /// ([`handoff_core::DpCoupling`]); `Lockstep` is what
    /// `--enable-expert-parallel` implies for an MoE engine. It reaches
    /// the engine through [`engine_config`]; with one rank it changes
    /// nothing.
    pub fn set_dp_coupling(&mut self, coupling: handoff_core::DpCoupling) {
        self.dp = self.dp.with_coupling(coupling);
    }
}

/// Session-affine serving with closed-loop session arrivals (seed 002), as
/// replay and virtual-clock live both run it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionServing {
    /// The frontend's session routing; `None` routes turns like any
    /// request (naive PD on a session trace).
    pub routing: Option<handoff_router::SessionRouting>,
    /// From a session's last turn ending to the client closing it.
    pub close_delay: Duration,
    /// Force a capacity eviction of a session's slot after its turn of
    /// this index (the seed's §8 smoke test); `None` in normal runs.
    pub evict_after_turn: Option<u32>,
    /// Fixed latencies of the session frontend (zero: none).
    pub overheads: SessionOverheads,
}

/// Fixed latencies the seed's session frontend adds to a turn before any
/// worker sees it (seed 002 §3.2, its timeline and its "收益对照" table),
/// applied as the delay of the turn's routes. They occupy no worker: a
/// turn waiting out an overhead holds no KV and no batch slot. Turns routed
/// without session routing (the seed's E1, naive PD) pay none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionOverheads {
    /// A direct-to-D append: from the turn's arrival to its request
    /// reaching the decode worker holding the session (§3.2: the router is
    /// entered at t = 10 ms).
    pub direct_route: Duration,
    /// A seed or reseed: "P open session" (§3.2 table, ~50 ms: routing,
    /// the snapshot probe, opening the streaming sessions on D' and P and
    /// forwarding, t = 0..50 ms of the timeline).
    pub open_session: Duration,
    /// A seed or reseed: "D' decode start" (§3.2 table, ~50 ms: rebuilding
    /// the session on D' after the P→D' transfer). The engine has no hook
    /// between a destination's activation and its first decode pass, so it
    /// is paid with `open_session`, before the roles are routed: the first
    /// token comes as late, but D' holds its reservation this much less.
    pub decode_start: Duration,
}

impl SessionOverheads {
    /// The seed's values: 10 ms direct route, 50 ms P open session, 50 ms
    /// D' decode start.
    pub const SEED: SessionOverheads = SessionOverheads {
        direct_route: Duration::from_millis(10),
        open_session: Duration::from_millis(50),
        decode_start: Duration::from_millis(50),
    };

    /// The delay before a turn routed as `route` reaches its workers.
    pub fn delay(&self, route: handoff_router::SessionRoute) -> Duration {
        match route {
            handoff_router::SessionRoute::Direct => self.direct_route,
            _ => self.open_session + self.decode_start,
        }
    }
}

/// The schedulers of a deployment, prefill (or aggregated) workers first:
/// worker `i`'s ranks are ids `i·dp_size..(i+1)·dp_size` (see
/// [`DpLayout`]), so with one rank the ids are the workers' `0..n`. Each
/// is routed to as its own target, as Dynamo's router treats every
/// `WorkerWithDpRank`.
pub fn deployment(cfg: &DeploymentConfig) -> Vec<(WorkerId, Pool)> {
    let aggregated = cfg.decode_workers == 0;
    let prefill = cfg.prefill_workers.max(1);
    (0..prefill + cfg.decode_workers)
        .flat_map(|i| {
            let pool = if aggregated {
                Pool::Aggregated
            } else if i < prefill {
                Pool::Prefill
            } else {
                Pool::Decode
            };
            cfg.dp.schedulers(WorkerId(i)).map(move |s| (s, pool))
        })
        .collect()
}

/// The handoff policy the workers run (none when aggregated).
pub fn worker_policy(cfg: &DeploymentConfig) -> HandoffPolicy {
    if cfg.decode_workers == 0 {
        HandoffPolicy::Disabled
    } else {
        cfg.policy
    }
}

/// The frontend's configuration for `cfg`.
pub fn frontend_config(cfg: &DeploymentConfig) -> FrontendConfig {
    FrontendConfig {
        policy: cfg.policy,
        aggregated: cfg.decode_workers == 0,
        mode: cfg.router,
        block_size: cfg.block_size,
        seed: cfg.seed,
        kv: cfg.router_kv,
        hop: cfg.message_latency,
        disabled_delay: cfg.transfer.base(),
    }
}

/// How a handoff of `cfg` fans out over ranks: the TPs of its first
/// prefill and first decode engine ([`DeploymentConfig::engines`]; uniform
/// without them, aggregated, or with handoffs disabled), posted by the
/// decode ranks under vLLM's pull (source-first) and by the prefill ranks
/// when they write (destination-first, push). See
/// [`handoff_engine::rank_fan`].
pub fn rank_fan(cfg: &DeploymentConfig) -> RankFan {
    let issuer = match worker_policy(cfg) {
        HandoffPolicy::Disabled => return RankFan::UNIFORM,
        HandoffPolicy::SourceFirst => FanIssuer::Decode,
        HandoffPolicy::DestinationFirst | HandoffPolicy::Push => FanIssuer::Prefill,
    };
    let tp_of = |want: Pool| {
        deployment(cfg)
            .iter()
            .zip(&cfg.engines)
            .find(|((_, p), _)| *p == want)
            .map(|(_, s)| s.tp)
    };
    match (tp_of(Pool::Prefill), tp_of(Pool::Decode)) {
        (Some(p), Some(d)) if p != d => RankFan::new(p, d, issuer),
        _ => RankFan::UNIFORM,
    }
}

/// The engine's configuration for `cfg`.
pub fn engine_config(cfg: &DeploymentConfig) -> EngineConfig {
    EngineConfig {
        message_latency: cfg.message_latency,
        transfer: cfg.transfer,
        transfer_fan: rank_fan(cfg),
        multi_step: cfg.multi_step,
        faults: cfg.faults.clone(),
        peer_loss: peer_loss(cfg),
        dp: cfg.dp,
    }
}

/// How the workers of `cfg` learn that a peer died. An SGLang deployment
/// with prefill and decode pools: its decode workers heartbeat the prefill
/// workers (`cfg.heartbeat`, else [`Heartbeat::SGLANG`]) and hear of a
/// death `interval × max_failures` after it; everyone else at once.
pub fn peer_loss(cfg: &DeploymentConfig) -> PeerLossDetection {
    if cfg.backend != Backend::Sglang || cfg.decode_workers == 0 {
        return PeerLossDetection::default();
    }
    PeerLossDetection {
        heartbeat: Some(cfg.heartbeat.unwrap_or(Heartbeat::SGLANG)),
        watchers: deployment(cfg)
            .into_iter()
            .filter(|(_, p)| *p == Pool::Decode)
            .map(|(w, _)| w)
            .collect(),
    }
}
