//! The prefill side of seed 002: the snapshot store and the prefill bypass,
//! with every invariant checked after every operation by the harness.

use super::harness::Harness;
use super::sessions::{events, release, run, sessions_cfg, turn};
use crate::{MissReason, SessionEvent, SglangConfig, SnapshotEvictReason, SnapshotRefusal};
use handoff_core::{
    CommandOutcome, Duration, HandoffId, Instant, RequestId, SchedulerCommand, SchedulerCore,
    SessionId,
};

const P_PAGES: u64 = 20_000;

pub(super) fn ingest(h: &mut Harness, id: u64, session: u64, tokens: u64) {
    let r = h
        .core
        .reserve_snapshot(HandoffId(id.into()), SessionId(session), tokens)
        .expect("room");
    assert_eq!(r.pages, tokens);
    h.check();
    assert!(h.core.ingest_snapshot(HandoffId(id.into()), h.now));
    h.check();
}

pub(super) fn reseed(h: &mut Harness, id: u64, session: u64, prompt: u32) -> CommandOutcome {
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
