//! Tests of [`Router`]: booking and release, every built-in mode, custom
//! policies, KV events, and the indexed kv-aware pick against the scan.

use super::*;
use handoff_core::KvEventData;

const BS: u32 = 16;

fn req(id: u64, prompt: u32, output: u32, prefix: &[u64]) -> Request {
    Request {
        id: RequestId(id),
        prompt_tokens: prompt,
        max_output_tokens: output,
        prefix_hashes: prefix.to_vec(),
        hash_block_tokens: 512,
        session: None,
        arrival: Instant::ZERO,
        lora: None,
    }
}

fn router(role: PoolRole, mode: RouterMode, n: u32) -> Router {
    Router::new(RouterConfig::new(role, mode, BS), (0..n).map(WorkerId))
}

/// Publishes `request`'s first `blocks` block hashes on `worker`.
fn publish(r: &mut Router, worker: u32, request: &Request, blocks: usize, event_id: u64) {
    let mut h = Vec::new();
    request.block_hashes(BS, &mut h);
    h.truncate(blocks);
    r.on_kv_event(
        WorkerId(worker),
        &KvEvent {
            event_id,
            data: KvEventData::Stored {
                parent_hash: None,
                block_hashes: h,
            },
        },
    );
}

#[test]
fn decode_books_prompt_and_output_blocks_until_release() {
    let mut r = router(PoolRole::Decode, RouterMode::RoundRobin, 2);
    let s = r.select(&req(1, 100, 60, &[]), Instant(5)).unwrap();
    assert_eq!(s.worker, WorkerId(0));
    assert_eq!((s.blocks, s.prefill_tokens), (10, 0), "ceil(160 / 16)");
    let l = r.load(WorkerId(0)).unwrap();
    assert_eq!((l.booked_blocks, l.booked_requests), (10, 1));
    assert_eq!(r.booking(RequestId(1)).unwrap().booked_at, Instant(5));
    // A decode booking has no prefill phase to complete.
    assert_eq!(r.prefill_completed(RequestId(1)), Release::Noop);
    assert_eq!(
        r.request_released(RequestId(1)),
        Release::Released {
            worker: WorkerId(0),
            blocks: 10,
            prefill_tokens: 0
        }
    );
    assert!(r.is_drained());
}

#[test]
fn prefill_keeps_blocks_after_prefill_completes() {
    let mut r = router(PoolRole::Prefill, RouterMode::KvLegacy, 1);
    let s = r.select(&req(1, 100, 60, &[]), Instant::ZERO).unwrap();
    assert_eq!((s.blocks, s.prefill_tokens), (7, 100));
    assert_eq!(
        r.prefill_completed(RequestId(1)),
        Release::Released {
            worker: WorkerId(0),
            blocks: 0,
            prefill_tokens: 100
        }
    );
    let l = r.load(WorkerId(0)).unwrap();
    assert_eq!((l.booked_blocks, l.booked_prefill_tokens), (7, 0));
    assert_eq!(r.prefill_completed(RequestId(1)), Release::Noop);
    assert!(!r.is_drained(), "the source still owns its blocks");
    assert!(matches!(
        r.request_released(RequestId(1)),
        Release::Released {
            blocks: 7,
            prefill_tokens: 0,
            ..
        }
    ));
    assert!(r.is_drained());
    assert_eq!(r.stats().noop_prefill_completions, 1);
}

#[test]
fn release_before_prefill_completion_frees_everything() {
    let mut r = router(PoolRole::Prefill, RouterMode::LeastLoaded, 1);
    r.select(&req(1, 64, 1, &[]), Instant::ZERO).unwrap();
    assert!(matches!(
        r.request_released(RequestId(1)),
        Release::Released {
            blocks: 4,
            prefill_tokens: 64,
            ..
        }
    ));
    assert!(r.is_drained());
    assert_eq!(r.prefill_completed(RequestId(1)), Release::Noop);
}

#[test]
fn double_and_unknown_releases_are_counted_noops() {
    let mut r = router(PoolRole::Decode, RouterMode::LeastLoaded, 2);
    r.select(&req(1, 32, 32, &[]), Instant::ZERO).unwrap();
    assert!(matches!(
        r.request_released(RequestId(1)),
        Release::Released { .. }
    ));
    assert_eq!(r.request_released(RequestId(1)), Release::Noop);
    assert_eq!(r.request_released(RequestId(99)), Release::Noop);
    assert_eq!(r.stats().noop_releases, 2);
    for (_, l) in r.loads() {
        assert_eq!((l.booked_blocks, l.booked_requests), (0, 0));
    }
}

#[test]
fn rebooking_moves_the_load() {
    let mut r = router(PoolRole::Decode, RouterMode::RoundRobin, 2);
    let a = req(1, 32, 32, &[]);
    assert_eq!(r.select(&a, Instant::ZERO).unwrap().worker, WorkerId(0));
    assert_eq!(r.select(&a, Instant::ZERO).unwrap().worker, WorkerId(1));
    assert_eq!(r.load(WorkerId(0)).unwrap().booked_blocks, 0);
    assert_eq!(r.load(WorkerId(1)).unwrap().booked_blocks, 4);
    assert_eq!(r.stats().rebookings, 1);
    assert_eq!(r.live_bookings(), 1);
    r.audit().unwrap();
}

#[test]
fn round_robin_cycles_in_id_order_over_available_workers() {
    let mut r = Router::new(
        RouterConfig::new(PoolRole::Decode, RouterMode::RoundRobin, BS),
        [WorkerId(7), WorkerId(3), WorkerId(5), WorkerId(3)],
    );
    let picks: Vec<u32> = (0..4)
        .map(|i| {
            r.select(&req(i, 16, 1, &[]), Instant::ZERO)
                .unwrap()
                .worker
                .0
        })
        .collect();
    assert_eq!(picks, vec![3, 5, 7, 3]);
    assert!(r.remove_worker(WorkerId(5)));
    let picks: Vec<u32> = (4..8)
        .map(|i| {
            r.select(&req(i, 16, 1, &[]), Instant::ZERO)
                .unwrap()
                .worker
                .0
        })
        .collect();
    assert_eq!(picks, vec![3, 7, 3, 7]);
    // Bookings on a removed worker still release.
    assert!(matches!(
        r.request_released(RequestId(1)),
        Release::Released {
            worker: WorkerId(5),
            ..
        }
    ));
}

#[test]
fn empty_pool_refuses_and_counts() {
    let mut r = router(PoolRole::Decode, RouterMode::KvLegacy, 0);
    assert_eq!(r.select(&req(1, 16, 1, &[]), Instant::ZERO), None);
    let mut r = router(PoolRole::Decode, RouterMode::Random, 1);
    r.remove_worker(WorkerId(0));
    assert_eq!(r.select(&req(1, 16, 1, &[]), Instant::ZERO), None);
    assert_eq!(
        r.book(WorkerId(9), &req(1, 16, 1, &[]), Instant::ZERO),
        None
    );
    assert_eq!(r.stats().no_worker, 2);
    assert!(r.add_worker(WorkerId(0)));
    assert!(r.select(&req(1, 16, 1, &[]), Instant::ZERO).is_some());
}

#[test]
fn least_loaded_adds_reported_usage_and_breaks_ties_low() {
    let mut r = router(PoolRole::Decode, RouterMode::LeastLoaded, 3);
    assert_eq!(
        r.select(&req(1, 160, 0, &[]), Instant::ZERO)
            .unwrap()
            .worker,
        WorkerId(0)
    );
    // w0 has 10 booked blocks; w1 reports 20 physically used; w2 is idle.
    r.on_capacity(
        WorkerId(1),
        KvCapacitySnapshot {
            total_blocks: 100,
            active_blocks: 12,
            pinned_source_blocks: 5,
            reserved_destination_blocks: 3,
            ..Default::default()
        },
    );
    assert_eq!(
        r.select(&req(2, 160, 0, &[]), Instant::ZERO)
            .unwrap()
            .worker,
        WorkerId(2)
    );
    // Now w0 = 10, w1 = 20, w2 = 10: tie between w0 and w2 goes to w0.
    assert_eq!(
        r.select(&req(3, 16, 0, &[]), Instant::ZERO).unwrap().worker,
        WorkerId(0)
    );
    r.on_capacity(WorkerId(42), KvCapacitySnapshot::default());
    assert_eq!(r.stats().unknown_worker_capacities, 1);
}

#[test]
fn power_of_two_takes_the_less_loaded_of_its_pair() {
    // With two workers the pair is always both, so P2C is least-loaded.
    let mut r = Router::new(
        RouterConfig::new(PoolRole::Decode, RouterMode::PowerOfTwo, BS).with_seed(9),
        [WorkerId(0), WorkerId(1)],
    );
    for i in 0..20 {
        r.select(&req(i, 16, 0, &[]), Instant::ZERO).unwrap();
    }
    assert_eq!(r.load(WorkerId(0)).unwrap().booked_requests, 10);
    assert_eq!(r.load(WorkerId(1)).unwrap().booked_requests, 10);
    // With many workers one heavily loaded worker is never picked: any
    // pair containing it has a lighter partner.
    let mut r = Router::new(
        RouterConfig::new(PoolRole::Decode, RouterMode::PowerOfTwo, BS).with_seed(3),
        (0..4).map(WorkerId),
    );
    r.on_capacity(
        WorkerId(2),
        KvCapacitySnapshot {
            active_blocks: 1_000_000,
            ..Default::default()
        },
    );
    for i in 0..200 {
        let s = r.select(&req(i, 16, 0, &[]), Instant::ZERO).unwrap();
        assert_ne!(s.worker, WorkerId(2));
        r.request_released(RequestId(i));
    }
}

fn picks(mode: RouterMode, seed: u64) -> Vec<WorkerId> {
    let mut r = Router::new(
        RouterConfig::new(PoolRole::Decode, mode, BS).with_seed(seed),
        (0..5).map(WorkerId),
    );
    (0..64)
        .map(|i| {
            let s = r.select(&req(i, 16 * (1 + i as u32 % 7), 8, &[]), Instant::ZERO);
            if i % 3 == 0 {
                r.request_released(RequestId(i / 2));
            }
            s.unwrap().worker
        })
        .collect()
}

#[test]
fn built_in_policies_behind_a_custom_mode_pick_as_their_modes() {
    use crate::policy::{self, CustomPolicy, RoutingPolicy};
    let wrap = |mode: RouterMode| {
        CustomPolicy::new("wrapped", move |_| -> Box<dyn RoutingPolicy> {
            match mode {
                RouterMode::KvAware => Box::new(policy::KvAware),
                RouterMode::KvLegacy => Box::new(policy::KvLegacy),
                RouterMode::RoundRobin => Box::<policy::RoundRobin>::default(),
                RouterMode::Random => Box::new(policy::Random),
                RouterMode::LeastLoaded => Box::new(policy::LeastLoaded),
                RouterMode::PowerOfTwo => Box::new(policy::PowerOfTwo),
                RouterMode::Custom(c) => c.build(PoolRole::Decode),
            }
        })
    };
    for mode in RouterMode::ALL {
        for seed in [1, 2] {
            assert_eq!(
                picks(RouterMode::Custom(wrap(mode)), seed),
                picks(mode, seed),
                "{mode:?}"
            );
        }
    }
}

/// The first worker holding any of the request's prefix, else the
/// least used; counts its calls.
#[derive(Debug)]
struct Sticky(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl crate::RoutingPolicy for Sticky {
    fn select(
        &mut self,
        _: &Request,
        view: &mut crate::RouterView<'_>,
        _: Instant,
    ) -> Option<crate::RoutingChoice> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let ids: Vec<WorkerId> = view.workers().collect();
        let held = ids.iter().copied().find(|&w| view.overlap_blocks(w) > 0);
        let w = held.or_else(|| ids.iter().copied().min_by_key(|&w| view.used_blocks(w)))?;
        Some(crate::RoutingChoice {
            worker: w,
            dp_rank: Some(7),
        })
    }
}

#[test]
fn custom_policies_see_overlap_and_their_choice_is_booked() {
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let c = calls.clone();
    let sticky = crate::CustomPolicy::new("sticky", move |role| {
        assert_eq!(role, PoolRole::Prefill);
        Box::new(Sticky(c.clone()))
    });
    assert_eq!(RouterMode::Custom(sticky).name(), "sticky");
    assert_eq!(RouterMode::Custom(sticky), RouterMode::Custom(sticky));
    let mut r = router(PoolRole::Prefill, RouterMode::Custom(sticky), 3);
    assert!(r.scoring.is_none());
    let a = req(1, 1024, 8, &[10, 11]);
    publish(&mut r, 2, &a, 64, 0);
    let s = r.select(&a, Instant::ZERO).unwrap();
    assert_eq!(
        (s.worker, s.overlap_blocks, s.prefill_tokens, s.dp_rank),
        (WorkerId(2), 64, 0, Some(7))
    );
    let s = r.select(&req(2, 160, 8, &[99]), Instant::ZERO).unwrap();
    assert_eq!((s.worker, s.blocks), (WorkerId(0), 10));
    assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 2);
    r.request_released(RequestId(1));
    r.request_released(RequestId(2));
    assert!(r.is_drained());
}

#[derive(Debug)]
struct Stranger;

impl crate::RoutingPolicy for Stranger {
    fn select(
        &mut self,
        _: &Request,
        _: &mut crate::RouterView<'_>,
        _: Instant,
    ) -> Option<crate::RoutingChoice> {
        Some(crate::RoutingChoice::worker(WorkerId(99)))
    }
}

#[test]
fn a_choice_of_an_unselectable_worker_is_refused_and_counted() {
    let p = crate::CustomPolicy::new("stranger", |_| Box::new(Stranger));
    let mut r = router(PoolRole::Decode, RouterMode::Custom(p), 2);
    assert_eq!(r.select(&req(1, 64, 8, &[]), Instant::ZERO), None);
    let st = r.stats();
    assert_eq!(
        (st.rejected_choices, st.no_worker, st.selections),
        (1, 1, 0)
    );
    assert!(r.is_drained());
}

#[test]
fn seeded_modes_are_deterministic_and_seed_sensitive() {
    for mode in [RouterMode::Random, RouterMode::PowerOfTwo] {
        assert_eq!(picks(mode, 1), picks(mode, 1), "{mode:?}");
        assert_ne!(picks(mode, 1), picks(mode, 2), "{mode:?}");
    }
    let random = picks(RouterMode::Random, 1);
    for w in 0..5 {
        assert!(random.contains(&WorkerId(w)), "random never picked w{w}");
    }
    // Unseeded modes ignore the seed entirely.
    for mode in [
        RouterMode::KvLegacy,
        RouterMode::RoundRobin,
        RouterMode::LeastLoaded,
    ] {
        assert_eq!(picks(mode, 1), picks(mode, 2), "{mode:?}");
    }
}

#[test]
fn kv_aware_prefers_overlap_and_forgets_removed_blocks() {
    let mut r = router(PoolRole::Prefill, RouterMode::KvLegacy, 3);
    let a = req(1, 1024, 8, &[10, 11]);
    publish(&mut r, 2, &a, 64, 0);
    assert_eq!(r.overlap_blocks(WorkerId(2), &a), 64);
    let s = r.select(&a, Instant::ZERO).unwrap();
    assert_eq!((s.worker, s.overlap_blocks), (WorkerId(2), 64));
    assert_eq!(s.prefill_tokens, 0, "fully cached prompt");
    r.request_released(RequestId(1));

    // Same first chunk: 32 of 64 blocks shared.
    let b = req(2, 1024, 8, &[10, 99]);
    let s = r.select(&b, Instant::ZERO).unwrap();
    assert_eq!(
        (s.worker, s.overlap_blocks, s.prefill_tokens),
        (WorkerId(2), 32, 512)
    );
    r.request_released(RequestId(2));

    // Evicting the first block breaks the whole prefix.
    let mut h = Vec::new();
    a.block_hashes(BS, &mut h);
    r.on_kv_event(
        WorkerId(2),
        &KvEvent {
            event_id: 1,
            data: KvEventData::Removed {
                block_hashes: vec![h[0]],
            },
        },
    );
    assert_eq!(r.overlap_blocks(WorkerId(2), &a), 0);
    let s = r
        .select(&req(3, 1024, 8, &[10, 11]), Instant::ZERO)
        .unwrap();
    assert_eq!((s.worker, s.overlap_blocks), (WorkerId(0), 0));
}

#[test]
fn kv_aware_trades_overlap_against_load() {
    // Decode pool: cost = max(0, booked + request blocks - weight * overlap).
    let mut r = router(PoolRole::Decode, RouterMode::KvLegacy, 2);
    let a = req(1, 512, 0, &[5]); // 32 blocks
    publish(&mut r, 1, &a, 32, 0);
    // Load w1 with 40 blocks: cost w1 = 40 + 32 - 32 = 40 > w0 = 32.
    r.book(WorkerId(1), &req(100, 640, 0, &[]), Instant::ZERO)
        .unwrap();
    assert_eq!(r.select(&a, Instant::ZERO).unwrap().worker, WorkerId(0));
    r.request_released(RequestId(1));
    // A heavier overlap weight flips it: w1 = 40 + 32 - 64 = 8 < 32.
    let mut r2 = Router::new(
        RouterConfig::new(PoolRole::Decode, RouterMode::KvLegacy, BS).with_overlap_weight(2.0),
        [WorkerId(0), WorkerId(1)],
    );
    publish(&mut r2, 1, &a, 32, 0);
    r2.book(WorkerId(1), &req(100, 640, 0, &[]), Instant::ZERO)
        .unwrap();
    assert_eq!(r2.select(&a, Instant::ZERO).unwrap().worker, WorkerId(1));
    // Weight 0 is pure load balancing.
    let mut r3 = Router::new(
        RouterConfig::new(PoolRole::Decode, RouterMode::KvLegacy, BS).with_overlap_weight(0.0),
        [WorkerId(0), WorkerId(1)],
    );
    publish(&mut r3, 1, &a, 32, 0);
    assert_eq!(r3.select(&a, Instant::ZERO).unwrap().worker, WorkerId(0));
}

#[test]
fn kv_aware_prefill_counts_booked_prefill_tokens() {
    let mut r = router(PoolRole::Prefill, RouterMode::KvLegacy, 2);
    // w0 prefills 1600 tokens (owning 100 blocks), w1 1200 (75 blocks).
    r.book(WorkerId(0), &req(100, 1600, 1, &[]), Instant::ZERO)
        .unwrap();
    r.book(WorkerId(1), &req(101, 1200, 1, &[]), Instant::ZERO)
        .unwrap();
    // cost(w0) = (1600 + 16) / 16 + 100 + 1 = 202; cost(w1) = 76 + 76 = 152.
    assert_eq!(
        r.select(&req(1, 16, 1, &[]), Instant::ZERO).unwrap().worker,
        WorkerId(1)
    );
    r.request_released(RequestId(1));
    // Once w0's prefill completes its compute load is gone but its owned
    // blocks stay: cost(w0) = 16 / 16 + 100 + 1 = 102 < 152.
    r.prefill_completed(RequestId(100));
    assert_eq!(
        r.select(&req(2, 16, 1, &[]), Instant::ZERO).unwrap().worker,
        WorkerId(0)
    );
    r.audit().unwrap();
}

#[test]
fn unpublished_bookings_never_attract_traffic() {
    // Booking a prefix on w1 (as a destination reservation would) does
    // not make w1 look cached: only Stored events do.
    let mut r = router(PoolRole::Decode, RouterMode::KvLegacy, 2);
    let a = req(1, 512, 0, &[5]);
    r.book(WorkerId(1), &a, Instant::ZERO).unwrap();
    assert_eq!(r.overlap_blocks(WorkerId(1), &a), 0);
    let twin = req(2, 512, 0, &[5]);
    let s = r.select(&twin, Instant::ZERO).unwrap();
    assert_eq!((s.worker, s.overlap_blocks), (WorkerId(0), 0));
}

#[test]
fn kv_events_for_strangers_and_orphans_are_counted() {
    let mut r = router(PoolRole::Decode, RouterMode::KvLegacy, 1);
    let ev = |id, data| KvEvent { event_id: id, data };
    r.on_kv_event(WorkerId(5), &ev(0, KvEventData::Cleared));
    r.on_kv_event(
        WorkerId(0),
        &ev(
            3,
            KvEventData::Stored {
                parent_hash: Some(1),
                block_hashes: vec![2],
            },
        ),
    );
    r.on_kv_event(
        WorkerId(0),
        &ev(
            2,
            KvEventData::Removed {
                block_hashes: vec![7],
            },
        ),
    );
    let s = r.stats();
    assert_eq!(
        (
            s.unknown_worker_events,
            s.orphan_stores,
            s.out_of_order_events,
            s.unknown_removals,
            s.kv_events
        ),
        (1, 1, 1, 1, 2)
    );
    assert_eq!(r.load(WorkerId(0)).unwrap().published_blocks, 0);
}

#[test]
fn remove_worker_forgets_its_cache() {
    let mut r = router(PoolRole::Prefill, RouterMode::KvLegacy, 2);
    let a = req(1, 512, 1, &[5]);
    publish(&mut r, 1, &a, 32, 0);
    r.remove_worker(WorkerId(1));
    r.add_worker(WorkerId(1));
    assert_eq!(r.overlap_blocks(WorkerId(1), &a), 0);
    assert_eq!(r.select(&a, Instant::ZERO).unwrap().worker, WorkerId(0));
}

#[test]
fn other_modes_still_report_overlap_of_the_chosen_worker() {
    let mut r = router(PoolRole::Prefill, RouterMode::RoundRobin, 1);
    let a = req(1, 512, 1, &[5]);
    publish(&mut r, 0, &a, 16, 0);
    let s = r.select(&a, Instant::ZERO).unwrap();
    assert_eq!((s.overlap_blocks, s.prefill_tokens), (16, 256));
}

#[test]
fn only_large_kv_aware_pools_keep_the_index() {
    let big = router(PoolRole::Prefill, RouterMode::KvLegacy, 64);
    assert!(big.scoring.is_some());
    assert_eq!(big.scoring.as_ref().unwrap().by_load.len(), 64);
    assert!(router(PoolRole::Decode, RouterMode::KvLegacy, 4)
        .scoring
        .is_none());
    assert!(router(PoolRole::Decode, RouterMode::RoundRobin, 64)
        .scoring
        .is_none());
    let odd = Router::new(
        RouterConfig::new(PoolRole::Decode, RouterMode::KvLegacy, 10),
        (0..64).map(WorkerId),
    );
    assert!(
        odd.scoring.is_none(),
        "block size 10: float costs are not exact"
    );
}

mod indexed {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Select {
            root: u64,
            prompt: u32,
            output: u32,
        },
        Publish {
            worker: u32,
            root: u64,
            blocks: usize,
        },
        Remove {
            worker: u32,
            root: u64,
            from: usize,
        },
        Clear {
            worker: u32,
        },
        PrefillDone {
            nth: usize,
        },
        Release {
            nth: usize,
        },
        Leave {
            worker: u32,
        },
        Join {
            worker: u32,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u64..4, 1u32..3000, 1u32..200)
                .prop_map(|(root, prompt, output)| Op::Select { root, prompt, output }),
            3 => (0u32..6, 0u64..4, 0usize..200)
                .prop_map(|(worker, root, blocks)| Op::Publish { worker, root, blocks }),
            1 => (0u32..6, 0u64..4, 0usize..200)
                .prop_map(|(worker, root, from)| Op::Remove { worker, root, from }),
            1 => (0u32..6).prop_map(|worker| Op::Clear { worker }),
            2 => (0usize..64).prop_map(|nth| Op::PrefillDone { nth }),
            2 => (0usize..64).prop_map(|nth| Op::Release { nth }),
            1 => (0u32..6).prop_map(|worker| Op::Leave { worker }),
            1 => (0u32..8).prop_map(|worker| Op::Join { worker }),
        ]
    }

    /// A prompt under a shared root: requests of one root share their
    /// leading blocks.
    fn prompt(id: u64, root: u64, tokens: u32, output: u32) -> Request {
        let prefix: Vec<u64> = (0..8).map(|k| root * 1000 + k).collect();
        req(id, tokens, output, &prefix)
    }

    fn hashes(root: u64) -> Vec<u64> {
        let mut h = Vec::new();
        prompt(0, root, 4096, 1).block_hashes(BS, &mut h);
        h
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// The indexed kv-aware pick chooses exactly what scoring every
        /// worker would, with the same overlap and bookings, through
        /// publishes, removals, clears, releases and workers leaving and
        /// joining (a new worker shifts the slots).
        #[test]
        fn indexed_selection_equals_the_scan(
            prefill in any::<bool>(),
            ops in proptest::collection::vec(op(), 1..120),
        ) {
            let role = if prefill { PoolRole::Prefill } else { PoolRole::Decode };
            let cfg = RouterConfig::new(role, RouterMode::KvLegacy, BS);
            let mut fast = Router::new(cfg, (0..4).map(WorkerId));
            fast.force_index = Some(true);
            fast.rebuild_scoring();
            let mut scan = Router::new(cfg, (0..4).map(WorkerId));
            scan.force_index = Some(false);
            scan.rebuild_scoring();
            prop_assert!(fast.scoring.is_some() && scan.scoring.is_none());
            let mut booked: Vec<RequestId> = Vec::new();
            for (n, op) in ops.into_iter().enumerate() {
                let n = n as u64;
                for r in [&mut fast, &mut scan] {
                    match &op {
                        Op::Select { .. } => {}
                        Op::Publish { worker, root, blocks } => {
                            let h = hashes(*root);
                            r.on_kv_event(WorkerId(*worker), &KvEvent {
                                event_id: n,
                                data: KvEventData::Stored {
                                    parent_hash: None,
                                    block_hashes: h[..(*blocks).min(h.len())].to_vec(),
                                },
                            });
                        }
                        Op::Remove { worker, root, from } => {
                            let h = hashes(*root);
                            r.on_kv_event(WorkerId(*worker), &KvEvent {
                                event_id: n,
                                data: KvEventData::Removed {
                                    block_hashes: h[(*from).min(h.len())..].to_vec(),
                                },
                            });
                        }
                        Op::Clear { worker } => r.on_kv_event(WorkerId(*worker), &KvEvent {
                            event_id: n,
                            data: KvEventData::Cleared,
                        }),
                        Op::PrefillDone { nth } => {
                            if let Some(id) = booked.get(*nth) {
                                r.prefill_completed(*id);
                            }
                        }
                        Op::Release { nth } => {
                            if let Some(id) = booked.get(*nth) {
                                r.request_released(*id);
                            }
                        }
                        Op::Leave { worker } => {
                            r.remove_worker(WorkerId(*worker));
                        }
                        Op::Join { worker } => {
                            r.add_worker(WorkerId(*worker));
                        }
                    }
                }
                if let Op::Select { root, prompt: tokens, output } = op {
                    let q = prompt(n, root, tokens, output);
                    let a = fast.select(&q, Instant::ZERO);
                    let b = scan.select(&q, Instant::ZERO);
                    prop_assert_eq!(a, b, "op {}", n);
                    if a.is_some() {
                        booked.push(q.id);
                    }
                }
                prop_assert!(fast.scoring.is_some());
                let la: Vec<_> = fast.loads().collect();
                let lb: Vec<_> = scan.loads().collect();
                prop_assert_eq!(la, lb);
                prop_assert!(fast.published.holders().is_some());
                prop_assert!(scan.published.holders().is_none());
                prop_assert_eq!(fast.stats(), scan.stats());
                for i in 0..fast.workers.len() {
                    let mut a = fast.published.hashes(i);
                    let mut b = scan.published.hashes(i);
                    a.sort_unstable();
                    b.sort_unstable();
                    prop_assert_eq!(a, b, "worker slot {} holds the same in both layouts", i);
                }
            }
        }
    }
}
