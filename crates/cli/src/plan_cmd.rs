//! `handoff-mocker plan`: the sizing question answered by simulation.
//! Every aggregated layout and every xPyD split within a GPU budget, for
//! each TP a profile exists for (or each pair of `--prefill-tp` and
//! `--decode-tp`), each `--dp` size and each `--expert-parallel` choice
//! ([`handoff_plan`]'s enumeration), is replayed under the SLO on every core (the sweep's
//! machinery through [`crate::plan_run`], `--shard` and merging), then
//! ranked by goodput per GPU among the layouts that hold the SLO at its
//! percentiles. This file parses the flags and prints.
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

use crate::plan_run::{model_and_tps, pool, ReplayRunner, TpFlags};
use crate::sweep_cmd::{merge_summaries, parse_shard, write_summary};
use clap::{Args, ValueEnum};
use handoff_deployment::SloSpec;
use handoff_plan::rate::RateSearch;
use handoff_plan::workload::{steady_requests, write_workload, WorkloadShape, DEFAULT_REQUESTS};
use handoff_plan::{rank, run_plan, Axes, Budget, Experts, Kinds, Plan, PoolTps};
use serde_json::Value;
use std::path::{Path, PathBuf};

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

/// Whether to run a layout expert parallel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExpertsArg {
    /// Experts tensor-parallel.
    Off,
    /// `--enable-expert-parallel`.
    On,
}

impl From<ExpertsArg> for Experts {
    fn from(a: ExpertsArg) -> Experts {
        match a {
            ExpertsArg::Off => Experts::Off,
            ExpertsArg::On => Experts::Parallel,
        }
    }
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
    /// Prefill workers' TPs to try, e.g. `1,2`: every layout pairs each
    /// with each decode TP (`--decode-tp`), and a split of P prefill and D
    /// decode workers takes P × prefill TP × DP + D × decode TP × DP GPUs;
    /// aggregated layouts run at the TPs both lists hold [default: --tp's].
    #[arg(long, value_delimiter = ',', value_name = "TP,...")]
    prefill_tp: Vec<u32>,
    /// Decode workers' TPs to try (with or without --prefill-tp)
    /// [default: --tp's].
    #[arg(long, value_delimiter = ',', value_name = "TP,...")]
    decode_tp: Vec<u32>,
    /// Expert parallelism to try, `off`, `on` or `off,on`: `on` runs a
    /// layout with `--enable-expert-parallel` where a worker has more than
    /// one rank (TP × DP > 1) for the experts to spread over.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "off",
        value_name = "off,on"
    )]
    expert_parallel: Vec<ExpertsArg>,
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
    /// Requests of the generated workload [default: enough that its
    /// arrivals span 3 request lifetimes of a layout holding the SLO
    /// (TTFT bound + (osl - 1) x TPOT bound), so every such layout reaches
    /// steady state: rate x 3 x that lifetime, within 2000..=100000].
    #[arg(long, value_name = "N", requires = "isl")]
    requests: Option<u64>,
    /// Poisson arrival rate of the generated workload, requests/s (give
    /// `--concurrency N` after `--` for a closed loop instead).
    #[arg(long, default_value_t = 16.0, value_name = "PER_S", requires = "isl")]
    rate: f64,
    /// Shared-prefix groups of the generated workload (0: no sharing).
    #[arg(long, default_value_t = 0, value_name = "N", requires = "isl")]
    prefix_groups: u32,
    /// Also find, for each layout, the highest arrival rate up to this many
    /// requests/s at which the SLO holds, by bisection (with --isl/--osl;
    /// [`handoff_plan::rate`]): the `max_rate_rps` column.
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

/// The flags named in `base` that a plan sets per layout itself.
const PER_LAYOUT: &[&str] = &[
    "--prefill",
    "--decode",
    "--tp",
    "--prefill-tp",
    "--decode-tp",
    "--dp-size",
    "--enable-expert-parallel",
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

    /// The generated workload's requests when `--requests` is not given
    /// ([`handoff_plan::workload::steady_requests`]), said on stderr when
    /// above the default.
    fn steady_requests(&self, osl: u32) -> Result<u64, String> {
        let n = steady_requests(self.slo()?, osl, self.rate);
        if n > DEFAULT_REQUESTS {
            eprintln!(
                "plan: generating {n} requests so arrivals span 3 request lifetimes of a \
                 layout holding the SLO at {} req/s (steady state; --requests N to choose)",
                self.rate
            );
        }
        Ok(n)
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
            let requests = match self.requests {
                Some(n) => n,
                None => self.steady_requests(osl)?,
            };
            let path = write_workload(
                &self.out.join("workload.jsonl"),
                WorkloadShape {
                    isl,
                    osl,
                    requests,
                    rate: self.rate,
                    prefix_groups: self.prefix_groups,
                },
            )
            .map_err(|e| e.to_string())?;
            v.extend(["--trace".into(), path]);
        }
        v.extend(["--slo".into(), self.slo()?.to_string()]);
        if let Some(p) = self.gpu_hour_usd {
            v.extend(["--gpu-hour-usd".into(), p.to_string()]);
        }
        Ok(v)
    }
}

impl From<LayoutsArg> for Kinds {
    fn from(a: LayoutsArg) -> Kinds {
        match a {
            LayoutsArg::Both => Kinds::Both,
            LayoutsArg::Aggregated => Kinds::Aggregated,
            LayoutsArg::Disaggregated => Kinds::Disaggregated,
        }
    }
}

pub fn run(a: PlanArgs) -> Result<(), String> {
    if let Some(file) = &a.check_aic {
        let pool = pool(a.jobs)?;
        return crate::plan_aic::check(file, a.slo()?, a.gpu_hour_usd, &a.base, &a.out, &pool);
    }
    std::fs::create_dir_all(&a.out).map_err(|e| format!("--out {}: {e}", a.out.display()))?;
    if !a.merge.is_empty() {
        let summary = merge_summaries(&a.merge, &a.out, "plan --merge")?;
        return finish(&summary, &a.out, a.top);
    }
    let budget = Budget {
        max: a.gpus,
        min: a.min_gpus,
        dps: a.dp.clone(),
        experts: a.expert_parallel.iter().map(|&e| e.into()).collect(),
    };
    let max = budget.check().map_err(|e| e.to_string())?;
    let shared = a.shared_flags()?;
    let flags = TpFlags {
        tp: &a.tp,
        prefill: &a.prefill_tp,
        decode: &a.decode_tp,
    };
    let (add, tps) = model_and_tps(flags, &shared)?;
    let axes = Axes {
        per_pool_tp: matches!(tps, PoolTps::PerPool { .. }),
        experts: budget.experts.contains(&Experts::Parallel),
    };
    let layouts = budget
        .layouts(&tps, max, a.layouts.into())
        .map_err(|e| e.to_string())?;
    let every: Vec<String> = add.iter().chain(shared.iter()).cloned().collect();
    let (layouts, unprofiled) = crate::plan_run::profiled(layouts, &every);
    if unprofiled > 0 {
        eprintln!(
            "plan: {unprofiled} DP/EP layouts left out: the model has no profile of their \
             layout (docs/profiles.md says how to derive one)"
        );
    }
    if layouts.is_empty() {
        return Err("plan: no layout within the budget has a profile".into());
    }
    let search = rate_search(&a)?;
    let shard = a.shard.as_deref().map(parse_shard).transpose()?;
    if let Some(n) = a.jobs {
        crate::limits::jobs(n)?;
    }
    let plan = Plan {
        layouts: &layouts,
        shared: &shared,
        gpus: (a.min_gpus, max),
        shard,
        axes,
    };
    let pool = pool(a.jobs)?;
    let total = layouts.len();
    let runner = ReplayRunner {
        pool: &pool,
        out: &a.out,
        total,
        flags: add.into_iter().chain(shared.iter().cloned()).collect(),
        search,
        axes,
    };
    let started = std::time::Instant::now();
    let summary = run_plan(&plan, &runner).map_err(|e| e.to_string())?;
    let stem = plan.stem();
    write_summary(&summary, &a.out, &stem)?;
    let ran = summary["rows"].as_array().map_or(0, Vec::len);
    eprintln!(
        "plan: {ran} of {total} layouts in {:.3} s on {} threads; {}",
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
fn rate_search(a: &PlanArgs) -> Result<Option<RateSearch>, String> {
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
    Ok(Some(RateSearch {
        base_rps: a.rate,
        max_rps: max,
        tolerance: a.rate_tolerance,
    }))
}

/// Ranks a whole plan's summary, prints the best table and writes the
/// frontier and the page.
fn finish(summary: &Value, out: &Path, top: usize) -> Result<(), String> {
    let ranked = rank(summary).map_err(|e| e.to_string())?;
    for line in ranked.table(top) {
        out!("{line}");
    }
    let unsteady = ranked.not_steady();
    if !unsteady.is_empty() {
        let ranks: Vec<String> = unsteady.iter().take(20).map(|r| r.to_string()).collect();
        eprintln!(
            "plan: warning: {} of {} layouts did not reach steady state (arrivals span under \
             3 median request lifetimes: warm-up and drain dominate; each row's `warnings` in \
             summary.json), ranks {}{}; give more --requests",
            unsteady.len(),
            ranked.order.len(),
            ranks.join(", "),
            if unsteady.len() > 20 { ", ..." } else { "" }
        );
    }
    handoff_plan::outputs::write(&ranked, summary, out).map_err(|e| e.to_string())?;
    eprintln!(
        "plan: {} (best.csv, pareto.csv, pareto.json, plan.html)",
        out.display()
    );
    Ok(())
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
        for f in ["--prefill-tp", "--decode-tp", "--enable-expert-parallel"] {
            let a = PlanOnly::try_parse_from(["--gpus", "4", "--slo", "ttft:p90=1s", "--", f])
                .unwrap()
                .args;
            let e = a.shared_flags().unwrap_err();
            assert!(e.contains(&format!("plan: {f} is set per layout")), "{e}");
        }
    }

    #[test]
    fn pool_tps_and_expert_parallelism_parse_as_lists() {
        let a = PlanOnly::try_parse_from(["--gpus", "16"]).unwrap().args;
        assert!(a.prefill_tp.is_empty() && a.decode_tp.is_empty());
        assert_eq!(a.expert_parallel, [ExpertsArg::Off]);
        let a = PlanOnly::try_parse_from([
            "--gpus",
            "16",
            "--prefill-tp",
            "1,2,4",
            "--decode-tp",
            "4",
            "--expert-parallel",
            "off,on",
        ])
        .unwrap()
        .args;
        assert_eq!((a.prefill_tp, a.decode_tp), (vec![1, 2, 4], vec![4]));
        let e: Vec<Experts> = a.expert_parallel.iter().map(|&x| x.into()).collect();
        assert_eq!(e, [Experts::Off, Experts::Parallel]);
        assert!(PlanOnly::try_parse_from(["--expert-parallel", "both"]).is_err());
    }
}
