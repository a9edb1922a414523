//! In-flight request records keyed by [`RequestId`], laid out for the
//! recorder's hot path.
//!
//! Every decode pass hands the recorder one token emission per running
//! request, and each one looks its request's record up. In a hash map the
//! records of the requests in flight are scattered over the table, so at
//! cluster scale (thousands in flight, every other structure of 128 workers
//! competing for the cache) the probe was the recorder's largest cost. Trace
//! readers and the synthetic generator number requests densely in arrival
//! order, and requests leave roughly in that order, so the records live in a
//! window over the id range instead: a lookup is one subtraction and one
//! index, and the records in flight sit next to each other.
//!
//! Ids outside the window (below its start, or so far above its end that
//! growing it would hold mostly holes, as with ids chosen by a client) go to
//! a map, so no input can make the table allocate for ids it never saw.

use handoff_core::fasthash::FastMap;
use handoff_core::RequestId;
use std::collections::VecDeque;

/// How far past the window's end an id may land and still extend it: the
/// holes this leaves are bounded by this many empty slots.
const MAX_GAP: u64 = 1 << 16;

/// Records of requests in flight: a dense window over ids plus a map for
/// ids that do not fit it.
#[derive(Debug)]
pub(crate) struct RequestTable<T> {
    /// Id of `window[0]`.
    base: u64,
    window: VecDeque<Option<T>>,
    /// Occupied slots of `window`.
    in_window: usize,
    outliers: FastMap<RequestId, T>,
}

impl<T> Default for RequestTable<T> {
    fn default() -> Self {
        RequestTable {
            base: 0,
            window: VecDeque::new(),
            in_window: 0,
            outliers: FastMap::default(),
        }
    }
}

impl<T> RequestTable<T> {
    fn slot(&self, id: RequestId) -> Option<usize> {
        let i = id.0.checked_sub(self.base)?;
        (i < self.window.len() as u64).then_some(i as usize)
    }

    /// Inserts (or replaces) `id`'s record. An id is held in one place
    /// only: once an outlier, it stays one until removed (the window may
    /// have grown over it since).
    pub(crate) fn insert(&mut self, id: RequestId, rec: T) {
        if let Some(v) = self.outlier_mut(id) {
            *v = rec;
            return;
        }
        if self.window.is_empty() {
            self.base = id.0;
        }
        if let Some(i) = self.slot(id) {
            if self.window[i].is_none() {
                self.in_window += 1;
            }
            self.window[i] = Some(rec);
            return;
        }
        let end = self.base.saturating_add(self.window.len() as u64);
        if id.0 >= end && id.0 - end <= MAX_GAP {
            for _ in end..id.0 {
                self.window.push_back(None);
            }
            self.window.push_back(Some(rec));
            self.in_window += 1;
        } else {
            self.outliers.insert(id, rec);
        }
    }

    fn outlier_mut(&mut self, id: RequestId) -> Option<&mut T> {
        if self.outliers.is_empty() {
            None
        } else {
            self.outliers.get_mut(&id)
        }
    }

    /// `id`'s record.
    pub(crate) fn get_mut(&mut self, id: RequestId) -> Option<&mut T> {
        match self.slot(id) {
            Some(i) if self.window[i].is_some() => self.window[i].as_mut(),
            _ => self.outlier_mut(id),
        }
    }

    /// Loads the records of `ids` in one tight loop, so that their cache
    /// misses overlap: the recorder's per-emission work between two lookups
    /// would otherwise make it pay them one after another (safe Rust has no
    /// prefetch instruction). `touch` reads one field of a record. Changes
    /// nothing.
    pub(crate) fn warm(&self, ids: impl Iterator<Item = RequestId>, touch: impl Fn(&T) -> u64) {
        let mut sum = 0u64;
        for id in ids {
            if let Some(Some(r)) = self.slot(id).map(|i| &self.window[i]) {
                sum = sum.wrapping_add(touch(r));
            }
        }
        std::hint::black_box(sum);
    }

    /// Whether `id` has a record.
    pub(crate) fn contains(&self, id: RequestId) -> bool {
        match self.slot(id) {
            Some(i) if self.window[i].is_some() => true,
            _ => self.outliers.contains_key(&id),
        }
    }

    /// Takes `id`'s record out; the window's start moves past the ids that
    /// have left.
    pub(crate) fn remove(&mut self, id: RequestId) -> Option<T> {
        let i = match self.slot(id) {
            Some(i) if self.window[i].is_some() => i,
            _ => return self.outliers.remove(&id),
        };
        let rec = self.window[i].take()?;
        self.in_window -= 1;
        while let Some(None) = self.window.front() {
            self.window.pop_front();
            self.base += 1;
        }
        Some(rec)
    }

    /// Records held.
    pub(crate) fn len(&self) -> usize {
        self.in_window + self.outliers.len()
    }

    /// Every record, in id order, leaving the table empty.
    pub(crate) fn drain_sorted(&mut self) -> Vec<(RequestId, T)> {
        let base = self.base;
        let mut all: Vec<(RequestId, T)> = self
            .window
            .drain(..)
            .enumerate()
            .filter_map(|(i, r)| r.map(|r| (RequestId(base + i as u64), r)))
            .chain(self.outliers.drain())
            .collect();
        self.in_window = 0;
        all.sort_unstable_by_key(|(id, _)| *id);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u64, u32),
        Remove(u64),
        Get(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Mostly dense ids near each other, sometimes far ones.
        let id = prop_oneof![
            8 => 0u64..200,
            1 => any::<u64>(),
            1 => (1u64 << 16)..(1u64 << 18),
        ];
        prop_oneof![
            (id.clone(), any::<u32>()).prop_map(|(i, v)| Op::Insert(i, v)),
            id.clone().prop_map(Op::Remove),
            id.prop_map(Op::Get),
        ]
    }

    proptest! {
        /// The table behaves as a map whatever the ids, and drains in id
        /// order.
        #[test]
        fn behaves_as_a_map(ops in proptest::collection::vec(op(), 0..400)) {
            let mut t = RequestTable::default();
            let mut m = BTreeMap::new();
            for o in ops {
                match o {
                    Op::Insert(i, v) => {
                        t.insert(RequestId(i), v);
                        m.insert(i, v);
                    }
                    Op::Remove(i) => prop_assert_eq!(t.remove(RequestId(i)), m.remove(&i)),
                    Op::Get(i) => {
                        prop_assert_eq!(t.get_mut(RequestId(i)).copied(), m.get(&i).copied());
                        prop_assert_eq!(t.contains(RequestId(i)), m.contains_key(&i));
                    }
                }
                prop_assert_eq!(t.len(), m.len());
                // Holes are bounded: never more than MAX_GAP past a record.
                prop_assert!(t.window.len() as u64 <= (t.in_window as u64 + 1) * (MAX_GAP + 1));
            }
            let drained: Vec<(u64, u32)> =
                t.drain_sorted().into_iter().map(|(i, v)| (i.0, v)).collect();
            prop_assert_eq!(drained, m.into_iter().collect::<Vec<_>>());
            prop_assert_eq!(t.len(), 0);
        }
    }

    #[test]
    fn the_window_slides_as_requests_leave_in_order() {
        let mut t = RequestTable::default();
        for i in 100..200 {
            t.insert(RequestId(i), i);
        }
        for i in 100..190 {
            assert_eq!(t.remove(RequestId(i)), Some(i));
        }
        assert_eq!((t.base, t.window.len()), (190, 10));
        assert!(t.outliers.is_empty());
        // An id below the window is an outlier, not a reason to grow.
        t.insert(RequestId(5), 5);
        assert_eq!((t.outliers.len(), t.window.len()), (1, 10));
    }
}
