//! The layouts a plan tries: every aggregated layout and every xPyD split
//! within a GPU budget, for each TP and attention-DP size given, and the
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

    /// The summary's labels of its axes, in [`AXES`] order.
    pub fn labels(&self) -> Vec<String> {
        [self.tp, self.dp, self.prefill, self.decode]
            .map(|x| x.to_string())
            .to_vec()
    }
}

/// A plan summary's axes, the keys of each row's `config`.
pub const AXES: [&str; 4] = ["tp", "dp", "prefill", "decode"];

/// Every layout of `tps` × `dps` within `min..=max` GPUs: per TP, then
/// per DP (each in the order given), the aggregated ones by worker
/// count, then the xPyD splits by total workers and prefill count.
/// Sizes of 0 are ignored; `max` is at most [`MAX_GPUS`] so no product
/// overflows.
pub fn enumerate(tps: &[u32], dps: &[u32], min: u32, max: u32, which: Kinds) -> Vec<Layout> {
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
            if which != Kinds::Disaggregated {
                for n in 1..=workers {
                    push(n, 0);
                }
            }
            if which != Kinds::Aggregated {
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

/// The GPU budget and the DP sizes of a plan, unchecked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Layouts use at most this many GPUs (`None`: not given).
    pub max: Option<u32>,
    /// Layouts use at least this many GPUs.
    pub min: u32,
    /// Attention-DP sizes.
    pub dps: Vec<u32>,
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
    pub fn layouts(&self, tps: &[u32], max: u32, which: Kinds) -> Result<Vec<Layout>, PlanError> {
        let layouts = enumerate(tps, &self.dps, self.min, max, which);
        if layouts.is_empty() {
            return Err(PlanError::NoLayout { min: self.min, max });
        }
        if layouts.len() > MAX_LAYOUTS {
            return Err(PlanError::TooManyLayouts {
                found: layouts.len(),
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
}

impl Plan<'_> {
    /// What identifies a plan: shards of one plan must agree on it to merge.
    pub fn grid_json(&self) -> Value {
        let values = |f: fn(&Layout) -> u32| {
            let set: std::collections::BTreeSet<u32> = self.layouts.iter().map(f).collect();
            set.into_iter().map(|x| x.to_string()).collect::<Vec<_>>()
        };
        json!({
            "kind": "plan",
            "configurations": self.layouts.len(),
            "base": self.shared,
            "gpus": {"min": self.gpus.0, "max": self.gpus.1},
            "axes": [
                {"key": "tp", "values": values(|l| l.tp)},
                {"key": "dp", "values": values(|l| l.dp)},
                {"key": "prefill", "values": values(|l| l.prefill)},
                {"key": "decode", "values": values(|l| l.decode)},
            ],
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
