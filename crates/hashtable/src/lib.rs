//! # handoff-hashtable
//!
//! [`U64Table`]: an open-addressing table from well-mixed `u64` block-hash
//! keys to small copyable values, grouping keys that differ only in their
//! low bits so that a prompt's consecutive block hashes share one probe.
//! The scheduler cores' and the router's hot block-hash indexes use it.
//! No dependencies.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// Keys per group: the low bits of a key pick its lane inside a group.
const LANE_BITS: u32 = 5;
const LANES: u64 = 1 << LANE_BITS;

/// How many consecutive keys, starting at a multiple of this, a
/// [`U64Table`] stores as one group (`Request::block_hashes` aligns a
/// chunk's blocks to it).
pub const GROUP_KEYS: u64 = LANES;

/// A group's slot: up to [`LANES`] entries whose keys agree on all but the
/// low [`LANE_BITS`] bits. `present == 0` marks an empty slot (a group with
/// no entry is never kept).
#[derive(Clone, Copy, Debug, Default)]
struct Head {
    /// The shared high bits (`key >> LANE_BITS`).
    high: u64,
    /// Which lanes hold an entry.
    present: u32,
}

/// An open-addressing table from `u64` block-hash keys to small copyable
/// values.
///
/// Keys are grouped by all but their low five bits, and a group takes one
/// slot: linear probing with backward-shift deletion over 16-byte group
/// heads (no tombstones), the lanes' values in a parallel array touched
/// only for the lane in use. The blocks of one prompt chunk carry
/// consecutive hashes (`Request::block_hashes`), so storing, matching or
/// evicting a prompt touches one group per 32 blocks rather than one cache
/// miss per block; arbitrary well-mixed keys simply fill one lane per
/// group. Kept at most half full. Used for the hot block-hash indexes.
#[derive(Clone, Debug)]
pub struct U64Table<V: Copy + Default> {
    heads: Vec<Head>,
    /// Lane values per slot; a lane not present in its head is garbage.
    values: Vec<[V; LANES as usize]>,
    /// Entries (not groups).
    len: usize,
    groups: usize,
    mask: usize,
}

impl<V: Copy + Default> Default for U64Table<V> {
    fn default() -> Self {
        U64Table::with_capacity(16)
    }
}

fn split(k: u64) -> (u64, u32) {
    (k >> LANE_BITS, (k & (LANES - 1)) as u32)
}

/// Where a [`U64Table`] last found a key's group. Passed to the `*_near`
/// methods across a run of consecutive keys (a prompt's blocks), it skips
/// the probe for every key of an already found group. A stale hint (the
/// group moved or left) is detected and ignored, so any hint is safe.
#[derive(Clone, Copy, Debug, Default)]
pub struct Near {
    slot: usize,
}

/// Calls `f(high, lanes, repeats)` for each run of consecutive `keys` that
/// share a group: the run's lane mask and how many of its keys repeated a
/// lane already in the run.
fn for_group_runs(keys: &[u64], mut f: impl FnMut(u64, u32, usize)) {
    let Some((&first, rest)) = keys.split_first() else {
        return;
    };
    // A run's repeats are its length less its distinct lanes, counted once
    // when it ends rather than tested key by key.
    let (mut high, lane) = split(first);
    let mut mask = 1u32 << lane;
    let mut len = 1usize;
    for &k in rest {
        let (h, lane) = split(k);
        if h != high {
            f(high, mask, len - mask.count_ones() as usize);
            (high, mask, len) = (h, 0, 0);
        }
        mask |= 1 << lane;
        len += 1;
    }
    f(high, mask, len - mask.count_ones() as usize);
}

impl<V: Copy + Default> U64Table<V> {
    /// A table for about `n` keys in runs before it grows. Sized for
    /// prompt-like keys (about two groups per 32-key run) rather than the
    /// worst case of one key per group: an oversized table spreads its few
    /// groups over more memory than the caches hold, and growth is cheap.
    pub fn with_capacity(n: usize) -> Self {
        let cap = (n / LANES as usize * 4).max(16).next_power_of_two();
        U64Table {
            heads: vec![Head::default(); cap],
            values: vec![[V::default(); LANES as usize]; cap],
            len: 0,
            groups: 0,
            mask: cap - 1,
        }
    }

    fn home(&self, high: u64) -> usize {
        // One multiply spreads both mixed and small sequential group keys.
        ((high.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 17) as usize) & self.mask
    }

    /// The slot of group `high`, or the empty slot ending its probe run.
    fn find(&self, high: u64) -> Result<usize, usize> {
        let mut i = self.home(high);
        loop {
            let h = self.heads[i];
            if h.present == 0 {
                return Err(i);
            }
            if h.high == high {
                return Ok(i);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// [`Self::find`], trying `near` first and updating it.
    fn find_near(&self, high: u64, near: &mut Near) -> Result<usize, usize> {
        if let Some(h) = self.heads.get(near.slot) {
            if h.present != 0 && h.high == high {
                return Ok(near.slot);
            }
        }
        let r = self.find(high);
        if let Ok(i) = r {
            *near = Near { slot: i };
        }
        r
    }

    /// The slot and lane holding `k`.
    fn entry(&self, k: u64, near: &mut Near) -> Option<(usize, usize)> {
        let (high, lane) = split(k);
        let i = self.find_near(high, near).ok()?;
        (self.heads[i].present & (1 << lane) != 0).then_some((i, lane as usize))
    }

    /// The value for `k`.
    pub fn get(&self, k: u64) -> Option<V> {
        self.get_near(k, &mut Near::default())
    }

    /// [`Self::get`] with a hint.
    pub fn get_near(&self, k: u64, near: &mut Near) -> Option<V> {
        self.entry(k, near).map(|(i, lane)| self.values[i][lane])
    }

    /// Whether `k` is present.
    pub fn contains(&self, k: u64) -> bool {
        self.entry(k, &mut Near::default()).is_some()
    }

    /// How many of `keys`, from the first, are present.
    pub fn prefix_len(&self, keys: &[u64]) -> usize {
        let mut near = Near::default();
        keys.iter()
            .take_while(|&&k| self.entry(k, &mut near).is_some())
            .count()
    }

    /// Inserts `v` under every key of `keys` (replacing present values).
    /// Consecutive keys of one group are applied as one mask.
    pub fn insert_all(&mut self, keys: &[u64], v: V) {
        let mut near = Near::default();
        for_group_runs(keys, |high, mask, _| {
            self.set_lanes(high, mask, v, &mut near)
        });
    }

    /// Removes every key of `keys`; returns how many were not present (a
    /// key repeated within `keys` counts as absent the second time).
    pub fn remove_all(&mut self, keys: &[u64]) -> usize {
        let mut near = Near::default();
        let mut absent = 0;
        for_group_runs(keys, |high, mask, repeats| {
            let removed = match self.find_near(high, &mut near) {
                Ok(i) => self.clear_lanes(i, mask),
                Err(_) => 0,
            };
            absent += repeats + (mask & !removed).count_ones() as usize;
        });
        absent
    }

    /// Replaces the value of every key of `keys` by `f(value)` (`None`:
    /// absent); `f` returning `None` leaves the key absent, removing it if
    /// present. Consecutive keys of one group share one probe, and a key
    /// repeated within such a run is updated once.
    pub fn update_all(&mut self, keys: &[u64], mut f: impl FnMut(Option<V>) -> Option<V>) {
        let mut near = Near::default();
        for_group_runs(keys, |high, mask, _| {
            let found = self.find_near(high, &mut near);
            let (i, present) = match found {
                Ok(i) => (i, self.heads[i].present),
                Err(i) => (i, 0),
            };
            let (mut set, mut m) = (0u32, mask);
            // In place: a lane left absent may hold garbage, as always.
            let vals = &mut self.values[i];
            while m != 0 {
                let lane = m.trailing_zeros() as usize;
                m &= m - 1;
                let old = (present & (1 << lane) != 0).then(|| vals[lane]);
                if let Some(v) = f(old) {
                    vals[lane] = v;
                    set |= 1 << lane;
                }
            }
            let now = (present & !mask) | set;
            match found {
                Ok(_) if now == 0 => {
                    self.len -= present.count_ones() as usize;
                    self.remove_slot(i);
                }
                Ok(_) => {
                    self.len = self.len + now.count_ones() as usize - present.count_ones() as usize;
                    self.heads[i].present = now;
                }
                Err(_) if now == 0 => {}
                Err(_) => {
                    self.len += now.count_ones() as usize;
                    self.groups += 1;
                    self.heads[i] = Head { high, present: now };
                    near = Near { slot: i };
                    if self.groups * 2 > self.heads.len() {
                        self.grow();
                    }
                }
            }
        });
    }

    /// Inserts `v` under `k` unless present; returns the present value then.
    pub fn try_insert(&mut self, k: u64, v: V) -> Result<(), V> {
        self.try_insert_near(k, v, &mut Near::default())
    }

    /// [`Self::try_insert_near`] of `keys[j] -> values[j]` in order, up to
    /// the first key already present (which is left as it is); returns how
    /// many were inserted. Consecutive keys of one group take one probe and
    /// one write of its head (the vLLM pool publishes a prompt's blocks, 32
    /// consecutive hashes per chunk, through this). The table ends as the
    /// key-by-key insertions leave it: it grows at the same group count.
    pub fn try_insert_run(&mut self, keys: &[u64], values: &[V], near: &mut Near) -> usize {
        let len = keys.len().min(values.len());
        let mut n = 0;
        while n < len {
            let (high, _) = split(keys[n]);
            // The run of keys in this group, stopping before a repeat (which
            // the key-by-key path would find present).
            let (mut m, mut mask) = (n, 0u32);
            while m < len {
                let (h, lane) = split(keys[m]);
                if h != high || mask & (1 << lane) != 0 {
                    break;
                }
                mask |= 1 << lane;
                m += 1;
            }
            let i = match self.find_near(high, near) {
                Ok(i) => {
                    let present = self.heads[i].present & mask;
                    if present != 0 {
                        // Stop before the first present key, in key order.
                        m = (n..m)
                            .find(|&j| present & (1 << split(keys[j]).1) != 0)
                            .unwrap_or(m);
                        mask = keys[n..m].iter().fold(0, |acc, &k| acc | (1 << split(k).1));
                    }
                    i
                }
                Err(i) => {
                    self.heads[i] = Head { high, present: 0 };
                    self.groups += 1;
                    *near = Near { slot: i };
                    i
                }
            };
            self.heads[i].present |= mask;
            self.len += m - n;
            for j in n..m {
                self.values[i][split(keys[j]).1 as usize] = values[j];
            }
            if self.groups * 2 > self.heads.len() {
                self.grow();
            }
            // A next key in the same group is a repeat or a present key,
            // where the key-by-key insertions stop too.
            let stopped = m < len && split(keys[m]).0 == high;
            n = m;
            if stopped {
                break;
            }
        }
        n
    }

    /// [`Self::try_insert`] with a hint.
    pub fn try_insert_near(&mut self, k: u64, v: V, near: &mut Near) -> Result<(), V> {
        let (high, lane) = split(k);
        let bit = 1u32 << lane;
        // One probe: the lookup's slot is where the insertion goes (the
        // vLLM pool publishes every block through this).
        match self.find_near(high, near) {
            Ok(i) => {
                let head = &mut self.heads[i];
                if head.present & bit != 0 {
                    return Err(self.values[i][lane as usize]);
                }
                head.present |= bit;
                self.len += 1;
                self.values[i][lane as usize] = v;
            }
            Err(i) => {
                self.heads[i] = Head { high, present: bit };
                self.values[i][lane as usize] = v;
                self.len += 1;
                self.groups += 1;
                *near = Near { slot: i };
                if self.groups * 2 > self.heads.len() {
                    self.grow();
                }
            }
        }
        Ok(())
    }

    /// Inserts or replaces.
    pub fn insert(&mut self, k: u64, v: V) {
        self.insert_near(k, v, &mut Near::default());
    }

    /// [`Self::insert`] with a hint.
    pub fn insert_near(&mut self, k: u64, v: V, near: &mut Near) {
        let (high, lane) = split(k);
        self.set_lanes(high, 1 << lane, v, near);
    }

    /// Removes `k`. A group left empty is removed by shifting later members
    /// of its probe run back, so no tombstone is needed.
    pub fn remove(&mut self, k: u64) -> Option<V> {
        self.remove_near(k, &mut Near::default())
    }

    /// [`Self::remove`] with a hint.
    pub fn remove_near(&mut self, k: u64, near: &mut Near) -> Option<V> {
        let (i, lane) = self.entry(k, near)?;
        let removed = self.values[i][lane];
        self.clear_lanes(i, 1 << lane);
        Some(removed)
    }

    /// Stores `v` in the `mask` lanes of group `high`, creating the group
    /// if needed; the one write path of every insertion.
    fn set_lanes(&mut self, high: u64, mask: u32, v: V, near: &mut Near) {
        let i = match self.find_near(high, near) {
            Ok(i) => i,
            Err(i) => {
                self.groups += 1;
                *near = Near { slot: i };
                i
            }
        };
        let head = &mut self.heads[i];
        self.len += (mask & !head.present).count_ones() as usize;
        *head = Head {
            high,
            present: head.present | mask,
        };
        if std::mem::size_of::<V>() != 0 {
            let mut m = mask;
            while m != 0 {
                self.values[i][m.trailing_zeros() as usize] = v;
                m &= m - 1;
            }
        }
        if self.groups * 2 > self.heads.len() {
            self.grow();
        }
    }

    /// Clears the `mask` lanes of the group in slot `i`, dropping the group
    /// once empty; returns the lanes that were present.
    fn clear_lanes(&mut self, i: usize, mask: u32) -> u32 {
        let present = self.heads[i].present;
        let removed = present & mask;
        self.len -= removed.count_ones() as usize;
        self.heads[i].present = present & !mask;
        if self.heads[i].present == 0 {
            self.remove_slot(i);
        }
        removed
    }

    fn remove_slot(&mut self, mut i: usize) {
        self.heads[i] = Head::default();
        self.groups -= 1;
        let mut j = i;
        loop {
            j = (j + 1) & self.mask;
            let h = self.heads[j];
            if h.present == 0 {
                break;
            }
            let home = self.home(h.high);
            // Move the group at j into the hole at i unless its home lies
            // cyclically in (i, j].
            let in_range = if i <= j {
                i < home && home <= j
            } else {
                i < home || home <= j
            };
            if !in_range {
                self.heads[i] = h;
                self.values[i] = self.values[j];
                self.heads[j] = Head::default();
                i = j;
            }
        }
    }

    fn grow(&mut self) {
        let heads = std::mem::take(&mut self.heads);
        let values = std::mem::take(&mut self.values);
        let cap = heads.len() * 2;
        self.heads = vec![Head::default(); cap];
        self.values = vec![[V::default(); LANES as usize]; cap];
        self.mask = cap - 1;
        for (h, v) in heads.into_iter().zip(values) {
            if h.present == 0 {
                continue;
            }
            if let Err(i) = self.find(h.high) {
                self.heads[i] = h;
                self.values[i] = v;
            }
        }
    }

    /// Loads the home slot (head and values) of each group among `keys`,
    /// consecutive keys of one group once, in one tight loop; changes
    /// nothing. A loop that then inserts these keys one at a time (the vLLM
    /// pool's `publish`) finds their groups in cache: a group's first probe
    /// is otherwise a miss, paid one after another between the loop's other
    /// work, where independent loads with nothing between them overlap (safe
    /// Rust has no prefetch). At most half full, most groups sit in their
    /// home slot. The bulk operations do not warm: measured no faster at
    /// 128 workers (their per-group work is short enough for the processor
    /// to overlap the misses itself).
    pub fn warm(&self, keys: impl IntoIterator<Item = u64>) {
        let mut last = None;
        let mut sum = 0u64;
        for k in keys {
            let high = k >> LANE_BITS;
            if last == Some(high) {
                continue;
            }
            last = Some(high);
            let i = self.home(high);
            sum = sum.wrapping_add(self.heads[i].high);
            std::hint::black_box(self.values[i][(k & (LANES - 1)) as usize]);
        }
        std::hint::black_box(sum);
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Drops every entry, keeping the allocation.
    pub fn clear(&mut self) {
        self.heads.iter_mut().for_each(|h| *h = Head::default());
        self.len = 0;
        self.groups = 0;
    }

    /// Entries in slot order (arbitrary; never let it reach an output).
    pub fn iter(&self) -> impl Iterator<Item = (u64, V)> + '_ {
        self.heads
            .iter()
            .zip(&self.values)
            .filter(|(h, _)| h.present != 0)
            .flat_map(|(h, vals)| {
                (0..LANES as u32)
                    .filter(move |lane| h.present & (1 << lane) != 0)
                    .map(move |lane| ((h.high << LANE_BITS) | u64::from(lane), vals[lane as usize]))
            })
    }
}

#[cfg(test)]
mod table_tests {
    use super::*;
    use handoff_core::Rng;

    #[test]
    fn groups_match_the_request_hash_alignment() {
        assert_eq!(GROUP_KEYS, handoff_core::request::BLOCK_HASH_GROUP);
    }
    use std::collections::HashMap;

    proptest::proptest! {
        /// Bulk operations over runs of up to 2,000 consecutive keys (many
        /// groups, growth from a tiny table, a key repeated at distance 1
        /// and 2 inside a run), equal a `HashMap` applied key by key.
        #[test]
        fn long_bulk_runs_match_a_hashmap(
            ops in proptest::collection::vec(
                (0u8..3, 0usize..4, 0usize..2_000, 0u64..64, proptest::bool::ANY),
                1..10,
            ),
        ) {
            let mut t: U64Table<u64> = U64Table::with_capacity(1);
            let mut m: HashMap<u64, u64> = HashMap::new();
            let bases = [0u64, 1 << 40, 3 << 50, 0x1234_5678_9abc_0000];
            for (step, (kind, base, len, offset, dup)) in ops.into_iter().enumerate() {
                let step = step as u64;
                let start = bases[base] + offset;
                let mut keys: Vec<u64> = (start..start + len as u64).collect();
                if dup && kind < 2 && len > 512 {
                    let k = keys[511];
                    keys.insert(512, k);
                    keys.insert(514, k);
                }
                match kind {
                    0 => {
                        t.insert_all(&keys, step);
                        for &k in &keys {
                            m.insert(k, step);
                        }
                    }
                    1 => {
                        let absent = keys.iter().filter(|k| m.remove(k).is_none()).count();
                        proptest::prop_assert_eq!(t.remove_all(&keys), absent);
                    }
                    _ => {
                        // Insert when absent, drop odd values, bump even ones.
                        let f = |v: Option<u64>| match v {
                            None => Some(step),
                            Some(x) if x % 2 == 1 => None,
                            Some(x) => Some(x + 1),
                        };
                        t.update_all(&keys, f);
                        for &k in &keys {
                            match f(m.get(&k).copied()) {
                                Some(v) => m.insert(k, v),
                                None => m.remove(&k),
                            };
                        }
                    }
                }
                proptest::prop_assert_eq!(t.len(), m.len());
            }
            let mut a: Vec<_> = t.iter().collect();
            let mut b: Vec<_> = m.into_iter().collect();
            a.sort();
            b.sort();
            proptest::prop_assert_eq!(a, b);
        }
    }

    proptest::proptest! {
        /// A run insertion equals `try_insert_near` key by key up to the
        /// first present key: the count, the contents, and the table's size
        /// and group count (so it grew at the same point), over runs that
        /// count up or down, cross groups, repeat a key and meet keys
        /// inserted before.
        #[test]
        fn try_insert_run_matches_key_by_key(
            ops in proptest::collection::vec(
                (0u64..200, 1usize..100, proptest::bool::ANY, proptest::option::of(0usize..100)),
                1..20,
            ),
        ) {
            let mut run: U64Table<u64> = U64Table::with_capacity(1);
            let mut one: U64Table<u64> = U64Table::with_capacity(1);
            for (step, (start, len, down, repeat)) in ops.into_iter().enumerate() {
                let mut keys: Vec<u64> = (start..start + len as u64).collect();
                if down {
                    keys.reverse();
                }
                if let Some(r) = repeat.filter(|&r| r < len) {
                    keys.insert(r.min(len - 1) + 1, keys[r]);
                }
                let values: Vec<u64> = keys.iter().map(|k| k * 1000 + step as u64).collect();
                let got = run.try_insert_run(&keys, &values, &mut Near::default());
                let mut near = Near::default();
                let want = keys
                    .iter()
                    .zip(&values)
                    .take_while(|(&k, &v)| one.try_insert_near(k, v, &mut near).is_ok())
                    .count();
                proptest::prop_assert_eq!(got, want);
                proptest::prop_assert_eq!(
                    (run.len(), run.groups, run.heads.len()),
                    (one.len(), one.groups, one.heads.len())
                );
            }
            let mut a: Vec<_> = run.iter().collect();
            let mut b: Vec<_> = one.iter().collect();
            a.sort();
            b.sort();
            proptest::prop_assert_eq!(a, b);
        }
    }

    #[test]
    fn update_all_matches_a_hashmap() {
        let mut t: U64Table<u64> = U64Table::default();
        let mut m: HashMap<u64, u64> = HashMap::new();
        let mut rng = Rng::seeded(5);
        for step in 0..20_000u64 {
            // Runs of consecutive keys (one or two groups) in a small space.
            let start = rng.below(4_000);
            let keys: Vec<u64> = (start..start + rng.below(40)).collect();
            let bit = 1u64 << rng.below(4);
            let set = rng.below(2) == 0;
            let f = |v: Option<u64>| {
                let v = if set {
                    v.unwrap_or(0) | bit
                } else {
                    v.unwrap_or(0) & !bit
                };
                (v != 0).then_some(v)
            };
            t.update_all(&keys, f);
            for k in &keys {
                match f(m.get(k).copied()) {
                    Some(v) => m.insert(*k, v),
                    None => m.remove(k),
                };
            }
            assert_eq!(t.len(), m.len(), "step {step}");
            if step % 1000 == 0 {
                for k in 0..4_100 {
                    assert_eq!(t.get(k), m.get(&k).copied(), "step {step} key {k}");
                }
            }
        }
    }

    #[test]
    fn matches_a_hashmap_under_churn() {
        let mut t: U64Table<u32> = U64Table::default();
        let mut m: HashMap<u64, u32> = HashMap::new();
        let mut rng = Rng::seeded(3);
        for step in 0..200_000u32 {
            // A small key space forces long probe runs and many deletions.
            let k = rng.below(5_000);
            match rng.below(3) {
                0 => assert_eq!(t.remove(k), m.remove(&k), "step {step}"),
                1 => match m.get(&k).copied() {
                    Some(v) => assert_eq!(t.try_insert(k, step), Err(v), "step {step}"),
                    None => {
                        assert_eq!(t.try_insert(k, step), Ok(()), "step {step}");
                        m.insert(k, step);
                    }
                },
                _ => assert_eq!(t.get(k), m.get(&k).copied(), "step {step}"),
            }
            assert_eq!(t.len(), m.len());
        }
        let mut a: Vec<_> = t.iter().collect();
        let mut b: Vec<_> = m.into_iter().collect();
        a.sort();
        b.sort();
        assert_eq!(a, b);
    }

    #[test]
    fn runs_of_consecutive_mixed_keys_share_groups() {
        // Prompt-like keys: runs of consecutive values from random bases,
        // inserted, probed and removed in an interleaved order.
        let mut t: U64Table<u32> = U64Table::with_capacity(4);
        let mut m: HashMap<u64, u32> = HashMap::new();
        let mut rng = Rng::seeded(9);
        let bases: Vec<u64> = (0..300).map(|_| rng.next_u64()).collect();
        for step in 0..100_000u32 {
            let base = bases[rng.below(bases.len() as u64) as usize];
            let k = base.wrapping_add(rng.below(40));
            if rng.below(2) == 0 {
                assert_eq!(t.remove(k), m.remove(&k), "step {step}");
            } else {
                t.insert(k, step);
                m.insert(k, step);
            }
            assert_eq!(t.get(k), m.get(&k).copied(), "step {step}");
            assert_eq!(t.len(), m.len());
        }
        assert!(t.groups <= t.len, "groups hold at least one entry each");
        assert!(t.iter().all(|(k, v)| t.get(k) == Some(v)));
        let mut a: Vec<_> = t.iter().collect();
        let mut b: Vec<_> = m.into_iter().collect();
        a.sort();
        b.sort();
        assert_eq!(a, b);
        t.clear();
        assert!(t.is_empty() && t.iter().next().is_none());
    }

    #[test]
    fn bulk_insert_and_remove_match_one_key_at_a_time() {
        let mut rng = Rng::seeded(23);
        let bases: Vec<u64> = (0..8).map(|_| rng.next_u64()).collect();
        let mut bulk: U64Table<()> = U64Table::with_capacity(1);
        let mut single: U64Table<()> = U64Table::with_capacity(1);
        for step in 0..20_000 {
            // Runs of consecutive keys, sometimes repeated or out of order.
            let base = bases[rng.below(8) as usize];
            let start = rng.below(64);
            let mut keys: Vec<u64> = (start..start + rng.below(70)).map(|i| base + i).collect();
            if rng.below(4) == 0 && !keys.is_empty() {
                let k = keys[rng.below(keys.len() as u64) as usize];
                keys.push(k);
                let last = keys.len() - 1;
                keys.swap(0, 1.min(last));
            }
            if rng.below(2) == 0 {
                bulk.insert_all(&keys, ());
                keys.iter().for_each(|&k| single.insert(k, ()));
            } else {
                let absent = keys.iter().filter(|&&k| single.remove(k).is_none()).count();
                assert_eq!(bulk.remove_all(&keys), absent, "step {step}");
            }
            assert_eq!(bulk.len(), single.len(), "step {step}");
            assert_eq!(bulk.groups, single.groups, "step {step}");
        }
        let mut a: Vec<_> = bulk.iter().collect();
        let mut b: Vec<_> = single.iter().collect();
        a.sort();
        b.sort();
        assert_eq!(a, b);
    }

    #[test]
    fn one_long_lived_hint_is_always_safe() {
        // A single `Near` reused across unrelated keys, removals that shift
        // groups and growth: a stale hint must never misdirect an operation.
        let mut t: U64Table<u32> = U64Table::with_capacity(1);
        let mut m: HashMap<u64, u32> = HashMap::new();
        let mut rng = Rng::seeded(17);
        let mut near = Near::default();
        let bases: Vec<u64> = (0..64).map(|_| rng.next_u64() & !31).collect();
        for step in 0..100_000u32 {
            let k = bases[rng.below(64) as usize] + rng.below(48);
            match rng.below(4) {
                0 => assert_eq!(t.remove_near(k, &mut near), m.remove(&k), "step {step}"),
                1 => {
                    let expect = m.get(&k).copied();
                    let got = t.try_insert_near(k, step, &mut near);
                    match expect {
                        Some(v) => assert_eq!(got, Err(v), "step {step}"),
                        None => {
                            assert_eq!(got, Ok(()), "step {step}");
                            m.insert(k, step);
                        }
                    }
                }
                2 => {
                    t.insert_near(k, step, &mut near);
                    m.insert(k, step);
                }
                _ => assert_eq!(t.get_near(k, &mut near), m.get(&k).copied(), "step {step}"),
            }
            assert_eq!(t.len(), m.len());
        }
        let run: Vec<u64> = (0..40).map(|i| bases[0] + i).collect();
        let expect = run.iter().take_while(|k| m.contains_key(k)).count();
        assert_eq!(t.prefix_len(&run), expect);
    }
}
