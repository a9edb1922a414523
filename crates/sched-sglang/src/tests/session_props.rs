//! Generated operation sequences over session slots, pushes, the snapshot
//! store and the bypass, with every invariant checked after every operation.

use super::harness::Harness;
use super::sessions::{release, run, sessions_cfg, turn};
use super::snapshots::reseed;
use crate::{PushFailure, PushResult, SessionEvent, SglangConfig, SlotEvictReason};
use handoff_core::{
    CommandOutcome, HandoffId, Instant, RequestId, SchedulerCommand, SessionId, SourceLeaseId,
};
use proptest::prelude::*;

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
            turn: RequestId(1),
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
                WorkerEvent::StartTransfer { id, .. } => d.handle_transfer_done(
                    id,
                    if oks.next().unwrap_or(true) {
                        handoff_core::TransferResult::Completed
                    } else {
                        handoff_core::TransferResult::Failed
                    },
                    now,
                ),
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

/// The decode worker of a push ([`push_started`]).
const PUSH_D: handoff_core::WorkerId = handoff_core::WorkerId(1);
/// The prefill worker of a push ([`push_started`]).
const PUSH_P: handoff_core::WorkerId = handoff_core::WorkerId(0);

/// Two workers of one SGLang deployment with a session store, [`PUSH_D`]
/// having committed session 3's first turn and started pushing its
/// snapshot to [`PUSH_P`] (attempt 1), which has not heard of it yet.
struct PushStarted {
    d: handoff_core::Worker<crate::SglangCore<handoff_perf::FixedPerf>>,
    p: handoff_core::Worker<crate::SglangCore<handoff_perf::FixedPerf>>,
    id: HandoffId,
    request: RequestId,
    session: SessionId,
    tokens: u64,
}

fn push_started() -> PushStarted {
    use handoff_core::{
        Generation, HandoffConfig, HandoffPolicy, Worker, WorkerEvent, WorkerRequest,
    };
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
    let (mut d, p) = (mk(PUSH_D), mk(PUSH_P));
    let now = Instant::ZERO;
    let session = SessionId(3);
    d.handle_request(WorkerRequest::Ordinary(turn(1, 3, 2000, 1)), now)
        .unwrap();
    while d.step(now, now).is_some() {}
    let enqueued = std::iter::from_fn(|| d.poll_event()).find_map(|e| match e {
        WorkerEvent::Session {
            event: SessionEvent::PushEnqueued { lock, tokens, .. },
            ..
        } => Some((lock, tokens)),
        _ => None,
    });
    let (lock, tokens) = enqueued.expect("the committed turn offers a push");
    let (id, request) = (HandoffId(1), RequestId(1 << 63 | 1));
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
    PushStarted {
        d,
        p,
        id,
        request,
        session,
        tokens,
    }
}

/// A session closed while its push's `DestinationReserved` is still on the
/// way: the decode worker ends the push source before it learns its peer,
/// so no `Abort` can reach the prefill worker, and the fact then meets only
/// a tombstone. The prefill worker, which gets the close too, must end the
/// destination itself; a reservation left behind pins its pages for good
/// (`experiment e4 --timings seed --prefill-kv-tokens 92000` stalled 43
/// reseeds behind one such 50K-token reservation).
#[test]
fn closing_a_session_ends_its_push_destination_whose_source_never_heard_of_it() {
    use handoff_core::WorkerRequest;
    let PushStarted {
        mut d,
        mut p,
        id,
        request,
        session,
        tokens,
    } = push_started();
    let (dw, pw) = (PUSH_D, PUSH_P);
    let now = Instant::ZERO;
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
    assert_eq!(p.core().snapshot_store().pending(), 1, "reserved at once");
    // The close reaches both workers before the reservation's fact does.
    d.handle_request(WorkerRequest::CloseSession(session), now)
        .unwrap();
    p.handle_request(WorkerRequest::CloseSession(session), now)
        .unwrap();
    for _ in 0..4 {
        while let Some(t) = p.poll_transmit() {
            d.handle_message(pw, t.msg, now);
        }
        while let Some(t) = d.poll_transmit() {
            p.handle_message(dw, t.msg, now);
        }
    }
    assert_eq!(p.core().snapshot_store().pending(), 0);
    assert_eq!(p.capacity().kv_used_blocks(), 0);
    assert!(d.is_drained() && p.is_drained(), "every push role ended");
}

/// A push source that ends by lease expiry before its destination's
/// `DestinationReserved` reaches it never learned its peer, so it could
/// send no abort; the fact then meets its tombstone. The source's worker
/// answers that fact with an abort, so the prefill worker's destination
/// ends and its store reservation is released (no close is involved
/// here to end it otherwise).
#[test]
fn a_push_source_that_expired_before_hearing_of_its_destination_aborts_it() {
    use handoff_core::{CancelReason, Duration, Role, WorkerEvent, WorkerRequest};
    let PushStarted {
        mut d,
        mut p,
        id,
        request,
        session,
        tokens,
    } = push_started();
    let (dw, pw) = (PUSH_D, PUSH_P);
    let now = Instant::ZERO;
    // The source's lease runs out before the destination is even routed.
    let later = now + Duration::from_secs(3_600);
    d.handle_timeout(later);
    let expired = std::iter::from_fn(|| d.poll_event()).any(|e| {
        matches!(
            e,
            WorkerEvent::RoleEnded {
                role: Role::Source,
                reason: Some(CancelReason::LeaseExpired),
                ..
            }
        )
    });
    assert!(expired, "the push source's lease expired");
    p.handle_request(
        WorkerRequest::PushDestination {
            id,
            request,
            session,
            tokens,
            source: dw,
        },
        later,
    )
    .unwrap();
    assert_eq!(p.core().snapshot_store().pending(), 1, "reserved at once");
    for _ in 0..4 {
        while let Some(t) = p.poll_transmit() {
            d.handle_message(pw, t.msg, later);
        }
        while let Some(t) = d.poll_transmit() {
            p.handle_message(dw, t.msg, later);
        }
    }
    assert_eq!(p.core().snapshot_store().pending(), 0);
    assert_eq!(p.capacity().kv_used_blocks(), 0);
    assert!(p.is_drained(), "the destination ended");
    assert!(
        d.core().session_resident(session),
        "the slot outlives its push"
    );
    d.handle_request(WorkerRequest::CloseSession(session), later)
        .unwrap();
    assert!(
        d.is_drained(),
        "the closed slot and the ended push leave nothing"
    );
}
