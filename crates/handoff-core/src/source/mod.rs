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
//!
//! A client's cancel of a source holding a lease (source-first or push)
//! under [`CancelFrees::Upstream`] leaves the role where it is, marked
//! abandoned: vLLM ignores the abort of a prefill that already finished
//! (PR #25067), so the KV stays until the reader's notice
//! (`ReaderCompleted`), the destination's release (`Cancelled` by
//! `PeerAborted`) or the lease. Every other cancel ends the role at once.

use crate::ids::{HandoffId, SourceLeaseId};
use crate::policy::{CancelFrees, HandoffPolicy};
use crate::scheduler::ReservationSummary;
use crate::time::{Duration, Instant};
use crate::transition::{CancelReason, Effects, LifecycleEvent, Next, TransitionError, Verdict};

mod states;

pub use crate::state::{SourceEventKind, SourceState};

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
    pinned_at: Instant,
    cancel_frees: CancelFrees,
    abandoned: bool,
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
            pinned_at: Instant::ZERO,
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

    /// Whether a client cancelled the request while this role kept its KV
    /// (it ends when the KV is read, released by its destination, or its
    /// lease runs out).
    pub fn abandoned(&self) -> bool {
        self.abandoned
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

    /// When its KV was pinned: the end of the step that finished its
    /// prefill, which the role has already moved past while that step
    /// runs; [`Instant::ZERO`] before.
    pub fn pinned_at(&self) -> Instant {
        self.pinned_at
    }

    /// Applies one fact at `now`: the current state's handler judges it; a
    /// released role takes only stale facts.
    pub fn handle(
        &mut self,
        event: SourceEvent,
        now: Instant,
    ) -> Result<Verdict<SourceState, SourceAction>, TransitionError> {
        let from = self.state;
        let mut fx = Effects::new();
        let next = match from {
            SourceState::NotStarted => self.not_started(event, now, &mut fx),
            SourceState::Computing => self.computing(event, now, &mut fx),
            SourceState::Pinned => self.pinned(event, now, &mut fx),
            SourceState::AwaitingReaderCompletion => self.awaiting_reader(event, now, &mut fx),
            SourceState::Released => Err(TransitionError::Stale {
                id: self.id,
                event: LifecycleEvent::Source(event.kind()),
            }),
        }?;
        if let Next::To(to) = next {
            self.state = to;
        }
        Ok(next.verdict(from, fx))
    }
}
