//! `Replay::with_kv_sink` (`replay --kv-events-out`): the sink sees every
//! KV event of every worker exactly once, each worker's in id order (an
//! input handled inside a step releases its events before the step's; the
//! sink's reorder buffer puts them back), and watching changes nothing.

use handoff_core::{KvEventData, WorkerId};
use handoff_deployment::{make_core, DeploymentConfig, EngineSpec};
use handoff_replay::Replay;
use handoff_tests::parity::conversation_slice;
use handoff_workload::{SyntheticConfig, SyntheticWorkload};
use std::cell::RefCell;
use std::rc::Rc;

fn items() -> SyntheticWorkload {
    SyntheticWorkload::new(SyntheticConfig {
        requests: 120,
        seed: 3,
        ..SyntheticConfig::default()
    })
}

#[test]
fn sink_sees_every_event_once_and_changes_nothing() {
    let spec = EngineSpec {
        kv_tokens: 2048 * 16,
        ..EngineSpec::default()
    };
    let cfg = DeploymentConfig::default();
    let (plain, _) = Replay::new(cfg.clone(), items(), |_, _| make_core(&spec).unwrap())
        .expect("the cores publish at the deployment's block size")
        .run();
    let seen: Rc<RefCell<Vec<(WorkerId, u64, bool)>>> = Rc::default();
    let s = seen.clone();
    let (watched, _) = Replay::new(cfg, items(), |_, _| make_core(&spec).unwrap())
        .expect("the cores publish at the deployment's block size")
        .with_kv_sink(Box::new(move |w, ev, _| {
            let stored = matches!(ev.data, KvEventData::Stored { .. });
            s.borrow_mut().push((w, ev.event_id, stored));
        }))
        .run();
    assert_eq!(
        serde_json::to_string(&plain).unwrap(),
        serde_json::to_string(&watched).unwrap()
    );
    let seen = seen.borrow();
    for w in 0..4 {
        let ids: Vec<u64> = seen
            .iter()
            .filter(|e| e.0 == WorkerId(w))
            .map(|e| e.1)
            .collect();
        assert!(!ids.is_empty(), "worker {w} reported no KV event");
        let expect: Vec<u64> = (0..ids.len() as u64).collect();
        assert_eq!(ids, expect, "worker {w}: every id once, in order");
    }
    assert!(seen.iter().any(|e| e.2));
}

/// On a realistic trace, disaggregated decode workers release inputs'
/// events inside steps (the case that reordered them): every worker's
/// stream still reaches the sink in id order with no gap, on both
/// backends, as Dynamo's subscriber requires.
#[test]
fn disaggregated_streams_are_in_id_order_without_gaps() {
    for backend in [handoff_core::Backend::Vllm, handoff_core::Backend::Sglang] {
        let block_size = if backend == handoff_core::Backend::Sglang {
            1
        } else {
            16
        };
        let spec = EngineSpec {
            backend,
            block_size,
            ..EngineSpec::default()
        };
        let cfg = DeploymentConfig {
            backend,
            policy: backend.native_policy(),
            block_size: spec.event_block_tokens(),
            handoff: handoff_core::HandoffConfig::for_backend(backend),
            // The command line's default: transfers take time by size, so
            // activations land inside decode steps.
            transfer: handoff_engine::TransferModel::Bytes {
                base: handoff_core::Duration::from_millis(10),
                bytes_per_token: 131_072,
                bandwidth: 25e9,
            },
            ..DeploymentConfig::default()
        };
        let seen: Rc<RefCell<Vec<(WorkerId, u64)>>> = Rc::default();
        let s = seen.clone();
        let _ = Replay::new(cfg, conversation_slice(600).into_iter(), |_, _| {
            make_core(&spec).unwrap()
        })
        .expect("the cores publish at the deployment's block size")
        .with_kv_sink(Box::new(move |w, ev, _| {
            s.borrow_mut().push((w, ev.event_id))
        }))
        .run();
        let seen = seen.borrow();
        for w in 0..4 {
            let ids: Vec<u64> = seen
                .iter()
                .filter(|e| e.0 == WorkerId(w))
                .map(|e| e.1)
                .collect();
            // SGLang's decode chunk cache publishes nothing.
            let publishes = w < 2 || backend == handoff_core::Backend::Vllm;
            assert_eq!(!ids.is_empty(), publishes, "{backend:?} worker {w}");
            let expect: Vec<u64> = (0..ids.len() as u64).collect();
            assert!(
                ids == expect,
                "{backend:?} worker {w}: out of order or with a gap"
            );
        }
    }
}
