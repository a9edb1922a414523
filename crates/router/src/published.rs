//! The one home of a pool's published blocks: what the router knows, from
//! KV events, each worker holds.
//!
//! Two layouts answer the same questions. A small pool keeps one
//! [`PrefixIndex`] per worker: a block event costs one probe, and scoring
//! asks a few workers in turn. A large kv-aware pool keeps only the
//! pool-wide [`Holders`] (a bit per worker slot), which kv-aware selection
//! walks once per prompt; a worker's own questions (its overlap, whether it
//! holds a block, how many it holds) are answered from its bit. Keeping the
//! per-worker indexes beside it, as an earlier version did, paid a second
//! probe per block event for nothing: at 64 prefill and 64 decode workers
//! the per-worker index was a quarter of the router's event cost.
//!
//! Both layouts apply the same rules ([`PrefixIndex`]'s, after Dynamo's
//! `RadixTree::apply_event`) and report the same [`Applied`]; the router's
//! `indexed_selection_equals_the_scan` proptest runs one of each side by
//! side and compares what every worker holds.

use crate::holders::Slots;
use crate::holders::{bit, Holders, MAX_SLOTS};
use crate::prefix::{apply_event, Applied, BlockSet, PrefixIndex};
use handoff_core::{KvEvent, KvEventData};

/// What a pool's workers have published; see the module docs.
#[derive(Clone, Debug)]
pub(crate) enum Published {
    /// One index per worker, by slot.
    PerWorker(Vec<PrefixIndex>),
    /// One pool-wide index; `held[i]` counts the blocks slot `i` holds.
    /// At most [`MAX_SLOTS`] slots.
    Pooled { holders: Holders, held: Vec<usize> },
}

impl Default for Published {
    fn default() -> Self {
        Published::PerWorker(Vec::new())
    }
}

impl Published {
    /// Slots (workers) covered.
    fn slots(&self) -> usize {
        match self {
            Published::PerWorker(v) => v.len(),
            Published::Pooled { held, .. } => held.len(),
        }
    }

    /// The pool-wide index, in the pooled layout.
    pub(crate) fn holders(&self) -> Option<&Holders> {
        match self {
            Published::Pooled { holders, .. } => Some(holders),
            Published::PerWorker(_) => None,
        }
    }

    /// Switches to the pooled layout (`true`) or the per-worker one,
    /// carrying everything over (rare: when the pool's size changes).
    /// The pooled layout needs at most [`MAX_SLOTS`] slots; with more it
    /// stays per worker.
    pub(crate) fn set_pooled(&mut self, pooled: bool) {
        let pooled = pooled && self.slots() <= MAX_SLOTS;
        match (pooled, &*self) {
            (true, Published::PerWorker(v)) => {
                let mut holders = Holders::default();
                let mut held = Vec::with_capacity(v.len());
                for (i, p) in v.iter().enumerate() {
                    let hashes: Vec<u64> = p.hashes().collect();
                    holders.add(&hashes, bit(i));
                    held.push(p.len());
                }
                *self = Published::Pooled { holders, held };
            }
            (false, Published::Pooled { .. }) => {
                let v = (0..self.slots())
                    .map(|i| {
                        let mut p = PrefixIndex::new();
                        p.apply(&KvEvent {
                            event_id: 0,
                            data: KvEventData::Stored {
                                parent_hash: None,
                                block_hashes: self.hashes(i),
                            },
                        });
                        p
                    })
                    .collect();
                *self = Published::PerWorker(v);
            }
            _ => {}
        }
    }

    /// A new worker, holding nothing, at slot `i`; later slots move up one.
    /// In the pooled layout every holder set is renumbered (rare: a worker
    /// joining), and a pool outgrowing [`MAX_SLOTS`] goes per worker.
    pub(crate) fn insert_slot(&mut self, i: usize) {
        if self.slots() >= MAX_SLOTS {
            self.set_pooled(false);
        }
        match self {
            Published::PerWorker(v) => v.insert(i, PrefixIndex::new()),
            Published::Pooled { holders, held } => {
                holders.insert_slot(i);
                held.insert(i, 0);
            }
        }
    }

    /// Applies worker `i`'s KV event.
    pub(crate) fn apply(&mut self, i: usize, event: &KvEvent) -> Applied {
        match self {
            Published::PerWorker(v) => v[i].apply(event),
            Published::Pooled { holders, held } => apply_event(
                &mut SlotBlocks {
                    holders,
                    bit: bit(i),
                    held: &mut held[i],
                },
                event,
            ),
        }
    }

    /// Forgets everything worker `i` published.
    pub(crate) fn clear(&mut self, i: usize) {
        self.apply(
            i,
            &KvEvent {
                event_id: 0,
                data: KvEventData::Cleared,
            },
        );
    }

    /// Blocks worker `i` holds.
    pub(crate) fn len(&self, i: usize) -> usize {
        match self {
            Published::PerWorker(v) => v[i].len(),
            Published::Pooled { held, .. } => held[i],
        }
    }

    /// How many of `hashes`, from the first, worker `i` holds.
    pub(crate) fn overlap(&self, i: usize, hashes: &[u64]) -> u32 {
        match self {
            Published::PerWorker(v) => v[i].overlap(hashes),
            Published::Pooled { holders, .. } => {
                u32::try_from(holders.prefix_len(hashes, bit(i))).unwrap_or(u32::MAX)
            }
        }
    }

    /// The hashes worker `i` holds, in no meaningful order (for changing
    /// layout and for tests; never an output).
    pub(crate) fn hashes(&self, i: usize) -> Vec<u64> {
        match self {
            Published::PerWorker(v) => v[i].hashes().collect(),
            Published::Pooled { holders, .. } => holders.held_by(bit(i)),
        }
    }
}

/// One slot's blocks in the pooled layout, with its count kept in step.
struct SlotBlocks<'a> {
    holders: &'a mut Holders,
    bit: Slots,
    held: &'a mut usize,
}

impl BlockSet for SlotBlocks<'_> {
    fn holds(&self, hash: u64) -> bool {
        self.holders.holds(hash, self.bit)
    }

    fn add(&mut self, hashes: &[u64]) {
        *self.held += self.holders.add(hashes, self.bit);
    }

    fn remove(&mut self, hashes: &[u64]) -> usize {
        let removed = self.holders.remove(hashes, self.bit);
        *self.held -= removed;
        removed
    }

    fn clear(&mut self) {
        let mine = self.holders.held_by(self.bit);
        self.holders.remove(&mine, self.bit);
        *self.held = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Store(usize, Option<u64>, Vec<u64>),
        Remove(usize, Vec<u64>),
        Clear(usize),
        Join(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        let hashes = proptest::collection::vec(0u64..40, 0..8);
        prop_oneof![
            4 => (0usize..128, proptest::option::of(0u64..40), hashes.clone())
                .prop_map(|(w, p, h)| Op::Store(w, p, h)),
            2 => (0usize..128, hashes).prop_map(|(w, h)| Op::Remove(w, h)),
            1 => (0usize..128).prop_map(Op::Clear),
            1 => (0usize..128).prop_map(Op::Join),
        ]
    }

    fn sorted(mut v: Vec<u64>) -> Vec<u64> {
        v.sort_unstable();
        v
    }

    proptest! {
        /// The pooled layout answers every question as one index per
        /// worker does, through stores (orphans included), removals of held
        /// and unknown blocks (repeats included), clears and workers
        /// joining between others. Pools start small or just under 64
        /// workers, so that stores to later slots and joins that push a
        /// holder past the 64th widen the pooled index mid-run.
        #[test]
        fn layouts_agree(
            workers in prop_oneof![1usize..6, 60usize..66],
            ops in proptest::collection::vec(op(), 0..80),
        ) {
            let mut a = Published::PerWorker((0..workers).map(|_| PrefixIndex::new()).collect());
            let mut b = a.clone();
            b.set_pooled(true);
            prop_assert!(b.holders().is_some());
            for o in ops {
                let n = a.slots();
                let event = |data| KvEvent { event_id: 0, data };
                match o {
                    Op::Store(w, parent, h) => {
                        let e = event(KvEventData::Stored { parent_hash: parent, block_hashes: h });
                        prop_assert_eq!(a.apply(w % n, &e), b.apply(w % n, &e));
                    }
                    Op::Remove(w, h) => {
                        let e = event(KvEventData::Removed { block_hashes: h });
                        prop_assert_eq!(a.apply(w % n, &e), b.apply(w % n, &e));
                    }
                    Op::Clear(w) => {
                        a.clear(w % n);
                        b.clear(w % n);
                    }
                    Op::Join(w) => {
                        a.insert_slot(w % (n + 1));
                        b.insert_slot(w % (n + 1));
                    }
                }
                prop_assert_eq!(a.slots(), b.slots());
                let mut back = b.clone();
                back.set_pooled(false);
                for i in 0..a.slots() {
                    prop_assert_eq!(a.len(i), b.len(i));
                    prop_assert_eq!(sorted(a.hashes(i)), sorted(b.hashes(i)));
                    for probe in [(0..40).collect(), sorted(a.hashes(i))] {
                        prop_assert_eq!(a.overlap(i, &probe), b.overlap(i, &probe));
                    }
                    prop_assert_eq!(sorted(back.hashes(i)), sorted(a.hashes(i)));
                }
            }
        }
    }
}
