//! Session slots, the snapshot store and the prefill bypass (seed 002), with
//! every invariant checked after every operation by the harness.

use super::harness::{req, Harness};
use crate::{
    MissReason, PushFailure, PushResult, SessionConfig, SessionEvent, SglangConfig,
    SlotEvictReason, SnapshotEvictReason, SnapshotRefusal,
};
use handoff_core::{
    CommandOutcome, Duration, HandoffId, Instant, KvEventData, Request, RequestId,
    SchedulerCommand, SchedulerCore, SessionId, SourceLeaseId,
};
use proptest::prelude::*;

fn sessions_cfg(pages: u64, push: bool) -> SglangConfig {
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
fn turn(id: u64, session: u64, prompt: u32, out: u32) -> Request {
    Request {
        session: Some(SessionId(session)),
        ..req(id, prompt, out, &[session * 1000 + 1, session * 1000 + 2])
    }
}

fn events(h: &mut Harness) -> Vec<SessionEvent> {
    let mut v = Vec::new();
    h.core.drain_session_events(&mut v);
    v
}

/// Runs until idle and returns the prefill tokens each pass computed.
fn run(h: &mut Harness) -> Vec<u64> {
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

fn release(h: &mut Harness, session: u64) -> CommandOutcome {
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

// ---- the prefill side: snapshot store and bypass ----

const P_PAGES: u64 = 20_000;

fn ingest(h: &mut Harness, id: u64, session: u64, tokens: u64) {
    let r = h
        .core
        .reserve_snapshot(HandoffId(id.into()), SessionId(session), tokens)
        .expect("room");
    assert_eq!(r.pages, tokens);
    h.check();
    assert!(h.core.ingest_snapshot(HandoffId(id.into()), h.now));
    h.check();
}

fn reseed(h: &mut Harness, id: u64, session: u64, prompt: u32) -> CommandOutcome {
    h.apply(SchedulerCommand::SubmitHandoffPrefill {
        id: HandoffId(u128::from(id) + 100),
        request: turn(id, session, prompt, 1),
    })
}

#[test]
fn the_store_accounts_reservations_then_entries_in_its_own_pool() {
    let mut h = Harness::new(sessions_cfg(P_PAGES, false));
    let id = HandoffId(1);
    h.core
        .reserve_snapshot(id, SessionId(1), 5000)
        .expect("room");
    h.check();
    let cap = h.cap();
    assert_eq!(cap.reserved_destination_blocks, 5000);
    assert_eq!(h.core.session_capacity().snapshot_reserved_pages, 5000);
    assert!(!h.core.is_drained(), "a pending reservation is held");
    assert!(h.core.ingest_snapshot(id, Instant::from_millis(3)));
    assert!(!h.core.ingest_snapshot(id, Instant::from_millis(3)), "once");
    h.check();
    let cap = h.cap();
    assert_eq!(
        (cap.reserved_destination_blocks, cap.active_blocks),
        (0, 5000)
    );
    let e = h.core.snapshot_store().entry(SessionId(1)).unwrap();
    assert_eq!(
        (e.kv_committed_len, e.last_recv),
        (5000, Instant::from_millis(3))
    );
    assert!(h.core.is_drained());
    // Too large for the pool, or no room now.
    assert_eq!(
        h.core.reserve_snapshot(HandoffId(2), SessionId(2), P_PAGES),
        Err(SnapshotRefusal::TooLarge)
    );
    let mut other = Harness::new(SglangConfig {
        total_pages: P_PAGES,
        ..SglangConfig::with_page_size(1)
    });
    assert_eq!(
        other.core.reserve_snapshot(HandoffId(2), SessionId(2), 10),
        Err(SnapshotRefusal::Disabled)
    );
    other.check();
    // A cancelled reservation frees its pages.
    h.core
        .reserve_snapshot(HandoffId(3), SessionId(3), 100)
        .unwrap();
    assert!(h.core.cancel_snapshot(HandoffId(3)));
    assert!(!h.core.cancel_snapshot(HandoffId(3)));
    h.check();
    assert_eq!(h.cap().reserved_destination_blocks, 0);
    assert_eq!(release(&mut h, 1), CommandOutcome::Applied);
    h.assert_drained();
}

#[test]
fn the_store_keeps_max_sessions_lru_and_the_last_write_wins() {
    let mut h = Harness::new(sessions_cfg(P_PAGES, false));
    for s in 1..=4 {
        ingest(&mut h, s, s, 1000);
    }
    events(&mut h);
    // A fifth session evicts the least recently used (session 1).
    ingest(&mut h, 5, 5, 1000);
    assert_eq!(h.core.snapshot_store().len(), 4);
    assert!(h.core.snapshot_store().entry(SessionId(1)).is_none());
    assert!(events(&mut h).contains(&SessionEvent::SnapshotEvicted {
        session: SessionId(1),
        tokens: 1000,
        reason: SnapshotEvictReason::Lru
    }));
    // Two pushes for session 2 in flight: both reserve, the last to land
    // wins, and the overlap is reported.
    let (a, b) = (HandoffId(20), HandoffId(21));
    h.core.reserve_snapshot(a, SessionId(2), 1500).unwrap();
    let second = h.core.reserve_snapshot(b, SessionId(2), 1200).unwrap();
    assert!(second.double_push);
    h.core.ingest_snapshot(b, Instant::from_millis(1));
    h.core.ingest_snapshot(a, Instant::from_millis(2));
    h.check();
    let e = h.core.snapshot_store().entry(SessionId(2)).unwrap();
    assert_eq!(e.kv_committed_len, 1500);
    let ev = events(&mut h);
    assert!(matches!(
        ev[..],
        [
            SessionEvent::SnapshotIngested {
                tokens: 1200,
                replaced: Some(1000),
                double_push: true,
                ..
            },
            SessionEvent::SnapshotIngested {
                tokens: 1500,
                replaced: Some(1200),
                double_push: false,
                ..
            }
        ]
    ));
    assert_eq!(h.cap().active_blocks, 3 * 1000 + 1500);
}

#[test]
fn a_covering_snapshot_bypasses_the_prefill_and_returns_after_the_read() {
    let mut h = Harness::new(sessions_cfg(P_PAGES, false));
    ingest(&mut h, 1, 9, 5000);
    events(&mut h);
    h.now = Instant::from_millis(500);
    assert_eq!(reseed(&mut h, 1, 9, 5000), CommandOutcome::Submitted);
    assert_eq!(h.step(), 1);
    assert_eq!(h.out.prefill_tokens, 0, "no compute");
    assert_eq!(h.out.duration, Duration::ZERO);
    assert_eq!(h.out.pinned.len(), 1);
    assert_eq!(h.out.pinned[0].tokens, 5000);
    assert_eq!(h.cap().pinned_source_blocks, 5000);
    assert!(h.core.snapshot_store().is_empty(), "lent while read");
    let ev = events(&mut h);
    assert_eq!(
        ev,
        vec![SessionEvent::BypassHit {
            session: SessionId(9),
            request: RequestId(1),
            tokens: 5000,
            tail: 0,
            age: Duration::from_millis(500)
        }]
    );
    let id = h.out.pinned[0].id;
    h.apply(SchedulerCommand::ReleaseSource { id });
    let e = h.core.snapshot_store().entry(SessionId(9)).unwrap();
    assert_eq!(e.kv_committed_len, 5000);
    assert_eq!(h.cap().pinned_source_blocks, 0);
    release(&mut h, 9);
    h.assert_drained();
}

#[test]
fn a_snapshot_within_the_tail_tolerance_computes_only_the_tail() {
    let mut h = Harness::new(sessions_cfg(P_PAGES, false));
    ingest(&mut h, 1, 9, 4000);
    reseed(&mut h, 1, 9, 5000);
    assert_eq!(run(&mut h), vec![1000]);
    assert!(events(&mut h).iter().any(|e| matches!(
        e,
        SessionEvent::BypassHit {
            tokens: 4000,
            tail: 1000,
            ..
        }
    )));
    // Cancelled (a failed P->D' transfer): the KV still goes back.
    let id = h.pinned[0].id;
    h.apply(SchedulerCommand::CancelSource { id });
    assert_eq!(
        h.core
            .snapshot_store()
            .entry(SessionId(9))
            .map(|e| e.kv_committed_len),
        Some(5000)
    );
}

#[test]
fn a_longer_snapshot_is_a_hit_on_the_prompt() {
    let mut h = Harness::new(sessions_cfg(P_PAGES, false));
    ingest(&mut h, 1, 9, 6000);
    reseed(&mut h, 1, 9, 5000);
    h.step();
    assert_eq!(h.out.pinned[0].tokens, 5000);
    assert_eq!(h.cap().pinned_source_blocks, 5000);
    assert_eq!(h.cap().active_blocks, 0, "pages past the prompt freed");
}

#[test]
fn every_miss_falls_back_to_re_prefill_with_its_reason() {
    let cases: [(Option<u64>, bool, Option<Duration>, MissReason); 4] = [
        (None, true, None, MissReason::NoEntry),
        (Some(500), true, None, MissReason::SeqlenShort),
        (Some(5000), false, None, MissReason::Disabled),
        (
            Some(5000),
            true,
            Some(Duration::from_millis(100)),
            MissReason::Stale,
        ),
    ];
    for (snapshot, bypass, max_age, reason) in cases {
        let mut cfg = sessions_cfg(P_PAGES, false);
        cfg.sessions.bypass = bypass;
        cfg.sessions.snapshot_max_age = max_age;
        let mut h = Harness::new(cfg);
        if let Some(t) = snapshot {
            ingest(&mut h, 1, 9, t);
        }
        h.now = Instant::from_millis(1000);
        events(&mut h);
        reseed(&mut h, 1, 9, 5000);
        assert_eq!(run(&mut h), vec![5000], "{reason:?}: full re-prefill");
        let ev = events(&mut h);
        assert!(
            ev.contains(&SessionEvent::BypassMiss {
                session: SessionId(9),
                request: RequestId(1),
                reason
            }),
            "{reason:?}: {ev:?}"
        );
        assert_eq!(h.pinned.len(), 1);
    }
}

#[test]
fn prefill_admission_evicts_snapshots_for_room() {
    // A pool that holds one 12K snapshot beside a 5K prefill, not two.
    let mut h = Harness::new(sessions_cfg(16_000, false));
    ingest(&mut h, 1, 1, 12_000);
    reseed(&mut h, 1, 2, 5000);
    run(&mut h);
    assert_eq!(h.pinned.len(), 1, "the reseed of another session ran");
    assert!(h.core.snapshot_store().is_empty());
    assert!(events(&mut h).contains(&SessionEvent::SnapshotEvicted {
        session: SessionId(1),
        tokens: 12_000,
        reason: SnapshotEvictReason::Lru
    }));
}

#[test]
fn bypass_ttft_is_the_transfer_only_and_cold_pays_the_prefill() {
    // Seed timings: 45 us per prefill token; 50K tokens take 2.25 s.
    let seed_perf = handoff_perf::FixedPerf {
        prefill_base: Duration::ZERO,
        per_prefill_token: Duration::from_micros(45),
        decode: Duration::from_millis(20),
    };
    let pin_time = |snapshot: bool| {
        let cfg = sessions_cfg(200_000, false);
        let mut core = crate::SglangCore::new(cfg, seed_perf).unwrap();
        if snapshot {
            core.reserve_snapshot(HandoffId(1), SessionId(1), 50_000)
                .unwrap();
            core.ingest_snapshot(HandoffId(1), Instant::ZERO);
        }
        core.apply(
            SchedulerCommand::SubmitHandoffPrefill {
                id: HandoffId(2),
                request: turn(1, 1, 50_000, 1),
            },
            Instant::ZERO,
        );
        let mut out = handoff_core::StepOutput::default();
        let mut now = Instant::ZERO;
        loop {
            core.step(now, now, &mut out);
            now = now + out.duration;
            if !out.pinned.is_empty() {
                return now;
            }
            assert!(out.steps > 0);
        }
    };
    let (hit, cold) = (pin_time(true), pin_time(false));
    assert_eq!(hit, Instant::ZERO);
    assert!(cold.saturating_since(hit) >= Duration::from_secs(2));
}

// ---- generated operation sequences ----

#[derive(Clone, Debug)]
enum Op {
    Turn { session: u64, grow: u32, out: u32 },
    Step,
    Release(u64),
    Evict(u64),
    Push { session: u64, ok: bool },
    Ingest { session: u64, tokens: u64 },
    Reseed { session: u64, prompt: u32 },
    ReleaseHeld,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..4u64, 1..1500u32, 1..20u32).prop_map(|(session, grow, out)| Op::Turn {
            session,
            grow,
            out
        }),
        Just(Op::Step),
        Just(Op::Step),
        Just(Op::Step),
        (0..4u64).prop_map(Op::Release),
        (0..4u64).prop_map(Op::Evict),
        (0..4u64, any::<bool>()).prop_map(|(session, ok)| Op::Push { session, ok }),
        (0..4u64, 1..4000u64).prop_map(|(session, tokens)| Op::Ingest { session, tokens }),
        (0..4u64, 1..4000u32).prop_map(|(session, prompt)| Op::Reseed { session, prompt }),
        Just(Op::ReleaseHeld),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Any interleaving of turns, steps, closes, evictions, push outcomes,
    /// snapshot ingests and reseeds keeps every invariant, and ends with
    /// every lock, reservation and lease ended once and nothing owned.
    #[test]
    fn session_operations_keep_every_invariant(ops in prop::collection::vec(op(), 1..60), pages in 3_000u64..20_000) {
        let mut h = Harness::new(SglangConfig {
            max_running_requests: 4,
            prealloc_slot_margin: 2,
            ..sessions_cfg(pages, true)
        });
        let mut next = 1u64;
        let mut context = [0u32; 4];
        let mut locks: Vec<(SessionId, SourceLeaseId)> = Vec::new();
        for op in ops {
            let mut ev = Vec::new();
            h.core.drain_session_events(&mut ev);
            for e in ev {
                if let SessionEvent::PushEnqueued { session, lock, .. } = e {
                    locks.push((session, lock));
                }
            }
            match op {
                Op::Turn { session, grow, out } => {
                    let c = &mut context[session as usize];
                    *c = (*c + grow).min(2_000);
                    let r = turn(next, session, *c, out);
                    next += 1;
                    let o = h.apply(SchedulerCommand::Submit(r));
                    prop_assert!(matches!(o, CommandOutcome::Submitted | CommandOutcome::Unsupported(_)));
                    *c += out;
                }
                Op::Step => { h.step(); }
                Op::Release(s) => { release(&mut h, s); }
                Op::Evict(s) => { h.core.evict_session(SessionId(s)); h.check(); }
                Op::Push { session, ok } => {
                    if let Some(i) = locks.iter().position(|l| l.0 == SessionId(session)) {
                        let (s, lock) = locks.remove(i);
                        let result = if ok { PushResult::Sent } else { PushResult::Failed(PushFailure::Transfer) };
                        h.core.finish_push(s, lock, result);
                        h.check();
                    }
                }
                Op::Ingest { session, tokens } => {
                    let id = HandoffId(u128::from(next) << 8);
                    next += 1;
                    if h.core.reserve_snapshot(id, SessionId(session), tokens).is_ok() {
                        h.check();
                        h.core.ingest_snapshot(id, h.now);
                    }
                    h.check();
                }
                Op::Reseed { session, prompt } => {
                    reseed(&mut h, next, session, prompt);
                    next += 1;
                }
                Op::ReleaseHeld => {
                    if let Some(p) = h.pinned.pop() {
                        h.apply(SchedulerCommand::ReleaseSource { id: p.id });
                    }
                }
            }
        }
        // Wind down: finish every push, run, release every source, until
        // nothing moves; then close every session and do it again (turns
        // still queued behind a push each need the one before to end, so a
        // fixed number of rounds is not enough).
        for _ in 0..2 {
            for _ in 0..10_000 {
                let mut ev = Vec::new();
                h.core.drain_session_events(&mut ev);
                for e in ev {
                    if let SessionEvent::PushEnqueued { session, lock, .. } = e {
                        locks.push((session, lock));
                    }
                }
                let moved = !locks.is_empty();
                for (s, lock) in locks.drain(..) {
                    h.core.finish_push(s, lock, PushResult::Sent);
                    h.check();
                }
                let passes = h.passes;
                run(&mut h);
                let ran = h.passes > passes || !h.pinned.is_empty();
                while let Some(p) = h.pinned.pop() {
                    h.apply(SchedulerCommand::ReleaseSource { id: p.id });
                }
                if !moved && !ran {
                    break;
                }
            }
            for s in 0..4 {
                release(&mut h, s);
            }
        }
        let mut ev = Vec::new();
        h.core.drain_session_events(&mut ev);
        prop_assert!(h.core.session_capacity() == Default::default(), "{:?}", h.core.session_capacity());
        h.assert_drained();
    }
}

#[test]
fn a_worker_reports_session_events_and_closes_sessions() {
    use handoff_core::{
        Generation, HandoffConfig, HandoffPolicy, WorkerEvent, WorkerId, WorkerRequest,
    };
    let core =
        crate::SglangCore::new(sessions_cfg(100_000, false), super::harness::fixed_perf()).unwrap();
    let mut w = handoff_core::Worker::new(
        WorkerId(1),
        Generation(0),
        HandoffPolicy::DestinationFirst,
        HandoffConfig::default(),
        core,
    );
    w.handle_request(WorkerRequest::Ordinary(turn(1, 3, 700, 2)), Instant::ZERO)
        .unwrap();
    let mut now = Instant::ZERO;
    let mut seen = Vec::new();
    while let Some(end) = w.step(now, now) {
        now = end;
        while let Some(e) = w.poll_event() {
            if let WorkerEvent::Session { event, at } = e {
                seen.push((event, at));
            }
        }
    }
    assert_eq!(
        seen,
        vec![(
            SessionEvent::Committed {
                session: SessionId(3),
                request: RequestId(1),
                tokens: 701
            },
            now
        )]
    );
    w.handle_request(WorkerRequest::CloseSession(SessionId(3)), now)
        .unwrap();
    let closed: Vec<_> = std::iter::from_fn(|| w.poll_event()).collect();
    assert!(closed.contains(&WorkerEvent::Session {
        event: SessionEvent::SlotEvicted {
            session: SessionId(3),
            tokens: 701,
            reason: SlotEvictReason::Closed
        },
        at: now
    }));
    assert_eq!(w.capacity().kv_used_blocks(), 0);
}

/// Drives a D→P push between two real workers by hand: facts cross
/// directly, transfers complete at once with `ok`. Returns every session
/// event each side reported.
fn push_once(oks: &[bool]) -> (Vec<SessionEvent>, Vec<SessionEvent>) {
    use handoff_core::{
        Generation, HandoffConfig, HandoffPolicy, Worker, WorkerEvent, WorkerId, WorkerRequest,
    };
    let (dw, pw) = (WorkerId(1), WorkerId(0));
    let mk = |id| {
        let core =
            crate::SglangCore::new(sessions_cfg(100_000, true), super::harness::fixed_perf())
                .unwrap();
        Worker::new(
            id,
            Generation(0),
            HandoffPolicy::DestinationFirst,
            HandoffConfig::default(),
            core,
        )
    };
    let (mut d, mut p) = (mk(dw), mk(pw));
    let now = Instant::ZERO;
    d.handle_request(WorkerRequest::Ordinary(turn(1, 3, 2000, 1)), now)
        .unwrap();
    while d.step(now, now).is_some() {}
    let (mut d_events, mut p_events) = (Vec::new(), Vec::new());
    let mut oks = oks.iter().copied();
    let mut attempt = 0u128;
    for _ in 0..50 {
        let mut enqueued = None;
        while let Some(e) = d.poll_event() {
            match e {
                WorkerEvent::Session { event, .. } => {
                    if let SessionEvent::PushEnqueued { lock, tokens, .. } = event {
                        enqueued = Some((lock, tokens));
                    }
                    d_events.push(event);
                }
                WorkerEvent::StartTransfer { id, .. } => {
                    d.handle_transfer_done(id, oks.next().unwrap_or(true), now)
                }
                _ => {}
            }
        }
        while let Some(e) = p.poll_event() {
            if let WorkerEvent::Session { event, .. } = e {
                p_events.push(event);
            }
        }
        if let Some((lock, tokens)) = enqueued {
            attempt += 1;
            let (id, request) = (HandoffId(attempt), RequestId(1 << 63 | attempt as u64));
            let session = SessionId(3);
            d.handle_request(
                WorkerRequest::PushSource {
                    id,
                    request,
                    session,
                    lock,
                    tokens,
                },
                now,
            )
            .unwrap();
            p.handle_request(
                WorkerRequest::PushDestination {
                    id,
                    request,
                    session,
                    tokens,
                    source: dw,
                },
                now,
            )
            .unwrap();
        }
        let mut moved = false;
        while let Some(t) = d.poll_transmit() {
            p.handle_message(dw, t.msg, now);
            moved = true;
        }
        while let Some(t) = p.poll_transmit() {
            d.handle_message(pw, t.msg, now);
            moved = true;
        }
        if !moved && enqueued.is_none() && d.is_drained() && p.is_drained() {
            break;
        }
    }
    assert!(d.is_drained() && p.is_drained(), "every push role ended");
    (d_events, p_events)
}

#[test]
fn a_push_through_two_workers_lands_in_the_prefill_store() {
    let (d, p) = push_once(&[true]);
    assert!(
        d.iter()
            .any(|e| matches!(e, SessionEvent::PushSent { tokens: 2000, .. })),
        "{d:?}"
    );
    assert!(
        p.iter().any(|e| matches!(
            e,
            SessionEvent::SnapshotIngested {
                tokens: 2000,
                double_push: false,
                ..
            }
        )),
        "{p:?}"
    );
}

#[test]
fn a_failed_push_transfer_is_retried_once_through_a_new_attempt() {
    let (d, p) = push_once(&[false, true]);
    let failed: Vec<_> = d
        .iter()
        .filter_map(|e| match e {
            SessionEvent::PushFailed { reason, retry, .. } => Some((*reason, *retry)),
            _ => None,
        })
        .collect();
    assert_eq!(failed, vec![(PushFailure::Transfer, true)]);
    assert!(d.iter().any(|e| matches!(e, SessionEvent::PushSent { .. })));
    assert_eq!(
        p.iter()
            .filter(|e| matches!(e, SessionEvent::SnapshotIngested { .. }))
            .count(),
        1
    );
    // Twice failed: abandoned, nothing ingested.
    let (d, p) = push_once(&[false, false]);
    assert!(d
        .iter()
        .any(|e| matches!(e, SessionEvent::PushFailed { retry: false, .. })));
    assert!(!p
        .iter()
        .any(|e| matches!(e, SessionEvent::SnapshotIngested { .. })));
}
