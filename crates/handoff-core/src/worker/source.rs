//! The source side: feeding facts to source roles and running the actions
//! they return against the core.

use super::{Ended, PushRole, TimerKind, Worker, WorkerEvent};
use crate::ids::{HandoffId, RequestId, WorkerId};
use crate::msg::{FactKind, MsgBody, Role};
use crate::policy::HandoffPolicy;
use crate::scheduler::{CommandOutcome, SchedulerCommand, SchedulerCore};
use crate::source::{SourceAction, SourceEvent, SourceLease, SourceState};
use crate::state::DestinationState;
use crate::time::Instant;
use crate::transition::{CancelReason, LifecycleEvent, RoleState};

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

impl<S: SchedulerCore> Worker<S> {
    pub(super) fn source_event(&mut self, id: HandoffId, ev: SourceEvent, now: Instant) {
        self.source_event_from(id, ev, now, None);
    }

    pub(super) fn source_event_from(
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
        // Source-first, a reader may still read KV freed early: the core
        // notes when those blocks go to another request.
        let early = self.policy == HandoffPolicy::SourceFirst
            && matches!(
                ev,
                SourceEvent::LeaseExpired | SourceEvent::Cancelled { .. }
            );
        for action in actions.iter() {
            if early
                && matches!(
                    action,
                    SourceAction::ReleaseSource | SourceAction::CancelSource
                )
                && self.sources.get(&id).is_some_and(|e| e.push.is_none())
            {
                self.core.watch_released(id);
            }
            self.run_source_action(id, request_id, action, now);
        }
        if to == SourceState::Released {
            let peer = self.sources.remove(&id).and_then(|e| e.peer);
            let reason = match ev {
                SourceEvent::Cancelled { reason } => Some(reason),
                SourceEvent::LeaseExpired => Some(CancelReason::LeaseExpired),
                _ => None,
            };
            // Destination-first and push: the source tells its destination
            // its KV is ready once the destination's reservation names it;
            // one that ended first leaves the destination waiting for that.
            let destination_first = self.policy.source_writes();
            let ended = match (peer, reason) {
                (None, Some(r)) if destination_first => Ended::Unannounced(r),
                _ => Ended::Announced,
            };
            self.tombstone(id, ended);
            self.events.push_back(WorkerEvent::RoleEnded {
                id,
                request: request_id,
                role: Role::Source,
                reason,
                at: now,
            });
        }
    }

    /// The actions a push's source runs differently (its KV is a locked
    /// slot's, not a prefill's); whether `action` was one of them.
    fn run_push_action(
        &mut self,
        id: HandoffId,
        action: SourceAction,
        p: PushRole,
        now: Instant,
    ) -> bool {
        match action {
            // A push computes nothing: its KV is the locked slot's, pinned
            // since the turn committed.
            SourceAction::DispatchPrefill => {
                let lease = SourceLease {
                    id: p.lock,
                    blocks: p.tokens.div_ceil(u64::from(self.caps.block_size.max(1))),
                    tokens: p.tokens,
                    deadline: now + self.caps.source_lease_ttl,
                };
                self.source_event(id, SourceEvent::PrefillPinned { lease }, now);
                true
            }
            SourceAction::ReleaseSource => {
                let result = crate::session::PushResult::Sent;
                self.core.apply(
                    SchedulerCommand::FinishPush {
                        session: p.session,
                        lock: p.lock,
                        result,
                    },
                    now,
                );
                true
            }
            SourceAction::CancelSource => {
                let reason = p.failure.unwrap_or(crate::session::PushFailure::Refused);
                self.core.apply(
                    SchedulerCommand::FinishPush {
                        session: p.session,
                        lock: p.lock,
                        result: crate::session::PushResult::Failed(reason),
                    },
                    now,
                );
                true
            }
            _ => false,
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
        if let Some(p) = push {
            if self.run_push_action(id, action, p, now) {
                return;
            }
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

    /// A source-first destination's heartbeat ([`crate::policy::Heartbeat`]):
    /// until its read is done it tells its source to keep the KV, and arms
    /// the next one.
    pub(super) fn heartbeat(&mut self, id: HandoffId, now: Instant) {
        let Some(hb) = self.config.heartbeat else {
            return;
        };
        let Some(e) = self.dests.get(&id) else {
            return;
        };
        if matches!(
            e.role.state(),
            DestinationState::Active | DestinationState::Released
        ) {
            return;
        }
        let Some(source) = e.role.source() else {
            return;
        };
        let extend_nanos = u64::try_from(hb.extend.as_nanos()).unwrap_or(u64::MAX);
        self.send(source, id, MsgBody::LeaseRenewal { extend_nanos }, now);
        self.arm(now + hb.every, id, TimerKind::Heartbeat);
    }

    /// Asks the source to extend its lease (when this worker renews) and
    /// arms the next renewal at half the extension, so a destination that
    /// waits for room keeps the source's KV alive instead of letting it
    /// expire. vLLM itself never renews; the default config does not either.
    pub(super) fn renew_source_lease(&mut self, id: HandoffId, now: Instant) {
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
}
