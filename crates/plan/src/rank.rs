//! Ranking a plan's rows: the layouts that hold the SLO, best goodput per
//! GPU first; the Pareto frontier of tokens/s/GPU against tokens/s/user
//! (AIConfigurator's axes, `sdk/pareto_analysis.py` `get_pareto_front`:
//! a point is on it when no other point is at least as good on both axes
//! and better on one). The files written from them are [`crate::outputs`].

use crate::error::PlanError;
use crate::layout::{Axes, Experts};
use serde_json::Value;
use std::fmt::Write as _;

/// One layout's figures, read from its summary row.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// Configuration number.
    pub index: usize,
    /// TP of a prefill (or aggregated) worker's rank.
    pub prefill_tp: u32,
    /// TP of a decode worker's rank (aggregated: as prefill).
    pub decode_tp: u32,
    /// Data-parallel ranks per worker.
    pub dp: u32,
    /// Prefill (or aggregated) workers.
    pub prefill: u32,
    /// Decode workers.
    pub decode: u32,
    /// Expert parallelism.
    pub experts: Experts,
    /// GPUs used.
    pub gpus: u64,
    /// Whether every SLO target held.
    pub holds: bool,
    /// Share of requests meeting every target.
    pub attainment: f64,
    /// Goodput output tokens/s per GPU.
    pub goodput_per_gpu: f64,
    /// Output tokens/s per GPU.
    pub per_gpu: f64,
    /// Output tokens/s per user (1000 / mean TPOT).
    pub per_user: f64,
    /// p90 TTFT and TPOT, ms.
    pub p90_ttft_ms: f64,
    /// p90 TPOT, ms.
    pub p90_tpot_ms: f64,
    /// Source blocks stranded, block·seconds, summed over workers.
    pub stranded_block_s: f64,
    /// Mean reservation wait, ms.
    pub reservation_wait_ms: f64,
    /// Mean transfer time, ms.
    pub transfer_ms: f64,
    /// Cost per million output tokens, USD (with a price).
    pub usd_per_million: Option<f64>,
    /// The highest rate the SLO held at (`--max-rate`; absent: not
    /// searched, or held at none).
    pub max_rate_rps: Option<f64>,
    /// Whether its run reached steady state (its row carries no
    /// `warnings`: `handoff_serving::report::RunWarning`).
    pub steady: bool,
}

/// The figures both plan tables show after rank, layout and GPUs: the
/// text table's heading and width, and the HTML table's heading.
pub const FIGURES: [(&str, usize, &str); 10] = [
    ("good/gpu", 10, "goodput tok/s/GPU"),
    ("tok/gpu", 9, "tok/s/GPU"),
    ("tok/user", 9, "tok/s/user"),
    ("slo%", 7, "SLO attainment"),
    ("p90 ttft", 9, "p90 TTFT ms"),
    ("p90 tpot", 9, "p90 TPOT ms"),
    ("stranded", 11, "stranded block·s"),
    ("resv ms", 9, "resv ms"),
    ("xfer ms", 9, "xfer ms"),
    ("$/Mtok", 9, "$ per M tokens"),
];

impl Point {
    /// This layout's [`FIGURES`], formatted (SLO attainment in percent);
    /// `unpriced` stands for the cost when no price was given.
    pub fn figures(&self, unpriced: &str) -> [String; 10] {
        [
            format!("{:.1}", self.goodput_per_gpu),
            format!("{:.1}", self.per_gpu),
            format!("{:.1}", self.per_user),
            format!("{:.1}", self.attainment * 100.0),
            format!("{:.1}", self.p90_ttft_ms),
            format!("{:.2}", self.p90_tpot_ms),
            format!("{:.1}", self.stranded_block_s),
            format!("{:.2}", self.reservation_wait_ms),
            format!("{:.2}", self.transfer_ms),
            self.usd_per_million
                .map_or(unpriced.to_string(), |c| format!("{c:.3}")),
        ]
    }

    /// `2P+3D tp1` or `4x agg tp1`; `6P+1D tp2/4` when the pools' TPs
    /// differ (prefill's first, as AIConfigurator's rows read here); then
    /// ` dp2` when DP > 1 and ` ep` when expert parallel.
    pub fn layout(&self) -> String {
        let mut tail = String::new();
        if self.dp > 1 {
            let _ = write!(tail, " dp{}", self.dp);
        }
        if self.experts == Experts::Parallel {
            tail.push_str(" ep");
        }
        if self.decode == 0 {
            format!("{}x agg tp{}{tail}", self.prefill, self.prefill_tp)
        } else if self.prefill_tp == self.decode_tp {
            format!(
                "{}P+{}D tp{}{tail}",
                self.prefill, self.decode, self.prefill_tp
            )
        } else {
            format!(
                "{}P+{}D tp{}/{}{tail}",
                self.prefill, self.decode, self.prefill_tp, self.decode_tp
            )
        }
    }

    fn of(row: &Value) -> Option<Point> {
        if !row["error"].is_null() {
            return None;
        }
        let f = |k: &str| row[k].as_f64().unwrap_or(0.0);
        let n = |k: &str| row["config"][k].as_str().and_then(|s| s.parse().ok());
        Some(Point {
            index: row["index"].as_u64()? as usize,
            // A per-pool plan's rows carry `prefill_tp` and `decode_tp`,
            // the others one `tp`.
            prefill_tp: n("prefill_tp").or_else(|| n("tp"))?,
            decode_tp: n("decode_tp").or_else(|| n("tp"))?,
            // Summaries written before `--dp` existed carry no `dp`.
            dp: if row["config"]["dp"].is_null() {
                1
            } else {
                n("dp")?
            },
            prefill: n("prefill")?,
            decode: n("decode")?,
            experts: match row["config"]["ep"].as_str() {
                Some("on") => Experts::Parallel,
                _ => Experts::Off,
            },
            gpus: row["sizing.gpus"].as_u64()?,
            holds: row["slo.holds"].as_bool()?,
            attainment: f("slo.attainment_all"),
            goodput_per_gpu: f("sizing.goodput_tok_s_per_gpu"),
            per_gpu: f("sizing.output_tok_s_per_gpu"),
            per_user: f("sizing.output_tok_s_per_user"),
            p90_ttft_ms: f("p90_ttft_ms"),
            p90_tpot_ms: f("p90_tpot_ms"),
            stranded_block_s: f("sum:workers.pinned_block_seconds"),
            reservation_wait_ms: f("lifecycle.reservation_wait_ms.mean"),
            transfer_ms: f("lifecycle.transfer_ms.mean"),
            usd_per_million: row["sizing.usd_per_million_output_tokens"].as_f64(),
            max_rate_rps: row["max_rate_rps"].as_f64(),
            steady: row.get("warnings").is_none_or(Value::is_null),
        })
    }
}

/// A plan's layouts ranked.
#[derive(Clone, Debug)]
pub struct Ranked {
    /// Layouts holding the SLO, by goodput per GPU (then fewer GPUs, then
    /// configuration number); the others after them by attainment.
    pub order: Vec<Point>,
    /// Indices into `order` of the Pareto frontier, by tokens/s/user.
    pub frontier: Vec<usize>,
    /// Whether `--max-rate` searched each layout's highest rate.
    pub rate_searched: bool,
    /// The plan's axes beyond TP, DP and workers (read from its rows'
    /// `config`): what `best.csv` and the frontier add.
    pub axes: Axes,
}

/// Whether `a` is at least `b` on both axes and above it on one.
fn dominates(a: &Point, b: &Point) -> bool {
    a.per_user >= b.per_user
        && a.per_gpu >= b.per_gpu
        && (a.per_user > b.per_user || a.per_gpu > b.per_gpu)
}

/// Ranks the rows of `summary` (rows that failed to run are left out).
pub fn rank(summary: &Value) -> Result<Ranked, PlanError> {
    let rows = summary["rows"].as_array().ok_or(PlanError::NoRows)?;
    let mut order: Vec<Point> = rows.iter().filter_map(Point::of).collect();
    if order.is_empty() {
        return Err(PlanError::NoneRan);
    }
    order.sort_by(|a, b| {
        b.holds
            .cmp(&a.holds)
            .then(if a.holds {
                b.goodput_per_gpu.total_cmp(&a.goodput_per_gpu)
            } else {
                b.attainment.total_cmp(&a.attainment)
            })
            .then(a.gpus.cmp(&b.gpus))
            .then(a.index.cmp(&b.index))
    });
    let mut frontier: Vec<usize> = (0..order.len())
        .filter(|&i| !order.iter().any(|o| dominates(o, &order[i])))
        .collect();
    frontier.sort_by(|&a, &b| {
        order[a]
            .per_user
            .total_cmp(&order[b].per_user)
            .then(order[a].index.cmp(&order[b].index))
    });
    let has = |k: &str| rows.iter().any(|r| r["config"].get(k).is_some());
    Ok(Ranked {
        order,
        frontier,
        rate_searched: rows.iter().any(|r| r.get("max_rate_rps").is_some()),
        axes: Axes {
            per_pool_tp: has("prefill_tp"),
            experts: has("ep"),
        },
    })
}

impl Ranked {
    /// The ranks (1-based) of the layouts whose runs did not reach steady
    /// state, best first.
    pub fn not_steady(&self) -> Vec<usize> {
        (1..=self.order.len())
            .filter(|&r| !self.order[r - 1].steady)
            .collect()
    }

    /// The table of the best `top` layouts, as text lines.
    pub fn table(&self, top: usize) -> Vec<String> {
        let held = self.order.iter().filter(|p| p.holds).count();
        let searched = self.rate_searched;
        let mut v = vec![if held == 0 {
            format!(
                "no layout of {} holds the SLO; closest by attainment:",
                self.order.len()
            )
        } else {
            format!(
                "{held} of {} layouts hold the SLO; best goodput per GPU first:",
                self.order.len()
            )
        }];
        let mut head = format!("{:>4} {:<16} {:>5}", "rank", "layout", "gpus");
        for (name, width, _) in FIGURES {
            let _ = write!(head, " {name:>width$}");
        }
        if searched {
            head.push_str("  max req/s");
        }
        v.push(head);
        for (i, p) in self.order.iter().take(top).enumerate() {
            let mut line = format!("{:>4} {:<16} {:>5}", i + 1, p.layout(), p.gpus);
            for ((_, width, _), f) in FIGURES.iter().zip(p.figures("-")) {
                let _ = write!(line, " {f:>width$}");
            }
            if searched {
                let rate = p.max_rate_rps.map_or("none".into(), |r| format!("{r:.2}"));
                let _ = write!(line, "  {rate:>9}");
            }
            v.push(line);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(
        index: usize,
        prefill: u32,
        decode: u32,
        holds: bool,
        good: f64,
        gpu: f64,
        user: f64,
    ) -> Value {
        json!({
            "index": index, "error": null,
            "config": {"tp": "1", "prefill": prefill.to_string(), "decode": decode.to_string()},
            "sizing.gpus": prefill + decode, "slo.holds": holds, "slo.attainment_all": if holds { 0.95 } else { 0.5 },
            "sizing.goodput_tok_s_per_gpu": good, "sizing.output_tok_s_per_gpu": gpu,
            "sizing.output_tok_s_per_user": user,
        })
    }

    #[test]
    fn held_layouts_first_by_goodput_and_the_frontier() {
        let s = json!({"rows": [
            row(0, 1, 0, true, 100.0, 110.0, 50.0),
            row(1, 2, 0, true, 300.0, 310.0, 40.0),
            row(2, 1, 1, false, 10.0, 500.0, 30.0),
            row(3, 1, 2, true, 300.0, 300.0, 45.0),
            row(4, 2, 2, true, 90.0, 100.0, 20.0),
            json!({"index": 5, "error": "boom", "config": {}}),
        ]});
        let r = rank(&s).unwrap();
        let idx: Vec<usize> = r.order.iter().map(|p| p.index).collect();
        // 1 and 3 tie on goodput per GPU; 1 uses fewer GPUs.
        assert_eq!(idx, [1, 3, 0, 4, 2]);
        // Frontier by tokens/s/user: 2 (500 @ 30), 1 (310 @ 40), 3 (300 @ 45), 0 (110 @ 50);
        // 4 (100 @ 20) is dominated.
        let f: Vec<usize> = r.frontier.iter().map(|&i| r.order[i].index).collect();
        assert_eq!(f, [2, 1, 3, 0]);
        assert_eq!(r.order[1].layout(), "1P+2D tp1");
        let mut p = r.order[1].clone();
        p.dp = 2;
        assert_eq!(p.layout(), "1P+2D tp1 dp2");
        p.decode = 0;
        assert_eq!(p.layout(), "1x agg tp1 dp2");
        let t = r.table(2);
        assert_eq!(t.len(), 4);
        assert!(t[0].starts_with("4 of 5 layouts hold"), "{}", t[0]);
        assert!(rank(&json!({"rows": []})).is_err());
        assert!(r.not_steady().is_empty());
        let mut rows = s["rows"].as_array().unwrap().clone();
        rows[3]["warnings"] = json!([{"kind": "not_steady"}]);
        let r = rank(&json!({ "rows": rows })).unwrap();
        // Layout 3 ranks second.
        assert_eq!(r.not_steady(), [2]);
    }

    #[test]
    fn per_pool_rows_read_both_tps_and_expert_parallelism() {
        let mut a = row(0, 6, 1, true, 100.0, 110.0, 50.0);
        a["config"] = json!({"prefill_tp": "2", "decode_tp": "4", "dp": "1",
                             "prefill": "6", "decode": "1", "ep": "off"});
        let mut b = row(1, 2, 0, true, 90.0, 100.0, 40.0);
        b["config"] = json!({"prefill_tp": "1", "decode_tp": "1", "dp": "4",
                             "prefill": "2", "decode": "0", "ep": "on"});
        let r = rank(&json!({ "rows": [a, b] })).unwrap();
        let p = &r.order[0];
        assert_eq!((p.prefill_tp, p.decode_tp, p.experts), (2, 4, Experts::Off));
        assert_eq!(p.layout(), "6P+1D tp2/4");
        assert_eq!(r.order[1].experts, Experts::Parallel);
        assert_eq!(r.order[1].layout(), "2x agg tp1 dp4 ep");
        assert_eq!(
            r.axes,
            Axes {
                per_pool_tp: true,
                experts: true
            }
        );
        // A one-TP row reads its `tp` for both pools, and its plan's
        // axes are the plain ones.
        let r = rank(&json!({"rows": [row(0, 1, 2, true, 1.0, 1.0, 1.0)]})).unwrap();
        assert_eq!((r.order[0].prefill_tp, r.order[0].decode_tp), (1, 1));
        assert_eq!(r.axes, Axes::default());
        let t = r.table(1);
        assert!(t[2].contains("1P+2D tp1 "), "{}", t[2]);
    }
}
