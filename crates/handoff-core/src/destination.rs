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

use crate::ids::{HandoffId, WorkerId};
use crate::policy::HandoffPolicy;
use crate::scheduler::ReservationSummary;
use crate::time::Instant;
use crate::transition::{
    ActionList, CancelReason, LifecycleEvent, OwnershipDelta, RoleState, TransitionError, Verdict,
};
use core::fmt;

/// Where a destination role is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum DestinationState {
    /// No routing fact yet.
    NotRouted,
    /// Routed; waiting for the source to be ready.
    Routed,
    /// Queued for a physical reservation.
    Reserving,
    /// Reservation held.
    Reserved,
    /// KV in flight.
    Receiving,
    /// KV valid, request decoding.
    Active,
    /// Ended.
    Released,
}

impl DestinationState {
    /// Stable name for transcripts.
    pub fn name(self) -> &'static str {
        match self {
            DestinationState::NotRouted => "NotRouted",
            DestinationState::Routed => "Routed",
            DestinationState::Reserving => "Reserving",
            DestinationState::Reserved => "Reserved",
            DestinationState::Receiving => "Receiving",
            DestinationState::Active => "Active",
            DestinationState::Released => "Released",
        }
    }

    /// Every state, for table tests.
    pub const ALL: [DestinationState; 7] = [
        DestinationState::NotRouted,
        DestinationState::Routed,
        DestinationState::Reserving,
        DestinationState::Reserved,
        DestinationState::Receiving,
        DestinationState::Active,
        DestinationState::Released,
    ];
}

impl fmt::Display for DestinationState {
    /// The [`DestinationState::name`], honouring width and alignment.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

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

/// The kind of a [`DestinationEvent`]: its variant without the payload,
/// which is what a [`crate::Transition`] records and a [`TransitionError`]
/// names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum DestinationEventKind {
    /// [`DestinationEvent::Routed`]: a router chose this worker.
    Routed,
    /// [`DestinationEvent::SourceReady`]: the source announced its pinned KV.
    SourceReady,
    /// [`DestinationEvent::Reserved`]: the scheduler took a reservation.
    Reserved,
    /// [`DestinationEvent::Unavailable`]: no room yet; the attempt stays
    /// queued.
    Unavailable,
    /// [`DestinationEvent::Unsupported`]: the backend cannot reserve at all.
    Unsupported,
    /// [`DestinationEvent::ReceiveCompleted`]: the incoming KV is valid.
    ReceiveCompleted,
    /// [`DestinationEvent::ReservationExpired`]: the reservation timer fired.
    ReservationExpired,
    /// [`DestinationEvent::Cancelled`]: the attempt was abandoned.
    Cancelled,
    /// [`DestinationEvent::Finished`]: the activated request finished
    /// decoding.
    Finished,
}

impl DestinationEventKind {
    /// Stable name for transcripts and errors.
    pub fn name(self) -> &'static str {
        match self {
            DestinationEventKind::Routed => "Routed",
            DestinationEventKind::SourceReady => "SourceReady",
            DestinationEventKind::Reserved => "Reserved",
            DestinationEventKind::Unavailable => "Unavailable",
            DestinationEventKind::Unsupported => "Unsupported",
            DestinationEventKind::ReceiveCompleted => "ReceiveCompleted",
            DestinationEventKind::ReservationExpired => "ReservationExpired",
            DestinationEventKind::Cancelled => "Cancelled",
            DestinationEventKind::Finished => "Finished",
        }
    }

    /// Every kind, for table tests.
    pub const ALL: [DestinationEventKind; 9] = [
        DestinationEventKind::Routed,
        DestinationEventKind::SourceReady,
        DestinationEventKind::Reserved,
        DestinationEventKind::Unavailable,
        DestinationEventKind::Unsupported,
        DestinationEventKind::ReceiveCompleted,
        DestinationEventKind::ReservationExpired,
        DestinationEventKind::Cancelled,
        DestinationEventKind::Finished,
    ];
}

impl fmt::Display for DestinationEventKind {
    /// The [`DestinationEventKind::name`], honouring width and alignment.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
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
        }
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

    /// Applies one fact at `now`.
    pub fn handle(
        &mut self,
        event: DestinationEvent,
        now: Instant,
    ) -> Result<Verdict<DestinationState, DestinationAction>, TransitionError> {
        use DestinationAction as A;
        use DestinationState as S;
        let id = self.id;
        let name = LifecycleEvent::Destination(event.kind());
        let from = self.state;
        let invalid = Err(TransitionError::Invalid {
            id,
            state: RoleState::Destination(from),
            event: name,
        });
        if from == S::Released {
            return Err(TransitionError::Stale { id, event: name });
        }
        let source_first = self.policy == HandoffPolicy::SourceFirst;
        let mut actions = ActionList::new();
        let mut delta = OwnershipDelta::NONE;
        let physical = self.reservation.map_or(0, |r| r.physical_blocks as i64);
        let to = match event {
            DestinationEvent::Routed { source, ready } => {
                if from != S::NotRouted {
                    return if self.source == Some(source) {
                        Ok(Verdict::Duplicate)
                    } else {
                        Err(TransitionError::Conflict { id, event: name })
                    };
                }
                self.source = Some(source);
                self.ready = ready;
                self.deadline = now + self.reservation_ttl;
                actions.push(A::ArmReservation {
                    deadline: self.deadline,
                });
                if !source_first || ready.is_some() {
                    actions.push(A::QueueReservation);
                    S::Reserving
                } else {
                    S::Routed
                }
            }
            DestinationEvent::SourceReady(info) => {
                if self.ready.is_some() {
                    return Ok(Verdict::Duplicate);
                }
                match from {
                    S::Routed if source_first => {
                        self.ready = Some(info);
                        actions.push(A::QueueReservation);
                        S::Reserving
                    }
                    S::Reserved if !source_first => {
                        self.ready = Some(info);
                        S::Receiving
                    }
                    // The announcement overtook our own reservation outcome
                    // or arrived after the KV: remember it, stay put.
                    S::Reserving | S::Receiving | S::Active => {
                        self.ready = Some(info);
                        from
                    }
                    _ => return invalid,
                }
            }
            DestinationEvent::Reserved { summary } => {
                if let Some(known) = self.reservation {
                    return if known == summary {
                        Ok(Verdict::Duplicate)
                    } else {
                        Err(TransitionError::Conflict { id, event: name })
                    };
                }
                if from != S::Reserving {
                    return invalid;
                }
                self.reservation = Some(summary);
                self.deadline = now + self.reservation_ttl;
                delta.reserved = summary.physical_blocks as i64;
                actions.push(A::SendDestinationReserved { summary });
                actions.push(A::ArmReservation {
                    deadline: self.deadline,
                });
                if source_first {
                    actions.push(A::StartTransfer);
                    S::Receiving
                } else {
                    S::Reserved
                }
            }
            DestinationEvent::Unavailable => {
                if from != S::Reserving {
                    return invalid;
                }
                if self.unavailable_seen {
                    return Ok(Verdict::Duplicate);
                }
                self.unavailable_seen = true;
                actions.push(A::SendLeaseRenewal);
                S::Reserving
            }
            DestinationEvent::Unsupported => {
                if from != S::Reserving {
                    return invalid;
                }
                actions.push(A::SendAbort {
                    reason: CancelReason::Unsupported,
                });
                S::Released
            }
            DestinationEvent::ReceiveCompleted => match from {
                S::Reserved | S::Receiving => {
                    delta.reserved = -physical;
                    delta.active = physical;
                    actions.push(A::ActivateDestination);
                    if source_first {
                        actions.push(A::SendReaderCompleted);
                    }
                    self.deadline = Instant::MAX;
                    S::Active
                }
                S::Active => return Ok(Verdict::Duplicate),
                _ => return invalid,
            },
            DestinationEvent::ReservationExpired => match from {
                S::Routed | S::Reserving | S::Reserved | S::Receiving => {
                    if now < self.deadline {
                        return Err(TransitionError::Premature { id, event: name });
                    }
                    delta.reserved = -physical;
                    if from == S::Reserving {
                        actions.push(A::DequeueReservation);
                    } else if from != S::Routed {
                        actions.push(A::CancelDestination);
                    }
                    actions.push(A::SendAbort {
                        reason: CancelReason::ReservationExpired,
                    });
                    self.deadline = Instant::MAX;
                    S::Released
                }
                _ => return invalid,
            },
            DestinationEvent::Cancelled { reason } => {
                // Once active the handoff has succeeded: the KV is here and
                // the request decodes from it, so its peer giving up, being
                // lost or restarting changes nothing (ending the role would
                // report the request failed while it decodes on).
                if from == S::Active && reason.peer_knows() {
                    return Ok(Verdict::Duplicate);
                }
                match from {
                    S::Reserving => actions.push(A::DequeueReservation),
                    S::Reserved | S::Receiving => {
                        delta.reserved = -physical;
                        actions.push(A::CancelDestination);
                    }
                    // A local cancel (client, teardown) of an active
                    // destination aborts the request it is decoding.
                    S::Active => actions.push(A::CancelDestination),
                    _ => {}
                }
                // Once active the handoff has succeeded; the peer needs no abort.
                if from != S::Active && !reason.peer_knows() {
                    actions.push(A::SendAbort { reason });
                }
                self.deadline = Instant::MAX;
                S::Released
            }
            DestinationEvent::Finished => match from {
                S::Active => S::Released,
                _ => return invalid,
            },
        };
        self.state = to;
        Ok(Verdict::Applied {
            from,
            to,
            actions,
            delta,
        })
    }
}
