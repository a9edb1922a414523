//! `handoff-mocker sweep`: a grid of replay configurations (see
//! [`crate::sweep_grid`]) run in parallel on every core, one report file
//! per configuration and one summary (CSV and JSON) with a row per
//! configuration; `--shard I/N` runs every N-th configuration and `sweep
//! merge` joins the shards' summaries into the full grid's.
//!
//! `sweep --experiment` sweeps `experiment e4` the same way (see
//! [`crate::sweep_experiment`]), and `--html` draws its map
//! ([`crate::sweep_map`]).
//!
//! Determinism: each configuration is one replay, itself deterministic, on
//! one thread; rows are gathered in configuration order, and nothing that
//! depends on timing or thread count (wall times, completion order) enters
//! a report or a summary. So the summary is byte-identical whatever
//! `--jobs` or `RAYON_NUM_THREADS` is, and merging shards gives the bytes a
//! single run of the whole grid writes.

use crate::replay_cmd::simulate;
use crate::report_out::write_output_with;
use crate::sweep_grid::{Configuration, Grid, Kind, Parsed};
use clap::{Args, CommandFactory, Subcommand};
use handoff_workload::file::{read_to_string, FileKind};
use serde_json::{json, Map, Value};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// Options of `sweep`.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SweepArgs {
    #[command(subcommand)]
    command: Option<SweepCommand>,
    /// Grid file: TOML, or JSON by `.json` (`[base]` options and `[grid]`
    /// option = [values]; see the README).
    #[arg(long, value_name = "FILE")]
    grid: Option<PathBuf>,
    /// Sweep a replay option over values: `--set prefill=2,4,8`
    /// (repeatable; replaces the grid file's values for that option).
    #[arg(long = "set", value_name = "KEY=V1,V2,...")]
    set: Vec<String>,
    /// Directory for the reports (`config-NNNN.json`) and the summary
    /// (`summary.csv`, `summary.json`; with --shard
    /// `summary-shard-I-of-N.*`).
    #[arg(long, default_value = "sweep-out", value_name = "DIR")]
    out: PathBuf,
    /// Run only configurations whose number is I modulo N (I from 0), for
    /// splitting a grid across hosts; join with `sweep merge`.
    #[arg(long, value_name = "I/N")]
    shard: Option<String>,
    /// Threads, 1..=256 [default: every core, or RAYON_NUM_THREADS].
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
    /// Sweep `experiment e4` instead of `replay`: keys are experiment's
    /// flags, each configuration runs E1, E3, E4 and E4-ablate, and its row
    /// holds the H4 verdicts and the measures behind them.
    #[arg(long)]
    experiment: bool,
    #[command(flatten)]
    page: MapPage,
    /// Flags every configuration shares, after `--`.
    #[arg(last = true, value_name = "FLAGS")]
    base: Vec<String>,
}

/// The HTML map of an experiment sweep.
#[derive(Args, Debug, Default)]
struct MapPage {
    /// Write the HTML map of an experiment sweep here: H4-2 as a heatmap
    /// over two axes, bypass hit rate and push bandwidth beside it, and
    /// the freshness of E4's snapshots at its reseeds.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// The heatmap's axes, X,Y (swept keys) [default: the first two].
    #[arg(long, value_name = "X,Y", requires = "html")]
    map: Option<String>,
}

#[derive(Subcommand, Debug)]
enum SweepCommand {
    /// Join the JSON summaries of a grid's shards into the full grid's
    /// summary (byte-identical to running the grid unsharded).
    Merge {
        /// The shards' `summary-shard-*.json` files.
        #[arg(required = true, value_name = "SUMMARY")]
        summaries: Vec<PathBuf>,
        /// Directory for `summary.csv` and `summary.json`.
        #[arg(long, default_value = "sweep-out", value_name = "DIR")]
        out: PathBuf,
        #[command(flatten)]
        page: MapPage,
    },
}

/// Report fields every summary row carries, as paths into the report's
/// JSON (`a.b` for nested fields); the CSV's columns after the axes.
const METRICS: &[&str] = &[
    "num_requests",
    "completed_requests",
    "failed_requests",
    "total_input_tokens",
    "total_output_tokens",
    "duration_s",
    "request_throughput_rps",
    "output_token_throughput_tps",
    "prefix_cache_reused_ratio",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "p99_itl_ms",
    "mean_e2e_latency_ms",
    "p99_e2e_latency_ms",
    "lifecycle.handoffs_pinned",
    "lifecycle.handoffs_activated",
    "lifecycle.source_pinned_ms.p99",
    "lifecycle.reservation_wait_ms.p99",
    "lifecycle.lease_expiries",
    "lifecycle.reservation_expiries",
    "lifecycle.preemptions",
];

/// Columns added to every row when the reports carry the SLO and sizing
/// sections (`--slo`, `--gpu-hour-usd` among the flags); absent otherwise,
/// so a summary without them is as before.
pub(crate) const SIZING_METRICS: &[&str] = &[
    "slo.holds",
    "slo.attainment_all",
    "slo.goodput_rps",
    "slo.goodput_output_tok_s",
    "sizing.gpus",
    "sizing.output_tok_s_per_gpu",
    "sizing.output_tok_s_per_user",
    "sizing.goodput_tok_s_per_gpu",
    "sizing.usd_per_million_output_tokens",
];

/// The value at `path` in `report`: `a.b` for nested fields, or
/// `sum:ARRAY.FIELD` for the sum of a field over an array's entries
/// (`sum:workers.pinned_block_seconds`, rounded to 3 decimals).
pub(crate) fn metric(report: &Value, path: &str) -> Value {
    if let Some((array, field)) = path.strip_prefix("sum:").and_then(|p| p.split_once('.')) {
        let total: f64 = report[array]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e[field].as_f64())
            .sum();
        return json!((total * 1e3).round() / 1e3);
    }
    path.split('.')
        .try_fold(report, |v, k| v.get(k))
        .cloned()
        .unwrap_or(Value::Null)
}

/// `--shard I/N`.
pub(crate) fn parse_shard(s: &str) -> Result<(usize, usize), String> {
    let bad = || format!("--shard {s}: expected I/N with 0 <= I < N");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n): (usize, usize) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if n == 0 || i >= n {
        return Err(bad());
    }
    Ok((i, n))
}

fn report_name(index: usize, total: usize) -> String {
    let width = total.saturating_sub(1).to_string().len().max(4);
    format!("config-{index:0width$}.json")
}

/// What identifies a grid: shards of one grid must agree on it to merge.
/// A replay grid has no `kind` (its summaries predate experiment sweeps).
fn grid_json(grid: &Grid, total: usize) -> Value {
    let mut g = json!({
        "configurations": total,
        "base": grid.base_args(),
        "axes": grid.axes.iter().map(|a| json!({
            "key": a.key,
            "values": a.values.iter().map(|v| v.label()).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    if grid.kind == Kind::Experiment {
        g["kind"] = json!("experiment");
    }
    g
}

/// The summary's columns after the axes: by its grid's kind.
fn metrics_of(summary: &Value) -> Vec<&'static str> {
    match summary["grid"]["kind"].as_str() {
        Some("experiment") => crate::sweep_experiment::METRICS.to_vec(),
        Some("plan") => METRICS
            .iter()
            .chain(handoff_plan::PLAN_METRICS)
            .copied()
            .collect(),
        _ => METRICS.to_vec(),
    }
}

/// Writes the map page of `summary` when asked (experiment sweeps only).
fn write_page(page: &MapPage, summary: &Value) -> Result<(), String> {
    let Some(path) = &page.html else {
        return Ok(());
    };
    let html = crate::sweep_map::page(summary, page.map.as_deref())?;
    std::fs::write(path, html).map_err(|e| format!("--html {}: {e}", path.display()))
}

/// The grid `a` asks for: its file, then each `--set`, then the base flags
/// every configuration shares.
fn build_grid(a: &SweepArgs) -> Result<Grid, String> {
    let mut grid = Grid {
        kind: if a.experiment {
            Kind::Experiment
        } else {
            Kind::Replay
        },
        ..Grid::default()
    };
    if a.page.html.is_some() && !a.experiment {
        return Err("--html draws the map of an experiment sweep (add --experiment)".into());
    }
    if let Some(p) = &a.grid {
        grid.read_file(p)?;
    }
    for s in &a.set {
        grid.parse_set(s)?;
    }
    if grid.axes.is_empty() {
        return Err("sweep: nothing to sweep; give --grid FILE or --set KEY=V1,V2,...".into());
    }
    grid.trailing = a.base.clone();
    Ok(grid)
}

pub fn run(a: SweepArgs) -> Result<(), String> {
    if let Some(SweepCommand::Merge {
        summaries,
        out,
        page,
    }) = &a.command
    {
        return merge(summaries, out, page);
    }
    let grid = build_grid(&a)?;
    let shard = a.shard.as_deref().map(parse_shard).transpose()?;
    if let Some(n) = a.jobs {
        crate::limits::jobs(n)?;
    }
    if a.page.html.is_some() {
        if shard.is_some() {
            return Err("--html draws the whole grid: give it to `sweep merge`".into());
        }
        crate::sweep_map::check_map(&grid.keys(), a.page.map.as_deref())?;
    }
    let all = grid.configurations()?;
    let total = all.len();
    let mine: Vec<Configuration> = match shard {
        Some((i, n)) => all.into_iter().filter(|c| c.index % n == i).collect(),
        None => all,
    };
    std::fs::create_dir_all(&a.out).map_err(|e| format!("--out {}: {e}", a.out.display()))?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(a.jobs.unwrap_or(0))
        // A replay on a worker thread gets the main thread's stack size.
        .stack_size(8 << 20)
        .build()
        .map_err(|e| format!("--jobs: {e}"))?;
    let bar = progress_bar(mine.len());
    let started = std::time::Instant::now();
    let out = a.out.clone();
    let keys = grid.keys();
    let rows = pool.install(|| {
        in_order(&mine, |c| {
            let row = run_one(c, &keys, &out, total, &[]);
            bar.inc(1);
            row
        })
    });
    bar.finish_and_clear();
    let failed = rows.iter().filter(|r| !r["error"].is_null()).count();
    let mut summary = Map::new();
    summary.insert("grid".into(), grid_json(&grid, total));
    summary.insert(
        "shard".into(),
        shard.map_or(Value::Null, |(i, n)| json!(format!("{i}/{n}"))),
    );
    summary.insert("rows".into(), Value::Array(rows));
    let stem = match shard {
        Some((i, n)) => format!("summary-shard-{i}-of-{n}"),
        None => "summary".to_string(),
    };
    let summary = Value::Object(summary);
    write_summary(&summary, &a.out, &stem)?;
    write_page(&a.page, &summary)?;
    eprintln!(
        "sweep: {} of {total} configurations in {:.3} s on {} threads, {failed} failed; {}",
        mine.len(),
        started.elapsed().as_secs_f64(),
        pool.current_num_threads(),
        a.out.join(format!("{stem}.csv")).display()
    );
    if failed > 0 {
        return Err(format!(
            "{failed} configurations did not run (see the `error` column)"
        ));
    }
    Ok(())
}

/// A progress bar of `n` configurations on a terminal, hidden otherwise.
fn progress_bar(n: usize) -> indicatif::ProgressBar {
    if std::io::stderr().is_terminal() {
        indicatif::ProgressBar::new(n as u64).with_style(
            indicatif::ProgressStyle::with_template(
                "sweep {bar:40} {pos}/{len} configurations, {elapsed} elapsed, eta {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        )
    } else {
        indicatif::ProgressBar::hidden()
    }
}

/// `f` of every item on the current pool's threads, each thread taking the
/// next item in grid order as it frees up; the results in item order. A
/// parallel iterator would instead split the grid into halves and steal
/// from their ends, so the run's tail would be whichever configurations
/// sit mid-grid; in order, it is the grid's last ones, and the first axis
/// varies slowest, so a grid that lists its heavy values first (a backend,
/// a large pool) ends on light configurations and no core idles long.
pub(crate) fn in_order<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let done = std::sync::Mutex::new(Vec::with_capacity(items.len()));
    rayon::broadcast(|_| loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(item) = items.get(i) else {
            break;
        };
        let r = f(item);
        done.lock().unwrap_or_else(|e| e.into_inner()).push((i, r));
    });
    let mut done = done.into_inner().unwrap_or_else(|e| e.into_inner());
    done.sort_unstable_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

/// Runs one configuration and writes its report; the summary row
/// ([`METRICS`], then `extra` report paths of a replay, then
/// [`SIZING_METRICS`] when the report has them).
pub(crate) fn run_one(
    c: &Configuration,
    keys: &[String],
    out: &Path,
    total: usize,
    extra: &[&str],
) -> Value {
    let mut row = Map::new();
    row.insert("index".into(), json!(c.index));
    let config: Map<String, Value> = keys
        .iter()
        .zip(&c.labels)
        .map(|(k, l)| (k.clone(), json!(l)))
        .collect();
    row.insert("config".into(), Value::Object(config));
    row.insert("args".into(), json!(c.args.join(" ")));
    let name = report_name(c.index, total);
    let (result, metrics) = match &c.parsed {
        Parsed::Replay(args) => (
            simulate(args, false, None).and_then(|mut sim| {
                // The report `replay` with these flags writes: its run too.
                let m = crate::sweep_grid::ReplayOnly::command()
                    .try_get_matches_from(&c.args)
                    .map_err(|e| e.to_string())?;
                sim.report.config.run = crate::args::invocation::describe(&m);
                write_output_with(&out.join(&name), &sim.report, &Map::new())?;
                let report = serde_json::to_value(&sim.report).map_err(|e| e.to_string())?;
                let sized = report.get("sizing").is_some() || report.get("slo").is_some();
                Ok(METRICS
                    .iter()
                    .chain(extra)
                    .chain(if sized { SIZING_METRICS } else { &[] })
                    .map(|m| ((*m).to_string(), metric(&report, m)))
                    .collect())
            }),
            METRICS,
        ),
        Parsed::Experiment(args) => (
            crate::sweep_experiment::run_point(args, &out.join(&name)),
            crate::sweep_experiment::METRICS,
        ),
    };
    match result {
        Ok(mut values) => {
            row.insert("report".into(), json!(name));
            row.insert("error".into(), Value::Null);
            for m in metrics {
                row.insert((*m).into(), values.remove(*m).unwrap_or(Value::Null));
            }
            for m in extra.iter().chain(SIZING_METRICS) {
                if let Some(v) = values.remove(*m) {
                    row.insert((*m).into(), v);
                }
            }
        }
        Err(e) => {
            row.insert("report".into(), Value::Null);
            row.insert("error".into(), json!(e));
            for m in metrics {
                row.insert((*m).into(), Value::Null);
            }
        }
    }
    Value::Object(row)
}

fn csv_field(v: &Value) -> String {
    let s = match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

/// The summary as CSV: index, each axis, report, error, then [`METRICS`].
fn csv(summary: &Value) -> String {
    let keys: Vec<String> = summary["grid"]["axes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x["key"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let mut head = vec!["index".to_string()];
    head.extend(keys.iter().cloned());
    head.extend(["report".to_string(), "error".to_string()]);
    let mut metrics = metrics_of(summary);
    let rows = summary["rows"].as_array().into_iter().flatten();
    if rows.clone().any(|r| r.get(SIZING_METRICS[4]).is_some()) {
        metrics.extend(SIZING_METRICS.iter().copied());
    }
    // `plan --max-rate`'s column.
    if rows.clone().any(|r| r.get("max_rate_rps").is_some()) {
        metrics.push("max_rate_rps");
    }
    head.extend(metrics.iter().map(|m| m.to_string()));
    let mut s = head.join(",");
    s.push('\n');
    for row in rows {
        let mut cells = vec![csv_field(&row["index"])];
        cells.extend(keys.iter().map(|k| csv_field(&row["config"][k])));
        cells.push(csv_field(&row["report"]));
        cells.push(csv_field(&row["error"]));
        cells.extend(metrics.iter().map(|m| csv_field(&row[*m])));
        s.push_str(&cells.join(","));
        s.push('\n');
    }
    s
}

pub(crate) fn write_summary(summary: &Value, dir: &Path, stem: &str) -> Result<(), String> {
    let text = serde_json::to_string_pretty(summary).map_err(|e| e.to_string())? + "\n";
    for (ext, body) in [("json", text), ("csv", csv(summary))] {
        let p = dir.join(format!("{stem}.{ext}"));
        std::fs::write(&p, body).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(())
}

/// `sweep merge`: checks the shards are of one grid and together hold each
/// configuration exactly once, then writes the full grid's summary.
fn merge(paths: &[PathBuf], out: &Path, page: &MapPage) -> Result<(), String> {
    let summary = merge_summaries(paths, out, "sweep merge")?;
    write_page(page, &summary)
}

/// Joins the shards' summaries (of a sweep or a plan) into `out`'s
/// `summary.json` and `summary.csv`; the joined summary.
pub(crate) fn merge_summaries(paths: &[PathBuf], out: &Path, what: &str) -> Result<Value, String> {
    let mut grid: Option<Value> = None;
    let mut rows: Vec<Value> = Vec::new();
    for p in paths {
        let name = p.display().to_string();
        let text = read_to_string(what, p, FileKind::Summary).map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_str(&text).map_err(|e| format!("{name}: {e}"))?;
        let (Some(g), Some(r)) = (v.get("grid"), v.get("rows").and_then(Value::as_array)) else {
            return Err(format!(
                "{name}: not a sweep summary (no `grid` and `rows`)"
            ));
        };
        match &grid {
            None => grid = Some(g.clone()),
            Some(first) if first != g => {
                return Err(format!(
                    "{name}: a shard of another grid than {}",
                    paths[0].display()
                ))
            }
            Some(_) => {}
        }
        rows.extend(r.iter().cloned());
    }
    let grid = grid.unwrap_or(Value::Null);
    let total = grid["configurations"]
        .as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or("the summaries give no configuration count")?;
    let mut by_index: Vec<Option<Value>> = vec![None; total];
    for r in rows {
        let i = r["index"]
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|i| *i < total)
            .ok_or_else(|| format!("a row with a bad index: {}", r["index"]))?;
        if by_index[i].replace(r).is_some() {
            return Err(format!("configuration {i} is in more than one shard"));
        }
    }
    let missing: Vec<String> = by_index
        .iter()
        .enumerate()
        .filter(|(_, r)| r.is_none())
        .map(|(i, _)| i.to_string())
        .take(10)
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "configurations missing from the shards: {}{}",
            missing.join(", "),
            if missing.len() == 10 { ", ..." } else { "" }
        ));
    }
    let mut summary = Map::new();
    summary.insert("grid".into(), grid);
    summary.insert("shard".into(), Value::Null);
    summary.insert(
        "rows".into(),
        Value::Array(by_index.into_iter().flatten().collect()),
    );
    std::fs::create_dir_all(out).map_err(|e| format!("--out {}: {e}", out.display()))?;
    let summary = Value::Object(summary);
    write_summary(&summary, out, "summary")?;
    eprintln!(
        "{what}: {total} configurations from {} shards; {}",
        paths.len(),
        out.join("summary.csv").display()
    );
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_checked() {
        assert_eq!(parse_shard("1/4"), Ok((1, 4)));
        for bad in ["4/4", "1", "a/2", "0/0", "-1/2"] {
            assert!(parse_shard(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn csv_quotes_what_needs_it() {
        assert_eq!(csv_field(&json!("a,b")), "\"a,b\"");
        assert_eq!(csv_field(&json!("say \"x\"")), "\"say \"\"x\"\"\"");
        assert_eq!(csv_field(&Value::Null), "");
        assert_eq!(csv_field(&json!(1.5)), "1.5");
        assert_eq!(report_name(7, 64), "config-0007.json");
        assert_eq!(report_name(7, 100_000), "config-00007.json");
    }
}
