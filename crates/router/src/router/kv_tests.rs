//! Tests of `KvAware`, Dynamo 1.6.1's cost, on hand-built worker states:
//! the cost per pool, tie-breaking, temperature sampling and booking.

use super::*;
use crate::cost::KvKnobs;
use crate::view::{lowest_row, softmax_row};
use handoff_core::KvEventData;

const BS: u32 = 16;

fn req(id: u64, prompt: u32, prefix: &[u64]) -> Request {
    Request {
        id: RequestId(id),
        prompt_tokens: prompt,
        max_output_tokens: 40,
        prefix_hashes: prefix.to_vec(),
        hash_block_tokens: 512,
        session: None,
        arrival: Instant::ZERO,
        lora: None,
    }
}

fn cfg(role: PoolRole) -> RouterConfig {
    RouterConfig::new(role, RouterMode::KvAware, BS)
}

fn publish(r: &mut Router, worker: u32, request: &Request, blocks: usize) {
    let mut h = Vec::new();
    request.block_hashes(BS, &mut h);
    h.truncate(blocks);
    r.on_kv_event(
        WorkerId(worker),
        &KvEvent {
            event_id: 1,
            data: KvEventData::Stored {
                parent_hash: None,
                block_hashes: h,
            },
        },
    );
}

fn state(prefill_tokens: u64, prompt_blocks: u64, requests: u64) -> WorkerState {
    let mut w = WorkerState::new(WorkerId(0));
    w.booked_prefill_tokens = prefill_tokens;
    w.booked_prompt_blocks = prompt_blocks;
    w.booked_requests = requests;
    // Blocks booked for the legacy cost are not read by Dynamo's.
    w.booked_blocks = 1_000;
    w
}

#[test]
fn prefill_cost_is_scaled_prompt_load_minus_credit_plus_requests() {
    let kv = KvKnobs {
        overlap_score_credit: 2.0,
        prefill_load_scale: 3.0,
        decode_active_request_weight: 0.5,
        router_temperature: 0.0,
    };
    let p = cfg(PoolRole::Prefill).with_kv(kv).cost_params();
    let r = req(1, 160, &[]);
    // (320 + 160) / 16 = 30 blocks, minus 2 x 4 overlap = 22, x 3 = 66;
    // no active blocks in a prefill pool; 0.5 x 2 requests.
    assert_eq!(p.dynamo_cost(&state(320, 9, 2), &r, 4), 66.0 + 1.0);
    // The credit never takes the prompt term below 0.
    assert_eq!(p.dynamo_cost(&state(0, 0, 0), &r, 100), 0.0);
}

#[test]
fn decode_cost_is_active_prompt_blocks_without_overlap_or_prefill() {
    let p = cfg(PoolRole::Decode).cost_params();
    let r = req(1, 100, &[]);
    assert!(!p.dynamo_reads_overlap() && !p.dynamo_books_prefill());
    // 7 active + floor(100 / 16) = 6; booked prefill tokens and overlap
    // do not count in a disaggregated decode pool.
    assert_eq!(p.dynamo_cost(&state(5_000, 7, 3), &r, 5), 13.0);
}

#[test]
fn aggregated_cost_has_every_term() {
    let p = cfg(PoolRole::Decode).with_aggregated(true).cost_params();
    assert!(p.dynamo_reads_overlap() && p.dynamo_books_prefill());
    let r = req(1, 100, &[]);
    // (60 + 100) / 16 - 2 = 8, plus 7 + 6 active blocks.
    assert_eq!(p.dynamo_cost(&state(60, 7, 1), &r, 2), 21.0);
}

#[test]
fn bad_knobs_count_as_zero() {
    let k = KvKnobs {
        overlap_score_credit: f64::NAN,
        prefill_load_scale: -1.0,
        decode_active_request_weight: f64::INFINITY,
        router_temperature: -0.5,
    }
    .sanitized();
    assert_eq!(
        (
            k.overlap_score_credit,
            k.prefill_load_scale,
            k.decode_active_request_weight,
            k.router_temperature
        ),
        (0.0, 0.0, 0.0, 0.0)
    );
    assert_eq!(KvKnobs::default().sanitized(), KvKnobs::default());
}

#[test]
fn ties_are_broken_uniformly_by_the_seeded_generator() {
    let scores = [
        (0, 5.0, 0),
        (1, 3.0, 0),
        (2, 3.0, 0),
        (3, 9.0, 0),
        (4, 3.0, 0),
    ];
    let mut counts = [0u32; 5];
    let mut rng = Rng::seeded(7);
    for _ in 0..3_000 {
        counts[lowest_row(&scores, &mut rng).unwrap()] += 1;
    }
    assert_eq!((counts[0], counts[3]), (0, 0), "{counts:?}");
    for c in [counts[1], counts[2], counts[4]] {
        assert!((900..1_100).contains(&c), "{counts:?}");
    }
    // A unique lowest takes no draw.
    let mut a = Rng::seeded(1);
    assert_eq!(lowest_row(&[(0, 2.0, 0), (1, 1.0, 0)], &mut a), Some(1));
    assert_eq!(a.next_u64(), Rng::seeded(1).next_u64());
    assert_eq!(lowest_row(&[], &mut a), None);
}

#[test]
fn softmax_follows_the_normalised_costs() {
    let scores = [(0, 10.0, 0), (1, 20.0, 0)];
    // p(0) = 1 / (1 + e^-1) = 0.731 at temperature 1.
    assert_eq!(softmax_row(&scores, 1.0, 0.73), Some(0));
    assert_eq!(softmax_row(&scores, 1.0, 0.74), Some(1));
    // Equal costs: uniform.
    let eq = [(0, 4.0, 0), (1, 4.0, 0)];
    assert_eq!(softmax_row(&eq, 1.0, 0.49), Some(0));
    assert_eq!(softmax_row(&eq, 1.0, 0.51), Some(1));
    // A cold temperature all but always takes the lowest.
    assert_eq!(softmax_row(&scores, 0.01, 0.999_999), Some(0));
    assert_eq!(softmax_row(&[], 1.0, 0.5), None);
}

#[test]
fn prefill_pool_prefers_overlap_and_books_uncached_tokens() {
    let mut r = Router::new(cfg(PoolRole::Prefill), (0..3).map(WorkerId));
    let a = req(1, 1024, &[11, 12]);
    publish(&mut r, 2, &a, 32);
    let s = r.select(&a, Instant::ZERO).unwrap();
    assert_eq!((s.worker, s.overlap_blocks), (WorkerId(2), 32));
    assert_eq!(s.prefill_tokens, 1024 - 32 * 16);
    // Worker 2 now carries 512 uncached tokens: a request it holds none of
    // goes elsewhere.
    let b = req(2, 1024, &[99]);
    assert_ne!(r.select(&b, Instant::ZERO).unwrap().worker, WorkerId(2));
    r.prefill_completed(RequestId(1));
    assert_eq!(r.load(WorkerId(2)).unwrap().booked_prefill_tokens, 0);
    r.request_released(RequestId(1));
    r.request_released(RequestId(2));
    assert!(r.is_drained());
    r.audit().unwrap();
}

#[test]
fn decode_pool_balances_active_prompt_blocks_and_ignores_overlap() {
    let mut r = Router::new(cfg(PoolRole::Decode), (0..2).map(WorkerId));
    let big = req(1, 1600, &[1, 2, 3, 4]);
    // Worker 1 holds the whole prompt, but a decode pool reads no overlap.
    publish(&mut r, 1, &big, 100);
    let first = r.select(&big, Instant::ZERO).unwrap().worker;
    let second = r.select(&req(2, 160, &[5]), Instant::ZERO).unwrap().worker;
    assert_ne!(first, second, "the second goes to the emptier worker");
    assert_eq!(r.load(first).unwrap().booked_prefill_tokens, 0);
    assert_eq!(r.prefill_completed(RequestId(1)), Release::Noop);
    r.audit().unwrap();
}

#[test]
fn aggregated_pool_books_prefill_until_the_first_token() {
    let c = cfg(PoolRole::Decode).with_aggregated(true);
    let mut r = Router::new(c, [WorkerId(0)]);
    let s = r.select(&req(1, 100, &[]), Instant::ZERO).unwrap();
    assert_eq!(s.prefill_tokens, 100);
    assert!(matches!(
        r.prefill_completed(RequestId(1)),
        Release::Released {
            prefill_tokens: 100,
            ..
        }
    ));
    r.request_released(RequestId(1));
    assert!(r.is_drained());
}

#[test]
fn equal_workers_spread_by_seed_and_repeat_by_seed() {
    let picks = |seed| {
        let mut r = Router::new(cfg(PoolRole::Prefill).with_seed(seed), (0..8).map(WorkerId));
        (0..16)
            .map(|i| {
                let q = req(i, 64, &[1000 + i]);
                let w = r.select(&q, Instant::ZERO).unwrap().worker;
                r.prefill_completed(q.id);
                r.request_released(q.id);
                w.0
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(picks(3), picks(3));
    assert_ne!(picks(3), picks(4));
    // Every worker costs the same each time: not always the lowest id.
    assert!(picks(3).iter().any(|&w| w != 0));
}

#[test]
fn temperature_samples_with_the_seeded_generator() {
    let kv = KvKnobs {
        router_temperature: 1.0,
        ..KvKnobs::default()
    };
    let run = |seed| {
        let c = cfg(PoolRole::Prefill).with_kv(kv).with_seed(seed);
        let mut r = Router::new(c, (0..4).map(WorkerId));
        (0..20)
            .map(|i| {
                r.select(&req(i, 256, &[i]), Instant::ZERO)
                    .unwrap()
                    .worker
                    .0
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(run(9), run(9));
    assert_ne!(run(9), run(10));
}

proptest::proptest! {
    /// Whatever the bookings and published prefixes, the temperature-0
    /// choice costs no more than any selectable worker, and booking it
    /// keeps the totals equal to the bookings.
    #[test]
    fn the_choice_has_the_lowest_cost(
        role_decode in proptest::bool::ANY,
        aggregated in proptest::bool::ANY,
        seed in 0u64..1_000,
        published in proptest::collection::vec(0usize..40, 4),
        loads in proptest::collection::vec((1u32..4_000, 0u32..3), 0..12),
        prompt in 1u32..4_000,
    ) {
        let role = if role_decode { PoolRole::Decode } else { PoolRole::Prefill };
        let c = cfg(role).with_aggregated(aggregated && role_decode).with_seed(seed);
        let mut r = Router::new(c, (0..4).map(WorkerId));
        let q = req(1_000, prompt, &[7, 8, 9, 10, 11, 12, 13, 14]);
        for (w, &b) in published.iter().enumerate() {
            publish(&mut r, w as u32, &q, b);
        }
        for (i, &(p, w)) in loads.iter().enumerate() {
            r.book(WorkerId(w), &req(i as u64, p, &[i as u64]), Instant::ZERO);
        }
        let params = r.config.cost_params();
        let reads = params.dynamo_reads_overlap();
        let costs: Vec<f64> = (0..4)
            .map(|w| {
                let o = if reads { r.overlap_blocks(WorkerId(w), &q) } else { 0 };
                params.dynamo_cost(&r.workers[w as usize], &q, o)
            })
            .collect();
        let s = r.select(&q, Instant::ZERO).unwrap();
        let best = costs.iter().cloned().fold(f64::INFINITY, f64::min);
        proptest::prop_assert_eq!(costs[s.worker.0 as usize], best);
        proptest::prop_assert!(r.audit().is_ok());
    }
}
