//! The layouts a plan tries: every aggregated layout and every xPyD split
//! within a GPU budget, for each TP (or each pair of prefill and decode
//! TPs), attention-DP size and expert-parallel choice given, and the
//! plan's run over them (the caller's [`Runner`] runs each one).

use crate::error::PlanError;
use crate::runner::Runner;
use serde_json::{json, Map, Value};

/// Report paths every plan row carries beyond a sweep's: the latencies the
/// SLO is read at and what the handoffs cost.
pub const PLAN_METRICS: &[&str] = &[
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

/// The largest GPU budget.
pub const MAX_GPUS: u32 = 1024;

/// The largest attention-DP size.
pub const MAX_DP: u32 = 256;

/// Which layouts to enumerate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kinds {
    /// Aggregated and disaggregated.
    Both,
    /// Aggregated workers only (no decode pool).
    Aggregated,
    /// xPyD splits only.
    Disaggregated,
}

/// Whether a layout's MoE layers run expert parallel (vLLM's
/// `--enable-expert-parallel`, `vllm/config/parallel.py`
/// `enable_expert_parallel`: the experts of every MoE layer are split over
/// the engine's TP × DP ranks instead of each being tensor-sliced).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Experts {
    /// Experts tensor-parallel (every rank holds a slice of each).
    Off,
    /// Experts spread over the ranks (`--enable-expert-parallel`).
    Parallel,
}

impl Experts {
    /// Its summary label, `off` or `on`.
    pub fn label(self) -> &'static str {
        match self {
            Experts::Off => "off",
            Experts::Parallel => "on",
        }
    }
}

/// One layout: `prefill` workers (aggregated when `decode` is 0) at
/// `prefill_tp` GPUs per rank and `decode` workers at `decode_tp`, each of
/// `dp` attention data-parallel ranks; an aggregated layout has one TP
/// (`decode_tp` equals `prefill_tp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// GPUs per data-parallel rank of a prefill (or aggregated) worker.
    pub prefill_tp: u32,
    /// GPUs per data-parallel rank of a decode worker.
    pub decode_tp: u32,
    /// Data-parallel ranks per worker (`--dp-size`).
    pub dp: u32,
    /// Prefill (or aggregated) workers.
    pub prefill: u32,
    /// Decode workers; 0: aggregated.
    pub decode: u32,
    /// Expert parallelism.
    pub experts: Experts,
}

impl Layout {
    /// A layout with both pools at `tp` and no expert parallelism.
    pub fn uniform(tp: u32, dp: u32, prefill: u32, decode: u32) -> Layout {
        Layout {
            prefill_tp: tp,
            decode_tp: tp,
            dp,
            prefill,
            decode,
            experts: Experts::Off,
        }
    }

    /// GPUs it occupies: per pool workers × DP × TP, as the report counts
    /// them (`handoff_serving::report` sizing: schedulers × GPUs per rank,
    /// each pool at its own).
    pub fn gpus(&self) -> u32 {
        (self.prefill * self.prefill_tp + self.decode * self.decode_tp) * self.dp
    }

    /// Whether its two pools run at different TPs.
    pub fn tps_differ(&self) -> bool {
        self.decode > 0 && self.prefill_tp != self.decode_tp
    }

    /// The summary's labels of its axes, in `axes`' order.
    pub fn labels(&self, axes: Axes) -> Vec<String> {
        axes.list().into_iter().map(|a| a.label(self)).collect()
    }
}

/// A plan summary's axes without per-pool TP or expert parallelism, the
/// keys of each row's `config` (a plan without those flags writes these
/// and no others).
pub const AXES: [&str; 4] = ["tp", "dp", "prefill", "decode"];

/// One axis of a plan's summary: a key of each row's `config`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    /// Both pools' TP (`tp`).
    Tp,
    /// Prefill TP (`prefill_tp`).
    PrefillTp,
    /// Decode TP (`decode_tp`; aggregated: the one TP).
    DecodeTp,
    /// Attention DP (`dp`).
    Dp,
    /// Prefill (or aggregated) workers (`prefill`).
    Prefill,
    /// Decode workers (`decode`).
    Decode,
    /// Expert parallelism (`ep`: `off`, `on`).
    Ep,
}

impl Axis {
    /// Its key in a row's `config`.
    pub fn key(self) -> &'static str {
        match self {
            Axis::Tp => "tp",
            Axis::PrefillTp => "prefill_tp",
            Axis::DecodeTp => "decode_tp",
            Axis::Dp => "dp",
            Axis::Prefill => "prefill",
            Axis::Decode => "decode",
            Axis::Ep => "ep",
        }
    }

    /// `l`'s value on it as a number, the grid's order.
    fn value(self, l: &Layout) -> u32 {
        match self {
            Axis::Tp | Axis::PrefillTp => l.prefill_tp,
            Axis::DecodeTp => l.decode_tp,
            Axis::Dp => l.dp,
            Axis::Prefill => l.prefill,
            Axis::Decode => l.decode,
            Axis::Ep => u32::from(l.experts == Experts::Parallel),
        }
    }

    /// `l`'s value on it as the summary labels it.
    pub fn label(self, l: &Layout) -> String {
        match self {
            Axis::Ep => l.experts.label().to_string(),
            a => a.value(l).to_string(),
        }
    }
}

/// Which axes a plan's summary carries beyond [`AXES`]: with per-pool TP,
/// `prefill_tp` and `decode_tp` in place of `tp`; with expert parallelism
/// asked for, `ep` (`off`, `on`) last.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Axes {
    /// `--prefill-tp`/`--decode-tp` given.
    pub per_pool_tp: bool,
    /// `--expert-parallel` names `on`.
    pub experts: bool,
}

impl Axes {
    /// The axes, in order.
    pub fn list(self) -> Vec<Axis> {
        let mut v = if self.per_pool_tp {
            vec![Axis::PrefillTp, Axis::DecodeTp]
        } else {
            vec![Axis::Tp]
        };
        v.extend([Axis::Dp, Axis::Prefill, Axis::Decode]);
        if self.experts {
            v.push(Axis::Ep);
        }
        v
    }

    /// The keys of each row's `config`, in order.
    pub fn keys(self) -> Vec<&'static str> {
        self.list().into_iter().map(Axis::key).collect()
    }
}

/// The TPs a plan tries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolTps {
    /// Each layout has one TP, both pools at it (`--tp`).
    Same(Vec<u32>),
    /// Every (prefill TP, decode TP) pair of the lists, prefill's outer;
    /// aggregated layouts at each TP in both lists.
    PerPool {
        /// Prefill TPs (`--prefill-tp`).
        prefill: Vec<u32>,
        /// Decode TPs (`--decode-tp`).
        decode: Vec<u32>,
    },
}

impl PoolTps {
    /// The (prefill, decode) TP pairs in enumeration order, sizes outside
    /// `1..=MAX_GPUS` dropped.
    /// A size given twice counts once (a repeated list multiplies no
    /// work).
    fn pairs(&self) -> Vec<(u32, u32)> {
        let ok = |t: &&u32| (1..=MAX_GPUS).contains(*t);
        let all: Vec<(u32, u32)> = match self {
            PoolTps::Same(tps) => tps.iter().filter(ok).map(|&t| (t, t)).collect(),
            PoolTps::PerPool { prefill, decode } => prefill
                .iter()
                .filter(ok)
                .flat_map(|&p| decode.iter().filter(ok).map(move |&d| (p, d)))
                .collect(),
        };
        first_of_each(all)
    }
}

/// `v` with each value kept at its first place only.
fn first_of_each<T: Ord + Copy>(v: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut seen = std::collections::BTreeSet::new();
    v.into_iter().filter(|x| seen.insert(*x)).collect()
}

/// What a plan enumerates: the TPs, attention-DP sizes and expert
/// parallelism choices, the GPU range and the kinds of layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Space {
    /// TPs.
    pub tps: PoolTps,
    /// Attention-DP sizes.
    pub dps: Vec<u32>,
    /// Expert parallelism, in the order to try.
    pub experts: Vec<Experts>,
    /// Least GPUs.
    pub min: u32,
    /// Most GPUs.
    pub max: u32,
    /// Aggregated, disaggregated or both.
    pub which: Kinds,
}

/// Whether `l` can run expert parallel: its experts need more than one
/// rank to spread over, so a pool of TP × DP above 1 (vLLM sizes the
/// expert-parallel group as TP × DP, `vllm/distributed/parallel_state.py`
/// `initialize_model_parallel`). Whether the model is a MoE one is the
/// runner's to refuse: the profile list does not say.
pub fn expert_parallel_fits(l: &Layout) -> bool {
    let widest = if l.decode > 0 {
        l.prefill_tp.max(l.decode_tp)
    } else {
        l.prefill_tp
    };
    widest * l.dp > 1
}

/// Every layout of `s`: per TP pair, then per DP (each in the order
/// given), then per expert-parallel choice, the aggregated ones by worker
/// count (only when the pair's TPs are equal), then the xPyD splits by
/// total workers and prefill count; expert parallel only where
/// [`expert_parallel_fits`]. `max` is at most [`MAX_GPUS`] so no product
/// overflows.
pub fn enumerate_space(s: &Space) -> Vec<Layout> {
    walk(s, usize::MAX).0
}

/// [`enumerate_space`]'s layouts, the first `keep` of them kept, and how
/// many there are (counting the rest allocates nothing, so a budget with
/// millions of layouts is refused without holding them).
fn walk(s: &Space, keep: usize) -> (Vec<Layout>, usize) {
    let mut out = Vec::new();
    let mut found = 0;
    let max = s.max.min(MAX_GPUS);
    let fits = |l: &Layout| (s.min..=max).contains(&l.gpus());
    let dps = first_of_each(s.dps.iter().copied().filter(|d| (1..=MAX_GPUS).contains(d)));
    let choices = first_of_each(s.experts.iter().copied());
    for (ptp, dtp) in s.tps.pairs() {
        for &dp in &dps {
            for &experts in &choices {
                let mut push = |prefill, decode| {
                    let l = Layout {
                        prefill_tp: ptp,
                        decode_tp: if decode == 0 { ptp } else { dtp },
                        dp,
                        prefill,
                        decode,
                        experts,
                    };
                    let ep_ok = experts == Experts::Off || expert_parallel_fits(&l);
                    if fits(&l) && ep_ok {
                        found += 1;
                        if out.len() < keep {
                            out.push(l);
                        }
                    }
                };
                if s.which != Kinds::Disaggregated && ptp == dtp {
                    for n in 1..=max / (ptp * dp) {
                        push(n, 0);
                    }
                }
                if s.which != Kinds::Aggregated {
                    let per = |tp: u32| tp * dp;
                    for total in 2..=max / per(ptp.min(dtp)) {
                        for prefill in 1..total {
                            push(prefill, total - prefill);
                        }
                    }
                }
            }
        }
    }
    (out, found)
}

/// Every layout of `tps` × `dps` within `min..=max` GPUs, both pools at
/// one TP and no expert parallelism ([`enumerate_space`]).
pub fn enumerate(tps: &[u32], dps: &[u32], min: u32, max: u32, which: Kinds) -> Vec<Layout> {
    enumerate_space(&Space {
        tps: PoolTps::Same(tps.to_vec()),
        dps: dps.to_vec(),
        experts: vec![Experts::Off],
        min,
        max,
        which,
    })
}

/// The GPU budget, the DP sizes and the expert-parallel choices of a
/// plan, unchecked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Layouts use at most this many GPUs (`None`: not given).
    pub max: Option<u32>,
    /// Layouts use at least this many GPUs.
    pub min: u32,
    /// Attention-DP sizes.
    pub dps: Vec<u32>,
    /// Expert parallelism choices.
    pub experts: Vec<Experts>,
}

impl Budget {
    /// The largest number of GPUs, checked with the DP sizes and the least.
    pub fn check(&self) -> Result<u32, PlanError> {
        let max = self
            .max
            .filter(|g| (1..=MAX_GPUS).contains(g))
            .ok_or(PlanError::Budget { most: MAX_GPUS })?;
        if let Some(d) = self.dps.iter().find(|d| !(1..=MAX_DP).contains(*d)) {
            return Err(PlanError::Dp(*d));
        }
        if self.min > max {
            return Err(PlanError::MinAboveMax { min: self.min, max });
        }
        Ok(max)
    }

    /// Every layout of `tps` within the checked budget `max` (from
    /// [`Budget::check`]): at least one, at most [`MAX_LAYOUTS`].
    pub fn layouts(&self, tps: &PoolTps, max: u32, which: Kinds) -> Result<Vec<Layout>, PlanError> {
        let space = Space {
            tps: tps.clone(),
            dps: self.dps.clone(),
            experts: self.experts.clone(),
            min: self.min,
            max,
            which,
        };
        let (layouts, found) = walk(&space, MAX_LAYOUTS);
        if found == 0 {
            return Err(PlanError::NoLayout { min: self.min, max });
        }
        if found > MAX_LAYOUTS {
            return Err(PlanError::TooManyLayouts {
                found,
                most: MAX_LAYOUTS,
            });
        }
        Ok(layouts)
    }
}

/// A plan to run: its layouts, the flags they share (recorded in the
/// summary so shards of one plan can be told from another's), the GPU
/// range, and the shard `(i, n)` of it to run (configurations `i` mod `n`).
#[derive(Clone, Debug)]
pub struct Plan<'a> {
    /// The layouts, numbered in this order.
    pub layouts: &'a [Layout],
    /// The flags every layout shares.
    pub shared: &'a [String],
    /// Least and most GPUs.
    pub gpus: (u32, u32),
    /// The shard to run.
    pub shard: Option<(usize, usize)>,
    /// The summary's axes.
    pub axes: Axes,
}

impl Plan<'_> {
    /// What identifies a plan: shards of one plan must agree on it to merge.
    pub fn grid_json(&self) -> Value {
        let axes: Vec<Value> = self
            .axes
            .list()
            .into_iter()
            .map(|a| {
                // Each value once, in numeric order.
                let set: std::collections::BTreeMap<u32, String> = self
                    .layouts
                    .iter()
                    .map(|l| (a.value(l), a.label(l)))
                    .collect();
                json!({"key": a.key(), "values": set.into_values().collect::<Vec<_>>()})
            })
            .collect();
        json!({
            "kind": "plan",
            "configurations": self.layouts.len(),
            "base": self.shared,
            "gpus": {"min": self.gpus.0, "max": self.gpus.1},
            "axes": axes,
        })
    }

    /// The summary file's stem: `summary`, or `summary-shard-I-of-N`.
    pub fn stem(&self) -> String {
        match self.shard {
            Some((i, n)) => format!("summary-shard-{i}-of-{n}"),
            None => "summary".to_string(),
        }
    }
}

/// Prepares every layout of `plan` (the first the runner refuses stops
/// the plan), runs those of its shard and returns the summary: `grid`,
/// `shard` and one row per configuration run, in order.
pub fn run_plan<R: Runner<Layout>>(plan: &Plan<'_>, runner: &R) -> Result<Value, PlanError> {
    let mut mine = Vec::new();
    for (index, l) in plan.layouts.iter().enumerate() {
        let c = runner
            .prepare(index, l)
            .map_err(|why| PlanError::Layout { index, why })?;
        if plan.shard.is_none_or(|(i, n)| index % n == i) {
            mine.push(c);
        }
    }
    let rows = runner.run_all(&mine);
    let mut summary = Map::new();
    summary.insert("grid".into(), plan.grid_json());
    summary.insert(
        "shard".into(),
        plan.shard
            .map_or(Value::Null, |(i, n)| json!(format!("{i}/{n}"))),
    );
    summary.insert("rows".into(), Value::Array(rows));
    Ok(Value::Object(summary))
}

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
