//! One worker: a scheduler core plus the source and destination roles of the
//! handoffs it takes part in. Replay and live both drive this type, which is
//! why their transcripts agree by construction.
//!
//! Inputs are `handle_*` calls and [`Worker::step`], each with `now`; outputs
//! are polled: [`Worker::poll_transmit`] (facts for peers),
//! [`Worker::poll_timeout`] (the next deadline) and [`Worker::poll_event`]
//! (tokens, lifecycle transitions, KV events, transfer requests). Only the
//! worker executes role actions against its core, and only it turns core
//! outcomes back into role events.
//!
//! Files: `events` (the public requests, events and stats), `requests`
//! (frontend work and new roles), `messages` (facts from peers, early facts,
//! tombstones), `source` and `destination` (each side's roles and actions),
//! `reservations` (the reservation queue), `peers` (cancellation, lost and
//! restarted peers, teardown), `step` (timers and core steps); this file
//! holds the worker's state and the bookkeeping they share.

use crate::destination::DestinationHandoff;
use crate::fasthash::{ChurnMap, FastMap};
use crate::ids::{Generation, HandoffId, RequestId, WorkerId};
use crate::kv::{KvCapacitySnapshot, KvEvent, KvEventData};
use crate::msg::{FactKind, HandoffMsg, MsgBody, Role};
use crate::policy::{Capabilities, HandoffConfig, HandoffPolicy};
use crate::request::Request;
use crate::scheduler::{SchedulerCore, StepOutput, TokenEmission};
use crate::source::SourceHandoff;
use crate::spares::keep_spare;
use crate::time::{Duration, Instant};
use crate::timer_queue::TimerQueue;
use crate::transition::{CancelReason, LifecycleEvent, RoleState, TransitionError, Verdict};
use std::collections::{BTreeMap, VecDeque};

mod destination;
mod events;
mod messages;
mod peers;
mod requests;
mod reservations;
mod source;
mod step;

pub use events::{
    DropReason, RequestError, Transition, Transmit, WorkerEvent, WorkerRequest, WorkerStats,
};

/// `ids` in id order (the order role walks always had).
fn sorted(mut ids: Vec<HandoffId>) -> Vec<HandoffId> {
    ids.sort_unstable();
    ids
}

/// The reversed handoff a source or destination entry serves, if any.
#[derive(Clone, Copy, Debug)]
struct PushRole {
    session: crate::ids::SessionId,
    /// The slot lock (source) or tokens to receive (destination).
    lock: crate::ids::SourceLeaseId,
    tokens: u64,
    /// Why the source role is ending early, for the core's push record.
    failure: Option<crate::session::PushFailure>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum TimerKind {
    Lease,
    Reservation,
    EarlyFacts,
    Renewal,
    Heartbeat,
    Deferred,
}

/// What a tombstone remembers of the role that ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    /// Its peer was told of the end (or ended it, or the role was a
    /// destination, whose source it always knows).
    Announced,
    /// A destination-first source ended for this reason before any fact
    /// from its destination named the destination: no abort could be sent.
    /// The destination's late `DestinationReserved` is answered with one,
    /// or it would hold its reservation waiting for a `SourceReady` that
    /// never comes.
    Unannounced(CancelReason),
}

#[derive(Debug)]
struct SourceEntry {
    role: SourceHandoff,
    request_id: RequestId,
    request: Option<Request>,
    peer: Option<WorkerId>,
    push: Option<PushRole>,
}

#[derive(Debug)]
struct DestEntry {
    role: DestinationHandoff,
    request_id: RequestId,
    request: Option<Request>,
    /// The core answered `Queued`: the attempt waits in the core's own
    /// scheduling queue (vLLM), which grants it in a step.
    in_core: bool,
    push: Option<PushRole>,
}

#[derive(Debug)]
struct EarlyFact {
    from: WorkerId,
    msg: HandoffMsg,
}

/// Spare event buffers a worker keeps: a step's events are consumed before
/// the next step, so one per kind is in use at a time; a couple more cover a
/// consumer that recycles late.
const SPARE_BUFFERS: usize = 4;

/// A worker; see the module docs.
#[derive(Debug)]
pub struct Worker<S: SchedulerCore> {
    id: WorkerId,
    generation: Generation,
    policy: HandoffPolicy,
    config: HandoffConfig,
    caps: Capabilities,
    core: S,
    // Hash maps: every fact, transfer and timer looks its role up. Where
    // roles are walked (teardown, a lost peer, a closed session) the ids
    // are sorted first, so the walk keeps the id order it always had.
    sources: FastMap<HandoffId, SourceEntry>,
    dests: FastMap<HandoffId, DestEntry>,
    active_dest: FastMap<RequestId, HandoffId>,
    reserve_queue: VecDeque<HandoffId>,
    /// Armed timers, lazily cancelled; one lane per kind (each kind's TTL is
    /// fixed, so its deadlines arrive in order).
    timers: TimerQueue<(Instant, HandoffId, TimerKind), 6>,
    tombstones: VecDeque<HandoffId>,
    /// The ids of `tombstones`, for lookups only (never walked). FIFO
    /// churn, hence a [`ChurnMap`], with the integer hasher: every fact
    /// checks it.
    tombstone_set: ChurnMap<HandoffId, Ended>,
    early: BTreeMap<HandoffId, (Instant, Vec<EarlyFact>)>,
    /// Push ([`HandoffPolicy::Push`]): facts for a source whose pin is
    /// still inside the running step, held until that step ends
    /// ([`crate::SourceHandoff::pinned_at`]). The role moved at the step's
    /// start while the step's outputs wait for its end, and the prefill
    /// engine cannot write KV its step has not finished computing.
    deferred: BTreeMap<HandoffId, Vec<EarlyFact>>,
    /// The generation heard of each peer that is past its first
    /// ([`Generation::FIRST`]), and of this worker itself if it sent itself a
    /// fact: a peer never heard of is at its first, so the table holds only
    /// restarted peers and an idle worker holds nothing per peer (lookups
    /// only: one per fact). See [`Worker::peer_generation`].
    peers: FastMap<WorkerId, Generation>,
    transmits: VecDeque<Transmit>,
    events: VecDeque<WorkerEvent>,
    /// The core's step buffers, boxed so that lending them out for a step
    /// moves a pointer, not the whole struct twice (it was most of the
    /// memory copying in a replay).
    step_out: Option<Box<StepOutput>>,
    /// The start of a pass the core has run whose outcome `step_out` holds
    /// until [`Worker::end_pass`] says when it ends (a lockstep group's
    /// pass, whose end depends on the other ranks'); `None` otherwise.
    pass_start: Option<Instant>,
    /// Emptied event buffers handed back by the consumer of
    /// [`WorkerEvent::Step`] and [`WorkerEvent::Tokens`]
    /// ([`Worker::recycle`]): a step's event takes the core's filled buffer
    /// and leaves one of these in its place, so a step costs no allocation
    /// once the consumer recycles.
    spare_passes: Vec<Vec<Duration>>,
    spare_emissions: Vec<Vec<TokenEmission>>,
    kv_buf: Vec<KvEvent>,
    session_buf: Vec<crate::session::SessionEvent>,
    reused_buf: Vec<HandoffId>,
    stats: WorkerStats,
}

impl<S: SchedulerCore> Worker<S> {
    /// A worker `id` of incarnation `generation` using `policy` for its
    /// handoffs.
    pub fn new(
        id: WorkerId,
        generation: Generation,
        policy: HandoffPolicy,
        config: HandoffConfig,
        core: S,
    ) -> Self {
        let caps = core.capabilities();
        Worker {
            id,
            generation,
            policy,
            config,
            caps,
            core,
            sources: FastMap::default(),
            dests: FastMap::default(),
            active_dest: FastMap::default(),
            reserve_queue: VecDeque::new(),
            timers: TimerQueue::default(),
            tombstones: VecDeque::new(),
            tombstone_set: ChurnMap::default(),
            early: BTreeMap::new(),
            deferred: BTreeMap::new(),
            peers: FastMap::default(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            step_out: Some(Box::default()),
            pass_start: None,
            spare_passes: Vec::new(),
            spare_emissions: Vec::new(),
            kv_buf: Vec::new(),
            session_buf: Vec::new(),
            reused_buf: Vec::new(),
            stats: WorkerStats::default(),
        }
    }

    /// This worker's id.
    pub fn id(&self) -> WorkerId {
        self.id
    }

    /// This worker's incarnation.
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// The handoff policy its roles follow.
    pub fn policy(&self) -> HandoffPolicy {
        self.policy
    }

    /// The core's capabilities.
    pub fn capabilities(&self) -> Capabilities {
        self.caps
    }

    /// The scheduler core (read-only; physical state changes only through
    /// the lifecycle).
    pub fn core(&self) -> &S {
        &self.core
    }

    /// Physical occupancy now.
    pub fn capacity(&self) -> KvCapacitySnapshot {
        self.core.capacity()
    }

    /// Counters.
    pub fn stats(&self) -> WorkerStats {
        self.stats
    }

    /// Live roles on this worker.
    pub fn live_handoffs(&self) -> usize {
        self.sources.len() + self.dests.len()
    }

    /// Whether attempt `id` has a live source role here (from its request
    /// until the role ends). Read-only: a driver may answer a peer asking
    /// whether the KV it is about to read is held here.
    pub fn holds_source(&self, id: HandoffId) -> bool {
        self.sources.contains_key(&id)
    }

    /// No runnable work in the core (retained ownership may remain).
    pub fn is_empty(&self) -> bool {
        self.core.is_empty()
    }

    /// Nothing runnable, nothing retained, no live role, nothing queued.
    pub fn is_drained(&self) -> bool {
        self.core.is_drained()
            && self.sources.is_empty()
            && self.dests.is_empty()
            && self.reserve_queue.is_empty()
    }

    /// The next fact for a peer.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<WorkerEvent> {
        self.events.pop_front()
    }

    /// Takes back a consumed event's buffers for a later step's event, a
    /// KV event's hashes for the core's next KV events
    /// ([`SchedulerCore::recycle_kv_hashes`]) (optional: a consumer that
    /// drops its events only costs each step, and each KV event, an
    /// allocation). Keeps a few; anything else is dropped.
    pub fn recycle(&mut self, event: WorkerEvent) {
        match event {
            WorkerEvent::Step { passes, .. } => {
                keep_spare(passes, &mut self.spare_passes, SPARE_BUFFERS)
            }
            WorkerEvent::Tokens { emissions } => {
                keep_spare(emissions, &mut self.spare_emissions, SPARE_BUFFERS);
            }
            WorkerEvent::Kv { event, .. } => match event.data {
                KvEventData::Stored { block_hashes, .. }
                | KvEventData::Removed { block_hashes } => {
                    self.core.recycle_kv_hashes(block_hashes)
                }
                KvEventData::Cleared => {}
            },
            _ => {}
        }
    }

    fn flush_kv(&mut self, now: Instant) {
        self.core.drain_kv_events(&mut self.kv_buf);
        for event in self.kv_buf.drain(..) {
            self.events.push_back(WorkerEvent::Kv { event, at: now });
        }
        self.core.drain_session_events(&mut self.session_buf);
        for event in self.session_buf.drain(..) {
            self.events
                .push_back(WorkerEvent::Session { event, at: now });
        }
        self.core.drain_reused(&mut self.reused_buf);
        for id in self.reused_buf.drain(..) {
            self.events
                .push_back(WorkerEvent::SourceKvReused { id, at: now });
        }
    }

    fn send(&mut self, to: WorkerId, id: HandoffId, body: MsgBody, now: Instant) {
        let msg = HandoffMsg {
            id,
            generation: self.generation,
            body,
        };
        self.transmits.push_back(Transmit { to, msg, at: now });
    }

    fn arm(&mut self, deadline: Instant, id: HandoffId, kind: TimerKind) {
        self.timers.push(kind as usize, (deadline, id, kind));
    }

    /// Books a role's answer to a fact: counts it, records the transition,
    /// and hands back `(from, to, actions)` when the fact was applied.
    #[allow(clippy::too_many_arguments)]
    fn book<St: Copy, A: Copy>(
        &mut self,
        id: HandoffId,
        request: RequestId,
        role: Role,
        event: LifecycleEvent,
        verdict: Result<Verdict<St, A>, TransitionError>,
        state: fn(St) -> RoleState,
        origin: Option<(WorkerId, FactKind)>,
        now: Instant,
    ) -> Option<(St, St, crate::transition::ActionList<A>)> {
        let (from, to, actions, delta) = match verdict {
            Err(e) => {
                self.reject(e, origin, id, now);
                return None;
            }
            Ok(Verdict::Duplicate) => {
                self.stats.duplicates += 1;
                return None;
            }
            Ok(Verdict::Applied {
                from,
                to,
                actions,
                delta,
            }) => (from, to, actions, delta),
        };
        self.stats.applied += 1;
        self.events.push_back(WorkerEvent::Transition(Transition {
            id,
            request,
            worker: self.id,
            role,
            event,
            from: state(from),
            to: state(to),
            delta,
            at: now,
        }));
        Some((from, to, actions))
    }
}
