//! The destination (decode-side) role of one handoff attempt.
//!
//! | state | meaning |
//! |---|---|
//! | `NotRouted` | created, no routing fact yet |
//! | `Routed` | a router chose this worker (its booking is the router's, not ours); waiting for the source (source-first) |
//! | `Reserving` | queued for a physical reservation, FIFO with head-of-line blocking |
//! | `Reserved` | slot/pages/headroom held; waiting for the source to start (destination-first) |
//! | `Receiving` | KV is moving into the reservation |
//! | `Active` | KV valid; the request is ordinary decode work now |
//! | `Released` | ended; only stale facts follow |
//!
//! vLLM (source-first): the decode request arrives after the prefill pinned,
//! allocates its blocks and waits as WAITING_FOR_REMOTE_KVS while it pulls
//! (vLLM `v1/core/sched/scheduler.py`, `_update_waiting_for_remote_kv`), then
//! notifies the source. SGLang (destination-first): the request enters
//! `DecodePreallocQueue`, reserves before the prefill is dispatched, sends its
//! metadata, and activates when the transfer polls successful (SGLang
//! `disaggregation/decode.py`, `pop_preallocated`, `DecodeTransferQueue`).
//!
//! A client's cancel in `Receiving` (vLLM's orders, under
//! [`CancelFrees::Upstream`]) leaves the role receiving, marked abandoned:
//! the load in flight keeps its blocks until it ends (vllm-project/vllm
//! PR #32255), then the reservation is freed and, source-first, the read's
//! notice frees the source. A cancel before the load (`Routed`,
//! `Reserving`, `Reserved`) ends the role at once and sends the source the
//! notification-only release (`SendAbort`; PRs #41269, #57570).

use crate::ids::{HandoffId, WorkerId};
use crate::policy::{CancelFrees, HandoffPolicy};
use crate::scheduler::ReservationSummary;
use crate::time::Instant;
use crate::transition::{CancelReason, Effects, LifecycleEvent, Next, TransitionError, Verdict};

mod states;

pub use crate::state::{DestinationEventKind, DestinationState};

/// What the source announced about its held KV.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SourceReady {
    /// Blocks held at the source.
    pub blocks: u64,
    /// Tokens held at the source.
    pub tokens: u64,
}

/// Facts a destination role consumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DestinationEvent {
    /// A router chose this worker; `ready` is set when the source had already
    /// pinned (source-first routing happens after the prefill).
    Routed {
        /// The prefill worker holding (or about to hold) the KV.
        source: WorkerId,
        /// The source's announcement, if it already happened.
        ready: Option<SourceReady>,
    },
    /// The source's KV is pinned and ready (remote fact).
    SourceReady(SourceReady),
    /// The scheduler reserved.
    Reserved {
        /// What it took.
        summary: ReservationSummary,
    },
    /// The scheduler had no room; nothing is held. Retried later.
    Unavailable,
    /// The backend cannot reserve at all: terminal, never retried.
    Unsupported,
    /// The incoming KV is valid (source-first: the local read finished;
    /// destination-first: the sender reported success).
    ReceiveCompleted,
    /// The reservation timer fired: the reservation (or, before one, the
    /// wait for one) outlived the reservation TTL.
    ReservationExpired,
    /// The attempt is abandoned.
    Cancelled {
        /// Why.
        reason: CancelReason,
    },
    /// The activated request finished decoding.
    Finished,
}

impl DestinationEvent {
    /// Which kind of fact this is, without its payload.
    pub fn kind(&self) -> DestinationEventKind {
        match self {
            DestinationEvent::Routed { .. } => DestinationEventKind::Routed,
            DestinationEvent::SourceReady(_) => DestinationEventKind::SourceReady,
            DestinationEvent::Reserved { .. } => DestinationEventKind::Reserved,
            DestinationEvent::Unavailable => DestinationEventKind::Unavailable,
            DestinationEvent::Unsupported => DestinationEventKind::Unsupported,
            DestinationEvent::ReceiveCompleted => DestinationEventKind::ReceiveCompleted,
            DestinationEvent::ReservationExpired => DestinationEventKind::ReservationExpired,
            DestinationEvent::Cancelled { .. } => DestinationEventKind::Cancelled,
            DestinationEvent::Finished => DestinationEventKind::Finished,
        }
    }

    /// Stable name for transcripts and errors (that of its [`Self::kind`]).
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }
}

/// Local work a destination transition asks of its worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DestinationAction {
    /// Put the attempt at the tail of the reservation queue.
    QueueReservation,
    /// Take the attempt out of the reservation queue (cancelled while queued).
    DequeueReservation,
    /// Tell the source what was reserved.
    SendDestinationReserved {
        /// The reservation.
        summary: ReservationSummary,
    },
    /// (Re)arm the reservation timer.
    ArmReservation {
        /// When it fires.
        deadline: Instant,
    },
    /// Source-first: the reader starts pulling the KV.
    StartTransfer,
    /// Make the KV valid and queue the request (`ActivateDestination`).
    ActivateDestination,
    /// Source-first: tell the source its reader is done.
    SendReaderCompleted,
    /// Free the reservation, or abort the request decoding from it once
    /// active (`CancelDestination`).
    CancelDestination,
    /// Ask the source to extend its lease (only if the worker renews).
    SendLeaseRenewal,
    /// Tell the peer we gave up.
    SendAbort {
        /// Why.
        reason: CancelReason,
    },
}

/// The destination role of one attempt. See the module docs for the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DestinationHandoff {
    id: HandoffId,
    policy: HandoffPolicy,
    state: DestinationState,
    source: Option<WorkerId>,
    ready: Option<SourceReady>,
    reservation: Option<ReservationSummary>,
    deadline: Instant,
    reservation_ttl: crate::time::Duration,
    unavailable_seen: bool,
    cancel_frees: CancelFrees,
    abandoned: bool,
}

impl DestinationHandoff {
    /// A new role in `NotRouted`; a reservation lives `reservation_ttl` at most.
    pub fn new(
        id: HandoffId,
        policy: HandoffPolicy,
        reservation_ttl: crate::time::Duration,
    ) -> Self {
        DestinationHandoff {
            id,
            policy,
            state: DestinationState::NotRouted,
            source: None,
            ready: None,
            reservation: None,
            deadline: Instant::MAX,
            reservation_ttl,
            unavailable_seen: false,
            cancel_frees: CancelFrees::Upstream,
            abandoned: false,
        }
    }

    /// The same role with `rule` for a client's cancel (upstream's by
    /// default).
    pub fn with_cancel_frees(mut self, rule: CancelFrees) -> Self {
        self.cancel_frees = rule;
        self
    }

    /// The rule a client's cancel follows here.
    pub fn cancel_frees(&self) -> CancelFrees {
        self.cancel_frees
    }

    /// Whether a client cancelled the request while its KV load was in
    /// flight: the role ends (freeing its reservation) when the load does.
    pub fn abandoned(&self) -> bool {
        self.abandoned
    }

    /// The attempt.
    pub fn id(&self) -> HandoffId {
        self.id
    }

    /// The current state.
    pub fn state(&self) -> DestinationState {
        self.state
    }

    /// The source worker, once routed.
    pub fn source(&self) -> Option<WorkerId> {
        self.source
    }

    /// The reservation, once held.
    pub fn reservation(&self) -> Option<ReservationSummary> {
        self.reservation
    }

    /// When the wait or the reservation expires (`Instant::MAX` once active
    /// or released).
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Applies one fact at `now`: the current state's handler judges it; a
    /// released role takes only stale facts.
    pub fn handle(
        &mut self,
        event: DestinationEvent,
        now: Instant,
    ) -> Result<Verdict<DestinationState, DestinationAction>, TransitionError> {
        use DestinationState as S;
        let from = self.state;
        let mut fx = Effects::new();
        let next = match from {
            S::NotRouted => self.not_routed(event, now, &mut fx),
            S::Routed => self.routed(event, now, &mut fx),
            S::Reserving => self.reserving(event, now, &mut fx),
            S::Reserved => self.reserved(event, now, &mut fx),
            S::Receiving => self.receiving(event, now, &mut fx),
            S::Active => self.active(event, &mut fx),
            S::Released => Err(TransitionError::Stale {
                id: self.id,
                event: LifecycleEvent::Destination(event.kind()),
            }),
        }?;
        if let Next::To(to) = next {
            self.state = to;
        }
        Ok(next.verdict(from, fx))
    }
}
