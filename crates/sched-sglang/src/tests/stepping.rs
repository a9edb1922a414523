//! One pass per call versus many: identical results.

use super::harness::req;
use crate::{SglangConfig, SglangCore};
use handoff_core::accounting::check_identity;
use handoff_core::{
    CommandOutcome, Duration, HandoffId, Instant, KvCapacitySnapshot, KvEvent, Request, RequestId,
    SchedulerCommand, SchedulerCore, StepOutput,
};
use handoff_perf::PolynomialPerf;
use std::collections::BTreeMap;

/// Everything observable about a run.
#[derive(Debug, PartialEq)]
struct Transcript {
    /// Per request: tokens, first-token time, finish time, retractions.
    requests: BTreeMap<RequestId, (u64, Option<Instant>, Option<Instant>, u32)>,
    pinned: Vec<(HandoffId, u64, Instant)>,
    events: Vec<KvEvent>,
    passes: u64,
    prefill_tokens: u64,
    end: Instant,
    capacity: KvCapacitySnapshot,
    ratio_bits: u64,
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    Single,
    Horizon(Duration),
    Unbounded,
}

fn workload(long_outputs: bool) -> Vec<Request> {
    let mut v = Vec::new();
    for i in 0..12u64 {
        let shared = [1, 2, 3];
        let mut chunks = shared[..(i % 4) as usize].to_vec();
        chunks.extend([100 + i, 200 + i]);
        let prompt = 100 + (i * 37 % 300) as u32;
        let out = if long_outputs {
            100 + (i * 53 % 300) as u32
        } else {
            5 + (i * 53 % 120) as u32
        };
        v.push(req(i, prompt, out, &chunks));
    }
    v
}

fn run(cfg: &SglangConfig, mode: Mode) -> Transcript {
    let mut core = SglangCore::new(cfg.clone(), PolynomialPerf::default()).expect("config");
    let mut out = StepOutput::default();
    let mut t = Transcript {
        requests: BTreeMap::new(),
        pinned: Vec::new(),
        events: Vec::new(),
        passes: 0,
        prefill_tokens: 0,
        end: Instant::ZERO,
        capacity: KvCapacitySnapshot::default(),
        ratio_bits: 0,
    };
    let mut now = Instant::ZERO;
    let reqs = workload(cfg.max_new_tokens_clip < 16);
    let (first, second) = reqs.split_at(8);
    // A destination and a source ride along; the reservation goes first so
    // the waiting requests' headroom does not refuse it.
    let dst = HandoffId(1);
    assert!(matches!(
        core.apply(
            SchedulerCommand::ReserveDestination {
                id: dst,
                request: req(50, 300, 40, &[1, 2, 3, 9]),
            },
            now
        ),
        CommandOutcome::Reserved(_)
    ));
    for r in first {
        assert_eq!(
            core.apply(SchedulerCommand::Submit(r.clone()), now),
            CommandOutcome::Submitted
        );
    }
    core.apply(
        SchedulerCommand::SubmitHandoffPrefill {
            id: HandoffId(2),
            request: req(51, 700, 1, &[1, 2, 3, 8]),
        },
        now,
    );
    let mut wave_two = false;
    let mut activated = false;
    // `quiet_floor` promises made at step ends since the last command.
    let mut promises = handoff_core::testing::QuietPromises::default();
    for _ in 0..100_000 {
        let horizon = match mode {
            Mode::Single => now,
            Mode::Horizon(d) => now + d,
            Mode::Unbounded => Instant::MAX,
        };
        core.step(now, horizon, &mut out);
        check_identity(&core.capacity()).expect("identity");
        core.check_consistency().expect("consistent");
        let end = now + out.duration;
        let mut kv_now = Vec::new();
        core.drain_kv_events(&mut kv_now);
        if out.steps > 0 || !out.is_quiet() || !kv_now.is_empty() {
            promises.released(end, out.is_quiet(), !kv_now.is_empty());
        }
        t.events.extend(kv_now);
        if out.steps > 0 {
            promises.promised(end, core.quiet_floor());
        }
        for r in &out.shipped_first_tokens {
            let entry = t.requests.entry(*r).or_default();
            entry.1 = Some(now);
            entry.0 += 1;
        }
        for e in &out.tokens {
            let entry = t.requests.entry(e.request).or_default();
            if e.first {
                entry.1 = Some(now + out.first_step);
            }
            entry.0 += u64::from(e.tokens);
        }
        for (i, r) in out.finished.iter().enumerate() {
            let at = if i < out.finished_at_start { now } else { end };
            t.requests.entry(*r).or_default().2 = Some(at);
        }
        for r in &out.preempted {
            t.requests.entry(*r).or_default().3 += 1;
        }
        for p in &out.pinned {
            // Prefill passes are always a call's first pass.
            t.pinned.push((p.id, p.blocks, now + out.first_step));
        }
        t.passes += out.steps;
        t.prefill_tokens += out.prefill_tokens;
        now = end;
        // Commands only between calls that are idle in every mode, so that
        // all modes apply them at the same state.
        if out.steps == 0 {
            // Commands are inputs: they void every promise.
            promises.input();
            if !activated {
                activated = true;
                core.apply(SchedulerCommand::ActivateDestination { id: dst }, now);
                core.apply(SchedulerCommand::ReleaseSource { id: HandoffId(2) }, now);
                continue;
            }
            if !wave_two {
                wave_two = true;
                for r in second {
                    core.apply(SchedulerCommand::Submit(r.clone()), now);
                }
                continue;
            }
            break;
        }
    }
    assert!(core.is_drained());
    t.end = now;
    t.capacity = core.capacity();
    t.ratio_bits = core.new_token_ratio().to_bits();
    t
}

#[test]
fn single_and_multi_pass_stepping_agree() {
    for page in [1u32, 16] {
        for pool in [1 << 16, 1280] {
            let mut cfg = SglangConfig {
                total_pages: pool / u64::from(page),
                max_running_requests: 6,
                prealloc_slot_margin: 2,
                chunked_prefill_size: 256,
                ..SglangConfig::with_page_size(page)
            };
            if pool == 1280 {
                // Optimistic admission: decode runs out of pages.
                cfg.max_new_tokens_clip = 8;
                cfg.init_new_token_ratio = 0.0;
                cfg.min_new_token_ratio = 0.0;
                cfg.new_token_ratio_decay = 0.0;
                cfg.max_running_requests = 12;
            }
            let single = run(&cfg, Mode::Single);
            assert!(single.passes > 100);
            assert_eq!(single.requests.len(), 13);
            for (tokens, first, fin, _) in single.requests.values() {
                assert!(*tokens > 0 && first.is_some() && fin.is_some());
            }
            let retractions: u32 = single.requests.values().map(|r| r.3).sum();
            let evictions = single
                .events
                .iter()
                .any(|e| matches!(e.data, handoff_core::KvEventData::Removed { .. }));
            if pool == 1280 {
                assert!(
                    retractions > 0 && evictions,
                    "the small pool is under pressure: {retractions} {evictions}"
                );
            }
            let unbounded = run(&cfg, Mode::Unbounded);
            assert_eq!(single, unbounded, "page {page} pool {pool}");
            let horizon = run(&cfg, Mode::Horizon(Duration::from_millis(40)));
            assert_eq!(single, horizon, "page {page} pool {pool}");
        }
    }
}

#[test]
fn multi_pass_actually_batches_passes() {
    let cfg = SglangConfig {
        total_pages: 1 << 16,
        ..SglangConfig::default()
    };
    let mut core = SglangCore::new(cfg, PolynomialPerf::default()).expect("config");
    for i in 0..4 {
        core.apply(
            SchedulerCommand::Submit(req(i, 100, 50 + i as u32 * 10, &[i])),
            Instant::ZERO,
        );
    }
    let mut out = StepOutput::default();
    core.step(Instant::ZERO, Instant::MAX, &mut out);
    // The prefill pass, then decode passes until request 0 (50 tokens)
    // finishes in the last one.
    assert_eq!(out.steps, 50);
    assert_eq!(out.prefill_tokens, 400);
    assert_eq!(out.tokens.len(), 4);
    assert!(out.tokens.iter().all(|e| e.tokens == 50 && e.first));
    assert_eq!(out.finished, vec![RequestId(0)]);
    let now = Instant::ZERO + out.duration;
    // Three requests decode on, the first to finish 10 passes from here:
    // nothing but tokens comes before the tenth pass ends, which takes at
    // least ten times the next one.
    let floor = core.quiet_floor();
    assert!(floor.next > Duration::ZERO);
    assert_eq!(floor.pass, floor.next * 10);
    assert_eq!(floor.kv, floor.pass);
    core.step(now, Instant::MAX, &mut out);
    assert_eq!(out.steps, 10);
    assert_eq!(out.first_step, floor.next);
    assert!(out.duration >= floor.pass);
    assert!(out.tokens.iter().all(|e| e.tokens == 10 && !e.first));
    assert_eq!(out.finished, vec![RequestId(1)]);
    assert!(
        out.last_step >= out.first_step,
        "decode cost grows with use"
    );
    assert!(out.duration >= out.first_step + out.last_step);
    assert_eq!(out.passes.len(), 10, "every pass's time is listed");
    assert_eq!(out.passes.iter().copied().sum::<Duration>(), out.duration);
    // A horizon limits the passes by end time: the first always runs, the
    // others end by the horizon.
    let now = now + out.duration;
    let horizon = now + out.last_step * 3;
    core.step(now, horizon, &mut out);
    assert!(out.steps >= 2);
    assert!(now + out.duration <= horizon, "the last pass ended in time");
    assert!(
        now + out.duration + out.last_step > horizon,
        "the next pass would end too late"
    );
}

#[test]
fn multi_pass_stops_before_a_pass_that_would_need_eviction() {
    // Page 16: 4 requests at 100 tokens each need a page every 16 passes.
    let cfg = SglangConfig {
        total_pages: 40,
        max_new_tokens_clip: 8,
        ..SglangConfig::with_page_size(16)
    };
    let mut core = SglangCore::new(cfg, PolynomialPerf::default()).expect("config");
    for i in 0..4 {
        core.apply(
            SchedulerCommand::Submit(req(i, 100, 500, &[i])),
            Instant::ZERO,
        );
    }
    let mut out = StepOutput::default();
    core.step(Instant::ZERO, Instant::ZERO, &mut out);
    // 4 x 7 pages used, 12 free: three page crossings per request are free.
    assert_eq!(core.free_pages(), 40 - 28);
    core.step(Instant::ZERO, Instant::MAX, &mut out);
    // 100 -> 112 fills page 7; then pages are needed at 112, 128, 144.
    // 12 free pages cover three crossings for four requests: 1 + 12 + 16 +
    // 16 passes keep computed <= 160, the fourth crossing needs eviction.
    assert_eq!(out.steps, 60);
    assert_eq!(core.free_pages(), 0);
    core.step(Instant::ZERO, Instant::MAX, &mut out);
    assert_eq!(
        out.steps, 1,
        "a pass with eviction or retraction runs alone"
    );
    assert!(!out.preempted.is_empty());
}

/// A request's tokens in a call are counted from the call's first pass
/// (`StepOutput::tokens`), so a call whose first pass is a prefill that the
/// running batch sat out (no mixed chunk: SGLang runs the prefill batch
/// alone) ends after it; with a mixed chunk the batch decodes in that pass
/// and the call goes on.
#[test]
fn a_prefill_pass_the_batch_sat_out_ends_its_call() {
    for mixed in [false, true] {
        let cfg = SglangConfig {
            total_pages: 1 << 16,
            enable_mixed_chunk: mixed,
            ..SglangConfig::default()
        };
        let mut core = SglangCore::new(cfg, PolynomialPerf::default()).expect("config");
        core.apply(
            SchedulerCommand::Submit(req(0, 100, 200, &[0])),
            Instant::ZERO,
        );
        let mut out = StepOutput::default();
        core.step(Instant::ZERO, Instant::ZERO, &mut out);
        assert_eq!(out.prefill_tokens, 100);
        let now = Instant::ZERO + out.duration;
        core.apply(SchedulerCommand::Submit(req(1, 100, 200, &[1])), now);
        core.step(now, Instant::MAX, &mut out);
        assert_eq!(out.prefill_tokens, 100, "mixed {mixed}");
        let running = out.tokens.iter().find(|e| e.request == RequestId(0));
        if mixed {
            assert!(out.steps > 1, "the batch decoded in the prefill pass");
            assert_eq!(running.map(|e| u64::from(e.tokens)), Some(out.steps));
        } else {
            assert_eq!(out.steps, 1, "the batch sat the prefill pass out");
            assert!(running.is_none());
            let now = now + out.duration;
            core.step(now, Instant::MAX, &mut out);
            assert!(out.steps > 1, "decode passes follow in the next call");
        }
    }
}
