//! What the engine talks to: the host port, the director, and the
//! engine's own settings.

use crate::fault::{FaultCounts, FaultPlan};
use crate::transfer::TransferModel;
use handoff_core::host::{HostFinal, HostInput, HostOutput, HostStatus, QuietKinds};
use handoff_core::ids::{Generation, HandoffId, RequestId, WorkerId};
use handoff_core::msg::HandoffMsg;
use handoff_core::time::{Duration, Instant};
use handoff_core::worker::{RequestError, WorkerEvent, WorkerRequest};

/// What the engine asks of a host.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum HostOp {
    /// [`handoff_core::WorkerHost::deliver`].
    Deliver {
        /// The input.
        input: HostInput,
        /// Model time.
        now: Instant,
    },
    /// [`handoff_core::WorkerHost::advance`].
    Advance {
        /// Model time.
        now: Instant,
    },
    /// [`handoff_core::WorkerHost::step`].
    Step {
        /// Model time.
        now: Instant,
        /// Passes starting before this may be folded into the step.
        horizon: Instant,
    },
    /// [`handoff_core::WorkerHost::teardown`] (end of run, or a kill).
    Teardown {
        /// Model time.
        now: Instant,
    },
    /// [`handoff_core::WorkerHost::restart`] with a fresh core.
    Restart {
        /// Model time.
        now: Instant,
    },
    /// [`handoff_core::WorkerHost::step_pass`]: a lockstep rank's pass,
    /// its end reported as the status's `step_end` and left to
    /// [`HostOp::EndPass`]. (New variants go last: their index is on the
    /// wire.)
    StepPass {
        /// Model time.
        now: Instant,
    },
    /// [`handoff_core::WorkerHost::end_pass`]: the lockstep group's pass
    /// started at `now` ends at `end`.
    EndPass {
        /// Model time: the group pass's start.
        now: Instant,
        /// The group pass's end: its slowest rank's.
        end: Instant,
    },
}

/// Where the hosts run: in this thread, on threads behind channels, or in
/// other processes. An implementation performs one operation on one host and
/// returns its outputs in order; it does not interpret them.
pub trait HostPort {
    /// Number of hosts; their ids are `0..hosts()`.
    fn hosts(&self) -> u32;

    /// Performs `op` on host `w`, appends the outputs it released to `out`
    /// and returns the host's status afterwards.
    fn call(&mut self, w: WorkerId, op: HostOp, out: &mut Vec<HostOutput>) -> HostStatus;

    /// Takes back an event of host `w` that the engine has consumed, for its
    /// buffers ([`handoff_core::Worker::recycle`]). A port whose hosts are remote
    /// has nothing to give them back to and drops it.
    fn recycle(&mut self, w: WorkerId, event: WorkerEvent) {
        let _ = (w, event);
    }

    /// [`handoff_core::WorkerHost::quiet_until`] of host `w` (`quiet`: which
    /// held outputs count as quiet), as of its last operation. Asked only when a
    /// multi-pass horizon could use it, so it costs nothing at a step that
    /// cannot. A port whose hosts are remote answers `None` (the default):
    /// a round trip would cost more than the passes it saves.
    fn quiet_until(&mut self, w: WorkerId, quiet: QuietKinds) -> Option<Instant> {
        let _ = (w, quiet);
        None
    }

    /// Every host's final state, in id order.
    fn finals(&mut self) -> Vec<HostFinal>;
}

/// A request the director wants delivered to a worker after `delay`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The worker.
    pub to: WorkerId,
    /// The work.
    pub request: WorkerRequest,
    /// How long after now it arrives.
    pub delay: Duration,
}

/// Why a request reached no worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Undeliverable {
    /// The worker it was routed to is down (killed, not yet restarted).
    WorkerDown,
    /// The worker it was routed to died while it was on its way and is back
    /// as a new incarnation: the request was lost with the old one's
    /// connection, as a fact in flight is.
    WorkerRestarted,
}

/// The frontend side of a run: what arrives, where it goes, and what is
/// recorded. The engine calls it at the model time of each happening.
pub trait Director {
    /// When the next request arrives, if one does.
    fn next_arrival(&mut self) -> Option<Instant>;

    /// Takes the arrival due at `now` and routes it.
    fn arrive(&mut self, now: Instant, out: &mut Vec<Route>);

    /// A worker event, at the model time it happened. Transfer requests
    /// (`StartTransfer`) come here too; the engine times them.
    fn on_event(&mut self, w: WorkerId, e: &WorkerEvent, now: Instant, out: &mut Vec<Route>);

    /// A fact left worker `from` for `to` (before the fault plan decides
    /// its fate). For observers and checkers; routing never depends on it.
    fn on_transmit(&mut self, _from: WorkerId, _to: WorkerId, _msg: &HandoffMsg, _now: Instant) {}

    /// A worker refused a request.
    fn on_refused(&mut self, _w: WorkerId, _e: RequestError, _now: Instant) {}

    /// A request could not be handed to its worker; the director may route
    /// it (or another attempt of it) elsewhere.
    fn on_undeliverable(
        &mut self,
        _w: WorkerId,
        _request: &WorkerRequest,
        _why: Undeliverable,
        _now: Instant,
        _out: &mut Vec<Route>,
    ) {
    }

    /// A transfer the engine timed finished (`ok`) or failed.
    fn on_transfer_done(&mut self, _id: HandoffId, _ok: bool, _now: Instant) {}

    /// Worker `w` has just died (a kill): route nothing more to it. Called
    /// before what it had done by then (the outputs of a step that ended at
    /// this instant) and its torn-down roles are reported, so that what the
    /// director routes in answer avoids it.
    fn on_worker_down(&mut self, _w: WorkerId, _now: Instant) {}

    /// Worker `w` is down (a kill) and its roles' ends were reported: what
    /// it still held is lost.
    fn on_worker_lost(&mut self, _w: WorkerId, _now: Instant, _out: &mut Vec<Route>) {}

    /// Worker `w` is back as `generation`.
    fn on_worker_back(
        &mut self,
        _w: WorkerId,
        _generation: Generation,
        _now: Instant,
        _out: &mut Vec<Route>,
    ) {
    }

    /// The attempts of `request` to cancel, and where they live.
    fn cancel(&mut self, _request: RequestId, _now: Instant) -> Vec<(WorkerId, HandoffId)> {
        Vec::new()
    }

    /// The run ended at `end`: hosts' final states, roles still alive that
    /// the engine tore down, and the faults injected.
    fn finish(&mut self, end: Instant, finals: &[HostFinal], torn_down: u64, faults: FaultCounts);

    /// Just before [`Director::finish`] of an elastic run: what the fleet's
    /// scaling did (counts over time, time per phase, scale events).
    fn on_fleet(&mut self, _summary: &crate::scale::FleetSummary) {}

    /// A scale event happened, before the engine acts on it: a `Removed`
    /// worker's handoffs unwind right after this call, a `Drain`ing
    /// worker's held KV counts as stranded from now (the report's scaling
    /// costs).
    fn on_scale(&mut self, _record: &crate::scale::ScaleRecord) {}

    /// Which of worker `w`'s events this director takes in whatever order
    /// they come among other workers' events, without routing on them:
    /// those a run of passes on another host may overtake (module docs).
    /// [`QuietEvents::None`], the default, lets no run overtake anything.
    fn quiet_events(&self, _w: WorkerId) -> QuietEvents {
        QuietEvents::None
    }
}

/// [`Director::quiet_events`]: the events of a worker that commute with any
/// other worker's, for this director.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuietEvents {
    /// None do.
    None,
    /// A pass's shape and tokens (`Step`, `Tokens`).
    Pass,
    /// Those and KV events (`Kv`): nothing keeps the KV event stream's
    /// order across workers, and routing reads it only at events.
    PassAndKv,
    /// A pass's shape and tokens but a request's first token (an
    /// aggregated worker's: its first token ends the request's prefill
    /// load in the router).
    LaterTokens,
    /// Those and KV events.
    LaterTokensAndKv,
}

impl QuietEvents {
    /// The held outputs [`HostPort::quiet_until`] may take as quiet, or
    /// `None` when no run may overtake this worker.
    pub fn kinds(self) -> Option<QuietKinds> {
        let (kv, first_tokens) = match self {
            QuietEvents::None => return None,
            QuietEvents::Pass => (false, true),
            QuietEvents::PassAndKv => (true, true),
            QuietEvents::LaterTokens => (false, false),
            QuietEvents::LaterTokensAndKv => (true, false),
        };
        Some(QuietKinds { kv, first_tokens })
    }
}

/// The engine's own settings (the director and hosts carry the rest).
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// One-way latency of a fact between workers.
    pub message_latency: Duration,
    /// How long transfers take.
    pub transfer: TransferModel,
    /// How a handoff fans out between pools of different TPs (uniform:
    /// one TP everywhere, as before).
    pub transfer_fan: crate::RankFan,
    /// Fold the passes that end by the next event into one step, for the
    /// last host stepping at an instant (off: one pass per step).
    pub multi_step: bool,
    /// Faults to inject.
    pub faults: FaultPlan,
    /// How late peers hear of a killed worker (default: at once).
    pub peer_loss: crate::fault::PeerLossDetection,
    /// The hosts' data-parallel layout: with
    /// [`handoff_core::DpCoupling::Lockstep`] the ranks of a worker step
    /// together (`hosts.rs`); otherwise only names depend on it.
    pub dp: handoff_core::DpLayout,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            message_latency: Duration::from_micros(500),
            transfer: TransferModel::default(),
            transfer_fan: crate::RankFan::UNIFORM,
            multi_step: true,
            faults: FaultPlan::none(),
            peer_loss: crate::fault::PeerLossDetection::default(),
            dp: handoff_core::DpLayout::SINGLE,
        }
    }
}
