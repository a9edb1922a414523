//! The LRU queue of unreferenced blocks, after vLLM
//! `vllm/v1/core/kv_cache_utils.py` `FreeKVCacheBlockQueue`: an intrusive
//! doubly linked list over block ids so that taking a cached block back out of
//! the middle (a prefix hit) is O(1), allocation pops the front (least
//! recently freed) and a freed block joins the back.

/// "No block" in the links.
const NIL: u32 = u32::MAX;
/// The `prev` of a block that is not queued.
const OUT: u32 = u32::MAX - 1;

/// See the module docs. Each block's two links share one 8-byte entry (a
/// block outside the queue is marked in its `prev`), so touching a block is
/// one cache access, and the queue never allocates after construction.
#[derive(Clone, Debug)]
pub(crate) struct FreeQueue {
    /// `[prev, next]` per block.
    links: Vec<[u32; 2]>,
    head: u32,
    tail: u32,
    len: u64,
}

impl FreeQueue {
    /// A queue holding blocks `0..n` in id order, as vLLM's pool starts.
    pub(crate) fn full(n: u32) -> Self {
        let mut q = FreeQueue {
            links: vec![[OUT, NIL]; n as usize],
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
        self.links.get(b as usize).is_some_and(|l| l[0] != OUT)
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
        if !matches!(self.links.get(b as usize), Some(l) if l[0] == OUT) {
            return;
        }
        self.links[b as usize] = [self.tail, NIL];
        if self.tail == NIL {
            self.head = b;
        } else {
            self.links[self.tail as usize][1] = b;
        }
        self.tail = b;
        self.len += 1;
    }

    /// Unlinks `b` wherever it is; a block not queued is left alone.
    pub(crate) fn remove(&mut self, b: u32) {
        let [p, n] = match self.links.get(b as usize) {
            Some(&l) if l[0] != OUT => l,
            _ => return,
        };
        if p == NIL {
            self.head = n;
        } else {
            self.links[p as usize][1] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.links[n as usize][0] = p;
        }
        self.links[b as usize] = [OUT, NIL];
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
                cur = self.links[b as usize][1];
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
