//! Session slots on the decode side and their pushes (seed 002), with every
//! invariant checked after every operation by the harness; the prefill side
//! is in `snapshots.rs`, generated sequences of both in `session_props.rs`.

use super::harness::{req, Harness};
use crate::{PushFailure, PushResult, SessionConfig, SessionEvent, SglangConfig, SlotEvictReason};
use handoff_core::{CommandOutcome, KvEventData, Request, RequestId, SchedulerCore, SessionId};

pub(super) fn sessions_cfg(pages: u64, push: bool) -> SglangConfig {
    SglangConfig {
        total_pages: pages,
        sessions: SessionConfig {
            enabled: true,
            push,
            push_delta_tokens: 1024,
            ..SessionConfig::default()
        },
        ..SglangConfig::with_page_size(1)
    }
}

/// A turn of `session`: the prompt is the whole context so far.
pub(super) fn turn(id: u64, session: u64, prompt: u32, out: u32) -> Request {
    Request {
        session: Some(SessionId(session)),
        ..req(id, prompt, out, &[session * 1000 + 1, session * 1000 + 2])
    }
}

pub(super) fn events(h: &mut Harness) -> Vec<SessionEvent> {
    let mut v = Vec::new();
    h.core.drain_session_events(&mut v);
    v
}

/// Runs until idle and returns the prefill tokens each pass computed.
pub(super) fn run(h: &mut Harness) -> Vec<u64> {
    let mut prefills = Vec::new();
    for _ in 0..100_000 {
        if h.step() == 0 {
            return prefills;
        }
        if h.out.prefill_tokens > 0 {
            prefills.push(h.out.prefill_tokens);
        }
    }
    panic!("did not go idle");
}

pub(super) fn release(h: &mut Harness, session: u64) -> CommandOutcome {
    let o = h.core.release_session(SessionId(session));
    h.check();
    o
}

#[test]
fn a_turn_keeps_its_kv_and_the_next_appends_only_new_tokens() {
    let mut h = Harness::new(sessions_cfg(100_000, false));
    h.submit(turn(1, 7, 1000, 10));
    assert_eq!(run(&mut h), vec![1000]);
    assert!(h.finished(1));
    // Prompt plus all but the last output token have KV.
    assert_eq!(h.core.session_tokens(SessionId(7)), Some(1009));
    let sc = h.core.session_capacity();
    assert_eq!((sc.slots, sc.idle_slot_pages), (1, 1009));
    // Session pages are owned (active), and hold a request slot.
    let cap = h.cap();
    assert_eq!(cap.active_blocks, 1009);
    assert_eq!(cap.cached_blocks, 0);
    assert_eq!(cap.free_request_slots + 1, cap.total_request_slots);
    // The session's KV stays out of the shared radix tree.
    assert!(!h
        .events
        .iter()
        .any(|e| matches!(e.data, KvEventData::Stored { .. })));
    assert!(h.core.is_drained(), "an idle slot is no lease");
    assert!(matches!(
        events(&mut h)[..],
        [SessionEvent::Committed { tokens: 1009, .. }]
    ));

    h.submit(turn(2, 7, 1500, 5));
    assert_eq!(run(&mut h), vec![1500 - 1009], "only the new tokens");
    assert!(h.finished(2));
    assert_eq!(h.core.session_tokens(SessionId(7)), Some(1504));
    let ev = events(&mut h);
    assert_eq!(
        ev[0],
        SessionEvent::Appended {
            session: SessionId(7),
            request: RequestId(2),
            reused_tokens: 1009
        }
    );
    assert_eq!(release(&mut h, 7), CommandOutcome::Applied);
    assert_eq!(release(&mut h, 7), CommandOutcome::Noop);
    h.assert_drained();
}

#[test]
fn sessions_off_frees_kv_as_before() {
    let mut h = Harness::new(SglangConfig {
        total_pages: 100_000,
        ..SglangConfig::with_page_size(1)
    });
    h.submit(turn(1, 7, 1000, 10));
    run(&mut h);
    assert!(!h.core.session_resident(SessionId(7)));
    assert_eq!(h.cap().kv_used_blocks(), 0);
    assert!(events(&mut h).is_empty());
}

#[test]
fn idle_sessions_are_evicted_least_recently_used_first() {
    // Room for two 1000-token sessions, not three.
    let mut h = Harness::new(sessions_cfg(2_600, false));
    h.submit(turn(1, 1, 1000, 2));
    run(&mut h);
    h.submit(turn(2, 2, 1000, 2));
    run(&mut h);
    // Session 1 appends, so session 2 is now the least recently used.
    h.submit(turn(3, 1, 1100, 2));
    run(&mut h);
    events(&mut h);
    h.submit(turn(4, 3, 1000, 2));
    run(&mut h);
    assert!(h.finished(4));
    assert!(h.core.session_resident(SessionId(1)));
    assert!(!h.core.session_resident(SessionId(2)));
    assert!(h.core.session_resident(SessionId(3)));
    let ev = events(&mut h);
    assert!(ev.contains(&SessionEvent::SlotEvicted {
        session: SessionId(2),
        turn: RequestId(2),
        tokens: 1001,
        reason: SlotEvictReason::Capacity
    }));
}

#[test]
fn idle_sessions_give_up_request_slots() {
    let mut h = Harness::new(SglangConfig {
        max_running_requests: 1,
        prealloc_slot_margin: 0,
        ..sessions_cfg(100_000, false)
    });
    h.submit(turn(1, 1, 100, 2));
    run(&mut h);
    assert_eq!(h.cap().free_request_slots, 0);
    h.submit(req(2, 100, 2, &[5]));
    run(&mut h);
    assert!(h.finished(2), "the idle session's slot was reclaimed");
    assert!(!h.core.session_resident(SessionId(1)));
}

#[test]
fn a_push_locked_slot_is_never_evicted_and_unlocks_when_sent() {
    let mut h = Harness::new(sessions_cfg(2_600, true));
    h.submit(turn(1, 1, 1200, 2));
    run(&mut h);
    let lock = match events(&mut h)[..] {
        [SessionEvent::Committed { .. }, SessionEvent::PushEnqueued {
            lock,
            tokens: 1201,
            delta: 1201,
            attempt: 1,
            ..
        }] => lock,
        ref other => panic!("{other:?}"),
    };
    assert!(!h.core.is_drained(), "a push lock is a lease");
    assert_eq!(h.core.push_tokens(SessionId(1), lock), Some(1201));
    let sc = h.core.session_capacity();
    assert_eq!((sc.idle_slot_pages, sc.locked_slot_pages), (0, 1201));
    // A new session that needs the locked pages must wait.
    h.submit(turn(2, 2, 1500, 2));
    run(&mut h);
    assert!(!h.finished(2));
    assert!(h.core.session_resident(SessionId(1)));
    assert!(!h.core.evict_session(SessionId(1)), "locked");
    assert_eq!(
        h.core.finish_push(SessionId(1), lock, PushResult::Sent),
        CommandOutcome::Applied
    );
    h.check();
    assert_eq!(
        h.core.finish_push(SessionId(1), lock, PushResult::Sent),
        CommandOutcome::Noop,
        "exactly once"
    );
    assert!(events(&mut h).contains(&SessionEvent::PushSent {
        session: SessionId(1),
        lock,
        tokens: 1201
    }));
    run(&mut h);
    assert!(h.finished(2), "the unlocked slot was evicted for it");
    assert!(!h.core.session_resident(SessionId(1)));
}

#[test]
fn pushes_wait_for_k_delta_of_growth() {
    let mut h = Harness::new(sessions_cfg(100_000, true));
    h.submit(turn(1, 1, 1500, 1));
    run(&mut h);
    let lock = match events(&mut h)[..] {
        [_, SessionEvent::PushEnqueued { lock, .. }] => lock,
        ref other => panic!("{other:?}"),
    };
    h.core.finish_push(SessionId(1), lock, PushResult::Sent);
    events(&mut h);
    // Grows by 500 < K_DELTA: no push.
    h.submit(turn(2, 1, 2000, 1));
    run(&mut h);
    assert!(!events(&mut h)
        .iter()
        .any(|e| matches!(e, SessionEvent::PushEnqueued { .. })));
    // Grows by 1100 more since the last push: pushed.
    h.submit(turn(3, 1, 2600, 1));
    run(&mut h);
    assert!(events(&mut h).iter().any(|e| matches!(
        e,
        SessionEvent::PushEnqueued {
            tokens: 2600,
            delta: 1100,
            ..
        }
    )));
}

#[test]
fn a_failed_push_is_retried_once_then_abandoned() {
    let mut h = Harness::new(sessions_cfg(100_000, true));
    h.submit(turn(1, 1, 1500, 1));
    run(&mut h);
    let lock = match events(&mut h)[..] {
        [_, SessionEvent::PushEnqueued { lock, .. }] => lock,
        ref other => panic!("{other:?}"),
    };
    let fail = PushResult::Failed(PushFailure::Transfer);
    h.core.finish_push(SessionId(1), lock, fail);
    h.check();
    assert_eq!(
        events(&mut h),
        vec![
            SessionEvent::PushFailed {
                session: SessionId(1),
                lock,
                reason: PushFailure::Transfer,
                retry: true
            },
            SessionEvent::PushEnqueued {
                session: SessionId(1),
                lock,
                tokens: 1500,
                delta: 1500,
                attempt: 2
            }
        ]
    );
    assert!(!h.core.is_drained(), "still locked for the retry");
    h.core.finish_push(SessionId(1), lock, fail);
    h.check();
    assert_eq!(
        events(&mut h),
        vec![SessionEvent::PushFailed {
            session: SessionId(1),
            lock,
            reason: PushFailure::Transfer,
            retry: false
        }]
    );
    assert!(h.core.is_drained());
    assert_eq!(h.core.session_capacity().idle_slot_pages, 1500);
}

#[test]
fn releasing_a_session_during_its_push_aborts_the_push() {
    let mut h = Harness::new(sessions_cfg(100_000, true));
    h.submit(turn(1, 1, 1500, 1));
    run(&mut h);
    let lock = match events(&mut h)[..] {
        [_, SessionEvent::PushEnqueued { lock, .. }] => lock,
        ref other => panic!("{other:?}"),
    };
    assert_eq!(release(&mut h, 1), CommandOutcome::Applied);
    let ev = events(&mut h);
    assert_eq!(
        ev[0],
        SessionEvent::PushAborted {
            session: SessionId(1),
            lock
        }
    );
    assert_eq!(
        h.core.finish_push(SessionId(1), lock, PushResult::Sent),
        CommandOutcome::Noop,
        "the aborted lock ended once"
    );
    h.assert_drained();
}

#[test]
fn releasing_a_running_session_closes_it_after_the_turn() {
    let mut h = Harness::new(sessions_cfg(100_000, false));
    h.submit(turn(1, 1, 500, 3));
    run(&mut h);
    h.submit(turn(2, 1, 800, 3));
    h.step();
    assert_eq!(release(&mut h, 1), CommandOutcome::Applied);
    assert!(h.core.session_resident(SessionId(1)), "still running");
    run(&mut h);
    assert!(h.finished(2));
    assert!(!h.core.session_resident(SessionId(1)));
    h.assert_drained();
}
