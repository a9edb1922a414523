//! Bounded per-worker timelines of KV occupancy and queue lengths, for the
//! HTML report.
//!
//! A [`Series`] records a worker's [`KvCapacitySnapshot`] only when it
//! changes, into time buckets: when more than [`Series::cap`] buckets
//! would be kept, the bucket width doubles and neighbouring buckets merge.
//! So a million-request run keeps at most `cap` points per worker, and
//! the same inputs give the same points. A merged bucket keeps the sample
//! with the most blocks in use (peaks survive downsampling; the stacked
//! categories of one point stay one real snapshot) and the largest queue
//! lengths seen in it.

use handoff_core::{Instant, KvCapacitySnapshot};
use serde::Serialize;

/// Points kept per worker by default.
pub const DEFAULT_POINTS: usize = 2000;

/// One sample: the KV categories of [`KvCapacitySnapshot`] (mutually
/// exclusive) and the queue lengths.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Point {
    /// Model time, ns.
    pub at_ns: u64,
    /// Blocks of running or waiting-with-KV requests.
    pub active: u64,
    /// Blocks of prefills pinned for their reader.
    pub pinned: u64,
    /// Blocks reserved for incoming KV.
    pub reserved: u64,
    /// Unreferenced blocks still holding reusable prefix cache.
    pub cached: u64,
    /// Requests in the running batch (the largest in the bucket).
    pub running: u64,
    /// Requests queued for admission (the largest in the bucket).
    pub waiting: u64,
}

impl Point {
    fn of(at: Instant, c: &KvCapacitySnapshot) -> Point {
        Point {
            at_ns: at.0,
            active: c.active_blocks,
            pinned: c.pinned_source_blocks,
            reserved: c.reserved_destination_blocks,
            cached: c.cached_blocks,
            running: c.running_requests,
            waiting: c.waiting_requests,
        }
    }

    fn used(&self) -> u64 {
        self.active + self.pinned + self.reserved
    }

    fn same_state(&self, o: &Point) -> bool {
        (
            self.active,
            self.pinned,
            self.reserved,
            self.cached,
            self.running,
            self.waiting,
        ) == (
            o.active, o.pinned, o.reserved, o.cached, o.running, o.waiting,
        )
    }

    /// `self` and `later` as one bucket (at `self`'s time).
    fn merge(&mut self, later: &Point) {
        let (running, waiting) = (
            self.running.max(later.running),
            self.waiting.max(later.waiting),
        );
        if later.used() > self.used() {
            let at = self.at_ns;
            *self = *later;
            self.at_ns = at;
        }
        self.running = running;
        self.waiting = waiting;
    }
}

/// One worker's timeline.
#[derive(Clone, Debug)]
pub struct Series {
    cap: usize,
    /// Bucket width, ns (starts at 1 µs).
    width: u64,
    points: Vec<Point>,
    /// Pool size, from the last snapshot.
    total_blocks: u64,
    /// The last snapshot seen (to record only changes).
    last: Option<Point>,
}

impl Series {
    /// An empty series keeping at most `cap` (at least 2) points.
    pub fn new(cap: usize) -> Series {
        Series {
            cap: cap.max(2),
            width: 1_000,
            points: Vec::new(),
            total_blocks: 0,
            last: None,
        }
    }

    /// Points kept at most.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Records the worker's state at `at` (times must not decrease).
    pub fn observe(&mut self, at: Instant, c: &KvCapacitySnapshot) {
        self.total_blocks = c.total_blocks;
        let p = Point::of(at, c);
        if self.last.is_some_and(|l| l.same_state(&p)) {
            return;
        }
        self.last = Some(p);
        match self.points.last_mut() {
            Some(b) if b.at_ns / self.width == p.at_ns / self.width => b.merge(&p),
            _ => self.points.push(p),
        }
        while self.points.len() > self.cap {
            self.width = self.width.saturating_mul(2);
            let old = std::mem::take(&mut self.points);
            for q in old {
                match self.points.last_mut() {
                    Some(b) if b.at_ns / self.width == q.at_ns / self.width => b.merge(&q),
                    _ => self.points.push(q),
                }
            }
        }
    }

    /// The points, in time order.
    pub fn points(&self) -> &[Point] {
        &self.points
    }

    /// The worker's pool size in blocks.
    pub fn total_blocks(&self) -> u64 {
        self.total_blocks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(active: u64, waiting: u64) -> KvCapacitySnapshot {
        KvCapacitySnapshot {
            total_blocks: 100,
            active_blocks: active,
            waiting_requests: waiting,
            ..KvCapacitySnapshot::default()
        }
    }

    #[test]
    fn records_changes_only_and_stays_bounded() {
        let mut s = Series::new(50);
        s.observe(Instant(0), &snap(1, 0));
        s.observe(Instant(5_000), &snap(1, 0));
        assert_eq!(s.points().len(), 1, "no change, no point");
        for i in 0..100_000u64 {
            s.observe(Instant(10_000 + i * 1_000_000), &snap(i % 97, i % 5));
        }
        assert!(s.points().len() <= 50, "{}", s.points().len());
        // The peak survives downsampling, and times keep their order.
        assert_eq!(s.points().iter().map(|p| p.active).max(), Some(96));
        assert!(s.points().windows(2).all(|w| w[0].at_ns < w[1].at_ns));
        assert_eq!(s.points().iter().map(|p| p.waiting).max(), Some(4));
        assert_eq!(s.total_blocks(), 100);
    }
}
