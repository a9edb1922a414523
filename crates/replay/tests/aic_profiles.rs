//! The profiles exported from AIConfigurator (`profiles/aic/`) against the
//! predictions the exporter wrote beside them: each profile's `checks` are
//! AIC's own `predict_prefill_latency` / `predict_decode_latency` at a
//! dozen probe shapes, mostly between grid points. Single requests and
//! fixed batches run through the profile's own engine core, and the time to
//! first token (a prefill after a cached prefix) and the inter-token
//! latency (a decode pass of the whole batch) must be within 2% of AIC.

use handoff_core::{Backend, Duration, Instant, Request, RequestId, SchedulerCommand, StepOutput};
use handoff_profiles::profile_file::{self, ProfileFile};
use handoff_replay::{make_core, DeploymentConfig, EngineSpec, PerfChoice, Replay};
use handoff_workload::TraceItem;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The shipped exported profiles, by path.
fn shipped() -> Vec<(PathBuf, ProfileFile)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../profiles/aic");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let f = profile_file::load_file(&p).unwrap_or_else(|e| panic!("{e}"));
            (p, f)
        })
        .collect()
}

fn request(id: u64, prompt: u64, output: u32, hashes: Vec<u64>) -> Request {
    Request {
        id: RequestId(id),
        prompt_tokens: u32::try_from(prompt).unwrap(),
        max_output_tokens: output,
        prefix_hashes: hashes,
        hash_block_tokens: 16,
        session: None,
        arrival: Instant::ZERO,
        lora: None,
    }
}

fn spec(
    backend: Backend,
    perf: &PerfChoice,
    kv_tokens: u64,
    batched: u64,
    running: u32,
) -> EngineSpec {
    EngineSpec {
        backend,
        kv_tokens,
        // 16-token pages for SGLang too (its --page-size 16): pass times do
        // not depend on it, and batches of 14M tokens allocate 16x less.
        block_size: 16,
        max_running: running,
        max_batched_tokens: u32::try_from(batched).unwrap(),
        perf: perf.clone(),
        ..EngineSpec::default()
    }
}

/// Steps `core` one pass at a time from `now` until `done` says a pass is
/// the one wanted; returns it and the time after it.
fn step_until(
    core: &mut handoff_core::CoreBox,
    mut now: Instant,
    done: impl Fn(&StepOutput) -> bool,
) -> (StepOutput, Instant) {
    for _ in 0..100_000 {
        let mut out = StepOutput::default();
        core.step(now, now, &mut out);
        assert!(out.steps > 0, "the core stalled");
        now = now + out.duration;
        if done(&out) {
            return (out, now);
        }
    }
    panic!("no such pass in 100000");
}

/// TTFT of one request of `cached + new` tokens whose first `cached`
/// tokens an earlier request left in the prefix cache: its prefill pass.
fn ttft(backend: Backend, perf: &PerfChoice, new: u64, cached: u64) -> Duration {
    let total = new + cached;
    let mut core = make_core(&spec(backend, perf, 4 * total + 4096, total + 16, 16)).unwrap();
    let hashes: Vec<u64> = (1..=cached / 16).collect();
    let mut now = Instant::ZERO;
    if cached > 0 {
        // One block longer than the prefix (its own content): engines keep
        // a finished request's prompt but its last block may go (SGLang's
        // radix insert stops short of the last token).
        core.apply(
            SchedulerCommand::Submit(request(1, cached + 16, 1, hashes.clone())),
            now,
        );
        now = step_until(&mut core, now, |o| !o.finished.is_empty()).1;
    }
    core.apply(SchedulerCommand::Submit(request(2, total, 2, hashes)), now);
    let (out, _) = step_until(&mut core, now, |o| o.prefill_tokens > 0);
    assert_eq!(
        out.prefill_tokens, new,
        "{backend:?}: the prefix was not cached"
    );
    out.first_step
}

/// ITL of a batch of `batch` requests of `context` tokens each: the first
/// pass that decodes all of them (each has its first token by then).
fn itl(backend: Backend, perf: &PerfChoice, batch: u64, context: u64) -> Duration {
    let all = batch * context;
    let running = u32::try_from(batch).unwrap();
    let mut core = make_core(&spec(backend, perf, all + batch * 64 + 4096, all, running)).unwrap();
    for i in 0..batch {
        core.apply(
            SchedulerCommand::Submit(request(i + 1, context, 4, Vec::new())),
            Instant::ZERO,
        );
    }
    let full = |o: &StepOutput| o.prefill_tokens == 0 && o.tokens.len() as u64 == batch;
    step_until(&mut core, Instant::ZERO, full).0.first_step
}

fn off(got: Duration, want_ms: f64) -> f64 {
    (got.as_secs_f64() * 1e3 / want_ms - 1.0).abs()
}

#[test]
fn every_exported_profile_replays_aic_within_two_percent() {
    let all = shipped();
    assert!(all.len() >= 32, "{} profiles", all.len());
    let mut worst = (0.0f64, String::new());
    for (path, f) in &all {
        let d = f
            .deployment
            .as_ref()
            .expect("exported profiles record a deployment");
        let perf = PerfChoice::Profile(Arc::new(f.profile.clone()));
        assert!(
            f.prefill_checks.len() + f.decode_checks.len() >= 12,
            "{}",
            path.display()
        );
        for c in &f.prefill_checks {
            let e = off(ttft(d.backend, &perf, c.x, c.y), c.ms);
            let at = format!(
                "{}: TTFT of {} new after {} cached",
                path.display(),
                c.x,
                c.y
            );
            assert!(e <= 0.02, "{at}: {:.2}% off AIC's {} ms", e * 100.0, c.ms);
            if e > worst.0 {
                worst = (e, at);
            }
        }
        for c in &f.decode_checks {
            let e = off(itl(d.backend, &perf, c.x, c.y), c.ms);
            let at = format!("{}: ITL of {} at {} tokens", path.display(), c.x, c.y);
            assert!(e <= 0.02, "{at}: {:.2}% off AIC's {} ms", e * 100.0, c.ms);
            if e > worst.0 {
                worst = (e, at);
            }
        }
    }
    eprintln!("worst: {:.2}% ({})", worst.0 * 100.0, worst.1);
}

/// One aggregated worker replaying `items`; the report as JSON.
fn replay(f: &ProfileFile, items: Vec<TraceItem>, batched: u64) -> serde_json::Value {
    let backend = f.deployment.as_ref().unwrap().backend;
    let perf = PerfChoice::Profile(Arc::new(f.profile.clone()));
    let spec = spec(backend, &perf, 1 << 20, batched, 64);
    let cfg = DeploymentConfig {
        backend,
        policy: backend.native_policy(),
        prefill_workers: 1,
        decode_workers: 0,
        engines: vec![spec.clone()],
        ..DeploymentConfig::default()
    };
    let (report, _) = Replay::new(cfg, items.into_iter(), |_, _| make_core(&spec).unwrap())
        .expect("the cores publish at the deployment's block size")
        .run();
    serde_json::to_value(&report).unwrap()
}

fn item(id: u64, prompt: u64) -> TraceItem {
    TraceItem {
        request: request(id, prompt, 2, Vec::new()),
        turn: None,
        delay: None,
    }
}

#[test]
fn a_replayed_request_gets_aics_ttft_and_the_grid_edge_is_clamped_and_counted() {
    let (_, f) = shipped()
        .into_iter()
        .find(|(p, _)| p.ends_with("qwen3-8b-h100-tp1-vllm.json"))
        .unwrap();
    // 4096 tokens, no prefix: the replay's TTFT is AIC's (plus nothing).
    let probe = f
        .prefill_checks
        .iter()
        .find(|c| (c.x, c.y) == (4096, 0))
        .unwrap();
    let r = replay(&f, vec![item(1, 4096)], 8192);
    let got = r["ttft_ms"]["max"].as_f64().unwrap();
    assert!(
        (got / probe.ms - 1.0).abs() <= 0.02,
        "{got} vs AIC {}",
        probe.ms
    );
    assert_eq!(r["config"]["perf_beyond_grid"]["prefill_passes"], 0);
    // 60000 new tokens in one pass: past the 40960-token edge (the model's
    // context), timed at the edge and counted, never extrapolated.
    let edge = f.profile.prefill_table().at(40_960.0, 0.0);
    let r = replay(&f, vec![item(1, 60_000)], 65_536);
    let got = r["ttft_ms"]["max"].as_f64().unwrap();
    assert!((got - edge).abs() < 0.01, "{got} vs the edge's {edge}");
    assert_eq!(
        r["config"]["perf_beyond_grid"]["prefill_passes"], 1,
        "{}",
        r["config"]
    );
    assert_eq!(r["config"]["perf_beyond_grid"]["decode_passes"], 0);
    assert_eq!(
        r["config"]["perf_beyond_grid"]["perf"],
        "profile:qwen3-8b-h100-tp1-vllm"
    );
}
