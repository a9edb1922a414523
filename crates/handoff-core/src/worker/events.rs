//! The public types a worker takes and gives: requests, refusals,
//! transmits, transitions, events and statistics.

use crate::destination::SourceReady;
use crate::ids::{HandoffId, RequestId, WorkerId};
use crate::kv::KvEvent;
use crate::msg::{FactKind, HandoffMsg, Role};
use crate::request::Request;
use crate::scheduler::TokenEmission;
use crate::time::{Duration, Instant};
use crate::transition::{CancelReason, LifecycleEvent, OwnershipDelta, RoleState, TransitionError};
use std::fmt;

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
    /// The core can never serve the request: it needs more KV than the
    /// worker's whole pool (the core answered `Unsupported`). The request
    /// ends here; its driver fails it as `unsupported`, as a handoff whose
    /// reservation is unsupported is.
    Unsupported(RequestId),
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
            RequestError::Unsupported(r) => {
                write!(f, "request {r} needs more KV than the worker's pool")
            }
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
        /// [`StepOutput::passes`](crate::scheduler::StepOutput::passes).
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
    /// A source-first destination activated from a read that ended after
    /// its source had released the KV ([`crate::TransferResult::SourceReleased`]
    /// under [`crate::StaleReadPolicy::Complete`]): the request goes on, as
    /// upstream, on KV that may be another request's.
    StaleRead {
        /// The attempt.
        id: HandoffId,
        /// The request.
        request: RequestId,
        /// Whether a released block had been given to another request
        /// before the read ended (certainly corrupt); otherwise possibly
        /// intact.
        reused: bool,
        /// When the read ended.
        at: Instant,
    },
    /// A source this worker released early
    /// ([`crate::SchedulerCore::watch_released`]) had one of its blocks
    /// reallocated: a read of it that ends from now on read reused blocks.
    SourceKvReused {
        /// The attempt whose source KV was freed.
        id: HandoffId,
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
