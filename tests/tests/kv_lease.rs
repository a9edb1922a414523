//! vLLM's source lease (issue 34, items 1 and 2): heartbeats keep a
//! waiting reader's source alive, and a read of KV its source already
//! released fails.
//!
//! Upstream vLLM's prefill worker holds a request's blocks for
//! `kv_lease_duration` (30 s); the decode worker that will read them sends a
//! heartbeat every lease/6 until its read completes, each moving the expiry
//! to `now + lease * 2 / 3` (`nixl/base_worker.py`, `_send_heartbeats`,
//! `_handle_heartbeat`). A reader that stops (it died, or gave up) lets the
//! lease run out within one extension.
//!
//! vLLM's prefill worker frees a request's pinned blocks when its lease runs
//! out (`nixl_connector.py`: the delayed free of `request_finished`); a
//! decode worker that reads them afterwards, or while they are being freed,
//! reads blocks another request may own. The engine reports such a read as
//! failed ([`handoff_core::TransferResult::SourceReleased`]), the
//! destination unwinds once with `kv-load-failed`, and the request follows
//! `kv_load_failure_policy`: it fails (vLLM's default) or the decode worker
//! computes the prompt itself (`recompute`).

use handoff_core::msg::MsgBody;
use handoff_core::{
    CancelReason, DestinationEventKind as DE, DestinationState as DS, Duration, FailureReason,
    Heartbeat, Instant, KvLoadFailurePolicy, RoleState, SourceEventKind as SE,
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

#[test]
fn a_read_of_a_source_released_before_it_knew_its_reader_fails() {
    // The lease runs out before the destination's reservation reaches the
    // source: nobody tells the reader, its read finds the blocks freed.
    let sim = pair(0, 2);
    assert!(!activated(&sim), "{}", sim.log.join("\n"));
    assert!(
        load_failed(&sim),
        "no kv-load-failed abort\n{}",
        sim.log.join("\n")
    );
    sim.check_drained().unwrap();
}

#[test]
fn a_source_released_during_the_read_aborts_its_reader() {
    // The source knows its reader when the lease runs out mid-read: its
    // abort ends the destination before the read could complete.
    let sim = pair(3, 1_000);
    assert!(!activated(&sim), "{}", sim.log.join("\n"));
    assert!(sim.saw(|t| t.to == RoleState::Destination(DS::Released)));
    sim.check_drained().unwrap();
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
    let hb = Heartbeat::for_lease(Duration::from_secs(1));
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
    let hb = Heartbeat::for_lease(Duration::from_secs(1));
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
/// lease. Each request whose source expired before its read completed
/// fails with `kv-load-failed` (fail) or completes by recomputing
/// (recompute); none activates from a released source.
fn tight(policy: KvLoadFailurePolicy) -> handoff_replay::Report {
    let mut cfg = DeploymentConfig::default();
    cfg.handoff.kv_load_failure = policy;
    let spec = |kv_tokens: u64| handoff_deployment::EngineSpec {
        kv_tokens,
        source_lease_ttl: Some(Duration::from_secs(1)),
        ..handoff_deployment::EngineSpec::default()
    };
    let specs: Vec<_> = [spec(1_000_000), spec(1_000_000), spec(20_000), spec(20_000)].into();
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
fn replay_fails_or_recomputes_what_it_cannot_read() {
    let failed = tight(KvLoadFailurePolicy::Fail);
    let by_reason = load_failures(&failed);
    assert!(
        by_reason > 0,
        "no failed load: {:?}",
        failed.lifecycle.failure_reasons
    );
    assert_eq!(failed.failed_requests, by_reason);
    assert_eq!(failed.completed_requests + failed.failed_requests, 120);

    let recomputed = tight(KvLoadFailurePolicy::Recompute);
    assert_eq!(
        recomputed.failed_requests, 0,
        "{:?}",
        recomputed.lifecycle.failure_reasons
    );
    assert_eq!(recomputed.completed_requests, 120);
}
