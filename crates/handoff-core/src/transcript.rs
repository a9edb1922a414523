//! The lifecycle transcript that replay and live are compared by.
//!
//! Per handoff attempt it keeps each role's ordered transitions with the
//! ownership change each caused on its own worker, and per worker its final
//! drained state. It leaves out wall-clock times and how unrelated handoffs
//! (and the two roles of one handoff, which live on different workers)
//! interleave, so a live run and a replay run can be compared exactly.

use crate::ids::{HandoffId, RequestId, WorkerId};
use crate::kv::KvCapacitySnapshot;
use crate::msg::Role;
use crate::transition::{LifecycleEvent, OwnershipDelta, RoleState};
use crate::worker::Transition;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One normalised transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Line {
    /// The worker the role lives on.
    pub worker: WorkerId,
    /// The kind of fact.
    pub event: LifecycleEvent,
    /// State before.
    pub from: RoleState,
    /// State after.
    pub to: RoleState,
    /// Ownership moved.
    pub delta: OwnershipDelta,
}

/// Both roles' lines for one attempt.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HandoffRecord {
    /// The request, once seen.
    pub request: Option<RequestId>,
    /// Source role lines, in order.
    pub source: Vec<Line>,
    /// Destination role lines, in order.
    pub destination: Vec<Line>,
}

/// A worker's state at the end of the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FinalState {
    /// `Worker::is_drained()`.
    pub drained: bool,
    /// Its capacity snapshot.
    pub capacity: KvCapacitySnapshot,
}

/// See the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Transcript {
    handoffs: BTreeMap<HandoffId, HandoffRecord>,
    workers: BTreeMap<WorkerId, FinalState>,
}

impl Transcript {
    /// An empty transcript.
    pub fn new() -> Self {
        Transcript::default()
    }

    /// Adds one transition.
    pub fn record(&mut self, t: &Transition) {
        let rec = self.handoffs.entry(t.id).or_default();
        rec.request = Some(t.request);
        let line = Line {
            worker: t.worker,
            event: t.event,
            from: t.from,
            to: t.to,
            delta: t.delta,
        };
        match t.role {
            Role::Source => rec.source.push(line),
            Role::Destination => rec.destination.push(line),
        }
    }

    /// Records a worker's final state.
    pub fn finish_worker(&mut self, worker: WorkerId, drained: bool, capacity: KvCapacitySnapshot) {
        self.workers
            .insert(worker, FinalState { drained, capacity });
    }

    /// Attempts recorded.
    pub fn handoffs(&self) -> usize {
        self.handoffs.len()
    }

    /// Transitions recorded.
    pub fn transitions(&self) -> usize {
        self.handoffs
            .values()
            .map(|r| r.source.len() + r.destination.len())
            .sum()
    }

    /// The record of one attempt.
    pub fn get(&self, id: HandoffId) -> Option<&HandoffRecord> {
        self.handoffs.get(&id)
    }

    /// All records in id order.
    pub fn iter(&self) -> impl Iterator<Item = (&HandoffId, &HandoffRecord)> {
        self.handoffs.iter()
    }

    /// Final worker states in id order.
    pub fn workers(&self) -> impl Iterator<Item = (&WorkerId, &FinalState)> {
        self.workers.iter()
    }

    /// The first attempt whose record differs from `other`'s, with a
    /// description of the first differing line; `None` when equal.
    pub fn first_divergence(&self, other: &Transcript) -> Option<String> {
        let mut ids: Vec<&HandoffId> = self.handoffs.keys().chain(other.handoffs.keys()).collect();
        ids.sort();
        ids.dedup();
        for id in ids {
            let (a, b) = (self.handoffs.get(id), other.handoffs.get(id));
            if a == b {
                continue;
            }
            let (Some(a), Some(b)) = (a, b) else {
                return Some(format!("handoff {id}: present in only one transcript"));
            };
            for (role, la, lb) in [
                ("source", &a.source, &b.source),
                ("destination", &a.destination, &b.destination),
            ] {
                let n = la.len().max(lb.len());
                for i in 0..n {
                    let (x, y) = (la.get(i), lb.get(i));
                    if x != y {
                        return Some(format!(
                            "handoff {id} {role} line {i}: {} vs {}",
                            x.map_or("<none>".to_string(), render_line),
                            y.map_or("<none>".to_string(), render_line)
                        ));
                    }
                }
            }
        }
        for (w, fa) in &self.workers {
            if other.workers.get(w) != Some(fa) {
                return Some(format!("worker {w}: final state differs"));
            }
        }
        if self.workers.len() != other.workers.len() {
            return Some("worker sets differ".to_string());
        }
        None
    }

    /// The normalised text form (what snapshots hold).
    pub fn render(&self) -> String {
        let mut s = String::new();
        for (id, rec) in &self.handoffs {
            let req = rec.request.map_or("?".to_string(), |r| r.to_string());
            let _ = writeln!(s, "handoff {id} ({req})");
            for (role, lines) in [("source", &rec.source), ("destination", &rec.destination)] {
                for l in lines {
                    let _ = writeln!(s, "  {role:<11} {}", render_line(l));
                }
            }
        }
        for (w, f) in &self.workers {
            let c = &f.capacity;
            let _ = writeln!(
                s,
                "worker {w}: drained={} active={} pinned={} reserved={} cached={} total={}",
                f.drained,
                c.active_blocks,
                c.pinned_source_blocks,
                c.reserved_destination_blocks,
                c.cached_blocks,
                c.total_blocks
            );
        }
        s
    }
}

fn render_line(l: &Line) -> String {
    format!(
        "{} {:<19} {} -> {} [{}]",
        l.worker, l.event, l.from, l.to, l.delta
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{HandoffId, RequestId};
    use crate::time::Instant;
    use crate::{DestinationEventKind, DestinationState, SourceEventKind, SourceState};

    #[test]
    fn render_prints_the_old_names_padded() {
        let mut t = Transcript::new();
        t.record(&Transition {
            id: HandoffId(7),
            request: RequestId(3),
            worker: WorkerId(1),
            role: Role::Destination,
            event: LifecycleEvent::Destination(DestinationEventKind::ReceiveCompleted),
            from: RoleState::Destination(DestinationState::Receiving),
            to: RoleState::Destination(DestinationState::Active),
            delta: OwnershipDelta {
                pinned: 0,
                reserved: -2,
                active: 2,
            },
            at: Instant(9),
        });
        t.record(&Transition {
            id: HandoffId(7),
            request: RequestId(3),
            worker: WorkerId(0),
            role: Role::Source,
            event: LifecycleEvent::Source(SourceEventKind::Start),
            from: RoleState::Source(SourceState::NotStarted),
            to: RoleState::Source(SourceState::Computing),
            delta: OwnershipDelta::NONE,
            at: Instant(1),
        });
        let text = t.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            &lines[1..],
            [
                format!(
                    "  source      {} Start               NotStarted -> Computing [±0]",
                    WorkerId(0)
                ),
                format!(
                    "  destination {} ReceiveCompleted    Receiving -> Active [-2 reserved +2 active]",
                    WorkerId(1)
                ),
            ]
        );
    }
}
