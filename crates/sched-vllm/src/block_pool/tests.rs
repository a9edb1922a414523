use super::block::REF_MAX;
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
        let mut p = BlockPool::new(u64::from(n));
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
