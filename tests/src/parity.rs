//! Replay/live parity.
//!
//! [`compare`] runs one deployment and trace through replay and through
//! virtual-clock live (every worker on its own thread, operations over
//! channels) and reports the first difference in the lifecycle transcript
//! (with final worker states) or in the report; the two must be
//! byte-identical on any trace. [`cases`] are the canonical traces: their
//! requests are spaced far enough apart that even the wall-clock live run
//! cannot change a decision, so [`check`] compares wall-clock live too.
//! Routing there is round-robin so it depends on arrival order only.

use handoff_core::{
    Backend, Duration, HandoffConfig, HandoffPolicy, Instant, Request, RequestId, Transcript,
};
use handoff_deployment::{deployment, make_core, DeploymentConfig, EngineSpec};
use handoff_live_adapter::{run_in_process, run_virtual_threads, LiveOutcome};
use handoff_replay::Replay;
use handoff_router::{Pool, RouterMode};
use handoff_serving::Report;
use handoff_workload::TraceItem;

/// One canonical trace with its deployment.
#[derive(Clone, Debug)]
pub struct Case {
    /// Stable name (snapshot and table key).
    pub name: &'static str,
    /// Engine.
    pub backend: Backend,
    /// Ordering.
    pub policy: HandoffPolicy,
    /// KV tokens of each decode worker.
    pub decode_kv_tokens: u64,
    /// SGLang decode keeps a radix cache (the DEP's locked-prefix mode)
    /// instead of its default chunk cache.
    pub decode_radix_cache: bool,
    /// Source lease lifetime.
    pub lease_ttl: Duration,
    /// Destination reservation lifetime.
    pub reservation_ttl: Duration,
    /// The requests.
    pub items: Vec<TraceItem>,
}

/// A trace item: request `id` arriving at `at_ms` with `prompt` tokens
/// over 512-token blocks `hashes`, generating `output`.
pub fn item(id: u64, at_ms: u64, prompt: u32, output: u32, hashes: &[u64]) -> TraceItem {
    TraceItem {
        request: Request {
            id: RequestId(id),
            prompt_tokens: prompt,
            max_output_tokens: output,
            prefix_hashes: hashes.to_vec(),
            hash_block_tokens: 512,
            session: None,
            arrival: Instant::from_millis(at_ms),
            lora: None,
        },
        turn: None,
        delay: None,
    }
}

/// The canonical cases, for both backends.
pub fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    // vLLM pull (its default), vLLM push (`--kv-transfer-mode push`) and
    // SGLang, each under its own names.
    let flavours = [
        (
            Backend::Vllm,
            HandoffPolicy::SourceFirst,
            [
                "stranded-source-vllm",
                "prefix-hits-vllm",
                "cancellation-vllm",
            ],
        ),
        (
            Backend::Vllm,
            HandoffPolicy::Push,
            [
                "stranded-source-vllm-push",
                "prefix-hits-vllm-push",
                "cancellation-vllm-push",
            ],
        ),
        (
            Backend::Sglang,
            HandoffPolicy::DestinationFirst,
            [
                "stranded-source-sglang",
                "prefix-hits-sglang",
                "cancellation-sglang",
            ],
        ),
    ];
    for (backend, policy, names) in flavours {
        // Decode holds one 4K request at a time: the second waits, stranded
        // (vLLM) or gated (SGLang), until the first finishes.
        out.push(Case {
            name: names[0],
            backend,
            policy,
            decode_kv_tokens: 6 * 1024,
            decode_radix_cache: false,
            lease_ttl: Duration::from_secs(60),
            reservation_ttl: Duration::from_secs(60),
            items: vec![
                item(0, 0, 4096, 100, &[1, 2, 3, 4, 5, 6, 7, 8]),
                item(1, 50, 4096, 40, &[11, 12, 13, 14, 15, 16, 17, 18]),
            ],
        });
        // Destination prefix hits: none, then partial, then full (SGLang's
        // decode in locked-prefix mode; its chunk cache never hits).
        out.push(Case {
            name: names[1],
            backend,
            policy,
            decode_kv_tokens: 1 << 16,
            decode_radix_cache: true,
            lease_ttl: Duration::from_secs(60),
            reservation_ttl: Duration::from_secs(60),
            items: vec![
                item(0, 0, 2048, 8, &[21, 22, 23, 24]),
                item(1, 1500, 3072, 8, &[21, 22, 23, 24, 25, 26]),
                item(2, 3000, 2048, 8, &[21, 22, 23, 24]),
            ],
        });
        // Decode is held for a long time by a first request; the second
        // waits longer than its timers allow. vLLM: the pinned source's lease
        // expires and aborts the queued destination. SGLang: the queued
        // destination's wait expires and aborts the not-yet-dispatched source.
        out.push(Case {
            name: names[2],
            backend,
            policy,
            decode_kv_tokens: 6 * 1024,
            decode_radix_cache: false,
            // The waiting side's timer fires first, 2 s before the other's.
            lease_ttl: Duration::from_secs(if backend == Backend::Vllm { 2 } else { 4 }),
            reservation_ttl: Duration::from_secs(if backend == Backend::Vllm { 4 } else { 2 }),
            items: vec![
                item(0, 0, 4096, 1500, &[31, 32, 33, 34, 35, 36, 37, 38]),
                item(1, 50, 4096, 8, &[41, 42, 43, 44, 45, 46, 47, 48]),
            ],
        });
    }
    out
}

fn spec(case: &Case, kv_tokens: u64) -> EngineSpec {
    EngineSpec {
        backend: case.backend,
        kv_tokens,
        block_size: 16,
        source_lease_ttl: Some(case.lease_ttl),
        ..EngineSpec::default()
    }
}

fn handoff(case: &Case) -> HandoffConfig {
    HandoffConfig {
        reservation_ttl: case.reservation_ttl,
        ..HandoffConfig::default()
    }
}

const PREFILL: u32 = 1;
const DECODE: u32 = 1;

fn pool_of(i: u32) -> Pool {
    if i < PREFILL {
        Pool::Prefill
    } else {
        Pool::Decode
    }
}

fn kv_of(case: &Case, pool: Pool) -> u64 {
    if pool == Pool::Decode {
        case.decode_kv_tokens
    } else {
        1 << 18
    }
}

/// The engine configuration and per-worker specs of `case`.
pub fn setup(case: &Case) -> (DeploymentConfig, Vec<EngineSpec>) {
    let block = spec(case, 1).event_block_tokens();
    let cfg = DeploymentConfig {
        backend: case.backend,
        policy: case.policy,
        prefill_workers: PREFILL,
        decode_workers: DECODE,
        router: RouterMode::RoundRobin,
        block_size: block,
        handoff: handoff(case),
        transcript: true,
        ..DeploymentConfig::default()
    };
    let specs = (0..PREFILL + DECODE)
        .map(|i| EngineSpec {
            decode_radix_cache: case.decode_radix_cache && pool_of(i) == Pool::Decode,
            ..spec(case, kv_of(case, pool_of(i)))
        })
        .collect();
    (cfg, specs)
}

/// Runs `items` through replay on `cfg` with worker `i` built from
/// `specs[i]`; returns the report and the transcript.
pub fn replay_run(
    cfg: &DeploymentConfig,
    specs: &[EngineSpec],
    items: Vec<TraceItem>,
) -> (Report, Transcript) {
    let mut cfg = cfg.clone();
    cfg.transcript = true;
    let make = |w: handoff_core::WorkerId, _| {
        make_core(&specs[w.0 as usize]).expect("specs are validated by their callers")
    };
    let (r, t) = Replay::new(cfg, items.into_iter(), make)
        .expect("the cores publish at the deployment's block size")
        .run();
    (r, t.unwrap_or_default())
}

/// Runs `items` through virtual-clock live (threads over channels).
pub fn virtual_run(
    cfg: &DeploymentConfig,
    specs: &[EngineSpec],
    items: Vec<TraceItem>,
) -> Result<(Report, Transcript), String> {
    let mut cfg = cfg.clone();
    cfg.transcript = true;
    let o = run_virtual_threads(&cfg, specs, items.into_iter()).map_err(|e| e.to_string())?;
    Ok((o.report, o.transcript.unwrap_or_default()))
}

/// The first difference between two runs' reports, as the first differing
/// line of their pretty JSON.
pub fn report_divergence(a: &Report, b: &Report) -> Option<String> {
    let ja = serde_json::to_string_pretty(a).unwrap_or_default();
    let jb = serde_json::to_string_pretty(b).unwrap_or_default();
    if ja == jb {
        return None;
    }
    let (la, lb): (Vec<&str>, Vec<&str>) = (ja.lines().collect(), jb.lines().collect());
    for i in 0..la.len().max(lb.len()) {
        let (x, y) = (la.get(i), lb.get(i));
        if x != y {
            return Some(format!(
                "report line {}: {} vs {}",
                i + 1,
                x.map_or("(end)", |s| s.trim()),
                y.map_or("(end)", |s| s.trim())
            ));
        }
    }
    Some("reports differ".into())
}

/// Replay against virtual-clock live: `None` when transcript, final worker
/// states and report are byte-identical, else the first difference. Also
/// returns the replay's transcript for callers that show it.
pub fn compare(
    cfg: &DeploymentConfig,
    specs: &[EngineSpec],
    items: Vec<TraceItem>,
) -> (Option<String>, Transcript) {
    let (rr, rt) = replay_run(cfg, specs, items.clone());
    let (vr, vt) = match virtual_run(cfg, specs, items) {
        Ok(x) => x,
        Err(e) => return (Some(format!("virtual live failed: {e}")), rt),
    };
    let d = rt
        .first_divergence(&vt)
        .or_else(|| (rt.render() != vt.render()).then(|| "rendered transcripts differ".into()))
        .or_else(|| report_divergence(&rr, &vr));
    (d, rt)
}

/// Runs `case` through replay and returns its transcript.
pub fn run_replay(case: &Case) -> Transcript {
    let (cfg, specs) = setup(case);
    replay_run(&cfg, &specs, case.items.clone()).1
}

/// Runs `case` live on the wall clock, in process, with model time `speed`
/// times wall time.
pub fn run_live(case: &Case, speed: f64) -> LiveOutcome {
    let (cfg, specs) = setup(case);
    let _ = deployment(&cfg);
    run_in_process(&cfg, &specs, speed, case.items.clone().into_iter())
        .expect("canonical engine config is valid")
        .0
}

/// One row of the parity table.
#[derive(Clone, Debug)]
pub struct Verdict {
    /// Case name.
    pub name: &'static str,
    /// Backend name.
    pub backend: &'static str,
    /// Handoffs in the replay transcript.
    pub handoffs: usize,
    /// Transitions in the replay transcript.
    pub transitions: usize,
    /// `None` when live equals replay; else the first divergence.
    pub divergence: Option<String>,
}

/// Runs `case` through replay, virtual-clock live and wall-clock live and
/// compares (wall-clock by transcript only: its timings are the machine's).
pub fn check(case: &Case, speed: f64) -> Verdict {
    let (cfg, specs) = setup(case);
    let (mut divergence, replay) = compare(&cfg, &specs, case.items.clone());
    if divergence.is_none() {
        let live = run_live(case, speed);
        let lt = live.transcript.unwrap_or_default();
        divergence = replay
            .first_divergence(&lt)
            .map(|d| format!("wall clock: {d}"));
        if live.run.stalled && divergence.is_none() {
            divergence = Some("wall-clock live run stalled".into());
        }
    }
    Verdict {
        name: case.name,
        backend: case.backend.name(),
        handoffs: replay.handoffs(),
        transitions: replay.transitions(),
        divergence,
    }
}

/// The first `n` requests of the committed conversation slice
/// (`tests/data/conversation_2000.jsonl`, a public Mooncake trace's first
/// 2,000 lines).
pub fn conversation_slice(n: usize) -> Vec<TraceItem> {
    use handoff_workload::{ReaderOptions, TraceReader};
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/conversation_2000.jsonl");
    let file = std::fs::File::open(path).expect("the committed slice is in the repo");
    TraceReader::new(std::io::BufReader::new(file), ReaderOptions::new(path))
        .take(n)
        .map(|r| r.expect("the committed slice parses"))
        .collect()
}
