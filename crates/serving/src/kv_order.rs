//! Each worker's KV events in the order the worker produced them, for the
//! channels outside consumers read (`--kv-events-out`, serve's JSONL and
//! ZMQ streams).
//!
//! A worker numbers its events as its core emits them, but a driver can
//! release them out of that order: an input handled while a step is in
//! flight releases its own events at once, while the step's are held to its
//! end (the known modelling gap in ARCHITECTURE.md). Dynamo's subscriber
//! drops an event whose id is not above the last one it applied and clears
//! a worker on a gap it cannot fill, so a stream out of order is a stream
//! of lost workers to it. [`KvOrder`] holds an early event until every
//! earlier id of its worker has been released, then lets the run through.
//!
//! Invariants, per worker:
//! - ids leave in strictly increasing order, each once;
//! - within one incarnation of a worker, they leave without gaps: an event
//!   waits for every lower id of its incarnation;
//! - a worker that went down may have lost events held in its last step:
//!   [`KvOrder::worker_down`] releases what waited, in id order, and the
//!   next incarnation (a new core, numbering from 0 again) continues after
//!   the last id released, so the stream stays increasing;
//! - what waits is bounded by how far a driver reorders (one step's
//!   events), never by the run's length.

use handoff_core::{Instant, KvEvent, WorkerId};
use std::collections::BTreeMap;

/// One worker's position in its stream.
#[derive(Debug, Default)]
struct Lane {
    /// The core's next id this incarnation.
    next: u64,
    /// Added to the core's ids: the ids earlier incarnations released.
    offset: u64,
    /// Events that arrived before a lower id, by the core's id.
    waiting: BTreeMap<u64, (KvEvent, Instant)>,
    /// The worker went down: its next event starts a new incarnation.
    restarted: bool,
}

/// An event a [`KvOrder`] let through: its worker, the event (renumbered
/// past earlier incarnations) and when it was released.
pub type Released = (WorkerId, KvEvent, Instant);

impl Lane {
    /// Lets `ev` through (renumbered), then every waiting event it
    /// unblocks, in id order.
    fn release(&mut self, w: WorkerId, ev: KvEvent, at: Instant, out: &mut Vec<Released>) {
        let mut next = Some((ev, at));
        while let Some((mut ev, at)) = next.take() {
            // Wrapping, as a release build computes it: a restarted
            // worker's `Cleared` carries the id `u64::MAX`
            // (`Worker::restart`), which waits here until the worker goes
            // down again or the run ends.
            self.next = ev.event_id.wrapping_add(1);
            ev.event_id = ev.event_id.wrapping_add(self.offset);
            out.push((w, ev, at));
            if let Some(e) = self.waiting.first_entry() {
                if *e.key() == self.next {
                    next = Some(e.remove());
                }
            }
        }
    }

    /// Lets every waiting event through in id order, gaps and all.
    fn drain(&mut self, w: WorkerId, out: &mut Vec<Released>) {
        while let Some((_, (ev, at))) = self.waiting.pop_first() {
            self.release(w, ev, at, out);
        }
    }
}

/// Per-worker reorder buffers; see the module docs.
#[derive(Debug, Default)]
pub struct KvOrder {
    lanes: Vec<Lane>,
}

impl KvOrder {
    /// An empty buffer.
    pub fn new() -> Self {
        KvOrder::default()
    }

    fn lane(&mut self, w: WorkerId) -> &mut Lane {
        let i = w.0 as usize;
        if self.lanes.len() <= i {
            self.lanes.resize_with(i + 1, Lane::default);
        }
        &mut self.lanes[i]
    }

    /// Takes worker `w`'s event `ev`, released at `at`, and appends to
    /// `out` every event of `w` now in order (possibly none, possibly
    /// several).
    pub fn push(&mut self, w: WorkerId, ev: KvEvent, at: Instant, out: &mut Vec<Released>) {
        let lane = self.lane(w);
        if lane.restarted {
            lane.restarted = false;
            lane.offset += lane.next;
            lane.next = 0;
        }
        if ev.event_id == lane.next {
            lane.release(w, ev, at, out);
        } else if ev.event_id > lane.next {
            lane.waiting.insert(ev.event_id, (ev, at));
        }
        // A lower id was released already: a driver never repeats an
        // event, so there is nothing to do with it.
    }

    /// Worker `w` went down: what it had waiting goes to `out` now, in id
    /// order (ids lost with its last step stay missing), and its next event
    /// comes from a new core.
    pub fn worker_down(&mut self, w: WorkerId, out: &mut Vec<Released>) {
        let lane = self.lane(w);
        lane.drain(w, out);
        lane.restarted = true;
    }

    /// The run ended: everything still waiting goes to `out`, worker by
    /// worker, in id order.
    pub fn finish(&mut self, out: &mut Vec<Released>) {
        for (i, lane) in self.lanes.iter_mut().enumerate() {
            lane.drain(WorkerId(i as u32), out);
        }
    }

    /// Events waiting for a lower id, all workers together.
    pub fn waiting(&self) -> usize {
        self.lanes.iter().map(|l| l.waiting.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_core::KvEventData;
    use proptest::prelude::*;

    fn ev(id: u64) -> KvEvent {
        KvEvent {
            event_id: id,
            data: KvEventData::Removed {
                block_hashes: vec![id],
            },
        }
    }

    fn run(order: &mut KvOrder, w: u32, ids: &[u64], seen: &mut Vec<(u32, u64)>) {
        let mut out = Vec::new();
        for &i in ids {
            order.push(WorkerId(w), ev(i), Instant::ZERO, &mut out);
        }
        seen.extend(ids_of(out));
    }

    fn ids_of(out: Vec<Released>) -> impl Iterator<Item = (u32, u64)> {
        out.into_iter().map(|(w, e, _)| (w.0, e.event_id))
    }

    #[test]
    fn an_early_event_waits_for_the_lower_ids() {
        let mut o = KvOrder::new();
        let mut seen = Vec::new();
        run(&mut o, 1, &[0, 3, 1, 2, 4], &mut seen);
        assert_eq!(seen, [(1, 0), (1, 1), (1, 2), (1, 3), (1, 4)]);
        assert_eq!(o.waiting(), 0);
    }

    #[test]
    fn a_restarted_worker_continues_after_its_last_id() {
        let mut o = KvOrder::new();
        let mut seen = Vec::new();
        run(&mut o, 0, &[0, 1, 3], &mut seen);
        // Id 2 was lost with the worker's last step.
        let mut out = Vec::new();
        o.worker_down(WorkerId(0), &mut out);
        seen.extend(ids_of(out));
        run(&mut o, 0, &[0, 1], &mut seen);
        assert_eq!(seen, [(0, 0), (0, 1), (0, 3), (0, 4), (0, 5)]);
    }

    proptest! {
        /// Events of several workers, each worker's shuffled within
        /// windows (as steps hold theirs), leave per worker in id order,
        /// each once, with nothing left waiting.
        #[test]
        fn shuffled_windows_come_out_in_order(
            lens in prop::collection::vec(1usize..60, 1..4),
            window in 1usize..6,
            seed in any::<u64>(),
        ) {
            let mut rng = handoff_core::Rng::seeded(seed);
            let mut streams: Vec<Vec<u64>> = lens.iter().map(|&n| {
                let mut ids: Vec<u64> = (0..n as u64).collect();
                for chunk in ids.chunks_mut(window) {
                    for i in (1..chunk.len()).rev() {
                        chunk.swap(i, rng.below(i as u64 + 1) as usize);
                    }
                }
                ids.reverse();
                ids
            }).collect();
            let mut o = KvOrder::new();
            let mut seen: Vec<(u32, u64)> = Vec::new();
            while streams.iter().any(|s| !s.is_empty()) {
                let w = rng.below(streams.len() as u64) as usize;
                if let Some(id) = streams[w].pop() {
                    run(&mut o, w as u32, &[id], &mut seen);
                }
            }
            let mut out = Vec::new();
            o.finish(&mut out);
            seen.extend(ids_of(out));
            for (w, &n) in lens.iter().enumerate() {
                let ids: Vec<u64> = seen.iter().filter(|s| s.0 == w as u32).map(|s| s.1).collect();
                prop_assert_eq!(ids, (0..n as u64).collect::<Vec<_>>());
            }
            prop_assert_eq!(o.waiting(), 0);
        }
    }
}
