//! `handoff-mocker replay`.

use clap::{Args, ValueEnum};
use handoff_core::{Backend, Duration, HandoffConfig, HandoffPolicy};
use replay::{make_core, EngineSpec, Replay, ReplayConfig, Report, TransferModel};
use router::RouterMode;
use std::cell::RefCell;
use std::fs::File;
use std::io::{BufReader, IsTerminal};
use std::path::PathBuf;
use std::rc::Rc;
use workload::{
    ReaderOptions, SyntheticConfig, SyntheticWorkload, TraceError, TraceItem, TraceReader,
};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum BackendArg {
    Vllm,
    Sglang,
    Trtllm,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum PolicyArg {
    Disabled,
    SourceFirst,
    DestinationFirst,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum RouterArg {
    Kv,
    RoundRobin,
    Random,
    LeastLoaded,
    PowerOfTwo,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum TransferArg {
    Fixed,
    Bytes,
    Contention,
}

/// Options of `replay`.
#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// Mooncake JSONL trace; without it, the embedded synthetic workload runs.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Count and report malformed trace lines instead of failing on the first.
    #[arg(long)]
    skip_bad_lines: bool,
    /// Engine to imitate.
    #[arg(long, value_enum, default_value = "vllm")]
    backend: BackendArg,
    /// Handoff ordering (default: the backend's own).
    #[arg(long, value_enum)]
    policy: Option<PolicyArg>,
    /// Prefill workers (aggregated workers with --decode 0).
    #[arg(long, default_value_t = 2)]
    prefill: u32,
    /// Decode workers; 0 runs aggregated (no disaggregation).
    #[arg(long, default_value_t = 2)]
    decode: u32,
    /// Router mode of both pools.
    #[arg(long, value_enum, default_value = "kv")]
    router: RouterArg,
    /// KV capacity of a prefill (or aggregated) worker, in tokens.
    #[arg(long, default_value_t = 262_144)]
    prefill_kv_tokens: u64,
    /// KV capacity of a decode worker, in tokens.
    #[arg(long, default_value_t = 262_144)]
    decode_kv_tokens: u64,
    /// vLLM block size / SGLang page size (default 16 for vLLM, 1 for SGLang).
    #[arg(long)]
    block_size: Option<u32>,
    /// Running-batch limit per worker.
    #[arg(long, default_value_t = 256)]
    max_running: u32,
    /// Prefill tokens per pass (max_num_batched_tokens / chunked_prefill_size).
    #[arg(long, default_value_t = 8192)]
    max_batched_tokens: u32,
    /// Divides every modelled pass time.
    #[arg(long, default_value_t = 1.0)]
    speedup_ratio: f64,
    /// Transfer timing model.
    #[arg(long, value_enum, default_value = "fixed")]
    transfer: TransferArg,
    /// Fixed transfer time, or setup latency of the bytes models, in ms.
    #[arg(long, default_value_t = 10.0)]
    transfer_ms: f64,
    /// KV bytes per token (bytes models). Default: a Llama-3-8B-like 128 KiB.
    #[arg(long, default_value_t = 131_072)]
    bytes_per_token: u64,
    /// Link bandwidth in GB/s (bytes models).
    #[arg(long, default_value_t = 25.0)]
    bandwidth_gbps: f64,
    /// One-way control-message latency between workers, in µs.
    #[arg(long, default_value_t = 500)]
    message_latency_us: u64,
    /// Source lease lifetime override in seconds (default: the backend's).
    #[arg(long)]
    reservation_ttl_s: Option<u64>,
    /// Seed for routers and the synthetic workload.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Synthetic workload: number of requests.
    #[arg(long)]
    requests: Option<u64>,
    /// Synthetic workload: arrival rate (requests/s).
    #[arg(long)]
    rate: Option<f64>,
    /// Stop after this many trace requests.
    #[arg(long)]
    limit: Option<u64>,
    /// Step one forward pass per event (slower; same report).
    #[arg(long)]
    no_multi_step: bool,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

fn policy_of(backend: Backend, arg: Option<PolicyArg>) -> HandoffPolicy {
    match arg {
        Some(PolicyArg::Disabled) => HandoffPolicy::Disabled,
        Some(PolicyArg::SourceFirst) => HandoffPolicy::SourceFirst,
        Some(PolicyArg::DestinationFirst) => HandoffPolicy::DestinationFirst,
        None => match backend {
            // TRT-LLM has no reservation: a handoff ordering still runs, and
            // every reservation is refused as unsupported.
            Backend::TrtLlm => HandoffPolicy::SourceFirst,
            b => b.native_policy(),
        },
    }
}

/// Stops the stream at the first trace error and keeps it for the caller.
struct Checked<I> {
    inner: I,
    error: Rc<RefCell<Option<TraceError>>>,
    left: Option<u64>,
}

impl<I: Iterator<Item = Result<TraceItem, TraceError>>> Iterator for Checked<I> {
    type Item = TraceItem;
    fn next(&mut self) -> Option<TraceItem> {
        if self.left == Some(0) {
            return None;
        }
        match self.inner.next()? {
            Ok(item) => {
                self.left = self.left.map(|n| n - 1);
                Some(item)
            }
            Err(e) => {
                *self.error.borrow_mut() = Some(e);
                None
            }
        }
    }
}

pub fn run(a: ReplayArgs) -> Result<(), String> {
    let backend = match a.backend {
        BackendArg::Vllm => Backend::Vllm,
        BackendArg::Sglang => Backend::Sglang,
        BackendArg::Trtllm => Backend::TrtLlm,
    };
    let router = match a.router {
        RouterArg::Kv => RouterMode::KvAware,
        RouterArg::RoundRobin => RouterMode::RoundRobin,
        RouterArg::Random => RouterMode::Random,
        RouterArg::LeastLoaded => RouterMode::LeastLoaded,
        RouterArg::PowerOfTwo => RouterMode::PowerOfTwo,
    };
    if !(a.speedup_ratio.is_finite() && a.speedup_ratio > 0.0) {
        return Err("--speedup-ratio: must be a positive number".into());
    }
    if !(a.transfer_ms.is_finite() && a.transfer_ms >= 0.0) {
        return Err("--transfer-ms: must be a non-negative number".into());
    }
    if !(a.bandwidth_gbps.is_finite() && a.bandwidth_gbps > 0.0) {
        return Err("--bandwidth-gbps: must be a positive number".into());
    }
    let block_size = a
        .block_size
        .unwrap_or(if backend == Backend::Sglang { 1 } else { 16 });
    if block_size == 0 {
        return Err("--block-size: must be at least 1".into());
    }
    let spec = |kv_tokens| EngineSpec {
        backend,
        kv_tokens,
        block_size,
        max_running: a.max_running,
        max_batched_tokens: a.max_batched_tokens,
        speedup_ratio: a.speedup_ratio,
        source_lease_ttl: None,
    };
    let prefill_spec = spec(a.prefill_kv_tokens);
    let decode_spec = spec(a.decode_kv_tokens);
    let base = Duration::from_secs_f64(a.transfer_ms / 1e3);
    let bandwidth = a.bandwidth_gbps * 1e9;
    let transfer = match a.transfer {
        TransferArg::Fixed => TransferModel::Fixed(base),
        TransferArg::Bytes => TransferModel::Bytes {
            base,
            bytes_per_token: a.bytes_per_token,
            bandwidth,
        },
        TransferArg::Contention => TransferModel::Contention {
            base,
            bytes_per_token: a.bytes_per_token,
            bandwidth,
        },
    };
    let mut handoff = HandoffConfig::default();
    if let Some(s) = a.reservation_ttl_s {
        handoff.reservation_ttl = Duration::from_secs(s);
    }
    let cfg = ReplayConfig {
        backend,
        policy: policy_of(backend, a.policy),
        prefill_workers: a.prefill.max(1),
        decode_workers: a.decode,
        router,
        block_size: prefill_spec.event_block_tokens(),
        transfer,
        message_latency: Duration::from_micros(a.message_latency_us),
        handoff,
        seed: a.seed,
        multi_step: !a.no_multi_step,
        transcript: false,
    };
    // Build every core up front so a bad configuration fails before any work.
    let total = cfg.prefill_workers + cfg.decode_workers;
    let mut cores = Vec::new();
    for i in 0..total {
        let s = if i < cfg.prefill_workers {
            &prefill_spec
        } else {
            &decode_spec
        };
        cores.push(Some(make_core(s).map_err(|e| e.to_string())?));
    }
    let make =
        |w: handoff_core::WorkerId, _| cores[w.0 as usize].take().expect("one core per worker");
    let started = std::time::Instant::now();
    let (report, trace_note) = match &a.trace {
        Some(path) => {
            let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let mut opts = ReaderOptions::new(path.display().to_string());
            if a.skip_bad_lines {
                opts = opts.skipping_bad_lines();
            }
            let reader = TraceReader::new(BufReader::with_capacity(1 << 20, file), opts);
            let error = Rc::new(RefCell::new(None));
            let items = Checked {
                inner: reader,
                error: error.clone(),
                left: a.limit,
            };
            if std::io::stderr().is_terminal() {
                eprintln!("replaying {} ...", path.display());
            }
            let (report, _) = Replay::new(cfg, items, make).run();
            if let Some(e) = error.borrow_mut().take() {
                // Nothing is written on a bad trace: the report would be partial.
                return Err(e.to_string());
            }
            (report, None::<String>)
        }
        None => {
            let mut sc = SyntheticConfig {
                seed: a.seed,
                ..SyntheticConfig::default()
            };
            if let Some(n) = a.requests {
                sc.requests = n;
            }
            if let Some(r) = a.rate {
                if !(r.is_finite() && r > 0.0) {
                    return Err("--rate: must be a positive number".into());
                }
                sc.rate_per_sec = r;
            }
            let note = format!(
                "embedded synthetic workload: {} requests at {}/s",
                sc.requests, sc.rate_per_sec
            );
            let (report, _) = Replay::new(cfg, SyntheticWorkload::new(sc), make).run();
            (report, Some(note))
        }
    };
    let wall = started.elapsed();
    if a.json {
        let s = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        println!("{s}");
    } else {
        if let Some(n) = trace_note {
            println!("{n}");
        }
        print_summary(&report);
        println!("wall time {:.3} s", wall.as_secs_f64());
    }
    Ok(())
}

fn print_summary(r: &Report) {
    let c = &r.config;
    println!(
        "backend {}  policy {}  prefill {}  decode {}  router {}",
        c.backend, c.policy, c.prefill_workers, c.decode_workers, c.router
    );
    println!(
        "requests {} completed {} failed {}  output tokens {}  simulated {:.1} s",
        r.num_requests,
        r.completed_requests,
        r.failed_requests,
        r.total_output_tokens,
        r.duration_s
    );
    println!(
        "throughput {:.2} req/s  {:.1} tok/s",
        r.request_throughput_rps, r.output_token_throughput_tps
    );
    println!(
        "{:<28} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "ms", "mean", "p50", "p90", "p99", "max"
    );
    let l = &r.lifecycle;
    for (name, s) in [
        ("ttft", r.ttft_ms),
        ("tpot", r.tpot_ms),
        ("itl", r.itl_ms),
        ("e2e", r.e2e_latency_ms),
        ("source pinned (stranded)", l.source_pinned_ms),
        ("reservation wait", l.reservation_wait_ms),
        ("transfer", l.transfer_ms),
        ("reserved -> activated", l.reservation_to_activation_ms),
    ] {
        println!(
            "{name:<28} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
            s.mean, s.p50, s.p90, s.p99, s.max
        );
    }
    println!(
        "handoffs pinned {} activated {}  lease expiries {}  reservation expiries {}  preemptions {}",
        l.handoffs_pinned, l.handoffs_activated, l.lease_expiries, l.reservation_expiries, l.preemptions
    );
    println!(
        "{:<8} {:<10} {:>8} {:>12} {:>12} {:>14} {:>14} {:>8}",
        "worker",
        "pool",
        "steps",
        "peak pinned",
        "peak reserv",
        "pinned blk·s",
        "reserv blk·s",
        "drained"
    );
    for w in &r.workers {
        println!(
            "{:<8} {:<10} {:>8} {:>12} {:>12} {:>14.1} {:>14.1} {:>8}",
            w.worker,
            w.pool,
            w.steps,
            w.peak_pinned_blocks,
            w.peak_reserved_blocks,
            w.pinned_block_seconds,
            w.reserved_block_seconds,
            w.drained
        );
    }
}
