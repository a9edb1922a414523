//! `sweep --experiment`: one configuration of the grid is one `experiment
//! e4` (E1, E3, E4 and E4-ablate on one workload, with the H4-1..H4-3
//! verdicts). Its report file holds what `experiment e4 --json` prints; its
//! summary row holds the verdicts and the measures behind them
//! ([`handoff_lab::PointMeasures`]).

use crate::experiment_cmd::{config, load, ExperimentArgs};
use handoff_lab::{run_experiment_on, PointMeasures};
use serde_json::{Map, Value};
use std::path::Path;

/// The summary's columns after the axes, in the order of
/// [`PointMeasures`]'s fields (a test keeps the two in step).
pub const METRICS: &[&str] = &[
    "h4_1",
    "h4_2",
    "h4_3",
    "e4_bypass_hit_rate",
    "e4_reseeds",
    "e3_reseed_share",
    "e4_reseed_share",
    "e4_reseed_ttft_p50_ms",
    "e3_reseed_ttft_p50_ms",
    "e1_normal_ttft_p50_ms",
    "e1_ttft_p99_ms",
    "e3_ttft_p99_ms",
    "e4_ttft_p99_ms",
    "e3_throughput_rps",
    "e4_throughput_rps",
    "e4_ablate_throughput_rps",
    "e4_push_gbps",
    "e4_push_gb",
    "e4_pushes_sent",
    "e4_snapshot_lru_evictions",
    "reseeds",
    "hit",
    "miss_evicted",
    "miss_never_pushed",
    "miss_short",
    "miss_stale",
    "miss_disabled",
    "hit_age_p50_s",
    "hit_tail_p50_tokens",
    "drained",
];

/// Runs the experiment of `a`, writes its report to `path`; the row's
/// measures. A run that leaks a lease or fails a request is an error, as
/// `experiment` makes it.
pub fn run_point(a: &ExperimentArgs, path: &Path) -> Result<Map<String, Value>, String> {
    let (cfg, _) = config(a)?;
    let items = load(a)?;
    if items.is_empty() {
        return Err("the trace has no requests".into());
    }
    let out = run_experiment_on(&cfg, &items, a.runner()).map_err(|e| e.to_string())?;
    let text = serde_json::to_string_pretty(&out.report).map_err(|e| e.to_string())? + "\n";
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    // As `experiment` judges a run: requests that only timed out in a
    // queue are the point's overload, a result; anything else left behind
    // is an error.
    if let Some(o) = out
        .outputs
        .iter()
        .find(|o| !o.summary.drained && crate::experiment_cmd::timed_out_only(o).is_none())
    {
        return Err(format!(
            "{}: not drained ({} failed requests)",
            o.summary.label, o.summary.failed
        ));
    }
    let m = PointMeasures::of(&out).map_err(|e| e.to_string())?;
    match serde_json::to_value(&m).map_err(|e| e.to_string())? {
        Value::Object(o) => Ok(o),
        other => Err(format!("measures are not an object: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_lab::{Freshness, Status};

    #[test]
    fn the_columns_are_the_measures_fields_in_order() {
        let m = PointMeasures {
            h4_1: Status::Holds,
            h4_2: Status::Fails,
            h4_3: Status::Partial,
            e4_bypass_hit_rate: 0.0,
            e4_reseeds: 0,
            e3_reseed_share: 0.0,
            e4_reseed_share: 0.0,
            e4_reseed_ttft_p50_ms: 0.0,
            e3_reseed_ttft_p50_ms: 0.0,
            e1_normal_ttft_p50_ms: 0.0,
            e1_ttft_p99_ms: 0.0,
            e3_ttft_p99_ms: 0.0,
            e4_ttft_p99_ms: 0.0,
            e3_throughput_rps: 0.0,
            e4_throughput_rps: 0.0,
            e4_ablate_throughput_rps: 0.0,
            e4_push_gbps: 0.0,
            e4_push_gb: 0.0,
            e4_pushes_sent: 0,
            e4_snapshot_lru_evictions: 0,
            freshness: Freshness::default(),
            drained: true,
        };
        let v = serde_json::to_value(&m).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let mut want = METRICS.to_vec();
        keys.sort_unstable();
        want.sort_unstable();
        assert_eq!(keys, want);
        assert_eq!(v["h4_2"], "fails");
    }
}
