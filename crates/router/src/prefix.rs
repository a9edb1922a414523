//! Which prompt blocks each worker has published as reusable cache.
//!
//! After Dynamo's `KvIndexer` / `RadixTree::apply_event` and `find_matches`
//! (ai-dynamo/dynamo `lib/kv-router/src/radix_tree.rs`), simplified by the
//! fact that our block hashes are already chained (each covers its parent,
//! see `handoff_core::Request::block_hashes`): a worker's prefix tree is just
//! the set of hashes it has stored, and a request's overlap is the number of
//! its leading block hashes in that set.
//!
//! Rules taken from Dynamo:
//! - `Stored` whose `parent_hash` this worker never stored (or has since
//!   removed) is skipped whole, as Dynamo skips it with
//!   `ParentBlockNotFound`; so stored blocks always hang off stored parents.
//! - `Removed` of an unknown hash is skipped and counted (`BlockNotFound`),
//!   the rest of the batch still applies.
//! - `Cleared` drops everything the worker had.
//!
//! One deliberate difference: overlap counts *consecutive* leading blocks.
//! Dynamo's tree walk can keep crediting a worker below a parent it no longer
//! holds; an engine's own prefix match (vLLM `find_longest_cache_hit`, SGLang
//! `match_prefix`) stops at the first missing block, and so do we.
//!
//! Only blocks a worker *published* are here. A destination reservation
//! publishes nothing until activation (DEP invariant 4), so it can never
//! attract traffic.

use handoff_core::{KvEvent, KvEventData};
use handoff_hashtable::U64Table;

/// What applying one event did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// A `Stored` was skipped because its parent is not held.
    pub orphan_store: bool,
    /// Hashes in a `Removed` that were not held.
    pub unknown_removals: u64,
}

/// One worker's set of published blocks, as [`apply_event`] changes it.
pub(crate) trait BlockSet {
    /// Whether `hash` is held.
    fn holds(&self, hash: u64) -> bool;
    /// Holds every hash of `hashes`.
    fn add(&mut self, hashes: &[u64]);
    /// Holds none of `hashes`; returns how many of them were held (a hash
    /// repeated in `hashes` counts once).
    fn remove(&mut self, hashes: &[u64]) -> usize;
    /// Holds nothing.
    fn clear(&mut self);
}

/// Applies a KV event to one worker's blocks by the rules in the module
/// docs: the one place they live, whichever layout holds the blocks
/// (`crate::published`).
pub(crate) fn apply_event(set: &mut impl BlockSet, event: &KvEvent) -> Applied {
    let mut applied = Applied::default();
    match &event.data {
        KvEventData::Stored {
            parent_hash,
            block_hashes,
        } => {
            if parent_hash.is_some_and(|p| !set.holds(p)) {
                applied.orphan_store = true;
            } else {
                set.add(block_hashes);
            }
        }
        KvEventData::Removed { block_hashes } => {
            let removed = set.remove(block_hashes);
            applied.unknown_removals = (block_hashes.len() - removed) as u64;
        }
        KvEventData::Cleared => set.clear(),
    }
    applied
}

impl BlockSet for U64Table<()> {
    fn holds(&self, hash: u64) -> bool {
        self.contains(hash)
    }

    fn add(&mut self, hashes: &[u64]) {
        self.insert_all(hashes, ());
    }

    fn remove(&mut self, hashes: &[u64]) -> usize {
        hashes.len() - self.remove_all(hashes)
    }

    fn clear(&mut self) {
        U64Table::clear(self);
    }
}

/// One worker's published cache blocks. Lookups only, so the table's
/// iteration order never matters; it churns with every Stored and Removed,
/// hence a [`U64Table`] (no tombstones).
#[derive(Clone, Debug, Default)]
pub struct PrefixIndex {
    blocks: U64Table<()>,
}

impl PrefixIndex {
    /// An empty index.
    pub fn new() -> Self {
        PrefixIndex::default()
    }

    /// Applies a KV event.
    pub fn apply(&mut self, event: &KvEvent) -> Applied {
        apply_event(&mut self.blocks, event)
    }

    /// How many of `hashes`, from the first, are held.
    pub fn overlap(&self, hashes: &[u64]) -> u32 {
        u32::try_from(self.blocks.prefix_len(hashes)).unwrap_or(u32::MAX)
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Nothing held.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.blocks.clear();
    }

    /// Whether `hash` is held.
    pub fn contains(&self, hash: u64) -> bool {
        self.blocks.contains(hash)
    }

    /// The hashes held, in no meaningful order (only for keeping the
    /// pool-wide [`crate::holders::Holders`] in step; never an output).
    pub fn hashes(&self) -> impl Iterator<Item = u64> + '_ {
        self.blocks.iter().map(|(h, ())| h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(parent: Option<u64>, hashes: &[u64]) -> KvEvent {
        KvEvent {
            event_id: 0,
            data: KvEventData::Stored {
                parent_hash: parent,
                block_hashes: hashes.to_vec(),
            },
        }
    }

    fn removed(hashes: &[u64]) -> KvEvent {
        KvEvent {
            event_id: 0,
            data: KvEventData::Removed {
                block_hashes: hashes.to_vec(),
            },
        }
    }

    #[test]
    fn overlap_is_consecutive_from_the_start() {
        let mut p = PrefixIndex::new();
        p.apply(&stored(None, &[1, 2, 3]));
        assert_eq!(p.overlap(&[1, 2, 3, 4]), 3);
        assert_eq!(p.overlap(&[2, 3]), 2);
        assert_eq!(p.overlap(&[9, 1, 2]), 0);
        p.apply(&removed(&[2]));
        assert_eq!(p.overlap(&[1, 2, 3]), 1, "a hole stops the match");
    }

    #[test]
    fn orphans_are_skipped_and_unknown_removals_counted() {
        let mut p = PrefixIndex::new();
        assert!(p.apply(&stored(Some(7), &[8])).orphan_store);
        assert!(p.is_empty());
        p.apply(&stored(None, &[7]));
        assert!(!p.apply(&stored(Some(7), &[8])).orphan_store);
        assert_eq!(p.overlap(&[7, 8]), 2);
        assert_eq!(p.apply(&removed(&[8, 99, 98])).unknown_removals, 2);
        assert_eq!(p.len(), 1);
        p.apply(&KvEvent {
            event_id: 1,
            data: KvEventData::Cleared,
        });
        assert!(p.is_empty());
    }
}
