//! How every command that runs a workload prints its [`Report`]: `replay`,
//! `live` and `frontend` print the same text and the same JSON, so a run of
//! one can be compared with a run of another byte for byte (`--json`).

use crate::args::Workload;
use handoff_core::Transcript;
use handoff_serving::Report;

/// What every workload-running command writes and how it ends: the same
/// flags on `replay`, `live` and `frontend`, so their outputs compare.
#[derive(clap::Args, Debug)]
pub struct OutputArgs {
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Write the report alone, as JSON, to FILE.
    #[arg(long, value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
    /// Write the lifecycle transcript (every handoff's transitions and the
    /// workers' final states) to FILE.
    #[arg(long, value_name = "FILE")]
    pub transcript: Option<std::path::PathBuf>,
    /// Exit 0 even when requests failed.
    #[arg(long)]
    pub allow_failures: bool,
}

impl OutputArgs {
    /// Writes the transcript and the report where asked (`extra` joins the
    /// report's JSON in `--output` and `--json`), prints the report, and
    /// fails the run if requests failed (unless allowed).
    pub fn finish(
        &self,
        report: &Report,
        transcript: Option<&Transcript>,
        wl: &Workload,
        output_extra: &serde_json::Map<String, serde_json::Value>,
        extra: serde_json::Map<String, serde_json::Value>,
        extra_text: &[String],
    ) -> Result<(), String> {
        if let Some(p) = &self.transcript {
            write_transcript(p, transcript)?;
        }
        let described;
        let run = crate::args::invocation::run_report();
        let report = if run.is_empty() {
            report
        } else {
            described = Report {
                config: handoff_serving::report::ReportConfig {
                    run,
                    ..report.config.clone()
                },
                ..report.clone()
            };
            &described
        };
        if let Some(p) = &self.output {
            write_output_with(p, report, output_extra)?;
        }
        print_report(report, self.json, wl, extra, extra_text)?;
        check_failures(report, self.allow_failures)
    }
}

/// Prints `report` as pretty JSON (with the trace's skipped-line count and
/// `extra` top-level fields) or as text (with `extra_text` lines after it).
pub fn print_report(
    report: &Report,
    json: bool,
    wl: &Workload,
    extra: serde_json::Map<String, serde_json::Value>,
    extra_text: &[String],
) -> Result<(), String> {
    if json {
        let mut v = serde_json::to_value(report).map_err(|e| e.to_string())?;
        let sk = wl.skipped.borrow();
        if let Some(obj) = v.as_object_mut() {
            obj.insert(
                "trace_bad_lines_skipped".into(),
                serde_json::json!({ "count": sk.count, "first": sk.first }),
            );
            obj.extend(extra);
        }
        let s = serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?;
        out!("{s}");
    } else {
        out!("{}", wl.skipped.borrow().describe(&wl.note));
        let model = crate::args::invocation::model_line(&report.config);
        if !model.is_empty() {
            out!("{model}");
        }
        print_summary(report);
        for l in extra_text {
            out!("{l}");
        }
    }
    Ok(())
}

/// Writes the rendered lifecycle transcript (per-handoff transitions and
/// final worker states) to `path`, for byte comparison across drivers.
pub fn write_transcript(path: &std::path::Path, t: Option<&Transcript>) -> Result<(), String> {
    let text = t.map(Transcript::render).unwrap_or_default();
    std::fs::write(path, text).map_err(|e| format!("--transcript {}: {e}", path.display()))
}

/// Writes the report as pretty JSON to `path` (`--output`), with `extra`
/// top-level fields (`replay --wall-time`); with none, the bytes are the
/// report's alone, the same from `replay` and a virtual-clock `live` or
/// `frontend`.
pub fn write_output_with(
    path: &std::path::Path,
    report: &Report,
    extra: &serde_json::Map<String, serde_json::Value>,
) -> Result<(), String> {
    let s = if extra.is_empty() {
        serde_json::to_string_pretty(report)
    } else {
        serde_json::to_value(report).and_then(|mut v| {
            if let Some(o) = v.as_object_mut() {
                o.extend(extra.clone());
            }
            serde_json::to_string_pretty(&v)
        })
    }
    .map_err(|e| e.to_string())?;
    std::fs::write(path, s + "\n").map_err(|e| format!("--output {}: {e}", path.display()))
}

/// Fails a run whose requests failed, naming why, unless allowed.
pub fn check_failures(report: &Report, allow: bool) -> Result<(), String> {
    if report.failed_requests == 0 || allow {
        return Ok(());
    }
    let reasons: Vec<String> = report
        .lifecycle
        .failure_reasons
        .iter()
        .map(|(k, v)| format!("{v} {k}"))
        .collect();
    Err(format!(
        "{} of {} requests failed ({}); pass --allow-failures to accept",
        report.failed_requests,
        report.num_requests,
        if reasons.is_empty() {
            "no reason recorded".to_string()
        } else {
            reasons.join(", ")
        }
    ))
}

fn print_summary(r: &Report) {
    let c = &r.config;
    out!(
        "backend {}  policy {}  prefill {}  decode {}  router {}",
        c.backend,
        c.policy,
        c.prefill_workers,
        c.decode_workers,
        c.router
    );
    out!(
        "requests {} completed {} failed {}  input tokens {}  output tokens {}  simulated {:.1} s",
        r.num_requests,
        r.completed_requests,
        r.failed_requests,
        r.total_input_tokens,
        r.total_output_tokens,
        r.duration_s
    );
    out!(
        "throughput {:.2} req/s  {:.1} output tok/s  {:.1} input tok/s  prefix cache reused {:.1}%",
        r.request_throughput_rps,
        r.output_token_throughput_tps,
        r.input_throughput_tok_s,
        r.prefix_cache_reused_ratio * 100.0
    );
    for w in &r.warnings {
        out!("warning: {w}");
    }
    for line in sizing_lines(r) {
        out!("{line}");
    }
    print_latencies(r);
    print_lifecycle(&r.lifecycle);
    print_workers(r);
}

/// The latency table of the summary, in milliseconds.
fn print_latencies(r: &Report) {
    out!(
        "{:<28} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "ms",
        "mean",
        "p50",
        "p90",
        "p99",
        "max"
    );
    let l = &r.lifecycle;
    for (name, s) in [
        ("ttft", r.ttft_ms),
        ("ttst (1st to 2nd token)", r.ttst_ms),
        ("tpot", r.tpot_ms),
        ("itl", r.itl_ms),
        ("e2e", r.e2e_latency_ms),
        ("source pinned (stranded)", l.source_pinned_ms),
        ("reservation wait", l.reservation_wait_ms),
        ("transfer", l.transfer_ms),
        ("reserved -> activated", l.reservation_to_activation_ms),
    ] {
        out!(
            "{name:<28} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
            s.mean,
            s.p50,
            s.p90,
            s.p99,
            s.max
        );
    }
}

/// The lifecycle counters, failure reasons, injected faults and the stale
/// read warning.
fn print_lifecycle(l: &handoff_serving::report::Lifecycle) {
    out!(
        "handoffs pinned {} activated {}  lease expiries {}  reservation expiries {}  preemptions {}",
        l.handoffs_pinned, l.handoffs_activated, l.lease_expiries, l.reservation_expiries, l.preemptions
    );
    if !l.failure_reasons.is_empty() || l.migrated_requests > 0 {
        let reasons: Vec<String> = l
            .failure_reasons
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        out!(
            "failed by reason: {}  migrated {}",
            if reasons.is_empty() {
                "none".to_string()
            } else {
                reasons.join(", ")
            },
            l.migrated_requests
        );
    }
    if !l.faults.injected_nothing() {
        out!("faults injected: {}", l.faults);
    }
    if !l.stale_reads.none() {
        let s = &l.stale_reads;
        out!(
            "WARNING: {} requests read KV their source had released (lease expired): \
             {} after a block was reused by another request (corrupt), {} not reused (possibly intact)",
            s.reads,
            s.reused,
            s.not_reused
        );
    }
}

/// The per-worker table of the summary.
fn print_workers(r: &Report) {
    out!(
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
        out!(
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

/// The SLO and sizing lines of the text summary (none unless `--slo` or
/// `--gpu-hour-usd` asked for them).
pub fn sizing_lines(r: &Report) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(s) = &r.slo {
        let targets: Vec<String> = s
            .targets
            .iter()
            .map(|t| {
                format!(
                    "{}<={}ms {:.1}% {}",
                    t.target,
                    t.bound_ms,
                    t.attainment * 100.0,
                    if t.holds { "held" } else { "MISSED" }
                )
            })
            .collect();
        v.push(format!(
            "slo {}  all {:.1}% ({} requests)  {}",
            targets.join("  "),
            s.attainment_all * 100.0,
            s.met_all_requests,
            if s.holds { "met" } else { "NOT MET" }
        ));
        v.push(format!(
            "goodput {:.2} req/s  {:.1} output tok/s",
            s.goodput_rps, s.goodput_output_tok_s
        ));
    }
    if let Some(z) = &r.sizing {
        let mut line = format!(
            "gpus {} ({} per rank)  {:.1} tok/s/gpu  {:.1} tok/s/user",
            z.gpus, z.gpus_per_rank, z.output_tok_s_per_gpu, z.output_tok_s_per_user
        );
        if let Some(g) = z.goodput_tok_s_per_gpu {
            line += &format!("  goodput {g:.1} tok/s/gpu");
        }
        v.push(line);
        if let Some(p) = z.gpu_hour_usd {
            let fmt = |x: Option<f64>| x.map_or("n/a".to_string(), |c| format!("${c:.3}"));
            let mut line = format!(
                "cost at ${p}/GPU-hour: {} per million output tokens",
                fmt(z.usd_per_million_output_tokens)
            );
            if r.slo.is_some() {
                line += &format!(
                    ", {} per million good tokens",
                    fmt(z.usd_per_million_good_tokens)
                );
            }
            v.push(line);
        }
    }
    v
}
