//! Endings from outside the roles: transfer outcomes, cancellation, lost
//! or restarted peers, teardown and restart.

use super::{sorted, Worker, WorkerEvent};
use crate::destination::DestinationEvent;
use crate::ids::{Generation, HandoffId, WorkerId};
use crate::kv::KvEvent;
use crate::policy::{HandoffPolicy, StaleReadPolicy};
use crate::scheduler::SchedulerCore;
use crate::source::SourceEvent;
use crate::time::Instant;
use crate::transition::{CancelReason, TransferResult};

impl<S: SchedulerCore> Worker<S> {
    /// The transfer this worker started for `id` ended with `result`.
    pub fn handle_transfer_done(&mut self, id: HandoffId, result: TransferResult, now: Instant) {
        if let Some(request) = self.dests.get(&id).map(|e| e.request_id) {
            let source_first = self.policy == HandoffPolicy::SourceFirst;
            let ev = match result {
                TransferResult::Completed => DestinationEvent::ReceiveCompleted,
                TransferResult::SourceReleased { reused }
                    if self.config.stale_read == StaleReadPolicy::Complete =>
                {
                    self.events.push_back(WorkerEvent::StaleRead {
                        id,
                        request,
                        reused,
                        at: now,
                    });
                    DestinationEvent::ReceiveCompleted
                }
                // vLLM's connector reports a failed read as invalid blocks
                // (`_handle_failed_transfer`): `kv_load_failure_policy`.
                TransferResult::Failed if source_first => DestinationEvent::Cancelled {
                    reason: CancelReason::KvLoadFailed,
                },
                _ => DestinationEvent::Cancelled {
                    reason: result.failure().unwrap_or(CancelReason::TransferFailed),
                },
            };
            self.dest_event(id, ev, now);
        } else if self.sources.contains_key(&id) {
            // A sender's own transfer: whatever went wrong, its read failed.
            let ev = match result {
                TransferResult::Completed => SourceEvent::ReaderCompleted,
                _ => SourceEvent::Cancelled {
                    reason: CancelReason::TransferFailed,
                },
            };
            self.source_event(id, ev, now);
        } else {
            self.stats.stale += 1;
        }
        self.pump_reservations(now);
        self.flush_kv(now);
    }

    /// Abandons attempt `id` on this worker (client abort, frontend guard).
    pub fn cancel(&mut self, id: HandoffId, reason: CancelReason, now: Instant) {
        if self.sources.contains_key(&id) {
            self.source_event(id, SourceEvent::Cancelled { reason }, now);
        }
        if self.dests.contains_key(&id) {
            self.dest_event(id, DestinationEvent::Cancelled { reason }, now);
        }
        self.pump_reservations(now);
        self.flush_kv(now);
    }

    /// The transport to `peer` is gone: every attempt with it ends locally,
    /// without waiting for a final message.
    pub fn handle_peer_lost(&mut self, peer: WorkerId, now: Instant) {
        self.cancel_peer(peer, CancelReason::PeerLost, now);
        self.pump_reservations(now);
        self.flush_kv(now);
    }

    /// `peer` announced (e.g. in a transport hello) that it is now
    /// `generation`. A newer generation voids every attempt with it; a
    /// peer not heard of before is at [`Generation::FIRST`].
    pub fn handle_peer_generation(&mut self, peer: WorkerId, generation: Generation, now: Instant) {
        match self.peer_generation(peer) {
            Some(g) if generation > g => self.peer_restarted(peer, generation, now),
            None => {
                self.peers.insert(peer, generation);
            }
            _ => {}
        }
        self.pump_reservations(now);
        self.flush_kv(now);
    }

    /// The generation `peer` is known at: the one last heard, else
    /// [`Generation::FIRST`] for any other worker (a deployment starts every
    /// worker there, so hearing it needs no entry: the transports' hello
    /// at start is implied), else none (this worker itself, before it sent
    /// itself a fact).
    pub(super) fn peer_generation(&self, peer: WorkerId) -> Option<Generation> {
        match self.peers.get(&peer) {
            Some(g) => Some(*g),
            None if peer != self.id => Some(Generation::FIRST),
            None => None,
        }
    }

    pub(super) fn peer_restarted(&mut self, peer: WorkerId, generation: Generation, now: Instant) {
        self.peers.insert(peer, generation);
        self.cancel_peer(peer, CancelReason::PeerRestarted, now);
    }

    fn cancel_peer(&mut self, peer: WorkerId, reason: CancelReason, now: Instant) {
        let src = sorted(
            self.sources
                .iter()
                .filter(|(_, e)| e.peer == Some(peer))
                .map(|(id, _)| *id)
                .collect(),
        );
        for id in src {
            self.source_event(id, SourceEvent::Cancelled { reason }, now);
        }
        let dst = sorted(
            self.dests
                .iter()
                .filter(|(_, e)| e.role.source() == Some(peer))
                .map(|(id, _)| *id)
                .collect(),
        );
        for id in dst {
            self.dest_event(id, DestinationEvent::Cancelled { reason }, now);
        }
    }

    /// Ends every role here, releasing all local ownership (shutdown, or
    /// replay teardown with unresolved handoffs).
    pub fn teardown(&mut self, now: Instant) {
        let src = sorted(self.sources.keys().copied().collect());
        for id in src {
            self.source_event(
                id,
                SourceEvent::Cancelled {
                    reason: CancelReason::Teardown,
                },
                now,
            );
        }
        let dst = sorted(self.dests.keys().copied().collect());
        for id in dst {
            self.dest_event(
                id,
                DestinationEvent::Cancelled {
                    reason: CancelReason::Teardown,
                },
                now,
            );
        }
        self.flush_kv(now);
    }

    /// Restarts as the next generation with a fresh core: every role ends
    /// locally first (peers learn from the new generation, not from us).
    pub fn restart(&mut self, core: S, now: Instant) {
        self.teardown(now);
        self.core = core;
        self.caps = self.core.capabilities();
        self.generation = self.generation.next();
        self.active_dest.clear();
        self.reserve_queue.clear();
        self.early.clear();
        self.deferred.clear();
        self.events.push_back(WorkerEvent::Kv {
            event: KvEvent {
                event_id: u64::MAX,
                data: crate::kv::KvEventData::Cleared,
            },
            at: now,
        });
    }
}
