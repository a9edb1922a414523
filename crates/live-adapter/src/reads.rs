//! [`NodeReads`]: on the wall clock, whether a destination's read found
//! its source's KV still held, judged as the engine judges it in replay
//! (`handoff_engine`'s `engine/reads.rs`, `SourceReads`).
//!
//! A source-first destination reads KV its source pinned (vLLM: the decode
//! worker's NIXL read of the prefill worker's blocks, `nixl_connector.py`,
//! `start_load_kv`). If the source's lease expired before or while the read
//! ran, the read is stale ([`TransferResult::SourceReleased`]), and reused
//! if the source's worker had given one of those blocks to another request
//! before the read ended; the destination's `StaleReadPolicy` decides what
//! follows. After any other early release (a cancel) the read fails.
//!
//! In replay one engine sees both sides. On the wall clock the source and
//! the reader are different processes, so each node keeps its half, sans-IO:
//!
//! - **Source side**: a source pinned here remembers which worker reads it
//!   (the peer its facts go to or come from). When it is released early it
//!   answers with a notice for that reader ([`Frame::SourceReleased`],
//!   sent by the node), and again when its core first reallocates one of
//!   its blocks (the same frame with `reused_at`). If the reader was not
//!   known yet (vLLM's lease runs out before the decode worker ever
//!   spoke), the release is remembered, bounded, and the reader's first
//!   later fact about it gets the notice.
//! - **Reader side**: the reads this worker started of another worker's
//!   KV, and the notices received. A read that completes after its
//!   source's notice arrived is stale.
//!
//! What this cannot see: a notice still on the wire when the read
//! completes (less than one loopback hop earlier, in wall time). A source
//! whose process died is not judged here: the reader's node hears the loss
//! and its worker ends the attempt (`Worker::handle_peer_lost`), which
//! voids the read.
//!
//! Memory: entries follow pinned sources and reads in flight; notices,
//! unclaimed releases and told readers are capped at
//! [`NodeReads::REMEMBERED`] each, oldest forgotten first.

use handoff_core::fasthash::{FastMap, FastSet};
use handoff_core::{
    CancelReason, HandoffId, HandoffMsg, Instant, MsgBody, Role, TransferResult, WorkerEvent,
    WorkerId,
};
use handoff_transport::Frame;
use std::collections::VecDeque;

/// A notice for a reader: send `frame` to worker `to`.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    /// The worker reading (or about to read) the released KV.
    pub to: WorkerId,
    /// A [`Frame::SourceReleased`].
    pub frame: Frame,
}

/// An early release: when, and when a block of it was first reused.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Release {
    at: Instant,
    reused_at: Option<Instant>,
    /// Released by its lease's expiry: a read may outlive only that (as
    /// vLLM's reader does); after any other early end the read fails.
    expired: bool,
}

/// Values remembered by attempt, oldest first, at most
/// [`NodeReads::REMEMBERED`].
struct Remembered<V> {
    at: FastMap<HandoffId, V>,
    order: VecDeque<HandoffId>,
}

impl<V> Default for Remembered<V> {
    fn default() -> Self {
        Remembered {
            at: FastMap::default(),
            order: VecDeque::new(),
        }
    }
}

impl<V> Remembered<V> {
    fn insert(&mut self, id: HandoffId, v: V) {
        if self.at.insert(id, v).is_none() {
            self.order.push_back(id);
        }
        while self.order.len() > NodeReads::REMEMBERED {
            if let Some(old) = self.order.pop_front() {
                self.at.remove(&old);
            }
        }
    }

    fn remove(&mut self, id: HandoffId) -> Option<V> {
        let v = self.at.remove(&id)?;
        self.order.retain(|x| *x != id);
        Some(v)
    }

    fn contains(&self, id: HandoffId) -> bool {
        self.at.contains_key(&id)
    }

    fn len(&self) -> usize {
        self.at.len()
    }
}

/// One node's half of read judgment; see the module docs.
#[derive(Default)]
pub struct NodeReads {
    /// Sources pinned here, with their reader once known.
    pinned: FastMap<HandoffId, Option<WorkerId>>,
    /// Sources released early before their reader was known.
    unclaimed: Remembered<Release>,
    /// Sources released early whose reader was told, for the reuse notice
    /// (with whether the release was a lease expiry).
    told: Remembered<(WorkerId, bool)>,
    /// Reads this worker runs of another worker's KV.
    reading: FastSet<HandoffId>,
    /// Notices received: sources released early, by attempt.
    released: Remembered<Release>,
}

impl NodeReads {
    /// Notices and unclaimed releases each kept at most (a release older
    /// than this many others is forgotten; the worker's tombstone ring
    /// forgets released attempts the same way).
    pub const REMEMBERED: usize = 4096;

    /// Follows an event worker `me` emitted; a source released early, or
    /// whose freed blocks were reused, answers with a notice for its reader.
    pub fn on_event(&mut self, me: WorkerId, e: &WorkerEvent) -> Option<Notice> {
        match e {
            WorkerEvent::PrefillPinned { id, .. } => {
                self.pinned.entry(*id).or_insert(None);
                None
            }
            WorkerEvent::StartTransfer { id, source, .. } if *source != me => {
                self.reading.insert(*id);
                None
            }
            WorkerEvent::RoleEnded {
                id,
                role: Role::Source,
                reason,
                at,
                ..
            } => {
                let reader = self.pinned.remove(id)?;
                if !reason.is_some_and(released_early) {
                    return None;
                }
                let release = Release {
                    at: *at,
                    reused_at: None,
                    expired: *reason == Some(CancelReason::LeaseExpired),
                };
                match reader {
                    Some(to) => {
                        self.told.insert(*id, (to, release.expired));
                        Some(notice(to, *id, release))
                    }
                    None => {
                        self.unclaimed.insert(*id, release);
                        None
                    }
                }
            }
            WorkerEvent::SourceKvReused { id, at } => {
                if let Some(r) = self.unclaimed.at.get_mut(id) {
                    r.reused_at = Some(*at);
                    return None;
                }
                let (to, expired) = self.told.remove(*id)?;
                let release = Release {
                    at: *at,
                    reused_at: Some(*at),
                    expired,
                };
                Some(notice(to, *id, release))
            }
            WorkerEvent::RoleEnded {
                id,
                role: Role::Destination,
                ..
            } => {
                self.reading.remove(id);
                self.released.remove(*id);
                None
            }
            _ => None,
        }
    }

    /// A handoff fact about `msg.id` came from `from`; if it is about a
    /// source released here before its reader was known, the answer.
    pub fn on_fact_in(&mut self, from: WorkerId, msg: &HandoffMsg) -> Option<Notice> {
        // The reader's read ended (its completion, or it gave up): a later
        // reuse no longer matters to it.
        if matches!(msg.body, MsgBody::ReaderCompleted | MsgBody::Abort { .. }) {
            self.told.remove(msg.id);
        }
        if let Some(reader) = self.pinned.get_mut(&msg.id) {
            *reader = Some(from);
            return None;
        }
        let release = self.unclaimed.remove(msg.id)?;
        if release.reused_at.is_none() {
            self.told.insert(msg.id, (from, release.expired));
        }
        Some(notice(from, msg.id, release))
    }

    /// A handoff fact about `id` went to `to` (a pinned source's reader).
    pub fn on_fact_out(&mut self, to: WorkerId, id: HandoffId) {
        if let Some(reader) = self.pinned.get_mut(&id) {
            *reader = Some(to);
        }
    }

    /// A source told this worker it released attempt `id`'s KV at `at`
    /// (by its lease's expiry when `expired`), and, if `reused_at` is set,
    /// that a block of it went to another request then (a later notice of
    /// the same release).
    pub fn on_notice(
        &mut self,
        id: HandoffId,
        at: Instant,
        reused_at: Option<Instant>,
        expired: bool,
    ) {
        match self.released.at.get_mut(&id) {
            Some(r) => r.reused_at = r.reused_at.or(reused_at),
            None => self.released.insert(
                id,
                Release {
                    at,
                    reused_at,
                    expired,
                },
            ),
        }
    }

    /// The transfer of `id` this worker timed moved its bytes at `now`:
    /// its result. Only reads of another worker's KV are judged; a sender's
    /// own transfer moves blocks it holds.
    pub fn judge(&mut self, id: HandoffId, now: Instant) -> TransferResult {
        if !self.reading.remove(&id) {
            return TransferResult::Completed;
        }
        match self.released.at.get(&id) {
            Some(r) if r.at <= now && !r.expired => TransferResult::Failed,
            Some(r) if r.at <= now => TransferResult::SourceReleased {
                reused: r.reused_at.is_some_and(|t| t <= now),
            },
            _ => TransferResult::Completed,
        }
    }

    /// Entries held (for tests: every one ends with its role or is capped).
    pub fn remembered(&self) -> usize {
        self.pinned.len()
            + self.unclaimed.len()
            + self.told.len()
            + self.reading.len()
            + self.released.len()
    }

    /// Whether a notice for `id` was received (for tests).
    pub fn knows_released(&self, id: HandoffId) -> bool {
        self.released.contains(id)
    }
}

/// Whether a source that ended for `reason` freed KV its reader still
/// counts on. Not when the reader is the one who ended it or is gone
/// (abort, loss, restart), nor at this worker's own teardown (a dead
/// source's reads fail through the loss).
fn released_early(reason: CancelReason) -> bool {
    !matches!(
        reason,
        CancelReason::PeerAborted
            | CancelReason::PeerLost
            | CancelReason::PeerRestarted
            | CancelReason::Teardown
    )
}

fn notice(to: WorkerId, id: HandoffId, r: Release) -> Notice {
    Notice {
        to,
        frame: Frame::SourceReleased {
            id,
            at: r.at,
            reused_at: r.reused_at,
            expired: r.expired,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_core::{Generation, RequestId};

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

    fn read(n: u64, source: WorkerId) -> WorkerEvent {
        WorkerEvent::StartTransfer {
            id: id(n),
            request: RequestId(n),
            source,
            destination: D,
            tokens: 16,
            blocks: 1,
            at: Instant::ZERO,
        }
    }

    fn ended(n: u64, role: Role, reason: Option<CancelReason>, at: u64) -> WorkerEvent {
        WorkerEvent::RoleEnded {
            id: id(n),
            request: RequestId(n),
            role,
            reason,
            at: Instant(at),
        }
    }

    fn renewal(n: u64) -> HandoffMsg {
        HandoffMsg {
            id: id(n),
            generation: Generation(0),
            body: MsgBody::LeaseRenewal { extend_nanos: 1 },
        }
    }

    /// The source's notice, delivered to the reader as the node does.
    fn deliver(reader: &mut NodeReads, n: Option<Notice>) {
        match n {
            Some(Notice {
                to,
                frame:
                    Frame::SourceReleased {
                        id,
                        at,
                        reused_at,
                        expired,
                    },
            }) => {
                assert_eq!(to, D);
                reader.on_notice(id, at, reused_at, expired);
            }
            other => panic!("expected a notice, got {other:?}"),
        }
    }

    #[test]
    fn a_read_of_a_held_source_completes_and_nothing_is_kept() {
        let (mut p, mut d) = (NodeReads::default(), NodeReads::default());
        assert_eq!(p.on_event(P, &pinned(1)), None);
        assert_eq!(p.on_fact_in(D, &renewal(1)), None);
        assert_eq!(d.on_event(D, &read(1, P)), None);
        assert_eq!(d.judge(id(1), Instant(5)), TransferResult::Completed);
        // Released after the read: no notice.
        assert_eq!(p.on_event(P, &ended(1, Role::Source, None, 6)), None);
        d.on_event(D, &ended(1, Role::Destination, None, 6));
        assert_eq!(p.remembered() + d.remembered(), 0);
    }

    #[test]
    fn a_release_during_the_read_makes_it_stale_or_fails_it() {
        for (reason, result) in [
            (
                CancelReason::LeaseExpired,
                TransferResult::SourceReleased { reused: false },
            ),
            // Only an expiry is silent: a cancel's release fails the read.
            (CancelReason::Client, TransferResult::Failed),
        ] {
            let (mut p, mut d) = (NodeReads::default(), NodeReads::default());
            p.on_event(P, &pinned(1));
            p.on_fact_in(D, &renewal(1));
            d.on_event(D, &read(1, P));
            deliver(
                &mut d,
                p.on_event(P, &ended(1, Role::Source, Some(reason), 3)),
            );
            assert_eq!(d.judge(id(1), Instant(4)), result);
            d.on_event(D, &ended(1, Role::Destination, None, 4));
            // The reader's completion reaches the released source.
            let done = HandoffMsg {
                body: MsgBody::ReaderCompleted,
                ..renewal(1)
            };
            assert_eq!(p.on_fact_in(D, &done), None);
            assert_eq!(p.remembered() + d.remembered(), 0, "{reason:?}");
        }
    }

    #[test]
    fn a_release_before_the_reader_spoke_is_told_at_its_first_fact() {
        let (mut p, mut d) = (NodeReads::default(), NodeReads::default());
        p.on_event(P, &pinned(1));
        // vLLM's abort timeout: the lease ran out with no reader known.
        let expired = ended(1, Role::Source, Some(CancelReason::LeaseExpired), 2);
        assert_eq!(p.on_event(P, &expired), None);
        deliver(&mut d, p.on_fact_in(D, &renewal(1)));
        // Told once.
        assert_eq!(p.on_fact_in(D, &renewal(1)), None);
        d.on_event(D, &read(1, P));
        assert_eq!(
            d.judge(id(1), Instant(9)),
            TransferResult::SourceReleased { reused: false }
        );
        d.on_event(D, &ended(1, Role::Destination, None, 9));
        // The source's told reader stays remembered for a reuse notice.
        assert_eq!(p.remembered() + d.remembered(), 1);
    }

    #[test]
    fn a_reuse_before_the_read_ended_is_told_and_judged() {
        let (mut p, mut d) = (NodeReads::default(), NodeReads::default());
        p.on_event(P, &pinned(1));
        p.on_fact_in(D, &renewal(1));
        d.on_event(D, &read(1, P));
        let expired = ended(1, Role::Source, Some(CancelReason::LeaseExpired), 2);
        deliver(&mut d, p.on_event(P, &expired));
        let reused = WorkerEvent::SourceKvReused {
            id: id(1),
            at: Instant(5),
        };
        deliver(&mut d, p.on_event(P, &reused));
        assert_eq!(p.on_event(P, &reused), None, "told once");
        assert_eq!(
            d.judge(id(1), Instant(6)),
            TransferResult::SourceReleased { reused: true }
        );
        // Unclaimed: the first fact carries both.
        p.on_event(P, &pinned(2));
        p.on_event(
            P,
            &ended(2, Role::Source, Some(CancelReason::LeaseExpired), 2),
        );
        let reused = WorkerEvent::SourceKvReused {
            id: id(2),
            at: Instant(3),
        };
        assert_eq!(p.on_event(P, &reused), None);
        deliver(&mut d, p.on_fact_in(D, &renewal(2)));
        d.on_event(D, &read(2, P));
        assert_eq!(
            d.judge(id(2), Instant(4)),
            TransferResult::SourceReleased { reused: true }
        );
        // A reuse after the read ended does not count.
        p.on_event(P, &pinned(3));
        p.on_fact_in(D, &renewal(3));
        d.on_event(D, &read(3, P));
        deliver(
            &mut d,
            p.on_event(
                P,
                &ended(3, Role::Source, Some(CancelReason::LeaseExpired), 2),
            ),
        );
        let late = WorkerEvent::SourceKvReused {
            id: id(3),
            at: Instant(9),
        };
        deliver(&mut d, p.on_event(P, &late));
        assert_eq!(
            d.judge(id(3), Instant(8)),
            TransferResult::SourceReleased { reused: false }
        );
    }

    #[test]
    fn the_reader_learned_from_an_outgoing_fact_is_told_at_release() {
        let (mut p, mut d) = (NodeReads::default(), NodeReads::default());
        p.on_event(P, &pinned(1));
        p.on_fact_out(D, id(1));
        d.on_event(D, &read(1, P));
        let cut = ended(1, Role::Source, Some(CancelReason::Client), 2);
        deliver(&mut d, p.on_event(P, &cut));
        assert!(d.knows_released(id(1)));
    }

    #[test]
    fn losses_teardowns_and_own_transfers_are_not_judged_here() {
        let mut p = NodeReads::default();
        for (n, reason) in [
            (1, CancelReason::PeerLost),
            (2, CancelReason::PeerAborted),
            (3, CancelReason::PeerRestarted),
            (4, CancelReason::Teardown),
        ] {
            p.on_event(P, &pinned(n));
            p.on_fact_in(D, &renewal(n));
            assert_eq!(
                p.on_event(P, &ended(n, Role::Source, Some(reason), 1)),
                None
            );
        }
        assert_eq!(p.remembered(), 0);
        // Destination-first: the source times its own write; not a read.
        p.on_event(P, &read(5, P));
        p.on_notice(id(5), Instant(1), None, true);
        assert_eq!(p.judge(id(5), Instant(2)), TransferResult::Completed);
    }

    #[test]
    fn memory_is_capped() {
        let (mut p, mut d) = (NodeReads::default(), NodeReads::default());
        let n = NodeReads::REMEMBERED as u64 + 10;
        for i in 0..n {
            p.on_event(P, &pinned(i));
            let gone = ended(i, Role::Source, Some(CancelReason::LeaseExpired), i);
            p.on_event(P, &gone);
            d.on_notice(id(i), Instant(i), None, true);
        }
        assert_eq!(p.remembered(), NodeReads::REMEMBERED);
        assert_eq!(d.remembered(), NodeReads::REMEMBERED);
        // The oldest went first.
        assert_eq!(p.on_fact_in(D, &renewal(0)), None);
        assert!(!d.knows_released(id(0)) && d.knows_released(id(n - 1)));
    }
}
