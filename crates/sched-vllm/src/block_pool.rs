//! Physical KV blocks, after vLLM `vllm/v1/core/block_pool.py` `BlockPool`.
//!
//! - Every block is either referenced (by a running or waiting request, a
//!   held source, or a destination reservation) or sits in the
//!   [`FreeQueue`]. A referenced block is never in the queue.
//! - An unreferenced block that still carries a hash is *cached*: it can be
//!   hit again (`BlockPool.touch` takes it back out of the queue) until it
//!   reaches the front and is popped for a new allocation, which evicts it
//!   (`BlockPool._maybe_evict_cached_block`) and emits a `Removed` event.
//! - One canonical physical block per hash (the mocker's
//!   `BlockDuplicationPolicy::Reject`; vLLM itself tolerates duplicates):
//!   [`BlockPool::publish`] refuses a second block for a hash and names the
//!   canonical one, which the caller adopts in place of its copy.
//! - Ownership is counted per block and per owner kind; a block belongs to its
//!   *strongest* owner, active > pinned > reserved, so a block shared by a
//!   running request and a held source is counted once, as active. The
//!   per-kind totals are kept incrementally, which makes a capacity snapshot
//!   O(1).

use crate::events::EventQueue;
use crate::free_queue::{FreeQueue, QueuePos, Queued};
use handoff_hashtable::{Near, U64Table};

/// Block-table entries whose pool entries are loaded together before a loop
/// over a table works on them ([`BlockPool::warm`]): enough misses in flight
/// to cover one memory latency, few enough to stay in L1 (1 KiB of
/// entries, as much again of hashes when allocating). A table's blocks are
/// mostly consecutive ids (77% of neighbours on the synthetic 64P+64D
/// workload), eight entries to a line, so a chunk of 128 has about 16 to
/// 30 lines in flight; 16, sized for 32-byte entries, left only 4 to 8 and
/// was 1.2x slower at 200,000 requests 64P+64D.
pub(crate) const WARM_CHUNK: usize = 128;

/// Who holds a reference to a block. The order is the strength order used for
/// counting a shared block once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Owner {
    /// A running request, or a waiting one that already holds KV.
    Active = 0,
    /// A completed prefill held for its reader.
    Pinned = 1,
    /// A destination reservation not yet activated.
    Reserved = 2,
}

/// Bits of one owner's count in [`Refs`]: three of them fit below a
/// [`Block`] word's two flag bits.
const REF_BITS: u32 = 20;
/// The largest count [`Refs`] holds; counts saturate there, as the `u32`
/// counts they replaced did at theirs (a block's references are bounded by
/// the requests and handoffs alive on its worker, far below either).
const REF_MAX: u64 = (1 << REF_BITS) - 1;

/// A block's reference counts per [`Owner`], packed into one word, the
/// strongest owner's in the low bits. A release or retag asks "is this
/// owner's the only reference?" on every block, which is one comparison of
/// the word with [`Refs::only`]; the strongest owner is the lowest non-zero
/// field, found from the word's trailing zeros.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Refs(u64);

impl Refs {
    /// One reference, held by `o`.
    const fn only(o: Owner) -> Refs {
        Refs(1 << (o as u32 * REF_BITS))
    }

    fn get(self, o: usize) -> u32 {
        ((self.0 >> (o as u32 * REF_BITS)) & REF_MAX) as u32
    }

    fn set(&mut self, o: usize, n: u32) {
        let shift = o as u32 * REF_BITS;
        let n = u64::from(n).min(REF_MAX);
        self.0 = (self.0 & !(REF_MAX << shift)) | (n << shift);
    }

    fn strongest(self) -> Option<usize> {
        (self.0 != 0).then(|| (self.0.trailing_zeros() / REF_BITS) as usize)
    }

    fn counts(self) -> [u32; 3] {
        [self.get(0), self.get(1), self.get(2)]
    }
}

/// [`Block::word`]: the block is in the free queue, and the low bits are its
/// queue sequence number.
const QUEUED: u64 = 1 << 63;
/// [`Block::word`]: the block's entry in [`BlockPool`]'s `hashes` is the
/// hash it caches.
const HASHED: u64 = 1 << 62;
/// [`Block::word`]'s low bits: the sequence number while queued, the
/// [`Refs`] otherwise.
const LOW: u64 = HASHED - 1;

// Three counts fit below the flags.
const _: () = assert!(3 * REF_BITS <= 62);

/// One block's state but its hash, free-queue position included, in one
/// word, eight to a cache line: a release, retag or touch pass over a
/// request's blocks (mostly consecutive ids) costs an eighth of a line per
/// block, and churn that scatters them one line per free.
///
/// A queued block is unreferenced and a referenced one is never queued, so
/// the queue position and the reference counts share the word (`QUEUED`
/// says which it holds) next to the `HASHED` flag. The hash itself lives in
/// a parallel array ([`BlockPool`]'s `hashes`) that only publication and
/// eviction read or write: kept in the entry, it doubled the lines every
/// other pass loads.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
#[repr(transparent)]
struct Block {
    word: u64,
}

// Eight entries per cache line; a wider entry multiplies the passes'
// memory traffic.
const _: () = assert!(std::mem::size_of::<Block>() == 8);

impl Queued for Block {
    fn pos(&self) -> QueuePos {
        if self.word & QUEUED != 0 {
            QueuePos::at(self.word & LOW)
        } else {
            QueuePos::default()
        }
    }

    /// The queue moves only unreferenced blocks in and out, so the low bits
    /// it overwrites hold no counts.
    fn set_pos(&mut self, p: QueuePos) {
        debug_assert!(self.word & QUEUED != 0 || self.word & LOW == 0);
        self.word = (self.word & HASHED) | p.seq().map_or(0, |s| QUEUED | (s & LOW));
    }

    fn is_at(&self, seq: u64) -> bool {
        self.word & !HASHED == QUEUED | seq
    }
}

/// The position's ring sequence number depends on how often the ring was
/// compacted, not on the queue's order, so only whether the block is queued
/// is shown (test fingerprints compare cores reached by different paths);
/// the hash is shown by [`BlockPool::fingerprint`].
impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Block")
            .field("hashed", &self.hashed())
            .field("refs", &self.refs().counts())
            .field("queued", &self.pos().is_queued())
            .finish()
    }
}

impl Block {
    fn hashed(&self) -> bool {
        self.word & HASHED != 0
    }

    /// The reference counts; none while queued.
    fn refs(&self) -> Refs {
        if self.word & QUEUED != 0 {
            Refs::default()
        } else {
            Refs(self.word & LOW)
        }
    }

    /// Replaces the counts of a block that is not queued.
    fn set_refs(&mut self, r: Refs) {
        debug_assert!(self.word & QUEUED == 0);
        self.word = (self.word & HASHED) | r.0;
    }

    /// Whether `owner`'s one reference is the block's only one (never true
    /// of a queued block, whose word carries `QUEUED`).
    #[inline]
    fn held_only_by(&self, owner: Owner) -> bool {
        self.word & !HASHED == ONLY[owner as usize].0
    }

    /// Makes a block just popped from the free queue `owner`'s: a queued
    /// block is unreferenced (`audit` checks it), so `owner` becomes its one
    /// reference. Returns whether it had a hash, which it evicts: that
    /// hash's canonical entry (a block carries a hash only while it is
    /// canonical: `publish` keeps it so, `audit` checks it).
    #[inline]
    fn claim(&mut self, owner: Owner) -> bool {
        debug_assert!(self.word & !HASHED == 0);
        let hashed = self.hashed();
        self.word = ONLY[owner as usize].0;
        hashed
    }
}

/// A block's references when `owner` holds its only one: the common case of
/// every release and retag (a prefix shared between requests is the
/// exception), tested with one comparison before the general path.
const ONLY: [Refs; 3] = [
    Refs::only(Owner::Active),
    Refs::only(Owner::Pinned),
    Refs::only(Owner::Reserved),
];

/// See the module docs.
#[derive(Clone, Debug)]
pub(crate) struct BlockPool {
    blocks: Vec<Block>,
    /// Per block, the hash it caches when its [`Block`] is `HASHED`
    /// (garbage otherwise).
    hashes: Vec<u64>,
    free: FreeQueue,
    cached_free: u64,
    by_owner: [u64; 3],
    canonical: U64Table<u32>,
    /// Where the last eviction and the last publication found their hash's
    /// group: both walk a prompt's consecutive block hashes.
    evict_near: Near,
    publish_near: Near,
}

impl BlockPool {
    /// A pool of `n` empty blocks, all free.
    pub(crate) fn new(n: u32) -> Self {
        let mut blocks = vec![Block::default(); n as usize];
        BlockPool {
            free: FreeQueue::full(&mut blocks),
            blocks,
            hashes: vec![0; n as usize],
            cached_free: 0,
            by_owner: [0; 3],
            canonical: U64Table::with_capacity(n as usize),
            evict_near: Near::default(),
            publish_near: Near::default(),
        }
    }

    /// All blocks.
    pub(crate) fn total(&self) -> u64 {
        self.blocks.len() as u64
    }

    /// Blocks an allocation may take: empty plus evictable cached blocks
    /// (vLLM `BlockPool.get_num_free_blocks`).
    pub(crate) fn free_len(&self) -> u64 {
        self.free.len()
    }

    /// Unreferenced blocks that still hold a reusable prefix.
    pub(crate) fn cached(&self) -> u64 {
        self.cached_free
    }

    /// Blocks whose strongest owner is `o`.
    pub(crate) fn owned_by(&self, o: Owner) -> u64 {
        self.by_owner[o as usize]
    }

    /// The canonical block caching `hash`, if any; `near` carries the
    /// previous lookup's group across a prompt's consecutive hashes.
    pub(crate) fn lookup(&self, hash: u64, near: &mut Near) -> Option<u32> {
        self.canonical.get_near(hash, near)
    }

    /// Whether `b` is unreferenced (so taking it consumes a free block).
    pub(crate) fn is_free(&self, b: u32) -> bool {
        self.free.contains(&self.blocks, b)
    }

    /// Adds a reference from `owner` to an existing block, taking it out of
    /// the free queue if it was cached there (vLLM `BlockPool.touch`).
    pub(crate) fn touch(&mut self, b: u32, owner: Owner) {
        let Some(hashed) = self.blocks.get(b as usize).map(Block::hashed) else {
            return;
        };
        if self.free.contains(&self.blocks, b) {
            self.free.remove(&mut self.blocks, b);
            if hashed {
                self.cached_free -= 1;
            }
        }
        self.add_ref(b, owner, 1);
    }

    /// Takes the front of the free queue for `owner`, evicting its cached hash
    /// if it had one (vLLM `BlockPool.get_new_blocks`). `None` when the pool
    /// is exhausted.
    pub(crate) fn allocate(&mut self, owner: Owner, events: &mut EventQueue) -> Option<u32> {
        let b = self.free.pop_front(&mut self.blocks)?;
        let hashed = self.blocks[b as usize].claim(owner);
        self.by_owner[owner as usize] += 1;
        if hashed {
            let h = self.hashes[b as usize];
            self.cached_free -= 1;
            self.canonical.remove_near(h, &mut self.evict_near);
            events.removed_one(h);
        }
        Some(b)
    }

    /// Appends up to `n` blocks for `owner` to `table`, each as
    /// [`Self::allocate`] would take it, in the same order, and returns how
    /// many it took. The entries of the blocks about to be popped are loaded
    /// a [`WARM_CHUNK`] at a time first, so a large allocation (an
    /// admission's whole prompt) overlaps their cache misses; a chunk's
    /// evictions then leave the canonical index a group at a time (they are
    /// a freed table's consecutive hashes) and join the allocation's
    /// `Removed` event together, which is what evicting them one by one
    /// does to the index's contents and to the event.
    pub(crate) fn allocate_into(
        &mut self,
        n: usize,
        owner: Owner,
        events: &mut EventQueue,
        table: &mut Vec<u32>,
    ) -> usize {
        let mut taken = 0;
        let mut evicted = [0u64; WARM_CHUNK];
        while taken < n {
            let chunk = (n - taken).min(WARM_CHUNK);
            if chunk > 1 {
                self.warm_evicting(self.free.front(chunk));
            }
            let mut k = 0;
            let hashes = &self.hashes;
            let got = self
                .free
                .pop_front_each(&mut self.blocks, chunk, |b, block| {
                    if block.claim(owner) {
                        evicted[k] = hashes[b as usize];
                        k += 1;
                    }
                    table.push(b);
                });
            self.by_owner[owner as usize] += got as u64;
            self.cached_free -= k as u64;
            taken += got;
            let absent = self.canonical.remove_all(&evicted[..k]);
            debug_assert_eq!(absent, 0, "an evicted hash was not canonical");
            events.removed_run(&evicted[..k]);
            if got < chunk {
                break;
            }
        }
        taken
    }

    /// Drops one reference of `owner`; an unreferenced block joins the back
    /// of the free queue, cached if it has a hash (vLLM
    /// `BlockPool.free_blocks`).
    #[inline]
    pub(crate) fn release(&mut self, b: u32, owner: Owner) {
        let Some(block) = self.blocks.get_mut(b as usize) else {
            return;
        };
        if block.held_only_by(owner) {
            // Its last reference: unreferenced, so not queued until now.
            block.set_refs(Refs::default());
            let hashed = block.hashed();
            self.by_owner[owner as usize] -= 1;
            self.cached_free += u64::from(hashed);
            self.free.push_back_unqueued(&mut self.blocks, b);
            return;
        }
        let mut refs = block.refs();
        let held = refs.get(owner as usize);
        if held == 0 {
            return;
        }
        // One read-modify-write of the block's entry.
        let before = refs.strongest();
        refs.set(owner as usize, held - 1);
        block.set_refs(refs);
        let after = refs.strongest();
        let hashed = block.hashed();
        self.recount(before, after);
        if after.is_none() {
            if hashed {
                self.cached_free += 1;
            }
            self.free.push_back(&mut self.blocks, b);
        }
    }

    /// [`Self::release`] of every block in `table`, last first (vLLM
    /// `KVCacheManager.free` frees a request's tail first so that it is
    /// evicted first). The entries of each [`WARM_CHUNK`] are loaded
    /// together first: a table is freed long after it was filled (a held
    /// source's reader, a finished decode), so its entries are cold, and 40%
    /// of a table's neighbours are not adjacent ids on the conversation
    /// trace, so the hardware's stream prefetch does not cover them.
    pub(crate) fn release_all_rev(&mut self, table: &[u32], owner: Owner) {
        for chunk in table.rchunks(WARM_CHUNK) {
            self.warm(chunk.iter().copied());
            for &b in chunk.iter().rev() {
                self.release(b, owner);
            }
        }
    }

    /// Loads the entries of `blocks` in one tight loop: a table's (or the
    /// free queue's front) blocks are scattered over the pool and cold, and
    /// independent loads with nothing between them overlap their cache
    /// misses, where a loop doing a block's whole update between two loads
    /// pays them one after another (safe Rust has no prefetch instruction).
    /// Changes nothing.
    pub(crate) fn warm(&self, blocks: impl IntoIterator<Item = u32>) {
        let mut sum = 0u32;
        for b in blocks {
            if let Some(blk) = self.blocks.get(b as usize) {
                sum = sum.wrapping_add(blk.word as u32);
            }
        }
        std::hint::black_box(sum);
    }

    /// [`Self::warm`] of the entries and the hashes of `blocks`, for an
    /// allocation about to pop them (the free queue's front, mostly cached
    /// blocks whose hashes it evicts).
    fn warm_evicting(&self, blocks: impl IntoIterator<Item = u32>) {
        let mut sum = 0u64;
        for b in blocks {
            if let (Some(blk), Some(h)) = (self.blocks.get(b as usize), self.hashes.get(b as usize))
            {
                sum = sum.wrapping_add(blk.word ^ h);
            }
        }
        std::hint::black_box(sum);
    }

    /// Records that `b` caches `h`; returns the hash it cached before.
    fn replace_hash(&mut self, b: u32, h: u64) -> Option<u64> {
        let old = self.hash_at(b);
        self.hashes[b as usize] = h;
        self.blocks[b as usize].word |= HASHED;
        old
    }

    /// The hash `b` caches, if any.
    pub(crate) fn hash_at(&self, b: u32) -> Option<u64> {
        let hashed = self.blocks.get(b as usize)?.hashed();
        hashed.then(|| self.hashes[b as usize])
    }

    /// Moves one reference on `b` from `from` to `to` (a completed prefill
    /// becoming pinned, a reservation becoming active).
    #[inline]
    pub(crate) fn retag(&mut self, b: u32, from: Owner, to: Owner) {
        if from == to {
            return;
        }
        let Some(block) = self.blocks.get_mut(b as usize) else {
            return;
        };
        if block.held_only_by(from) {
            block.set_refs(ONLY[to as usize]);
            self.by_owner[from as usize] -= 1;
            self.by_owner[to as usize] += 1;
            return;
        }
        let mut refs = block.refs();
        let held = refs.get(from as usize);
        if held == 0 {
            return;
        }
        // One read-modify-write of the block (this runs for every block of
        // every pinned prefill and activated reservation).
        let before = refs.strongest();
        let to_held = refs.get(to as usize);
        refs.set(to as usize, to_held.saturating_add(1));
        refs.set(from as usize, held - 1);
        block.set_refs(refs);
        let after = refs.strongest();
        self.recount(before, after);
    }

    /// [`Self::retag`] of every block in `table`, in order, the entries of
    /// each [`WARM_CHUNK`] loaded together. The blocks `from` holds alone
    /// (all but a shared prefix) move between the owner totals once, at the
    /// end: the general path in between never lowers `to`'s total (the
    /// block gains a `to` reference, so `to` cannot stop being its
    /// strongest owner) and only lowers `from`'s, whose pending decrements
    /// keep it above the true count, so no total goes below zero.
    pub(crate) fn retag_all(&mut self, table: &[u32], from: Owner, to: Owner) {
        if from == to {
            return;
        }
        let moved_to = ONLY[to as usize];
        let mut moved = 0u64;
        for chunk in table.chunks(WARM_CHUNK) {
            self.warm(chunk.iter().copied());
            for &b in chunk {
                match self.blocks.get_mut(b as usize) {
                    Some(block) if block.held_only_by(from) => {
                        block.set_refs(moved_to);
                        moved += 1;
                    }
                    Some(_) => self.retag(b, from, to),
                    None => {}
                }
            }
        }
        self.by_owner[from as usize] -= moved;
        self.by_owner[to as usize] += moved;
    }

    /// Loads the index groups that publishing `hashes` will probe
    /// ([`U64Table::warm`]); changes nothing.
    pub(crate) fn warm_publish(&self, hashes: &[u64]) {
        self.canonical.warm(hashes.iter().copied());
    }

    /// Makes the referenced block `b` the cached copy of `hash`. If another
    /// block already is, nothing changes and that block is returned so the
    /// caller can adopt it (one canonical block per hash).
    pub(crate) fn publish(&mut self, b: u32, hash: u64) -> Result<(), u32> {
        if b as usize >= self.blocks.len() {
            return Ok(());
        }
        match self
            .canonical
            .try_insert_near(hash, b, &mut self.publish_near)
        {
            Err(c) if c == b => Ok(()),
            Err(c) => Err(c),
            Ok(()) => {
                if let Some(old) = self.replace_hash(b, hash) {
                    // `b` was canonical for `old` (the invariant above).
                    self.canonical.remove_near(old, &mut self.evict_near);
                }
                Ok(())
            }
        }
    }

    /// [`Self::publish`] of `blocks[j]` under `hashes[j]` in order, for as
    /// long as each would simply become canonical (an unhashed block, a hash
    /// nobody caches); returns how many did, leaving the first one that
    /// needs [`Self::publish`]'s other cases to the caller. The index takes
    /// a group's run of hashes with one probe.
    pub(crate) fn publish_run(&mut self, blocks: &[u32], hashes: &[u64]) -> usize {
        let len = blocks.len().min(hashes.len());
        let fresh = blocks[..len]
            .iter()
            .position(|&b| self.blocks.get(b as usize).is_none_or(Block::hashed))
            .unwrap_or(len);
        let n = self.canonical.try_insert_run(
            &hashes[..fresh],
            &blocks[..fresh],
            &mut self.publish_near,
        );
        for (&b, &h) in blocks[..n].iter().zip(&hashes[..n]) {
            self.replace_hash(b, h);
        }
        n
    }

    /// References of `owner` on `b` (tests and invariant checks).
    #[cfg(test)]
    pub(crate) fn refs(&self, b: u32, owner: Owner) -> u32 {
        self.blocks
            .get(b as usize)
            .map_or(0, |blk| blk.refs().get(owner as usize))
    }

    fn add_ref(&mut self, b: u32, owner: Owner, delta: i32) {
        let block = &mut self.blocks[b as usize];
        let mut refs = block.refs();
        let before = refs.strongest();
        let r = refs.get(owner as usize);
        refs.set(
            owner as usize,
            if delta >= 0 {
                r.saturating_add(delta.unsigned_abs())
            } else {
                r.saturating_sub(delta.unsigned_abs())
            },
        );
        block.set_refs(refs);
        let after = refs.strongest();
        self.recount(before, after);
    }

    /// Moves a block between the per-owner totals when its strongest owner
    /// changed.
    fn recount(&mut self, before: Option<usize>, after: Option<usize>) {
        if before != after {
            if let Some(k) = before {
                self.by_owner[k] -= 1;
            }
            if let Some(k) = after {
                self.by_owner[k] += 1;
            }
        }
    }

    /// Everything observable about the pool, canonical map sorted (tests
    /// compare it before and after an operation that must change nothing).
    #[cfg(test)]
    pub(crate) fn fingerprint(&self) -> String {
        let mut canonical: Vec<_> = self.canonical.iter().collect();
        canonical.sort();
        let hashes: Vec<_> = (0..self.blocks.len() as u32)
            .map(|b| self.hash_at(b))
            .collect();
        format!(
            "blocks={:?} hashes={:?} free={:?} cached={} owners={:?} canonical={:?}",
            self.blocks,
            hashes,
            self.free.iter(&self.blocks).collect::<Vec<_>>(),
            self.cached_free,
            self.by_owner,
            canonical
        )
    }

    /// Recounts every category from scratch and compares it with the
    /// incremental counters; used by tests after every operation.
    #[cfg(test)]
    pub(crate) fn audit(&self) -> Result<(), String> {
        let mut by_owner = [0u64; 3];
        let mut cached = 0u64;
        for (i, blk) in self.blocks.iter().enumerate() {
            let queued = self.free.contains(&self.blocks, i as u32);
            match blk.refs().strongest() {
                Some(k) => {
                    by_owner[k] += 1;
                    if queued {
                        return Err(format!("referenced block {i} is in the free queue"));
                    }
                }
                None => {
                    if !queued {
                        return Err(format!("unreferenced block {i} is not in the free queue"));
                    }
                    if blk.hashed() {
                        cached += 1;
                    }
                }
            }
            if let Some(h) = self.hash_at(i as u32) {
                if self.canonical.get(h) != Some(i as u32) {
                    return Err(format!("block {i} has hash {h:x} but is not canonical"));
                }
            }
        }
        for (h, b) in self.canonical.iter() {
            if self.hash_at(b) != Some(h) {
                return Err(format!("canonical {h:x} -> {b} is stale"));
            }
        }
        if by_owner != self.by_owner || cached != self.cached_free {
            return Err(format!(
                "counters {:?}/{} vs recount {:?}/{}",
                self.by_owner, self.cached_free, by_owner, cached
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_core::KvEventData;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// The pool as vLLM's `BlockPool` reads: a free list (front first), a
    /// hash map of canonical blocks and per-block references, one block at
    /// a time, no rings, hints or warm-ups.
    struct Model {
        refs: Vec<[u32; 3]>,
        hash: Vec<Option<u64>>,
        free: Vec<u32>,
        canonical: HashMap<u64, u32>,
    }

    impl Model {
        fn new(n: u32) -> Self {
            Model {
                refs: vec![[0; 3]; n as usize],
                hash: vec![None; n as usize],
                free: (0..n).collect(),
                canonical: HashMap::new(),
            }
        }

        /// The block taken and the hash it evicted.
        fn allocate(&mut self, o: Owner) -> Option<(u32, Option<u64>)> {
            if self.free.is_empty() {
                return None;
            }
            let b = self.free.remove(0);
            let evicted = self.hash[b as usize].take();
            if let Some(h) = evicted {
                self.canonical.remove(&h);
            }
            self.refs[b as usize][o as usize] += 1;
            Some((b, evicted))
        }

        fn release(&mut self, b: u32, o: Owner) {
            let r = &mut self.refs[b as usize];
            if r[o as usize] > 0 {
                r[o as usize] -= 1;
                if *r == [0; 3] {
                    self.free.push(b);
                }
            }
        }

        fn retag(&mut self, b: u32, from: Owner, to: Owner) {
            let r = &mut self.refs[b as usize];
            if from != to && r[from as usize] > 0 {
                r[from as usize] -= 1;
                r[to as usize] += 1;
            }
        }

        fn touch(&mut self, b: u32, o: Owner) {
            self.free.retain(|&x| x != b);
            self.refs[b as usize][o as usize] += 1;
        }

        fn publish(&mut self, b: u32, h: u64) -> Result<(), u32> {
            match self.canonical.get(&h) {
                Some(&c) if c == b => Ok(()),
                Some(&c) => Err(c),
                None => {
                    if let Some(old) = self.hash[b as usize].replace(h) {
                        self.canonical.remove(&old);
                    }
                    self.canonical.insert(h, b);
                    Ok(())
                }
            }
        }

        fn owned_by(&self, o: Owner) -> u64 {
            let strongest = |r: &[u32; 3]| r.iter().position(|&x| x > 0);
            self.refs
                .iter()
                .filter(|r| strongest(r) == Some(o as usize))
                .count() as u64
        }
    }

    #[derive(Clone, Debug)]
    enum PoolOp {
        /// Grow table `t` by `n` blocks.
        Allocate { t: usize, n: usize },
        /// Free table `t`, tail first.
        Release { t: usize },
        /// Move table `t` to another owner.
        Retag { t: usize, to: u8 },
        /// Publish table `t`'s blocks under consecutive hashes from `base`
        /// (a shared base makes later tables find earlier canonical blocks).
        Publish { t: usize, base: u64 },
        /// Take the canonical block of `hash` into table `t` (a prefix hit).
        Hit { t: usize, hash: u64 },
    }

    fn pool_op() -> impl Strategy<Value = PoolOp> {
        prop_oneof![
            4 => (0usize..4, 0usize..40).prop_map(|(t, n)| PoolOp::Allocate { t, n }),
            // Past one warm chunk, so the bulk loops run more than one.
            1 => (0usize..4, 100usize..300).prop_map(|(t, n)| PoolOp::Allocate { t, n }),
            3 => (0usize..4).prop_map(|t| PoolOp::Release { t }),
            1 => (0usize..4, 0u8..3).prop_map(|(t, to)| PoolOp::Retag { t, to }),
            3 => (0usize..4, 0u64..6).prop_map(|(t, b)| PoolOp::Publish { t, base: b * 24 }),
            2 => (0usize..4, 0u64..160).prop_map(|(t, hash)| PoolOp::Hit { t, hash }),
        ]
    }

    const OWNERS: [Owner; 3] = [Owner::Active, Owner::Pinned, Owner::Reserved];

    proptest! {
        /// The packed counts behave as three separate saturating counters,
        /// and the strongest owner is the first with a reference.
        #[test]
        fn packed_refs_are_three_counters(
            ops in proptest::collection::vec((0usize..3, 0u32..4, any::<bool>()), 0..200),
        ) {
            let mut packed = Refs::default();
            let mut plain = [0u64; 3];
            for (o, n, up) in ops {
                // Large steps reach the saturation point within a case.
                let step = if n == 3 { REF_MAX as u32 / 2 } else { n };
                plain[o] = if up {
                    (plain[o] + u64::from(step)).min(REF_MAX)
                } else {
                    plain[o].saturating_sub(u64::from(step))
                };
                let r = packed.get(o);
                packed.set(o, if up { r.saturating_add(step) } else { r.saturating_sub(step) });
                let want: Vec<u32> = plain.iter().map(|&x| x as u32).collect();
                prop_assert_eq!(&packed.counts()[..], &want[..]);
                prop_assert_eq!(packed.strongest(), plain.iter().position(|&x| x > 0));
                for (k, only) in ONLY.iter().enumerate() {
                    let alone = plain[k] == 1 && plain.iter().sum::<u64>() == 1;
                    prop_assert_eq!(packed == *only, alone);
                }
            }
        }
    }

    proptest! {
        /// The bulk paths (`allocate_into` with its warm-ups, the warmed
        /// `release_all_rev` and `retag_all`) and single-block calls give the
        /// blocks, evictions, free order and counters of the plain model.
        #[test]
        fn bulk_paths_match_the_plain_model(
            n in prop_oneof![1u32..96, 200u32..400],
            ops in proptest::collection::vec(pool_op(), 1..60),
        ) {
            let mut p = BlockPool::new(n);
            let mut m = Model::new(n);
            let mut ev = EventQueue::default();
            // Per table: its blocks and owner.
            let mut tables: Vec<(Vec<u32>, Owner)> = vec![(Vec::new(), Owner::Active); 4];
            for op in ops {
                match op {
                    PoolOp::Allocate { t, n } => {
                        let (table, owner) = &mut tables[t];
                        let before = table.len();
                        ev.seal_for(n);
                        let took = p.allocate_into(n, *owner, &mut ev, table);
                        let mut evicted = Vec::new();
                        for _ in 0..n {
                            match m.allocate(*owner) {
                                Some((b, e)) => {
                                    prop_assert_eq!(Some(&b), table.get(before + evicted.len()));
                                    evicted.push(e);
                                }
                                None => break,
                            }
                        }
                        prop_assert_eq!(took, evicted.len());
                        let want: Vec<u64> = evicted.into_iter().flatten().collect();
                        let mut got = Vec::new();
                        let mut drained = Vec::new();
                        ev.drain_into(&mut drained);
                        for e in drained {
                            if let KvEventData::Removed { block_hashes } = e.data {
                                got.extend(block_hashes);
                            }
                        }
                        prop_assert_eq!(got, want);
                    }
                    PoolOp::Release { t } => {
                        let (table, owner) = &mut tables[t];
                        p.release_all_rev(table, *owner);
                        for &b in table.iter().rev() {
                            m.release(b, *owner);
                        }
                        table.clear();
                    }
                    PoolOp::Retag { t, to } => {
                        let (table, owner) = &mut tables[t];
                        let to = OWNERS[to as usize];
                        p.retag_all(table, *owner, to);
                        for &b in table.iter() {
                            m.retag(b, *owner, to);
                        }
                        *owner = to;
                    }
                    PoolOp::Publish { t, base } => {
                        let (table, owner) = &mut tables[t];
                        // As `commit` does: a bulk run, then one block by the
                        // general path, until the table is published; the
                        // model publishes one at a time.
                        let hashes: Vec<u64> = (0..table.len() as u64).map(|i| base + i).collect();
                        let mut bulk = 0;
                        for i in 0..table.len() {
                            let h = hashes[i];
                            if i >= bulk {
                                bulk = i + p.publish_run(&table[i..], &hashes[i..]);
                            }
                            let b = &mut table[i];
                            if i < bulk {
                                prop_assert_eq!(m.publish(*b, h), Ok(()));
                                continue;
                            }
                            let got = p.publish(*b, h);
                            prop_assert_eq!(got, m.publish(*b, h));
                            if let Err(c) = got {
                                // Adopt the canonical block, as `commit` does.
                                p.touch(c, *owner);
                                m.touch(c, *owner);
                                p.release(*b, *owner);
                                m.release(*b, *owner);
                                *b = c;
                            }
                        }
                    }
                    PoolOp::Hit { t, hash } => {
                        let got = p.lookup(hash, &mut Near::default());
                        prop_assert_eq!(got, m.canonical.get(&hash).copied());
                        if let Some(b) = got {
                            let (table, owner) = &mut tables[t];
                            prop_assert_eq!(p.is_free(b), m.free.contains(&b));
                            p.touch(b, *owner);
                            m.touch(b, *owner);
                            table.push(b);
                        }
                    }
                }
                p.audit().map_err(TestCaseError::fail)?;
                prop_assert_eq!(p.free.iter(&p.blocks).collect::<Vec<_>>(), m.free.clone());
                prop_assert_eq!(p.free_len(), m.free.len() as u64);
                let cached = m.free.iter().filter(|&&b| m.hash[b as usize].is_some()).count();
                prop_assert_eq!(p.cached(), cached as u64);
                for o in OWNERS {
                    prop_assert_eq!(p.owned_by(o), m.owned_by(o));
                }
            }
        }
    }

    #[test]
    fn cached_blocks_are_reused_until_evicted_from_the_front() {
        let mut ev = EventQueue::default();
        let mut p = BlockPool::new(3);
        let a = p.allocate(Owner::Active, &mut ev).unwrap();
        p.publish(a, 0xa).unwrap();
        p.release(a, Owner::Active);
        assert_eq!((p.cached(), p.free_len()), (1, 3));
        // A hit takes it back without an event.
        assert_eq!(p.lookup(0xa, &mut Near::default()), Some(a));
        p.touch(a, Owner::Pinned);
        assert_eq!((p.cached(), p.owned_by(Owner::Pinned)), (0, 1));
        p.release(a, Owner::Pinned);
        p.audit().unwrap();
        // Allocations pop the other (older) blocks first, then evict it.
        let b = p.allocate(Owner::Active, &mut ev).unwrap();
        let c = p.allocate(Owner::Active, &mut ev).unwrap();
        assert!(ev.pending().is_empty());
        assert_ne!(b, a);
        assert_ne!(c, a);
        assert_eq!(p.allocate(Owner::Reserved, &mut ev), Some(a));
        assert_eq!(p.lookup(0xa, &mut Near::default()), None);
        assert_eq!(ev.pending().len(), 1);
        assert_eq!(p.allocate(Owner::Active, &mut ev), None);
        p.audit().unwrap();
    }

    #[test]
    fn shared_block_counts_once_by_strongest_owner() {
        let mut ev = EventQueue::default();
        let mut p = BlockPool::new(2);
        let a = p.allocate(Owner::Reserved, &mut ev).unwrap();
        p.touch(a, Owner::Pinned);
        assert_eq!(p.owned_by(Owner::Pinned), 1);
        assert_eq!(p.owned_by(Owner::Reserved), 0);
        p.touch(a, Owner::Active);
        assert_eq!(p.owned_by(Owner::Active), 1);
        assert_eq!(p.owned_by(Owner::Pinned), 0);
        p.release(a, Owner::Active);
        p.release(a, Owner::Pinned);
        assert_eq!(p.owned_by(Owner::Reserved), 1);
        p.retag(a, Owner::Reserved, Owner::Active);
        assert_eq!(p.owned_by(Owner::Active), 1);
        assert_eq!(p.refs(a, Owner::Reserved), 0);
        // Releasing an owner that holds nothing changes nothing.
        p.release(a, Owner::Pinned);
        p.release(a, Owner::Active);
        p.release(a, Owner::Active);
        assert_eq!(p.free_len(), 2);
        p.audit().unwrap();
    }

    #[test]
    fn one_canonical_block_per_hash() {
        let mut ev = EventQueue::default();
        let mut p = BlockPool::new(2);
        let a = p.allocate(Owner::Active, &mut ev).unwrap();
        let b = p.allocate(Owner::Active, &mut ev).unwrap();
        assert_eq!(p.publish(a, 7), Ok(()));
        assert_eq!(p.publish(a, 7), Ok(()));
        assert_eq!(p.publish(b, 7), Err(a));
        assert_eq!(p.hash_at(b), None);
        p.audit().unwrap();
    }
}
