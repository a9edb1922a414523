//! The LRU queue of unreferenced blocks, after vLLM
//! `vllm/v1/core/kv_cache_utils.py` `FreeKVCacheBlockQueue`: an intrusive
//! doubly linked list over block ids so that taking a cached block back out of
//! the middle (a prefix hit) is O(1), allocation pops the front (least
//! recently freed) and a freed block joins the back.

/// "No block" in the links.
const NIL: u32 = u32::MAX;

/// See the module docs. Links live in flat vectors indexed by block id, so the
/// queue never allocates after construction.
#[derive(Clone, Debug)]
pub(crate) struct FreeQueue {
    prev: Vec<u32>,
    next: Vec<u32>,
    queued: Vec<bool>,
    head: u32,
    tail: u32,
    len: u64,
}

impl FreeQueue {
    /// A queue holding blocks `0..n` in id order, as vLLM's pool starts.
    pub(crate) fn full(n: u32) -> Self {
        let len = n as usize;
        let mut q = FreeQueue {
            prev: vec![NIL; len],
            next: vec![NIL; len],
            queued: vec![false; len],
            head: NIL,
            tail: NIL,
            len: 0,
        };
        for b in 0..n {
            q.push_back(b);
        }
        q
    }

    /// Blocks in the queue.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Whether `b` is in the queue.
    pub(crate) fn contains(&self, b: u32) -> bool {
        self.queued.get(b as usize).copied().unwrap_or(false)
    }

    /// The least recently freed block, without removing it.
    pub(crate) fn front(&self) -> Option<u32> {
        (self.head != NIL).then_some(self.head)
    }

    /// Removes and returns the least recently freed block.
    pub(crate) fn pop_front(&mut self) -> Option<u32> {
        let b = self.front()?;
        self.remove(b);
        Some(b)
    }

    /// Appends `b` as the most recently freed block. A block already queued
    /// stays where it is (the pool never frees a block twice).
    pub(crate) fn push_back(&mut self, b: u32) {
        let i = b as usize;
        if i >= self.queued.len() || self.queued[i] {
            return;
        }
        self.prev[i] = self.tail;
        self.next[i] = NIL;
        if self.tail == NIL {
            self.head = b;
        } else {
            self.next[self.tail as usize] = b;
        }
        self.tail = b;
        self.queued[i] = true;
        self.len += 1;
    }

    /// Unlinks `b` wherever it is; a block not queued is left alone.
    pub(crate) fn remove(&mut self, b: u32) {
        let i = b as usize;
        if i >= self.queued.len() || !self.queued[i] {
            return;
        }
        let (p, n) = (self.prev[i], self.next[i]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.prev[i] = NIL;
        self.next[i] = NIL;
        self.queued[i] = false;
        self.len -= 1;
    }

    /// Queue contents front to back (tests and snapshots only).
    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        let mut cur = self.head;
        std::iter::from_fn(move || {
            if cur == NIL {
                None
            } else {
                let b = cur;
                cur = self.next[b as usize];
                Some(b)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_order_and_middle_removal() {
        let mut q = FreeQueue::full(4);
        assert_eq!(q.iter().collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        q.remove(2);
        assert!(!q.contains(2));
        assert_eq!(q.pop_front(), Some(0));
        q.push_back(0);
        q.push_back(2);
        q.push_back(2);
        assert_eq!(q.iter().collect::<Vec<_>>(), vec![1, 3, 0, 2]);
        assert_eq!(q.len(), 4);
        q.remove(2);
        q.remove(1);
        q.remove(7);
        assert_eq!(q.iter().collect::<Vec<_>>(), vec![3, 0]);
        assert_eq!(q.pop_front(), Some(3));
        assert_eq!(q.pop_front(), Some(0));
        assert_eq!(q.pop_front(), None);
        assert_eq!(q.len(), 0);
    }
}
