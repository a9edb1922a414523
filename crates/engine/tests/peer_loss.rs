//! When a decode worker hears that its prefill worker died. The generic
//! model tells it at the kill; SGLang's decode engine learns it from its
//! heartbeat, `SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL` (5 s) ×
//! `SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE` (2) later
//! (`python/sglang/srt/disaggregation/common/conn.py`,
//! `_start_heartbeat_checker_thread`, `_handle_node_failure`), and holds
//! its reservation until then. Either way the reservation ends exactly once
//! and the decode worker drains.

use handoff_core::{DestinationState, Duration, HandoffPolicy, Instant, Role, RoleState, WorkerId};
use handoff_engine::fault::{Heartbeat, PeerLossDetection};
use handoff_engine::testing::{PairConfig, PairSim, DEST, SOURCE};

fn released(s: &PairSim) -> usize {
    s.transitions
        .iter()
        .filter(|t| {
            t.role == Role::Destination
                && t.to == RoleState::Destination(DestinationState::Released)
        })
        .count()
}

/// Kills the source once the destination reserved; runs `after_kill`; then
/// returns the kill time and when the destination released.
fn kill_reserved(
    peer_loss: PeerLossDetection,
    after_kill: impl FnOnce(&mut PairSim),
) -> (Instant, Instant) {
    let mut sim = PairSim::new(PairConfig {
        policy: HandoffPolicy::DestinationFirst,
        transfer_time: Duration::from_secs(1),
        reservation_ttl: Duration::from_secs(300),
        peer_loss,
        ..PairConfig::default()
    });
    let reserved = |s: &PairSim| {
        s.transitions.iter().any(|t| {
            t.role == Role::Destination
                && t.to == RoleState::Destination(DestinationState::Reserved)
        })
    };
    assert!(sim.run_until(reserved), "{:#?}", sim.log);
    let kill_at = sim.now();
    sim.kill(SOURCE);
    after_kill(&mut sim);
    assert!(sim.run_until(|s| released(s) > 0), "{:#?}", sim.log);
    let released_at = sim.now();
    sim.run();
    assert_eq!(released(&sim), 1, "released once: {:#?}", sim.log);
    assert!(sim.worker(DEST).is_drained(), "{:#?}", sim.log);
    (kill_at, released_at)
}

fn sglang() -> PeerLossDetection {
    PeerLossDetection {
        heartbeat: Some(Heartbeat::SGLANG),
        watchers: vec![DEST],
    }
}

#[test]
fn the_generic_model_hears_at_the_kill() {
    let (kill, released) = kill_reserved(PeerLossDetection::default(), |_| {});
    assert_eq!(released, kill);
}

#[test]
fn sglangs_decode_hears_after_interval_times_max_failures() {
    let (kill, released) = kill_reserved(sglang(), |_| {});
    assert_eq!(released, kill + Duration::from_secs(10));
    // Only the heartbeating side is late: a prefill watching nobody.
    let prefill_only = PeerLossDetection {
        watchers: vec![WorkerId(7)],
        ..sglang()
    };
    let (kill, released) = kill_reserved(prefill_only, |_| {});
    assert_eq!(released, kill);
}

#[test]
fn a_restart_before_detection_ends_the_reservation_at_once() {
    // The worker comes back before the heartbeat missed twice: the decode
    // hears the new generation (a transport hello) and voids the attempt
    // then; the pending notice of the death is dropped, not delivered.
    let (kill, released) = kill_reserved(sglang(), |s| s.restart(SOURCE));
    assert_eq!(released, kill);
}
