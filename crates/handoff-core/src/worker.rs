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

use crate::destination::{
    DestinationAction, DestinationEvent, DestinationHandoff, DestinationState, SourceReady,
};
use crate::fasthash::{ChurnMap, FastMap};
use crate::ids::{Generation, HandoffId, RequestId, WorkerId};
use crate::kv::{KvCapacitySnapshot, KvEvent, KvEventData};
use crate::msg::{FactKind, HandoffMsg, MsgBody, Role};
use crate::policy::{Capabilities, HandoffConfig, HandoffPolicy};
use crate::request::Request;
use crate::scheduler::{
    CommandOutcome, SchedulerCommand, SchedulerCore, StepOutput, TokenEmission,
};
use crate::source::{SourceAction, SourceEvent, SourceHandoff, SourceLease, SourceState};
use crate::spares::{keep_spare, take_filled};
use crate::time::{Duration, Instant};
use crate::timer_queue::TimerQueue;
use crate::transition::{
    CancelReason, LifecycleEvent, OwnershipDelta, RoleState, TransitionError, Verdict,
};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;

/// `ids` in id order (the order role walks always had).
fn sorted(mut ids: Vec<HandoffId>) -> Vec<HandoffId> {
    ids.sort_unstable();
    ids
}

/// Work handed to a worker by the frontend.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum WorkerRequest {
    /// Prefill and decode here, no handoff.
    Ordinary(Request),
    /// Be the source of handoff `id`.
    HandoffSource {
        /// The attempt.
        id: HandoffId,
        /// The request.
        request: Request,
    },
    /// Be the destination of handoff `id`, reading from `source`.
    HandoffDestination {
        /// The attempt.
        id: HandoffId,
        /// The request.
        request: Request,
        /// The prefill worker.
        source: WorkerId,
        /// The source's announcement when routing happens after the prefill
        /// pinned (source-first).
        ready: Option<SourceReady>,
    },
    /// The client closed a session: free what this worker holds of it
    /// (aborting a push of it in flight).
    CloseSession(crate::ids::SessionId),
    /// Evict a session's slot as a capacity eviction would (the seed's §8
    /// smoke test forces one after a given turn).
    EvictSession(crate::ids::SessionId),
    /// Be the source of D→P snapshot push `id` (a handoff with the roles
    /// reversed: this decode worker sends, its pin is the session slot's
    /// lock `lock`, taken by the core when the turn committed).
    PushSource {
        /// The push attempt.
        id: HandoffId,
        /// The id its transitions carry (a push serves no client request).
        request: RequestId,
        /// The session.
        session: crate::ids::SessionId,
        /// The slot lock.
        lock: crate::ids::SourceLeaseId,
        /// Tokens to push.
        tokens: u64,
    },
    /// Be the destination of D→P snapshot push `id`: reserve room in this
    /// prefill worker's snapshot store, receive, ingest.
    PushDestination {
        /// The push attempt.
        id: HandoffId,
        /// The id its transitions carry.
        request: RequestId,
        /// The session.
        session: crate::ids::SessionId,
        /// Tokens to receive.
        tokens: u64,
        /// The decode worker sending.
        source: WorkerId,
    },
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

/// How an early end of a push's source maps to the seed's §6 reasons.
fn push_failure(ev: &SourceEvent) -> Option<crate::session::PushFailure> {
    use crate::session::PushFailure as F;
    match ev {
        SourceEvent::Cancelled { reason } => Some(match reason {
            CancelReason::TransferFailed => F::Transfer,
            CancelReason::LeaseExpired | CancelReason::ReservationExpired => F::Expired,
            CancelReason::PeerLost | CancelReason::PeerRestarted | CancelReason::Teardown => {
                F::PeerLost
            }
            _ => F::Refused,
        }),
        SourceEvent::LeaseExpired => Some(F::Expired),
        _ => None,
    }
}

/// A request the worker refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum RequestError {
    /// A role for this attempt already exists here or ended here.
    DuplicateHandoff(HandoffId),
    /// Handoff requests need a handoff policy.
    HandoffDisabled(HandoffId),
    /// The core refused the submission.
    Refused(RequestId),
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::DuplicateHandoff(id) => {
                write!(f, "handoff {id} already known to this worker")
            }
            RequestError::HandoffDisabled(id) => {
                write!(f, "handoff {id} sent to a worker whose policy is disabled")
            }
            RequestError::Refused(r) => write!(f, "scheduler refused request {r}"),
        }
    }
}

impl std::error::Error for RequestError {}

/// A fact for a peer, stamped with when it left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Transmit {
    /// The peer.
    pub to: WorkerId,
    /// The fact.
    pub msg: HandoffMsg,
    /// When it was sent.
    pub at: Instant,
}

/// One role transition, the unit of the lifecycle transcript.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Transition {
    /// The attempt.
    pub id: HandoffId,
    /// The request.
    pub request: RequestId,
    /// The worker the role lives on.
    pub worker: WorkerId,
    /// Which role.
    pub role: Role,
    /// The kind of fact that caused it.
    pub event: LifecycleEvent,
    /// State before (of `role`).
    pub from: RoleState,
    /// State after (of `role`; may equal `from`).
    pub to: RoleState,
    /// Ownership moved on this worker.
    pub delta: OwnershipDelta,
    /// When.
    pub at: Instant,
}

/// Why an incoming fact was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum DropReason {
    /// It came from an older incarnation of the peer.
    OldGeneration,
    /// The role refused it.
    Rejected(TransitionError),
    /// Its attempt is unknown and did not show up in time.
    Unknown,
    /// It came from a worker that is not this attempt's peer.
    WrongPeer,
}

/// What a worker reports. Times are when the thing happened in the model
/// (a step's outputs happen at the step's end).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum WorkerEvent {
    /// A role moved.
    Transition(Transition),
    /// A step ran from `start`: `steps` passes, the first lasting `first_step`,
    /// the last `last_step`, in between linear. Token events that follow
    /// belong to it.
    Step {
        /// Start of the first pass.
        start: Instant,
        /// Passes covered.
        steps: u64,
        /// Total time.
        duration: Duration,
        /// First pass.
        first_step: Duration,
        /// Last pass.
        last_step: Duration,
        /// Every pass's time when there were several (empty for one):
        /// [`StepOutput::passes`].
        #[cfg_attr(
            feature = "serde",
            serde(deserialize_with = "crate::serde_vec::deserialize")
        )]
        passes: Vec<Duration>,
        /// Prefill tokens computed.
        prefill_tokens: u64,
    },
    /// Output tokens of the step just reported: one entry per request that
    /// emitted any, in the core's batch order. One event per step, not per
    /// request, so a decode pass costs its consumers one event whatever the
    /// batch size.
    Tokens {
        /// Each request's tokens (one per pass it took part in).
        #[cfg_attr(
            feature = "serde",
            serde(deserialize_with = "crate::serde_vec::deserialize")
        )]
        emissions: Vec<TokenEmission>,
    },
    /// A request finished decoding and freed its KV.
    RequestFinished {
        /// The request.
        request: RequestId,
        /// When.
        at: Instant,
    },
    /// A request lost its KV and will recompute (vLLM) / was retracted (SGLang).
    Preempted {
        /// The request.
        request: RequestId,
        /// When.
        at: Instant,
    },
    /// A handoff prefill completed and pinned: prefill compute load may drop
    /// (the router's `active_prefill_tokens`), ownership stays.
    PrefillPinned {
        /// The attempt.
        id: HandoffId,
        /// The request.
        request: RequestId,
        /// Blocks held.
        blocks: u64,
        /// Tokens held.
        tokens: u64,
        /// When.
        at: Instant,
    },
    /// Move KV for `id`; the driver calls `handle_transfer_done` on *this*
    /// worker when it is finished.
    StartTransfer {
        /// The attempt.
        id: HandoffId,
        /// The request.
        request: RequestId,
        /// Prefill worker.
        source: WorkerId,
        /// Decode worker.
        destination: WorkerId,
        /// Tokens whose KV moves (destination-prefix reuse and page alignment
        /// already applied).
        tokens: u64,
        /// Blocks that move.
        blocks: u64,
        /// When.
        at: Instant,
    },
    /// A role ended. `reason` is `None` on success. The router's request guard
    /// keys its cleanup on these.
    RoleEnded {
        /// The attempt.
        id: HandoffId,
        /// The request.
        request: RequestId,
        /// Which role.
        role: Role,
        /// Why it ended early, if it did.
        reason: Option<CancelReason>,
        /// When.
        at: Instant,
    },
    /// A KV cache event.
    Kv {
        /// The event.
        event: KvEvent,
        /// When.
        at: Instant,
    },
    /// An incoming fact was dropped.
    Dropped {
        /// Sender.
        from: WorkerId,
        /// Its attempt.
        id: HandoffId,
        /// Its kind.
        fact: FactKind,
        /// Why.
        reason: DropReason,
        /// When.
        at: Instant,
    },
    // New variants go last: the wire (bincode) numbers them by position.
    /// A request's first output token, streamed without a forward pass on
    /// this worker: its prefill worker sampled it and it arrived with the
    /// KV (SGLang PD decode, `disaggregation/decode.py`:
    /// `DecodeTransferQueue._commit_transfer_to_req` takes the output id from
    /// the transfer's metadata buffer and `process_batch_result_prebuilt`
    /// streams it when the request joins the running batch). Decode then
    /// generates the remaining tokens. vLLM never reports it: in vLLM P/D the
    /// proxy discards the prefill's token and the decode worker recomputes
    /// the last prompt token to sample the first one
    /// (`v1/core/sched/scheduler.py` `_update_waiting_for_remote_kv`).
    FirstTokenFromPrefill {
        /// The request.
        request: RequestId,
        /// When it was streamed (the start of the step that merged it).
        at: Instant,
    },
    /// Part of a transfer's KV is ready before the prefill ends: a chunk of a
    /// handoff prefill whose destination is already reserved finished, and
    /// its KV streams while later chunks compute (SGLang
    /// `disaggregation/prefill.py` `send_kv_chunk`). The driver's transfer
    /// timer may move these tokens ahead of the `StartTransfer` that follows
    /// at the pin, which carries the whole transfer; reported by the worker
    /// that will start it.
    KvChunkReady {
        /// The attempt.
        id: HandoffId,
        /// The request.
        request: RequestId,
        /// Prefill worker.
        source: WorkerId,
        /// Decode worker.
        destination: WorkerId,
        /// Tokens of the transfer ready so far (cumulative; the
        /// destination's reused prefix excluded).
        tokens: u64,
        /// When.
        at: Instant,
    },
    /// The core's session layer (last, so the wire's earlier variant
    /// indices stay as they were) did something (a slot kept, appended or
    /// evicted; a push locked, sent or failed; a snapshot ingested or
    /// evicted; a prefill bypassed or not).
    Session {
        /// What.
        event: crate::session::SessionEvent,
        /// When.
        at: Instant,
    },
}

/// Counters a driver can report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct WorkerStats {
    /// Facts applied.
    pub applied: u64,
    /// Exact duplicates ignored.
    pub duplicates: u64,
    /// Facts for released attempts.
    pub stale: u64,
    /// Facts from an older peer generation.
    pub old_generation: u64,
    /// Facts refused as invalid or conflicting.
    pub rejected: u64,
    /// Facts that arrived before their request and were held back.
    pub early: u64,
    /// Early facts dropped because their request never came.
    pub early_dropped: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum TimerKind {
    Lease,
    Reservation,
    EarlyFacts,
    Renewal,
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
    timers: TimerQueue<(Instant, HandoffId, TimerKind), 4>,
    tombstones: VecDeque<HandoffId>,
    /// The ids of `tombstones`, for lookups only (never walked). FIFO
    /// churn, hence a [`ChurnMap`], with the integer hasher: every fact
    /// checks it.
    tombstone_set: ChurnMap<HandoffId, ()>,
    early: BTreeMap<HandoffId, (Instant, Vec<EarlyFact>)>,
    /// Each peer's latest generation heard (lookups only: one per fact).
    peers: FastMap<WorkerId, Generation>,
    transmits: VecDeque<Transmit>,
    events: VecDeque<WorkerEvent>,
    /// The core's step buffers, boxed so that lending them out for a step
    /// moves a pointer, not the whole struct twice (it was most of the
    /// memory copying in a replay).
    step_out: Option<Box<StepOutput>>,
    /// Emptied event buffers handed back by the consumer of
    /// [`WorkerEvent::Step`] and [`WorkerEvent::Tokens`]
    /// ([`Worker::recycle`]): a step's event takes the core's filled buffer
    /// and leaves one of these in its place, so a step costs no allocation
    /// once the consumer recycles.
    spare_passes: Vec<Vec<Duration>>,
    spare_emissions: Vec<Vec<TokenEmission>>,
    kv_buf: Vec<KvEvent>,
    session_buf: Vec<crate::session::SessionEvent>,
    stats: WorkerStats,
}

/// The kind of role event `body` becomes at its target role (what
/// [`Worker::handle_message`] feeds the role), for naming a fact that
/// arrived after its role ended.
fn role_event(body: &MsgBody) -> LifecycleEvent {
    use crate::destination::DestinationEventKind as D;
    use crate::source::SourceEventKind as S;
    match body {
        MsgBody::DestinationReserved { .. } => LifecycleEvent::Source(S::DestinationReserved),
        MsgBody::ReaderCompleted => LifecycleEvent::Source(S::ReaderCompleted),
        MsgBody::LeaseRenewal { .. } => LifecycleEvent::Source(S::LeaseRenewed),
        MsgBody::SourceReady { .. } => LifecycleEvent::Destination(D::SourceReady),
        MsgBody::ReceiveCompleted => LifecycleEvent::Destination(D::ReceiveCompleted),
        MsgBody::Abort {
            to: Role::Source, ..
        } => LifecycleEvent::Source(S::Cancelled),
        MsgBody::Abort {
            to: Role::Destination,
            ..
        } => LifecycleEvent::Destination(D::Cancelled),
    }
}

/// How many early facts one attempt may buffer; more is a misbehaving peer.
const EARLY_FACTS_PER_ID: usize = 8;
/// How many attempts may have early facts at once.
const EARLY_IDS: usize = 4096;

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
            peers: FastMap::default(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            step_out: Some(Box::default()),
            spare_passes: Vec::new(),
            spare_emissions: Vec::new(),
            kv_buf: Vec::new(),
            session_buf: Vec::new(),
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

    /// Takes a request from the frontend.
    pub fn handle_request(&mut self, req: WorkerRequest, now: Instant) -> Result<(), RequestError> {
        let result = self.accept_request(req, now);
        self.pump_reservations(now);
        self.flush_kv(now);
        result
    }

    fn accept_request(&mut self, req: WorkerRequest, now: Instant) -> Result<(), RequestError> {
        match req {
            WorkerRequest::Ordinary(request) => {
                let rid = request.id;
                match self.core.apply(SchedulerCommand::Submit(request), now) {
                    CommandOutcome::Submitted => Ok(()),
                    _ => Err(RequestError::Refused(rid)),
                }
            }
            WorkerRequest::CloseSession(session) => {
                self.core
                    .apply(SchedulerCommand::ReleaseSession { session }, now);
                // The core aborted the session's push; its roles end too.
                let pushes = sorted(
                    self.sources
                        .iter()
                        .filter(|(_, e)| e.push.is_some_and(|p| p.session == session))
                        .map(|(id, _)| *id)
                        .collect(),
                );
                for id in pushes {
                    self.source_event(
                        id,
                        SourceEvent::Cancelled {
                            reason: CancelReason::Client,
                        },
                        now,
                    );
                }
                Ok(())
            }
            WorkerRequest::EvictSession(session) => {
                self.core
                    .apply(SchedulerCommand::EvictSession { session }, now);
                Ok(())
            }
            WorkerRequest::PushSource {
                id,
                request,
                session,
                lock,
                tokens,
            } => {
                self.check_new(id)?;
                self.sources.insert(
                    id,
                    SourceEntry {
                        role: SourceHandoff::new(id, self.policy, self.caps.source_lease_ttl),
                        request_id: request,
                        request: None,
                        peer: None,
                        push: Some(PushRole {
                            session,
                            lock,
                            tokens,
                            failure: None,
                        }),
                    },
                );
                self.source_event(id, SourceEvent::Start, now);
                self.replay_early(id, now);
                Ok(())
            }
            WorkerRequest::PushDestination {
                id,
                request,
                session,
                tokens,
                source,
            } => {
                self.check_new(id)?;
                self.dests.insert(
                    id,
                    DestEntry {
                        role: DestinationHandoff::new(id, self.policy, self.config.reservation_ttl),
                        request_id: request,
                        request: None,
                        in_core: false,
                        push: Some(PushRole {
                            session,
                            lock: crate::ids::SourceLeaseId(0),
                            tokens,
                            failure: None,
                        }),
                    },
                );
                self.dest_event(
                    id,
                    DestinationEvent::Routed {
                        source,
                        ready: None,
                    },
                    now,
                );
                self.replay_early(id, now);
                Ok(())
            }
            WorkerRequest::HandoffSource { id, request } => {
                self.check_new(id)?;
                let request_id = request.id;
                self.sources.insert(
                    id,
                    SourceEntry {
                        role: SourceHandoff::new(id, self.policy, self.caps.source_lease_ttl),
                        request_id,
                        request: Some(request),
                        peer: None,
                        push: None,
                    },
                );
                self.source_event(id, SourceEvent::Start, now);
                self.replay_early(id, now);
                Ok(())
            }
            WorkerRequest::HandoffDestination {
                id,
                request,
                source,
                ready,
            } => {
                self.check_new(id)?;
                let request_id = request.id;
                self.dests.insert(
                    id,
                    DestEntry {
                        role: DestinationHandoff::new(id, self.policy, self.config.reservation_ttl),
                        request_id,
                        request: Some(request),
                        in_core: false,
                        push: None,
                    },
                );
                self.dest_event(id, DestinationEvent::Routed { source, ready }, now);
                self.replay_early(id, now);
                Ok(())
            }
        }
    }

    fn check_new(&self, id: HandoffId) -> Result<(), RequestError> {
        if self.policy == HandoffPolicy::Disabled {
            return Err(RequestError::HandoffDisabled(id));
        }
        if self.sources.contains_key(&id)
            || self.dests.contains_key(&id)
            || self.tombstone_set.contains_key(&id)
        {
            return Err(RequestError::DuplicateHandoff(id));
        }
        Ok(())
    }

    /// Takes a fact from peer `from`.
    pub fn handle_message(&mut self, from: WorkerId, msg: HandoffMsg, now: Instant) {
        self.deliver(from, msg, now, true);
        self.pump_reservations(now);
        self.flush_kv(now);
    }

    fn deliver(&mut self, from: WorkerId, msg: HandoffMsg, now: Instant, may_buffer: bool) {
        let known = self.peers.get(&from).copied();
        match known {
            Some(g) if msg.generation < g => {
                self.stats.old_generation += 1;
                self.drop_fact(from, &msg, DropReason::OldGeneration, now);
                return;
            }
            Some(g) if msg.generation > g => self.peer_restarted(from, msg.generation, now),
            None => {
                self.peers.insert(from, msg.generation);
            }
            _ => {}
        }
        let id = msg.id;
        let exists = match msg.body.target() {
            Role::Source => self.sources.contains_key(&id),
            Role::Destination => self.dests.contains_key(&id),
        };
        if !exists {
            if self.tombstone_set.contains_key(&id) {
                self.stats.stale += 1;
                let e = TransitionError::Stale {
                    id,
                    event: role_event(&msg.body),
                };
                self.drop_fact(from, &msg, DropReason::Rejected(e), now);
            } else if may_buffer {
                self.buffer_early(from, msg, now);
            } else {
                self.drop_fact(from, &msg, DropReason::Unknown, now);
            }
            return;
        }
        match msg.body.target() {
            Role::Source => {
                let Some(entry) = self.sources.get_mut(&id) else {
                    return;
                };
                match entry.peer {
                    Some(p) if p != from => {
                        self.stats.rejected += 1;
                        self.drop_fact(from, &msg, DropReason::WrongPeer, now);
                        return;
                    }
                    _ => entry.peer = Some(from),
                }
                let ev = match msg.body {
                    MsgBody::DestinationReserved { summary } => {
                        SourceEvent::DestinationReserved { summary }
                    }
                    MsgBody::ReaderCompleted => SourceEvent::ReaderCompleted,
                    MsgBody::LeaseRenewal { extend_nanos } => SourceEvent::LeaseRenewed {
                        deadline: now + Duration::from_nanos(extend_nanos),
                    },
                    MsgBody::Abort { .. } => SourceEvent::Cancelled {
                        reason: CancelReason::PeerAborted,
                    },
                    MsgBody::SourceReady { .. } | MsgBody::ReceiveCompleted => return,
                };
                self.source_event_from(id, ev, now, Some((from, msg.body.kind())));
            }
            Role::Destination => {
                let Some(entry) = self.dests.get(&id) else {
                    return;
                };
                if entry.role.source() != Some(from) {
                    self.stats.rejected += 1;
                    self.drop_fact(from, &msg, DropReason::WrongPeer, now);
                    return;
                }
                let ev = match msg.body {
                    MsgBody::SourceReady { blocks, tokens } => {
                        DestinationEvent::SourceReady(SourceReady { blocks, tokens })
                    }
                    MsgBody::ReceiveCompleted => DestinationEvent::ReceiveCompleted,
                    MsgBody::Abort { .. } => DestinationEvent::Cancelled {
                        reason: CancelReason::PeerAborted,
                    },
                    _ => return,
                };
                self.dest_event_from(id, ev, now, Some((from, msg.body.kind())));
            }
        }
    }

    fn buffer_early(&mut self, from: WorkerId, msg: HandoffMsg, now: Instant) {
        let id = msg.id;
        if !self.early.contains_key(&id) && self.early.len() >= EARLY_IDS {
            self.stats.early_dropped += 1;
            self.drop_fact(from, &msg, DropReason::Unknown, now);
            return;
        }
        let deadline = now + self.config.early_fact_ttl;
        let entry = self
            .early
            .entry(id)
            .or_insert_with(|| (deadline, Vec::new()));
        if entry.1.len() >= EARLY_FACTS_PER_ID {
            self.stats.early_dropped += 1;
            self.drop_fact(from, &msg, DropReason::Unknown, now);
            return;
        }
        if entry.1.is_empty() {
            self.timers.push(
                TimerKind::EarlyFacts as usize,
                (deadline, id, TimerKind::EarlyFacts),
            );
        }
        entry.1.push(EarlyFact { from, msg });
        self.stats.early += 1;
    }

    fn replay_early(&mut self, id: HandoffId, now: Instant) {
        if let Some((_, facts)) = self.early.remove(&id) {
            for f in facts {
                self.deliver(f.from, f.msg, now, false);
            }
        }
    }

    fn drop_fact(&mut self, from: WorkerId, msg: &HandoffMsg, reason: DropReason, now: Instant) {
        self.events.push_back(WorkerEvent::Dropped {
            from,
            id: msg.id,
            fact: msg.body.kind(),
            reason,
            at: now,
        });
    }

    /// The transfer this worker started for `id` finished (`ok`) or failed.
    pub fn handle_transfer_done(&mut self, id: HandoffId, ok: bool, now: Instant) {
        if self.dests.contains_key(&id) {
            let ev = if ok {
                DestinationEvent::ReceiveCompleted
            } else {
                DestinationEvent::Cancelled {
                    reason: CancelReason::TransferFailed,
                }
            };
            self.dest_event(id, ev, now);
        } else if self.sources.contains_key(&id) {
            let ev = if ok {
                SourceEvent::ReaderCompleted
            } else {
                SourceEvent::Cancelled {
                    reason: CancelReason::TransferFailed,
                }
            };
            self.source_event(id, ev, now);
        } else {
            self.stats.stale += 1;
        }
        self.pump_reservations(now);
        self.flush_kv(now);
    }

    /// Abandons attempt `id` on this worker (client abort, frontend guard).
    pub fn cancel(&mut self, id: HandoffId, reason: CancelReason, now: Instant) {
        if self.sources.contains_key(&id) {
            self.source_event(id, SourceEvent::Cancelled { reason }, now);
        }
        if self.dests.contains_key(&id) {
            self.dest_event(id, DestinationEvent::Cancelled { reason }, now);
        }
        self.pump_reservations(now);
        self.flush_kv(now);
    }

    /// The transport to `peer` is gone: every attempt with it ends locally,
    /// without waiting for a final message.
    pub fn handle_peer_lost(&mut self, peer: WorkerId, now: Instant) {
        self.cancel_peer(peer, CancelReason::PeerLost, now);
        self.pump_reservations(now);
        self.flush_kv(now);
    }

    /// `peer` announced (e.g. in a transport hello) that it is now
    /// `generation`. A newer generation voids every attempt with it.
    pub fn handle_peer_generation(&mut self, peer: WorkerId, generation: Generation, now: Instant) {
        match self.peers.get(&peer) {
            Some(g) if generation > *g => self.peer_restarted(peer, generation, now),
            None => {
                self.peers.insert(peer, generation);
            }
            _ => {}
        }
        self.pump_reservations(now);
        self.flush_kv(now);
    }

    fn peer_restarted(&mut self, peer: WorkerId, generation: Generation, now: Instant) {
        self.peers.insert(peer, generation);
        self.cancel_peer(peer, CancelReason::PeerRestarted, now);
    }

    fn cancel_peer(&mut self, peer: WorkerId, reason: CancelReason, now: Instant) {
        let src = sorted(
            self.sources
                .iter()
                .filter(|(_, e)| e.peer == Some(peer))
                .map(|(id, _)| *id)
                .collect(),
        );
        for id in src {
            self.source_event(id, SourceEvent::Cancelled { reason }, now);
        }
        let dst = sorted(
            self.dests
                .iter()
                .filter(|(_, e)| e.role.source() == Some(peer))
                .map(|(id, _)| *id)
                .collect(),
        );
        for id in dst {
            self.dest_event(id, DestinationEvent::Cancelled { reason }, now);
        }
    }

    /// Ends every role here, releasing all local ownership (shutdown, or
    /// replay teardown with unresolved handoffs).
    pub fn teardown(&mut self, now: Instant) {
        let src = sorted(self.sources.keys().copied().collect());
        for id in src {
            self.source_event(
                id,
                SourceEvent::Cancelled {
                    reason: CancelReason::Teardown,
                },
                now,
            );
        }
        let dst = sorted(self.dests.keys().copied().collect());
        for id in dst {
            self.dest_event(
                id,
                DestinationEvent::Cancelled {
                    reason: CancelReason::Teardown,
                },
                now,
            );
        }
        self.flush_kv(now);
    }

    /// Restarts as the next generation with a fresh core: every role ends
    /// locally first (peers learn from the new generation, not from us).
    pub fn restart(&mut self, core: S, now: Instant) {
        self.teardown(now);
        self.core = core;
        self.caps = self.core.capabilities();
        self.generation = self.generation.next();
        self.active_dest.clear();
        self.reserve_queue.clear();
        self.early.clear();
        self.events.push_back(WorkerEvent::Kv {
            event: KvEvent {
                event_id: u64::MAX,
                data: crate::kv::KvEventData::Cleared,
            },
            at: now,
        });
    }

    /// Fires every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some((deadline, id, kind)) = self.timers.peek() {
            if deadline > now {
                break;
            }
            self.timers.pop();
            match kind {
                TimerKind::Lease => {
                    let due = self
                        .sources
                        .get(&id)
                        .is_some_and(|e| e.role.deadline() <= now);
                    if due {
                        self.source_event(id, SourceEvent::LeaseExpired, now);
                    }
                }
                TimerKind::Reservation => {
                    let due = self
                        .dests
                        .get(&id)
                        .is_some_and(|e| e.role.deadline() <= now);
                    if due {
                        self.dest_event(id, DestinationEvent::ReservationExpired, now);
                    }
                }
                TimerKind::Renewal => {
                    // Still queued for a reservation: keep the source's KV
                    // alive a while longer (the pump below retries too).
                    let waiting = self
                        .dests
                        .get(&id)
                        .is_some_and(|e| e.role.state() == DestinationState::Reserving);
                    if waiting {
                        self.renew_source_lease(id, now);
                    }
                }
                TimerKind::EarlyFacts => {
                    if let Some((exp, facts)) = self.early.remove(&id) {
                        if exp <= now {
                            self.stats.early_dropped += facts.len() as u64;
                            for f in &facts {
                                self.drop_fact(f.from, &f.msg, DropReason::Unknown, now);
                            }
                        } else {
                            self.early.insert(id, (exp, facts));
                        }
                    }
                }
            }
        }
        self.pump_reservations(now);
        self.flush_kv(now);
    }

    /// The earliest pending deadline, if any. Timers are lazily cancelled, so
    /// a deadline may fire and find nothing to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.peek().map(|(t, _, _)| t)
    }

    /// Runs the core from `now`: one pass, plus further passes that end by
    /// `horizon` while nothing can change (see
    /// [`SchedulerCore::step`]). Returns when the step ends, or `None` when
    /// there was nothing to run.
    pub fn step(&mut self, now: Instant, horizon: Instant) -> Option<Instant> {
        let mut out = self.step_out.take().unwrap_or_default();
        self.core.step(now, horizon, &mut out);
        for &request in &out.shipped_first_tokens {
            self.events
                .push_back(WorkerEvent::FirstTokenFromPrefill { request, at: now });
        }
        let result = if out.steps == 0 {
            // No pass ran; a shipped first token may still have completed
            // a one-token request, which ends now.
            for &request in &out.finished {
                self.request_finished(request, now);
            }
            None
        } else {
            let end = now + out.duration;
            self.events.push_back(WorkerEvent::Step {
                start: now,
                steps: out.steps,
                duration: out.duration,
                first_step: out.first_step,
                last_step: out.last_step,
                passes: take_filled(&mut out.passes, &mut self.spare_passes),
                prefill_tokens: out.prefill_tokens,
            });
            if !out.tokens.is_empty() {
                self.events.push_back(WorkerEvent::Tokens {
                    emissions: take_filled(&mut out.tokens, &mut self.spare_emissions),
                });
            }
            for &request in &out.preempted {
                self.events
                    .push_back(WorkerEvent::Preempted { request, at: end });
            }
            let chunk_end = now + out.first_step;
            for c in &out.kv_chunks {
                self.kv_chunk_ready(c.id, c.ready_tokens, chunk_end);
            }
            for p in &out.pinned {
                let lease = SourceLease {
                    id: p.lease,
                    blocks: p.blocks,
                    tokens: p.tokens,
                    deadline: end + self.caps.source_lease_ttl,
                };
                self.source_event(p.id, SourceEvent::PrefillPinned { lease }, end);
            }
            for (i, &request) in out.finished.iter().enumerate() {
                let at = if i < out.finished_at_start { now } else { end };
                self.request_finished(request, at);
            }
            Some(end)
        };
        // Reservations the core granted (or could not grant) in its own
        // scheduling loop happen with the pass that did it: at its end, or
        // at `now` for a call that scheduled no token (it took no time).
        self.take_core_reservations(&out, result.unwrap_or(now));
        self.step_out = Some(out);
        let at = result.unwrap_or(now);
        self.pump_reservations(at);
        self.flush_kv(at);
        result
    }

    /// Streams a finished chunk of source `id` when its destination is
    /// reserved (destination-first; a source-first prefill has nowhere to
    /// send yet), clipped to the reservation's transfer.
    fn kv_chunk_ready(&mut self, id: HandoffId, ready: u64, at: Instant) {
        let Some(e) = self.sources.get(&id) else {
            return;
        };
        let (Some(summary), Some(destination)) = (e.role.reservation(), e.peer) else {
            return;
        };
        let tokens = ready
            .saturating_sub(summary.matched_prefix_tokens)
            .min(summary.transfer_tokens);
        if tokens > 0 {
            self.events.push_back(WorkerEvent::KvChunkReady {
                id,
                request: e.request_id,
                source: self.id,
                destination,
                tokens,
                at,
            });
        }
    }

    /// Reports a finished request and ends its active destination role.
    fn request_finished(&mut self, request: RequestId, at: Instant) {
        self.events
            .push_back(WorkerEvent::RequestFinished { request, at });
        if let Some(id) = self.active_dest.remove(&request) {
            self.dest_event(id, DestinationEvent::Finished, at);
        }
    }

    /// [`SchedulerCore::quiet_floor`], as far as the worker vouches for it
    /// too: a reservation waiting its turn is retried at every step end and
    /// may be granted at any of them (so only the next step's length
    /// stands), and anything not yet polled is not quiet.
    pub fn quiet_floor(&mut self) -> crate::QuietFloor {
        if !self.events.is_empty() || !self.transmits.is_empty() {
            return crate::QuietFloor::default();
        }
        let floor = self.core.quiet_floor();
        if self.reserve_queue.is_empty() {
            floor
        } else {
            crate::QuietFloor::next_only(floor.next)
        }
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

    fn tombstone(&mut self, id: HandoffId) {
        if self.config.tombstones == 0 {
            return;
        }
        if self.tombstones.len() >= self.config.tombstones {
            if let Some(old) = self.tombstones.pop_front() {
                self.tombstone_set.remove(&old);
            }
        }
        self.tombstones.push_back(id);
        self.tombstone_set.insert(id, ());
    }

    fn reject(
        &mut self,
        err: TransitionError,
        origin: Option<(WorkerId, FactKind)>,
        id: HandoffId,
        now: Instant,
    ) {
        match err {
            TransitionError::Stale { .. } => self.stats.stale += 1,
            TransitionError::Premature { .. } => return,
            _ => self.stats.rejected += 1,
        }
        if let Some((from, fact)) = origin {
            self.events.push_back(WorkerEvent::Dropped {
                from,
                id,
                fact,
                reason: DropReason::Rejected(err),
                at: now,
            });
        }
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

    fn source_event(&mut self, id: HandoffId, ev: SourceEvent, now: Instant) {
        self.source_event_from(id, ev, now, None);
    }

    fn source_event_from(
        &mut self,
        id: HandoffId,
        ev: SourceEvent,
        now: Instant,
        origin: Option<(WorkerId, FactKind)>,
    ) {
        let Some(entry) = self.sources.get_mut(&id) else {
            self.stats.stale += 1;
            return;
        };
        let request_id = entry.request_id;
        if let Some(p) = entry.push.as_mut() {
            p.failure = p.failure.or(push_failure(&ev));
        }
        let verdict = entry.role.handle(ev, now);
        let booked = self.book(
            id,
            request_id,
            Role::Source,
            LifecycleEvent::Source(ev.kind()),
            verdict,
            RoleState::Source,
            origin,
            now,
        );
        let Some((_, to, actions)) = booked else {
            return;
        };
        for action in actions.iter() {
            self.run_source_action(id, request_id, action, now);
        }
        if to == SourceState::Released {
            self.sources.remove(&id);
            self.tombstone(id);
            let reason = match ev {
                SourceEvent::Cancelled { reason } => Some(reason),
                SourceEvent::LeaseExpired => Some(CancelReason::LeaseExpired),
                _ => None,
            };
            self.events.push_back(WorkerEvent::RoleEnded {
                id,
                request: request_id,
                role: Role::Source,
                reason,
                at: now,
            });
        }
    }

    fn run_source_action(
        &mut self,
        id: HandoffId,
        request_id: RequestId,
        action: SourceAction,
        now: Instant,
    ) {
        let peer = self.sources.get(&id).and_then(|e| e.peer);
        let push = self.sources.get(&id).and_then(|e| e.push);
        match (action, push) {
            // A push computes nothing: its KV is the locked slot's, pinned
            // since the turn committed.
            (SourceAction::DispatchPrefill, Some(p)) => {
                let lease = SourceLease {
                    id: p.lock,
                    blocks: p.tokens.div_ceil(u64::from(self.caps.block_size.max(1))),
                    tokens: p.tokens,
                    deadline: now + self.caps.source_lease_ttl,
                };
                self.source_event(id, SourceEvent::PrefillPinned { lease }, now);
                return;
            }
            (SourceAction::ReleaseSource, Some(p)) => {
                let result = crate::session::PushResult::Sent;
                self.core.apply(
                    SchedulerCommand::FinishPush {
                        session: p.session,
                        lock: p.lock,
                        result,
                    },
                    now,
                );
                return;
            }
            (SourceAction::CancelSource, Some(p)) => {
                let reason = p.failure.unwrap_or(crate::session::PushFailure::Refused);
                self.core.apply(
                    SchedulerCommand::FinishPush {
                        session: p.session,
                        lock: p.lock,
                        result: crate::session::PushResult::Failed(reason),
                    },
                    now,
                );
                return;
            }
            _ => {}
        }
        match action {
            SourceAction::DispatchPrefill => {
                let Some(request) = self.sources.get_mut(&id).and_then(|e| e.request.take()) else {
                    return;
                };
                match self
                    .core
                    .apply(SchedulerCommand::SubmitHandoffPrefill { id, request }, now)
                {
                    CommandOutcome::Submitted => {}
                    _ => self.source_event(
                        id,
                        SourceEvent::Cancelled {
                            reason: CancelReason::Unsupported,
                        },
                        now,
                    ),
                }
            }
            SourceAction::AnnounceReady { blocks, tokens } => {
                self.events.push_back(WorkerEvent::PrefillPinned {
                    id,
                    request: request_id,
                    blocks,
                    tokens,
                    at: now,
                });
                if let Some(p) = peer {
                    self.send(p, id, MsgBody::SourceReady { blocks, tokens }, now);
                }
            }
            SourceAction::ArmLease { deadline } => self.arm(deadline, id, TimerKind::Lease),
            SourceAction::StartTransfer => {
                let summary = self
                    .sources
                    .get(&id)
                    .and_then(|e| e.role.reservation())
                    .unwrap_or_default();
                if let Some(destination) = peer {
                    self.events.push_back(WorkerEvent::StartTransfer {
                        id,
                        request: request_id,
                        source: self.id,
                        destination,
                        tokens: summary.transfer_tokens,
                        blocks: summary.transfer_blocks,
                        at: now,
                    });
                }
            }
            SourceAction::ReleaseSource => {
                self.core.apply(SchedulerCommand::ReleaseSource { id }, now);
            }
            SourceAction::CancelSource => {
                self.core.apply(SchedulerCommand::CancelSource { id }, now);
            }
            SourceAction::SendReceiveCompleted => {
                if let Some(p) = peer {
                    self.send(p, id, MsgBody::ReceiveCompleted, now);
                }
            }
            SourceAction::SendAbort { reason } => {
                if let Some(p) = peer {
                    self.send(
                        p,
                        id,
                        MsgBody::Abort {
                            reason,
                            to: Role::Destination,
                        },
                        now,
                    );
                }
            }
        }
    }

    fn dest_event(&mut self, id: HandoffId, ev: DestinationEvent, now: Instant) {
        self.dest_event_from(id, ev, now, None);
    }

    fn dest_event_from(
        &mut self,
        id: HandoffId,
        ev: DestinationEvent,
        now: Instant,
        origin: Option<(WorkerId, FactKind)>,
    ) {
        let Some(entry) = self.dests.get_mut(&id) else {
            self.stats.stale += 1;
            return;
        };
        let request_id = entry.request_id;
        let verdict = entry.role.handle(ev, now);
        let booked = self.book(
            id,
            request_id,
            Role::Destination,
            LifecycleEvent::Destination(ev.kind()),
            verdict,
            RoleState::Destination,
            origin,
            now,
        );
        let Some((from, to, actions)) = booked else {
            return;
        };
        for action in actions.iter() {
            self.run_dest_action(id, request_id, action, now);
        }
        // An ingested snapshot has nothing to decode: its role is done.
        let push = self.dests.get(&id).and_then(|e| e.push).is_some();
        if push && to == DestinationState::Active && from != DestinationState::Active {
            self.dest_event(id, DestinationEvent::Finished, now);
            return;
        }
        if to == DestinationState::Released {
            self.dests.remove(&id);
            self.active_dest.remove(&request_id);
            self.tombstone(id);
            // An active destination ignores its source's fate (the role
            // treats that as a duplicate), so a cancel that ends it is a
            // client cancel or a teardown, which abort its request too: an
            // early end either way.
            let _ = from;
            let reason = match ev {
                DestinationEvent::Cancelled { reason } => Some(reason),
                DestinationEvent::ReservationExpired => Some(CancelReason::ReservationExpired),
                DestinationEvent::Unsupported => Some(CancelReason::Unsupported),
                _ => None,
            };
            self.events.push_back(WorkerEvent::RoleEnded {
                id,
                request: request_id,
                role: Role::Destination,
                reason,
                at: now,
            });
        }
    }

    fn run_dest_action(
        &mut self,
        id: HandoffId,
        request_id: RequestId,
        action: DestinationAction,
        now: Instant,
    ) {
        let source = self.dests.get(&id).and_then(|e| e.role.source());
        let push = self.dests.get(&id).and_then(|e| e.push);
        match (action, push) {
            (DestinationAction::ActivateDestination, Some(_)) => {
                self.core
                    .apply(SchedulerCommand::IngestSnapshot { id }, now);
                return;
            }
            (DestinationAction::CancelDestination, Some(_)) => {
                self.core
                    .apply(SchedulerCommand::CancelSnapshot { id }, now);
                return;
            }
            _ => {}
        }
        match action {
            DestinationAction::QueueReservation => self.reserve_queue.push_back(id),
            DestinationAction::DequeueReservation => {
                self.reserve_queue.retain(|x| *x != id);
                // Queued in the core: it must forget the attempt too, or it
                // would grant a reservation nobody ends.
                if let Some(e) = self.dests.get_mut(&id).filter(|e| e.in_core) {
                    e.in_core = false;
                    self.core
                        .apply(SchedulerCommand::CancelDestination { id }, now);
                }
            }
            DestinationAction::SendDestinationReserved { summary } => {
                if let Some(s) = source {
                    self.send(s, id, MsgBody::DestinationReserved { summary }, now);
                }
            }
            // No deadline (vLLM's default): no timer, so nothing wakes the
            // driver for it.
            DestinationAction::ArmReservation { deadline } if deadline < Instant::MAX => {
                self.arm(deadline, id, TimerKind::Reservation)
            }
            DestinationAction::ArmReservation { .. } => {}
            DestinationAction::StartTransfer => {
                let summary = self
                    .dests
                    .get(&id)
                    .and_then(|e| e.role.reservation())
                    .unwrap_or_default();
                if let Some(s) = source {
                    self.events.push_back(WorkerEvent::StartTransfer {
                        id,
                        request: request_id,
                        source: s,
                        destination: self.id,
                        tokens: summary.transfer_tokens,
                        blocks: summary.transfer_blocks,
                        at: now,
                    });
                }
            }
            DestinationAction::ActivateDestination => {
                if self
                    .core
                    .apply(SchedulerCommand::ActivateDestination { id }, now)
                    == CommandOutcome::Applied
                {
                    self.active_dest.insert(request_id, id);
                }
            }
            DestinationAction::SendReaderCompleted => {
                if let Some(s) = source {
                    self.send(s, id, MsgBody::ReaderCompleted, now);
                }
            }
            DestinationAction::CancelDestination => {
                self.core
                    .apply(SchedulerCommand::CancelDestination { id }, now);
            }
            DestinationAction::SendLeaseRenewal => self.renew_source_lease(id, now),
            DestinationAction::SendAbort { reason } => {
                if let Some(s) = source {
                    self.send(
                        s,
                        id,
                        MsgBody::Abort {
                            reason,
                            to: Role::Source,
                        },
                        now,
                    );
                }
            }
        }
    }

    /// Asks the source to extend its lease (when this worker renews) and
    /// arms the next renewal at half the extension, so a destination that
    /// waits for room keeps the source's KV alive instead of letting it
    /// expire. vLLM itself never renews; the default config does not either.
    fn renew_source_lease(&mut self, id: HandoffId, now: Instant) {
        let Some(extend) = self.config.renew_source_lease else {
            return;
        };
        let Some(source) = self.dests.get(&id).and_then(|e| e.role.source()) else {
            return;
        };
        let extend_nanos = u64::try_from(extend.as_nanos()).unwrap_or(u64::MAX);
        self.send(source, id, MsgBody::LeaseRenewal { extend_nanos }, now);
        self.arm(now + extend / 2, id, TimerKind::Renewal);
    }

    /// Turns the reservations a step granted or refused ([`StepOutput::reserved`],
    /// [`StepOutput::unavailable`]) into role events at `at`.
    fn take_core_reservations(&mut self, out: &StepOutput, at: Instant) {
        for &(id, summary) in &out.reserved {
            let waiting = self
                .dests
                .get_mut(&id)
                .filter(|e| e.in_core && e.role.state() == DestinationState::Reserving);
            match waiting {
                Some(e) => {
                    e.in_core = false;
                    self.dest_event(id, DestinationEvent::Reserved { summary }, at);
                }
                None => {
                    // Nobody waits for it (cannot happen while dequeueing
                    // cancels in the core): end it at once, exactly once.
                    self.stats.stale += 1;
                    self.core
                        .apply(SchedulerCommand::CancelDestination { id }, at);
                }
            }
        }
        for &id in &out.unavailable {
            if self.dests.get(&id).is_some_and(|e| e.in_core) {
                self.dest_event(id, DestinationEvent::Unavailable, at);
            }
        }
    }

    /// Tries the reservation queue in FIFO order, stopping at the first
    /// attempt that does not fit (head-of-line blocking, as SGLang's
    /// `DecodePreallocQueue` and vLLM's waiting queue both do).
    fn pump_reservations(&mut self, now: Instant) {
        while let Some(&id) = self.reserve_queue.front() {
            if let Some(p) = self.dests.get(&id).and_then(|e| e.push) {
                let cmd = SchedulerCommand::ReserveSnapshot {
                    id,
                    session: p.session,
                    tokens: p.tokens,
                };
                match self.core.apply(cmd, now) {
                    CommandOutcome::Reserved(summary) => {
                        self.reserve_queue.pop_front();
                        self.dest_event(id, DestinationEvent::Reserved { summary }, now);
                        continue;
                    }
                    CommandOutcome::Unavailable(_) => break,
                    _ => {
                        self.reserve_queue.pop_front();
                        self.dest_event(id, DestinationEvent::Unsupported, now);
                        continue;
                    }
                }
            }
            let Some(request) = self.dests.get_mut(&id).and_then(|e| e.request.take()) else {
                // Its role ended or already reserved: nothing to try.
                self.reserve_queue.pop_front();
                continue;
            };
            match self
                .core
                .apply(SchedulerCommand::ReserveDestination { id, request }, now)
            {
                CommandOutcome::Reserved(summary) => {
                    self.reserve_queue.pop_front();
                    self.dest_event(id, DestinationEvent::Reserved { summary }, now);
                }
                CommandOutcome::Queued => {
                    // The core orders it among its own waiting work and
                    // grants it in a step; nothing blocks behind it here.
                    self.reserve_queue.pop_front();
                    if let Some(e) = self.dests.get_mut(&id) {
                        e.in_core = true;
                    }
                }
                CommandOutcome::Unavailable(back) => {
                    if let Some(e) = self.dests.get_mut(&id) {
                        e.request = back;
                    }
                    self.dest_event(id, DestinationEvent::Unavailable, now);
                    break;
                }
                _ => {
                    self.reserve_queue.pop_front();
                    self.dest_event(id, DestinationEvent::Unsupported, now);
                }
            }
        }
    }
}
