//! SGLang's `max_loras_per_batch` (module `lora`): a batch never holds more
//! distinct adapters than the limit, the base model counting as one; a
//! request over it is passed over, keeps its place and runs once the
//! running batch's adapters leave.

use super::harness::{req, Harness};
use crate::SglangConfig;
use handoff_core::{LoraAdapter, Request, RequestId, SchedulerCore};
use std::collections::BTreeSet;

fn on(mut r: Request, id: u32) -> Request {
    r.lora = Some(LoraAdapter {
        id,
        name: format!("adapter-{id}"),
    });
    r
}

fn cfg(limit: Option<u32>) -> SglangConfig {
    SglangConfig {
        total_pages: 100_000,
        max_loras_per_batch: limit,
        ..SglangConfig::with_page_size(1)
    }
}

fn started(h: &Harness, id: u64) -> bool {
    h.seen
        .get(&RequestId(id))
        .is_some_and(|s| s.first_at.is_some())
}

/// The adapters (0: base) of the running batch.
fn running_adapters(h: &Harness) -> BTreeSet<u32> {
    h.core
        .running
        .iter()
        .filter_map(|&i| h.core.seqs.get(i))
        .map(|s| s.lora)
        .collect()
}

#[test]
fn a_batch_holds_at_most_the_limit_and_the_rest_wait_in_place() {
    let reqs = || {
        vec![
            on(req(1, 64, 30, &[1]), 1),
            on(req(2, 64, 30, &[2]), 2),
            on(req(3, 64, 30, &[3]), 1),
            on(req(4, 64, 3, &[4]), 3),
        ]
    };
    let mut h = Harness::new(cfg(Some(2)));
    for r in reqs() {
        h.submit(r);
    }
    h.step();
    // Adapters 1 and 2 fill the batch; 3 is passed over, 1's second
    // request behind it still joins.
    assert_eq!(running_adapters(&h), BTreeSet::from([1, 2]));
    assert!(started(&h, 3));
    assert!(!started(&h, 4));
    assert_eq!(h.core.waiting.len(), 1);
    let mut max_seen = 0;
    for _ in 0..1000 {
        if h.core.is_empty() {
            break;
        }
        h.step();
        max_seen = max_seen.max(running_adapters(&h).len());
    }
    assert!(max_seen <= 2, "{max_seen} adapters in one batch");
    assert!(h.finished(4) && h.tokens_of(4) == 3);
    let first = |r| h.seen[&RequestId(r)].first_at;
    assert!(first(4) >= h.seen[&RequestId(1)].finished_at, "4 waited");
    h.assert_drained();
    // No limit: all four run at once.
    let mut free = Harness::new(cfg(None));
    for r in reqs() {
        free.submit(r);
    }
    free.step();
    assert_eq!(running_adapters(&free).len(), 3);
}

#[test]
fn the_base_model_counts_as_one_and_is_never_passed_over() {
    let mut h = Harness::new(cfg(Some(1)));
    h.submit(req(1, 64, 20, &[1]));
    h.submit(on(req(2, 64, 2, &[2]), 5));
    h.submit(req(3, 64, 2, &[3]));
    h.step();
    // Base and adapter 5 would be two ids: 5 waits, the base request
    // behind it runs.
    assert_eq!(running_adapters(&h), BTreeSet::from([0]));
    assert!(started(&h, 3));
    assert!(!started(&h, 2));
    h.run_idle(1000);
    assert!(h.finished(2));
    h.assert_drained();
}
