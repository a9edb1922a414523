//! One point of the D→P design map (issue 35): the measures a sweep over
//! the experiment's knobs keeps of each E1/E3/E4/E4-ablate run — the
//! H4-1..H4-3 verdicts and the numbers behind them — and the freshness of
//! the prefill worker's snapshots at E4's reseeds, which says whether the
//! store's LRU eviction is what keeps the bypass from hitting (the seed's
//! decision D2) or the push throttle is (D1).

use crate::error::{LabError, LogProblem};
use crate::experiment::{ExperimentOutput, Status};
use crate::metrics::{percentile, RunSummary};
use serde::Serialize;
use std::collections::BTreeMap;

/// What the prefill worker's store held for a session when one of E4's
/// reseeds looked it up, one count per reseed.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Freshness {
    /// Reseeds that looked a snapshot up (hits plus misses).
    pub reseeds: u64,
    /// The snapshot covered the prompt (up to `K_TAIL_TOLERANCE`): bypass.
    pub hit: u64,
    /// No entry, though one was ingested earlier: evicted (LRU for
    /// `max_sessions` or for pool pages, or dropped as stale).
    pub miss_evicted: u64,
    /// No entry, and none ever landed for the session: no push had passed
    /// the `K_DELTA` throttle and landed yet.
    pub miss_never_pushed: u64,
    /// An entry shorter than the prompt minus `K_TAIL_TOLERANCE`.
    pub miss_short: u64,
    /// An entry older than `snapshot_max_age`.
    pub miss_stale: u64,
    /// Bypass switched off (E4-ablate; never in E4).
    pub miss_disabled: u64,
    /// Median age of the snapshots hits used, seconds (0 without hits).
    pub hit_age_p50_s: f64,
    /// Median prompt tail hits still computed, tokens (0 without hits).
    pub hit_tail_p50_tokens: f64,
}

fn field<'a>(
    v: &'a serde_json::Value,
    key: &'static str,
    line: usize,
) -> Result<&'a serde_json::Value, LabError> {
    v.get(key).ok_or(LabError::Log {
        line,
        problem: LogProblem::Missing(key),
    })
}

impl Freshness {
    /// Reads a run's §6 session log (in time order). A session's first
    /// lookup is its seed turn's (no snapshot can exist before its first
    /// turn): it is not a reseed and not counted.
    pub fn of_log(lines: &[String]) -> Result<Freshness, LabError> {
        let mut f = Freshness::default();
        // Per session: looked up before (its seed was), ingested before.
        let mut seen: BTreeMap<String, (bool, bool)> = BTreeMap::new();
        let (mut ages, mut tails) = (Vec::new(), Vec::new());
        for (i, l) in lines.iter().enumerate() {
            let n = i + 1;
            let v: serde_json::Value = serde_json::from_str(l).map_err(|e| LabError::Log {
                line: n,
                problem: LogProblem::Json(e),
            })?;
            let event = field(&v, "event", n)?.as_str().unwrap_or_default();
            let sid = field(&v, "sid", n)?
                .as_str()
                .unwrap_or_default()
                .to_string();
            let s = seen.entry(sid).or_default();
            match event {
                "snapshot_recv_ingested" => s.1 = true,
                "snapshot_bypass_hit" | "snapshot_bypass_miss" if !s.0 => s.0 = true,
                "snapshot_bypass_hit" => {
                    f.reseeds += 1;
                    f.hit += 1;
                    ages.push(field(&v, "age_s", n)?.as_f64().unwrap_or(0.0));
                    tails.push(field(&v, "tail", n)?.as_f64().unwrap_or(0.0));
                }
                "snapshot_bypass_miss" => {
                    f.reseeds += 1;
                    let slot = match field(&v, "reason", n)?.as_str().unwrap_or_default() {
                        "no_entry" if s.1 => &mut f.miss_evicted,
                        "no_entry" => &mut f.miss_never_pushed,
                        "seqlen_short" => &mut f.miss_short,
                        "stale" => &mut f.miss_stale,
                        "bypass_disabled" => &mut f.miss_disabled,
                        other => {
                            return Err(LabError::Log {
                                line: n,
                                problem: LogProblem::UnknownMiss(other.to_string()),
                            })
                        }
                    };
                    *slot += 1;
                }
                _ => {}
            }
        }
        for v in [&mut ages, &mut tails] {
            v.sort_by(|a, b| a.total_cmp(b));
        }
        f.hit_age_p50_s = percentile(&ages, 0.5);
        f.hit_tail_p50_tokens = percentile(&tails, 0.5);
        Ok(f)
    }
}

/// The measures of one configuration of the map: a row of the sweep's
/// summary (flat, so it is also a CSV row).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PointMeasures {
    /// H4-1: E4 TTFT p99 <= E1.
    pub h4_1: Status,
    /// H4-2: reseed share unchanged, reseed path as fast as E1's normal.
    pub h4_2: Status,
    /// H4-3: E4 throughput slightly below E3, latency gain.
    pub h4_3: Status,
    /// E4's bypass hits over its reseeds (0 without reseeds).
    pub e4_bypass_hit_rate: f64,
    /// E4's reseeds.
    pub e4_reseeds: u64,
    /// E3's reseeds over its completed turns.
    pub e3_reseed_share: f64,
    /// E4's reseeds over its completed turns.
    pub e4_reseed_share: f64,
    /// E4's reseed-path TTFT median, ms.
    pub e4_reseed_ttft_p50_ms: f64,
    /// E3's reseed-path TTFT median, ms.
    pub e3_reseed_ttft_p50_ms: f64,
    /// E1's TTFT median, ms (every E1 turn is on the normal path).
    pub e1_normal_ttft_p50_ms: f64,
    /// TTFT 99th percentiles, ms.
    pub e1_ttft_p99_ms: f64,
    /// See `e1_ttft_p99_ms`.
    pub e3_ttft_p99_ms: f64,
    /// See `e1_ttft_p99_ms`.
    pub e4_ttft_p99_ms: f64,
    /// Completed requests per second.
    pub e3_throughput_rps: f64,
    /// See `e3_throughput_rps`.
    pub e4_throughput_rps: f64,
    /// See `e3_throughput_rps`.
    pub e4_ablate_throughput_rps: f64,
    /// E4's push bandwidth: bytes pushed over the run's makespan, GB/s.
    pub e4_push_gbps: f64,
    /// E4's bytes pushed, GB.
    pub e4_push_gb: f64,
    /// E4's pushes that landed.
    pub e4_pushes_sent: u64,
    /// E4's snapshots evicted least-recently-used.
    pub e4_snapshot_lru_evictions: u64,
    /// Freshness of E4's snapshots at its reseeds.
    #[serde(flatten)]
    pub freshness: Freshness,
    /// Every run drained with no request failed.
    pub drained: bool,
}

fn run<'a>(out: &'a ExperimentOutput, label: &'static str) -> Result<&'a RunSummary, LabError> {
    out.report
        .runs
        .iter()
        .find(|r| r.label == label)
        .ok_or(LabError::NoRun(label))
}

fn status(out: &ExperimentOutput, id: &'static str) -> Result<Status, LabError> {
    out.report
        .verdicts
        .iter()
        .find(|v| v.id == id)
        .map(|v| v.status)
        .ok_or(LabError::NoVerdict(id))
}

impl PointMeasures {
    /// The measures of a four-variant experiment.
    pub fn of(out: &ExperimentOutput) -> Result<PointMeasures, LabError> {
        let (e1, e3, e4, ablate) = (
            run(out, "E1")?,
            run(out, "E3")?,
            run(out, "E4")?,
            run(out, "E4-ablate")?,
        );
        let e4_log = out
            .outputs
            .iter()
            .find(|o| o.summary.label == "E4")
            .map(|o| o.log.as_slice())
            .unwrap_or_default();
        let reseeds = e4.modes.get("reseed").copied().unwrap_or(0);
        let freshness = Freshness::of_log(e4_log)?;
        // The log tells seeds from reseeds by order only; the summary knows
        // each lookup's turn. They must agree.
        let looked_up = e4.bypass_hits + e4.bypass_misses.values().sum::<u64>();
        if freshness.reseeds != looked_up {
            return Err(LabError::ReseedsDisagree {
                log: freshness.reseeds,
                summary: looked_up,
            });
        }
        Ok(PointMeasures {
            h4_1: status(out, "H4-1")?,
            h4_2: status(out, "H4-2")?,
            h4_3: status(out, "H4-3")?,
            e4_bypass_hit_rate: if reseeds == 0 {
                0.0
            } else {
                (e4.bypass_hits as f64 / reseeds as f64 * 1e4).round() / 1e4
            },
            e4_reseeds: reseeds,
            e3_reseed_share: e3.reseed_share,
            e4_reseed_share: e4.reseed_share,
            e4_reseed_ttft_p50_ms: e4.reseed_ttft_p50_ms,
            e3_reseed_ttft_p50_ms: e3.reseed_ttft_p50_ms,
            e1_normal_ttft_p50_ms: e1.normal_ttft_p50_ms,
            e1_ttft_p99_ms: e1.ttft_p99_ms,
            e3_ttft_p99_ms: e3.ttft_p99_ms,
            e4_ttft_p99_ms: e4.ttft_p99_ms,
            e3_throughput_rps: e3.throughput_rps,
            e4_throughput_rps: e4.throughput_rps,
            e4_ablate_throughput_rps: ablate.throughput_rps,
            e4_push_gbps: e4.push_gbps,
            e4_push_gb: (e4.push_bytes as f64 / 1e6).round() / 1e3,
            e4_pushes_sent: e4.pushes_sent,
            e4_snapshot_lru_evictions: e4.snapshot_evictions.get("lru").copied().unwrap_or(0),
            freshness,
            drained: out.report.runs.iter().all(|r| r.drained),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(event: &str, sid: u32, rest: &str) -> String {
        format!("{{\"ts\":1.000,\"event\":\"{event}\",\"sid\":\"{sid}\",\"worker\":0{rest}}}")
    }

    #[test]
    fn freshness_tells_evicted_from_never_pushed_and_skips_seeds() {
        let log = vec![
            // Session 1: seed miss, a push lands, evicted, reseed misses.
            line("snapshot_bypass_miss", 1, ",\"reason\":\"no_entry\""),
            line(
                "snapshot_recv_ingested",
                1,
                ",\"seqlen\":9000,\"double_push\":false",
            ),
            line("snapshot_evicted", 1, ",\"seqlen\":9000,\"reason\":\"lru\""),
            line("snapshot_bypass_miss", 1, ",\"reason\":\"no_entry\""),
            // Session 2: seed, reseed before any push landed, then a hit.
            line("snapshot_bypass_miss", 2, ",\"reason\":\"no_entry\""),
            line("snapshot_bypass_miss", 2, ",\"reason\":\"no_entry\""),
            line(
                "snapshot_recv_ingested",
                2,
                ",\"seqlen\":9000,\"double_push\":false",
            ),
            line(
                "snapshot_bypass_hit",
                2,
                ",\"seqlen\":9000,\"tail\":40,\"age_s\":2.500",
            ),
            line("snapshot_bypass_miss", 2, ",\"reason\":\"seqlen_short\""),
            line("snapshot_bypass_miss", 2, ",\"reason\":\"stale\""),
        ];
        let f = Freshness::of_log(&log).unwrap();
        assert_eq!(
            (f.reseeds, f.hit, f.miss_evicted, f.miss_never_pushed),
            (5, 1, 1, 1)
        );
        assert_eq!((f.miss_short, f.miss_stale, f.miss_disabled), (1, 1, 0));
        assert_eq!((f.hit_age_p50_s, f.hit_tail_p50_tokens), (2.5, 40.0));
    }

    proptest::proptest! {
        /// Any sequence of lookups and ingests: each reseed lands in
        /// exactly one category, and a session's first lookup is never one.
        #[test]
        fn every_reseed_is_counted_once(
            events in proptest::collection::vec((0u32..4, 0u8..6), 0..60)
        ) {
            let mut firsts = std::collections::BTreeSet::new();
            let mut lookups = 0u64;
            let log: Vec<String> = events
                .iter()
                .map(|&(sid, e)| {
                    let rest = match e {
                        0 => return line("snapshot_recv_ingested", sid, ",\"seqlen\":1"),
                        1 => return line("snapshot_bypass_hit", sid, ",\"tail\":3,\"age_s\":0.5"),
                        2 => ",\"reason\":\"no_entry\"",
                        3 => ",\"reason\":\"seqlen_short\"",
                        4 => ",\"reason\":\"stale\"",
                        _ => ",\"reason\":\"bypass_disabled\"",
                    };
                    line("snapshot_bypass_miss", sid, rest)
                })
                .collect();
            for &(sid, e) in &events {
                if e >= 1 && !firsts.insert(sid) {
                    lookups += 1;
                }
            }
            let f = Freshness::of_log(&log).unwrap();
            let parts = f.hit + f.miss_evicted + f.miss_never_pushed + f.miss_short
                + f.miss_stale + f.miss_disabled;
            proptest::prop_assert_eq!(f.reseeds, lookups);
            proptest::prop_assert_eq!(parts, lookups);
        }

        /// Arbitrary text is refused with a located error, never a panic.
        #[test]
        fn garbage_never_panics(lines in proptest::collection::vec(".{0,40}", 0..5)) {
            if let Err(e) = Freshness::of_log(&lines) {
                proptest::prop_assert!(matches!(e, LabError::Log { .. }), "{}", e);
            }
        }
    }

    #[test]
    fn a_bad_log_line_is_named() {
        let e = Freshness::of_log(&["{\"event\":\"x\"}".into()]).unwrap_err();
        assert!(matches!(
            e,
            LabError::Log {
                line: 1,
                problem: LogProblem::Missing("sid")
            }
        ));
        assert_eq!(e.to_string(), "session log line 1: no `sid`");
        let e = Freshness::of_log(&["{".into()]).unwrap_err();
        assert!(matches!(
            e,
            LabError::Log {
                line: 1,
                problem: LogProblem::Json(_)
            }
        ));
        let bad = line("snapshot_bypass_miss", 1, ",\"reason\":\"x\"");
        let e = Freshness::of_log(&[bad.clone(), bad]).unwrap_err();
        assert_eq!(e.to_string(), "session log line 2: unknown miss `x`");
    }
}
