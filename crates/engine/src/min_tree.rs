//! A fixed set of values, one per slot, whose least is read in O(1) and
//! kept up to date in O(log n) per change: the engine's per-host horizon
//! bounds, asked at every multi-pass step and changed after every host
//! operation, over up to a few hundred hosts (a scan per step would cost
//! more than the pass it saves at 128 workers).

/// See the module docs. A complete binary tree in an array: leaves from
/// `size`, each inner node the least of its two children.
#[derive(Clone, Debug)]
pub(crate) struct MinTree {
    size: usize,
    nodes: Vec<u64>,
}

impl MinTree {
    /// `n` slots, all `u64::MAX`.
    pub(crate) fn new(n: usize) -> Self {
        let size = n.max(1).next_power_of_two();
        MinTree {
            size,
            nodes: vec![u64::MAX; 2 * size],
        }
    }

    /// Sets slot `i` (ignored past the slots asked for at creation's
    /// power of two).
    pub(crate) fn set(&mut self, i: usize, v: u64) {
        let mut k = self.size + i;
        if k >= self.nodes.len() || self.nodes[k] == v {
            return;
        }
        self.nodes[k] = v;
        while k > 1 {
            k /= 2;
            let least = self.nodes[2 * k].min(self.nodes[2 * k + 1]);
            if self.nodes[k] == least {
                break;
            }
            self.nodes[k] = least;
        }
    }

    /// The least value of any slot.
    pub(crate) fn min(&self) -> u64 {
        self.nodes[1]
    }

    /// The least value and the first slot holding it (found from the root
    /// down, a node's value being its children's least).
    pub(crate) fn min_at(&self) -> (u64, usize) {
        let least = self.nodes[1];
        let mut k = 1;
        while k < self.size {
            k = if self.nodes[2 * k] == least {
                2 * k
            } else {
                2 * k + 1
            };
        }
        (least, k - self.size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn min_is_the_least_slot(
            n in 1usize..40,
            sets in proptest::collection::vec((0usize..40, any::<u64>()), 0..200),
        ) {
            let mut t = MinTree::new(n);
            let mut plain = vec![u64::MAX; n];
            for (i, v) in sets {
                let i = i % n;
                t.set(i, v);
                plain[i] = v;
                let least = plain.iter().copied().min().unwrap_or(u64::MAX);
                prop_assert_eq!(t.min(), least);
                let (v, at) = t.min_at();
                prop_assert_eq!(v, least);
                prop_assert_eq!(Some(at), plain.iter().position(|&x| x == least));
            }
        }
    }
}
