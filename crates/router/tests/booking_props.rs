//! Random operation sequences: bookings always sum to the workers' totals,
//! nothing panics, every release drains, and equal seeds decide equally.

use handoff_core::{
    Instant, KvCapacitySnapshot, KvEvent, KvEventData, Request, RequestId, WorkerId,
};
use handoff_router::{KvKnobs, PoolRole, Release, Router, RouterConfig, RouterMode};
use proptest::prelude::*;

const BS: u32 = 16;
const WORKERS: u32 = 5;

#[derive(Clone, Debug)]
struct Spec {
    id: u64,
    prompt: u32,
    output: u32,
    prefix: Vec<u64>,
}

impl Spec {
    fn request(&self) -> Request {
        Request {
            id: RequestId(self.id),
            prompt_tokens: self.prompt,
            max_output_tokens: self.output,
            prefix_hashes: self.prefix.clone(),
            hash_block_tokens: 512,
            session: None,
            arrival: Instant::ZERO,
            lora: None,
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Select(Spec),
    Book(u32, Spec),
    PrefillCompleted(u64),
    Released(u64),
    Stored(u32, Spec, usize, bool),
    Removed(u32, Spec, usize),
    Cleared(u32),
    Capacity(u32, u64),
    AddWorker(u32),
    RemoveWorker(u32),
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        0u64..24,
        1u32..3000,
        0u32..600,
        proptest::collection::vec(0u64..4, 0..4),
    )
        .prop_map(|(id, prompt, output, prefix)| Spec {
            id,
            prompt,
            output,
            prefix,
        })
}

fn op() -> impl Strategy<Value = Op> {
    let w = 0u32..WORKERS + 1; // one id the router never served
    prop_oneof![
        4 => spec().prop_map(Op::Select),
        1 => (w.clone(), spec()).prop_map(|(w, s)| Op::Book(w, s)),
        2 => (0u64..24).prop_map(Op::PrefillCompleted),
        3 => (0u64..24).prop_map(Op::Released),
        2 => (w.clone(), spec(), 0usize..200, any::<bool>()).prop_map(|(w, s, n, p)| Op::Stored(w, s, n, p)),
        1 => (w.clone(), spec(), 0usize..200).prop_map(|(w, s, i)| Op::Removed(w, s, i)),
        1 => w.clone().prop_map(Op::Cleared),
        1 => (w.clone(), 0u64..10_000).prop_map(|(w, u)| Op::Capacity(w, u)),
        1 => w.clone().prop_map(Op::AddWorker),
        1 => w.prop_map(Op::RemoveWorker),
    ]
}

/// Runs `ops` and returns every observable answer, for determinism checks.
fn run(config: RouterConfig, ops: &[Op]) -> Vec<String> {
    let mut r = Router::new(config, (0..WORKERS).map(WorkerId));
    let mut out = Vec::new();
    let mut hashes = Vec::new();
    for (event_id, op) in ops.iter().enumerate() {
        let event_id = event_id as u64;
        match op {
            Op::Select(s) => out.push(format!("{:?}", r.select(&s.request(), Instant(event_id)))),
            Op::Book(w, s) => out.push(format!(
                "{:?}",
                r.book(WorkerId(*w), &s.request(), Instant(event_id))
            )),
            Op::PrefillCompleted(id) => {
                out.push(format!("{:?}", r.prefill_completed(RequestId(*id))))
            }
            Op::Released(id) => out.push(format!("{:?}", r.request_released(RequestId(*id)))),
            Op::Stored(w, s, n, with_parent) => {
                s.request().block_hashes(BS, &mut hashes);
                let n = (*n).min(hashes.len());
                let (parent, blocks) = if *with_parent && n >= 1 {
                    (Some(hashes[0]), hashes[1..n].to_vec())
                } else {
                    (None, hashes[..n].to_vec())
                };
                r.on_kv_event(
                    WorkerId(*w),
                    &KvEvent {
                        event_id,
                        data: KvEventData::Stored {
                            parent_hash: parent,
                            block_hashes: blocks,
                        },
                    },
                );
            }
            Op::Removed(w, s, i) => {
                s.request().block_hashes(BS, &mut hashes);
                let gone = hashes.get(*i).copied().unwrap_or(12345);
                r.on_kv_event(
                    WorkerId(*w),
                    &KvEvent {
                        event_id,
                        data: KvEventData::Removed {
                            block_hashes: vec![gone],
                        },
                    },
                );
            }
            Op::Cleared(w) => r.on_kv_event(
                WorkerId(*w),
                &KvEvent {
                    event_id,
                    data: KvEventData::Cleared,
                },
            ),
            Op::Capacity(w, used) => r.on_capacity(
                WorkerId(*w),
                KvCapacitySnapshot {
                    total_blocks: 10_000,
                    active_blocks: *used,
                    ..Default::default()
                },
            ),
            Op::AddWorker(w) => out.push(format!("{}", r.add_worker(WorkerId(*w)))),
            Op::RemoveWorker(w) => out.push(format!("{}", r.remove_worker(WorkerId(*w)))),
        }
        if let Err(e) = r.audit() {
            panic!("after {op:?}: {e}");
        }
        for (_, l) in r.loads() {
            assert!(
                l.booked_requests > 0 || (l.booked_blocks == 0 && l.booked_prefill_tokens == 0)
            );
        }
    }
    // Every live booking releases exactly once, and then the router drains.
    for id in 0..24 {
        let had = r.booking(RequestId(id)).is_some();
        let released = matches!(r.request_released(RequestId(id)), Release::Released { .. });
        assert_eq!(had, released);
        assert_eq!(r.request_released(RequestId(id)), Release::Noop);
    }
    assert!(r.is_drained());
    out.push(format!("{:?}", r.stats()));
    out
}

fn modes() -> impl Strategy<Value = RouterMode> {
    proptest::sample::select(&RouterMode::ALL[..])
}

fn roles() -> impl Strategy<Value = PoolRole> {
    prop_oneof![Just(PoolRole::Prefill), Just(PoolRole::Decode)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn bookings_balance_and_drain(
        mode in modes(),
        role in roles(),
        seed in any::<u64>(),
        weight in prop_oneof![Just(1.0f64), Just(0.0), Just(2.5), Just(f64::NAN), Just(-1.0)],
        temperature in prop_oneof![Just(0.0f64), Just(0.5), Just(f64::INFINITY)],
        request_weight in prop_oneof![Just(0.0f64), Just(1.0)],
        aggregated in any::<bool>(),
        ops in proptest::collection::vec(op(), 0..80),
    ) {
        let kv = KvKnobs {
            overlap_score_credit: weight,
            router_temperature: temperature,
            decode_active_request_weight: request_weight,
            ..KvKnobs::default()
        };
        let config = RouterConfig::new(role, mode, BS)
            .with_seed(seed)
            .with_overlap_weight(weight)
            .with_kv(kv)
            .with_aggregated(aggregated && role == PoolRole::Decode);
        let a = run(config, &ops);
        let b = run(config, &ops);
        prop_assert_eq!(a, b);
    }
}
