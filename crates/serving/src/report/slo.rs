//! SLO attainment, goodput, GPUs and cost: what [`handoff_deployment::ReportSizing`]
//! asks the report for. The recorder judges each request as it ends
//! ([`SloTracker::judge`]), so the counts are exact even when latencies
//! are folded into histograms (`serve`).
//!
//! Definitions:
//! - a request meets a target when it completed and its value is at most
//!   the bound (vLLM's goodput, `vllm/benchmarks/serve.py`
//!   `calculate_metrics`; a one-token request's TPOT counts as 0 there and
//!   here); a failed request meets none;
//! - a target's attainment is the share of arrived requests that met it,
//!   and the target holds when that share reaches its percentile;
//! - goodput is completed requests meeting every target (and their output
//!   tokens) per simulated second of the report's span;
//! - tokens/s/GPU and tokens/s/user are AIConfigurator's (0.11.0,
//!   `sdk/picking.py` `_build_disagg_summary_dict`: `tokens/s / num_total_gpus`,
//!   and `1000 / tpot` with TPOT in ms), with the simulated output
//!   throughput and mean TPOT in place of its estimates;
//! - GPUs are `workers × dp_size × gpus_per_rank` (`worker_gpus` there),
//!   each pool at its own TP (`ReportSizing::gpus`).

use super::units::round3;
use handoff_deployment::{ReportSizing, SloMetric, SloSpec};
use serde::Serialize;

/// One request's latencies as the SLO judges them, ms (`None`: never
/// reached).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SloSample {
    /// Time to first token.
    pub ttft_ms: Option<f64>,
    /// Mean time per output token after the first (0 for one token).
    pub tpot_ms: Option<f64>,
    /// Arrival to last token.
    pub e2e_ms: Option<f64>,
}

impl SloSample {
    fn value(&self, m: SloMetric) -> Option<f64> {
        match m {
            SloMetric::Ttft => self.ttft_ms,
            SloMetric::Tpot => self.tpot_ms,
            SloMetric::E2e => self.e2e_ms,
        }
    }
}

/// Whether one request met each target, as `--per-request-jsonl` writes
/// it: `{"ttft:p90": true, ..., "all": false}`.
#[derive(Clone, Debug, PartialEq)]
pub struct SloVerdicts {
    /// Target label and whether it was met, in the order of `--slo`.
    pub met: Vec<(String, bool)>,
    /// Every target met.
    pub all: bool,
}

impl Serialize for SloVerdicts {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = serializer.serialize_map(Some(self.met.len() + 1))?;
        for (label, ok) in &self.met {
            m.serialize_entry(label, ok)?;
        }
        m.serialize_entry("all", &self.all)?;
        m.end()
    }
}

/// Counts of requests meeting each target, kept while the run goes.
#[derive(Clone, Debug)]
pub(super) struct SloTracker {
    spec: SloSpec,
    labels: Vec<String>,
    met: Vec<u64>,
    all: u64,
    good_completed: u64,
    good_output_tokens: u64,
}

impl SloTracker {
    pub(super) fn new(spec: &SloSpec) -> Self {
        SloTracker {
            labels: spec.targets.iter().map(|t| t.label()).collect(),
            met: vec![0; spec.targets.len()],
            spec: spec.clone(),
            all: 0,
            good_completed: 0,
            good_output_tokens: 0,
        }
    }

    /// Counts one ended request (`completed` false: it failed, meeting
    /// nothing) and returns a bit per target met (bit `i`: target `i`).
    pub(super) fn judge(&mut self, s: &SloSample, completed: bool, output_tokens: u64) -> u32 {
        let mut bits = 0u32;
        for (i, t) in self.spec.targets.iter().enumerate() {
            if completed && t.met_by(s.value(t.metric)) {
                bits |= 1 << i;
                self.met[i] += 1;
            }
        }
        let every = (1u32 << self.spec.targets.len()) - 1;
        if completed && bits == every {
            self.all += 1;
            self.good_completed += 1;
            self.good_output_tokens += output_tokens;
        }
        bits
    }

    /// Whether `bits` (from [`SloTracker::judge`]) meets every target.
    pub(super) fn all_met(&self, bits: u32) -> bool {
        bits == (1u32 << self.spec.targets.len()) - 1
    }

    /// `bits` as a record's verdicts.
    pub(super) fn verdicts(&self, bits: u32) -> SloVerdicts {
        let met: Vec<(String, bool)> = self
            .labels
            .iter()
            .enumerate()
            .map(|(i, l)| (l.clone(), bits & (1 << i) != 0))
            .collect();
        SloVerdicts {
            all: met.iter().all(|(_, ok)| *ok),
            met,
        }
    }

    /// The section, for `arrived` requests over `duration_s`.
    pub(super) fn report(&self, arrived: u64, duration_s: f64) -> SloReport {
        let share = |n: u64| {
            if arrived == 0 {
                0.0
            } else {
                super::units::round6(n as f64 / arrived as f64)
            }
        };
        let targets: Vec<SloTargetReport> = self
            .spec
            .targets
            .iter()
            .zip(&self.met)
            .zip(&self.labels)
            .map(|((t, &met), label)| SloTargetReport {
                target: label.clone(),
                bound_ms: t.bound_ms,
                met_requests: met,
                attainment: share(met),
                holds: t.holds(met, arrived),
            })
            .collect();
        SloReport {
            spec: self.spec.to_string(),
            holds: targets.iter().all(|t| t.holds),
            targets,
            met_all_requests: self.all,
            attainment_all: share(self.all),
            goodput_rps: per_s(self.good_completed, duration_s),
            goodput_output_tok_s: per_s(self.good_output_tokens, duration_s),
        }
    }
}

fn per_s(n: u64, duration_s: f64) -> f64 {
    if duration_s > 0.0 {
        round3(n as f64 / duration_s)
    } else {
        0.0
    }
}

/// One target's figures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SloTargetReport {
    /// `ttft:p90`.
    pub target: String,
    /// Its bound, ms.
    pub bound_ms: f64,
    /// Requests that met it.
    pub met_requests: u64,
    /// Their share of the requests that arrived.
    pub attainment: f64,
    /// Whether the share reached the percentile.
    pub holds: bool,
}

/// SLO attainment and goodput (with `--slo`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SloReport {
    /// The targets as `--slo` reads them (bounds in ms).
    pub spec: String,
    /// Every target held at its percentile.
    pub holds: bool,
    /// Each target.
    pub targets: Vec<SloTargetReport>,
    /// Requests that met every target.
    pub met_all_requests: u64,
    /// Their share of the requests that arrived.
    pub attainment_all: f64,
    /// Completed requests meeting every target per simulated second.
    pub goodput_rps: f64,
    /// Their output tokens per simulated second.
    pub goodput_output_tok_s: f64,
}

/// GPUs, per-GPU and per-user throughput and cost (with `--slo` or
/// `--gpu-hour-usd`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SizingReport {
    /// GPUs the deployment occupies.
    pub gpus: u64,
    /// GPUs per data-parallel rank of a worker (its TP; a prefill worker's
    /// when the decode pool has its own).
    pub gpus_per_rank: u32,
    /// GPUs per rank of a decode worker, when its TP is not
    /// [`SizingReport::gpus_per_rank`] (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_gpus_per_rank: Option<u32>,
    /// Output tokens per second per GPU (AIConfigurator's `tokens/s/gpu`).
    pub output_tok_s_per_gpu: f64,
    /// `1000 / mean TPOT` (AIConfigurator's `tokens/s/user`); 0 without
    /// a TPOT.
    pub output_tok_s_per_user: f64,
    /// Goodput output tokens per second per GPU (with `--slo`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goodput_tok_s_per_gpu: Option<f64>,
    /// `--gpu-hour-usd`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_hour_usd: Option<f64>,
    /// What a million output tokens cost at that price (absent without a
    /// price or without output).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usd_per_million_output_tokens: Option<f64>,
    /// What a million output tokens of requests meeting every target cost
    /// (with `--slo` and a price, and some goodput).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usd_per_million_good_tokens: Option<f64>,
}

/// The sizing section of a run of `schedulers` rank schedulers, `decode`
/// of them decode ranks, that produced `output_tok_s` at mean TPOT
/// `mean_tpot_ms`, given `slo`'s goodput if judged.
pub(super) fn sizing_report(
    sizing: &ReportSizing,
    (schedulers, decode): (u64, u64),
    output_tok_s: f64,
    mean_tpot_ms: f64,
    slo: Option<&SloReport>,
) -> SizingReport {
    let gpus = sizing.gpus(schedulers, decode);
    let per_gpu = |x: f64| {
        if gpus == 0 {
            0.0
        } else {
            round3(x / gpus as f64)
        }
    };
    // USD per million tokens at `tok_s` tokens per second.
    let cost = |tok_s: f64| {
        sizing
            .gpu_hour_usd
            .filter(|_| tok_s > 0.0)
            .map(|p| round3(gpus as f64 * p / 3600.0 / tok_s * 1e6))
    };
    SizingReport {
        gpus,
        gpus_per_rank: sizing.gpus_per_rank,
        decode_gpus_per_rank: sizing.decode_gpus_per_rank,
        output_tok_s_per_gpu: per_gpu(output_tok_s),
        output_tok_s_per_user: if mean_tpot_ms > 0.0 {
            round3(1000.0 / mean_tpot_ms)
        } else {
            0.0
        },
        goodput_tok_s_per_gpu: slo.map(|s| per_gpu(s.goodput_output_tok_s)),
        gpu_hour_usd: sizing.gpu_hour_usd,
        usd_per_million_output_tokens: cost(output_tok_s),
        usd_per_million_good_tokens: slo.and_then(|s| cost(s.goodput_output_tok_s)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ttft: f64, tpot: f64, e2e: f64) -> SloSample {
        SloSample {
            ttft_ms: Some(ttft),
            tpot_ms: Some(tpot),
            e2e_ms: Some(e2e),
        }
    }

    #[test]
    fn attainment_and_goodput_arithmetic() {
        let spec: SloSpec = "ttft:p75=100ms,tpot:p50=10ms".parse().unwrap();
        let mut t = SloTracker::new(&spec);
        // Meets both, meets ttft only, meets tpot only, failed (meets none
        // whatever its TTFT).
        assert_eq!(t.judge(&sample(100.0, 10.0, 1.0), true, 7), 0b11);
        assert_eq!(t.judge(&sample(50.0, 10.5, 1.0), true, 5), 0b01);
        assert_eq!(t.judge(&sample(150.0, 1.0, 1.0), true, 3), 0b10);
        assert_eq!(t.judge(&sample(1.0, 1.0, 1.0), false, 0), 0);
        let r = t.report(4, 2.0);
        assert_eq!(r.targets[0].met_requests, 2);
        assert_eq!(r.targets[0].attainment, 0.5);
        assert!(!r.targets[0].holds, "2 of 4 is under p75");
        assert_eq!(r.targets[1].met_requests, 2);
        assert!(r.targets[1].holds, "2 of 4 reaches p50");
        assert!(!r.holds);
        assert_eq!(r.met_all_requests, 1);
        assert_eq!(r.attainment_all, 0.25);
        assert_eq!(r.goodput_rps, 0.5);
        assert_eq!(r.goodput_output_tok_s, 3.5);
        let v = t.verdicts(0b01);
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"ttft:p75":true,"tpot:p50":false,"all":false}"#
        );
    }

    #[test]
    fn a_request_missing_a_value_misses_its_target() {
        let spec: SloSpec = "e2e:p50=1s".parse().unwrap();
        let mut t = SloTracker::new(&spec);
        assert_eq!(t.judge(&SloSample::default(), true, 1), 0);
        assert_eq!(t.report(1, 1.0).met_all_requests, 0);
        assert_eq!(t.report(0, 0.0).attainment_all, 0.0);
    }

    #[test]
    fn sizing_and_cost() {
        let spec: SloSpec = "ttft:p90=1s".parse().unwrap();
        let sizing = ReportSizing {
            slo: Some(spec.clone()),
            gpus_per_rank: 2,
            decode_gpus_per_rank: None,
            gpu_hour_usd: Some(3.6),
        };
        let mut t = SloTracker::new(&spec);
        t.judge(&sample(1.0, 1.0, 1.0), true, 500);
        let slo = t.report(2, 1.0);
        // 4 ranks of TP2: 8 GPUs; 1000 output tok/s; mean TPOT 20 ms.
        let s = sizing_report(&sizing, (4, 0), 1000.0, 20.0, Some(&slo));
        assert_eq!(s.gpus, 8);
        assert_eq!(s.output_tok_s_per_gpu, 125.0);
        assert_eq!(s.output_tok_s_per_user, 50.0);
        assert_eq!(s.goodput_tok_s_per_gpu, Some(62.5));
        // 8 GPUs at $3.6/h = $0.008/s; 1000 tok/s: $8 per million.
        assert_eq!(s.usd_per_million_output_tokens, Some(8.0));
        assert_eq!(s.usd_per_million_good_tokens, Some(16.0));
        let free = ReportSizing {
            gpu_hour_usd: None,
            ..sizing
        };
        let s = sizing_report(&free, (4, 0), 0.0, 0.0, None);
        assert_eq!(
            (s.usd_per_million_output_tokens, s.output_tok_s_per_user),
            (None, 0.0)
        );
    }

    #[test]
    fn a_decode_pool_at_its_own_tp_counts_its_gpus() {
        let z = ReportSizing {
            slo: None,
            gpus_per_rank: 2,
            decode_gpus_per_rank: Some(4),
            gpu_hour_usd: None,
        };
        // 6 prefill ranks of TP2 and 1 decode rank of TP4: 16 GPUs.
        let s = sizing_report(&z, (7, 1), 1600.0, 10.0, None);
        assert_eq!((s.gpus, s.output_tok_s_per_gpu), (16, 100.0));
        let json = serde_json::to_string(&s).unwrap();
        assert!(
            json.contains(r#""gpus_per_rank":2,"decode_gpus_per_rank":4"#),
            "{json}"
        );
        // Equal TPs: the field is absent, the section as before.
        let same = ReportSizing {
            decode_gpus_per_rank: None,
            ..z
        };
        let json = serde_json::to_string(&sizing_report(&same, (7, 1), 1.0, 1.0, None)).unwrap();
        assert!(!json.contains("decode_gpus_per_rank"), "{json}");
    }
}
