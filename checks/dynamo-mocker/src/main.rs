//! Replays a Mooncake trace through Dynamo's mocker 1.6.1 offline replay
//! (`dynamo_mocker::replay`), with `MockerConfig`'s defaults (vLLM
//! workers), and prints the report's figures and the replay's wall time as
//! one JSON object, for `run.sh` to set beside handoff-mocker's.
//!
//! `dynamo-mocker-bench TRACE agg WORKERS [kv|round-robin]`
//! `dynamo-mocker-bench TRACE disagg PREFILL DECODE [kv|round-robin]`

use anyhow::{Context, Result, bail};
use dynamo_kv_router::config::KvRouterConfig;
use dynamo_mocker::common::protocols::{MockerConfig, WorkerType};
use dynamo_mocker::replay::{
    OfflineDisaggReplayConfig, ReplayRouterMode, TraceSimulationReport,
    simulate_trace_file_disagg_with_router_mode, simulate_trace_file_with_router_mode,
};
use serde_json::json;
use std::path::Path;
use std::time::Instant;

/// Dynamo's Mooncake traces hash 512-token blocks.
const TRACE_BLOCK: usize = 512;

fn role(worker_type: WorkerType) -> MockerConfig {
    let mut c = MockerConfig::default();
    c.engine.engine.worker_type = worker_type;
    c
}

fn count(s: Option<&String>, what: &str) -> Result<usize> {
    s.with_context(|| format!("missing {what}"))?
        .parse()
        .with_context(|| format!("{what}: a count"))
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let trace = Path::new(args.first().context("usage: TRACE agg|disagg ...")?);
    let mode = |i: usize| match args.get(i).map(String::as_str) {
        None | Some("kv") => Ok(ReplayRouterMode::KvRouter),
        Some("round-robin") => Ok(ReplayRouterMode::RoundRobin),
        Some(o) => bail!("router {o}: kv or round-robin"),
    };
    let router = Some(KvRouterConfig::default());
    let start = Instant::now();
    let report: TraceSimulationReport = match args.get(1).map(String::as_str) {
        Some("agg") => simulate_trace_file_with_router_mode(
            MockerConfig::default(),
            router,
            None,
            trace,
            TRACE_BLOCK,
            count(args.get(2), "workers")?,
            1.0,
            mode(3)?,
        )?,
        Some("disagg") => simulate_trace_file_disagg_with_router_mode(
            OfflineDisaggReplayConfig {
                prefill_args: role(WorkerType::Prefill),
                decode_args: role(WorkerType::Decode),
                num_prefill_workers: count(args.get(2), "prefill workers")?,
                num_decode_workers: count(args.get(3), "decode workers")?,
            },
            router,
            None,
            trace,
            TRACE_BLOCK,
            1.0,
            mode(4)?,
        )?,
        _ => bail!("usage: TRACE agg WORKERS [kv|round-robin] | TRACE disagg P D [kv|round-robin]"),
    };
    let wall_s = start.elapsed().as_secs_f64();
    let l = &report.latency;
    let dist = |d: &dynamo_mocker::replay::TraceDistributionStats| {
        json!({ "mean": d.mean_ms, "p50": d.median_ms, "p90": d.p90_ms, "p99": d.p99_ms })
    };
    let out = json!({
        "wall_s": wall_s,
        "requests": report.request_counts.completed_requests,
        "prefix_cache_reused_ratio": report.prefix_cache_reused_ratio,
        "committed_prefill_tokens": report.committed_prefill_tokens,
        "duration_ms": report.throughput.duration_ms,
        "output_tok_s": report.throughput.output_throughput_tok_s,
        "ttft_ms": dist(&l.ttft),
        "ttst_ms": dist(&l.ttst),
        "tpot_ms": dist(&l.tpot),
        "itl_ms": dist(&l.itl.distribution),
    });
    println!("{out}");
    Ok(())
}
