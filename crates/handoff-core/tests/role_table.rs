//! Every (state, event) pair of both role machines, for every ordering: the
//! verdict class, the next state and the actions. The expected table lives in
//! `tests/role_table.txt`; a change to the machines must change that file in
//! the same commit, where a reviewer reads it line by line.
//!
//! A state marked `+abandoned` is a role a client cancelled while it kept
//! its KV (`CancelFrees::Upstream`); an event marked `[immediately]` is
//! applied to a role built with `CancelFrees::Immediately`.

use handoff_core::{
    CancelFrees, CancelReason, DestinationEvent, DestinationHandoff, DestinationReservationId,
    DestinationState, Duration, HandoffId, HandoffPolicy, Instant, ReservationSummary, SourceEvent,
    SourceHandoff, SourceLease, SourceLeaseId, SourceReady, SourceState, TransitionError, Verdict,
    WorkerId,
};
use std::fmt::Write as _;

const TTL: Duration = Duration::from_secs(100);
const T0: Instant = Instant(1_000);

fn summary(n: u64) -> ReservationSummary {
    ReservationSummary {
        reservation: Some(DestinationReservationId(n)),
        physical_blocks: 4 * n,
        transfer_tokens: 64,
        transfer_blocks: 4,
        ..Default::default()
    }
}

fn lease(n: u64) -> SourceLease {
    SourceLease {
        id: SourceLeaseId(n),
        blocks: 8,
        tokens: 128,
        deadline: Instant(T0.0 + 50_000),
    }
}

fn classify<S: Copy + std::fmt::Debug, A: Copy + std::fmt::Debug>(
    r: Result<Verdict<S, A>, TransitionError>,
) -> String {
    match r {
        Ok(Verdict::Applied {
            to, actions, delta, ..
        }) => {
            let acts: Vec<String> = actions.iter().map(|a| format!("{a:?}")).collect();
            format!("-> {to:?} [{}] {delta}", acts.join(", "))
        }
        Ok(Verdict::Duplicate) => "duplicate".into(),
        Err(TransitionError::Stale { .. }) => "stale".into(),
        Err(TransitionError::Invalid { .. }) => "invalid".into(),
        Err(TransitionError::Conflict { .. }) => "conflict".into(),
        Err(TransitionError::Premature { .. }) => "premature".into(),
    }
}

fn source_paths(policy: HandoffPolicy) -> Vec<(SourceState, Vec<SourceEvent>)> {
    let start = SourceEvent::Start;
    let reserved = SourceEvent::DestinationReserved {
        summary: summary(1),
    };
    let pinned = SourceEvent::PrefillPinned { lease: lease(1) };
    let done = SourceEvent::ReaderCompleted;
    let client = SourceEvent::Cancelled {
        reason: CancelReason::Client,
    };
    match policy {
        HandoffPolicy::SourceFirst => vec![
            (SourceState::NotStarted, vec![]),
            (SourceState::Computing, vec![start]),
            (SourceState::Pinned, vec![start, pinned]),
            (
                SourceState::AwaitingReaderCompletion,
                vec![start, pinned, reserved],
            ),
            (SourceState::Released, vec![start, pinned, reserved, done]),
            (SourceState::Pinned, vec![start, pinned, client]),
            (
                SourceState::AwaitingReaderCompletion,
                vec![start, pinned, reserved, client],
            ),
        ],
        // vLLM push: the prefill starts at once; the registration may
        // come before or after its pin (`nixl/push_worker.py`,
        // `_push_writer_loop` and `_handle_push_reg_notif` match either way).
        HandoffPolicy::Push => vec![
            (SourceState::NotStarted, vec![]),
            (SourceState::Computing, vec![start]),
            (SourceState::Computing, vec![start, reserved]),
            (SourceState::Pinned, vec![start, pinned]),
            (
                SourceState::AwaitingReaderCompletion,
                vec![start, pinned, reserved],
            ),
            (
                SourceState::AwaitingReaderCompletion,
                vec![start, reserved, pinned],
            ),
            (SourceState::Released, vec![start, pinned, reserved, done]),
            (SourceState::Pinned, vec![start, pinned, client]),
            (
                SourceState::AwaitingReaderCompletion,
                vec![start, pinned, reserved, client],
            ),
        ],
        _ => vec![
            (SourceState::NotStarted, vec![start]),
            (SourceState::Computing, vec![start, reserved]),
            (
                SourceState::AwaitingReaderCompletion,
                vec![start, reserved, pinned],
            ),
            (SourceState::Released, vec![start, reserved, pinned, done]),
        ],
    }
}

fn source_events() -> Vec<(&'static str, SourceEvent, Instant)> {
    let late = Instant(T0.0 + 10_000_000_000_000);
    vec![
        ("Start", SourceEvent::Start, T0),
        (
            "DestinationReserved(same)",
            SourceEvent::DestinationReserved {
                summary: summary(1),
            },
            T0,
        ),
        (
            "DestinationReserved(other)",
            SourceEvent::DestinationReserved {
                summary: summary(2),
            },
            T0,
        ),
        (
            "PrefillPinned(same)",
            SourceEvent::PrefillPinned { lease: lease(1) },
            T0,
        ),
        (
            "PrefillPinned(other)",
            SourceEvent::PrefillPinned { lease: lease(2) },
            T0,
        ),
        ("ReaderCompleted", SourceEvent::ReaderCompleted, T0),
        (
            "LeaseRenewed(later)",
            SourceEvent::LeaseRenewed {
                deadline: Instant(T0.0 + 90_000),
            },
            T0,
        ),
        (
            "LeaseRenewed(earlier)",
            SourceEvent::LeaseRenewed {
                deadline: Instant(T0.0 + 10),
            },
            T0,
        ),
        ("LeaseExpired(due)", SourceEvent::LeaseExpired, late),
        ("LeaseExpired(early)", SourceEvent::LeaseExpired, T0),
        (
            "Cancelled(client)",
            SourceEvent::Cancelled {
                reason: CancelReason::Client,
            },
            T0,
        ),
        (
            "Cancelled(peer)",
            SourceEvent::Cancelled {
                reason: CancelReason::PeerAborted,
            },
            T0,
        ),
        (
            "Cancelled(client)[immediately]",
            SourceEvent::Cancelled {
                reason: CancelReason::Client,
            },
            T0,
        ),
    ]
}

fn dest_paths(policy: HandoffPolicy) -> Vec<(DestinationState, Vec<DestinationEvent>)> {
    let ready = SourceReady {
        blocks: 8,
        tokens: 128,
    };
    let reserved = DestinationEvent::Reserved {
        summary: summary(1),
    };
    let recv = DestinationEvent::ReceiveCompleted;
    let fin = DestinationEvent::Finished;
    let client = DestinationEvent::Cancelled {
        reason: CancelReason::Client,
    };
    match policy {
        HandoffPolicy::SourceFirst => {
            let routed_ready = DestinationEvent::Routed {
                source: WorkerId(1),
                ready: Some(ready),
            };
            vec![
                (DestinationState::NotRouted, vec![]),
                (
                    DestinationState::Routed,
                    vec![DestinationEvent::Routed {
                        source: WorkerId(1),
                        ready: None,
                    }],
                ),
                (DestinationState::Reserving, vec![routed_ready]),
                (DestinationState::Receiving, vec![routed_ready, reserved]),
                (DestinationState::Active, vec![routed_ready, reserved, recv]),
                (
                    DestinationState::Released,
                    vec![routed_ready, reserved, recv, fin],
                ),
                (
                    DestinationState::Receiving,
                    vec![routed_ready, reserved, client],
                ),
            ]
        }
        _ => {
            let routed = DestinationEvent::Routed {
                source: WorkerId(1),
                ready: None,
            };
            let sr = DestinationEvent::SourceReady(ready);
            let mut paths = vec![
                (DestinationState::NotRouted, vec![]),
                (DestinationState::Reserving, vec![routed]),
                (DestinationState::Reserved, vec![routed, reserved]),
                (DestinationState::Receiving, vec![routed, reserved, sr]),
                (DestinationState::Active, vec![routed, reserved, sr, recv]),
                (
                    DestinationState::Released,
                    vec![routed, reserved, sr, recv, fin],
                ),
            ];
            // SGLang frees at once on a cancel; vLLM's push waits for its
            // write.
            if policy == HandoffPolicy::Push {
                paths.push((
                    DestinationState::Receiving,
                    vec![routed, reserved, sr, client],
                ));
            }
            paths
        }
    }
}

fn dest_events() -> Vec<(&'static str, DestinationEvent, Instant)> {
    let late = Instant(T0.0 + 10_000_000_000_000);
    vec![
        (
            "Routed(same)",
            DestinationEvent::Routed {
                source: WorkerId(1),
                ready: None,
            },
            T0,
        ),
        (
            "Routed(other)",
            DestinationEvent::Routed {
                source: WorkerId(2),
                ready: None,
            },
            T0,
        ),
        (
            "SourceReady",
            DestinationEvent::SourceReady(SourceReady {
                blocks: 8,
                tokens: 128,
            }),
            T0,
        ),
        (
            "Reserved(same)",
            DestinationEvent::Reserved {
                summary: summary(1),
            },
            T0,
        ),
        (
            "Reserved(other)",
            DestinationEvent::Reserved {
                summary: summary(2),
            },
            T0,
        ),
        ("Unavailable", DestinationEvent::Unavailable, T0),
        ("Unsupported", DestinationEvent::Unsupported, T0),
        ("ReceiveCompleted", DestinationEvent::ReceiveCompleted, T0),
        (
            "ReservationExpired(due)",
            DestinationEvent::ReservationExpired,
            late,
        ),
        (
            "ReservationExpired(early)",
            DestinationEvent::ReservationExpired,
            T0,
        ),
        (
            "Cancelled(client)",
            DestinationEvent::Cancelled {
                reason: CancelReason::Client,
            },
            T0,
        ),
        (
            "Cancelled(peer)",
            DestinationEvent::Cancelled {
                reason: CancelReason::PeerLost,
            },
            T0,
        ),
        ("Finished", DestinationEvent::Finished, T0),
        (
            "Cancelled(client)[immediately]",
            DestinationEvent::Cancelled {
                reason: CancelReason::Client,
            },
            T0,
        ),
    ]
}

/// The cancel rule an event's row is built with.
fn rule(event: &str) -> CancelFrees {
    if event.ends_with("[immediately]") {
        CancelFrees::Immediately
    } else {
        CancelFrees::Upstream
    }
}

/// A state's row label: `+abandoned` when a client cancelled the role
/// while it kept its KV.
fn label(state: impl std::fmt::Display, abandoned: bool) -> String {
    if abandoned {
        format!("{state}+abandoned")
    } else {
        state.to_string()
    }
}

fn build_table() -> String {
    let mut out = String::new();
    for policy in [
        HandoffPolicy::SourceFirst,
        HandoffPolicy::DestinationFirst,
        HandoffPolicy::Push,
    ] {
        let _ = writeln!(out, "## source, {}", policy.name());
        for (state, path) in source_paths(policy) {
            for (ename, ev, at) in source_events() {
                let mut m =
                    SourceHandoff::new(HandoffId(9), policy, TTL).with_cancel_frees(rule(ename));
                for p in &path {
                    m.handle(*p, T0).expect("path to state must be legal");
                }
                // A role under the immediate rule is never abandoned.
                if rule(ename) == CancelFrees::Immediately && m.state() != state {
                    continue;
                }
                assert_eq!(m.state(), state);
                let label = label(state, m.abandoned());
                let _ = writeln!(
                    out,
                    "{label:<25} {ename:<27} {}",
                    classify(m.handle(ev, at))
                );
            }
        }
        let _ = writeln!(out, "## destination, {}", policy.name());
        for (state, path) in dest_paths(policy) {
            for (ename, ev, at) in dest_events() {
                let mut m = DestinationHandoff::new(HandoffId(9), policy, TTL)
                    .with_cancel_frees(rule(ename));
                for p in &path {
                    m.handle(*p, T0).expect("path to state must be legal");
                }
                // A role under the immediate rule is never abandoned.
                if rule(ename) == CancelFrees::Immediately && m.state() != state {
                    continue;
                }
                assert_eq!(m.state(), state);
                let label = label(state, m.abandoned());
                let _ = writeln!(
                    out,
                    "{label:<25} {ename:<27} {}",
                    classify(m.handle(ev, at))
                );
            }
        }
    }
    out
}

#[test]
fn transition_table_is_as_reviewed() {
    let actual = build_table();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/role_table.txt");
    if std::env::var_os("UPDATE_ROLE_TABLE").is_some() {
        std::fs::write(path, &actual).expect("write table");
    }
    let expected = std::fs::read_to_string(path).unwrap_or_default();
    if actual != expected {
        for (i, (a, e)) in actual.lines().zip(expected.lines()).enumerate() {
            if a != e {
                panic!(
                    "role table differs at line {}:\n  actual:   {a}\n  expected: {e}",
                    i + 1
                );
            }
        }
        panic!(
            "role table length differs ({} vs {} lines)",
            actual.lines().count(),
            expected.lines().count()
        );
    }
}

#[test]
fn nothing_but_stale_after_release() {
    for line in build_table().lines().filter(|l| l.starts_with("Released")) {
        assert!(line.ends_with("stale"), "{line}");
    }
}
