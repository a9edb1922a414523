//! The LRU queue of unreferenced blocks, after vLLM
//! `vllm/v1/core/kv_cache_utils.py` `FreeKVCacheBlockQueue`: allocation pops
//! the front (least recently freed), a freed block joins the back, and a
//! cached block can be taken back out of the middle (a prefix hit) in O(1).
//!
//! vLLM keeps a doubly linked list. Here the queue is a ring of block ids in
//! the order they were freed, and each block records the ring position of
//! its live entry (its queue *position*, kept in the block's own entry):
//! taking a block out of the middle only forgets its position, leaving a
//! stale ring entry that popping skips. The order of the live entries is
//! exactly the linked list's. What the ring buys: the blocks the next
//! allocations will pop are known without chasing a chain of cold entries
//! (a linked list finds the second block only once the first one's entry
//! has arrived from memory), so [`FreeQueue::front`] lets the pool load
//! them together, and a pop writes no neighbour.
//!
//! Memory follows use: vLLM's queue starts as every block in id order, and
//! a freed block only ever joins the back, so the blocks never allocated
//! yet are always a contiguous id range at the front. The queue holds that
//! range as two numbers and materialises a block's entry (in the caller's
//! `nodes`) when it first pops it; a pool of 10^10 blocks that a workload
//! touches a thousand of costs a thousand entries. The ring grows with the
//! blocks ever freed: when it is full of live and stale entries, the live
//! ones are moved up in order if the stale ones are at least half of it
//! (compactions at least half a ring of middle removals apart, so amortised
//! O(1)), and it doubles otherwise.

/// The position of a block that is not queued.
const OUT: u64 = u64::MAX;

/// A block's queue position: the ring sequence number of its live entry,
/// kept in the block's own entry so that popping or freeing a block touches
/// one cache line of the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QueuePos(u64);

impl Default for QueuePos {
    /// Not queued.
    fn default() -> Self {
        QueuePos(OUT)
    }
}

impl QueuePos {
    /// Whether the block is in the queue.
    pub(crate) fn is_queued(self) -> bool {
        self.0 != OUT
    }

    /// The position of a block queued at sequence number `seq`. Sequence
    /// numbers count pushes since the queue was made (renumbered down by
    /// compaction), so they stay far below 2^62, the width a packed entry
    /// keeps.
    pub(crate) fn at(seq: u64) -> QueuePos {
        debug_assert!(seq < 1 << 62);
        QueuePos(seq)
    }

    /// The sequence number of a queued block.
    pub(crate) fn seq(self) -> Option<u64> {
        self.is_queued().then_some(self.0)
    }
}

/// Something that carries a block's [`QueuePos`].
pub(crate) trait Queued {
    fn pos(&self) -> QueuePos;
    fn set_pos(&mut self, p: QueuePos);

    /// Whether the block is queued at sequence number `seq` (the ring entry
    /// at `seq` is its live one); an entry that packs its position can
    /// answer without unpacking it.
    fn is_at(&self, seq: u64) -> bool {
        self.pos() == QueuePos(seq)
    }
}

impl Queued for QueuePos {
    fn pos(&self) -> QueuePos {
        *self
    }
    fn set_pos(&mut self, p: QueuePos) {
        *self = p;
    }
}

/// The largest block id plus one: ids are `u32`, and `u32::MAX` itself is
/// never handed out.
pub(crate) const ID_LIMIT: u64 = u32::MAX as u64;

/// See the module docs. Each materialised block's position lives in the
/// caller's per-block entries (`nodes`, indexed by block id), which the
/// queue extends by one default entry whenever it hands out a never-used
/// block; the ring grows with the blocks that were ever freed.
#[derive(Clone, Debug)]
pub(crate) struct FreeQueue {
    /// Block ids by sequence number (`seq & mask`), live or stale. Empty
    /// until the first block is freed; a power of two long after that.
    ring: Vec<u32>,
    mask: u64,
    /// Sequence numbers of the first entry and one past the last.
    head: u64,
    tail: u64,
    /// Live ring entries.
    live: u64,
    /// The never-used blocks, ids `fresh..end`: ahead of every ring entry,
    /// since vLLM's queue starts as every block in id order and a freed
    /// block only ever joins the back. Held as a range, they cost nothing
    /// until popped.
    fresh: u64,
    end: u64,
    /// Ids at or past this are never handed out ([`ID_LIMIT`]; lower in
    /// tests).
    limit: u64,
}

impl FreeQueue {
    /// A queue holding blocks `0..n` in id order, as vLLM's pool starts
    /// (`FreeKVCacheBlockQueue.__init__` over every block), all of them
    /// never used: nothing is allocated until a block is popped.
    pub(crate) fn new(n: u64) -> Self {
        FreeQueue::with_limit(n, ID_LIMIT)
    }

    /// [`Self::new`] with ids limited to `0..limit`.
    pub(crate) fn with_limit(n: u64, limit: u64) -> Self {
        FreeQueue {
            ring: Vec::new(),
            mask: 0,
            head: 0,
            tail: 0,
            live: 0,
            fresh: 0,
            end: n,
            limit: limit.min(ID_LIMIT),
        }
    }

    /// Blocks in the queue, never-used ones included.
    pub(crate) fn len(&self) -> u64 {
        self.live + (self.end - self.fresh)
    }

    /// Blocks the queue can ever hold: the pool's size. It only shrinks if
    /// the never-used range reaches the id limit (see [`Self::take_fresh`]).
    pub(crate) fn capacity(&self) -> u64 {
        self.end
    }

    /// Blocks ever handed out: the length `nodes` has.
    #[cfg(test)]
    pub(crate) fn materialised(&self) -> u64 {
        self.fresh
    }

    /// Whether materialised block `b` is in the queue. Never-used blocks
    /// have no entry and no one holds their ids, so no caller asks.
    pub(crate) fn contains<T: Queued>(&self, nodes: &[T], b: u32) -> bool {
        nodes.get(b as usize).is_some_and(|n| n.pos().is_queued())
    }

    /// The next never-used block, its (unqueued) entry appended to `nodes`.
    /// Past the id limit the rest of the range cannot be named: it leaves
    /// the pool (`end` drops to the limit), which takes 2^32 blocks ever
    /// allocated, tens of gigabytes of entries, to reach.
    fn take_fresh<T: Queued + Default>(&mut self, nodes: &mut Vec<T>) -> Option<(u32, usize)> {
        if self.fresh >= self.limit {
            self.end = self.end.min(self.fresh);
        }
        if self.fresh >= self.end {
            return None;
        }
        debug_assert_eq!(
            nodes.len() as u64,
            self.fresh,
            "entries are materialised in id order"
        );
        let b = self.fresh as u32;
        self.fresh += 1;
        nodes.push(T::default());
        Some((b, nodes.len() - 1))
    }

    /// Removes and returns the least recently freed block.
    pub(crate) fn pop_front<T: Queued + Default>(&mut self, nodes: &mut Vec<T>) -> Option<u32> {
        if let Some((b, _)) = self.take_fresh(nodes) {
            return Some(b);
        }
        while self.head < self.tail {
            let seq = self.head;
            let b = self.ring[(seq & self.mask) as usize];
            self.head += 1;
            if let Some(n) = nodes.get_mut(b as usize) {
                if n.is_at(seq) {
                    n.set_pos(QueuePos::default());
                    self.live -= 1;
                    return Some(b);
                }
            }
        }
        None
    }

    /// [`Self::pop_front`] up to `max` times, until the queue is empty,
    /// handing each popped block and its node to `taken` as it goes;
    /// returns how many were popped. The bulk form keeps the ring's cursor
    /// in a register across a whole allocation chunk, and the caller's
    /// update of a popped node happens while the node is in hand.
    pub(crate) fn pop_front_each<T: Queued + Default>(
        &mut self,
        nodes: &mut Vec<T>,
        max: usize,
        mut taken: impl FnMut(u32, &mut T),
    ) -> usize {
        let mut got = 0;
        while got < max {
            let Some((b, i)) = self.take_fresh(nodes) else {
                break;
            };
            taken(b, &mut nodes[i]);
            got += 1;
        }
        let mut seq = self.head;
        let mut popped = 0;
        while got < max && seq < self.tail {
            let b = self.ring[(seq & self.mask) as usize];
            if let Some(n) = nodes.get_mut(b as usize) {
                if n.is_at(seq) {
                    n.set_pos(QueuePos::default());
                    taken(b, n);
                    got += 1;
                    popped += 1;
                }
            }
            seq += 1;
        }
        self.head = seq;
        self.live -= popped;
        got
    }

    /// Up to `n` blocks from the front, stale ring entries included: the
    /// blocks the next pops will take, give or take the stale ones
    /// (never-used ones have no entry yet to load).
    pub(crate) fn front(&self, n: usize) -> impl Iterator<Item = u32> + '_ {
        let fresh_end = self.end.min(self.limit);
        let k = fresh_end.saturating_sub(self.fresh).min(n as u64);
        let fresh = (self.fresh..self.fresh + k).map(|b| b as u32);
        let rest = n as u64 - k;
        let end = self.tail.min(self.head.saturating_add(rest));
        fresh.chain((self.head..end).map(move |seq| self.ring[(seq & self.mask) as usize]))
    }

    /// Appends `b` as the most recently freed block. A block already queued
    /// stays where it is (the pool never frees a block twice), and so does
    /// one never handed out (it is still in the never-used range).
    pub(crate) fn push_back<T: Queued>(&mut self, nodes: &mut [T], b: u32) {
        if !matches!(nodes.get(b as usize), Some(n) if !n.pos().is_queued()) {
            return;
        }
        self.append(nodes, b);
    }

    /// [`Self::push_back`] of a block the caller knows is materialised and
    /// not queued (its last reference was just dropped): the release path's
    /// check fewer.
    #[inline]
    pub(crate) fn push_back_unqueued<T: Queued>(&mut self, nodes: &mut [T], b: u32) {
        debug_assert!(matches!(nodes.get(b as usize), Some(n) if !n.pos().is_queued()));
        if (b as usize) < nodes.len() {
            self.append(nodes, b);
        }
    }

    /// Writes materialised, unqueued `b` at the ring's tail.
    #[inline]
    fn append<T: Queued>(&mut self, nodes: &mut [T], b: u32) {
        if self.tail - self.head == self.ring.len() as u64 {
            self.make_room(nodes);
        }
        self.ring[(self.tail & self.mask) as usize] = b;
        nodes[b as usize].set_pos(QueuePos::at(self.tail));
        self.tail += 1;
        self.live += 1;
    }

    /// The ring is full of live and stale entries: drop the stale ones if
    /// they are at least half of it (so compactions stay at least half a
    /// ring of removals apart, amortised O(1)), else double it. The ring
    /// stays below four entries per materialised block.
    fn make_room<T: Queued>(&mut self, nodes: &mut [T]) {
        let cap = self.ring.len() as u64;
        if cap > 0 && self.live * 2 <= cap {
            self.compact(nodes);
            return;
        }
        let new_cap = (cap * 2).max(16);
        let mut ring = vec![0u32; new_cap as usize];
        let new_mask = new_cap - 1;
        for seq in self.head..self.tail {
            ring[(seq & new_mask) as usize] = self.ring[(seq & self.mask) as usize];
        }
        self.ring = ring;
        self.mask = new_mask;
    }

    /// Takes `b` out wherever it is; a block not queued is left alone.
    pub(crate) fn remove<T: Queued>(&mut self, nodes: &mut [T], b: u32) {
        if let Some(n) = nodes.get_mut(b as usize) {
            if n.pos().is_queued() {
                n.set_pos(QueuePos::default());
                self.live -= 1;
            }
        }
    }

    /// Moves the live entries up to the front, in order, dropping the stale
    /// ones; positions are renumbered from `head`.
    fn compact<T: Queued>(&mut self, nodes: &mut [T]) {
        let mut w = self.head;
        for seq in self.head..self.tail {
            let b = self.ring[(seq & self.mask) as usize];
            if nodes[b as usize].is_at(seq) {
                self.ring[(w & self.mask) as usize] = b;
                nodes[b as usize].set_pos(QueuePos::at(w));
                w += 1;
            }
        }
        self.tail = w;
    }

    /// Queue contents front to back (tests and snapshots only).
    #[cfg(test)]
    pub(crate) fn iter<'a, T: Queued>(&'a self, nodes: &'a [T]) -> impl Iterator<Item = u32> + 'a {
        let fresh = (self.fresh..self.end.min(self.limit)).map(|b| b as u32);
        fresh.chain((self.head..self.tail).filter_map(move |seq| {
            let b = self.ring[(seq & self.mask) as usize];
            nodes[b as usize].is_at(seq).then_some(b)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn lru_order_and_middle_removal() {
        let mut n: Vec<QueuePos> = Vec::new();
        let mut q = FreeQueue::new(4);
        assert_eq!(q.iter(&n).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        assert!(n.is_empty(), "nothing materialised before a pop");
        assert_eq!(q.pop_front(&mut n), Some(0));
        assert_eq!(q.pop_front(&mut n), Some(1));
        assert_eq!(q.pop_front(&mut n), Some(2));
        assert_eq!(n.len(), 3);
        q.push_back(&mut n, 2);
        q.push_back(&mut n, 0);
        q.push_back(&mut n, 1);
        // Never-used 3 stays ahead of every freed block.
        assert_eq!(q.iter(&n).collect::<Vec<_>>(), vec![3, 2, 0, 1]);
        q.remove(&mut n, 0);
        assert!(!q.contains(&n, 0));
        q.push_back(&mut n, 0);
        q.push_back(&mut n, 0);
        q.push_back(&mut n, 3);
        assert_eq!(q.iter(&n).collect::<Vec<_>>(), vec![3, 2, 1, 0]);
        assert_eq!(q.len(), 4);
        q.remove(&mut n, 1);
        q.remove(&mut n, 7);
        assert_eq!(q.iter(&n).collect::<Vec<_>>(), vec![3, 2, 0]);
        assert_eq!(q.pop_front(&mut n), Some(3));
        assert_eq!(q.pop_front(&mut n), Some(2));
        assert_eq!(q.pop_front(&mut n), Some(0));
        assert_eq!(q.pop_front(&mut n), None);
        assert_eq!(q.len(), 0);
        assert!(!q.contains(&n, 0));
    }

    #[test]
    fn a_huge_queue_costs_what_it_hands_out() {
        let mut n: Vec<QueuePos> = Vec::new();
        let mut q = FreeQueue::new(100_000_000_000);
        let mut got = Vec::new();
        assert_eq!(q.pop_front_each(&mut n, 5, |b, _| got.push(b)), 5);
        assert_eq!(got, vec![0, 1, 2, 3, 4]);
        q.push_back(&mut n, 1);
        assert_eq!(q.len(), 100_000_000_000 - 4);
        assert_eq!(q.front(2).collect::<Vec<_>>(), vec![5, 6]);
        assert_eq!((n.len(), q.materialised()), (5, 5));
        assert!(q.ring.len() <= 16);
    }

    #[test]
    fn the_id_limit_retires_the_unnameable_rest() {
        let mut n: Vec<QueuePos> = Vec::new();
        let mut q = FreeQueue::with_limit(10, 3);
        assert_eq!(q.capacity(), 10);
        for b in 0..3 {
            assert_eq!(q.pop_front(&mut n), Some(b));
        }
        q.push_back(&mut n, 1);
        // Ids 3.. cannot be named: the pool shrinks to the three it has.
        assert_eq!(q.pop_front(&mut n), Some(1));
        assert_eq!((q.capacity(), q.len()), (3, 0));
        assert_eq!(q.pop_front(&mut n), None);
    }

    /// The linked list this queue replaces, as a plain list.
    fn model_apply(model: &mut Vec<u32>, op: (u8, u32)) -> Option<u32> {
        match op {
            (0, _) => (!model.is_empty()).then(|| model.remove(0)),
            (1, b) => {
                if !model.contains(&b) {
                    model.push(b);
                }
                None
            }
            (_, b) => {
                model.retain(|&x| x != b);
                None
            }
        }
    }

    proptest! {
        /// Any interleaving of pops (one at a time or in bulk), frees and
        /// middle removals of blocks handed out before (enough of them to
        /// grow, wrap and compact the ring many times) keeps the order of a
        /// plain list that starts as every block in id order.
        #[test]
        fn same_order_as_a_list(
            n in 1usize..12,
            ops in proptest::collection::vec((0u8..4, 0u32..12), 0..400),
        ) {
            let mut nodes: Vec<QueuePos> = Vec::new();
            let mut q = FreeQueue::new(n as u64);
            let mut model: Vec<u32> = (0..n as u32).collect();
            for (kind, b) in ops {
                if kind == 3 {
                    // A bulk pop of up to `b` blocks.
                    let want: Vec<u32> = (0..b).map_while(|_| model_apply(&mut model, (0, 0))).collect();
                    let mut out = Vec::new();
                    let got = q.pop_front_each(&mut nodes, b as usize, |b, n| {
                        assert!(!n.is_queued(), "handed over still queued");
                        out.push(b);
                    });
                    prop_assert_eq!(got, out.len());
                    prop_assert_eq!(&out[..], &want[..]);
                } else if kind == 0 {
                    let want = model_apply(&mut model, (0, 0));
                    prop_assert_eq!(q.pop_front(&mut nodes), want);
                } else {
                    // The pool frees and takes out only blocks it was
                    // handed: a never-used block has no id in use.
                    if nodes.is_empty() {
                        continue;
                    }
                    let b = b % nodes.len() as u32;
                    model_apply(&mut model, (kind, b));
                    match kind {
                        1 => q.push_back(&mut nodes, b),
                        _ => q.remove(&mut nodes, b),
                    }
                }
                prop_assert_eq!(q.iter(&nodes).collect::<Vec<_>>(), model.clone());
                prop_assert_eq!(q.len(), model.len() as u64);
                prop_assert!(q.ring.len() as u64 <= (4 * nodes.len() as u64).max(16));
                let front: Vec<u32> = q.front(usize::MAX).collect();
                prop_assert!(model.iter().all(|b| front.contains(b)));
            }
        }
    }
}
