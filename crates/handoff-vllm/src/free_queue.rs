//! The LRU queue of unreferenced blocks, after vLLM
//! `vllm/v1/core/kv_cache_utils.py` `FreeKVCacheBlockQueue`: an intrusive
//! doubly linked list over block ids so that taking a cached block back out of
//! the middle (a prefix hit) is O(1), allocation pops the front (least
//! recently freed) and a freed block joins the back.

/// "No block" in the links.
const NIL: u32 = u32::MAX;
/// The `prev` of a block that is not queued.
const OUT: u32 = u32::MAX - 1;

/// A block's `[prev, next]` queue links, kept in the block's own entry so
/// that popping or freeing a block touches one cache line, not two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Links([u32; 2]);

impl Default for Links {
    /// Not queued.
    fn default() -> Self {
        Links([OUT, NIL])
    }
}

/// Something that carries a block's queue [`Links`].
pub(crate) trait Linked {
    fn links(&self) -> &Links;
    fn links_mut(&mut self) -> &mut Links;
}

impl Linked for Links {
    fn links(&self) -> &Links {
        self
    }
    fn links_mut(&mut self) -> &mut Links {
        self
    }
}

/// See the module docs. The queue holds only its ends and length; each
/// block's links live in the caller's per-block entries (`nodes`, indexed by
/// block id), so the queue never allocates.
#[derive(Clone, Debug)]
pub(crate) struct FreeQueue {
    head: u32,
    tail: u32,
    len: u64,
}

impl FreeQueue {
    /// A queue holding blocks `0..nodes.len()` in id order, as vLLM's pool
    /// starts.
    pub(crate) fn full<T: Linked>(nodes: &mut [T]) -> Self {
        let mut q = FreeQueue {
            head: NIL,
            tail: NIL,
            len: 0,
        };
        for n in nodes.iter_mut() {
            *n.links_mut() = Links::default();
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
    pub(crate) fn contains<T: Linked>(&self, nodes: &[T], b: u32) -> bool {
        nodes.get(b as usize).is_some_and(|n| n.links().0[0] != OUT)
    }

    /// Removes and returns the least recently freed block.
    pub(crate) fn pop_front<T: Linked>(&mut self, nodes: &mut [T]) -> Option<u32> {
        let b = (self.head != NIL).then_some(self.head)?;
        self.remove(nodes, b);
        Some(b)
    }

    /// Appends `b` as the most recently freed block. A block already queued
    /// stays where it is (the pool never frees a block twice).
    pub(crate) fn push_back<T: Linked>(&mut self, nodes: &mut [T], b: u32) {
        if !matches!(nodes.get(b as usize), Some(n) if n.links().0[0] == OUT) {
            return;
        }
        nodes[b as usize].links_mut().0 = [self.tail, NIL];
        if self.tail == NIL {
            self.head = b;
        } else {
            nodes[self.tail as usize].links_mut().0[1] = b;
        }
        self.tail = b;
        self.len += 1;
    }

    /// Unlinks `b` wherever it is; a block not queued is left alone.
    pub(crate) fn remove<T: Linked>(&mut self, nodes: &mut [T], b: u32) {
        let [p, n] = match nodes.get(b as usize) {
            Some(node) if node.links().0[0] != OUT => node.links().0,
            _ => return,
        };
        if p == NIL {
            self.head = n;
        } else {
            nodes[p as usize].links_mut().0[1] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            nodes[n as usize].links_mut().0[0] = p;
        }
        *nodes[b as usize].links_mut() = Links::default();
        self.len -= 1;
    }

    /// Queue contents front to back (tests and snapshots only).
    #[cfg(test)]
    pub(crate) fn iter<'a, T: Linked>(&self, nodes: &'a [T]) -> impl Iterator<Item = u32> + 'a {
        let mut cur = self.head;
        std::iter::from_fn(move || {
            if cur == NIL {
                None
            } else {
                let b = cur;
                cur = nodes[b as usize].links().0[1];
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
        let mut n = vec![Links::default(); 4];
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
}
