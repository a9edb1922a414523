//! A source worker and a destination worker joined by a channel that drops,
//! duplicates, reorders and delays facts, with cancellations, transfer
//! failures and expiries injected at random phases, for both orderings.
//! The fake cores panic on any double release; at the end every lease and
//! reservation must have ended exactly once and both workers must be drained.

use handoff_core::{
    DestinationEventKind as DE, Duration, HandoffPolicy, Instant, SourceEventKind as SE,
    SourceState as SS,
};
use handoff_engine::testing::{PairConfig, PairSim};
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct Case {
    cfg: PairConfig,
    cancel_at_ms: Option<u64>,
}

fn check(case: Case, policy: HandoffPolicy) {
    let mut sim = PairSim::new(PairConfig { policy, ..case.cfg });
    if let Some(ms) = case.cancel_at_ms {
        sim.run_until(|s| s.now() >= Instant::from_millis(ms));
        sim.cancel(0);
    }
    sim.run();
    sim.check_drained().unwrap_or_else(|e| panic!("{e}"));
    // No activation precedes a reservation on the destination.
    let first_reserved = sim
        .log
        .iter()
        .position(|l| l.contains("Destination Reserved "));
    if let Some(active) = sim.log.iter().position(|l| l.contains("-> Active")) {
        assert!(first_reserved.is_some_and(|r| r < active), "{:#?}", sim.log);
    }
}

fn cases() -> impl Strategy<Value = Case> {
    (
        any::<u64>(),
        0u64..40,
        0u64..40,
        0u64..50,
        0u64..30,
        proptest::option::of(0u64..200),
        1u64..6,
        prop_oneof![Just(2u64), Just(8), Just(64)],
    )
        .prop_map(
            |(
                seed,
                drop_pct,
                dup_pct,
                max_delay_ms,
                transfer_fail_pct,
                cancel_at_ms,
                requests,
                decode_blocks,
            )| {
                Case {
                    cfg: PairConfig {
                        seed,
                        drop_pct,
                        dup_pct,
                        max_delay: Duration::from_millis(max_delay_ms),
                        transfer_fail_pct,
                        requests,
                        decode_blocks,
                        ..PairConfig::default()
                    },
                    cancel_at_ms,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn source_first_ends_exactly_once(c in cases()) {
        check(c, HandoffPolicy::SourceFirst);
    }

    #[test]
    fn destination_first_ends_exactly_once(c in cases()) {
        check(c, HandoffPolicy::DestinationFirst);
    }
}

/// The happy path, end to end through two workers, for both orderings; the
/// exact transition sequence each role takes.
#[test]
fn both_orderings_end_to_end() {
    for (policy, expect) in [
        (
            HandoffPolicy::SourceFirst,
            vec![
                "w0 Source Start NotStarted -> Computing ±0",
                "w0 Source PrefillPinned Computing -> Pinned +4 pinned",
                "w1 Destination Routed NotRouted -> Reserving ±0",
                "w1 Destination Reserved Reserving -> Receiving +5 reserved",
                "w0 Source DestinationReserved Pinned -> AwaitingReaderCompletion ±0",
                "w1 Destination ReceiveCompleted Receiving -> Active -5 reserved +5 active",
                "w0 Source ReaderCompleted AwaitingReaderCompletion -> Released -4 pinned",
                "w1 Destination Finished Active -> Released ±0",
            ],
        ),
        (
            HandoffPolicy::DestinationFirst,
            vec![
                "w0 Source Start NotStarted -> NotStarted ±0",
                "w1 Destination Routed NotRouted -> Reserving ±0",
                "w1 Destination Reserved Reserving -> Reserved +5 reserved",
                "w0 Source DestinationReserved NotStarted -> Computing ±0",
                "w0 Source PrefillPinned Computing -> AwaitingReaderCompletion +4 pinned",
                "w1 Destination SourceReady Reserved -> Receiving ±0",
                "w0 Source ReaderCompleted AwaitingReaderCompletion -> Released -4 pinned",
                "w1 Destination ReceiveCompleted Receiving -> Active -5 reserved +5 active",
                "w1 Destination Finished Active -> Released ±0",
            ],
        ),
    ] {
        let mut sim = PairSim::new(PairConfig {
            policy,
            ..PairConfig::default()
        });
        sim.run();
        let got: Vec<&str> = sim.log.iter().map(String::as_str).collect();
        assert_eq!(got, expect, "{}", policy.name());
        sim.check_drained().unwrap_or_else(|e| panic!("{e}"));
    }
}

/// DEP scenarios 1 and 2 in miniature: with no decode room the source-first
/// source stays pinned until its lease expires; the destination-first source
/// is never dispatched.
#[test]
fn decode_full_strands_or_gates() {
    let full = PairConfig {
        decode_blocks: 2,
        ..PairConfig::default()
    };
    let mut sim = PairSim::new(PairConfig {
        policy: HandoffPolicy::SourceFirst,
        ..full.clone()
    });
    sim.run();
    assert!(sim.saw_move(SE::PrefillPinned, SS::Computing, SS::Pinned));
    assert!(
        sim.saw_event(SE::LeaseExpired) && sim.saw(|t| t.delta.pinned == -4),
        "{:#?}",
        sim.log
    );
    let mut sim = PairSim::new(PairConfig {
        policy: HandoffPolicy::DestinationFirst,
        ..full
    });
    sim.run();
    assert!(!sim.saw_event(SE::PrefillPinned), "{:#?}", sim.log);
    assert!(sim.saw_move(SE::LeaseExpired, SS::NotStarted, SS::Released));
}

/// DEP scenario 6: every fact delivered again, late, after all attempts
/// ended, is dropped as stale and resurrects nothing.
#[test]
fn late_duplicates_resurrect_nothing() {
    for policy in [HandoffPolicy::SourceFirst, HandoffPolicy::DestinationFirst] {
        let mut sim = PairSim::new(PairConfig {
            policy,
            requests: 3,
            ..PairConfig::default()
        });
        sim.run();
        sim.check_drained().unwrap_or_else(|e| panic!("{e}"));
        let before = sim.log.len();
        let stale_before = sim.worker(handoff_engine::testing::SOURCE).stats().stale
            + sim.worker(handoff_engine::testing::DEST).stats().stale;
        sim.redeliver_all_late();
        sim.run();
        assert_eq!(sim.log.len(), before, "a late fact moved a role");
        let stale_after = sim.worker(handoff_engine::testing::SOURCE).stats().stale
            + sim.worker(handoff_engine::testing::DEST).stats().stale;
        assert!(stale_after > stale_before);
        sim.check_drained().unwrap_or_else(|e| panic!("{e}"));
    }
}

/// A destination that waits for room renews the source lease (when the
/// worker is configured to), so the stranded source outlives its original
/// lease and ends only when the destination gives up and aborts it.
#[test]
fn waiting_destination_renews_the_source_lease() {
    let base = PairConfig {
        policy: HandoffPolicy::SourceFirst,
        decode_blocks: 2,
        lease_ttl: Duration::from_secs(10),
        reservation_ttl: Duration::from_secs(60),
        ..PairConfig::default()
    };
    let mut plain = PairSim::new(base.clone());
    plain.run();
    assert!(
        plain.saw_move(SE::LeaseExpired, SS::Pinned, SS::Released),
        "{:#?}",
        plain.log
    );
    let mut renewed = PairSim::new(PairConfig {
        renew: Some(Duration::from_secs(10)),
        ..base
    });
    renewed.run();
    assert!(renewed.saw_event(SE::LeaseRenewed), "{:#?}", renewed.log);
    assert!(!renewed.saw_event(SE::LeaseExpired), "{:#?}", renewed.log);
    assert!(
        renewed.saw_event(DE::ReservationExpired),
        "{:#?}",
        renewed.log
    );
    assert!(
        renewed.saw_move(SE::Cancelled, SS::Pinned, SS::Released),
        "{:#?}",
        renewed.log
    );
    renewed.check_drained().unwrap_or_else(|e| panic!("{e}"));
}

/// Source-first: a destination routed with the source's readiness has had
/// no fact from the source; if the source restarts while the destination is
/// reserved, the destination must still void the attempt rather than
/// activate on KV the source no longer has. The engine models a restart as
/// the old process's loss, then the new generation's hello (announced to
/// every worker at start, so the newer one is recognised).
#[test]
fn source_restart_voids_a_reserved_destination_that_never_heard_from_it() {
    let mut sim = PairSim::new(PairConfig::default());
    assert!(sim.run_until(|s| s.saw_event(DE::Reserved)));
    sim.restart(handoff_engine::testing::SOURCE);
    sim.run();
    assert!(
        !sim.saw_event(DE::ReceiveCompleted),
        "the destination activated on a restarted source's KV:\n{}",
        sim.log.join("\n")
    );
    sim.check_drained().unwrap_or_else(|e| panic!("{e}"));
}
