//! The source (prefill-side) role of one handoff attempt.
//!
//! | state | meaning |
//! |---|---|
//! | `NotStarted` | request known; destination-first waits here for a reservation |
//! | `Computing` | the prefill is dispatched to the scheduler |
//! | `Pinned` | prefill done, KV held under a lease, no reader yet (source-first) |
//! | `AwaitingReaderCompletion` | a destination has reserved; KV held until the transfer completes |
//! | `Released` | the lease ended (success, expiry or cancellation); only stale facts follow |
//!
//! vLLM (source-first) goes `NotStarted → Computing → Pinned →
//! AwaitingReaderCompletion → Released`: the prefill runs before anyone has
//! room for it and the KV stays pinned until the decode side's read
//! notification (vLLM `nixl_connector.py`, `request_finished` delays the free;
//! the scheduler frees on `finished_sending`). SGLang (destination-first) goes
//! `NotStarted → Computing → AwaitingReaderCompletion → Released`: prefill is
//! dispatched only once the decode side's metadata has arrived (SGLang
//! `disaggregation/prefill.py`, bootstrap queue), and the KV is released when
//! the sender's transfer succeeds (inflight queue, `release_kv_cache`).

use crate::ids::{HandoffId, SourceLeaseId};
use crate::policy::HandoffPolicy;
use crate::scheduler::ReservationSummary;
use crate::time::{Duration, Instant};
use crate::transition::{
    ActionList, CancelReason, LifecycleEvent, OwnershipDelta, RoleState, TransitionError, Verdict,
};
use core::fmt;

/// Where a source role is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum SourceState {
    /// Known, not dispatched.
    NotStarted,
    /// Prefill dispatched.
    Computing,
    /// Held, no reader yet.
    Pinned,
    /// Held, a reader has reserved and the transfer is (about to be) under way.
    AwaitingReaderCompletion,
    /// Ended.
    Released,
}

impl SourceState {
    /// Stable name for transcripts.
    pub fn name(self) -> &'static str {
        match self {
            SourceState::NotStarted => "NotStarted",
            SourceState::Computing => "Computing",
            SourceState::Pinned => "Pinned",
            SourceState::AwaitingReaderCompletion => "AwaitingReaderCompletion",
            SourceState::Released => "Released",
        }
    }

    /// Every state, for table tests.
    pub const ALL: [SourceState; 5] = [
        SourceState::NotStarted,
        SourceState::Computing,
        SourceState::Pinned,
        SourceState::AwaitingReaderCompletion,
        SourceState::Released,
    ];
}

impl fmt::Display for SourceState {
    /// The [`SourceState::name`], honouring width and alignment.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// The held KV of a completed prefill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceLease {
    /// The scheduler's handle.
    pub id: SourceLeaseId,
    /// Blocks pinned.
    pub blocks: u64,
    /// Prompt tokens whose KV is held.
    pub tokens: u64,
    /// When the lease expires unless renewed.
    pub deadline: Instant,
}

/// Facts a source role consumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceEvent {
    /// The request arrived at this worker.
    Start,
    /// The destination holds a reservation for this attempt (remote fact).
    DestinationReserved {
        /// What the destination reserved.
        summary: ReservationSummary,
    },
    /// The scheduler completed the prefill and pinned its KV atomically.
    PrefillPinned {
        /// The lease it now holds.
        lease: SourceLease,
    },
    /// Every reader is done with the KV (source-first: the destination's
    /// notification; destination-first: the local sender's transfer success).
    ReaderCompleted,
    /// The destination asked for more time.
    LeaseRenewed {
        /// The new deadline.
        deadline: Instant,
    },
    /// The lease timer fired (or, destination-first, the wait for a
    /// destination ran out).
    LeaseExpired,
    /// The attempt is abandoned.
    Cancelled {
        /// Why.
        reason: CancelReason,
    },
}

impl SourceEvent {
    /// Which kind of fact this is, without its payload.
    pub fn kind(&self) -> SourceEventKind {
        match self {
            SourceEvent::Start => SourceEventKind::Start,
            SourceEvent::DestinationReserved { .. } => SourceEventKind::DestinationReserved,
            SourceEvent::PrefillPinned { .. } => SourceEventKind::PrefillPinned,
            SourceEvent::ReaderCompleted => SourceEventKind::ReaderCompleted,
            SourceEvent::LeaseRenewed { .. } => SourceEventKind::LeaseRenewed,
            SourceEvent::LeaseExpired => SourceEventKind::LeaseExpired,
            SourceEvent::Cancelled { .. } => SourceEventKind::Cancelled,
        }
    }

    /// Stable name for transcripts and errors (that of its [`Self::kind`]).
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }
}

/// The kind of a [`SourceEvent`]: its variant without the payload, which is
/// what a [`crate::Transition`] records and a [`TransitionError`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum SourceEventKind {
    /// [`SourceEvent::Start`]: the request arrived at the source worker.
    Start,
    /// [`SourceEvent::DestinationReserved`]: the destination holds a
    /// reservation for the attempt.
    DestinationReserved,
    /// [`SourceEvent::PrefillPinned`]: the prefill finished and its KV is
    /// held under a lease.
    PrefillPinned,
    /// [`SourceEvent::ReaderCompleted`]: every reader is done with the KV.
    ReaderCompleted,
    /// [`SourceEvent::LeaseRenewed`]: the destination extended the lease.
    LeaseRenewed,
    /// [`SourceEvent::LeaseExpired`]: the lease (or the wait for a
    /// destination) ran out.
    LeaseExpired,
    /// [`SourceEvent::Cancelled`]: the attempt was abandoned.
    Cancelled,
}

impl SourceEventKind {
    /// Stable name for transcripts and errors.
    pub fn name(self) -> &'static str {
        match self {
            SourceEventKind::Start => "Start",
            SourceEventKind::DestinationReserved => "DestinationReserved",
            SourceEventKind::PrefillPinned => "PrefillPinned",
            SourceEventKind::ReaderCompleted => "ReaderCompleted",
            SourceEventKind::LeaseRenewed => "LeaseRenewed",
            SourceEventKind::LeaseExpired => "LeaseExpired",
            SourceEventKind::Cancelled => "Cancelled",
        }
    }

    /// Every kind, for table tests.
    pub const ALL: [SourceEventKind; 7] = [
        SourceEventKind::Start,
        SourceEventKind::DestinationReserved,
        SourceEventKind::PrefillPinned,
        SourceEventKind::ReaderCompleted,
        SourceEventKind::LeaseRenewed,
        SourceEventKind::LeaseExpired,
        SourceEventKind::Cancelled,
    ];
}

impl fmt::Display for SourceEventKind {
    /// The [`SourceEventKind::name`], honouring width and alignment.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// Local work a source transition asks of its worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceAction {
    /// Submit the prefill (`SchedulerCommand::SubmitHandoffPrefill`).
    DispatchPrefill,
    /// Tell the destination (if known) and the frontend that KV is ready.
    AnnounceReady {
        /// Blocks held.
        blocks: u64,
        /// Tokens held.
        tokens: u64,
    },
    /// (Re)arm the lease timer.
    ArmLease {
        /// When it fires.
        deadline: Instant,
    },
    /// Destination-first: the sender starts writing into the reservation.
    StartTransfer,
    /// Deferred free after the reader finished or the lease ran out
    /// (`SchedulerCommand::ReleaseSource`).
    ReleaseSource,
    /// Abandon the prefill, computing or held (`SchedulerCommand::CancelSource`).
    CancelSource,
    /// Destination-first: tell the destination its KV is valid.
    SendReceiveCompleted,
    /// Tell the peer we gave up.
    SendAbort {
        /// Why.
        reason: CancelReason,
    },
}

/// The source role of one attempt. See the module docs for the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceHandoff {
    id: HandoffId,
    policy: HandoffPolicy,
    state: SourceState,
    started: bool,
    lease: Option<SourceLease>,
    reservation: Option<ReservationSummary>,
    wait_ttl: Duration,
    wait_deadline: Instant,
}

impl SourceHandoff {
    /// A new role in `NotStarted`. Destination-first waits at most
    /// `wait_ttl` for the destination's reservation before giving up (SGLang's
    /// bootstrap timeout); a held lease has its own deadline.
    pub fn new(id: HandoffId, policy: HandoffPolicy, wait_ttl: Duration) -> Self {
        SourceHandoff {
            id,
            policy,
            state: SourceState::NotStarted,
            started: false,
            lease: None,
            reservation: None,
            wait_ttl,
            wait_deadline: Instant::MAX,
        }
    }

    /// When the lease (or, before one exists, the wait for a destination)
    /// expires; `Instant::MAX` when nothing is timed.
    pub fn deadline(&self) -> Instant {
        match self.lease {
            Some(l) => l.deadline,
            None if self.state == SourceState::NotStarted => self.wait_deadline,
            None => Instant::MAX,
        }
    }

    /// The attempt.
    pub fn id(&self) -> HandoffId {
        self.id
    }

    /// The current state.
    pub fn state(&self) -> SourceState {
        self.state
    }

    /// The lease, while held.
    pub fn lease(&self) -> Option<SourceLease> {
        self.lease
    }

    /// What the destination reserved, once known.
    pub fn reservation(&self) -> Option<ReservationSummary> {
        self.reservation
    }

    /// Applies one fact at `now`.
    pub fn handle(
        &mut self,
        event: SourceEvent,
        now: Instant,
    ) -> Result<Verdict<SourceState, SourceAction>, TransitionError> {
        use SourceState as S;
        let id = self.id;
        let name = LifecycleEvent::Source(event.kind());
        let from = self.state;
        let invalid = Err(TransitionError::Invalid {
            id,
            state: RoleState::Source(from),
            event: name,
        });
        if from == S::Released {
            return Err(TransitionError::Stale { id, event: name });
        }
        let source_first = self.policy == HandoffPolicy::SourceFirst;
        let mut actions = ActionList::new();
        let mut delta = OwnershipDelta::NONE;
        let to = match event {
            SourceEvent::Start => {
                if self.started {
                    return Ok(Verdict::Duplicate);
                }
                self.started = true;
                if source_first {
                    actions.push(SourceAction::DispatchPrefill);
                    S::Computing
                } else {
                    self.wait_deadline = now + self.wait_ttl;
                    actions.push(SourceAction::ArmLease {
                        deadline: self.wait_deadline,
                    });
                    S::NotStarted
                }
            }
            SourceEvent::DestinationReserved { summary } => {
                if let Some(known) = self.reservation {
                    return if known == summary {
                        Ok(Verdict::Duplicate)
                    } else {
                        Err(TransitionError::Conflict { id, event: name })
                    };
                }
                match (from, source_first) {
                    (S::NotStarted, false) if self.started => {
                        actions.push(SourceAction::DispatchPrefill);
                        self.reservation = Some(summary);
                        S::Computing
                    }
                    (S::Pinned, true) => {
                        self.reservation = Some(summary);
                        S::AwaitingReaderCompletion
                    }
                    _ => return invalid,
                }
            }
            SourceEvent::PrefillPinned { lease } => match (from, self.lease) {
                (S::Computing, _) => {
                    self.lease = Some(lease);
                    delta.pinned = lease.blocks as i64;
                    actions.push(SourceAction::ArmLease {
                        deadline: lease.deadline,
                    });
                    actions.push(SourceAction::AnnounceReady {
                        blocks: lease.blocks,
                        tokens: lease.tokens,
                    });
                    if source_first {
                        S::Pinned
                    } else {
                        actions.push(SourceAction::StartTransfer);
                        S::AwaitingReaderCompletion
                    }
                }
                (S::Pinned | S::AwaitingReaderCompletion, Some(held)) => {
                    return if held.id == lease.id {
                        Ok(Verdict::Duplicate)
                    } else {
                        Err(TransitionError::Conflict { id, event: name })
                    };
                }
                _ => return invalid,
            },
            SourceEvent::ReaderCompleted => match self.lease {
                Some(lease) if matches!(from, S::Pinned | S::AwaitingReaderCompletion) => {
                    delta.pinned = -(lease.blocks as i64);
                    actions.push(SourceAction::ReleaseSource);
                    if !source_first {
                        actions.push(SourceAction::SendReceiveCompleted);
                    }
                    self.lease = None;
                    S::Released
                }
                _ => return invalid,
            },
            SourceEvent::LeaseRenewed { deadline } => match self.lease.as_mut() {
                Some(lease) => {
                    if deadline <= lease.deadline {
                        return Ok(Verdict::Duplicate);
                    }
                    lease.deadline = deadline;
                    actions.push(SourceAction::ArmLease { deadline });
                    from
                }
                None => return invalid,
            },
            SourceEvent::LeaseExpired => match self.lease {
                None if from == S::NotStarted && self.started && !source_first => {
                    if now < self.wait_deadline {
                        return Err(TransitionError::Premature { id, event: name });
                    }
                    actions.push(SourceAction::SendAbort {
                        reason: CancelReason::LeaseExpired,
                    });
                    S::Released
                }
                Some(lease) => {
                    if now < lease.deadline {
                        return Err(TransitionError::Premature { id, event: name });
                    }
                    delta.pinned = -(lease.blocks as i64);
                    actions.push(SourceAction::ReleaseSource);
                    actions.push(SourceAction::SendAbort {
                        reason: CancelReason::LeaseExpired,
                    });
                    self.lease = None;
                    S::Released
                }
                None => return invalid,
            },
            SourceEvent::Cancelled { reason } => {
                if let Some(lease) = self.lease.take() {
                    delta.pinned = -(lease.blocks as i64);
                }
                if matches!(from, S::Computing | S::Pinned | S::AwaitingReaderCompletion) {
                    actions.push(SourceAction::CancelSource);
                }
                if !reason.peer_knows() {
                    actions.push(SourceAction::SendAbort { reason });
                }
                S::Released
            }
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
