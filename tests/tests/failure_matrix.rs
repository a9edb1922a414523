//! DEP test scenario 5, the failure matrix: cancel, lose the channel, or
//! restart an owner at each lifecycle point, for both orderings. Every case
//! asserts that each worker got back every resource it acquired, exactly
//! once (the fake cores panic on a double release; their ledgers must end
//! empty), without any final message from the peer: after a lost channel no
//! fact sent from then on crosses, and after a restart the peer accepts
//! nothing more from the old incarnation. Facts already in flight at the
//! fault still arrive (the engine cuts a link by when a fact is sent; a
//! restarted worker's old facts are refused by their generation). A KV
//! transfer under way completes unless its source's KV is gone: a read of a
//! restarted source fails as a transfer, a read of a released one as a
//! failed load (`tests/released_source.rs`).
//!
//! The workers are the same `Worker`s replay and live drive, so this matrix
//! covers both drivers' lifecycle; driver-specific failures (TCP peer loss,
//! process kill) are tested in the live adapter.

use handoff_core::{DestinationEventKind as DE, HandoffPolicy, Role, SourceEventKind as SE};
use handoff_engine::testing::{PairConfig, PairSim, DEST, SOURCE};

#[derive(Clone, Copy, Debug)]
enum Fault {
    Cancel,
    LoseChannel,
    RestartSource,
    RestartDestination,
}

const FAULTS: [Fault; 4] = [
    Fault::Cancel,
    Fault::LoseChannel,
    Fault::RestartSource,
    Fault::RestartDestination,
];
const POLICIES: [HandoffPolicy; 2] = [HandoffPolicy::SourceFirst, HandoffPolicy::DestinationFirst];

/// Runs to the point `reached`, injects `fault`, runs every timer out and
/// checks the books.
fn case(
    policy: HandoffPolicy,
    decode_blocks: u64,
    fault: Fault,
    point: &str,
    reached: impl Fn(&PairSim) -> bool,
) {
    let mut sim = PairSim::new(PairConfig {
        policy,
        decode_blocks,
        ..PairConfig::default()
    });
    assert!(
        sim.run_until(&reached),
        "{point}/{policy:?}: never reached; log:\n{}",
        sim.log.join("\n")
    );
    match fault {
        Fault::Cancel => sim.cancel(0),
        Fault::LoseChannel => sim.lose_link(),
        Fault::RestartSource => sim.restart(SOURCE),
        Fault::RestartDestination => sim.restart(DEST),
    }
    sim.run();
    if let Err(e) = sim.check_drained() {
        panic!("{point}/{policy:?}/{fault:?}: {e}");
    }
}

fn all_faults(point: &str, decode_blocks: u64, reached: impl Fn(&PairSim, HandoffPolicy) -> bool) {
    for policy in POLICIES {
        for fault in FAULTS {
            case(policy, decode_blocks, fault, point, |s| reached(s, policy));
        }
    }
}

#[test]
fn before_decode_routing() {
    // The source knows the request; the destination does not yet.
    all_faults("before-routing", 64, |s, _| {
        s.saw_event(SE::Start) && !s.saw(|t| t.role == Role::Destination)
    });
}

#[test]
fn after_router_booking_before_reservation() {
    // Decode is full (a request needs 5 blocks): the destination is routed and
    // queued for a reservation it cannot get.
    all_faults("after-booking", 2, |s, _| {
        s.saw_event(DE::Routed) && s.worker(DEST).stats().applied >= 2
    });
}

#[test]
fn after_reservation() {
    all_faults("after-reservation", 64, |s, _| s.saw_event(DE::Reserved));
}

#[test]
fn while_source_pinned() {
    // Source-first with decode full: pinned and stranded. Destination-first:
    // pinned while its transfer is starting.
    for (policy, blocks) in [
        (HandoffPolicy::SourceFirst, 2),
        (HandoffPolicy::DestinationFirst, 64),
    ] {
        for fault in FAULTS {
            case(policy, blocks, fault, "while-pinned", |s| {
                s.saw_event(SE::PrefillPinned)
            });
        }
    }
}

#[test]
fn after_receive_completion_before_reader_completion() {
    all_faults("after-receive", 64, |s, policy| match policy {
        // The destination activated; its reader notification is in flight.
        HandoffPolicy::SourceFirst => s.saw_event(DE::ReceiveCompleted),
        // The sender finished and released; the destination's completion is in flight.
        _ => s.saw_event(SE::ReaderCompleted) && !s.saw_event(DE::ReceiveCompleted),
    });
}

#[test]
fn during_transfer() {
    all_faults("during-transfer", 64, |s, _| s.transfers_in_flight > 0);
}
