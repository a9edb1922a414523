//! The fault plans' tests: parsing, the text form, and the injector's draws.

use super::error::{Expected, FaultPlanError, FaultPlanErrorKind};
use super::injector::FaultInjector;
use super::plan::{FactFate, FactFaults, Fault, FaultCounts, FaultPlan, TimedFault};
use super::text::parse_time;
use super::MAX_TIMED_FAULTS;
use handoff_core::ids::{RequestId, WorkerId};
use handoff_core::time::{Duration, Instant};

const EXAMPLE: &str = "\
seed 7
kill 2 at 1.5s
restart 2 at 3s
partition 0 2 from 1s to 2s
cancel 17 at 250ms
drop 0.01
duplicate 0.02
delay 0.05 max 20ms
transfer-fail 0.02
";

fn err(text: &str) -> FaultPlanError {
    FaultPlan::parse(text).expect_err(text)
}

fn at(line: usize, column: usize, text: &str) -> FaultPlanErrorKind {
    let e = err(text);
    assert_eq!((e.line, e.column), (line, column), "{text:?}: {e}");
    e.kind
}

#[test]
fn parses_the_example() {
    let plan = FaultPlan::parse(EXAMPLE).unwrap();
    let w = WorkerId;
    assert_eq!(plan.seed, 7);
    assert_eq!(
        plan.timed,
        vec![
            TimedFault {
                at: Instant::from_millis(250),
                fault: Fault::Cancel {
                    request: RequestId(17)
                }
            },
            TimedFault {
                at: Instant::from_millis(1000),
                fault: Fault::Partition {
                    a: w(0),
                    b: w(2),
                    until: Instant::from_millis(2000)
                }
            },
            TimedFault {
                at: Instant::from_millis(1500),
                fault: Fault::Kill { worker: w(2) }
            },
            TimedFault {
                at: Instant::from_millis(3000),
                fault: Fault::Restart { worker: w(2) }
            },
        ]
    );
    assert_eq!(
        plan.facts,
        FactFaults {
            drop: 0.01,
            duplicate: 0.02,
            delay: 0.05,
            max_delay: Duration::from_millis(20)
        }
    );
    assert_eq!(plan.transfer_fail, 0.02);
    assert!(!plan.is_empty());
    assert_eq!(FaultPlan::parse(&plan.to_string()), Ok(plan));
}

#[test]
fn separators_comments_and_blank_input() {
    assert_eq!(FaultPlan::parse(""), Ok(FaultPlan::none()));
    assert_eq!(
        FaultPlan::parse("  # nothing\n;;\r\n\t"),
        Ok(FaultPlan::none())
    );
    let plan = FaultPlan::parse("seed 3; kill 1 at 5ms # gone\r\n;restart 1 at 6ms;").unwrap();
    assert_eq!(plan.seed, 3);
    assert_eq!(plan.timed.len(), 2);
    assert_eq!(plan.timed[1].at, Instant::from_millis(6));
    assert!(FaultPlan::none().is_empty());
    assert_eq!(
        FaultPlan::parse(&FaultPlan::none().to_string()),
        Ok(FaultPlan::none())
    );
}

#[test]
fn times_are_exact() {
    let t = |s: &str| parse_time(s);
    assert_eq!(t("1.5s"), Ok(1_500_000_000));
    assert_eq!(t("250ms"), Ok(250_000_000));
    assert_eq!(t("0.001us"), Ok(1));
    assert_eq!(t("7ns"), Ok(7));
    assert_eq!(t("0s"), Ok(0));
    assert_eq!(
        t("1.000000000000000000000000000000000000000000s"),
        Ok(1_000_000_000)
    );
    assert_eq!(t("18446744073709551615ns"), Ok(u64::MAX));
    assert_eq!(t("18446744073.709551615s"), Ok(u64::MAX));
    assert!(matches!(
        t("18446744073.709551616s"),
        Err(FaultPlanErrorKind::TimeOutOfRange { .. })
    ));
    assert!(matches!(
        t("99999999999999999999999999999999999999999999s"),
        Err(FaultPlanErrorKind::TimeOutOfRange { .. })
    ));
    assert!(matches!(
        t("1.5ns"),
        Err(FaultPlanErrorKind::SubNanosecond { .. })
    ));
    assert!(matches!(
        t("0.0000000001s"),
        Err(FaultPlanErrorKind::SubNanosecond { .. })
    ));
    assert!(matches!(
        t("-1s"),
        Err(FaultPlanErrorKind::NegativeTime { .. })
    ));
    for bad in [
        "1", "s", ".5s", "1.s", "1e3ms", "infs", "NaNs", "1 s", "+1s", "1.5.5s", "1µs", "--1s",
    ] {
        assert!(
            matches!(
                t(bad),
                Err(FaultPlanErrorKind::Expected {
                    expected: Expected::Time,
                    ..
                })
            ),
            "{bad}"
        );
    }
}

#[test]
fn errors_name_line_and_column() {
    let e = err("seed 7\nkill x at 1s");
    assert_eq!(
        e.to_string(),
        r#"line 2, column 6: expected a worker id, found "x""#
    );

    assert_eq!(
        at(1, 1, "explode 3"),
        FaultPlanErrorKind::UnknownDirective {
            found: "explode".into()
        }
    );
    assert_eq!(
        at(1, 11, "kill 1 at 1.5"),
        FaultPlanErrorKind::Expected {
            expected: Expected::Time,
            found: Some("1.5".into())
        }
    );
    let missing = at(1, 10, "kill 1 at");
    assert_eq!(
        missing,
        FaultPlanErrorKind::Expected {
            expected: Expected::Time,
            found: None
        }
    );
    assert_eq!(
        missing.to_string(),
        "expected a time like 1.5s, 250ms, 20us or 100ns, found end of directive"
    );
    assert_eq!(
        at(1, 8, "kill 1 in 1s"),
        FaultPlanErrorKind::Expected {
            expected: Expected::Keyword("at"),
            found: Some("in".into())
        }
    );
    assert_eq!(
        at(1, 6, "kill 4294967296 at 1s"),
        FaultPlanErrorKind::Expected {
            expected: Expected::WorkerId,
            found: Some("4294967296".into())
        }
    );
    assert!(matches!(
        at(1, 6, "kill +1 at 1s"),
        FaultPlanErrorKind::Expected { .. }
    ));
}

#[test]
fn value_and_structure_errors_name_line_and_column() {
    assert_eq!(
        at(2, 6, "\ndrop 1.5"),
        FaultPlanErrorKind::ProbabilityOutOfRange {
            found: "1.5".into()
        }
    );
    for p in ["NaN", "inf", "-0.1"] {
        assert!(matches!(
            at(1, 6, &format!("drop {p}")),
            FaultPlanErrorKind::ProbabilityOutOfRange { .. }
        ));
    }
    assert_eq!(
        at(1, 9, "seed 1; seed 2"),
        FaultPlanErrorKind::Repeated {
            directive: "seed",
            first_line: 1
        }
    );
    assert_eq!(
        at(1, 13, "partition 1 1 from 1s to 2s"),
        FaultPlanErrorKind::SelfPartition {
            worker: WorkerId(1)
        }
    );
    let empty = at(3, 26, "\n\npartition 0 1 from 2s to 1500ms");
    assert_eq!(
        empty.to_string(),
        "partition from 2s to 1500ms is empty (it must end after it starts)"
    );
    assert_eq!(
        at(1, 14, "kill 1 at 1s extra"),
        FaultPlanErrorKind::Trailing {
            found: "extra".into()
        }
    );
    assert!(matches!(
        at(1, 11, "kill 1 at -2ms"),
        FaultPlanErrorKind::NegativeTime { .. }
    ));
    assert!(matches!(
        at(1, 15, "delay 0.1 max 0.5ns"),
        FaultPlanErrorKind::SubNanosecond { .. }
    ));
    assert!(matches!(
        at(1, 10, "delay 0.1"),
        FaultPlanErrorKind::Expected {
            expected: Expected::Keyword("max"),
            found: None
        }
    ));
    // Columns count characters, not bytes; tabs count as one.
    assert!(matches!(
        at(1, 14, "seed\u{3000}1;\u{3000}kill x at 1s"),
        FaultPlanErrorKind::Expected {
            expected: Expected::WorkerId,
            ..
        }
    ));
    // Long tokens are clipped in messages.
    let long = "x".repeat(1000);
    let e = err(&format!("kill {long} at 1s"));
    assert!(e.to_string().len() < 120, "{e}");
}

#[test]
fn too_many_timed_faults() {
    let mut text = "cancel 1 at 0s\n".repeat(MAX_TIMED_FAULTS);
    assert_eq!(
        FaultPlan::parse(&text).map(|p| p.timed.len()),
        Ok(MAX_TIMED_FAULTS)
    );
    text.push_str("cancel 2 at 1s");
    let e = err(&text);
    assert_eq!((e.line, e.column), (MAX_TIMED_FAULTS + 1, 1));
    assert_eq!(
        e.kind,
        FaultPlanErrorKind::TooManyTimedFaults {
            max: MAX_TIMED_FAULTS
        }
    );
}

#[test]
fn zero_plan_delivers_everything_on_time() {
    for plan in [
        FaultPlan::none(),
        FaultPlan {
            seed: 99,
            ..FaultPlan::none()
        },
        FaultPlan::generate(5, 8, 100, Duration::from_secs(1), 0.0),
        // Delay probability without a max delay injects nothing either.
        FaultPlan {
            facts: FactFaults {
                delay: 1.0,
                ..FactFaults::NONE
            },
            ..FaultPlan::none()
        },
    ] {
        assert!(plan.is_empty(), "{plan}");
        let mut inj = FaultInjector::new(plan);
        assert_eq!(inj.next_timed(), None);
        assert_eq!(inj.pop_due(Instant::MAX), None);
        for i in 0..10_000u64 {
            let fate = inj.fact(WorkerId(i as u32 % 3), WorkerId(7), Instant(i * 997));
            assert_eq!(
                fate,
                FactFate::Deliver {
                    extra_delay: Duration::ZERO
                }
            );
            assert!(inj.transfer_ok());
        }
        let c = inj.injected();
        assert_eq!((c.facts, c.transfers), (10_000, 10_000));
        assert_eq!(
            c,
            FaultCounts {
                facts: 10_000,
                transfers: 10_000,
                ..FaultCounts::default()
            }
        );
    }
}

#[test]
fn partitions_cut_both_directions_only_inside_the_window() {
    let plan = FaultPlan::parse(
        "partition 1 3 from 10ms to 20ms; partition 3 1 from 15ms to 30ms; partition 1 3 from 50ms to 60ms",
    )
    .unwrap();
    let mut inj = FaultInjector::new(plan);
    let (a, b, c) = (WorkerId(1), WorkerId(3), WorkerId(2));
    let ms = Instant::from_millis;
    for (t, cut) in [
        (ms(0), false),
        (Instant(ms(10).0 - 1), false),
        (ms(10), true),
        (ms(19), true),
        (ms(25), true),
        (Instant(ms(30).0 - 1), true),
        (ms(30), false),
        (ms(49), false),
        (ms(50), true),
        (ms(60), false),
        (Instant::MAX, false),
    ] {
        assert_eq!(inj.is_partitioned(a, b, t), cut, "{t:?}");
        assert_eq!(inj.is_partitioned(b, a, t), cut, "{t:?}");
        let expect_drop = |f: FactFate| (f == FactFate::Drop) == cut;
        assert!(expect_drop(inj.fact(a, b, t)), "{t:?}");
        assert!(expect_drop(inj.fact(b, a, t)), "{t:?}");
        // Other pairs are never cut.
        assert!(!inj.is_partitioned(a, c, t));
        assert_ne!(inj.fact(a, c, t), FactFate::Drop);
        assert_ne!(inj.fact(c, b, t), FactFate::Drop);
    }
    // Popping the partitions is only reporting; the cut does not depend on it.
    while inj.pop_due(Instant::MAX).is_some() {}
    assert_eq!(inj.injected().partitions, 3);
    assert!(inj.is_partitioned(b, a, ms(12)));
    assert_eq!(inj.injected().facts_partitioned, 2 * 5);
}

#[test]
fn pop_due_takes_faults_in_plan_order() {
    let plan = FaultPlan::parse(
        "restart 1 at 2s; kill 1 at 1s; cancel 5 at 2s; kill 0 at 1s; cancel 6 at 2000ms",
    )
    .unwrap();
    let mut inj = FaultInjector::new(plan);
    assert_eq!(inj.next_timed(), Some(Instant::from_millis(1000)));
    assert_eq!(inj.pop_due(Instant::from_millis(999)), None);
    let mut taken = Vec::new();
    while let Some(t) = inj.pop_due(Instant::from_millis(1000)) {
        taken.push(t.fault);
    }
    assert_eq!(
        taken,
        [
            Fault::Kill {
                worker: WorkerId(1)
            },
            Fault::Kill {
                worker: WorkerId(0)
            }
        ]
    );
    assert_eq!(inj.next_timed(), Some(Instant::from_millis(2000)));
    assert_eq!(inj.remaining().len(), 3);
    let rest: Vec<_> = std::iter::from_fn(|| inj.pop_due(Instant::MAX))
        .map(|t| t.fault)
        .collect();
    assert_eq!(
        rest,
        [
            Fault::Restart {
                worker: WorkerId(1)
            },
            Fault::Cancel {
                request: RequestId(5)
            },
            Fault::Cancel {
                request: RequestId(6)
            }
        ]
    );
    assert_eq!(inj.next_timed(), None);
    let c = inj.injected();
    assert_eq!((c.kills, c.restarts, c.partitions, c.cancels), (2, 1, 0, 2));
}

#[test]
fn hand_built_plans_are_sorted_by_the_injector() {
    let mut plan = FaultPlan::none();
    plan.timed.push(TimedFault {
        at: Instant(5),
        fault: Fault::Kill {
            worker: WorkerId(0),
        },
    });
    plan.timed.push(TimedFault {
        at: Instant(1),
        fault: Fault::Kill {
            worker: WorkerId(1),
        },
    });
    plan.push(
        Instant(1),
        Fault::Kill {
            worker: WorkerId(2),
        },
    );
    let mut inj = FaultInjector::new(plan);
    let order: Vec<_> = std::iter::from_fn(|| inj.pop_due(Instant::MAX))
        .map(|t| t.fault)
        .collect();
    assert_eq!(
        order,
        [1, 2, 0].map(|w| Fault::Kill {
            worker: WorkerId(w)
        })
    );
}

fn fates(plan: &FaultPlan, n: u64) -> Vec<(FactFate, bool)> {
    let mut inj = FaultInjector::new(plan.clone());
    (0..n)
        .map(|i| {
            let f = inj.fact(
                WorkerId((i % 4) as u32),
                WorkerId(((i + 1) % 4) as u32),
                Instant(i * 1_000),
            );
            (f, inj.transfer_ok())
        })
        .collect()
}

#[test]
fn same_seed_same_fates_and_rates_follow_probabilities() {
    let plan =
        FaultPlan::parse("seed 11; drop 0.1; duplicate 0.2; delay 0.3 max 5ms; transfer-fail 0.25")
            .unwrap();
    let a = fates(&plan, 20_000);
    assert_eq!(a, fates(&plan, 20_000));
    let other = FaultPlan {
        seed: 12,
        ..plan.clone()
    };
    assert_ne!(a, fates(&other, 20_000));

    let mut inj = FaultInjector::new(plan);
    for i in 0..100_000u64 {
        if let FactFate::Deliver { extra_delay } = inj.fact(WorkerId(0), WorkerId(1), Instant(i)) {
            assert!(extra_delay <= Duration::from_millis(5));
        }
        inj.transfer_ok();
    }
    let c = inj.injected();
    let rate = |k: u64, n: u64| k as f64 / n as f64;
    assert!(
        (0.09..0.11).contains(&rate(c.facts_dropped, c.facts)),
        "{c}"
    );
    assert!(
        (0.17..0.19).contains(&rate(c.facts_duplicated, c.facts)),
        "{c}"
    );
    // Delivered copies: 0.9 * 1.2 per fact, 30% of them delayed.
    assert!(
        (0.30..0.345).contains(&rate(c.facts_delayed, c.facts)),
        "{c}"
    );
    assert!(
        (0.24..0.26).contains(&rate(c.transfers_failed, c.transfers)),
        "{c}"
    );
}

#[test]
fn draws_do_not_depend_on_outcomes() {
    // The same seed with and without an early partition: facts sent after
    // it ends meet the same fates, because cut facts still draw.
    let base = "seed 4; drop 0.2; duplicate 0.2; delay 0.5 max 1ms; transfer-fail 0.5";
    let plain = FaultPlan::parse(base).unwrap();
    let cut = FaultPlan::parse(&format!("{base}; partition 0 1 from 0s to 500us")).unwrap();
    let (a, b) = (fates(&plain, 2_000), fates(&cut, 2_000));
    assert_ne!(a[..500], b[..500]);
    assert_eq!(a[500..], b[500..]);
    // Transfers use their own stream: not calling transfer_ok leaves fact
    // fates unchanged.
    let mut inj = FaultInjector::new(plain);
    let alone: Vec<_> = (0..2_000u64)
        .map(|i| {
            inj.fact(
                WorkerId((i % 4) as u32),
                WorkerId(((i + 1) % 4) as u32),
                Instant(i * 1_000),
            )
        })
        .collect();
    assert_eq!(alone, a.iter().map(|x| x.0).collect::<Vec<_>>());
}

#[test]
fn generated_plans_are_seeded_and_well_formed() {
    let span = Duration::from_secs(10);
    let plan = FaultPlan::generate(42, 6, 5_000, span, 1.0);
    assert_eq!(plan, FaultPlan::generate(42, 6, 5_000, span, 1.0));
    assert_ne!(plan, FaultPlan::generate(43, 6, 5_000, span, 1.0));
    assert_eq!(plan.seed, 42);
    assert!(plan.timed.windows(2).all(|w| w[0].at <= w[1].at));
    let count = |f: fn(&Fault) -> bool| plan.timed.iter().filter(|t| f(&t.fault)).count();
    assert_eq!(count(|f| matches!(f, Fault::Kill { .. })), 4);
    assert_eq!(count(|f| matches!(f, Fault::Restart { .. })), 4);
    assert_eq!(count(|f| matches!(f, Fault::Partition { .. })), 3);
    assert_eq!(count(|f| matches!(f, Fault::Cancel { .. })), 250);
    for t in &plan.timed {
        assert!(t.at <= Instant::ZERO + span);
        match t.fault {
            Fault::Kill { worker } | Fault::Restart { worker } => assert!(worker.0 < 6),
            Fault::Partition { a, b, until } => {
                assert!(a != b && a.0 < 6 && b.0 < 6 && until > t.at);
            }
            Fault::Cancel { request } => assert!(request.0 < 5_000),
            Fault::ScaleUp { .. }
            | Fault::Ready { .. }
            | Fault::Drain { .. }
            | Fault::Remove { .. } => panic!("generate draws no scale events"),
        }
    }
    assert!((0.05..=0.1).contains(&plan.facts.drop));
    assert!((0.025..=0.05).contains(&plan.facts.duplicate));
    assert!((0.1..=0.2).contains(&plan.facts.delay));
    assert!((0.025..=0.05).contains(&plan.transfer_fail));
    assert!(plan.facts.max_delay >= Duration::from_millis(1));
    assert!(plan.facts.max_delay <= Duration::from_millis(20));
    assert_eq!(FaultPlan::parse(&plan.to_string()), Ok(plan));

    // Degenerate deployments and spans still give valid plans.
    for (w, r, s) in [
        (0, 0, Duration::ZERO),
        (1, 1, Duration::ZERO),
        (2, 3, Duration::from_nanos(1)),
    ] {
        let p = FaultPlan::generate(1, w, r, s, 1.0);
        assert_eq!(FaultPlan::parse(&p.to_string()), Ok(p));
    }
    assert!(FaultPlan::generate(1, 4, 10, span, f64::NAN).is_empty());
    assert!(FaultPlan::generate(1, 4, 10, span, -3.0).is_empty());
}

#[test]
fn counts_display() {
    let c = FaultCounts {
        kills: 1,
        facts: 10,
        facts_dropped: 2,
        ..FaultCounts::default()
    };
    assert_eq!(
        c.to_string(),
        "kills 1, restarts 0, partitions 0, cancels 0; facts 10: 0 cut by partition, \
         2 dropped, 0 duplicated, 0 delayed; transfers 0: 0 failed"
    );
}

#[test]
fn scale_directives_parse_locate_errors_and_round_trip() {
    use crate::scale::{FleetMember, ScalePool};
    let w = WorkerId;
    let text = "fleet 0 prefill; fleet 1 prefill absent; fleet 2 decode\n\
                startup-delay 30s; scale-up prefill at 10s; drain 2 at 1m\n";
    // `1m` is no unit of the plan text: the error names line and column.
    let e = FaultPlan::parse(text).unwrap_err();
    assert_eq!((e.line, e.column), (2, 56));
    let text = text.replace("1m", "60s");
    let plan = FaultPlan::parse(&text).unwrap();
    assert_eq!(
        plan.fleet.members[1],
        FleetMember {
            worker: w(1),
            pool: ScalePool::Prefill,
            absent: true
        }
    );
    assert_eq!(plan.fleet.startup_delay, Duration::from_secs(30));
    assert_eq!(
        plan.timed[0].fault,
        Fault::ScaleUp {
            pool: ScalePool::Prefill
        }
    );
    assert_eq!(plan.timed[1].fault, Fault::Drain { worker: w(2) });
    assert!(!plan.is_empty());
    assert_eq!(FaultPlan::parse(&plan.to_string()), Ok(plan.clone()));
    let more = FaultPlan::parse("ready 1 at 1s; remove 1 at 2s").unwrap();
    assert_eq!(FaultPlan::parse(&more.to_string()), Ok(more));

    let e = FaultPlan::parse("fleet 0 prefill\nfleet 0 decode").unwrap_err();
    assert_eq!(
        e.kind,
        FaultPlanErrorKind::FleetMemberTwice {
            worker: w(0),
            first_line: 1
        }
    );
    let e = FaultPlan::parse("scale-up gpu at 1s").unwrap_err();
    assert!(e.to_string().contains("a pool (prefill or decode)"), "{e}");
    let e = FaultPlan::parse("fleet 99999999 decode").unwrap_err();
    assert!(matches!(
        e.kind,
        FaultPlanErrorKind::FleetWorkerTooLarge { .. }
    ));
    // A plan without a fleet writes what it wrote before.
    assert!(!FaultPlan::none().to_string().contains("fleet"));
}
