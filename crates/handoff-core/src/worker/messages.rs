//! Facts from peers: delivery to the target role, early facts buffered
//! until their role exists, and tombstones for ended attempts.

use super::{DropReason, EarlyFact, Ended, TimerKind, Worker, WorkerEvent};
use crate::destination::{DestinationEvent, SourceReady};
use crate::ids::{HandoffId, WorkerId};
use crate::msg::{FactKind, HandoffMsg, MsgBody, Role};
use crate::policy::{CancelFrees, HandoffPolicy};
use crate::scheduler::SchedulerCore;
use crate::source::SourceEvent;
use crate::time::{Duration, Instant};
use crate::transition::{CancelReason, LifecycleEvent, TransitionError};

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
    /// Takes a fact from peer `from`.
    pub fn handle_message(&mut self, from: WorkerId, msg: HandoffMsg, now: Instant) {
        self.deliver(from, msg, now, true);
        self.pump_reservations(now);
        self.flush_kv(now);
    }

    fn deliver(&mut self, from: WorkerId, msg: HandoffMsg, now: Instant, may_buffer: bool) {
        match self.peer_generation(from) {
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
            if let Some(&ended) = self.tombstone_set.get(&id) {
                self.stats.stale += 1;
                let e = TransitionError::Stale {
                    id,
                    event: role_event(&msg.body),
                };
                self.drop_fact(from, &msg, DropReason::Rejected(e), now);
                if let (Ended::Unannounced(reason), MsgBody::DestinationReserved { .. }) =
                    (ended, &msg.body)
                {
                    self.tombstone_set.insert(id, Ended::Announced);
                    let to = Role::Destination;
                    self.send(from, id, MsgBody::Abort { reason, to }, now);
                }
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
                let pinned_at = entry.role.pinned_at();
                if self.policy == HandoffPolicy::Push && pinned_at > now {
                    self.defer(from, msg, pinned_at);
                    return;
                }
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
                let upstream = entry.role.cancel_frees() == CancelFrees::Upstream;
                let ev = match msg.body {
                    MsgBody::SourceReady { blocks, tokens } => {
                        DestinationEvent::SourceReady(SourceReady { blocks, tokens })
                    }
                    MsgBody::ReceiveCompleted => DestinationEvent::ReceiveCompleted,
                    // An abandoned source's word that the client cancelled:
                    // this destination was routed after the cancel (the
                    // frontend's route raced it), so it ends as the client's
                    // cancel would have ended it.
                    MsgBody::Abort {
                        reason: CancelReason::Client,
                        ..
                    } if upstream => DestinationEvent::Cancelled {
                        reason: CancelReason::Client,
                    },
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

    /// Holds a fact for a push source until `until`, the end of the step
    /// that pins it ([`Worker::deliver_deferred`] takes it up then).
    fn defer(&mut self, from: WorkerId, msg: HandoffMsg, until: Instant) {
        let id = msg.id;
        let facts = self.deferred.entry(id).or_default();
        let first = facts.is_empty();
        facts.push(EarlyFact { from, msg });
        if first {
            self.arm(until, id, TimerKind::Deferred);
        }
    }

    /// The facts held for `id` by [`Worker::defer`], in arrival order.
    pub(super) fn deliver_deferred(&mut self, id: HandoffId, now: Instant) {
        for f in self.deferred.remove(&id).unwrap_or_default() {
            self.deliver(f.from, f.msg, now, false);
        }
    }

    pub(super) fn replay_early(&mut self, id: HandoffId, now: Instant) {
        if let Some((_, facts)) = self.early.remove(&id) {
            for f in facts {
                self.deliver(f.from, f.msg, now, false);
            }
        }
    }

    pub(super) fn drop_fact(
        &mut self,
        from: WorkerId,
        msg: &HandoffMsg,
        reason: DropReason,
        now: Instant,
    ) {
        self.events.push_back(WorkerEvent::Dropped {
            from,
            id: msg.id,
            fact: msg.body.kind(),
            reason,
            at: now,
        });
    }

    pub(super) fn tombstone(&mut self, id: HandoffId, ended: Ended) {
        if self.config.tombstones == 0 {
            return;
        }
        if self.tombstones.len() >= self.config.tombstones {
            if let Some(old) = self.tombstones.pop_front() {
                self.tombstone_set.remove(&old);
            }
        }
        self.tombstones.push_back(id);
        self.tombstone_set.insert(id, ended);
    }

    pub(super) fn reject(
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
}
