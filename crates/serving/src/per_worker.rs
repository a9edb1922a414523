//! Per-worker state the recorder touches on every step, looked up by id.
//!
//! Worker ids are small and dense in every deployment we build, so each
//! lookup is an index; a `BTreeMap` here cost a tree walk per step event
//! (cachegrind, conversation trace: ~70 instructions of every decode
//! pass). Ids at or past [`MAX_DENSE`] (only a hand-built configuration
//! could make them) go to a map, so no id can make the table allocate for
//! ids it never saw. Walks go in id order, as the map's did.

use handoff_core::WorkerId;
use std::collections::BTreeMap;

/// Ids below this are held densely.
pub(crate) const MAX_DENSE: u32 = 1 << 16;

/// `T` per known worker; see the module docs.
#[derive(Clone, Debug)]
pub(crate) struct PerWorker<T> {
    dense: Vec<Option<T>>,
    sparse: BTreeMap<WorkerId, T>,
}

impl<T> Default for PerWorker<T> {
    fn default() -> Self {
        PerWorker {
            dense: Vec::new(),
            sparse: BTreeMap::new(),
        }
    }
}

impl<T: Default> PerWorker<T> {
    /// `w`'s entry, made (default) if `w` had none.
    pub(crate) fn entry(&mut self, w: WorkerId) -> &mut T {
        if w.0 >= MAX_DENSE {
            return self.sparse.entry(w).or_default();
        }
        let i = w.0 as usize;
        if self.dense.len() <= i {
            self.dense.resize_with(i + 1, || None);
        }
        self.dense[i].get_or_insert_with(T::default)
    }
}

impl<T> PerWorker<T> {
    /// `w`'s entry, if it has one.
    pub(crate) fn get_mut(&mut self, w: WorkerId) -> Option<&mut T> {
        if w.0 >= MAX_DENSE {
            return self.sparse.get_mut(&w);
        }
        self.dense.get_mut(w.0 as usize)?.as_mut()
    }

    /// The workers with an entry, in id order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = WorkerId> + '_ {
        self.dense
            .iter()
            .enumerate()
            .filter(|(_, e)| e.is_some())
            .map(|(i, _)| WorkerId(i as u32))
            .chain(self.sparse.keys().copied())
    }
}

impl<T: Default> FromIterator<WorkerId> for PerWorker<T> {
    fn from_iter<I: IntoIterator<Item = WorkerId>>(ids: I) -> Self {
        let mut p = PerWorker::default();
        for w in ids {
            p.entry(w);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_and_sparse_ids_behave_as_a_map_in_id_order() {
        let mut p: PerWorker<u32> = [3, 0, MAX_DENSE + 5, 7].map(WorkerId).into_iter().collect();
        assert_eq!(p.get_mut(WorkerId(1)), None, "a hole");
        assert_eq!(p.get_mut(WorkerId(99)), None, "past the end");
        *p.get_mut(WorkerId(MAX_DENSE + 5)).unwrap() += 2;
        *p.entry(WorkerId(1)) += 1;
        *p.entry(WorkerId(MAX_DENSE + 1)) += 4;
        let keys: Vec<u32> = p.keys().map(|w| w.0).collect();
        assert_eq!(keys, [0, 1, 3, 7, MAX_DENSE + 1, MAX_DENSE + 5]);
        assert_eq!(p.get_mut(WorkerId(MAX_DENSE + 5)), Some(&mut 2));
        assert_eq!(p.get_mut(WorkerId(1)), Some(&mut 1));
    }
}
