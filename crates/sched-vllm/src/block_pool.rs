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
//! - Memory follows use: a block has an entry (and a hash slot) only once it
//!   was first allocated; the blocks never allocated yet are the front of the
//!   free queue, held as an id range ([`FreeQueue`]), and the canonical index
//!   grows with the hashes published. A pool of 10^10 blocks that a run
//!   touches a million of costs a million entries.

mod block;
mod reuse;
#[cfg(test)]
mod tests;

use crate::events::EventQueue;
use crate::free_queue::FreeQueue;
pub(crate) use block::Owner;
use block::{Block, Refs, HASHED, ONLY};
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

/// See the module docs.
#[derive(Clone, Debug)]
pub(crate) struct BlockPool {
    /// One entry per block ever allocated, by id (ids are handed out in
    /// order, so this is `0..n` for the `n` blocks touched so far).
    blocks: Vec<Block>,
    /// Per materialised block, the hash it caches when its [`Block`] is
    /// `HASHED` (garbage otherwise); always as long as `blocks`.
    hashes: Vec<u64>,
    free: FreeQueue,
    cached_free: u64,
    by_owner: [u64; 3],
    canonical: U64Table<u32>,
    /// Where the last eviction and the last publication found their hash's
    /// group: both walk a prompt's consecutive block hashes.
    evict_near: Near,
    publish_near: Near,
    /// Early-freed held sources whose blocks' reallocation is reported.
    pub(crate) reuse: reuse::ReuseWatch,
}

impl BlockPool {
    /// A pool of `n` empty blocks, all free; nothing is allocated for them
    /// until they are used.
    pub(crate) fn new(n: u64) -> Self {
        BlockPool::from_queue(FreeQueue::new(n))
    }

    /// A pool over `free` (a queue of never-used blocks).
    fn from_queue(free: FreeQueue) -> Self {
        BlockPool {
            free,
            blocks: Vec::new(),
            hashes: Vec::new(),
            cached_free: 0,
            by_owner: [0; 3],
            canonical: U64Table::default(),
            evict_near: Near::default(),
            publish_near: Near::default(),
            reuse: reuse::ReuseWatch::default(),
        }
    }

    /// All blocks, used or not.
    pub(crate) fn total(&self) -> u64 {
        self.free.capacity()
    }

    /// Blocks that ever had an entry (tests and memory checks).
    #[cfg(test)]
    pub(crate) fn materialised(&self) -> usize {
        self.blocks.len()
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
        if self.reuse.active() {
            self.reuse.allocated(b);
        }
        self.hashes.resize(self.blocks.len(), 0);
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
        let start = table.len();
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
            // Never-used blocks popped got entries: their hash slots too.
            self.hashes.resize(self.blocks.len(), 0);
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
        if self.reuse.active() {
            for &b in &table[start..] {
                self.reuse.allocated(b);
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
