//! One handler per live source state: each takes the facts that mean
//! something special in its state and hands the rest to
//! [`SourceHandoff::any_state`], whose answers (restarts, renewals, expiry,
//! cancellation, repeats) do not depend on the state. Unlike rustls's one
//! type per state, the role's data is one struct; a handler's guards on
//! its `Option` fields (lease, reservation) stand where a state's own
//! type would.

use super::{SourceAction, SourceEvent, SourceHandoff, SourceLease, SourceState};
use crate::policy::{CancelFrees, HandoffPolicy};
use crate::scheduler::ReservationSummary;
use crate::time::Instant;
use crate::transition::{CancelReason, Effects, LifecycleEvent, Next, RoleState, TransitionError};

type Fx = Effects<SourceAction>;
type Judged = Result<Next<SourceState>, TransitionError>;

impl SourceHandoff {
    /// `NotStarted`: destination-first waits here for a reservation.
    pub(super) fn not_started(&mut self, event: SourceEvent, now: Instant, fx: &mut Fx) -> Judged {
        match event {
            SourceEvent::DestinationReserved { summary }
                if self.reservation.is_none() && self.started && !self.source_first() =>
            {
                fx.actions.push(SourceAction::DispatchPrefill);
                self.reservation = Some(summary);
                Ok(Next::To(SourceState::Computing))
            }
            SourceEvent::PrefillPinned { .. } | SourceEvent::ReaderCompleted => {
                Err(self.invalid(&event))
            }
            SourceEvent::LeaseExpired
                if self.lease.is_none() && self.started && !self.source_first() =>
            {
                if now < self.wait_deadline {
                    return Err(self.premature(&event));
                }
                fx.actions.push(SourceAction::SendAbort {
                    reason: CancelReason::LeaseExpired,
                });
                Ok(Next::To(SourceState::Released))
            }
            _ => self.any_state(event, now, fx),
        }
    }

    /// `Computing`: the prefill is dispatched; its pinned KV moves us on.
    /// Push, the destination's registration may come first: it is kept
    /// for the write (vLLM `NixlPushConnectorWorker._handle_push_reg_notif`
    /// parks a `PUSH_REG` with no finished blocks in
    /// `_pending_d_registrations`), and its heartbeats find no lease yet.
    pub(super) fn computing(&mut self, event: SourceEvent, now: Instant, fx: &mut Fx) -> Judged {
        match event {
            SourceEvent::PrefillPinned { lease } => Ok(self.pin(lease, now, fx)),
            SourceEvent::ReaderCompleted => Err(self.invalid(&event)),
            SourceEvent::DestinationReserved { summary }
                if self.reservation.is_none() && self.policy == HandoffPolicy::Push =>
            {
                self.reservation = Some(summary);
                Ok(Next::To(SourceState::Computing))
            }
            SourceEvent::LeaseRenewed { .. }
                if self.lease.is_none() && self.policy == HandoffPolicy::Push =>
            {
                Ok(Next::Duplicate)
            }
            _ => self.any_state(event, now, fx),
        }
    }

    /// `Pinned` (source-first and push): KV held, waiting for a
    /// destination. Push, its registration starts the write at once
    /// (vLLM `_handle_push_reg_notif` pops the matching finished blocks
    /// and calls `_do_start_push_kv`).
    pub(super) fn pinned(&mut self, event: SourceEvent, now: Instant, fx: &mut Fx) -> Judged {
        match event {
            SourceEvent::DestinationReserved { summary }
                if self.reservation.is_none() && self.abandoned =>
            {
                Ok(self.reserved_after_cancel(summary, fx))
            }
            SourceEvent::DestinationReserved { summary }
                if self.reservation.is_none() && self.policy.prefill_at_arrival() =>
            {
                self.reservation = Some(summary);
                if self.policy == HandoffPolicy::Push {
                    fx.actions.push(SourceAction::StartTransfer);
                }
                Ok(Next::To(SourceState::AwaitingReaderCompletion))
            }
            _ => self.any_state(event, now, fx),
        }
    }

    /// `AwaitingReaderCompletion`: KV held until the transfer completes;
    /// every fact here is answered as in any held state.
    pub(super) fn awaiting_reader(
        &mut self,
        event: SourceEvent,
        now: Instant,
        fx: &mut Fx,
    ) -> Judged {
        self.any_state(event, now, fx)
    }

    /// The facts whose answer does not depend on the (live) state.
    fn any_state(&mut self, event: SourceEvent, now: Instant, fx: &mut Fx) -> Judged {
        match event {
            SourceEvent::Start => Ok(self.start(now, fx)),
            SourceEvent::DestinationReserved { summary } => self.reserved_again(summary, &event),
            SourceEvent::PrefillPinned { lease } => match self.lease {
                Some(held) if held.id == lease.id => Ok(Next::Duplicate),
                Some(_) => Err(self.conflict(&event)),
                None => Err(self.invalid(&event)),
            },
            SourceEvent::ReaderCompleted => match self.lease {
                Some(lease) => {
                    fx.delta.pinned = -(lease.blocks as i64);
                    fx.actions.push(SourceAction::ReleaseSource);
                    if !self.source_first() {
                        fx.actions.push(SourceAction::SendReceiveCompleted);
                    }
                    self.lease = None;
                    Ok(Next::To(SourceState::Released))
                }
                None => Err(self.invalid(&event)),
            },
            SourceEvent::LeaseRenewed { deadline } => self.renew(deadline, &event, fx),
            SourceEvent::LeaseExpired => self.expire_lease(&event, now, fx),
            SourceEvent::Cancelled { reason } if self.keeps_on_cancel(reason) => {
                if self.abandoned {
                    return Ok(Next::Duplicate);
                }
                self.abandoned = true;
                Ok(Next::To(self.state))
            }
            SourceEvent::Cancelled { reason } => Ok(self.cancel(reason, fx)),
        }
    }

    /// The request arrived (once): source-first dispatches the prefill,
    /// destination-first starts waiting for a reservation.
    fn start(&mut self, now: Instant, fx: &mut Fx) -> Next<SourceState> {
        if self.started {
            return Next::Duplicate;
        }
        self.started = true;
        if self.policy.prefill_at_arrival() {
            fx.actions.push(SourceAction::DispatchPrefill);
            Next::To(SourceState::Computing)
        } else {
            self.wait_deadline = now + self.wait_ttl;
            fx.actions.push(SourceAction::ArmLease {
                deadline: self.wait_deadline,
            });
            Next::To(SourceState::NotStarted)
        }
    }

    /// A reservation fact the state does not take: a repeat, a conflict or
    /// out of place.
    fn reserved_again(&self, summary: ReservationSummary, event: &SourceEvent) -> Judged {
        match self.reservation {
            Some(known) if known == summary => Ok(Next::Duplicate),
            Some(_) => Err(self.conflict(event)),
            None => Err(self.invalid(event)),
        }
    }

    /// The prefill finished and its KV is held under `lease`.
    fn pin(&mut self, lease: SourceLease, now: Instant, fx: &mut Fx) -> Next<SourceState> {
        self.lease = Some(lease);
        self.pinned_at = now;
        fx.delta.pinned = lease.blocks as i64;
        fx.actions.push(SourceAction::ArmLease {
            deadline: lease.deadline,
        });
        fx.actions.push(SourceAction::AnnounceReady {
            blocks: lease.blocks,
            tokens: lease.tokens,
        });
        // Push: the finished blocks wait in `_push_finished_blocks` for a
        // registration unless one came first (`_push_writer_loop`).
        let waits = match self.policy {
            HandoffPolicy::SourceFirst => true,
            HandoffPolicy::Push => self.reservation.is_none(),
            _ => false,
        };
        if waits {
            Next::To(SourceState::Pinned)
        } else {
            fx.actions.push(SourceAction::StartTransfer);
            Next::To(SourceState::AwaitingReaderCompletion)
        }
    }

    /// The destination asked for more time; only a later deadline counts.
    fn renew(&mut self, deadline: Instant, event: &SourceEvent, fx: &mut Fx) -> Judged {
        let Some(lease) = self.lease.as_mut() else {
            return Err(self.invalid(event));
        };
        if deadline <= lease.deadline {
            return Ok(Next::Duplicate);
        }
        lease.deadline = deadline;
        fx.actions.push(SourceAction::ArmLease { deadline });
        Ok(Next::To(self.state))
    }

    /// The lease timer fired: free the held KV once it is really due.
    fn expire_lease(&mut self, event: &SourceEvent, now: Instant, fx: &mut Fx) -> Judged {
        let Some(lease) = self.lease else {
            return Err(self.invalid(event));
        };
        if now < lease.deadline {
            return Err(self.premature(event));
        }
        fx.delta.pinned = -(lease.blocks as i64);
        fx.actions.push(SourceAction::ReleaseSource);
        // vLLM's prefill worker frees expired blocks and tells no one
        // (`nixl/base_worker.py`, `_get_new_notifs`): its reader reads
        // them anyway. Destination-first, the waiting destination learns.
        if !self.source_first() {
            fx.actions.push(SourceAction::SendAbort {
                reason: CancelReason::LeaseExpired,
            });
        }
        self.lease = None;
        Ok(Next::To(SourceState::Released))
    }

    /// The attempt is abandoned, whatever the live state.
    fn cancel(&mut self, reason: CancelReason, fx: &mut Fx) -> Next<SourceState> {
        if let Some(lease) = self.lease.take() {
            fx.delta.pinned = -(lease.blocks as i64);
        }
        if matches!(
            self.state,
            SourceState::Computing | SourceState::Pinned | SourceState::AwaitingReaderCompletion
        ) {
            fx.actions.push(SourceAction::CancelSource);
        }
        if !reason.peer_knows() {
            fx.actions.push(SourceAction::SendAbort { reason });
        }
        Next::To(SourceState::Released)
    }

    /// A destination reserved for a request its client had already
    /// cancelled: its route raced the cancel (a proxy would not have sent
    /// it). It is told of the cancel, and ends as a client's cancel ends
    /// it. Pull, it is already reading, so the KV stays until that read's
    /// notice or the destination's release; push, nothing is written and
    /// the KV waits for the destination's release.
    fn reserved_after_cancel(
        &mut self,
        summary: ReservationSummary,
        fx: &mut Fx,
    ) -> Next<SourceState> {
        fx.actions.push(SourceAction::SendAbort {
            reason: CancelReason::Client,
        });
        self.reservation = Some(summary);
        if self.policy == HandoffPolicy::Push {
            return Next::To(SourceState::Pinned);
        }
        Next::To(SourceState::AwaitingReaderCompletion)
    }

    /// Whether a cancel for `reason` leaves the KV held: a client's, of a
    /// vLLM prefill that already finished (a lease is held), under
    /// [`CancelFrees::Upstream`]. vLLM `v1/core/sched/scheduler.py`
    /// `finish_requests` no longer finds the request (it left
    /// `self.requests` when it finished and the NIXL connector's
    /// `request_finished` kept its blocks, `delay_free_blocks`), so the
    /// abort changes nothing for them (vllm-project/vllm PR #25067).
    fn keeps_on_cancel(&self, reason: CancelReason) -> bool {
        reason == CancelReason::Client
            && self.cancel_frees == CancelFrees::Upstream
            && self.lease.is_some()
            && matches!(
                self.policy,
                HandoffPolicy::SourceFirst | HandoffPolicy::Push
            )
    }

    fn source_first(&self) -> bool {
        self.policy == HandoffPolicy::SourceFirst
    }

    fn name(event: &SourceEvent) -> LifecycleEvent {
        LifecycleEvent::Source(event.kind())
    }

    fn invalid(&self, event: &SourceEvent) -> TransitionError {
        TransitionError::Invalid {
            id: self.id,
            state: RoleState::Source(self.state),
            event: Self::name(event),
        }
    }

    fn conflict(&self, event: &SourceEvent) -> TransitionError {
        TransitionError::Conflict {
            id: self.id,
            event: Self::name(event),
        }
    }

    fn premature(&self, event: &SourceEvent) -> TransitionError {
        TransitionError::Premature {
            id: self.id,
            event: Self::name(event),
        }
    }
}
