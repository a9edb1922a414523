//! The radix prefix cache, after SGLang `srt/mem_cache/radix_cache.py`
//! (`RadixCache.match_prefix`, `insert`, `inc_lock_ref` / `dec_lock_ref`,
//! `evict`).
//!
//! What is kept from SGLang:
//! - a node is locked while any request's path runs through it; locking a
//!   node locks its ancestors (`inc_lock_ref` walks to the root), so an
//!   unlocked node's whole subtree is unlocked and therefore evictable;
//! - `evictable_size` counts every unlocked node, `protected_size` every
//!   locked one;
//! - eviction removes unlocked *leaves* in least-recently-used order and lets
//!   a parent that becomes an unlocked leaf follow;
//! - a match refreshes the access time of the matched path, and so does
//!   caching a finished request.
//!
//! What is different, for speed: one node covers one event block (a whole
//! number of pages) instead of an arbitrary token run, nodes are found by
//! their chained block hash (equal hash ⇒ equal prefix, so the hash index *is*
//! the tree's child lookup), and the LRU order of evictable leaves is kept
//! incrementally in an ordered set instead of rebuilding a heap per eviction.
//! Nothing is ever stored per token or per page.
//!
//! Each lock also records *who* holds it (an [`Owner`]), so that the pages of
//! a shared prefix are counted once, in the highest-precedence category:
//! active before pinned source before reserved destination.

use crate::events::KvEventQueue;
use handoff_hashtable::Near;
use std::collections::BTreeSet;

/// "No node": the parent of a top-level node.
pub(crate) const NIL: u32 = u32::MAX;

/// Index of the cached (unlocked, evictable) class in page counters.
pub(crate) const CACHED: usize = OWNERS;

/// Owner categories ([`Owner`] as usize is below this).
pub(crate) const OWNERS: usize = 4;

/// Who holds a lock or a private page. Order is precedence: a page shared by
/// an active request and a pinned source counts as active.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Owner {
    /// Running, waiting-with-KV or computing requests.
    Active = 0,
    /// Completed handoff prefills held for their reader.
    Pinned = 1,
    /// Destination reservations whose KV has not arrived.
    Reserved = 2,
    /// Session-held KV between turns: idle decode session slots and the
    /// prefill worker's snapshot entries. Such pages are private (never in
    /// the tree: SGLang's session-aware cache keeps a session's KV out of
    /// the shared radix tree), so the tree never sees this owner in
    /// practice; it has a lock column only so every owner indexes alike.
    Session = 3,
}

/// What tree walks (lock, unlock, relabel, eviction's parent update) read
/// and write. The node's hash, needed only when it is created or evicted,
/// lives in the parallel `RadixCache::hashes`, so a node is 32 bytes and,
/// aligned, never straddles a cache line: a walk to the root touches one
/// line per node.
#[derive(Clone, Copy, Debug)]
#[repr(align(32))]
struct Node {
    parent: u32,
    children: u32,
    locks: [u32; OWNERS],
    last_access: u64,
}

impl Node {
    fn locked(&self) -> bool {
        self.locks.iter().any(|&l| l > 0)
    }

    fn class(&self) -> usize {
        self.locks.iter().position(|&l| l > 0).unwrap_or(CACHED)
    }
}

/// The prefix tree; see the module docs.
#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
pub(crate) struct RadixCache {
    pages_per_node: u64,
    nodes: Vec<Node>,
    /// Each node's block hash, by node index.
    hashes: Vec<u64>,
    vacant: Vec<u32>,
    index: handoff_hashtable::U64Table<u32>,
    /// Unlocked leaves by (last access, node): the eviction order.
    lru: BTreeSet<(u64, u32)>,
    clock: u64,
    /// Pages per class: the owners, then cached.
    pages: [u64; OWNERS + 1],
}

impl RadixCache {
    /// An empty tree whose nodes cover `pages_per_node` pages each.
    pub(crate) fn new(pages_per_node: u64) -> Self {
        RadixCache {
            pages_per_node: pages_per_node.max(1),
            nodes: Vec::new(),
            hashes: Vec::new(),
            vacant: Vec::new(),
            index: Default::default(),
            lru: BTreeSet::new(),
            clock: 0,
            pages: [0; OWNERS + 1],
        }
    }

    /// Pages one node covers.
    pub(crate) fn pages_per_node(&self) -> u64 {
        self.pages_per_node
    }

    /// Pages counted in `class` (an [`Owner`] as usize, or [`CACHED`]).
    pub(crate) fn pages(&self, class: usize) -> u64 {
        self.pages[class]
    }

    /// Unlocked pages: SGLang's `evictable_size`.
    pub(crate) fn evictable_pages(&self) -> u64 {
        self.pages[CACHED]
    }

    /// Pages held by the tree in any class.
    pub(crate) fn total_pages(&self) -> u64 {
        self.pages.iter().sum()
    }

    /// Nodes in the tree.
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether `hash` is cached (locked or not).
    #[cfg(test)]
    pub(crate) fn contains(&self, hash: u64) -> bool {
        self.index.contains(hash)
    }

    /// The longest cached prefix of `hashes`: how many blocks and the deepest
    /// node ([`NIL`] for none). Read-only; the access time is refreshed when
    /// the caller locks the path.
    pub(crate) fn match_prefix(&self, hashes: &[u64]) -> (u64, u32) {
        // Presence needs only the index's group heads (`prefix_len` probes a
        // group once per run of consecutive hashes); only the deepest
        // match's node is read from the values, not every matched one's.
        let n = self.index.prefix_len(hashes);
        let deepest = match n.checked_sub(1) {
            Some(last) => self.index.get(hashes[last]).unwrap_or(NIL),
            None => NIL,
        };
        (n as u64, deepest)
    }

    /// Pages that locking the path ending at `deepest` would take out of the
    /// evictable pool. Ancestors of a locked node are locked, so the walk
    /// stops at the first locked node.
    pub(crate) fn unlocked_pages_on_path(&self, deepest: u32) -> u64 {
        let mut cur = deepest;
        let mut pages = 0;
        while let Some(n) = self.nodes.get(cur as usize) {
            if n.locked() {
                break;
            }
            pages += self.pages_per_node;
            cur = n.parent;
        }
        pages
    }

    /// `inc_lock_ref`: one more `owner` lock on every node from `deepest` to
    /// the root, refreshing their access time as SGLang's match does.
    pub(crate) fn lock(&mut self, deepest: u32, owner: Owner) {
        let tick = self.tick();
        let mut cur = deepest;
        while (cur as usize) < self.nodes.len() {
            self.add_lock(cur, owner);
            let n = &mut self.nodes[cur as usize];
            n.last_access = tick;
            cur = n.parent;
        }
    }

    /// `dec_lock_ref`: one `owner` lock fewer from `deepest` to the root.
    /// `touch` refreshes access times first, as `cache_finished_req` does by
    /// re-inserting the request's tokens.
    pub(crate) fn unlock(&mut self, deepest: u32, owner: Owner, touch: bool) {
        let tick = if touch { Some(self.tick()) } else { None };
        let mut cur = deepest;
        while (cur as usize) < self.nodes.len() {
            if let Some(t) = tick {
                self.nodes[cur as usize].last_access = t;
            }
            self.sub_lock(cur, owner);
            cur = self.nodes[cur as usize].parent;
        }
    }

    /// Moves one lock on every node of the path from `from` to `to` (a held
    /// prefill becoming pinned, a reservation becoming active).
    pub(crate) fn relabel(&mut self, deepest: u32, from: Owner, to: Owner) {
        if from == to {
            return;
        }
        let ppn = self.pages_per_node;
        let mut cur = deepest;
        while let Some(n) = self.nodes.get_mut(cur as usize) {
            let before = n.class();
            debug_assert!(n.locks[from as usize] > 0, "relabel without a lock");
            n.locks[from as usize] = n.locks[from as usize].saturating_sub(1);
            n.locks[to as usize] += 1;
            let after = n.class();
            if before != after {
                self.pages[before] = self.pages[before].saturating_sub(ppn);
                self.pages[after] += ppn;
            }
            cur = n.parent;
        }
    }

    /// `insert` below `parent` (the caller's deepest locked node, or [`NIL`]):
    /// each hash either reuses the cached node, taking a lock on it, or
    /// becomes a new node locked once by `owner`. New nodes are published as
    /// one Stored run. Returns the deepest node and how many were created
    /// (the caller frees its duplicate pages for the rest).
    pub(crate) fn insert(
        &mut self,
        parent: u32,
        hashes: &[u64],
        owner: Owner,
        events: &mut KvEventQueue,
    ) -> (u32, u64) {
        let tick = self.tick();
        let ppn = self.pages_per_node;
        let mut cur = parent;
        let mut created = 0u64;
        let mut run: Vec<u64> = Vec::new();
        let mut run_parent: Option<u64> = None;
        let mut near = Near::default();
        for (i, &h) in hashes.iter().enumerate() {
            // The slot a new node would take, offered to the index with the
            // hash: one probe finds a cached node or claims the hash.
            let slot = match self.vacant.last() {
                Some(&v) => v,
                None => self.nodes.len() as u32,
            };
            if let Err(idx) = self.index.try_insert_near(h, slot, &mut near) {
                if !run.is_empty() {
                    events.stored(run_parent, std::mem::take(&mut run));
                }
                self.add_lock(idx, owner);
                self.nodes[idx as usize].last_access = tick;
                cur = idx;
                continue;
            }
            let mut locks = [0u32; OWNERS];
            locks[owner as usize] = 1;
            let node = Node {
                parent: cur,
                children: 0,
                locks,
                last_access: tick,
            };
            if self.vacant.pop().is_some() {
                self.nodes[slot as usize] = node;
                self.hashes[slot as usize] = h;
            } else {
                self.nodes.push(node);
                self.hashes.push(h);
            }
            if let Some(p) = self.nodes.get_mut(cur as usize) {
                if p.children == 0 && !p.locked() {
                    self.lru.remove(&(p.last_access, cur));
                }
                p.children += 1;
            }
            if run.is_empty() {
                run_parent = self.hashes.get(cur as usize).copied();
                // The rest of the hashes bound the run (an empty run was
                // never allocated, or was taken by its event): a consumed
                // event's buffer, or one allocation.
                run = events.buffer(hashes.len() - i);
            }
            self.pages[owner as usize] += ppn;
            run.push(h);
            created += 1;
            cur = slot;
        }
        events.stored(run_parent, run);
        (cur, created)
    }

    /// `evict`: removes unlocked leaves, least recently used first, until at
    /// least `pages` pages are freed or nothing is evictable. Returns the
    /// pages freed; the removed hashes are published as one Removed event.
    ///
    /// A parent left an unlocked leaf usually shares its child's access time
    /// (a path is locked and touched at one tick) and so is the next leaf in
    /// order: it is then taken directly instead of going through the ordered
    /// set, which is the same order as inserting it and popping the first.
    pub(crate) fn evict(&mut self, pages: u64, events: &mut KvEventQueue) -> u64 {
        let ppn = self.pages_per_node;
        let mut freed = 0u64;
        let wanted = pages.div_ceil(ppn).min(self.lru.len() as u64) as usize;
        let mut removed = events.buffer(wanted);
        let mut next = None;
        while freed < pages {
            let Some(idx) = next.take().or_else(|| self.lru.pop_first().map(|(_, i)| i)) else {
                break;
            };
            let n = self.nodes[idx as usize];
            debug_assert!(!n.locked() && n.children == 0);
            self.pages[CACHED] = self.pages[CACHED].saturating_sub(ppn);
            freed += ppn;
            removed.push(self.hashes[idx as usize]);
            self.vacant.push(idx);
            if let Some(p) = self.nodes.get_mut(n.parent as usize) {
                p.children = p.children.saturating_sub(1);
                if p.children == 0 && !p.locked() {
                    let key = (p.last_access, n.parent);
                    let first = self.lru.first().is_none_or(|f| key < *f);
                    if freed < pages && first {
                        next = Some(n.parent);
                    } else {
                        self.lru.insert(key);
                    }
                }
            }
        }
        // Nothing above reads the index, so it is updated once, a group of
        // consecutive hashes per probe.
        self.index.remove_all(&removed);
        events.removed(removed);
        freed
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn add_lock(&mut self, idx: u32, owner: Owner) {
        let ppn = self.pages_per_node;
        let n = &mut self.nodes[idx as usize];
        if !n.locked() && n.children == 0 {
            self.lru.remove(&(n.last_access, idx));
        }
        let before = n.class();
        n.locks[owner as usize] += 1;
        let after = n.class();
        if before != after {
            self.pages[before] = self.pages[before].saturating_sub(ppn);
            self.pages[after] += ppn;
        }
    }

    fn sub_lock(&mut self, idx: u32, owner: Owner) {
        let ppn = self.pages_per_node;
        let n = &mut self.nodes[idx as usize];
        debug_assert!(n.locks[owner as usize] > 0, "unlock without a lock");
        let before = n.class();
        n.locks[owner as usize] = n.locks[owner as usize].saturating_sub(1);
        let after = n.class();
        if before != after {
            self.pages[before] = self.pages[before].saturating_sub(ppn);
            self.pages[after] += ppn;
        }
        if !n.locked() && n.children == 0 {
            self.lru.insert((n.last_access, idx));
        }
    }

    /// Recomputes every counter from the nodes and compares; for tests.
    #[cfg(test)]
    pub(crate) fn check(&self) -> Result<(), String> {
        let mut pages = [0u64; OWNERS + 1];
        let mut children = std::collections::HashMap::<u32, u32>::new();
        let live: std::collections::HashSet<u32> = self.index.iter().map(|(_, v)| v).collect();
        for &idx in &live {
            let n = &self.nodes[idx as usize];
            if self.index.get(self.hashes[idx as usize]) != Some(idx) {
                return Err(format!("index mismatch at {idx}"));
            }
            pages[n.class()] += self.pages_per_node;
            if n.parent != NIL {
                if !live.contains(&n.parent) {
                    return Err(format!("node {idx} has a dead parent"));
                }
                *children.entry(n.parent).or_default() += 1;
                let p = &self.nodes[n.parent as usize];
                for o in 0..OWNERS {
                    if n.locks[o] > p.locks[o] {
                        return Err(format!("child {idx} locked more than its parent"));
                    }
                }
            }
        }
        if pages != self.pages {
            return Err(format!("pages {:?} != counted {:?}", self.pages, pages));
        }
        for &idx in &live {
            let n = &self.nodes[idx as usize];
            let c = children.get(&idx).copied().unwrap_or(0);
            if c != n.children {
                return Err(format!("node {idx} children {} != {c}", n.children));
            }
            let leaf = !n.locked() && c == 0;
            if leaf != self.lru.contains(&(n.last_access, idx)) {
                return Err(format!("lru membership wrong for {idx}"));
            }
        }
        if self.lru.len() > live.len() {
            return Err("stale lru entries".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_core::KvEventData;

    fn events(q: &mut KvEventQueue) -> Vec<KvEventData> {
        let mut out = Vec::new();
        q.drain_into(&mut out);
        out.into_iter().map(|e| e.data).collect()
    }

    #[test]
    fn insert_match_lock_and_lru_eviction() {
        let mut q = KvEventQueue::default();
        let mut t = RadixCache::new(4);
        let (a, created) = t.insert(NIL, &[1, 2, 3], Owner::Active, &mut q);
        assert_eq!(created, 3);
        assert_eq!(t.pages(Owner::Active as usize), 12);
        assert_eq!(
            events(&mut q),
            vec![KvEventData::Stored {
                parent_hash: None,
                block_hashes: vec![1, 2, 3]
            }]
        );
        t.check().unwrap();
        // A sibling branch shares [1, 2].
        let (m, d) = t.match_prefix(&[1, 2, 9]);
        assert_eq!(m, 2);
        t.lock(d, Owner::Reserved);
        let (b, created) = t.insert(d, &[9], Owner::Reserved, &mut q);
        assert_eq!(created, 1);
        assert_eq!(
            events(&mut q),
            vec![KvEventData::Stored {
                parent_hash: Some(2),
                block_hashes: vec![9]
            }]
        );
        // Shared [1, 2] count as active (precedence), 9 as reserved.
        assert_eq!(t.pages(Owner::Active as usize), 12);
        assert_eq!(t.pages(Owner::Reserved as usize), 4);
        t.check().unwrap();
        assert_eq!(t.evict(100, &mut q), 0, "everything is locked");
        t.unlock(a, Owner::Active, true);
        assert_eq!(t.evictable_pages(), 4, "only node 3 is unlocked");
        t.check().unwrap();
        t.unlock(b, Owner::Reserved, false);
        assert_eq!(t.evictable_pages(), 16);
        t.check().unwrap();
        // Node 9 was unlocked last but touched earlier than 3: 9 goes first.
        assert_eq!(t.evict(4, &mut q), 4);
        assert_eq!(
            events(&mut q),
            vec![KvEventData::Removed {
                block_hashes: vec![9]
            }]
        );
        assert_eq!(t.evict(100, &mut q), 12);
        assert_eq!(
            events(&mut q),
            vec![KvEventData::Removed {
                block_hashes: vec![3, 2, 1]
            }]
        );
        assert_eq!(t.len(), 0);
        assert_eq!(t.total_pages(), 0);
        t.check().unwrap();
    }

    #[test]
    fn a_node_is_half_an_aligned_cache_line() {
        assert_eq!(std::mem::size_of::<Node>(), 32);
        assert_eq!(std::mem::align_of::<Node>(), 32);
    }

    #[test]
    fn reinsert_of_cached_hash_is_not_republished() {
        let mut q = KvEventQueue::default();
        let mut t = RadixCache::new(1);
        let (a, _) = t.insert(NIL, &[5, 6], Owner::Active, &mut q);
        let _ = events(&mut q);
        let (b, created) = t.insert(NIL, &[5, 6, 7], Owner::Active, &mut q);
        assert_eq!(created, 1);
        assert_eq!(
            events(&mut q),
            vec![KvEventData::Stored {
                parent_hash: Some(6),
                block_hashes: vec![7]
            }]
        );
        assert_eq!(t.unlocked_pages_on_path(b), 0);
        t.unlock(a, Owner::Active, false);
        t.unlock(b, Owner::Active, false);
        assert_eq!(t.unlocked_pages_on_path(b), 3);
        t.check().unwrap();
    }

    #[test]
    fn relabel_moves_pages_between_owners() {
        let mut q = KvEventQueue::default();
        let mut t = RadixCache::new(2);
        let (a, _) = t.insert(NIL, &[1, 2], Owner::Reserved, &mut q);
        assert_eq!(t.pages(Owner::Reserved as usize), 4);
        t.relabel(a, Owner::Reserved, Owner::Active);
        assert_eq!(t.pages(Owner::Reserved as usize), 0);
        assert_eq!(t.pages(Owner::Active as usize), 4);
        t.relabel(a, Owner::Active, Owner::Pinned);
        assert_eq!(t.pages(Owner::Pinned as usize), 4);
        t.check().unwrap();
    }

    fn removed_hashes(q: &mut KvEventQueue) -> Vec<u64> {
        events(q)
            .into_iter()
            .flat_map(|e| match e {
                KvEventData::Removed { block_hashes } => block_hashes,
                _ => Vec::new(),
            })
            .collect()
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// `match_prefix` (presence from the group heads, one value read)
        /// equals the straightforward walk that looks every hash up and
        /// keeps the last node found, on trees grown and evicted at random
        /// and queries that share, leave and re-enter cached runs.
        #[test]
        fn match_prefix_equals_a_lookup_per_hash(
            paths in proptest::collection::vec((0u64..6, 1usize..40, 0usize..40), 1..20),
            evict in 0u64..60,
            queries in proptest::collection::vec((0u64..6, 0usize..50, 0usize..50), 1..20),
        ) {
            let mut q = KvEventQueue::default();
            let mut t = RadixCache::new(1);
            // Hashes of family `f` are consecutive (`f * 64 + i`), so a path
            // spans index groups the way a prompt's blocks do.
            let hash = |f: u64, i: usize| f * 64 + i as u64;
            for &(f, len, _) in &paths {
                let hashes: Vec<u64> = (0..len).map(|i| hash(f, i)).collect();
                let (deepest, _) = t.insert(NIL, &hashes, Owner::Active, &mut q);
                t.unlock(deepest, Owner::Active, true);
            }
            t.evict(evict, &mut q);
            for &(f, len, gap) in &queries {
                let mut hashes: Vec<u64> = (0..len).map(|i| hash(f, i)).collect();
                // A foreign hash part way: the match must stop there.
                if gap < len {
                    hashes[gap] = u64::MAX - gap as u64;
                }
                let (mut n, mut deepest) = (0u64, NIL);
                for &h in &hashes {
                    match t.index.get(h) {
                        Some(idx) => {
                            n += 1;
                            deepest = idx;
                        }
                        None => break,
                    }
                }
                prop_assert_eq!(t.match_prefix(&hashes), (n, deepest));
            }
        }

        /// `evict`'s shortcut (a parent that becomes the next leaf is taken
        /// without going through the ordered set) removes the same nodes in
        /// the same order as evicting one node at a time, which only ever
        /// uses the set: the order of SGLang's heap of unlocked leaves.
        #[test]
        fn evicting_at_once_equals_one_node_at_a_time(
            ppn in 1u64..4,
            ops in proptest::collection::vec((0u8..4, 0u64..5, 1usize..7, 0usize..7), 1..40),
            amount in 1u64..200,
        ) {
            let mut q = KvEventQueue::default();
            let mut t = RadixCache::new(ppn);
            let mut held: Vec<(u32, Owner)> = Vec::new();
            for (serial, &(op, family, len, shared)) in ops.iter().enumerate() {
                match op {
                    // A path from the root: `shared` blocks of the family's
                    // prefix, then blocks of its own. Hashes are chained
                    // (a hash always has the same parent), as block hashes are.
                    0 | 1 => {
                        let shared = shared.min(len);
                        let hashes: Vec<u64> = (0..len as u64)
                            .map(|i| {
                                if (i as usize) < shared {
                                    family * 1_000 + i
                                } else {
                                    (serial as u64 + 1) * 1_000_000 + family * 1_000 + i
                                }
                            })
                            .collect();
                        let owner = if op == 0 { Owner::Active } else { Owner::Pinned };
                        let (deepest, _) = t.insert(NIL, &hashes, owner, &mut q);
                        held.push((deepest, owner));
                    }
                    // Release a holder, cached or touched.
                    _ if !held.is_empty() => {
                        let (deepest, owner) = held.swap_remove(shared % held.len());
                        t.unlock(deepest, owner, op == 3);
                    }
                    _ => {}
                }
                // Now and then a partial eviction, so the set holds leaves
                // of many ages when the comparison runs.
                if serial % 5 == 4 {
                    t.evict(ppn, &mut q);
                }
            }
            let _ = events(&mut q);
            let amount = amount * ppn;

            let mut at_once = t.clone();
            let mut qa = KvEventQueue::default();
            let freed_at_once = at_once.evict(amount, &mut qa);

            let mut single = t.clone();
            let mut qb = KvEventQueue::default();
            let mut freed_single = 0;
            while freed_single < amount {
                let f = single.evict(ppn, &mut qb);
                if f == 0 {
                    break;
                }
                freed_single += f;
            }
            prop_assert_eq!(freed_at_once, freed_single);
            prop_assert_eq!(removed_hashes(&mut qa), removed_hashes(&mut qb));
            prop_assert_eq!(at_once.evictable_pages(), single.evictable_pages());
            prop_assert!(at_once.check().is_ok(), "{:?}", at_once.check());
            prop_assert!(single.check().is_ok(), "{:?}", single.check());
        }
    }
}
