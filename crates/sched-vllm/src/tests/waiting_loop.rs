//! Where vLLM allocates a remote-KV request: only inside
//! `Scheduler.schedule`'s waiting loop (`vllm/v1/core/sched/scheduler.py`),
//! once per step, FCFS in the waiting queue, behind preempted requests, not
//! in a step that preempted, only while a running slot and token budget
//! remain, and only into the free blocks in-flight prefills do not need
//! (`_inflight_prefill_reserved_blocks`). Each test here fails if
//! reservations are granted outside those gates (as a reservation pumped on
//! every worker event was). A granted destination then waits in
//! `skipped_waiting`, which the loop scans first
//! (`_select_waiting_queue_for_scheduling`).

use super::*;
use handoff_core::{CommandOutcome as O, SchedulerCommand as C};

fn hid(n: u128) -> HandoffId {
    HandoffId(n)
}

#[test]
fn a_queued_reservation_holds_nothing_until_a_step_grants_it() {
    let mut h = Harness::fixed(cfg(64));
    let id = hid(1);
    let before = h.cap();
    assert_eq!(
        h.apply(C::ReserveDestination {
            id,
            request: req(1, 100, 2, &content(1, 6)),
        }),
        O::Queued
    );
    assert_eq!(h.cap().reserved_destination_blocks, 0);
    assert_eq!(h.cap().free_blocks(), before.free_blocks());
    assert_eq!(
        h.cap().waiting_requests,
        1,
        "it waits in vLLM's waiting queue"
    );
    assert!(!h.core.is_empty(), "a step must run to grant it");
    assert_eq!(h.apply(C::ActivateDestination { id }), O::Noop);
    // An idle worker's pass schedules no token: it only grants.
    assert_eq!(h.step(), 0);
    assert_eq!(h.out.duration, Duration::ZERO);
    assert_eq!(h.granted, vec![(id, Instant::ZERO)]);
    assert_eq!(h.cap().reserved_destination_blocks, 7);
    assert!(h.core.is_empty(), "waiting for its KV is not runnable");
    assert_eq!(h.apply(C::ActivateDestination { id }), O::Applied);
    h.run_idle();
    assert_eq!(h.tokens[&RequestId(1)], 2);
    assert!(h.core.is_drained());
    h.ledger.check_drained().unwrap();
}

#[test]
fn no_grant_while_running_requests_take_the_whole_token_budget() {
    let mut c = cfg(256);
    c.max_num_batched_tokens = 64;
    let mut h = Harness::fixed(c);
    // A 640-token prompt prefills in ten 64-token chunks.
    h.apply(C::Submit(req(1, 640, 3, &[])));
    h.step();
    let id = hid(2);
    assert_eq!(h.reserve(id, req(2, 32, 1, &[])), O::Unavailable(None));
    let mut chunks = 2;
    while h.out.prefill_tokens == 64 && h.tokens.is_empty() {
        assert!(h.granted.is_empty(), "granted with no budget left");
        h.step();
        chunks += 1;
    }
    assert_eq!(chunks, 10, "the budget went to the prefill each pass");
    assert!(h.granted.is_empty());
    // The first decode pass leaves 63 tokens of budget: the loop grants.
    h.step();
    assert_eq!(h.out.reserved.len(), 1);
    h.apply(C::ActivateDestination { id });
    h.run_idle();
    assert!(h.core.is_drained());
    h.ledger.check_drained().unwrap();
}

/// Two decodes in an 11-block pool (as in `generated.rs`): it fills at pass
/// 33, and request 1's block boundary at pass 41 preempts request 2, which
/// cannot come back until request 1 finishes (pass 49).
fn crowded() -> Harness<FixedPerf> {
    let mut h = Harness::fixed(cfg(11));
    h.apply(C::Submit(req(1, 40, 50, &content(1, 2))));
    h.apply(C::Submit(req(2, 48, 100, &content(2, 3))));
    while h.core.pool.free_len() > 0 {
        assert!(h.step() > 0);
        assert!(h.preempted.is_empty());
    }
    h
}

#[test]
fn a_step_that_preempts_grants_nothing_and_the_preempted_request_goes_first() {
    let mut h = crowded();
    let id = hid(3);
    // One block: it fits as soon as anything is freed.
    assert_eq!(h.reserve(id, req(3, 16, 1, &[])), O::Unavailable(None));
    while h.out.preempted.is_empty() {
        assert!(h.granted.is_empty());
        assert!(h.step() > 0);
    }
    assert_eq!(h.out.preempted, vec![RequestId(2)]);
    assert!(h.core.pool.free_len() > 0, "the preemption freed blocks");
    assert!(h.out.reserved.is_empty(), "the waiting loop is skipped");
    // Request 2 now heads the queue and does not fit (request 1 took one of
    // its blocks): every loop stops there, before the reservation behind it.
    while h.finished.is_empty() {
        h.step();
        assert!(h.core.pool.free_len() > 0);
        assert!(
            h.out.reserved.is_empty(),
            "granted ahead of a preempted request"
        );
    }
    // Request 1 is gone: request 2 is re-admitted, then the reservation is
    // granted, in the same pass.
    h.step();
    assert!(h.out.prefill_tokens > 0, "request 2 re-admitted");
    assert_eq!(h.out.reserved.len(), 1);
    h.apply(C::ActivateDestination { id });
    h.run_idle();
    assert!(h.core.is_drained());
    h.ledger.check_drained().unwrap();
}

/// vLLM's skipped queue goes first: a destination granted before a
/// preemption, whose KV arrives while the preempted request heads the
/// waiting queue and does not fit, is admitted from `skipped_waiting`
/// ahead of it. In one FCFS queue it would wait behind that request until
/// request 1 finished.
#[test]
fn an_activated_destination_goes_ahead_of_a_preempted_request() {
    // `crowded`'s two decodes in 11 blocks, plus one block for the
    // destination, granted before either request runs.
    let mut h = Harness::fixed(cfg(12));
    let id = hid(3);
    assert!(matches!(h.reserve(id, req(3, 16, 1, &[])), O::Reserved(_)));
    h.apply(C::Submit(req(1, 40, 50, &content(1, 2))));
    h.apply(C::Submit(req(2, 48, 100, &content(2, 3))));
    while h.preempted.is_empty() {
        assert!(h.step() > 0);
    }
    assert_eq!(h.preempted, vec![RequestId(2)]);
    assert_eq!(h.core.waiting.len(), 1, "request 2 heads the waiting queue");
    assert_eq!(
        h.core.skipped.len(),
        1,
        "the destination is in skipped_waiting"
    );
    h.apply(C::ActivateDestination { id });
    h.step();
    assert!(
        h.finished.iter().any(|&(r, _)| r == RequestId(3)),
        "admitted at once"
    );
    assert!(
        h.finished.iter().all(|&(r, _)| r != RequestId(1)),
        "request 1 still runs"
    );
    assert_eq!(h.cap().waiting_requests, 1, "request 2 still waits");
    h.run_idle();
    assert!(h.core.is_drained());
    h.ledger.check_drained().unwrap();
}

/// A grant must leave the blocks in-flight prefills still need: with a
/// chunked prefill holding 8 of its 10 blocks, 12 free blocks would take an
/// 11-block load if the 2 it still needs were not counted, as
/// `allocate_slots(reserved_blocks=...)` does. The mocker cuts a chunk only
/// at the token budget, so a pass never has budget left beside a partial
/// chunk (upstream does with `long_prefill_token_threshold` or a deferred
/// chunk); the loop is driven with budget to spare here.
#[test]
fn a_grant_leaves_what_in_flight_prefills_still_need() {
    let mut c = cfg(20);
    c.max_num_batched_tokens = 64;
    let mut h = Harness::fixed(c);
    h.apply(C::Submit(req(1, 160, 1, &[])));
    h.step();
    assert_eq!(h.core.pool.free_len(), 16);
    let id = hid(2);
    // Its step gives the prefill another chunk and leaves no budget.
    assert_eq!(h.reserve(id, req(2, 176, 1, &[])), O::Unavailable(None));
    assert_eq!(h.core.pool.free_len(), 12);
    let earlier = h.core.running.len();
    assert_eq!(h.core.inflight_reserved_blocks(earlier), 2);
    let mut hits = Vec::new();
    assert!(h
        .core
        .reservation_fits(h.core.waiting[0], 0, &mut hits)
        .is_some());
    assert!(h
        .core
        .reservation_fits(h.core.waiting[0], 2, &mut hits)
        .is_none());
    let mut out = StepOutput::default();
    h.core.sched.clear();
    h.core.admit_waiting(64, &mut out);
    assert!(out.reserved.is_empty(), "granted into a prefill's blocks");
    // Once the prefill has its blocks, the load fits beside it.
    h.run_idle();
    assert_eq!(h.granted.len(), 1);
    h.apply(C::ActivateDestination { id });
    h.run_idle();
    assert!(h.core.is_drained());
    h.ledger.check_drained().unwrap();
}

#[test]
fn an_activated_destination_keeps_its_place_in_the_waiting_queue() {
    let mut h = Harness::fixed(cfg(64));
    // Something runs, so a request that does not fit stops the loop.
    h.apply(C::Submit(req(1, 16, 100, &[])));
    h.step();
    let id = hid(2);
    let sum = match h.reserve(id, req(2, 64, 2, &[])) {
        O::Reserved(s) => s,
        other => panic!("{other:?}"),
    };
    assert_eq!(sum.physical_blocks, 4);
    // Arrives after the destination and cannot fit while request 1 runs.
    h.apply(C::Submit(req(3, 60 * 16, 1, &[])));
    h.step();
    assert_eq!(h.cap().waiting_requests, 2);
    // Its KV arrived: it is admitted from where it waited, ahead of
    // request 3 (at the back it would wait behind it until request 1 ends).
    h.apply(C::ActivateDestination { id });
    h.step();
    assert_eq!(h.firsts.get(&RequestId(2)), Some(&1));
    assert_eq!(h.cap().running_requests, 2);
    h.run_idle();
    assert!(h.core.is_drained());
    h.ledger.check_drained().unwrap();
}

/// Through the worker: a routed destination whose source is ready is only
/// queued in the core; the worker reports the reservation (and the reader
/// starts its transfer) when a step grants it, not when the fact arrives.
#[test]
fn the_worker_reserves_when_the_core_steps_not_when_the_fact_arrives() {
    use handoff_core::{
        DestinationState, Generation, HandoffConfig, HandoffPolicy, MsgBody, SourceReady, Worker,
        WorkerEvent, WorkerId, WorkerRequest,
    };
    let core = VllmCore::with_perf(cfg(64), fixed_perf());
    let mut w = Worker::new(
        WorkerId(1),
        Generation(0),
        HandoffPolicy::SourceFirst,
        HandoffConfig::for_backend(handoff_core::Backend::Vllm),
        core,
    );
    let id = hid(0x77);
    let request = req(1, 100, 2, &content(1, 6));
    let ready = Some(SourceReady {
        blocks: 7,
        tokens: 100,
    });
    w.handle_request(
        WorkerRequest::HandoffDestination {
            id,
            request,
            source: WorkerId(0),
            ready,
        },
        Instant::ZERO,
    )
    .unwrap();
    assert!(w.poll_transmit().is_none(), "nothing reserved yet");
    assert_eq!(w.capacity().reserved_destination_blocks, 0);
    assert!(!w.is_empty(), "the core has a reservation to try");
    let at = Instant::from_millis(3);
    assert_eq!(w.step(at, at), None, "a grant-only pass takes no time");
    let t = w.poll_transmit().expect("DestinationReserved");
    assert!(matches!(t.msg.body, MsgBody::DestinationReserved { .. }));
    assert_eq!(t.at, at);
    let mut started = false;
    while let Some(e) = w.poll_event() {
        if let WorkerEvent::StartTransfer { at: when, .. } = e {
            assert_eq!(when, at);
            started = true;
        }
        if let WorkerEvent::Transition(tr) = e {
            if tr.to == handoff_core::RoleState::Destination(DestinationState::Receiving) {
                assert_eq!(tr.at, at);
            }
        }
    }
    assert!(started);
    assert_eq!(w.capacity().reserved_destination_blocks, 7);
    assert!(w.is_empty());
    w.teardown(at);
    assert!(w.is_drained());
}
