//! The destination side: feeding facts to destination roles and running
//! the actions they return against the core.

use super::{Ended, TimerKind, Worker, WorkerEvent};
use crate::destination::{DestinationAction, DestinationEvent, DestinationState};
use crate::ids::{HandoffId, RequestId, WorkerId};
use crate::msg::{FactKind, MsgBody, Role};
use crate::scheduler::{CommandOutcome, SchedulerCommand, SchedulerCore};
use crate::time::Instant;
use crate::transition::{CancelReason, LifecycleEvent, RoleState};

impl<S: SchedulerCore> Worker<S> {
    pub(super) fn dest_event(&mut self, id: HandoffId, ev: DestinationEvent, now: Instant) {
        self.dest_event_from(id, ev, now, None);
    }

    pub(super) fn dest_event_from(
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
            let abandoned = self.dests.remove(&id).is_some_and(|e| e.role.abandoned());
            self.active_dest.remove(&request_id);
            self.tombstone(id, Ended::Announced);
            // An active destination ignores its source's fate (the role
            // treats that as a duplicate), so a cancel that ends it is a
            // client cancel or a teardown, which abort its request too: an
            // early end either way.
            let _ = from;
            let reason = match ev {
                DestinationEvent::Cancelled { reason } => Some(reason),
                DestinationEvent::ReservationExpired => Some(CancelReason::ReservationExpired),
                DestinationEvent::Unsupported => Some(CancelReason::Unsupported),
                // A client cancelled it while its load was in flight: it
                // ended for that cancel when the load did.
                DestinationEvent::ReceiveCompleted if abandoned => Some(CancelReason::Client),
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
}
