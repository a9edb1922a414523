//! Properties of the fault plan text form and of the injector: parsing never
//! panics, what `Display` writes parses back to the same plan, the same plan
//! gives the same fates, an empty plan is harmless, and partitions cut
//! exactly their window in both directions.

use handoff_core::{Duration, Instant, RequestId, WorkerId};
use handoff_engine::fault::MAX_TIMED_FAULTS;
use handoff_engine::FactFate;
use handoff_engine::FactFaults;
use handoff_engine::Fault;
use handoff_engine::FaultInjector;
use handoff_engine::FaultPlan;
use proptest::prelude::*;

/// Inputs close to the grammar, so the parser gets past the first token:
/// directives with plausible arguments, some replaced by junk, joined by
/// random separators.
fn near_grammar() -> impl Strategy<Value = String> {
    let number = || {
        prop_oneof![
            "[0-9]{1,3}",
            "[0-9]{1,25}",
            "[-+]?[0-9]?\\.?[0-9]*(e-?[0-9]{1,3})?",
            Just("NaN".to_owned()),
            Just("inf".to_owned()),
        ]
    };
    let time = || {
        prop_oneof![
            "[0-9]{1,4}(ns|us|ms|s)",
            "-?[0-9]{0,22}(\\.[0-9]{0,40})?(ns|us|ms|s|µs)?",
        ]
    };
    let arg = prop_oneof![
        6 => number(),
        6 => time(),
        3 => prop_oneof![Just("at"), Just("from"), Just("to"), Just("max")].prop_map(str::to_owned),
        1 => any::<String>(),
    ];
    let shaped = prop_oneof![
        number().prop_map(|n| format!("seed {n}")),
        (number(), time()).prop_map(|(w, t)| format!("kill {w} at {t}")),
        (number(), time()).prop_map(|(w, t)| format!("restart {w} at {t}")),
        (number(), number(), time(), time())
            .prop_map(|(a, b, f, u)| format!("partition {a} {b} from {f} to {u}")),
        (number(), time()).prop_map(|(r, t)| format!("cancel {r} at {t}")),
        number().prop_map(|p| format!("drop {p}")),
        number().prop_map(|p| format!("duplicate {p}")),
        (number(), time()).prop_map(|(p, t)| format!("delay {p} max {t}")),
        number().prop_map(|p| format!("transfer-fail {p}")),
    ];
    let keyword = prop_oneof![
        Just("seed"),
        Just("kill"),
        Just("restart"),
        Just("partition"),
        Just("cancel"),
        Just("drop"),
        Just("duplicate"),
        Just("delay"),
        Just("transfer-fail"),
    ];
    let loose = (keyword, prop::collection::vec(arg, 0..9)).prop_map(|(k, args)| {
        std::iter::once(k.to_owned())
            .chain(args)
            .collect::<Vec<_>>()
            .join(" ")
    });
    let directive = prop_oneof![4 => shaped, 4 => loose, 1 => any::<String>()];
    let sep = prop_oneof![
        Just("\n"),
        Just("; "),
        Just(";"),
        Just(" # note\n"),
        Just("\r\n"),
        Just("\t;\t")
    ];
    prop::collection::vec((directive, sep), 0..12)
        .prop_map(|v| v.into_iter().map(|(d, s)| d + s).collect())
}

fn worker() -> impl Strategy<Value = WorkerId> {
    prop_oneof![0u32..8, any::<u32>()].prop_map(WorkerId)
}

fn instant() -> impl Strategy<Value = Instant> {
    prop_oneof![
        (0u64..10_000).prop_map(Instant::from_millis),
        any::<u64>().prop_map(Instant),
    ]
}

fn probability() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(0.0),
        Just(1.0),
        0.0..=1.0f64,
        (0u32..=100).prop_map(|p| f64::from(p) / 100.0)
    ]
}

/// Any plan the parser accepts: distinct partition ends, partitions that
/// end after they start, probabilities in [0, 1].
fn plan() -> impl Strategy<Value = FaultPlan> {
    let fault = prop_oneof![
        (instant(), worker()).prop_map(|(at, worker)| (at, Fault::Kill { worker })),
        (instant(), worker()).prop_map(|(at, worker)| (at, Fault::Restart { worker })),
        (instant(), any::<u64>()).prop_map(|(at, r)| (
            at,
            Fault::Cancel {
                request: RequestId(r)
            }
        )),
        (worker(), worker(), 0u64..u64::MAX, 1u64..u64::MAX)
            .prop_filter("distinct workers", |(a, b, _, _)| a != b)
            .prop_map(|(a, b, from, len)| {
                let until = Instant(from.saturating_add(len));
                (Instant(from), Fault::Partition { a, b, until })
            }),
    ];
    (
        any::<u64>(),
        prop::collection::vec(fault, 0..40),
        (probability(), probability(), probability(), probability()),
        any::<u64>(),
    )
        .prop_map(
            |(seed, faults, (drop, duplicate, delay, transfer_fail), max)| {
                let mut plan = FaultPlan {
                    seed,
                    facts: FactFaults {
                        drop,
                        duplicate,
                        delay,
                        max_delay: Duration::from_nanos(max),
                    },
                    transfer_fail,
                    ..FaultPlan::none()
                };
                for (at, f) in faults {
                    plan.push(at, f);
                }
                plan
            },
        )
}

fn generated() -> impl Strategy<Value = FaultPlan> {
    (
        any::<u64>(),
        0u32..20,
        prop_oneof![0u64..100, any::<u64>()],
        prop_oneof![0u64..1_000, any::<u64>()].prop_map(Duration::from_nanos),
        prop_oneof![Just(0.0), Just(1.0), 0.0..=1.0f64],
    )
        .prop_map(|(seed, w, r, span, i)| FaultPlan::generate(seed, w, r, span, i))
}

/// A run of fact and transfer calls.
#[derive(Clone, Debug)]
enum Call {
    Fact(WorkerId, WorkerId, Instant),
    Transfer,
    Pop(Instant),
}

fn calls() -> impl Strategy<Value = Vec<Call>> {
    let w = || (0u32..6).prop_map(WorkerId);
    prop::collection::vec(
        prop_oneof![
            4 => (w(), w(), (0u64..20_000_000_000).prop_map(Instant)).prop_map(|(a, b, t)| Call::Fact(a, b, t)),
            1 => Just(Call::Transfer),
            1 => (0u64..20_000_000_000).prop_map(|t| Call::Pop(Instant(t))),
        ],
        0..300,
    )
}

#[derive(Debug, PartialEq)]
enum Answer {
    Fate(FactFate),
    Transfer(bool),
    Popped(Option<handoff_engine::TimedFault>),
}

fn run(plan: &FaultPlan, calls: &[Call]) -> (Vec<Answer>, handoff_engine::FaultCounts) {
    let mut inj = FaultInjector::new(plan.clone());
    let answers = calls
        .iter()
        .map(|c| match *c {
            Call::Fact(a, b, t) => Answer::Fate(inj.fact(a, b, t)),
            Call::Transfer => Answer::Transfer(inj.transfer_ok()),
            Call::Pop(t) => Answer::Popped(inj.pop_due(t)),
        })
        .collect();
    (answers, inj.injected())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        let _ = FaultPlan::parse(&text).map_err(|e| e.to_string());
    }

    #[test]
    fn near_grammar_text_never_panics_and_errors_are_located(text in near_grammar()) {
        match FaultPlan::parse(&text) {
            Ok(plan) => {
                prop_assert!(plan.timed.len() <= MAX_TIMED_FAULTS);
                prop_assert!(plan.timed.windows(2).all(|w| w[0].at <= w[1].at));
                prop_assert_eq!(FaultPlan::parse(&plan.to_string()), Ok(plan));
            }
            Err(e) => {
                let lines = text.split('\n').count();
                prop_assert!(e.line >= 1 && e.line <= lines, "{e} in {text:?}");
                let width = text.split('\n').nth(e.line - 1).unwrap().chars().count();
                prop_assert!(e.column >= 1 && e.column <= width + 1, "{e} in {text:?}");
                let prefix = format!("line {}, column {}: ", e.line, e.column);
                prop_assert!(e.to_string().starts_with(&prefix));
            }
        }
    }

    #[test]
    fn display_parse_round_trips_generated_plans(plan in generated()) {
        prop_assert!(plan.timed.windows(2).all(|w| w[0].at <= w[1].at));
        let text = plan.to_string();
        prop_assert_eq!(FaultPlan::parse(&text), Ok(plan), "{}", text);
    }

    #[test]
    fn display_parse_round_trips_any_valid_plan(plan in plan()) {
        let text = plan.to_string();
        prop_assert_eq!(FaultPlan::parse(&text), Ok(plan), "{}", text);
    }

    #[test]
    fn same_plan_same_answers(plan in generated(), calls in calls()) {
        prop_assert_eq!(run(&plan, &calls), run(&plan, &calls));
        // The same plan after a text round trip behaves the same too.
        let reparsed = FaultPlan::parse(&plan.to_string()).unwrap();
        prop_assert_eq!(run(&plan, &calls), run(&reparsed, &calls));
    }

    #[test]
    fn empty_plan_delivers_everything_on_time(seed in any::<u64>(), calls in calls()) {
        let plan = FaultPlan { seed, ..FaultPlan::none() };
        let (answers, counts) = run(&plan, &calls);
        for a in answers {
            match a {
                Answer::Fate(f) => prop_assert_eq!(f, FactFate::Deliver { extra_delay: Duration::ZERO }),
                Answer::Transfer(ok) => prop_assert!(ok),
                Answer::Popped(p) => prop_assert_eq!(p, None),
            }
        }
        prop_assert_eq!(counts.facts_partitioned + counts.facts_dropped + counts.facts_delayed, 0);
    }

    #[test]
    fn partitions_cut_exactly_their_window_both_ways(
        a in 0u32..4,
        b in 0u32..4,
        from in 0u64..1_000,
        len in 1u64..1_000,
        probes in prop::collection::vec((0u64..2_500, 0u32..4, 0u32..4), 1..100),
    ) {
        prop_assume!(a != b);
        let (wa, wb) = (WorkerId(a), WorkerId(b));
        let mut plan = FaultPlan::none();
        plan.push(Instant(from), Fault::Partition { a: wa, b: wb, until: Instant(from + len) });
        let mut inj = FaultInjector::new(plan);
        for (t, x, y) in probes {
            let same_pair = (x, y) == (a, b) || (x, y) == (b, a);
            let inside = from <= t && t < from + len;
            let fate = inj.fact(WorkerId(x), WorkerId(y), Instant(t));
            prop_assert_eq!(fate == FactFate::Drop, same_pair && inside, "t={} {}->{}", t, x, y);
            prop_assert_eq!(inj.is_partitioned(wa, wb, Instant(t)), inside);
            prop_assert_eq!(inj.is_partitioned(wb, wa, Instant(t)), inside);
        }
    }

    #[test]
    fn pop_due_hands_out_each_fault_once_in_order(plan in plan(), steps in prop::collection::vec(any::<u64>(), 0..20)) {
        let mut inj = FaultInjector::new(plan.clone());
        let mut steps = steps;
        steps.sort_unstable();
        steps.push(u64::MAX);
        let mut taken = Vec::new();
        for now in steps {
            while let Some(t) = inj.pop_due(Instant(now)) {
                prop_assert!(t.at <= Instant(now));
                taken.push(t);
            }
            if let Some(next) = inj.next_timed() {
                prop_assert!(next > Instant(now));
            }
        }
        prop_assert_eq!(taken, plan.timed);
    }
}
