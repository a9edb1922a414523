//! `handoff-mocker plan`: the sizing question answered by simulation.
//! Every aggregated layout and every xPyD split within a GPU budget, for
//! each TP a profile exists for and each `--dp` size, is replayed under the SLO on every core
//! (the sweep's machinery: [`crate::sweep_cmd::in_order`],
//! [`crate::sweep_cmd::run_one`], `--shard` and merging), then ranked by
//! goodput per GPU among the layouts that hold the SLO at its percentiles.
//!
//! Outputs in `--out`: each configuration's report and the summary (as a
//! sweep writes them), `best.csv`, the Pareto frontier of tokens/s/GPU
//! against tokens/s/user (`pareto.csv`, `pareto.json`; AIConfigurator's
//! axes, `sdk/pareto_analysis.py`), and `plan.html` with the plot; the
//! table of the best configurations on stdout, with what each one's
//! handoffs cost (stranded source blocks, reservation waits, transfers).
//!
//! `--check-aic FILE` instead simulates AIConfigurator's own picks
//! ([`crate::plan_aic`]).

use crate::plan_rank::{rank, write_outputs};
use crate::sweep_cmd::{in_order, merge_summaries, parse_shard, run_one, write_summary};
use crate::sweep_grid::{Configuration, Parsed, ReplayOnly};
use clap::{Args, Parser as _, ValueEnum};
use handoff_deployment::SloSpec;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

/// Report paths every plan row carries beyond a sweep's: the latencies the
/// SLO is read at and what the handoffs cost.
pub(crate) const PLAN_METRICS: &[&str] = &[
    "p90_ttft_ms",
    "p90_tpot_ms",
    "p90_e2e_latency_ms",
    "lifecycle.source_pinned_ms.mean",
    "lifecycle.reservation_wait_ms.mean",
    "lifecycle.transfer_ms.mean",
    "lifecycle.transfer_ms.p99",
    "sum:workers.pinned_block_seconds",
    "sum:workers.reserved_block_seconds",
];

/// The most configurations one plan enumerates.
pub const MAX_LAYOUTS: usize = 10_000;

/// Which layouts to enumerate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LayoutsArg {
    /// Aggregated and disaggregated.
    Both,
    /// Aggregated workers only (`--decode 0`).
    Aggregated,
    /// xPyD splits only.
    Disaggregated,
}

/// Options of `plan`.
#[derive(Args, Debug)]
pub struct PlanArgs {
    /// GPU budget: every layout uses at most this many GPUs (1..=1024).
    #[arg(long, value_name = "N")]
    gpus: Option<u32>,
    /// Layouts use at least this many GPUs.
    #[arg(long, default_value_t = 1, value_name = "N")]
    min_gpus: u32,
    /// Tensor-parallel sizes to try, e.g. `1,2` [default: every TP a
    /// profile of the model on the GPU exists for].
    #[arg(long, value_delimiter = ',', value_name = "TP,...")]
    tp: Vec<u32>,
    /// Attention data-parallel sizes to try (each layout runs with
    /// `--dp-size D`; a worker then occupies TP × D GPUs), e.g. `1,2`.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1",
        value_name = "DP,..."
    )]
    dp: Vec<u32>,
    /// Which layouts to enumerate.
    #[arg(long, value_enum, default_value = "both")]
    layouts: LayoutsArg,
    /// The SLO every layout is judged by (as `replay --slo`).
    #[arg(long, value_name = "TARGETS")]
    slo: Option<SloSpec>,
    /// Price of a GPU-hour, USD: adds the cost per million tokens.
    #[arg(long, value_name = "USD")]
    gpu_hour_usd: Option<f64>,
    /// Fixed prompt length of a generated workload (with --osl): written
    /// to OUT/workload.jsonl and replayed by every layout [default: the
    /// workload the flags after `--` give].
    #[arg(long, value_name = "TOKENS", requires = "osl")]
    isl: Option<u32>,
    /// Fixed output length of the generated workload (with --isl).
    #[arg(long, value_name = "TOKENS", requires = "isl")]
    osl: Option<u32>,
    /// Requests of the generated workload.
    #[arg(long, default_value_t = 2000, value_name = "N", requires = "isl")]
    requests: u64,
    /// Poisson arrival rate of the generated workload, requests/s (give
    /// `--concurrency N` after `--` for a closed loop instead).
    #[arg(long, default_value_t = 16.0, value_name = "PER_S", requires = "isl")]
    rate: f64,
    /// Shared-prefix groups of the generated workload (0: no sharing).
    #[arg(long, default_value_t = 0, value_name = "N", requires = "isl")]
    prefix_groups: u32,
    /// Also find, for each layout, the highest arrival rate up to this many
    /// requests/s at which the SLO holds, by bisection (with --isl/--osl;
    /// [`crate::plan_rate`]): the `max_rate_rps` column.
    #[arg(long, value_name = "PER_S", requires = "isl")]
    max_rate: Option<f64>,
    /// The bisection stops when its bracket is this share of its upper end.
    #[arg(
        long,
        default_value_t = 0.05,
        value_name = "SHARE",
        requires = "max_rate"
    )]
    rate_tolerance: f64,
    /// Directory for the reports, the summary, the frontier and the page.
    #[arg(long, default_value = "plan-out", value_name = "DIR")]
    out: PathBuf,
    /// Run only configurations whose number is I modulo N; join the
    /// shards with `plan --merge`.
    #[arg(long, value_name = "I/N")]
    shard: Option<String>,
    /// Threads, 1..=256 [default: every core].
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
    /// Rows of the best-configurations table.
    #[arg(long, default_value_t = 10, value_name = "N")]
    top: usize,
    /// Join shard summaries (`summary-shard-*.json`) and rank them.
    #[arg(long, num_args = 1.., value_name = "SUMMARY", conflicts_with_all = ["gpus", "check_aic"])]
    merge: Vec<PathBuf>,
    /// Simulate each row of AIConfigurator's saved `best_config_topn.csv`
    /// or `pareto.csv` at its own concurrency and lengths, beside its
    /// estimate.
    #[arg(long, value_name = "FILE", conflicts_with = "gpus")]
    check_aic: Option<PathBuf>,
    /// Replay flags every layout shares (model, GPU, backend, workload),
    /// after `--`.
    #[arg(last = true, value_name = "FLAGS")]
    base: Vec<String>,
}

/// One layout: `prefill` workers (aggregated when `decode` is 0) and
/// `decode` workers, each of `dp` attention data-parallel ranks of `tp`
/// GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// GPUs per data-parallel rank.
    pub tp: u32,
    /// Data-parallel ranks per worker (`--dp-size`).
    pub dp: u32,
    /// Prefill (or aggregated) workers.
    pub prefill: u32,
    /// Decode workers; 0: aggregated.
    pub decode: u32,
}

impl Layout {
    /// GPUs it occupies: workers × DP × TP, as the report counts them
    /// (`handoff_serving::report` sizing: schedulers × GPUs per rank).
    pub fn gpus(&self) -> u32 {
        (self.prefill + self.decode) * self.tp * self.dp
    }
}

/// Every layout of `tps` × `dps` within `min..=max` GPUs: per TP, then
/// per DP (each in the order given), the aggregated ones by worker
/// count, then the xPyD splits by total workers and prefill count.
/// Sizes of 0 are ignored; `max` is at most [`MAX_GPUS`] so no product
/// overflows.
pub fn enumerate(tps: &[u32], dps: &[u32], min: u32, max: u32, which: LayoutsArg) -> Vec<Layout> {
    let mut out = Vec::new();
    let max = max.min(MAX_GPUS);
    for &tp in tps.iter().filter(|t| (1..=MAX_GPUS).contains(*t)) {
        for &dp in dps.iter().filter(|d| (1..=MAX_GPUS).contains(*d)) {
            let workers = max / (tp * dp).max(1);
            let fits = |l: &Layout| (min..=max).contains(&l.gpus());
            let mut push = |prefill, decode| {
                let l = Layout {
                    tp,
                    dp,
                    prefill,
                    decode,
                };
                if fits(&l) {
                    out.push(l);
                }
            };
            if which != LayoutsArg::Disaggregated {
                for n in 1..=workers {
                    push(n, 0);
                }
            }
            if which != LayoutsArg::Aggregated {
                for total in 2..=workers {
                    for prefill in 1..total {
                        push(prefill, total - prefill);
                    }
                }
            }
        }
    }
    out
}

/// The largest GPU budget (`--gpus`).
pub const MAX_GPUS: u32 = 1024;

/// The flags named in `base` that a plan sets per layout itself.
const PER_LAYOUT: &[&str] = &[
    "--prefill",
    "--decode",
    "--tp",
    "--dp-size",
    "--slo",
    "--gpu-hour-usd",
];

/// Whether `base` gives `flag` (as `--flag V` or `--flag=V`).
fn gives(base: &[String], flag: &str) -> bool {
    base.iter()
        .any(|a| a == flag || a.starts_with(&format!("{flag}=")))
}

impl PlanArgs {
    fn slo(&self) -> Result<&SloSpec, String> {
        self.slo
            .as_ref()
            .ok_or_else(|| "plan: give --slo (e.g. ttft:p90=600ms,tpot:p90=20ms)".to_string())
    }

    /// The flags every layout shares: the base, the generated workload,
    /// the SLO and the price.
    fn shared_flags(&self) -> Result<Vec<String>, String> {
        for f in PER_LAYOUT {
            if gives(&self.base, f) {
                return Err(format!(
                    "plan: {f} is set per layout; give it to plan itself, not after `--`"
                ));
            }
        }
        let mut v = self.base.clone();
        if let (Some(isl), Some(osl)) = (self.isl, self.osl) {
            if gives(&self.base, "--trace") {
                return Err("plan: --isl/--osl generate the workload; drop --trace".into());
            }
            let path = crate::plan_aic::write_workload(
                &self.out.join("workload.jsonl"),
                crate::plan_aic::WorkloadShape {
                    isl,
                    osl,
                    requests: self.requests,
                    rate: self.rate,
                    prefix_groups: self.prefix_groups,
                },
            )?;
            v.extend(["--trace".into(), path]);
        }
        v.extend(["--slo".into(), self.slo()?.to_string()]);
        if let Some(p) = self.gpu_hour_usd {
            v.extend(["--gpu-hour-usd".into(), p.to_string()]);
        }
        Ok(v)
    }
}

/// The model, GPU and backend the base flags name, and the TP choices:
/// `--tp`, else every TP a profile exists for.
pub(crate) fn model_and_tps(
    tp: &[u32],
    shared: &[String],
) -> Result<(Vec<String>, Vec<u32>), String> {
    let parsed = ReplayOnly::try_parse_from(shared).map_err(|e| {
        format!(
            "plan: the flags after `--`: {}",
            e.to_string().lines().next().unwrap_or("")
        )
    })?;
    let deploy = parsed.args.deploy_args();
    let hw = &deploy.hardware;
    let (model, gpu) = match (&hw.model, &hw.gpu) {
        (Some(m), Some(g)) => (m.clone(), g.clone()),
        (None, None) if deploy.perf.is_none() => (
            crate::hardware_args::DEFAULT_MODEL.to_string(),
            crate::hardware_args::DEFAULT_GPU.to_string(),
        ),
        _ => return Err("plan: give both --model and --gpu after `--` (or neither)".into()),
    };
    let mut add = Vec::new();
    if hw.model.is_none() {
        add.extend(["--model".into(), model.clone(), "--gpu".into(), gpu.clone()]);
    }
    let backend = deploy.backend().name();
    let keys = match &hw.profiles_dir {
        Some(d) => crate::hardware_args::list_profiles(d)?,
        None => crate::hardware_args::embedded_profiles(),
    };
    let have: Vec<u32> = keys
        .iter()
        .filter(|k| k.model == model && k.gpu == gpu && k.backend == backend)
        .map(|k| k.tp)
        .collect();
    let tps = if tp.is_empty() {
        have.clone()
    } else {
        tp.to_vec()
    };
    if let Some(t) = tps.iter().find(|t| !have.contains(t)) {
        return Err(format!(
            "plan --tp {t}: no profile of {model} on {gpu} for {backend} at that TP (there are: {have:?})"
        ));
    }
    if tps.is_empty() {
        return Err(format!(
            "plan: no profile of {model} on {gpu} for {backend}"
        ));
    }
    Ok((add, tps))
}

/// Each layout as a checked configuration, numbered in enumeration order.
fn configurations(
    layouts: &[Layout],
    add: &[String],
    shared: &[String],
) -> Result<Vec<Configuration>, String> {
    layouts
        .iter()
        .enumerate()
        .map(|(index, l)| {
            let mut args: Vec<String> = vec![
                "--prefill".into(),
                l.prefill.to_string(),
                "--decode".into(),
                l.decode.to_string(),
                "--tp".into(),
                l.tp.to_string(),
            ];
            if l.dp > 1 {
                args.extend(["--dp-size".into(), l.dp.to_string()]);
            }
            args.extend(add.iter().cloned());
            args.extend(shared.iter().cloned());
            let parsed = ReplayOnly::try_parse_from(&args)
                .map_err(|e| format!("layout {index}: {}", e.to_string().trim()))?;
            parsed
                .args
                .check()
                .map_err(|e| format!("layout {index}: {e}"))?;
            Ok(Configuration {
                index,
                labels: vec![
                    l.tp.to_string(),
                    l.dp.to_string(),
                    l.prefill.to_string(),
                    l.decode.to_string(),
                ],
                args,
                parsed: Parsed::Replay(Box::new(parsed.args)),
            })
        })
        .collect()
}

/// What identifies a plan: shards of one plan must agree on it to merge.
fn grid_json(layouts: &[Layout], shared: &[String], budget: (u32, u32)) -> Value {
    let values = |f: fn(&Layout) -> u32| {
        let set: std::collections::BTreeSet<u32> = layouts.iter().map(f).collect();
        set.into_iter().map(|x| x.to_string()).collect::<Vec<_>>()
    };
    json!({
        "kind": "plan",
        "configurations": layouts.len(),
        "base": shared,
        "gpus": {"min": budget.0, "max": budget.1},
        "axes": [
            {"key": "tp", "values": values(|l| l.tp)},
            {"key": "dp", "values": values(|l| l.dp)},
            {"key": "prefill", "values": values(|l| l.prefill)},
            {"key": "decode", "values": values(|l| l.decode)},
        ],
    })
}

pub fn run(a: PlanArgs) -> Result<(), String> {
    if let Some(file) = &a.check_aic {
        return crate::plan_aic::check(file, a.slo()?, a.gpu_hour_usd, &a.base, &a.out, a.jobs);
    }
    std::fs::create_dir_all(&a.out).map_err(|e| format!("--out {}: {e}", a.out.display()))?;
    if !a.merge.is_empty() {
        let summary = merge_summaries(&a.merge, &a.out, "plan --merge")?;
        return finish(&summary, &a.out, a.top);
    }
    let max = a
        .gpus
        .filter(|g| (1..=MAX_GPUS).contains(g))
        .ok_or("plan: give --gpus N (1..=1024), the GPU budget")?;
    if let Some(d) = a.dp.iter().find(|d| !(1..=256).contains(*d)) {
        return Err(format!("plan --dp {d}: each DP size must be in 1..=256"));
    }
    if a.min_gpus > max {
        return Err(format!("--min-gpus {} exceeds --gpus {max}", a.min_gpus));
    }
    let shared = a.shared_flags()?;
    let (add, tps) = model_and_tps(&a.tp, &shared)?;
    let layouts = enumerate(&tps, &a.dp, a.min_gpus, max, a.layouts);
    if layouts.is_empty() {
        return Err(format!("plan: no layout fits {}..={max} GPUs", a.min_gpus));
    }
    if layouts.len() > MAX_LAYOUTS {
        return Err(format!(
            "plan: {} layouts; at most {MAX_LAYOUTS}",
            layouts.len()
        ));
    }
    let search = rate_search(&a)?;
    let shard = a.shard.as_deref().map(parse_shard).transpose()?;
    if let Some(n) = a.jobs {
        crate::limits::jobs(n)?;
    }
    let all = configurations(&layouts, &add, &shared)?;
    let total = all.len();
    let mine: Vec<Configuration> = match shard {
        Some((i, n)) => all.into_iter().filter(|c| c.index % n == i).collect(),
        None => all,
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(a.jobs.unwrap_or(0))
        .stack_size(8 << 20)
        .build()
        .map_err(|e| format!("--jobs: {e}"))?;
    let keys: Vec<String> = ["tp", "dp", "prefill", "decode"].map(String::from).to_vec();
    let started = std::time::Instant::now();
    let rows = pool.install(|| {
        in_order(&mine, |c| {
            let mut row = run_one(c, &keys, &a.out, total, PLAN_METRICS);
            if let Some(s) = &search {
                row["max_rate_rps"] = match s.search(|rate| s.probe(&c.args, rate)) {
                    Ok(r) => json!(r),
                    Err(e) => {
                        row["error"] = json!(format!("--max-rate: {e}"));
                        Value::Null
                    }
                };
            }
            row
        })
    });
    let mut summary = Map::new();
    summary.insert(
        "grid".into(),
        grid_json(&layouts, &shared, (a.min_gpus, max)),
    );
    summary.insert(
        "shard".into(),
        shard.map_or(Value::Null, |(i, n)| json!(format!("{i}/{n}"))),
    );
    summary.insert("rows".into(), Value::Array(rows));
    let summary = Value::Object(summary);
    let stem = match shard {
        Some((i, n)) => format!("summary-shard-{i}-of-{n}"),
        None => "summary".to_string(),
    };
    write_summary(&summary, &a.out, &stem)?;
    eprintln!(
        "plan: {} of {total} layouts in {:.3} s on {} threads; {}",
        mine.len(),
        started.elapsed().as_secs_f64(),
        pool.current_num_threads(),
        a.out.join(format!("{stem}.csv")).display()
    );
    if shard.is_some() {
        return Ok(());
    }
    finish(&summary, &a.out, a.top)
}

/// `--max-rate`'s search, checked, if asked.
fn rate_search(a: &PlanArgs) -> Result<Option<crate::plan_rate::RateSearch>, String> {
    let Some(max) = a.max_rate else {
        return Ok(None);
    };
    if !(max.is_finite() && max > 0.0 && max <= 1e6) {
        return Err(format!("--max-rate {max}: must be a rate in (0, 1000000]"));
    }
    if !(0.001..=0.5).contains(&a.rate_tolerance) {
        return Err(format!(
            "--rate-tolerance {}: must be in [0.001, 0.5]",
            a.rate_tolerance
        ));
    }
    for f in ["--concurrency", "--arrival-speedup-ratio"] {
        if gives(&a.base, f) {
            return Err(format!("--max-rate varies the arrival rate: drop {f}"));
        }
    }
    Ok(Some(crate::plan_rate::RateSearch {
        base_rps: a.rate,
        max_rps: max,
        tolerance: a.rate_tolerance,
    }))
}

/// Ranks a whole plan's summary, prints the best table and writes the
/// frontier and the page.
fn finish(summary: &Value, out: &Path, top: usize) -> Result<(), String> {
    let ranked = rank(summary)?;
    for line in ranked.table(top) {
        out!("{line}");
    }
    write_outputs(&ranked, summary, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// `plan`'s options parsed alone.
    #[derive(Parser, Debug)]
    #[command(name = "plan", no_binary_name = true)]
    struct PlanOnly {
        #[command(flatten)]
        args: PlanArgs,
    }

    fn lay(tp: u32, dp: u32, prefill: u32, decode: u32) -> Layout {
        Layout {
            tp,
            dp,
            prefill,
            decode,
        }
    }

    #[test]
    fn enumeration_counts_and_order() {
        // 4 GPUs at TP1: aggregated 1..=4, splits with 2..=4 workers:
        // 1+2+3 = 6; at TP2: aggregated 1..=2, one split (1P1D).
        let l = enumerate(&[1, 2], &[1], 1, 4, LayoutsArg::Both);
        assert_eq!(l.len(), 4 + 6 + 2 + 1);
        assert_eq!(l[0], lay(1, 1, 1, 0));
        assert_eq!(l[4], lay(1, 1, 1, 1));
        assert_eq!(l[5], lay(1, 1, 1, 2));
        assert_eq!(l[9], lay(1, 1, 3, 1));
        assert_eq!(l[12], lay(2, 1, 1, 1));
        assert!(l.iter().all(|x| x.gpus() <= 4));
        // Every split appears once.
        let mut seen = std::collections::BTreeSet::new();
        assert!(l
            .iter()
            .all(|x| seen.insert((x.tp, x.dp, x.prefill, x.decode))));
    }

    #[test]
    fn dp_multiplies_the_gpus_and_respects_the_budget() {
        assert_eq!(lay(2, 2, 3, 1).gpus(), 16);
        assert_eq!(lay(1, 4, 1, 0).gpus(), 4);
        // 4 GPUs, TP1, DP 1 then 2: DP1 as above (4 + 6), then at DP2 a
        // worker takes 2 GPUs: aggregated 1..=2 and one 1P1D split.
        let l = enumerate(&[1], &[1, 2], 1, 4, LayoutsArg::Both);
        assert_eq!(l.len(), 4 + 6 + 2 + 1);
        assert!(l[..10].iter().all(|x| x.dp == 1));
        assert_eq!(l[10], lay(1, 2, 1, 0));
        assert_eq!(l[11], lay(1, 2, 2, 0));
        assert_eq!(l[12], lay(1, 2, 1, 1));
        // The DP1 layouts are those of a plan without --dp, in its order.
        assert_eq!(l[..10], enumerate(&[1], &[1], 1, 4, LayoutsArg::Both)[..]);
        for (min, max) in [(1, 1), (3, 7), (4, 16)] {
            let l = enumerate(&[1, 2], &[1, 2, 4], min, max, LayoutsArg::Both);
            for x in &l {
                assert!((min..=max).contains(&x.gpus()), "{x:?}");
            }
            // Nothing within the budget is missed.
            for dp in [1, 2, 4] {
                for tp in [1, 2] {
                    let per = tp * dp;
                    for n in 1..=max / per {
                        if (min..=max).contains(&(n * per)) {
                            assert!(l.contains(&lay(tp, dp, n, 0)), "{tp} {dp} {n}");
                        }
                    }
                }
            }
        }
        // A DP whose one worker exceeds the budget adds nothing.
        assert_eq!(
            enumerate(&[2], &[1, 4], 1, 6, LayoutsArg::Aggregated),
            enumerate(&[2], &[1], 1, 6, LayoutsArg::Aggregated)
        );
        assert!(enumerate(&[1], &[0], 1, 4, LayoutsArg::Both).is_empty());
    }

    #[test]
    fn enumeration_respects_the_bounds_and_the_kind() {
        let agg = enumerate(&[1], &[1], 3, 5, LayoutsArg::Aggregated);
        assert_eq!(agg.iter().map(|l| l.prefill).collect::<Vec<_>>(), [3, 4, 5]);
        let dis = enumerate(&[1], &[1], 1, 8, LayoutsArg::Disaggregated);
        // n workers give n-1 splits: 1+2+...+7 = 28.
        assert_eq!(dis.len(), 28);
        assert!(dis.iter().all(|l| l.decode > 0 && l.prefill > 0));
        assert!(enumerate(&[4], &[1], 1, 3, LayoutsArg::Both).is_empty());
        assert!(enumerate(&[0], &[1], 1, 3, LayoutsArg::Both).is_empty());
        for (min, max) in [(1, 1), (2, 7), (5, 12)] {
            for l in enumerate(&[1, 2, 4], &[1], min, max, LayoutsArg::Both) {
                assert!((min..=max).contains(&l.gpus()), "{l:?}");
            }
        }
    }

    #[test]
    fn per_layout_flags_are_refused_after_the_separator() {
        let a = PlanOnly::try_parse_from([
            "--gpus",
            "4",
            "--slo",
            "ttft:p90=1s",
            "--",
            "--prefill",
            "2",
        ])
        .unwrap()
        .args;
        let e = a.shared_flags().unwrap_err();
        assert!(e.contains("--prefill"), "{e}");
        let a = PlanOnly::try_parse_from([
            "--gpus",
            "4",
            "--dp",
            "1,2",
            "--slo",
            "ttft:p90=1s",
            "--",
            "--dp-size=2",
        ])
        .unwrap()
        .args;
        assert_eq!(a.dp, [1, 2]);
        assert!(a.shared_flags().unwrap_err().contains("--dp-size"));
        let a = PlanOnly::try_parse_from(["--gpus", "4"]).unwrap().args;
        assert!(a.shared_flags().unwrap_err().contains("--slo"));
    }
}
