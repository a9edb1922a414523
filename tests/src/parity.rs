//! Replay/live parity over canonical traces.
//!
//! Each case fixes a backend, its ordering, worker capacities and a small
//! trace whose requests are spaced far enough apart that wall-clock jitter in
//! the live run cannot change any decision. Routing is round-robin so it
//! depends on arrival order only.

use handoff_core::{
    Backend, Duration, HandoffConfig, HandoffPolicy, Instant, Request, RequestId, Transcript,
};
use live_adapter::{run_in_process, LiveConfig, LiveOutcome};
use replay::{make_core, EngineSpec, Replay, ReplayConfig};
use router::{FrontendConfig, Pool, RouterMode};
use workload::TraceItem;

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
    /// Source lease lifetime.
    pub lease_ttl: Duration,
    /// Destination reservation lifetime.
    pub reservation_ttl: Duration,
    /// The requests.
    pub items: Vec<TraceItem>,
}

fn item(id: u64, at_ms: u64, prompt: u32, output: u32, hashes: &[u64]) -> TraceItem {
    TraceItem {
        request: Request {
            id: RequestId(id),
            prompt_tokens: prompt,
            max_output_tokens: output,
            prefix_hashes: hashes.to_vec(),
            hash_block_tokens: 512,
            session: None,
            arrival: Instant::from_millis(at_ms),
        },
        turn: None,
        delay: None,
    }
}

/// The canonical cases, for both backends.
pub fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for backend in [Backend::Vllm, Backend::Sglang] {
        let policy = backend.native_policy();
        // Decode holds one 4K request at a time: the second waits, stranded
        // (vLLM) or gated (SGLang), until the first finishes.
        out.push(Case {
            name: if backend == Backend::Vllm {
                "stranded-source-vllm"
            } else {
                "stranded-source-sglang"
            },
            backend,
            policy,
            decode_kv_tokens: 6 * 1024,
            lease_ttl: Duration::from_secs(60),
            reservation_ttl: Duration::from_secs(60),
            items: vec![
                item(0, 0, 4096, 100, &[1, 2, 3, 4, 5, 6, 7, 8]),
                item(1, 50, 4096, 40, &[11, 12, 13, 14, 15, 16, 17, 18]),
            ],
        });
        // Destination prefix hits: none, then partial, then full.
        out.push(Case {
            name: if backend == Backend::Vllm {
                "prefix-hits-vllm"
            } else {
                "prefix-hits-sglang"
            },
            backend,
            policy,
            decode_kv_tokens: 1 << 16,
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
            name: if backend == Backend::Vllm {
                "cancellation-vllm"
            } else {
                "cancellation-sglang"
            },
            backend,
            policy,
            decode_kv_tokens: 6 * 1024,
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

/// Runs `case` through replay and returns its transcript.
pub fn run_replay(case: &Case) -> Transcript {
    let block = spec(case, 1).event_block_tokens();
    let cfg = ReplayConfig {
        backend: case.backend,
        policy: case.policy,
        prefill_workers: PREFILL,
        decode_workers: DECODE,
        router: RouterMode::RoundRobin,
        block_size: block,
        handoff: handoff(case),
        transcript: true,
        ..ReplayConfig::default()
    };
    let make = |_w, pool| {
        make_core(&spec(case, kv_of(case, pool))).expect("canonical engine config is valid")
    };
    let (_, t) = Replay::new(cfg, case.items.clone().into_iter(), make).run();
    t.unwrap_or_default()
}

/// Runs `case` live, in process, with model time `speed` times wall time.
pub fn run_live(case: &Case, speed: f64) -> LiveOutcome {
    let defaults = ReplayConfig::default();
    let cfg = LiveConfig {
        frontend: FrontendConfig {
            policy: case.policy,
            aggregated: false,
            mode: RouterMode::RoundRobin,
            block_size: spec(case, 1).event_block_tokens(),
            seed: 0,
            hop: defaults.message_latency,
            disabled_delay: defaults.transfer.base(),
        },
        handoff: handoff(case),
        transfer: defaults.transfer,
        speed,
    };
    let cores = (0..PREFILL + DECODE)
        .map(|i| {
            let pool = pool_of(i);
            (
                pool,
                make_core(&spec(case, kv_of(case, pool)))
                    .expect("canonical engine config is valid"),
            )
        })
        .collect();
    run_in_process(cfg, cores, case.items.clone().into_iter()).0
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

/// Runs `case` both ways and compares.
pub fn check(case: &Case, speed: f64) -> Verdict {
    let replay = run_replay(case);
    let live = run_live(case, speed);
    let mut divergence = replay.first_divergence(&live.transcript);
    if live.stalled && divergence.is_none() {
        divergence = Some("live run stalled".into());
    }
    Verdict {
        name: case.name,
        backend: case.backend.name(),
        handoffs: replay.handoffs(),
        transitions: replay.transitions(),
        divergence,
    }
}
