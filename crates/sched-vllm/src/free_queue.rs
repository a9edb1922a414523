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
//! The ring holds at most twice the pool; when it is full of live and stale
//! entries, the live ones are moved up in order (each at least half a ring
//! of middle removals apart, so amortised O(1)).

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

/// See the module docs. Each block's position lives in the caller's
/// per-block entries (`nodes`, indexed by block id); the ring is allocated
/// once, at twice the pool's size.
#[derive(Clone, Debug)]
pub(crate) struct FreeQueue {
    /// Block ids by sequence number (`seq & mask`), live or stale.
    ring: Vec<u32>,
    mask: u64,
    /// Sequence numbers of the first entry and one past the last.
    head: u64,
    tail: u64,
    /// Live entries.
    len: u64,
}

impl FreeQueue {
    /// A queue holding blocks `0..nodes.len()` in id order, as vLLM's pool
    /// starts.
    pub(crate) fn full<T: Queued>(nodes: &mut [T]) -> Self {
        let cap = (nodes.len() * 2).max(16).next_power_of_two();
        let mut q = FreeQueue {
            ring: vec![0; cap],
            mask: cap as u64 - 1,
            head: 0,
            tail: 0,
            len: 0,
        };
        for n in nodes.iter_mut() {
            n.set_pos(QueuePos::default());
        }
        for b in 0..nodes.len() as u32 {
            q.push_back(nodes, b);
        }
        q
    }

    /// Blocks in the queue.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Whether `b` is in the queue.
    pub(crate) fn contains<T: Queued>(&self, nodes: &[T], b: u32) -> bool {
        nodes.get(b as usize).is_some_and(|n| n.pos().is_queued())
    }

    /// Removes and returns the least recently freed block.
    pub(crate) fn pop_front<T: Queued>(&mut self, nodes: &mut [T]) -> Option<u32> {
        while self.head < self.tail {
            let seq = self.head;
            let b = self.ring[(seq & self.mask) as usize];
            self.head += 1;
            if let Some(n) = nodes.get_mut(b as usize) {
                if n.is_at(seq) {
                    n.set_pos(QueuePos::default());
                    self.len -= 1;
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
    pub(crate) fn pop_front_each<T: Queued>(
        &mut self,
        nodes: &mut [T],
        max: usize,
        mut taken: impl FnMut(u32, &mut T),
    ) -> usize {
        let mut got = 0;
        let mut seq = self.head;
        while got < max && seq < self.tail {
            let b = self.ring[(seq & self.mask) as usize];
            if let Some(n) = nodes.get_mut(b as usize) {
                if n.is_at(seq) {
                    n.set_pos(QueuePos::default());
                    taken(b, n);
                    got += 1;
                }
            }
            seq += 1;
        }
        self.head = seq;
        self.len -= got as u64;
        got
    }

    /// Up to `n` ring entries from the front, stale ones included: the
    /// blocks the next pops will take, give or take the stale ones.
    pub(crate) fn front(&self, n: usize) -> impl Iterator<Item = u32> + '_ {
        let end = self.tail.min(self.head.saturating_add(n as u64));
        (self.head..end).map(move |seq| self.ring[(seq & self.mask) as usize])
    }

    /// Appends `b` as the most recently freed block. A block already queued
    /// stays where it is (the pool never frees a block twice).
    pub(crate) fn push_back<T: Queued>(&mut self, nodes: &mut [T], b: u32) {
        if !matches!(nodes.get(b as usize), Some(n) if !n.pos().is_queued()) {
            return;
        }
        if self.tail - self.head == self.ring.len() as u64 {
            self.compact(nodes);
        }
        self.ring[(self.tail & self.mask) as usize] = b;
        nodes[b as usize].set_pos(QueuePos::at(self.tail));
        self.tail += 1;
        self.len += 1;
    }

    /// [`Self::push_back`] of a block the caller knows is not queued (its
    /// last reference was just dropped): the release path's check fewer.
    #[inline]
    pub(crate) fn push_back_unqueued<T: Queued>(&mut self, nodes: &mut [T], b: u32) {
        debug_assert!(matches!(nodes.get(b as usize), Some(n) if !n.pos().is_queued()));
        if self.tail - self.head == self.ring.len() as u64 {
            self.compact(nodes);
        }
        self.ring[(self.tail & self.mask) as usize] = b;
        if let Some(n) = nodes.get_mut(b as usize) {
            n.set_pos(QueuePos::at(self.tail));
        }
        self.tail += 1;
        self.len += 1;
    }

    /// Takes `b` out wherever it is; a block not queued is left alone.
    pub(crate) fn remove<T: Queued>(&mut self, nodes: &mut [T], b: u32) {
        if let Some(n) = nodes.get_mut(b as usize) {
            if n.pos().is_queued() {
                n.set_pos(QueuePos::default());
                self.len -= 1;
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
        (self.head..self.tail).filter_map(move |seq| {
            let b = self.ring[(seq & self.mask) as usize];
            nodes[b as usize].is_at(seq).then_some(b)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn lru_order_and_middle_removal() {
        let mut n = vec![QueuePos::default(); 4];
        let mut q = FreeQueue::full(&mut n);
        assert_eq!(q.iter(&n).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        q.remove(&mut n, 2);
        assert!(!q.contains(&n, 2));
        assert_eq!(q.pop_front(&mut n), Some(0));
        q.push_back(&mut n, 0);
        q.push_back(&mut n, 2);
        q.push_back(&mut n, 2);
        assert_eq!(q.iter(&n).collect::<Vec<_>>(), vec![1, 3, 0, 2]);
        assert_eq!(q.len(), 4);
        q.remove(&mut n, 2);
        q.remove(&mut n, 1);
        q.remove(&mut n, 7);
        assert_eq!(q.iter(&n).collect::<Vec<_>>(), vec![3, 0]);
        assert_eq!(q.pop_front(&mut n), Some(3));
        assert_eq!(q.pop_front(&mut n), Some(0));
        assert_eq!(q.pop_front(&mut n), None);
        assert_eq!(q.len(), 0);
        assert!(!q.contains(&n, 0));
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
        /// middle removals (enough of them to wrap and compact the ring many
        /// times) keeps the order of a plain list.
        #[test]
        fn same_order_as_a_list(
            n in 1usize..12,
            ops in proptest::collection::vec((0u8..4, 0u32..12), 0..400),
        ) {
            let mut nodes = vec![QueuePos::default(); n];
            let mut q = FreeQueue::full(&mut nodes);
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
                } else {
                    let b = b % n as u32;
                    let want = model_apply(&mut model, (kind, b));
                    match kind {
                        0 => prop_assert_eq!(q.pop_front(&mut nodes), want),
                        1 => q.push_back(&mut nodes, b),
                        _ => q.remove(&mut nodes, b),
                    }
                }
                prop_assert_eq!(q.iter(&nodes).collect::<Vec<_>>(), model.clone());
                prop_assert_eq!(q.len(), model.len() as u64);
                let front: Vec<u32> = q.front(usize::MAX).collect();
                prop_assert!(model.iter().all(|b| front.contains(b)));
            }
        }
    }
}
