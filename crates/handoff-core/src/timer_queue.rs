//! A min-queue of timers that pops in exactly the order of a binary heap
//! over the same items, laid out for timers whose deadlines mostly arrive
//! in order.
//!
//! A worker arms its timers as `now + ttl` with a few fixed TTLs, so the
//! timers of one kind are armed in deadline order, and they are cancelled
//! lazily, so a worker holds one per handoff of the last TTL (thousands at
//! cluster scale). In a `BinaryHeap` every pop then sifts through a heap of
//! that size, a cache miss per level: at 128 workers over a 1 M-request
//! replay it was 9% of the run. Here each lane (one per timer kind) is a
//! FIFO that stays sorted as long as its items arrive in order, with a small
//! heap for the few that do not; the minimum is the least of the lanes'
//! fronts and that heap's top. Pushing is an append, popping touches a
//! lane's front, and the pop order is the heap's (items are totally
//! ordered; `matches_a_binary_heap` proptests it).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// See the module docs. `LANES` FIFOs plus an overflow heap.
#[derive(Clone, Debug)]
pub(crate) struct TimerQueue<T: Ord + Copy, const LANES: usize> {
    lanes: [VecDeque<T>; LANES],
    /// Items pushed below their lane's last item.
    overflow: BinaryHeap<Reverse<T>>,
    /// [`Self::least`], kept after every change: a worker asks its next
    /// deadline after every operation, far more often than it arms or fires
    /// a timer.
    min: Option<(usize, T)>,
}

impl<T: Ord + Copy, const LANES: usize> Default for TimerQueue<T, LANES> {
    fn default() -> Self {
        TimerQueue {
            lanes: std::array::from_fn(|_| VecDeque::new()),
            overflow: BinaryHeap::new(),
            min: None,
        }
    }
}

impl<T: Ord + Copy, const LANES: usize> TimerQueue<T, LANES> {
    /// Adds `item` to lane `lane` (taken modulo `LANES`).
    pub(crate) fn push(&mut self, lane: usize, item: T) {
        let q = &mut self.lanes[lane % LANES];
        if q.back().is_none_or(|last| *last <= item) {
            q.push_back(item);
        } else {
            self.overflow.push(Reverse(item));
        }
        // An item above the least leaves it where it is.
        if self.min.is_none_or(|(_, m)| item <= m) {
            self.min = self.least();
        }
    }

    /// Where the least item is: a lane, or the overflow heap (`LANES`).
    fn least(&self) -> Option<(usize, T)> {
        let mut best = self.overflow.peek().map(|Reverse(t)| (LANES, *t));
        for (i, q) in self.lanes.iter().enumerate() {
            if let Some(&t) = q.front() {
                if best.is_none_or(|(_, b)| t < b) {
                    best = Some((i, t));
                }
            }
        }
        best
    }

    /// The least item.
    pub(crate) fn peek(&self) -> Option<T> {
        self.min.map(|(_, t)| t)
    }

    /// Takes the least item out.
    pub(crate) fn pop(&mut self) -> Option<T> {
        let (at, t) = self.min?;
        if at == LANES {
            self.overflow.pop();
        } else {
            self.lanes[at].pop_front();
        }
        self.min = self.least();
        Some(t)
    }

    /// Items held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lanes.iter().map(VecDeque::len).sum::<usize>() + self.overflow.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        /// Push at `base + delta` in lane `lane` (mostly increasing bases).
        Push {
            lane: usize,
            delta: i8,
            tie: u8,
        },
        Pop,
        Advance(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => (0usize..5, any::<i8>(), 0u8..4)
                .prop_map(|(lane, delta, tie)| Op::Push { lane, delta, tie }),
            3 => Just(Op::Pop),
            2 => any::<u8>().prop_map(Op::Advance),
        ]
    }

    proptest! {
        /// Whatever the push order (in order per lane, out of order, equal
        /// deadlines with other tie-breakers), pops come out exactly as a
        /// binary heap's.
        #[test]
        fn matches_a_binary_heap(ops in proptest::collection::vec(op(), 0..300)) {
            let mut q: TimerQueue<(i64, u8, usize), 4> = TimerQueue::default();
            let mut h: BinaryHeap<Reverse<(i64, u8, usize)>> = BinaryHeap::new();
            let mut base = 0i64;
            for o in ops {
                match o {
                    Op::Push { lane, delta, tie } => {
                        // Lane-constant TTLs: mostly `base + ttl(lane)`.
                        let item = (base + 10 * lane as i64 + i64::from(delta / 32), tie, lane);
                        q.push(lane, item);
                        h.push(Reverse(item));
                    }
                    Op::Pop => prop_assert_eq!(q.pop(), h.pop().map(|Reverse(t)| t)),
                    Op::Advance(d) => base += i64::from(d),
                }
                prop_assert_eq!(q.peek(), h.peek().map(|Reverse(t)| *t));
                prop_assert_eq!(q.min, q.least());
                prop_assert_eq!(q.len(), h.len());
            }
            while let Some(Reverse(t)) = h.pop() {
                prop_assert_eq!(q.pop(), Some(t));
            }
            prop_assert_eq!(q.pop(), None);
        }
    }
}
