//! [`SourceChecks`]: on the wall clock, whether the worker a read names as
//! its source holds that attempt's KV at all, sans-IO.
//!
//! In vLLM's source-first pull the decode worker reads the prefill
//! worker's blocks with one NIXL read (`nixl_connector.py`,
//! `start_load_kv` then `_read_blocks`) and nothing crosses from source to
//! reader before it ends; NIXL fails the read if the remote agent has no
//! registered memory for those blocks, and the connector reports the
//! request's load as failed (`get_finished` / `get_block_ids_with_load_errors`).
//! A mocked read is timed, not moved, so a peer that only answers the
//! transport's `Hello` would otherwise be "read" successfully.
//!
//! A node that confirms its sources ([`crate::WorkerNode::confirming_sources`])
//! asks the source, when a read of another worker's KV starts
//! ([`Frame::SourceQuery`]); the source's node answers from its worker's
//! role registry ([`Frame::SourceAnswer`], `Worker::holds_source`). When
//! the read's bytes have moved:
//!
//! - a positive answer from the read's source: the read's own judgment
//!   stands ([`crate::reads::NodeReads::judge`]);
//! - a negative one: the read fails ([`TransferResult::Failed`], the result
//!   of a read whose source is gone);
//! - no answer yet: the result waits for the answer up to the node's bound
//!   (the transport's silence limit in an engine process), then fails.
//!
//! Answers count only from the read's source and only for reads asked
//! about. Memory: one entry per read in flight, removed when its result is
//! delivered or its destination role ends.

use handoff_core::fasthash::FastMap;
use handoff_core::{HandoffId, Instant, Role, TransferResult, WorkerEvent, WorkerId};
use handoff_transport::Frame;

/// What the source said about one read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    /// Asked, not answered yet.
    Pending,
    /// The source holds a live source role of the attempt.
    Held,
    /// It does not (or could not be asked).
    NotHeld,
}

/// One read asked about.
#[derive(Clone, Copy, Debug)]
struct Check {
    source: WorkerId,
    answer: Answer,
    /// The read ended before the answer came: its judged result, delivered
    /// when the answer comes or failed at `until`.
    waiting: Option<(TransferResult, Instant)>,
}

/// A query for the node to send: `frame` to worker `to`.
#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    /// The read's source.
    pub to: WorkerId,
    /// A [`Frame::SourceQuery`].
    pub frame: Frame,
}

/// One node's reads awaiting (or holding) their source's answer; see the
/// module docs.
#[derive(Debug, Default)]
pub struct SourceChecks {
    checks: FastMap<HandoffId, Check>,
}

impl SourceChecks {
    /// Follows an event worker `me` emitted: a read of another worker's KV
    /// starting is asked about; a destination role ending forgets its read.
    pub fn on_event(&mut self, me: WorkerId, e: &WorkerEvent) -> Option<Query> {
        match e {
            WorkerEvent::StartTransfer { id, source, .. } if *source != me => {
                let check = Check {
                    source: *source,
                    answer: Answer::Pending,
                    waiting: None,
                };
                self.checks.insert(*id, check);
                Some(Query {
                    to: *source,
                    frame: Frame::SourceQuery { id: *id },
                })
            }
            WorkerEvent::RoleEnded {
                id,
                role: Role::Destination,
                ..
            } => {
                self.checks.remove(id);
                None
            }
            _ => None,
        }
    }

    /// The query about `id` could not be sent (its source is gone): the
    /// read cannot be confirmed.
    pub fn unsent(&mut self, id: HandoffId) {
        if let Some(c) = self.checks.get_mut(&id) {
            c.answer = Answer::NotHeld;
        }
    }

    /// `from` answered about `id`. If the read already ended and was
    /// waiting, its result to deliver now. An answer from anyone but the
    /// read's source, about a read not asked about, or a second answer,
    /// is ignored (`false` in the second place: not taken).
    pub fn on_answer(
        &mut self,
        from: WorkerId,
        id: HandoffId,
        held: bool,
    ) -> (Option<TransferResult>, bool) {
        let Some(c) = self.checks.get_mut(&id) else {
            return (None, false);
        };
        if c.source != from || c.answer != Answer::Pending {
            return (None, false);
        }
        c.answer = if held { Answer::Held } else { Answer::NotHeld };
        match c.waiting {
            Some((result, _)) => {
                self.checks.remove(&id);
                (Some(confirmed(result, held)), true)
            }
            None => (None, true),
        }
    }

    /// The read of `id` moved its bytes and was judged `result`: the
    /// result to deliver now, or `None` while it waits for its source's
    /// answer until `until` ([`SourceChecks::next_deadline`]). A transfer
    /// not asked about (this worker's own) passes.
    pub fn on_complete(
        &mut self,
        id: HandoffId,
        result: TransferResult,
        until: Instant,
    ) -> Option<TransferResult> {
        let Some(c) = self.checks.get_mut(&id) else {
            return Some(result);
        };
        match c.answer {
            Answer::Pending => {
                c.waiting = Some((result, until));
                None
            }
            answer => {
                self.checks.remove(&id);
                Some(confirmed(result, answer == Answer::Held))
            }
        }
    }

    /// When the first waiting read gives up.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.checks
            .values()
            .filter_map(|c| c.waiting.map(|w| w.1))
            .min()
    }

    /// The reads whose wait ran out by `now`, in id order: each fails.
    pub fn expire(&mut self, now: Instant) -> Vec<HandoffId> {
        let mut due: Vec<HandoffId> = self
            .checks
            .iter()
            .filter(|(_, c)| c.waiting.is_some_and(|w| w.1 <= now))
            .map(|(id, _)| *id)
            .collect();
        due.sort();
        for id in &due {
            self.checks.remove(id);
        }
        due
    }

    /// Reads asked about and not yet delivered (for tests).
    pub fn len(&self) -> usize {
        self.checks.len()
    }

    /// Whether none are (for tests).
    pub fn is_empty(&self) -> bool {
        self.checks.is_empty()
    }
}

fn confirmed(result: TransferResult, held: bool) -> TransferResult {
    if held {
        result
    } else {
        TransferResult::Failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_core::{CancelReason, RequestId};

    const P: WorkerId = WorkerId(0);
    const D: WorkerId = WorkerId(1);
    /// Reads here wait 100 ns past their end.
    fn until(at: u64) -> Instant {
        Instant(at + 100)
    }

    fn id(n: u64) -> HandoffId {
        HandoffId(u128::from(n))
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

    fn asked(c: &mut SourceChecks, n: u64) {
        let q = c.on_event(D, &read(n, P)).expect("a query");
        assert_eq!(q.to, P);
        assert_eq!(q.frame, Frame::SourceQuery { id: id(n) });
    }

    #[test]
    fn an_answer_before_the_end_decides_at_the_end() {
        let mut c = SourceChecks::default();
        asked(&mut c, 1);
        assert_eq!(c.on_answer(P, id(1), true), (None, true));
        let ok = TransferResult::Completed;
        assert_eq!(c.on_complete(id(1), ok, until(5)), Some(ok));
        asked(&mut c, 2);
        assert_eq!(c.on_answer(P, id(2), false), (None, true));
        assert_eq!(
            c.on_complete(id(2), ok, until(5)),
            Some(TransferResult::Failed)
        );
        assert!(c.is_empty());
    }

    #[test]
    fn a_read_ended_unanswered_waits_for_the_answer() {
        let mut c = SourceChecks::default();
        asked(&mut c, 1);
        let stale = TransferResult::SourceReleased { reused: false };
        assert_eq!(c.on_complete(id(1), stale, until(5)), None);
        assert_eq!(c.next_deadline(), Some(Instant(105)));
        assert!(c.expire(Instant(104)).is_empty());
        // Its own judgment stands once confirmed.
        assert_eq!(c.on_answer(P, id(1), true), (Some(stale), true));
        assert_eq!(c.next_deadline(), None);
        asked(&mut c, 2);
        c.on_complete(id(2), TransferResult::Completed, until(5));
        assert_eq!(
            c.on_answer(P, id(2), false),
            (Some(TransferResult::Failed), true)
        );
        assert!(c.is_empty());
    }

    #[test]
    fn a_read_never_answered_fails_at_the_bound() {
        let mut c = SourceChecks::default();
        asked(&mut c, 1);
        asked(&mut c, 2);
        c.on_complete(id(2), TransferResult::Completed, until(7));
        c.on_complete(id(1), TransferResult::Completed, until(9));
        assert_eq!(c.expire(Instant(107)), vec![id(2)]);
        assert_eq!(c.expire(Instant(500)), vec![id(1)]);
        // A late answer finds nothing.
        assert_eq!(c.on_answer(P, id(1), true), (None, false));
        assert!(c.is_empty());
    }

    #[test]
    fn answers_count_only_from_the_source_and_once() {
        let mut c = SourceChecks::default();
        asked(&mut c, 1);
        assert_eq!(c.on_answer(WorkerId(7), id(1), true), (None, false));
        assert_eq!(c.on_answer(P, id(9), true), (None, false));
        assert_eq!(c.on_answer(P, id(1), false), (None, true));
        assert_eq!(c.on_answer(P, id(1), true), (None, false));
        assert_eq!(
            c.on_complete(id(1), TransferResult::Completed, until(1)),
            Some(TransferResult::Failed)
        );
    }

    #[test]
    fn own_transfers_unsent_queries_and_ended_roles() {
        let mut c = SourceChecks::default();
        // Destination-first: the source times its own write; not asked.
        assert_eq!(c.on_event(P, &read(1, P)), None);
        let ok = TransferResult::Completed;
        assert_eq!(c.on_complete(id(1), ok, until(1)), Some(ok));
        asked(&mut c, 2);
        c.unsent(id(2));
        assert_eq!(
            c.on_complete(id(2), ok, until(1)),
            Some(TransferResult::Failed)
        );
        asked(&mut c, 3);
        c.on_complete(id(3), ok, until(1));
        let ended = WorkerEvent::RoleEnded {
            id: id(3),
            request: RequestId(3),
            role: Role::Destination,
            reason: Some(CancelReason::PeerLost),
            at: Instant(2),
        };
        assert_eq!(c.on_event(D, &ended), None);
        assert!(c.is_empty() && c.next_deadline().is_none());
    }
}
