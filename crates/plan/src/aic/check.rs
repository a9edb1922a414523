//! Each row of AIConfigurator's file simulated beside its estimate: the
//! row classified (run, skipped with a [`Skip`], refused with a
//! [`Refusal`]), its workload generated, the caller's [`Runner`] running
//! the rest closed loop at each row's concurrency, and the comparison as
//! JSON and as a text table.

use super::read::{AicFile, AicRow, Unsimulable};
use super::resolve::{Choice, ProfileEntry, Resolved, Skip};
use crate::runner::Runner;
use crate::workload::{write_workload, WorkloadError, WorkloadShape};
use handoff_deployment::SloSpec;
use serde_json::{json, Value};
use std::path::Path;

/// Report paths each checked row carries beyond a sweep's.
pub const AIC_METRICS: &[&str] = &["p90_ttft_ms", "median_tpot_ms", "p90_tpot_ms"];

/// The summary's axes: the row's CSV line, its layout.
pub const AIC_AXES: [&str; 2] = ["line", "layout"];

/// One row to run: the row, the deployment it is here, and its generated
/// workload's file. Its job number (the runner's `index`, which numbers
/// its report) is the row's CSV line.
#[derive(Clone, Debug, PartialEq)]
pub struct AicRun {
    /// The row.
    pub row: AicRow,
    /// Its model, GPU, backend, TPs and DP here.
    pub deployment: Resolved,
    /// The generated workload (Mooncake JSONL), as a path.
    pub trace: String,
}

impl AicRun {
    /// The summary's labels of [`AIC_AXES`].
    pub fn labels(&self) -> Vec<String> {
        vec![self.row.line.to_string(), self.row.layout()]
    }
}

/// Why a row was refused: reported on its line, the others run.
#[derive(Clone, Debug, PartialEq)]
pub enum Refusal {
    /// No engine could run it.
    Unsimulable(Unsimulable),
    /// Its workload could not be generated.
    Workload(WorkloadError),
    /// The runner could not make it a configuration (its reason).
    Runner(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Unsimulable(u) => u.fmt(f),
            Refusal::Workload(w) => w.fmt(f),
            Refusal::Runner(why) => f.write_str(why),
        }
    }
}

/// The requests of a row's workload: eight times its concurrency, so the
/// closed loop refills its slots several times, within 200..=20,000.
pub fn row_requests(concurrency: u32) -> u64 {
    (u64::from(concurrency) * 8).clamp(200, 20_000)
}

/// Row `r` as a run (its workload written under `out`) when `choice`
/// makes it a deployment with `catalogue`'s profiles, or why not.
fn classify(
    r: &AicRow,
    choice: &Choice,
    catalogue: &[ProfileEntry],
    out: &Path,
) -> Result<AicRun, Result<Skip, Refusal>> {
    if let Some(why) = r.unsimulable() {
        return Err(Err(Refusal::Unsimulable(why)));
    }
    let deployment = choice.resolve(r, catalogue).map_err(Ok)?;
    let shape = WorkloadShape {
        isl: r.isl,
        osl: r.osl,
        requests: row_requests(r.concurrency),
        rate: 1.0,
        prefix_groups: 0,
    };
    match write_workload(&out.join(format!("aic-line-{}.jsonl", r.line)), shape) {
        Ok(trace) => Ok(AicRun {
            row: r.clone(),
            deployment,
            trace,
        }),
        Err(e) => Err(Err(Refusal::Workload(e))),
    }
}

/// A file's rows set beside their simulations, in line order.
#[derive(Clone, Debug, PartialEq)]
pub struct AicCheck {
    /// One object per line: the comparison, or why it was skipped or
    /// refused.
    pub rows: Vec<Value>,
    /// Lines refused.
    pub refused: usize,
    /// Lines read (rows and lines that were not rows).
    pub lines: usize,
    /// Rows skipped, by [`Skip::kind`], in order of first appearance.
    pub skipped: Vec<(&'static str, usize)>,
}

impl AicCheck {
    /// The comparison as text lines ([`table`]).
    pub fn table(&self) -> Vec<String> {
        table(&self.rows)
    }

    /// `aic-check.json`: the file's name, the SLO, the rows and, when
    /// some were refused or skipped, how many (skipped: by reason); when
    /// flags overrode the file's columns, the notes saying so.
    pub fn summary(&self, source: &str, slo: &SloSpec, overrides: &[String]) -> Value {
        let mut summary = json!({"source": source, "slo": slo.to_string(), "rows": self.rows});
        if self.refused > 0 {
            summary["refused_rows"] = json!(self.refused);
        }
        if !self.skipped.is_empty() {
            let by: serde_json::Map<String, Value> = self
                .skipped
                .iter()
                .map(|(k, n)| ((*k).to_string(), json!(n)))
                .collect();
            summary["skipped_rows"] = Value::Object(by);
        }
        if !overrides.is_empty() {
            summary["overrides"] = json!(overrides);
        }
        summary
    }

    /// `skipped N of M rows: 2 expert parallelism, 1 no profile`, if any
    /// were.
    pub fn skipped_line(&self) -> Option<String> {
        let n: usize = self.skipped.iter().map(|(_, n)| n).sum();
        let by: Vec<String> = self
            .skipped
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        (n > 0).then(|| format!("skipped {n} of {} rows: {}", self.lines, by.join(", ")))
    }
}

/// Simulates every row of `file` that `choice` makes a deployment with
/// `catalogue`'s profiles, with `runner` (closed loop at its concurrency,
/// its lengths, the runner's `--slo`; job number: its CSV line), its
/// workload written under `out`, and sets each estimate beside the
/// simulated mean, p50, p90 and p99. A row whose layout the mocker cannot
/// model is skipped with why ([`Skip`]); one that cannot be simulated (a
/// line that is not a row, a length of 0) is refused on its line with
/// why; the others run.
pub fn check<R: Runner<AicRun>>(
    file: &AicFile,
    slo: &SloSpec,
    choice: &Choice,
    catalogue: &[ProfileEntry],
    out: &Path,
    runner: &R,
) -> AicCheck {
    let rows = &file.rows;
    let mut configs = Vec::new();
    let mut ran = Vec::new();
    let mut not_run: Vec<(usize, Result<Skip, Refusal>)> = Vec::new();
    let mut skipped: Vec<(&'static str, usize)> = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        match classify(r, choice, catalogue, out).and_then(|run| {
            runner
                .prepare(r.line, &run)
                .map_err(|e| Err(Refusal::Runner(e)))
        }) {
            Ok(c) => {
                configs.push(c);
                ran.push(i);
            }
            Err(why) => {
                if let Ok(skip) = &why {
                    match skipped.iter_mut().find(|(k, _)| *k == skip.kind()) {
                        Some((_, n)) => *n += 1,
                        None => skipped.push((skip.kind(), 1)),
                    }
                }
                not_run.push((i, why));
            }
        }
    }
    let mut sims = ran.into_iter().zip(runner.run_all(&configs)).peekable();
    let mut report = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let sim = match sims.peek() {
            Some((j, _)) if *j == i => sims.next().map(|(_, s)| s),
            _ => None,
        };
        let why = not_run.iter().find(|(j, _)| *j == i).map(|(_, p)| p);
        let skipped = match why {
            Some(Ok(skip)) => Some(skip.to_string()),
            _ => None,
        };
        let mut row = compare(r, slo, sim.as_ref(), skipped);
        if let Some(Err(refusal)) = why {
            row["refused"] = json!(refusal.to_string());
        }
        report.push(row);
    }
    report.extend(
        file.bad
            .iter()
            .map(|e| json!({"line": e.line(), "refused": e.to_string()})),
    );
    report.sort_by_key(|r| r["line"].as_u64());
    let refused = report.iter().filter(|r| r.get("refused").is_some()).count();
    AicCheck {
        rows: report,
        refused,
        lines: rows.len() + file.bad.len(),
        skipped,
    }
}

/// Whether AIConfigurator's own estimate meets `slo`'s TTFT and TPOT
/// bounds (one number per metric: the estimate stands for every
/// percentile; an E2E bound is read against `ttft + tpot × (osl − 1)`,
/// its `request_latency`).
pub fn aic_meets(r: &AicRow, slo: &SloSpec) -> bool {
    slo.targets.iter().all(|t| {
        let v = match t.metric {
            handoff_deployment::SloMetric::Ttft => r.ttft_ms,
            handoff_deployment::SloMetric::Tpot => r.tpot_ms,
            handoff_deployment::SloMetric::E2e => {
                r.ttft_ms + r.tpot_ms * f64::from(r.osl.saturating_sub(1))
            }
        };
        v <= t.bound_ms
    })
}

/// One row's estimate beside its simulation.
fn compare(r: &AicRow, slo: &SloSpec, sim: Option<&Value>, skipped: Option<String>) -> Value {
    let stats = |s: &Value, keys: [&str; 4]| -> Value {
        json!({"mean": s[keys[0]], "p50": s[keys[1]], "p90": s[keys[2]], "p99": s[keys[3]]})
    };
    let simulated = sim.filter(|s| s["error"].is_null()).map(|s| {
        json!({
            "ttft_ms": stats(s, ["mean_ttft_ms", "median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms"]),
            "tpot_ms": stats(s, ["mean_tpot_ms", "median_tpot_ms", "p90_tpot_ms", "p99_tpot_ms"]),
            "tok_s_per_gpu": s["sizing.output_tok_s_per_gpu"],
            "tok_s_per_user": s["sizing.output_tok_s_per_user"],
            "slo_attainment": s["slo.attainment_all"],
            "slo_holds": s["slo.holds"],
            "failed_requests": s["failed_requests"],
            "report": s["report"],
        })
    });
    json!({
        "line": r.line,
        "layout": r.layout(),
        "isl": r.isl,
        "osl": r.osl,
        "concurrency": r.concurrency,
        "gpus": r.gpus,
        "aic": {
            "ttft_ms": r.ttft_ms,
            "tpot_ms": r.tpot_ms,
            "tok_s_per_gpu": r.tok_s_gpu,
            "tok_s_per_user": r.tok_s_user,
            "slo_holds": aic_meets(r, slo),
        },
        "simulated": simulated,
        "error": sim.and_then(|s| s["error"].as_str().map(str::to_string)),
        "skipped": skipped,
    })
}

/// The comparison as text lines.
pub fn table(rows: &[Value]) -> Vec<String> {
    let mut v = vec![format!(
        "{:>4} {:<14} {:>5} {:>11} | {:>8} {:>31} | {:>7} {:>27} | {:>15} {:>15} | {:>9}",
        "line",
        "layout",
        "conc",
        "isl/osl",
        "AIC ttft",
        "sim ttft mean/p50/p90/p99",
        "AIC tpot",
        "sim tpot mean/p50/p90/p99",
        "tok/s/gpu aic|sim",
        "tok/s/user aic|sim",
        "SLO aic|sim"
    )];
    let f = |x: &Value| x.as_f64().map_or("-".into(), |x| format!("{x:.1}"));
    for r in rows {
        let n = |k: &str| r[k].as_u64().unwrap_or(0);
        let head = format!(
            "{:>4} {:<14} {:>5} {:>11}",
            n("line"),
            r["layout"].as_str().unwrap_or(""),
            n("concurrency"),
            format!("{}/{}", n("isl"), n("osl"))
        );
        let a = &r["aic"];
        let yes = |b: &Value| match b.as_bool() {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        };
        if let Some(why) = r["refused"].as_str() {
            match r.get("layout") {
                Some(_) => v.push(format!("{head} | refused: {why}")),
                None => v.push(format!("{:>4} | refused: {why}", n("line"))),
            }
            continue;
        }
        let Some(s) = r["simulated"].as_object() else {
            let why = r["skipped"]
                .as_str()
                .or(r["error"].as_str())
                .unwrap_or("not run");
            v.push(format!("{head} | skipped: {why}"));
            continue;
        };
        let four = |m: &Value| {
            format!(
                "{}/{}/{}/{}",
                f(&m["mean"]),
                f(&m["p50"]),
                f(&m["p90"]),
                f(&m["p99"])
            )
        };
        v.push(format!(
            "{head} | {:>8} {:>31} | {:>7} {:>27} | {:>15} {:>15} | {:>9}",
            f(&a["ttft_ms"]),
            four(&s["ttft_ms"]),
            f(&a["tpot_ms"]),
            four(&s["tpot_ms"]),
            format!("{}|{}", f(&a["tok_s_per_gpu"]), f(&s["tok_s_per_gpu"])),
            format!("{}|{}", f(&a["tok_s_per_user"]), f(&s["tok_s_per_user"])),
            format!("{}|{}", yes(&a["slo_holds"]), yes(&s["slo_holds"])),
        ));
    }
    v
}
