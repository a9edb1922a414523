//! `plan --check-aic FILE`: AIConfigurator's saved picks, simulated.
//!
//! AIConfigurator (pinned: 0.11.0, ai-dynamo/aiconfigurator at 095f58a)
//! saves `best_config_topn.csv` and `pareto.csv` under its `--save-dir`
//! (`cli/report_and_save.py` `save_results`, pandas `to_csv`, header line,
//! comma-separated). Their columns are `ColumnsAgg` or `ColumnsDisagg`
//! (`aic-core/.../sdk/common.py`); the ones read here:
//! - `isl`, `osl`: fixed prompt and output lengths; `prefix`: tokens of
//!   the prompt already cached (only 0 is simulated);
//! - `concurrency`: requests in flight for the whole row (disaggregated:
//!   the decode worker's concurrency × `(d)workers`, `sdk/picking.py`
//!   `_build_disagg_summary_dict`);
//! - aggregated rows: `tp`, `pp`, `dp` of the one replica the row
//!   describes; disaggregated rows: `(p)workers`, `(d)workers`, `(p)tp`,
//!   `(d)tp`, `(p)pp`, `(d)pp`, `(p)dp`, `(d)dp`;
//! - its estimates: `ttft` and `tpot` (ms), `request_latency` (ms),
//!   `tokens/s/gpu` (`tokens/s / num_total_gpus`), `tokens/s/user`
//!   (`1000 / tpot`), `num_total_gpus`.
//!
//! Each row runs closed loop at its concurrency on a generated workload of
//! its lengths, with the same TP on both pools (the CLI has one `--tp`): a
//! row whose prefill and decode TP differ, with pipeline parallelism, with
//! a prefix, or with a TP no profile has, is listed as skipped, with why.

use crate::sweep_cmd::{in_order, run_one};
use crate::sweep_grid::{Configuration, Parsed, ReplayOnly};
use clap::Parser as _;
use handoff_deployment::SloSpec;
use handoff_workload::file::FileKind;
use handoff_workload::{LengthDist, SyntheticConfig, SyntheticWorkload};
use serde_json::{json, Value};
use std::path::Path;

/// The shape of a generated workload: fixed lengths, Poisson arrivals.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WorkloadShape {
    /// Prompt tokens.
    pub isl: u32,
    /// Output tokens.
    pub osl: u32,
    /// Requests.
    pub requests: u64,
    /// Arrivals per second.
    pub rate: f64,
    /// Shared-prefix groups (0: none).
    pub prefix_groups: u32,
}

/// Writes the workload `w` describes to `path` as Mooncake JSONL; the path
/// as a flag takes it.
pub fn write_workload(path: &Path, w: WorkloadShape) -> Result<String, String> {
    let bad = |what: &str| Err(format!("plan: {what}"));
    if !(1..=1_000_000).contains(&w.isl) || !(1..=1_000_000).contains(&w.osl) {
        return bad("--isl and --osl must be 1..=1000000 tokens");
    }
    if !(1..=1_000_000).contains(&w.requests) {
        return bad("--requests must be 1..=1000000");
    }
    if !(w.rate.is_finite() && w.rate > 0.0) {
        return bad("--rate must be a positive number");
    }
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let items = SyntheticWorkload::new(SyntheticConfig {
        requests: w.requests,
        rate_per_sec: w.rate,
        input_tokens: LengthDist::Fixed(w.isl),
        output_tokens: LengthDist::Fixed(w.osl),
        prefix_groups: w.prefix_groups,
        ..SyntheticConfig::default()
    });
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    let f = std::fs::File::create(path).map_err(io)?;
    let mut w = handoff_workload::TraceWriter::new(std::io::BufWriter::new(f));
    for item in items {
        w.write(&item).map_err(io)?;
    }
    w.into_inner().map_err(io)?;
    Ok(path.display().to_string())
}

/// Why an AIConfigurator file was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AicError {
    /// No header line.
    Empty,
    /// A column every row needs is missing from the header.
    MissingColumn(&'static str),
    /// A cell that is not the number its column holds.
    Cell {
        /// 1-based line.
        line: usize,
        /// Column name.
        column: &'static str,
        /// The cell.
        value: String,
    },
    /// A line with another number of cells than the header.
    Width {
        /// 1-based line.
        line: usize,
        /// Cells on it.
        cells: usize,
        /// Cells of the header.
        header: usize,
    },
    /// More rows than [`MAX_ROWS`].
    TooMany,
}

impl AicError {
    /// The 1-based line the error is on (0: the file as a whole).
    pub fn line(&self) -> usize {
        match self {
            AicError::Cell { line, .. } | AicError::Width { line, .. } => *line,
            AicError::Empty | AicError::MissingColumn(_) | AicError::TooMany => 0,
        }
    }
}

impl std::fmt::Display for AicError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AicError::Empty => write!(f, "no header line"),
            AicError::MissingColumn(c) => write!(f, "no `{c}` column"),
            AicError::Cell {
                line,
                column,
                value,
            } => write!(
                f,
                "line {line}, column `{column}`: `{value}` is not a number in range"
            ),
            AicError::Width {
                line,
                cells,
                header,
            } => write!(f, "line {line}: {cells} cells, the header has {header}"),
            AicError::TooMany => write!(f, "more than {MAX_ROWS} rows"),
        }
    }
}

/// Rows read at most.
pub const MAX_ROWS: usize = 1000;

/// One row of AIConfigurator's picks.
#[derive(Clone, Debug, PartialEq)]
pub struct AicRow {
    /// 1-based line in the file.
    pub line: usize,
    /// Prompt and output lengths, cached prefix.
    pub isl: u32,
    /// Output tokens.
    pub osl: u32,
    /// Cached prompt tokens.
    pub prefix: u32,
    /// Requests in flight.
    pub concurrency: u32,
    /// Prefill (or aggregated) workers, decode workers (0: aggregated).
    pub prefill: u32,
    /// Decode workers.
    pub decode: u32,
    /// TP, PP and DP of prefill (or aggregated) workers.
    pub p_par: [u32; 3],
    /// TP, PP and DP of decode workers (aggregated: as prefill).
    pub d_par: [u32; 3],
    /// Estimated TTFT and TPOT, ms.
    pub ttft_ms: f64,
    /// Estimated TPOT, ms.
    pub tpot_ms: f64,
    /// Estimated tokens/s/GPU and tokens/s/user.
    pub tok_s_gpu: f64,
    /// Estimated tokens/s/user.
    pub tok_s_user: f64,
    /// GPUs of the row.
    pub gpus: u32,
}

impl AicRow {
    /// Why this row cannot run here, if it cannot.
    pub fn unsupported(&self) -> Option<String> {
        if self.p_par[0] != self.d_par[0] || self.p_par[2] != self.d_par[2] {
            return Some(format!(
                "prefill TP{}/DP{} and decode TP{}/DP{} differ (one --tp, one --dp-size here)",
                self.p_par[0], self.p_par[2], self.d_par[0], self.d_par[2]
            ));
        }
        if self.p_par[1] > 1 || self.d_par[1] > 1 {
            return Some("pipeline parallelism is not modelled".into());
        }
        (self.prefix > 0).then(|| format!("a cached prefix of {} tokens", self.prefix))
    }

    /// Why no engine could run this row at all, if so: a length or a
    /// parallelism of zero (the row is refused, not simulated).
    pub fn unsimulable(&self) -> Option<String> {
        if self.isl == 0 || self.osl == 0 {
            return Some(format!(
                "isl {} and osl {}: a request needs at least one prompt and one output token",
                self.isl, self.osl
            ));
        }
        let zero = |p: [u32; 3]| p.contains(&0);
        (zero(self.p_par) || zero(self.d_par)).then(|| {
            format!(
                "a parallelism of 0 (prefill TP/PP/DP {:?}, decode {:?})",
                self.p_par, self.d_par
            )
        })
    }

    /// `1P+2D tp1`, or `1x agg tp2`.
    pub fn layout(&self) -> String {
        let dp = if self.p_par[2] > 1 {
            format!(" dp{}", self.p_par[2])
        } else {
            String::new()
        };
        if self.decode == 0 {
            format!("{}x agg tp{}{dp}", self.prefill, self.p_par[0])
        } else {
            format!("{}P+{}D tp{}{dp}", self.prefill, self.decode, self.p_par[0])
        }
    }
}

/// Splits one CSV line (pandas quoting: `"` around a cell with a comma,
/// `""` for a quote inside).
fn cells(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            (c, _) => cur.push(c),
        }
    }
    out.push(cur);
    out
}

/// An AIConfigurator file read: its rows, and the lines that are not rows
/// (a cell that is not a number in range, another number of cells than
/// the header), each with its line and why, in file order.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct AicFile {
    /// The rows read.
    pub rows: Vec<AicRow>,
    /// The lines that could not be read as rows.
    pub bad: Vec<AicError>,
}

/// Where the header puts the columns a row is read from.
struct Columns {
    head: Vec<String>,
    /// isl, osl, concurrency, ttft, tpot, tokens/s/gpu, tokens/s/user,
    /// num_total_gpus.
    base: [usize; 8],
    /// TP, PP, DP of prefill (or aggregated) and decode workers.
    pp: [Option<usize>; 3],
    dp: [Option<usize>; 3],
    workers: Option<(usize, usize)>,
    prefix: Option<usize>,
}

impl Columns {
    fn of(head: Vec<String>) -> Result<Columns, AicError> {
        let col = |name: &'static str| head.iter().position(|h| h == name);
        let need = |name: &'static str| col(name).ok_or(AicError::MissingColumn(name));
        let disagg = col("(p)workers").is_some();
        let base = [
            need("isl")?,
            need("osl")?,
            need("concurrency")?,
            need("ttft")?,
            need("tpot")?,
            need("tokens/s/gpu")?,
            need("tokens/s/user")?,
            need("num_total_gpus")?,
        ];
        let par = |prefix: &str| -> Result<[Option<usize>; 3], AicError> {
            let names: [&'static str; 3] = match prefix {
                "(p)" => ["(p)tp", "(p)pp", "(p)dp"],
                "(d)" => ["(d)tp", "(d)pp", "(d)dp"],
                _ => ["tp", "pp", "dp"],
            };
            Ok([Some(need(names[0])?), col(names[1]), col(names[2])])
        };
        let (pp, dp) = if disagg {
            (par("(p)")?, par("(d)")?)
        } else {
            (par("")?, par("")?)
        };
        let workers = if disagg {
            Some((need("(p)workers")?, need("(d)workers")?))
        } else {
            None
        };
        let prefix = col("prefix");
        Ok(Columns {
            head,
            base,
            pp,
            dp,
            workers,
            prefix,
        })
    }

    /// The row on 1-based line `line_no`, whose text is `line`.
    fn row(&self, line_no: usize, line: &str) -> Result<AicRow, AicError> {
        let (head, base) = (&self.head, self.base);
        let c = cells(line.trim_end_matches('\r'));
        if c.len() != head.len() {
            return Err(AicError::Width {
                line: line_no,
                cells: c.len(),
                header: head.len(),
            });
        }
        let num = |at: usize, max: f64| -> Result<f64, AicError> {
            let v = c[at].trim();
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0 && *x <= max)
                .ok_or_else(|| AicError::Cell {
                    line: line_no,
                    column: column_name(head, at),
                    value: v.to_string(),
                })
        };
        let int = |at: Option<usize>, max: f64| -> Result<u32, AicError> {
            at.map_or(Ok(1), |at| num(at, max).map(|x| x.round() as u32))
        };
        let tri = |p: [Option<usize>; 3]| -> Result<[u32; 3], AicError> {
            Ok([int(p[0], 1024.0)?, int(p[1], 1024.0)?, int(p[2], 1024.0)?])
        };
        let (prefill, decode) = match self.workers {
            Some((p, d)) => (int(Some(p), 4096.0)?, int(Some(d), 4096.0)?),
            None => (1, 0),
        };
        Ok(AicRow {
            line: line_no,
            isl: int(Some(base[0]), 1e6)?,
            osl: int(Some(base[1]), 1e6)?,
            prefix: self.prefix.map_or(Ok(0), |p| int(Some(p), 1e6))?,
            concurrency: int(Some(base[2]), 1e6)?.max(1),
            prefill: prefill.max(1),
            decode,
            p_par: tri(self.pp)?,
            d_par: tri(self.dp)?,
            ttft_ms: num(base[3], 1e9)?,
            tpot_ms: num(base[4], 1e9)?,
            tok_s_gpu: num(base[5], 1e12)?,
            tok_s_user: num(base[6], 1e12)?,
            gpus: int(Some(base[7]), 1e6)?,
        })
    }
}

/// Reads AIConfigurator's `best_config_topn.csv` or `pareto.csv` text: a
/// header it cannot use, or more than [`MAX_ROWS`] lines of rows, refuses
/// the file; a line it cannot read as a row is kept in [`AicFile::bad`].
pub fn parse(text: &str) -> Result<AicFile, AicError> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, head) = lines.next().ok_or(AicError::Empty)?;
    let columns = Columns::of(cells(head.trim_end_matches('\r')))?;
    let mut file = AicFile::default();
    for (i, line) in lines {
        if file.rows.len() + file.bad.len() == MAX_ROWS {
            return Err(AicError::TooMany);
        }
        match columns.row(i + 1, line) {
            Ok(row) => file.rows.push(row),
            Err(e) => file.bad.push(e),
        }
    }
    Ok(file)
}

/// The header's name for column `at` (the known names the reader asks
/// for; anything else is `?`).
fn column_name(head: &[String], at: usize) -> &'static str {
    const KNOWN: [&str; 22] = [
        "isl",
        "osl",
        "prefix",
        "concurrency",
        "ttft",
        "tpot",
        "tokens/s/gpu",
        "tokens/s/user",
        "num_total_gpus",
        "tp",
        "pp",
        "dp",
        "(p)workers",
        "(d)workers",
        "(p)tp",
        "(p)pp",
        "(p)dp",
        "(d)tp",
        "(d)pp",
        "(d)dp",
        "bs",
        "global_bs",
    ];
    let name = head.get(at).map_or("", String::as_str);
    KNOWN.iter().find(|k| **k == name).copied().unwrap_or("?")
}

/// Report paths each checked row carries beyond a sweep's.
const AIC_METRICS: &[&str] = &["p90_ttft_ms", "median_tpot_ms", "p90_tpot_ms"];

/// What becomes of one row.
enum RowPlan {
    /// It runs.
    Run(Configuration),
    /// It is valid but not modelled here (why).
    Skipped(String),
    /// It cannot be simulated (why): reported on its line, the run goes on.
    Refused(String),
}

/// What the rows share: the flags of `--slo`, the price and `plan`'s own,
/// the model's flags and the TPs it has profiles at.
struct Shared {
    flags: Vec<String>,
    add: Vec<String>,
    tps: Vec<u32>,
}

/// Row `i` of the file, `r`, as a configuration to run (its workload
/// written under `out`), or why not.
fn plan_row(i: usize, r: &AicRow, shared: &Shared, out: &Path) -> RowPlan {
    if let Some(why) = r.unsimulable() {
        return RowPlan::Refused(why);
    }
    let why = r.unsupported().or_else(|| {
        (!shared.tps.contains(&r.p_par[0])).then(|| format!("no profile at TP{}", r.p_par[0]))
    });
    if let Some(why) = why {
        return RowPlan::Skipped(why);
    }
    let requests = (u64::from(r.concurrency) * 8).clamp(200, 20_000);
    let shape = WorkloadShape {
        isl: r.isl,
        osl: r.osl,
        requests,
        rate: 1.0,
        prefix_groups: 0,
    };
    let trace = match write_workload(&out.join(format!("aic-row-{i}.jsonl")), shape) {
        Ok(trace) => trace,
        Err(e) => return RowPlan::Refused(e),
    };
    let mut args: Vec<String> = vec![
        "--prefill".into(),
        r.prefill.to_string(),
        "--decode".into(),
        r.decode.to_string(),
        "--tp".into(),
        r.p_par[0].to_string(),
        "--dp-size".into(),
        r.p_par[2].to_string(),
        "--trace".into(),
        trace,
        "--concurrency".into(),
        r.concurrency.to_string(),
    ];
    args.extend(shared.add.iter().cloned());
    args.extend(shared.flags.iter().cloned());
    match ReplayOnly::try_parse_from(&args) {
        Ok(parsed) => RowPlan::Run(Configuration {
            index: i,
            labels: vec![i.to_string(), r.layout()],
            args,
            parsed: Parsed::Replay(Box::new(parsed.args)),
        }),
        Err(e) => RowPlan::Refused(e.to_string().trim().to_string()),
    }
}

/// Simulates every row of `file` (closed loop at its concurrency, its
/// lengths, `--slo`), prints each estimate beside the simulated mean, p50,
/// p90 and p99, and writes `aic-check.json` and the reports to `out`. A
/// row that cannot be simulated (a line that is not a row, a length of 0)
/// is reported on its line with why, counted on stderr, and the others run.
pub fn check(
    file: &Path,
    slo: &SloSpec,
    price: Option<f64>,
    base: &[String],
    out: &Path,
    jobs: Option<usize>,
) -> Result<(), String> {
    let name = file.display().to_string();
    let text = handoff_workload::file::read_to_string("--check-aic", file, FileKind::AicCsv)
        .map_err(|e| e.to_string())?;
    let AicFile { rows, bad } = parse(&text).map_err(|e| format!("--check-aic {name}: {e}"))?;
    std::fs::create_dir_all(out).map_err(|e| format!("--out {}: {e}", out.display()))?;
    let mut flags: Vec<String> = base.to_vec();
    flags.extend(["--slo".into(), slo.to_string()]);
    if let Some(p) = price {
        flags.extend(["--gpu-hour-usd".into(), p.to_string()]);
    }
    let (add, tps) = crate::plan_cmd::model_and_tps(&[], &flags)?;
    let shared = Shared { flags, add, tps };
    let mut configs = Vec::new();
    let mut not_run: Vec<(usize, RowPlan)> = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        match plan_row(i, r, &shared, out) {
            RowPlan::Run(c) => configs.push(c),
            other => not_run.push((i, other)),
        }
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs.unwrap_or(0))
        .stack_size(8 << 20)
        .build()
        .map_err(|e| format!("--jobs: {e}"))?;
    let keys: Vec<String> = ["row", "layout"].map(String::from).to_vec();
    let sims = pool.install(|| {
        in_order(&configs, |c| {
            run_one(c, &keys, out, rows.len(), AIC_METRICS)
        })
    });
    let mut report = Vec::new();
    let mut sims = sims.into_iter().peekable();
    for (i, r) in rows.iter().enumerate() {
        let sim = match sims.peek() {
            Some(s) if s["index"].as_u64() == Some(i as u64) => sims.next(),
            _ => None,
        };
        let plan = not_run.iter().find(|(j, _)| *j == i).map(|(_, p)| p);
        let skipped = match plan {
            Some(RowPlan::Skipped(why)) => Some(why.clone()),
            _ => None,
        };
        let mut row = compare(r, slo, sim.as_ref(), skipped);
        if let Some(RowPlan::Refused(why)) = plan {
            row["refused"] = json!(why);
        }
        report.push(row);
    }
    report.extend(
        bad.iter()
            .map(|e| json!({"line": e.line(), "refused": e.to_string()})),
    );
    report.sort_by_key(|r| r["line"].as_u64());
    for line in table(&report) {
        out!("{line}");
    }
    let refused = report.iter().filter(|r| r.get("refused").is_some()).count();
    let mut summary = json!({"source": name, "slo": slo.to_string(), "rows": report});
    if refused > 0 {
        eprintln!(
            "--check-aic {name}: {refused} of {} rows could not be simulated (each on its \
             line above); the others ran",
            rows.len() + bad.len()
        );
        summary["refused_rows"] = json!(refused);
    }
    let path = out.join("aic-check.json");
    let text = serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?;
    std::fs::write(&path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))
}

/// Whether AIConfigurator's own estimate meets `slo`'s TTFT and TPOT
/// bounds (one number per metric: the estimate stands for every
/// percentile; an E2E bound is read against `ttft + tpot × (osl − 1)`,
/// its `request_latency`).
fn aic_meets(r: &AicRow, slo: &SloSpec) -> bool {
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
fn table(rows: &[Value]) -> Vec<String> {
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

#[cfg(test)]
#[path = "plan_aic_tests.rs"]
mod tests;
