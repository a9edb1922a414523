//! Attention data-parallel ranks (`--dp-size`): every (worker, rank) is
//! its own scheduler, routed to, accounted and reported on its own, and
//! the KV events each rank publishes carry its rank. Virtual-clock live
//! stays byte-identical to replay with ranks, and one rank per worker
//! changes nothing.

use handoff_core::{DpLayout, DpRank, KvEventData, WorkerId};
use handoff_deployment::{deployment, make_core, DeploymentConfig, EngineSpec};
use handoff_live_adapter::run_virtual_threads;
use handoff_replay::Replay;
use handoff_workload::{SyntheticConfig, SyntheticWorkload};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

fn items() -> SyntheticWorkload {
    SyntheticWorkload::new(SyntheticConfig {
        requests: 80,
        seed: 5,
        ..SyntheticConfig::default()
    })
}

fn spec() -> EngineSpec {
    EngineSpec {
        kv_tokens: 4096 * 16,
        ..EngineSpec::default()
    }
}

fn cfg(dp: u64) -> DeploymentConfig {
    let mut c = DeploymentConfig {
        dp: DpLayout::new(dp).expect("in range"),
        transcript: true,
        ..DeploymentConfig::default()
    };
    c.engines = vec![spec(); deployment(&c).len()];
    c
}

#[test]
fn two_ranks_are_two_schedulers_per_worker_each_accounted_and_reported() {
    let c = cfg(2);
    let hosts = deployment(&c);
    assert_eq!(hosts.len(), 8, "2 prefill + 2 decode workers × 2 ranks");
    let events: Rc<RefCell<BTreeMap<WorkerId, Vec<u64>>>> = Rc::default();
    let e = events.clone();
    let outcome = Replay::new(c.clone(), items(), |_, _| make_core(&spec()).unwrap())
        .expect("the cores publish at the deployment's block size")
        .with_kv_sink(Box::new(move |w, ev, _| {
            if matches!(
                ev.data,
                KvEventData::Stored { .. } | KvEventData::Removed { .. }
            ) {
                e.borrow_mut().entry(w).or_default().push(ev.event_id);
            }
        }))
        .run_all();
    let r = &outcome.report;
    assert_eq!(r.num_requests, 80);
    assert_eq!(
        r.completed_requests + r.failed_requests,
        80,
        "every request ends once"
    );
    assert_eq!(r.completed_requests, 80);
    assert_eq!(r.config.dp_size, 2);
    // One row per rank, worker ids repeated, ranks 0 and 1 of each.
    let rows: Vec<(u32, Option<u16>)> = r.workers.iter().map(|w| (w.worker, w.dp_rank)).collect();
    let want: Vec<(u32, Option<u16>)> = (0..4).flat_map(|w| [(w, Some(0)), (w, Some(1))]).collect();
    assert_eq!(rows, want);
    // Exact accounting per rank: every rank ends drained with nothing
    // used; routing spread work over both ranks of both pools.
    for w in &r.workers {
        assert!(w.drained, "{}/dp{:?} drained", w.worker, w.dp_rank);
        assert_eq!(w.final_kv_used_blocks, 0);
    }
    for pool in ["prefill", "decode"] {
        for rank in [0, 1] {
            assert!(
                r.workers
                    .iter()
                    .any(|w| w.pool == pool && w.dp_rank == Some(rank) && w.steps > 0),
                "{pool} rank {rank} ran"
            );
        }
    }
    let prefilled: u64 = r.workers.iter().map(|w| w.prefill_tokens).sum();
    assert!(prefilled > 0);
    // Each rank publishes its own event stream, numbered from 0 without
    // gaps, and both ranks of a prefill worker published.
    let events = events.borrow();
    let mut ranks = std::collections::BTreeSet::new();
    for (s, ids) in events.iter() {
        let at = c.dp.address(*s);
        ranks.insert(at.dp_rank);
        assert!(ids.windows(2).all(|p| p[0] < p[1]), "{at}: ids in order");
    }
    assert!(ranks.contains(&DpRank(0)) && ranks.contains(&DpRank(1)));
    // Every router booking, on every rank, was released exactly once.
    assert_eq!(outcome.live_bookings, 0);
}

#[test]
fn virtual_live_equals_replay_byte_for_byte_with_two_ranks() {
    let c = cfg(2);
    let specs = c.engines.clone();
    let replay = Replay::new(c.clone(), items(), |_, _| make_core(&spec()).unwrap())
        .expect("the cores publish at the deployment's block size")
        .run_all();
    let live = run_virtual_threads(&c, &specs, items()).expect("runs");
    assert_eq!(
        serde_json::to_string(&replay.report).unwrap(),
        serde_json::to_string(&live.report).unwrap()
    );
    let (a, b) = (replay.transcript.unwrap(), live.transcript.unwrap());
    assert!(a.handoffs() > 0);
    assert_eq!(a.first_divergence(&b), None);
    assert_eq!(a.render(), b.render());
}

#[test]
fn one_rank_writes_what_no_rank_wrote() {
    let mut one = cfg(1);
    one.transcript = false;
    let mut plain = DeploymentConfig {
        transcript: false,
        ..DeploymentConfig::default()
    };
    plain.engines = one.engines.clone();
    let a = Replay::new(one, items(), |_, _| make_core(&spec()).unwrap())
        .expect("the cores publish at the deployment's block size")
        .run_all();
    let b = Replay::new(plain, items(), |_, _| make_core(&spec()).unwrap())
        .expect("the cores publish at the deployment's block size")
        .run_all();
    let a = serde_json::to_string(&a.report).unwrap();
    assert_eq!(a, serde_json::to_string(&b.report).unwrap());
    assert!(!a.contains("dp_rank") && !a.contains("dp_size"));
}
