//! [`SourceReads`]: whether a destination's read found its source's KV
//! still held.
//!
//! A source-first destination reads KV the source pinned (vLLM: the decode
//! worker's NIXL read of the prefill worker's blocks, `nixl_connector.py`,
//! `start_load_kv`). The source frees those blocks when its role ends: after
//! the read's notification on success, or early on lease expiry,
//! cancellation or teardown. A read that ends after an early release read
//! freed blocks; upstream cannot tell and the request goes on. The engine
//! reports it as [`TransferResult::SourceReleased`], with whether the
//! source's worker had already given one of those blocks to another request
//! (its core's [`WorkerEvent::SourceKvReused`]) before the read ended; the
//! destination's [`handoff_core::StaleReadPolicy`] decides what follows.
//!
//! Only a lease expiry is such a silent release: a source ended early for
//! any other reason (a cancel, a failed transfer) tells its reader, whose
//! read fails ([`TransferResult::Failed`], then `kv_load_failure_policy`).
//! A source whose worker died (teardown) is not released but gone: the
//! read fails ([`TransferResult::SourceLost`]), a loss the serving layer
//! migrates as it migrates the other roles of a dead worker.
//!
//! Only reads started by another worker than the source are judged: a
//! destination-first sender moves its own blocks and cancels its own
//! transfer when it lets them go.

use handoff_core::fasthash::{FastMap, FastSet};
use handoff_core::{HandoffId, TransferResult, WorkerEvent, WorkerId};

/// An early release, as far as the reads of it go.
#[derive(Clone, Copy, Default)]
struct Released {
    died: bool,
    /// Released by its lease's expiry (the one early end a read may
    /// outlive, as vLLM's reader does; any other early end fails the read).
    expired: bool,
    reused: bool,
}

/// See the module docs. Memory follows the handoffs in flight plus the
/// sources released early whose destination has not ended yet.
#[derive(Default)]
pub(super) struct SourceReads {
    /// Sources holding pinned KV, by attempt, with their worker.
    held: FastMap<HandoffId, WorkerId>,
    /// Attempts whose source released its KV early (not for a finished
    /// read): whether its worker died, whether a block was reused since.
    released: FastMap<HandoffId, Released>,
    /// Reads in progress by a worker other than the source.
    reading: FastSet<HandoffId>,
}

impl SourceReads {
    /// Follows what worker `w` reported.
    pub(super) fn observe(&mut self, w: WorkerId, e: &WorkerEvent) {
        match e {
            WorkerEvent::PrefillPinned { id, .. } => {
                self.held.insert(*id, w);
            }
            WorkerEvent::StartTransfer { id, source, .. } if *source != w => {
                self.reading.insert(*id);
            }
            WorkerEvent::RoleEnded {
                id, role, reason, ..
            } => match role {
                handoff_core::Role::Source => {
                    if let (Some(_), Some(reason)) = (self.held.remove(id), reason) {
                        let died = *reason == handoff_core::CancelReason::Teardown;
                        let expired = *reason == handoff_core::CancelReason::LeaseExpired;
                        self.released.insert(
                            *id,
                            Released {
                                died,
                                expired,
                                reused: false,
                            },
                        );
                    }
                }
                handoff_core::Role::Destination => {
                    self.released.remove(id);
                    self.reading.remove(id);
                }
            },
            WorkerEvent::SourceKvReused { id, .. } => {
                if let Some(r) = self.released.get_mut(id) {
                    r.reused = true;
                }
            }
            _ => {}
        }
    }

    /// The transfer of `id` ended, well as far as the link goes (`moved`):
    /// its result for the worker that started it.
    pub(super) fn judge(&mut self, id: HandoffId, moved: bool) -> TransferResult {
        let read = self.reading.remove(&id);
        match (moved, read.then(|| self.released.get(&id)).flatten()) {
            (false, _) => TransferResult::Failed,
            (true, Some(r)) if r.died => TransferResult::SourceLost,
            (true, Some(r)) if !r.expired => TransferResult::Failed,
            (true, Some(r)) => TransferResult::SourceReleased { reused: r.reused },
            (true, None) => TransferResult::Completed,
        }
    }

    /// Early-released sources still remembered (for tests and accounting).
    #[cfg(test)]
    fn remembered(&self) -> usize {
        self.held.len() + self.released.len() + self.reading.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_core::{CancelReason, Instant, RequestId, Role};

    const P: WorkerId = WorkerId(0);
    const D: WorkerId = WorkerId(1);

    fn id(n: u64) -> HandoffId {
        HandoffId(u128::from(n))
    }

    fn pinned(n: u64) -> WorkerEvent {
        WorkerEvent::PrefillPinned {
            id: id(n),
            request: RequestId(n),
            blocks: 1,
            tokens: 16,
            at: Instant::ZERO,
        }
    }

    fn read(n: u64) -> WorkerEvent {
        WorkerEvent::StartTransfer {
            id: id(n),
            request: RequestId(n),
            source: P,
            destination: D,
            tokens: 16,
            blocks: 1,
            at: Instant::ZERO,
        }
    }

    fn ended(n: u64, role: Role, reason: Option<CancelReason>) -> WorkerEvent {
        WorkerEvent::RoleEnded {
            id: id(n),
            request: RequestId(n),
            role,
            reason,
            at: Instant::ZERO,
        }
    }

    #[test]
    fn a_read_of_a_held_source_completes() {
        let mut r = SourceReads::default();
        r.observe(P, &pinned(1));
        r.observe(D, &read(1));
        assert_eq!(r.judge(id(1), true), TransferResult::Completed);
        assert_eq!(r.judge(id(1), false), TransferResult::Failed);
    }

    #[test]
    fn a_read_after_or_during_an_early_release_is_stale() {
        {
            let reason = CancelReason::LeaseExpired;
            let mut r = SourceReads::default();
            r.observe(P, &pinned(1));
            r.observe(P, &ended(1, Role::Source, Some(reason)));
            r.observe(D, &read(1));
            assert_eq!(
                r.judge(id(1), true),
                TransferResult::SourceReleased { reused: false }
            );
            // Released while the read is under way, a block reused before
            // it ended.
            r.observe(P, &pinned(2));
            r.observe(D, &read(2));
            r.observe(P, &ended(2, Role::Source, Some(reason)));
            r.observe(
                P,
                &WorkerEvent::SourceKvReused {
                    id: id(2),
                    at: Instant::ZERO,
                },
            );
            assert_eq!(
                r.judge(id(2), true),
                TransferResult::SourceReleased { reused: true }
            );
            r.observe(
                D,
                &ended(1, Role::Destination, Some(CancelReason::KvLoadFailed)),
            );
            r.observe(
                D,
                &ended(2, Role::Destination, Some(CancelReason::KvLoadFailed)),
            );
            assert_eq!(r.remembered(), 0, "{reason:?}");
        }
    }

    #[test]
    fn a_read_of_a_source_cancelled_early_fails() {
        // Only a lease expiry is silent; a cancel's release fails the read.
        let mut r = SourceReads::default();
        r.observe(P, &pinned(1));
        r.observe(D, &read(1));
        r.observe(P, &ended(1, Role::Source, Some(CancelReason::Client)));
        assert_eq!(r.judge(id(1), true), TransferResult::Failed);
    }

    #[test]
    fn a_read_from_a_dead_source_fails_as_a_transfer() {
        let mut r = SourceReads::default();
        r.observe(P, &pinned(1));
        r.observe(D, &read(1));
        r.observe(P, &ended(1, Role::Source, Some(CancelReason::Teardown)));
        assert_eq!(r.judge(id(1), true), TransferResult::SourceLost);
    }

    #[test]
    fn a_release_after_the_read_and_a_senders_own_transfer_are_not_judged() {
        let mut r = SourceReads::default();
        r.observe(P, &pinned(1));
        r.observe(D, &read(1));
        assert_eq!(r.judge(id(1), true), TransferResult::Completed);
        r.observe(P, &ended(1, Role::Source, None));
        r.observe(D, &ended(1, Role::Destination, None));
        // Destination-first: the source starts (and owns) its transfer.
        r.observe(P, &pinned(2));
        r.observe(P, &ended(2, Role::Source, Some(CancelReason::Client)));
        let own = WorkerEvent::StartTransfer {
            id: id(2),
            request: RequestId(2),
            source: P,
            destination: D,
            tokens: 16,
            blocks: 1,
            at: Instant::ZERO,
        };
        r.observe(P, &own);
        assert_eq!(r.judge(id(2), true), TransferResult::Completed);
    }
}
