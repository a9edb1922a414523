//! vLLM's source lease (issue 34, items 1 and 2): heartbeats keep a
//! waiting reader's source alive, and a read of KV its source already
//! released fails.
//!
//! Upstream vLLM's prefill worker holds a request's blocks for
//! `kv_lease_duration` (30 s); the decode worker that will read them sends a
//! heartbeat every `lease // 6` s until its read completes, each moving the
//! expiry to `now + lease * 2 // 3` s (`nixl/base_worker.py`,
//! `_send_heartbeats`, `_handle_heartbeat`; the tests below use the same
//! fractions at nanosecond resolution, `Heartbeat::scaled`). A reader that stops (it died, or gave up) lets the
//! lease run out within one extension.
//!
//! vLLM's prefill worker frees a request's pinned blocks when its lease runs
//! out and tells no one (`nixl/base_worker.py`, `_get_new_notifs`); a
//! decode worker that reads them afterwards, or while they are being freed,
//! reads whatever the blocks hold, keeps it, and the request succeeds: the
//! prefill worker only logs "Potentially invalid KV blocks for unrecognized
//! request" when the read's notice comes. The mock does the same and marks
//! the read as stale ([`handoff_core::TransferResult::SourceReleased`], the
//! `StaleRead` event, the report's `stale_reads`), split by whether a
//! released block had already been given to another request. The strict
//! choice (`StaleReadPolicy::Fail`) fails the load instead, and the request
//! follows `kv_load_failure_policy`.

use handoff_core::msg::MsgBody;
use handoff_core::{
    CancelReason, DestinationEventKind as DE, DestinationState as DS, Duration, FailureReason,
    Heartbeat, Instant, KvLoadFailurePolicy, RoleState, SourceEventKind as SE, StaleReadPolicy,
};
use handoff_engine::testing::{PairConfig, PairSim, DEST, SOURCE};
use handoff_replay::{DeploymentConfig, Replay};

/// The pair with a source lease of `lease_ms` and transfers of
/// `transfer_ms`, run to the end.
fn pair(lease_ms: u64, transfer_ms: u64) -> PairSim {
    let mut sim = PairSim::new(PairConfig {
        lease_ttl: Duration::from_millis(lease_ms),
        transfer_time: Duration::from_millis(transfer_ms),
        ..PairConfig::default()
    });
    sim.run();
    sim
}

fn activated(sim: &PairSim) -> bool {
    sim.saw(|t| t.to == RoleState::Destination(DS::Active))
}

fn load_failed(sim: &PairSim) -> bool {
    sim.sent.iter().any(|(from, to, m)| {
        *from == DEST
            && *to == SOURCE
            && matches!(
                m.body,
                MsgBody::Abort {
                    reason: CancelReason::KvLoadFailed,
                    ..
                }
            )
    })
}

fn aborted_by_source(sim: &PairSim) -> bool {
    sim.sent.iter().any(|(from, to, m)| {
        *from == SOURCE && *to == DEST && matches!(m.body, MsgBody::Abort { .. })
    })
}

#[test]
fn a_read_of_a_source_released_before_it_knew_its_reader_completes_stale() {
    // The lease runs out before the destination's reservation reaches the
    // source: nobody tells the reader, its read finds the blocks freed and
    // the request goes on, marked.
    let sim = pair(0, 2);
    let log = || sim.log.join("\n");
    assert!(activated(&sim), "{}", log());
    assert!(!load_failed(&sim), "{}", log());
    assert_eq!(sim.stale_reads.len(), 1, "{}", log());
    sim.check_drained().unwrap();
}

#[test]
fn a_source_released_during_the_read_does_not_abort_its_reader() {
    // The lease runs out mid-read: vLLM's prefill worker tells no one, the
    // read completes on freed blocks.
    let sim = pair(3, 1_000);
    let log = || sim.log.join("\n");
    assert!(activated(&sim), "{}", log());
    assert!(!aborted_by_source(&sim), "{}", log());
    assert_eq!(sim.stale_reads.len(), 1, "{}", log());
    sim.check_drained().unwrap();
}

#[test]
fn the_strict_choice_fails_a_stale_read() {
    for (lease_ms, transfer_ms) in [(0, 2), (3, 1_000)] {
        let mut sim = PairSim::new(PairConfig {
            lease_ttl: Duration::from_millis(lease_ms),
            transfer_time: Duration::from_millis(transfer_ms),
            stale_read: StaleReadPolicy::Fail,
            ..PairConfig::default()
        });
        sim.run();
        assert!(!activated(&sim), "{}", sim.log.join("\n"));
        assert!(load_failed(&sim), "{}", sim.log.join("\n"));
        assert!(sim.stale_reads.is_empty());
        sim.check_drained().unwrap();
    }
}

/// A destination that can never reserve (the decode pool is one block too
/// small) and gives up after 5 s; the source's lease is 1 s; `drop_pct` of
/// facts are lost.
fn waiting_reader(heartbeat: Option<Heartbeat>, drop_pct: u64) -> PairSim {
    let mut sim = PairSim::new(PairConfig {
        lease_ttl: Duration::from_secs(1),
        decode_blocks: 4,
        reservation_ttl: Duration::from_secs(5),
        heartbeat,
        drop_pct,
        ..PairConfig::default()
    });
    sim.run();
    sim
}

fn when(sim: &PairSim, event: impl Into<handoff_core::LifecycleEvent>) -> Option<Instant> {
    let event = event.into();
    sim.transitions
        .iter()
        .find(|t| t.event == event)
        .map(|t| t.at)
}

#[test]
fn heartbeats_hold_a_waiting_readers_source() {
    let hb = Heartbeat::scaled(Duration::from_secs(1));
    let sim = waiting_reader(Some(hb), 0);
    let log = || sim.log.join("\n");
    assert!(sim.saw_event(SE::LeaseRenewed), "{}", log());
    assert_eq!(when(&sim, SE::LeaseExpired), None, "{}", log());
    // The source lives until the reader gives up and tells it.
    let gave_up = when(&sim, DE::ReservationExpired).expect("the reader gave up");
    let cancelled = when(&sim, SE::Cancelled).expect("the source was told");
    assert!(cancelled >= gave_up && gave_up >= Instant::from_millis(5_000));
    sim.check_drained().unwrap();
}

#[test]
fn without_heartbeats_or_when_they_are_lost_the_lease_runs_out() {
    let hb = Heartbeat::scaled(Duration::from_secs(1));
    for (heartbeat, drop_pct) in [(None, 0), (Some(hb), 100)] {
        let sim = waiting_reader(heartbeat, drop_pct);
        let expired = when(&sim, SE::LeaseExpired).expect("the lease ran out");
        assert!(!sim.saw_event(SE::LeaseRenewed));
        assert!(expired < Instant::from_millis(1_100), "{expired:?}");
        sim.check_drained().unwrap();
    }
}

#[test]
fn a_read_within_the_lease_activates() {
    let sim = pair(10_000, 2);
    assert!(activated(&sim), "{}", sim.log.join("\n"));
    assert!(!load_failed(&sim));
    sim.check_drained().unwrap();
}

/// The run: vLLM, decode pools too small to reserve at once, a 1 s
/// lease. Reads of expired sources complete as upstream (every request
/// completes, the stale ones counted and split by reuse); under the strict
/// choice each fails with `kv-load-failed` (fail) or completes by
/// recomputing (recompute).
fn tight(stale: StaleReadPolicy, policy: KvLoadFailurePolicy) -> handoff_replay::Report {
    let mut cfg = DeploymentConfig::default();
    cfg.handoff.kv_load_failure = policy;
    cfg.handoff.stale_read = stale;
    let spec = |kv_tokens: u64| handoff_deployment::EngineSpec {
        kv_tokens,
        source_lease_ttl: Some(Duration::from_secs(1)),
        ..handoff_deployment::EngineSpec::default()
    };
    let specs: Vec<_> = [spec(60_000), spec(60_000), spec(20_000), spec(20_000)].into();
    cfg.engines = specs.clone();
    let items = handoff_workload::SyntheticWorkload::new(handoff_workload::SyntheticConfig {
        requests: 120,
        ..Default::default()
    });
    let make = move |w: handoff_core::WorkerId, _| {
        handoff_deployment::make_core(&specs[w.0 as usize]).expect("valid spec")
    };
    Replay::new(cfg, items, make)
        .expect("the cores publish at the deployment's block size")
        .run_all()
        .report
}

fn load_failures(r: &handoff_replay::Report) -> u64 {
    r.lifecycle
        .failure_reasons
        .get(&FailureReason::Handoff(CancelReason::KvLoadFailed))
        .copied()
        .unwrap_or(0)
}

#[test]
fn replay_completes_stale_reads_and_counts_them() {
    let r = tight(StaleReadPolicy::Complete, KvLoadFailurePolicy::Fail);
    let s = r.lifecycle.stale_reads;
    assert_eq!(
        r.completed_requests, 120,
        "{:?}",
        r.lifecycle.failure_reasons
    );
    assert!(s.reads > 0, "no stale read");
    assert_eq!(s.reads, s.reused + s.not_reused);
    assert!(s.reused > 0, "no read of reused blocks: {s:?}");
    assert!(r.lifecycle.lease_expiries >= s.reads);
}

#[test]
fn the_strict_choice_fails_or_recomputes_what_it_cannot_read() {
    let failed = tight(StaleReadPolicy::Fail, KvLoadFailurePolicy::Fail);
    let by_reason = load_failures(&failed);
    assert!(
        by_reason > 0,
        "no failed load: {:?}",
        failed.lifecycle.failure_reasons
    );
    assert_eq!(failed.failed_requests, by_reason);
    assert_eq!(failed.completed_requests + failed.failed_requests, 120);
    assert!(failed.lifecycle.stale_reads.none());

    let recomputed = tight(StaleReadPolicy::Fail, KvLoadFailurePolicy::Recompute);
    assert_eq!(
        recomputed.failed_requests, 0,
        "{:?}",
        recomputed.lifecycle.failure_reasons
    );
    assert_eq!(recomputed.completed_requests, 120);
}
