//! `fit_hits` stops its prefix walk early only when the walk could not
//! end in a fit: its answer equals the whole walk's.

use super::{cfg, fixed_perf};
use crate::block_pool::Owner;
use crate::core::VllmCore;
use handoff_perf::FixedPerf;
use proptest::prelude::*;

/// The whole walk, as the core did before the early stop: every hit, then
/// the free-block test.
fn reference(
    core: &VllmCore<FixedPerf>,
    hashes: &[u64],
    max_blocks: u64,
    need: u64,
    room: Option<u64>,
) -> Option<(u64, Vec<u32>)> {
    let mut hits = Vec::new();
    let mut evictable = 0;
    let mut near = handoff_hashtable::Near::default();
    for &h in hashes.iter().take(max_blocks as usize) {
        match core.pool.lookup(h, &mut near) {
            Some(b) => {
                if core.pool.is_free(b) {
                    evictable += 1;
                }
                hits.push(b);
            }
            None => break,
        }
    }
    let need = need - (hits.len() as u64 - evictable);
    (need <= room?).then_some((evictable, hits))
}

proptest! {
    /// A prompt whose leading blocks are published, each either still
    /// referenced or cached free, with an unpublished gap somewhere.
    #[test]
    fn early_stop_answers_as_the_whole_walk(
        referenced in proptest::collection::vec(any::<bool>(), 1..40),
        gap in 0usize..48,
        max_blocks in 0u64..48,
        extra_need in 1u64..8,
        room in proptest::option::of(0u64..64),
    ) {
        let mut core = VllmCore::with_perf(cfg(64), fixed_perf());
        let hashes: Vec<u64> = (0..48u64).map(|i| 0x1000 + i).collect();
        for (i, &held) in referenced.iter().enumerate() {
            if i == gap {
                continue;
            }
            let b = core.pool.allocate(Owner::Active, &mut core.events).unwrap();
            core.pool.publish(b, hashes[i]).unwrap();
            if !held {
                core.pool.release(b, Owner::Active);
            }
        }
        // A sequence needs more blocks than its hits can cover.
        let need = max_blocks.min(hashes.len() as u64) + extra_need;
        let mut hits = Vec::new();
        let got = core.fit_hits(&hashes, max_blocks, need, room, &mut hits);
        let want = reference(&core, &hashes, max_blocks, need, room);
        prop_assert_eq!(got, want.as_ref().map(|w| w.0));
        if let Some((_, want_hits)) = want {
            prop_assert_eq!(hits, want_hits);
        }
    }
}
