//! A fast hasher for maps keyed by integers that are already well mixed
//! (block hashes, handoff ids): hot-path maps in the scheduler cores spend
//! most of their time hashing with std's DoS-resistant SipHash otherwise.
//! Keys come from the model, not from a network peer, so flooding is not a
//! concern here.

use core::hash::{BuildHasherDefault, Hasher};
use std::collections::{HashMap, HashSet};

/// Folds written integers with a multiply-xorshift; see the module docs.
#[derive(Clone, Copy, Debug, Default)]
pub struct FastHasher(u64);

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        let x = self.0;
        (x ^ (x >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ (x >> 32)
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut buf = [0u8; 8];
            buf[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(buf));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_u128(&mut self, n: u128) {
        self.write_u64(n as u64);
        self.write_u64((n >> 64) as u64);
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// A `HashMap` using [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;
/// A `HashSet` using [`FastHasher`].
pub type FastSet<K> = HashSet<K, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_integers_spread() {
        let mut m: FastMap<u64, u64> = FastMap::default();
        for i in 0..10_000u64 {
            m.insert(i, i * 2);
        }
        assert_eq!(m.get(&4321), Some(&8642));
        let tops: FastSet<u64> = (0..256u64)
            .map(|i| {
                let mut h = FastHasher::default();
                h.write_u64(i);
                h.finish() >> 57
            })
            .collect();
        assert!(
            tops.len() > 64,
            "top bits must vary for hashbrown's control bytes"
        );
    }
}

/// A hash map for tables with heavy insert/remove churn (cache indexes).
///
/// hashbrown marks a removed slot as a tombstone when its probe group is
/// full, and only a resize clears tombstones. A table that churns at a steady
/// size therefore fills with them, and every lookup of an absent key and
/// every removal probes ever longer runs. This wrapper rebuilds the table
/// once removals since the last rebuild exceed its size (amortised O(1)),
/// keeping it at most half full.
#[derive(Clone, Debug)]
pub struct ChurnMap<K, V, S = BuildHasherDefault<FastHasher>> {
    map: HashMap<K, V, S>,
    removals: usize,
}

impl<K: core::hash::Hash + Eq, V, S: core::hash::BuildHasher + Default> Default
    for ChurnMap<K, V, S>
{
    fn default() -> Self {
        ChurnMap {
            map: HashMap::default(),
            removals: 0,
        }
    }
}

impl<K: core::hash::Hash + Eq, V, S: core::hash::BuildHasher + Default> ChurnMap<K, V, S> {
    /// The value for `k`.
    pub fn get(&self, k: &K) -> Option<&V> {
        self.map.get(k)
    }

    /// The value for `k`, mutably.
    pub fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        self.map.get_mut(k)
    }

    /// Whether `k` is present.
    pub fn contains_key(&self, k: &K) -> bool {
        self.map.contains_key(k)
    }

    /// Inserts, returning the previous value.
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        self.map.insert(k, v)
    }

    /// Inserts `v` under `k` unless `k` is present; returns the present value
    /// then. One probe instead of a lookup and an insert.
    pub fn try_insert(&mut self, k: K, v: V) -> Result<(), &V> {
        match self.map.entry(k) {
            std::collections::hash_map::Entry::Occupied(o) => Err(o.into_mut()),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(v);
                Ok(())
            }
        }
    }

    /// Removes `k`, rebuilding the table when tombstones may have piled up.
    pub fn remove(&mut self, k: &K) -> Option<V> {
        let v = self.map.remove(k);
        if v.is_some() {
            self.removals += 1;
            if self.removals > self.map.len().max(1024) {
                self.rebuild();
            }
        }
        v
    }

    fn rebuild(&mut self) {
        let mut fresh = HashMap::with_capacity_and_hasher(self.map.len() * 2, S::default());
        fresh.extend(self.map.drain());
        self.map = fresh;
        self.removals = 0;
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Iterates in arbitrary order (never let this order reach an output).
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.map.iter()
    }

    /// Values in arbitrary order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.map.values()
    }
}

#[cfg(test)]
mod churn_tests {
    use super::*;

    #[test]
    fn churn_keeps_contents() {
        let mut m: ChurnMap<u64, u64> = ChurnMap::default();
        for i in 0..50_000u64 {
            m.insert(i, i);
            if i >= 100 {
                assert_eq!(m.remove(&(i - 100)), Some(i - 100));
            }
        }
        assert_eq!(m.len(), 100);
        assert_eq!(m.get(&49_999), Some(&49_999));
        assert!(!m.contains_key(&0));
    }
}
