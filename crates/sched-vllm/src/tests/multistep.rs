//! One pass per `step` call versus as many stable passes per call as the
//! core allows must be indistinguishable: same tokens, same finish and pin
//! times, same command outcomes, same KV events, same final state.

use super::*;
use handoff_core::{Rng, SchedulerCommand as C};
use handoff_perf::PolynomialPerf;
use proptest::prelude::*;

/// Commands at their arrival times (sorted).
type Workload = Vec<(Instant, SchedulerCommand)>;

#[derive(Debug, PartialEq)]
struct Run {
    tokens: BTreeMap<RequestId, u64>,
    firsts: BTreeMap<RequestId, u32>,
    first_at: Vec<(RequestId, Instant)>,
    finished: Vec<(RequestId, Instant)>,
    pinned: Vec<(HandoffId, Instant)>,
    preempted: Vec<RequestId>,
    granted: Vec<(HandoffId, Instant)>,
    refused: Vec<HandoffId>,
    outcomes: Vec<CommandOutcome>,
    events: Vec<KvEvent>,
    passes: u64,
    end: Instant,
    state: String,
}

/// Replays `work`; `multi` lets each call run until the next arrival.
fn drive(cfg: VllmConfig, work: &Workload, multi: bool) -> (Run, u64) {
    let perf = PolynomialPerf { speedup_ratio: 1.0 };
    let mut h = Harness::new(VllmCore::with_perf(cfg, perf));
    let mut next = 0;
    let mut calls = 0u64;
    let mut outcomes = Vec::new();
    let mut pinned = Vec::new();
    loop {
        while next < work.len() && work[next].0 <= h.now {
            outcomes.push(h.apply(work[next].1.clone()));
            next += 1;
        }
        let arrival = work.get(next).map_or(Instant::MAX, |w| w.0);
        let horizon = if multi { arrival } else { h.now };
        let steps = if h.core.is_empty() {
            0
        } else {
            h.step_to(horizon)
        };
        calls += 1;
        for p in &h.out.pinned {
            pinned.push((p.id, h.now));
        }
        if steps == 0 {
            if next >= work.len() {
                break;
            }
            h.now = h.now.max(arrival);
        }
        assert!(calls < 10_000_000, "runaway");
    }
    let state = h.core.fingerprint();
    (
        Run {
            tokens: h.tokens,
            firsts: h.firsts,
            first_at: h.first_at,
            finished: h.finished,
            pinned,
            preempted: h.preempted,
            granted: h.granted,
            refused: h.refused,
            outcomes,
            events: h.events,
            passes: h.passes,
            end: h.now,
            state,
        },
        calls,
    )
}

/// A seeded mix of ordinary requests sharing a few prefixes, handoff
/// prefills released or cancelled later, and reservations activated or
/// cancelled later.
fn workload(seed: u64, n: usize) -> Workload {
    let mut rng = Rng::seeded(seed);
    let mut work = Vec::new();
    for i in 0..n as u64 {
        let at = Instant(rng.below(2_000_000_000));
        let prompt = 1 + rng.below(400) as u32;
        let max_out = 1 + rng.below(200) as u32;
        let group = rng.below(4);
        let shared = rng.below(20) as usize;
        let mut hashes = content(group + 1, shared);
        hashes.extend(content(1000 + i, 30));
        let r = req(i, prompt, max_out, &hashes);
        let id = HandoffId(u128::from(i) + 1);
        let later = at + Duration::from_nanos(rng.below(1_500_000_000));
        match rng.below(6) {
            0 => {
                work.push((at, C::SubmitHandoffPrefill { id, request: r }));
                let end = if rng.below(4) == 0 {
                    C::CancelSource { id }
                } else {
                    C::ReleaseSource { id }
                };
                work.push((later, end));
            }
            1 => {
                work.push((at, C::ReserveDestination { id, request: r }));
                let end = if rng.below(4) == 0 {
                    C::CancelDestination { id }
                } else {
                    C::ActivateDestination { id }
                };
                work.push((later, end));
            }
            _ => work.push((at, C::Submit(r))),
        }
    }
    work.sort_by_key(|w| w.0);
    work
}

fn tight() -> VllmConfig {
    VllmConfig {
        num_blocks: 120,
        max_num_seqs: 6,
        max_num_batched_tokens: 256,
        watermark: 0.02,
        ..VllmConfig::default()
    }
}

fn roomy() -> VllmConfig {
    VllmConfig {
        num_blocks: 2000,
        ..VllmConfig::default()
    }
}

fn assert_equivalent(cfg: VllmConfig, work: &Workload) -> (Run, u64, u64) {
    let (single, single_calls) = drive(cfg, work, false);
    let (multi, multi_calls) = drive(cfg, work, true);
    assert_eq!(single.tokens, multi.tokens);
    assert_eq!(single.firsts, multi.firsts);
    assert_eq!(single.first_at, multi.first_at);
    assert_eq!(single.finished, multi.finished);
    assert_eq!(single.pinned, multi.pinned);
    assert_eq!(single.preempted, multi.preempted);
    assert_eq!(single.granted, multi.granted);
    assert_eq!(single.refused, multi.refused);
    assert_eq!(single.outcomes, multi.outcomes);
    assert_eq!(single.events, multi.events);
    assert_eq!(single.passes, multi.passes);
    assert_eq!(single.end, multi.end);
    assert_eq!(single.state, multi.state);
    (single, single_calls, multi_calls)
}

#[test]
fn single_and_multi_pass_agree_on_a_small_workload() {
    for (cfg, name) in [(tight(), "tight"), (roomy(), "roomy")] {
        let work = workload(42, 24);
        let (run, single_calls, multi_calls) = assert_equivalent(cfg, &work);
        let passes = run.passes;
        assert!(
            passes > 200,
            "{name}: {passes} passes is too small a workload"
        );
        assert!(
            !run.pinned.is_empty(),
            "{name}: no handoff prefill completed"
        );
        assert!(!run.granted.is_empty(), "{name}: no reservation granted");
        if name == "tight" {
            assert!(!run.preempted.is_empty(), "tight: expected preemption");
            assert!(
                !run.refused.is_empty(),
                "tight: expected a refused reservation"
            );
        }
        assert!(
            multi_calls * 3 < single_calls,
            "{name}: multi-pass should need far fewer calls ({multi_calls} vs {single_calls})"
        );
    }
}

#[test]
fn pure_decode_runs_to_the_first_finish_in_one_call() {
    let mut h = Harness::new(VllmCore::new(roomy()));
    for i in 0..4 {
        h.apply(C::Submit(req(i, 40, 100 + i as u32 * 10, &[])));
    }
    h.step();
    assert_eq!(h.out.tokens.len(), 4);
    h.step_to(Instant::MAX);
    // Every request got 99 more tokens; the shortest finished in the last
    // pass of the call.
    assert_eq!(h.out.steps, 99);
    assert_eq!(h.out.finished, vec![RequestId(0)]);
    assert!(h.out.tokens.iter().all(|t| t.tokens == 99 && !t.first));
    assert!(
        h.out.last_step >= h.out.first_step,
        "decode slows as KV grows"
    );
    assert!(h.out.duration >= h.out.first_step * 99);
    // A horizon cuts the run short: only passes starting before it run.
    let start = h.now;
    h.step_to(start + Duration::from_millis(1));
    assert_eq!(h.out.steps, 1);
    h.step_to(start + Duration::from_secs(3600));
    assert_eq!(h.out.finished, vec![RequestId(1)]);
}

#[test]
fn multi_pass_stops_where_a_boundary_allocation_could_fail() {
    // 3 decodes of 16-token prompts; 4 free blocks left after prefill.
    let c = VllmConfig {
        num_blocks: 7,
        ..VllmConfig::default()
    };
    let mut h = Harness::new(VllmCore::new(c));
    for i in 0..3 {
        h.apply(C::Submit(req(i, 16, 60, &[])));
    }
    h.step();
    assert_eq!(h.cap().free_blocks(), 4);
    h.step_to(Instant::MAX);
    // The call's first pass crosses a boundary for all three (3 blocks, 1
    // left); the next crossing, 16 passes later, would need 3 more. So the
    // call covers 1 + 15 passes and stops before the pass that must preempt.
    assert_eq!(h.out.steps, 16);
    assert!(h.out.preempted.is_empty());
    assert_eq!(h.cap().free_blocks(), 1);
    h.step_to(Instant::MAX);
    assert_eq!(h.out.steps, 1);
    // Request 0 takes the last block; request 1 preempts the newest (2).
    assert_eq!(h.out.preempted, vec![RequestId(2)]);
    let mut guard = 0;
    while !h.core.is_empty() {
        h.step_to(Instant::MAX);
        guard += 1;
        assert!(guard < 10_000);
    }
    assert!(
        !h.preempted.is_empty(),
        "the pool is too small for all three"
    );
    assert_eq!(h.tokens.values().sum::<u64>(), 180);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn single_and_multi_pass_agree(seed in any::<u64>(), n in 1usize..16, roomy_pool in any::<bool>()) {
        let cfg = if roomy_pool { roomy() } else { tight() };
        assert_equivalent(cfg, &workload(seed, n));
    }

    /// [`check_quiet_floor`] on the same generated workloads.
    #[test]
    fn quiet_floor_holds(seed in any::<u64>(), n in 1usize..16, roomy_pool in any::<bool>()) {
        let cfg = if roomy_pool { roomy() } else { tight() };
        check_quiet_floor(cfg, &workload(seed, n));
    }
}

/// Steps `work` one pass at a time and holds every `quiet_floor` promise to
/// the steps that follow it before the next command arrives (a command is
/// an input, which voids them): a step ending before `from + next` breaks
/// it, as does one ending before `from + pass` with more than tokens, or
/// before `from + kv` with more than tokens and KV events. Returns how many
/// (promise, later step) pairs were checked.
fn check_quiet_floor(cfg: VllmConfig, work: &Workload) -> u64 {
    let perf = PolynomialPerf { speedup_ratio: 1.0 };
    let mut h = Harness::new(VllmCore::with_perf(cfg, perf));
    let mut next = 0;
    let mut promises = handoff_core::testing::QuietPromises::default();
    for _ in 0..1_000_000 {
        while next < work.len() && work[next].0 <= h.now {
            h.apply(work[next].1.clone());
            next += 1;
            promises.input();
        }
        let arrival = work.get(next).map_or(Instant::MAX, |w| w.0);
        let kv_before = h.events.len();
        let steps = if h.core.is_empty() { 0 } else { h.step() };
        let kv = h.events.len() > kv_before;
        if steps > 0 || !h.out.is_quiet() || kv {
            promises.released(h.now, h.out.is_quiet(), kv);
        }
        if steps == 0 {
            if next >= work.len() {
                return promises.checked();
            }
            h.now = h.now.max(arrival);
            continue;
        }
        promises.promised(h.now, h.core.quiet_floor());
    }
    panic!("runaway");
}

#[test]
fn quiet_floor_holds_on_a_small_workload() {
    for cfg in [tight(), roomy()] {
        let checked = check_quiet_floor(cfg, &workload(42, 24));
        assert!(checked > 500, "only {checked} promises checked");
    }
}

proptest! {
    /// The closed form against the search it replaced: the largest `k`
    /// whose boundary blocks, summed request by request, fit `free`.
    #[test]
    fn passes_fitting_is_the_largest_k_that_fits(
        hist in proptest::collection::vec(0u64..6, 1..20),
        free in 0u64..400,
    ) {
        let bs = hist.len() as u64;
        let blocks = |k: u64| -> u64 {
            hist.iter()
                .enumerate()
                .map(|(room, &n)| n * k.saturating_sub(room as u64).div_ceil(bs))
                .sum()
        };
        let got = crate::step::passes_fitting(&hist, free);
        if hist.iter().sum::<u64>() == 0 {
            prop_assert_eq!(got, u64::MAX);
        } else {
            prop_assert!(blocks(got) <= free);
            prop_assert!(blocks(got + 1) > free);
        }
    }
}
