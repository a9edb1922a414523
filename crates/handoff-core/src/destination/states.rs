//! One handler per live destination state: each takes the facts that mean
//! something special in its state and hands the rest to
//! [`DestinationHandoff::any_state`], whose answers (repeats, conflicts,
//! cancellation, facts out of place) do not depend on the state. Unlike
//! rustls's one type per state, the role's data is one struct; a
//! handler's guards on its `Option` fields stand where a state's own type
//! would.

use super::DestinationState as S;
use super::{DestinationAction as A, DestinationEvent, DestinationHandoff, SourceReady};
use crate::ids::WorkerId;
use crate::policy::{CancelFrees, HandoffPolicy};
use crate::scheduler::ReservationSummary;
use crate::time::Instant;
use crate::transition::{CancelReason, Effects, LifecycleEvent, Next, RoleState, TransitionError};

type Fx = Effects<A>;
type Judged = Result<Next<S>, TransitionError>;

impl DestinationHandoff {
    /// `NotRouted`: only a routing fact moves it.
    pub(super) fn not_routed(
        &mut self,
        event: DestinationEvent,
        now: Instant,
        fx: &mut Fx,
    ) -> Judged {
        match event {
            DestinationEvent::Routed { source, ready } => Ok(self.route(source, ready, now, fx)),
            _ => self.any_state(event, fx),
        }
    }

    /// `Routed` (source-first): waiting for the source's announcement.
    pub(super) fn routed(&mut self, event: DestinationEvent, now: Instant, fx: &mut Fx) -> Judged {
        match event {
            DestinationEvent::SourceReady(info) if self.ready.is_none() && self.source_first() => {
                self.ready = Some(info);
                fx.actions.push(A::QueueReservation);
                Ok(Next::To(S::Reserving))
            }
            DestinationEvent::ReservationExpired => self.expire(&event, now, fx),
            _ => self.any_state(event, fx),
        }
    }

    /// `Reserving`: queued for a physical reservation.
    pub(super) fn reserving(
        &mut self,
        event: DestinationEvent,
        now: Instant,
        fx: &mut Fx,
    ) -> Judged {
        match event {
            DestinationEvent::SourceReady(info) if self.ready.is_none() => {
                Ok(self.note_ready(info))
            }
            DestinationEvent::Reserved { summary } if self.reservation.is_none() => {
                Ok(self.reserve(summary, now, fx))
            }
            DestinationEvent::Unavailable => {
                if self.unavailable_seen {
                    return Ok(Next::Duplicate);
                }
                self.unavailable_seen = true;
                fx.actions.push(A::SendLeaseRenewal);
                Ok(Next::To(S::Reserving))
            }
            DestinationEvent::Unsupported => {
                fx.actions.push(A::SendAbort {
                    reason: CancelReason::Unsupported,
                });
                Ok(Next::To(S::Released))
            }
            DestinationEvent::ReservationExpired => self.expire(&event, now, fx),
            _ => self.any_state(event, fx),
        }
    }

    /// `Reserved` (destination-first): waiting for the source to start.
    pub(super) fn reserved(
        &mut self,
        event: DestinationEvent,
        now: Instant,
        fx: &mut Fx,
    ) -> Judged {
        match event {
            DestinationEvent::SourceReady(info) if self.ready.is_none() && !self.source_first() => {
                self.ready = Some(info);
                Ok(Next::To(S::Receiving))
            }
            DestinationEvent::ReceiveCompleted => Ok(self.activate(fx)),
            DestinationEvent::ReservationExpired => self.expire(&event, now, fx),
            _ => self.any_state(event, fx),
        }
    }

    /// `Receiving`: KV is moving into the reservation.
    pub(super) fn receiving(
        &mut self,
        event: DestinationEvent,
        now: Instant,
        fx: &mut Fx,
    ) -> Judged {
        match event {
            DestinationEvent::SourceReady(info) if self.ready.is_none() => {
                Ok(self.note_ready(info))
            }
            DestinationEvent::ReceiveCompleted if self.abandoned => Ok(self.load_ended(fx)),
            DestinationEvent::ReceiveCompleted => Ok(self.activate(fx)),
            DestinationEvent::ReservationExpired => self.expire(&event, now, fx),
            DestinationEvent::Cancelled { reason } if self.keeps_on_cancel(reason) => {
                if self.abandoned {
                    return Ok(Next::Duplicate);
                }
                self.abandoned = true;
                Ok(Next::To(S::Receiving))
            }
            _ => self.any_state(event, fx),
        }
    }

    /// The load of an abandoned role ended: its blocks are freed now, and
    /// (source-first) the read's notice goes to the source as after any
    /// read, which frees the source's KV (vLLM: the NIXL read's completion
    /// notification; the decode scheduler frees the aborted request's
    /// blocks when `finished_recving` reports the load, PR #32255).
    fn load_ended(&mut self, fx: &mut Fx) -> Next<S> {
        fx.delta.reserved = -self.physical();
        fx.actions.push(A::CancelDestination);
        if self.source_first() {
            fx.actions.push(A::SendReaderCompleted);
        }
        self.deadline = Instant::MAX;
        Next::To(S::Released)
    }

    /// Whether a cancel for `reason` waits for the load in flight: a
    /// client's, of vLLM's orders, under [`CancelFrees::Upstream`].
    fn keeps_on_cancel(&self, reason: CancelReason) -> bool {
        reason == CancelReason::Client
            && self.cancel_frees == CancelFrees::Upstream
            && matches!(
                self.policy,
                HandoffPolicy::SourceFirst | HandoffPolicy::Push
            )
    }

    /// `Active`: the KV is valid and the request decodes from it.
    pub(super) fn active(&mut self, event: DestinationEvent, fx: &mut Fx) -> Judged {
        match event {
            DestinationEvent::SourceReady(info) if self.ready.is_none() => {
                Ok(self.note_ready(info))
            }
            DestinationEvent::ReceiveCompleted => Ok(Next::Duplicate),
            DestinationEvent::Finished => Ok(Next::To(S::Released)),
            _ => self.any_state(event, fx),
        }
    }

    /// The facts whose answer does not depend on the (live) state.
    fn any_state(&mut self, event: DestinationEvent, fx: &mut Fx) -> Judged {
        match event {
            DestinationEvent::Routed { source, .. } => {
                if self.source == Some(source) {
                    Ok(Next::Duplicate)
                } else {
                    Err(self.conflict(&event))
                }
            }
            DestinationEvent::SourceReady(_) if self.ready.is_some() => Ok(Next::Duplicate),
            DestinationEvent::Reserved { summary } => match self.reservation {
                Some(known) if known == summary => Ok(Next::Duplicate),
                Some(_) => Err(self.conflict(&event)),
                None => Err(self.invalid(&event)),
            },
            DestinationEvent::Cancelled { reason } => Ok(self.cancel(reason, fx)),
            _ => Err(self.invalid(&event)),
        }
    }

    /// A router chose this worker: start the reservation clock, and queue
    /// for a reservation unless source-first still waits for the source.
    fn route(
        &mut self,
        source: WorkerId,
        ready: Option<SourceReady>,
        now: Instant,
        fx: &mut Fx,
    ) -> Next<S> {
        self.source = Some(source);
        self.ready = ready;
        self.deadline = now + self.reservation_ttl;
        fx.actions.push(A::ArmReservation {
            deadline: self.deadline,
        });
        if !self.source_first() || ready.is_some() {
            fx.actions.push(A::QueueReservation);
            Next::To(S::Reserving)
        } else {
            Next::To(S::Routed)
        }
    }

    /// The announcement overtook our own reservation outcome or arrived
    /// after the KV: remember it, stay put.
    fn note_ready(&mut self, info: SourceReady) -> Next<S> {
        self.ready = Some(info);
        Next::To(self.state)
    }

    /// The scheduler reserved: tell the source, and (source-first) start
    /// pulling.
    fn reserve(&mut self, summary: ReservationSummary, now: Instant, fx: &mut Fx) -> Next<S> {
        self.reservation = Some(summary);
        self.deadline = now + self.reservation_ttl;
        fx.delta.reserved = summary.physical_blocks as i64;
        fx.actions.push(A::SendDestinationReserved { summary });
        fx.actions.push(A::ArmReservation {
            deadline: self.deadline,
        });
        if self.source_first() {
            fx.actions.push(A::StartTransfer);
            Next::To(S::Receiving)
        } else {
            Next::To(S::Reserved)
        }
    }

    /// The incoming KV is valid: the reservation becomes a running request.
    fn activate(&mut self, fx: &mut Fx) -> Next<S> {
        let physical = self.physical();
        fx.delta.reserved = -physical;
        fx.delta.active = physical;
        fx.actions.push(A::ActivateDestination);
        if self.source_first() {
            fx.actions.push(A::SendReaderCompleted);
        }
        self.deadline = Instant::MAX;
        Next::To(S::Active)
    }

    /// The reservation timer fired: give up once it is really due.
    fn expire(&mut self, event: &DestinationEvent, now: Instant, fx: &mut Fx) -> Judged {
        if now < self.deadline {
            return Err(TransitionError::Premature {
                id: self.id,
                event: Self::name(event),
            });
        }
        fx.delta.reserved = -self.physical();
        if self.state == S::Reserving {
            fx.actions.push(A::DequeueReservation);
        } else if self.state != S::Routed {
            fx.actions.push(A::CancelDestination);
        }
        fx.actions.push(A::SendAbort {
            reason: CancelReason::ReservationExpired,
        });
        self.deadline = Instant::MAX;
        Ok(Next::To(S::Released))
    }

    /// The attempt is abandoned.
    fn cancel(&mut self, reason: CancelReason, fx: &mut Fx) -> Next<S> {
        let from = self.state;
        // Once active the handoff has succeeded: the KV is here and
        // the request decodes from it, so its peer giving up, being
        // lost or restarting changes nothing (ending the role would
        // report the request failed while it decodes on).
        if from == S::Active && reason.peer_knows() {
            return Next::Duplicate;
        }
        match from {
            S::Reserving => fx.actions.push(A::DequeueReservation),
            S::Reserved | S::Receiving => {
                fx.delta.reserved = -self.physical();
                fx.actions.push(A::CancelDestination);
            }
            // A local cancel (client, teardown) of an active
            // destination aborts the request it is decoding.
            S::Active => fx.actions.push(A::CancelDestination),
            _ => {}
        }
        // Once active the handoff has succeeded; the peer needs no abort.
        if from != S::Active && !reason.peer_knows() {
            fx.actions.push(A::SendAbort { reason });
        }
        self.deadline = Instant::MAX;
        Next::To(S::Released)
    }

    fn source_first(&self) -> bool {
        self.policy == HandoffPolicy::SourceFirst
    }

    /// Physical blocks the reservation holds (0 before one).
    fn physical(&self) -> i64 {
        self.reservation.map_or(0, |r| r.physical_blocks as i64)
    }

    fn name(event: &DestinationEvent) -> LifecycleEvent {
        LifecycleEvent::Destination(event.kind())
    }

    fn invalid(&self, event: &DestinationEvent) -> TransitionError {
        TransitionError::Invalid {
            id: self.id,
            state: RoleState::Destination(self.state),
            event: Self::name(event),
        }
    }

    fn conflict(&self, event: &DestinationEvent) -> TransitionError {
        TransitionError::Conflict {
            id: self.id,
            event: Self::name(event),
        }
    }
}
