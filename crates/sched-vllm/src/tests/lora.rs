//! LoRA in the waiting loop and the prefix cache: at most `max_loras`
//! adapters per pass (vLLM `vllm/v1/core/sched/scheduler.py`,
//! `Scheduler.schedule`, `scheduled_loras`), a request on a new adapter
//! passed over, not blocking the queue, into `skipped_waiting`, which the
//! next pass scans first, and an adapter's blocks hashed apart (`vllm/v1/core/kv_cache_utils.py`, `_gen_lora_extra_hash_keys`).

use super::*;
use handoff_core::{LoraAdapter, SchedulerCommand as C};

fn on(mut r: Request, id: u32) -> Request {
    r.lora = Some(LoraAdapter {
        id,
        name: format!("adapter-{id}"),
    });
    r
}

/// Requests admitted by the first pass, in batch order.
fn first_pass(cfg: VllmConfig, reqs: Vec<Request>) -> Vec<RequestId> {
    let mut h = Harness::fixed(cfg);
    for r in reqs {
        h.apply(C::Submit(r));
    }
    h.step();
    let mut got: Vec<RequestId> = h.firsts.keys().copied().collect();
    got.sort();
    h.run_idle();
    assert!(h.core.is_drained());
    h.ledger.check_drained().unwrap();
    got
}

#[test]
fn a_new_adapter_is_passed_over_when_the_pass_is_full_of_others() {
    let mut c = cfg(256);
    c.max_loras = Some(1);
    let reqs = vec![
        on(req(1, 16, 2, &[]), 1),
        on(req(2, 16, 2, &[]), 2),
        on(req(3, 16, 2, &[]), 1),
        req(4, 16, 2, &[]),
    ];
    // Adapter 2 would be a second adapter: skipped; the same adapter and
    // the base model behind it still run.
    assert_eq!(
        first_pass(c, reqs.clone()),
        vec![RequestId(1), RequestId(3), RequestId(4)]
    );
    let mut c2 = c;
    c2.max_loras = Some(2);
    assert_eq!(first_pass(c2, reqs.clone()).len(), 4);
    c2.max_loras = None;
    assert_eq!(first_pass(c2, reqs).len(), 4, "no limit without LoRA");
}

#[test]
fn running_adapters_count_against_the_limit() {
    let mut c = cfg(256);
    c.max_loras = Some(1);
    let mut h = Harness::fixed(c);
    h.apply(C::Submit(on(req(1, 16, 50, &[]), 1)));
    h.step();
    h.apply(C::Submit(on(req(2, 16, 2, &[]), 2)));
    h.apply(C::Submit(on(req(3, 16, 2, &[]), 1)));
    h.step();
    assert!(h.firsts.contains_key(&RequestId(3)));
    assert!(
        !h.firsts.contains_key(&RequestId(2)),
        "adapter 1 runs: adapter 2 waits"
    );
    // Once adapter 1's requests finish, adapter 2 runs.
    h.run_idle();
    assert!(h.firsts.contains_key(&RequestId(2)));
    let first = |r| {
        h.first_at
            .iter()
            .find(|(x, _)| *x == RequestId(r))
            .map(|x| x.1)
    };
    let finished_1 = h
        .finished
        .iter()
        .find(|(r, _)| *r == RequestId(1))
        .map(|x| x.1);
    assert!(first(2) >= finished_1);
    assert!(h.core.is_drained());
    h.ledger.check_drained().unwrap();
}

#[test]
fn the_same_prompt_on_two_adapters_shares_no_block() {
    let prompt = content(7, 4);
    let base = req(1, 64, 1, &prompt);
    let a = on(req(2, 64, 1, &prompt), 1);
    let b = on(req(3, 64, 1, &prompt), 2);
    let same_name = on(req(4, 64, 1, &prompt), 1);
    let (hb, ha, hbb, hs) = (
        hashes_of(&base),
        hashes_of(&a),
        hashes_of(&b),
        hashes_of(&same_name),
    );
    assert!(ha.iter().all(|h| !hb.contains(h) && !hbb.contains(h)));
    assert!(hbb.iter().all(|h| !hb.contains(h)));
    assert_eq!(ha, hs, "blocks key on the adapter's name");
    // In the core: a base request's cached prompt is no hit for the adapter.
    let mut h = Harness::fixed(cfg(256));
    h.apply(C::Submit(base));
    h.run_idle();
    h.apply(C::Submit(a));
    h.run_idle();
    h.apply(C::Submit(same_name));
    h.run_idle();
    let stored = stored_hashes(&h.take_events());
    assert_eq!(&stored[..4], &hb[..]);
    assert_eq!(
        &stored[4..8],
        &ha[..],
        "the adapter's prompt is stored anew"
    );
    assert!(
        !stored[8..].iter().any(|h| ha.contains(h)),
        "a second request on the adapter hits its blocks"
    );
}

/// vLLM moves a request passed over for `max_loras` from `waiting` into
/// `skipped_waiting` (`step_skipped_waiting`, put back ahead of the older
/// skipped entries in scan order: `vllm/v1/core/sched/scheduler.py`,
/// `Scheduler.schedule`; `request_queue.py`, `prepend_requests`), so the
/// next pass tries it before anything in `waiting`.
#[test]
fn a_request_passed_over_for_max_loras_moves_to_skipped_waiting_in_scan_order() {
    let mut c = cfg(256);
    c.max_loras = Some(1);
    let mut h = Harness::fixed(c);
    h.apply(C::Submit(on(req(1, 16, 20, &[]), 1)));
    h.apply(C::Submit(on(req(2, 16, 2, &[]), 2)));
    h.apply(C::Submit(req(3, 16, 2, &[])));
    h.apply(C::Submit(on(req(4, 16, 2, &[]), 3)));
    h.step();
    assert_eq!(skipped_ids(&h), vec![RequestId(2), RequestId(4)]);
    assert!(h.core.waiting.is_empty(), "{:?}", h.core.waiting);
    assert_eq!(h.cap().waiting_requests, 2, "still counted as waiting");
    // A request arriving now queues in `waiting`, behind the skipped ones.
    h.apply(C::Submit(on(req(5, 16, 2, &[]), 1)));
    h.step();
    assert!(
        h.firsts.contains_key(&RequestId(5)),
        "adapter 1 runs: it may join"
    );
    assert_eq!(skipped_ids(&h), vec![RequestId(2), RequestId(4)]);
    h.run_idle();
    let first = |r| {
        h.first_at
            .iter()
            .find(|(x, _)| *x == RequestId(r))
            .map(|x| x.1)
    };
    assert!(first(2) < first(4), "scan order kept");
    assert!(h.core.is_drained());
    h.ledger.check_drained().unwrap();
}

/// A destination passed over for `max_loras` before its grant (upstream
/// checks the adapter before `load_kv_async`) waits ungranted in
/// `skipped_waiting`, is reported not granted, and is granted there once
/// its adapter fits.
#[test]
fn a_destination_passed_over_for_max_loras_is_granted_from_skipped_waiting() {
    let mut c = cfg(256);
    c.max_loras = Some(1);
    let mut h = Harness::fixed(c);
    h.apply(C::Submit(on(req(1, 16, 6, &[]), 1)));
    h.step();
    let id = HandoffId(9);
    assert_eq!(
        h.reserve(id, on(req(2, 32, 2, &[]), 2)),
        CommandOutcome::Unavailable(None),
        "adapter 1 runs: not granted this pass"
    );
    assert_eq!(h.core.skipped.len(), 1);
    assert!(h.core.waiting.is_empty());
    h.run_idle();
    assert_eq!(h.granted.len(), 1, "granted once adapter 1 finished");
    assert_eq!(h.granted[0].0, id);
    assert_eq!(
        h.apply(C::ActivateDestination { id }),
        CommandOutcome::Applied
    );
    h.run_idle();
    assert_eq!(h.tokens[&RequestId(2)], 2);
    assert!(h.core.is_drained());
    h.ledger.check_drained().unwrap();
}

fn skipped_ids(h: &Harness<FixedPerf>) -> Vec<RequestId> {
    h.core
        .skipped
        .iter()
        .map(|&s| h.core.seqs.get(s).id)
        .collect()
}
