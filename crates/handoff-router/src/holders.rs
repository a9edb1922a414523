//! Which workers of a pool hold each published block: the pool-wide index
//! that lets kv-aware selection walk a prompt's blocks once, instead of
//! asking every worker's [`crate::prefix::PrefixIndex`] in turn.
//!
//! Dynamo keeps one radix tree for the whole pool whose nodes list the
//! workers holding each block (ai-dynamo/dynamo `lib/kv-router/src/
//! radix_tree.rs`, `RadixTree::find_matches`); with chained block hashes
//! (`handoff_core::Request::block_hashes`) that tree is a map from hash to
//! the set of its holders, here a bit per worker slot. A walk down a prompt
//! keeps the set of workers whose consecutive match is still going and
//! stops when it empties, so a selection costs O(blocks matched) lookups,
//! not O(workers × blocks).

use handoff_core::fasthash::{Near, U64Table};

/// A set of worker slots (positions in the router's worker list).
pub type Slots = u128;

/// Largest pool the index covers (bits in [`Slots`]); a larger pool is
/// scored worker by worker.
pub const MAX_SLOTS: usize = Slots::BITS as usize;

/// The bit of slot `i` (`i < MAX_SLOTS`).
pub fn bit(i: usize) -> Slots {
    1 << i
}

/// Block hash → the slots holding it. Entries with no holder are removed.
#[derive(Clone, Debug, Default)]
pub struct Holders {
    table: U64Table<Slots>,
}

impl Holders {
    /// Slot `bit` now holds every hash of `hashes`. Returns how many it did
    /// not hold before (a hash repeated in `hashes` counts once).
    pub fn add(&mut self, hashes: &[u64], bit: Slots) -> usize {
        let mut added = 0;
        self.table.update_all(hashes, |s| {
            let s = s.unwrap_or(0);
            added += usize::from(s & bit == 0);
            Some(s | bit)
        });
        added
    }

    /// Slot `bit` no longer holds any hash of `hashes` (hashes it did not
    /// hold are left alone). Returns how many it held (a hash repeated in
    /// `hashes` counts once).
    pub fn remove(&mut self, hashes: &[u64], bit: Slots) -> usize {
        let mut removed = 0;
        self.table.update_all(hashes, |s| {
            let held = s.is_some_and(|s| s & bit != 0);
            removed += usize::from(held);
            s.map(|s| s & !bit).filter(|s| *s != 0)
        });
        removed
    }

    /// Whether slot `bit` holds `hash`.
    pub fn holds(&self, hash: u64, bit: Slots) -> bool {
        self.table.get(hash).is_some_and(|s| s & bit != 0)
    }

    /// How many of `hashes`, from the first, slot `bit` holds.
    pub fn prefix_len(&self, hashes: &[u64], bit: Slots) -> usize {
        let mut near = Near::default();
        hashes
            .iter()
            .take_while(|h| {
                self.table
                    .get_near(**h, &mut near)
                    .is_some_and(|s| s & bit != 0)
            })
            .count()
    }

    /// Every hash slot `bit` holds, in no meaningful order (a scan of the
    /// whole index: for a clear or a change of layout, never per event).
    pub fn held_by(&self, bit: Slots) -> Vec<u64> {
        self.table
            .iter()
            .filter(|(_, s)| s & bit != 0)
            .map(|(h, _)| h)
            .collect()
    }

    /// Makes room for a new, empty slot `i`: slots `i..` move up one (a
    /// scan of the whole index, for a worker joining between others). A
    /// slot moved past [`MAX_SLOTS`] is dropped; callers keep pools within it.
    pub fn insert_slot(&mut self, i: usize) {
        let low = bit(i) - 1;
        let moved: Vec<(u64, Slots)> = self
            .table
            .iter()
            .filter(|(_, s)| s & !low != 0)
            .map(|(h, s)| (h, (s & low) | ((s & !low) << 1)))
            .collect();
        for (h, s) in moved {
            self.table.insert(h, s);
        }
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.table.clear();
    }

    /// Distinct hashes held by some slot.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Nothing held.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Walks `hashes` from the first with the slots of `alive`, calling
    /// `matched(slot_set, depth)` each time some slots' consecutive match
    /// ends (`depth` leading blocks held, at least 1). `more` appends further
    /// hashes when the walk reaches the end of `hashes` and returns whether
    /// it added any; slots still matching when the prompt ends get its full
    /// length. Slots that hold no leading block are never reported.
    pub fn walk(
        &self,
        hashes: &mut Vec<u64>,
        mut alive: Slots,
        mut more: impl FnMut(&mut Vec<u64>) -> bool,
        mut matched: impl FnMut(Slots, u32),
    ) {
        let mut near = Near::default();
        let mut depth = 0usize;
        while alive != 0 {
            if depth == hashes.len() && !more(hashes) {
                break;
            }
            let held = self.table.get_near(hashes[depth], &mut near).unwrap_or(0);
            let ended = alive & !held;
            if ended != 0 && depth > 0 {
                matched(ended, u32::try_from(depth).unwrap_or(u32::MAX));
            }
            alive &= held;
            depth += 1;
        }
        if alive != 0 && depth > 0 {
            matched(alive, u32::try_from(depth).unwrap_or(u32::MAX));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(h: &Holders, hashes: &[u64], alive: Slots) -> Vec<(Slots, u32)> {
        let mut v = hashes[..1.min(hashes.len())].to_vec();
        let mut next = v.len();
        let mut out = Vec::new();
        h.walk(
            &mut v,
            alive,
            |buf| {
                if next < hashes.len() {
                    buf.push(hashes[next]);
                    next += 1;
                    true
                } else {
                    false
                }
            },
            |s, d| out.push((s, d)),
        );
        out
    }

    #[test]
    fn walks_report_each_slots_consecutive_match() {
        let mut h = Holders::default();
        h.add(&[10, 11, 12], bit(0));
        h.add(&[10, 11], bit(1));
        h.add(&[11, 12], bit(2));
        assert_eq!(walk(&h, &[10, 11, 12, 13], 0b111), [(0b10, 2), (0b1, 3)]);
        assert_eq!(walk(&h, &[10, 11], 0b111), [(0b11, 2)]);
        assert_eq!(
            walk(&h, &[10, 11, 12], 0b110),
            [(0b10, 2)],
            "slot 0 not alive"
        );
        assert!(walk(&h, &[12, 11], 0b010).is_empty(), "a hole at the start");
        h.remove(&[11, 99], bit(0));
        assert_eq!(walk(&h, &[10, 11, 12], 0b111), [(0b1, 1), (0b10, 2)]);
        h.remove(&[10, 11], bit(1));
        h.remove(&[10, 12], bit(0));
        assert_eq!(h.len(), 2, "11 and 12 of slot 2");
        h.clear();
        assert!(h.is_empty());
    }
}
