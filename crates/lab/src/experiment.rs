//! The seed's §9 experiment: E1 (naive 1P3D, KV-aware), E3 (KVC, reseed
//! re-prefills), E4 (KVC plus D→P push and bypass) and E4-ablate (push on,
//! bypass off) on the same session trace, and a verdict for each of its
//! hypotheses H4-1, H4-2 and H4-3 ("证实 / 证伪 / 部分证实" become
//! `holds` / `fails` / `partial`, with the numbers).

pub use crate::config::Variant;

use crate::config::ExperimentConfig;
use crate::error::LabError;
use crate::metrics::RunSummary;
use crate::run::{run_variant_on, EngineRunner, RunOutput};
use handoff_workload::TraceItem;
use serde::Serialize;
use std::fmt::Write as _;

/// A hypothesis outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// 证实.
    Holds,
    /// 部分证实.
    Partial,
    /// 证伪.
    Fails,
}

impl Status {
    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            Status::Holds => "holds",
            Status::Partial => "partial",
            Status::Fails => "fails",
        }
    }
}

/// The verdict on one hypothesis, with its numbers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    /// `H4-1`, `H4-2` or `H4-3`.
    pub id: &'static str,
    /// The hypothesis as the seed states it.
    pub statement: &'static str,
    /// The outcome.
    pub status: Status,
    /// The numbers behind it.
    pub evidence: String,
}

/// The experiment's result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ExperimentReport {
    /// Requests in the trace.
    pub requests: u64,
    /// Sessions in the trace.
    pub sessions: u64,
    /// One summary per variant, in [`Variant::ALL`] order.
    pub runs: Vec<RunSummary>,
    /// H4-1, H4-2, H4-3.
    pub verdicts: Vec<Verdict>,
}

/// The report plus every run's records and log.
#[derive(Debug)]
pub struct ExperimentOutput {
    /// The report.
    pub report: ExperimentReport,
    /// One output per variant, in [`Variant::ALL`] order.
    pub outputs: Vec<RunOutput>,
}

/// Runs the four variants of `base` over `items`, each on the one engine
/// (in replay).
pub fn run_experiment(
    base: &ExperimentConfig,
    items: &[TraceItem],
) -> Result<ExperimentOutput, LabError> {
    run_experiment_on(base, items, None)
}

/// [`run_experiment`], each variant on `runner` when given (see
/// [`EngineRunner`]).
pub fn run_experiment_on(
    base: &ExperimentConfig,
    items: &[TraceItem],
    runner: Option<EngineRunner<'_>>,
) -> Result<ExperimentOutput, LabError> {
    let mut outputs = Vec::with_capacity(4);
    for v in Variant::ALL {
        outputs.push(run_variant_on(base, v, items, runner)?);
    }
    let runs: Vec<RunSummary> = outputs.iter().map(|o| o.summary.clone()).collect();
    let mut sessions: Vec<u64> = items
        .iter()
        .filter_map(|i| i.request.session.map(|s| s.0))
        .collect();
    sessions.sort_unstable();
    sessions.dedup();
    let verdicts = judge(&runs);
    Ok(ExperimentOutput {
        report: ExperimentReport {
            requests: items.len() as u64,
            sessions: sessions.len() as u64,
            runs,
            verdicts,
        },
        outputs,
    })
}

fn find<'a>(runs: &'a [RunSummary], label: &str) -> Option<&'a RunSummary> {
    runs.iter().find(|r| r.label == label)
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// Judges H4-1..H4-3 from the E1/E3/E4/E4-ablate summaries (by label).
///
/// - H4-1 holds when E4's TTFT p99 ≤ E1's; partial when it is above E1 but
///   below E3 (the push closed part of the gap); fails otherwise.
/// - H4-2 has two parts: E4's reseed share within max(2 points, 10%
///   relative) of E3's, and E4's reseed-path TTFT median ≤ E1's TTFT
///   median. Both: holds; one: partial; none: fails.
/// - H4-3 has two parts: E4's throughput slightly below E3's (0–5% lower)
///   and E4's TTFT p99 below E3's (the latency gain). Both: holds; one:
///   partial; none: fails. The evidence adds E4-ablate, whose gap to E3 is
///   the push's cost alone.
pub fn judge(runs: &[RunSummary]) -> Vec<Verdict> {
    let (Some(e1), Some(e3), Some(e4)) = (find(runs, "E1"), find(runs, "E3"), find(runs, "E4"))
    else {
        return Vec::new();
    };
    let ablate = find(runs, "E4-ablate");
    let mut out = Vec::new();

    let h1 = if e4.ttft_p99_ms <= e1.ttft_p99_ms {
        Status::Holds
    } else if e4.ttft_p99_ms < e3.ttft_p99_ms {
        Status::Partial
    } else {
        Status::Fails
    };
    out.push(Verdict {
        id: "H4-1",
        statement: "E4 TTFT p99 <= E1",
        status: h1,
        evidence: format!(
            "TTFT p99: E4 {:.0} ms, E1 {:.0} ms, E3 {:.0} ms",
            e4.ttft_p99_ms, e1.ttft_p99_ms, e3.ttft_p99_ms
        ),
    });

    let tolerance = (0.1 * e3.reseed_share).max(0.02);
    let share_same = (e4.reseed_share - e3.reseed_share).abs() <= tolerance;
    let has_reseeds = e4.modes.get("reseed").copied().unwrap_or(0) > 0;
    let path_fast = has_reseeds && e4.reseed_ttft_p50_ms <= e1.normal_ttft_p50_ms;
    let h2 = match (share_same, path_fast) {
        (true, true) => Status::Holds,
        (false, false) => Status::Fails,
        _ => Status::Partial,
    };
    out.push(Verdict {
        id: "H4-2",
        statement: "E4 reseed share unchanged vs E3, and E4 reseed-path TTFT median <= E1 normal-path TTFT median",
        status: h2,
        evidence: format!(
            "reseed share: E4 {} vs E3 {} ({}, tolerance {}); reseed-path TTFT p50: E4 {:.0} ms vs E1 normal p50 {:.0} ms ({}); E4 bypass hits {} of {} reseeds",
            pct(e4.reseed_share),
            pct(e3.reseed_share),
            if share_same { "unchanged" } else { "changed" },
            pct(tolerance),
            e4.reseed_ttft_p50_ms,
            e1.normal_ttft_p50_ms,
            if path_fast { "<=" } else { ">" },
            e4.bypass_hits,
            e4.modes.get("reseed").copied().unwrap_or(0),
        ),
    });

    let delta = if e3.throughput_rps > 0.0 {
        (e4.throughput_rps - e3.throughput_rps) / e3.throughput_rps
    } else {
        0.0
    };
    let slight_drop = (-0.05..0.0).contains(&delta);
    let gain = e4.ttft_p99_ms < e3.ttft_p99_ms;
    let h3 = match (slight_drop, gain) {
        (true, true) => Status::Holds,
        (false, false) => Status::Fails,
        _ => Status::Partial,
    };
    let ablate_note = match ablate {
        Some(a) if e3.throughput_rps > 0.0 => format!(
            "; E4-ablate {:.3} req/s ({:+.1}% vs E3, push cost alone), TTFT p99 {:.0} ms",
            a.throughput_rps,
            (a.throughput_rps - e3.throughput_rps) / e3.throughput_rps * 100.0,
            a.ttft_p99_ms
        ),
        _ => String::new(),
    };
    out.push(Verdict {
        id: "H4-3",
        statement: "E4 throughput slightly below E3 (push bandwidth), latency gain compensates",
        status: h3,
        evidence: format!(
            "throughput: E4 {:.3} req/s vs E3 {:.3} req/s ({:+.1}%, {}); TTFT p99 E4 {:.0} ms vs E3 {:.0} ms ({}); push {:.3} GB/s, {:.1} GB{}",
            e4.throughput_rps,
            e3.throughput_rps,
            delta * 100.0,
            if slight_drop { "slightly below" } else if delta >= 0.0 { "not below" } else { "more than slightly below" },
            e4.ttft_p99_ms,
            e3.ttft_p99_ms,
            if gain { "gain" } else { "no gain" },
            e4.push_gbps,
            e4.push_bytes as f64 / 1e9,
            ablate_note,
        ),
    });
    out
}

fn map_line(m: &std::collections::BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "-".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

impl ExperimentReport {
    /// The table of the issue: TTFT p50/p99, reseed share, reseed-path
    /// TTFT, throughput and push bandwidth per variant, push and bypass
    /// diagnostics, and the verdicts.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "trace: {} requests in {} sessions",
            self.requests, self.sessions
        );
        let _ = writeln!(
            s,
            "{:<10} {:>10} {:>10} {:>8} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9}",
            "config",
            "TTFT p50",
            "TTFT p99",
            "reseed",
            "reseed p50",
            "normal p50",
            "req/s",
            "out tok/s",
            "push GB/s",
            "push GB"
        );
        for r in &self.runs {
            let _ = writeln!(
                s,
                "{:<10} {:>8.0}ms {:>8.0}ms {:>8} {:>8.0}ms {:>8.0}ms {:>9.3} {:>9.1} {:>9.3} {:>9.1}",
                r.label,
                r.ttft_p50_ms,
                r.ttft_p99_ms,
                pct(r.reseed_share),
                r.reseed_ttft_p50_ms,
                r.normal_ttft_p50_ms,
                r.throughput_rps,
                r.output_tps,
                r.push_gbps,
                r.push_bytes as f64 / 1e9
            );
        }
        let _ = writeln!(s);
        for r in &self.runs {
            let _ = writeln!(
                s,
                "{:<10} modes {} | reseed causes {} | slot evictions {} | P prefill {} tok, D append {} tok | failed {} | drained {}",
                r.label,
                map_line(&r.modes),
                map_line(&r.reseed_causes),
                r.slot_evictions,
                r.prefill_tokens,
                r.append_tokens,
                r.failed,
                r.drained
            );
            if r.d_to_p_sync {
                let _ = writeln!(
                    s,
                    "{:<10} pushes enq {} sent {} failed {} | bypass hit {} miss {} | snapshot evictions {} | double {}",
                    "",
                    r.pushes_enqueued,
                    r.pushes_sent,
                    map_line(&r.push_failures),
                    r.bypass_hits,
                    map_line(&r.bypass_misses),
                    map_line(&r.snapshot_evictions),
                    r.double_pushes
                );
            }
        }
        let _ = writeln!(s);
        for v in &self.verdicts {
            let _ = writeln!(s, "{} {}: {}", v.id, v.status.name(), v.statement);
            let _ = writeln!(s, "     {}", v.evidence);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(label: &str, p50: f64, p99: f64, share: f64, reseed_p50: f64, rps: f64) -> RunSummary {
        let mut r = RunSummary {
            label: label.into(),
            ttft_p50_ms: p50,
            ttft_p99_ms: p99,
            normal_ttft_p50_ms: p50,
            reseed_share: share,
            reseed_ttft_p50_ms: reseed_p50,
            throughput_rps: rps,
            ..RunSummary::default()
        };
        r.modes.insert("reseed".into(), 10);
        r
    }

    #[test]
    fn verdicts_follow_the_numbers() {
        let runs = vec![
            run("E1", 500.0, 3000.0, 0.0, 0.0, 10.0),
            run("E3", 100.0, 2800.0, 0.2, 2500.0, 10.0),
            run("E4", 100.0, 600.0, 0.21, 400.0, 9.8),
            run("E4-ablate", 100.0, 2900.0, 0.2, 2600.0, 9.7),
        ];
        let v = judge(&runs);
        assert_eq!(
            v.iter().map(|v| v.status).collect::<Vec<_>>(),
            vec![Status::Holds, Status::Holds, Status::Holds]
        );
        let runs = vec![
            run("E1", 500.0, 300.0, 0.0, 0.0, 10.0),
            run("E3", 100.0, 2800.0, 0.2, 2500.0, 10.0),
            run("E4", 100.0, 2900.0, 0.5, 2600.0, 12.0),
        ];
        let v = judge(&runs);
        assert_eq!(
            v.iter().map(|v| v.status).collect::<Vec<_>>(),
            vec![Status::Fails, Status::Fails, Status::Fails]
        );
        let runs = vec![
            run("E1", 500.0, 300.0, 0.0, 0.0, 10.0),
            run("E3", 100.0, 2800.0, 0.2, 2500.0, 10.0),
            run("E4", 100.0, 2000.0, 0.2, 2600.0, 10.5),
        ];
        let v = judge(&runs);
        assert_eq!(
            v.iter().map(|v| v.status).collect::<Vec<_>>(),
            vec![Status::Partial, Status::Partial, Status::Partial]
        );
        assert!(judge(&runs[..1]).is_empty());
    }
}
