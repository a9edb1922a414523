//! The files a plan writes from its ranking: `best.csv` (every layout,
//! best first), `pareto.csv` and `pareto.json` (the frontier, by
//! tokens/s/user) and `plan.html` ([`crate::html`]).

use crate::error::write_file;
use crate::error::PlanError;
use crate::layout::{Axes, Experts};
use crate::rank::{Point, Ranked};
use serde_json::{json, Value};
use std::path::Path;

/// One layout's line of `best.csv` and the frontier: `tp` (both pools'),
/// or `prefill_tp` and `decode_tp` in a plan with per-pool TP; `ep`
/// (`true` when expert parallel) only in a plan that tried it.
fn point_json(p: &Point, rank: usize, axes: Axes) -> Value {
    let mut v = json!({
        "rank": rank,
        "index": p.index,
        "layout": p.layout(),
        "dp": p.dp,
        "prefill": p.prefill,
        "decode": p.decode,
        "gpus": p.gpus,
        "slo_holds": p.holds,
        "slo_attainment": p.attainment,
        "goodput_tok_s_per_gpu": p.goodput_per_gpu,
        "tok_s_per_gpu": p.per_gpu,
        "tok_s_per_user": p.per_user,
        "p90_ttft_ms": p.p90_ttft_ms,
        "p90_tpot_ms": p.p90_tpot_ms,
        "stranded_block_seconds": p.stranded_block_s,
        "mean_reservation_wait_ms": p.reservation_wait_ms,
        "mean_transfer_ms": p.transfer_ms,
        "usd_per_million_output_tokens": p.usd_per_million,
        "max_rate_rps": p.max_rate_rps,
    });
    if axes.per_pool_tp {
        v["prefill_tp"] = json!(p.prefill_tp);
        v["decode_tp"] = json!(p.decode_tp);
    } else {
        v["tp"] = json!(p.prefill_tp);
    }
    if axes.experts {
        v["ep"] = json!(p.experts == Experts::Parallel);
    }
    v
}

/// `points` as CSV, one line per point, the header from the first's keys.
fn csv_of(points: &[Value]) -> String {
    let Some(first) = points.first().and_then(Value::as_object) else {
        return String::new();
    };
    let keys: Vec<&String> = first.keys().collect();
    let mut s = keys
        .iter()
        .map(|k| k.as_str())
        .collect::<Vec<_>>()
        .join(",");
    s.push('\n');
    for p in points {
        let cells: Vec<String> = keys
            .iter()
            .map(|k| match &p[k.as_str()] {
                Value::Null => String::new(),
                Value::String(t) => t.clone(),
                v => v.to_string(),
            })
            .collect();
        s.push_str(&cells.join(","));
        s.push('\n');
    }
    s
}

/// The files of a ranked plan, as `(name, contents)` in writing order.
pub fn files(r: &Ranked, summary: &Value) -> Result<Vec<(&'static str, String)>, PlanError> {
    let best: Vec<Value> = r
        .order
        .iter()
        .enumerate()
        .map(|(i, p)| point_json(p, i + 1, r.axes))
        .collect();
    let frontier: Vec<Value> = r.frontier.iter().map(|&i| best[i].clone()).collect();
    let text = serde_json::to_string_pretty(&json!({ "frontier": frontier }))
        .map_err(|e| PlanError::Json(e.to_string()))?;
    Ok(vec![
        ("best.csv", csv_of(&best)),
        ("pareto.csv", csv_of(&frontier)),
        ("pareto.json", text + "\n"),
        ("plan.html", crate::html::page(r, summary)?),
    ])
}

/// Writes [`files`] into the directory `out`.
pub fn write(r: &Ranked, summary: &Value, out: &Path) -> Result<(), PlanError> {
    for (name, body) in files(r, summary)? {
        write_file(&out.join(name), &body)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_has_the_first_points_keys_and_empty_cells_for_nulls() {
        let pts = [
            json!({"rank": 1, "layout": "1x agg tp1", "usd": null}),
            json!({"rank": 2, "layout": "1P+1D tp1", "usd": 1.5}),
        ];
        // serde_json's map orders keys; the header follows it.
        let csv = csv_of(&pts);
        let mut lines = csv.lines();
        let head: Vec<&str> = lines.next().unwrap().split(',').collect();
        assert_eq!(head.len(), 3);
        let at = |k: &str| head.iter().position(|h| *h == k).unwrap();
        let second: Vec<&str> = csv.lines().nth(2).unwrap().split(',').collect();
        assert_eq!(second[at("usd")], "1.5");
        assert_eq!(second[at("layout")], "1P+1D tp1");
        let first: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
        assert_eq!(first[at("usd")], "");
        assert_eq!(csv_of(&[]), "");
    }

    #[test]
    fn best_csv_names_each_pools_tp_only_in_a_per_pool_plan() {
        let row = |config: Value| {
            json!({"index": 0, "error": null, "config": config, "sizing.gpus": 16,
                   "slo.holds": true})
        };
        let plain = json!({"tp": "2", "dp": "1", "prefill": "3", "decode": "1"});
        let r = crate::rank::rank(&json!({"rows": [row(plain)]})).unwrap();
        let head = |r: &Ranked| -> Vec<String> {
            let best = &files(r, &json!({})).unwrap()[0].1;
            best.lines()
                .next()
                .unwrap()
                .split(',')
                .map(String::from)
                .collect()
        };
        let h = head(&r);
        assert!(h.contains(&"tp".to_string()), "{h:?}");
        assert!(!h.iter().any(|k| k.ends_with("_tp") || k == "ep"), "{h:?}");
        let pools = json!({"prefill_tp": "2", "decode_tp": "4", "dp": "1",
                           "prefill": "6", "decode": "1", "ep": "on"});
        let r = crate::rank::rank(&json!({"rows": [row(pools)]})).unwrap();
        let h = head(&r);
        for k in ["prefill_tp", "decode_tp", "ep"] {
            assert!(h.contains(&k.to_string()), "{k} {h:?}");
        }
        assert!(!h.contains(&"tp".to_string()), "{h:?}");
        let best = &files(&r, &json!({})).unwrap()[0].1;
        let cells: Vec<&str> = best.lines().nth(1).unwrap().split(',').collect();
        let at = |k: &str| cells[h.iter().position(|x| x == k).unwrap()];
        assert_eq!(
            (at("prefill_tp"), at("decode_tp"), at("ep")),
            ("2", "4", "true")
        );
        assert_eq!(at("layout"), "6P+1D tp2/4 ep");
    }
}
