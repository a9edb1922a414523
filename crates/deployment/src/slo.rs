//! Service-level objectives and what a report needs to size a deployment:
//! the `--slo` grammar, its typed errors, and [`ReportSizing`] (the
//! targets, GPUs per worker and a GPU-hour price), which a driver hands the
//! recorder through [`crate::DeploymentConfig::sizing`].
//!
//! A target is a latency bound at a percentile: `ttft:p90=600ms` holds when
//! at least 90 % of the requests that arrived had a time to first token of
//! at most 600 ms. A request meets a target when its own value is at most
//! the bound, as in vLLM's goodput (`vllm/benchmarks/serve.py`,
//! `calculate_metrics`: a request is good when every metric is `<=` its
//! SLO; TPOT of a one-token request counts as 0).

use std::fmt;
use std::str::FromStr;

/// The latency a target bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SloMetric {
    /// Time to first token.
    Ttft,
    /// Time per output token after the first, per request (vLLM's TPOT;
    /// `itl` is accepted for it: a request's mean inter-token latency).
    Tpot,
    /// Arrival to the last token (vLLM's `e2el`).
    E2e,
}

impl SloMetric {
    /// The metric's name in `--slo`.
    pub fn name(self) -> &'static str {
        match self {
            SloMetric::Ttft => "ttft",
            SloMetric::Tpot => "tpot",
            SloMetric::E2e => "e2e",
        }
    }

    fn parse(s: &str) -> Option<SloMetric> {
        match s {
            "ttft" => Some(SloMetric::Ttft),
            "tpot" | "itl" => Some(SloMetric::Tpot),
            "e2e" | "e2el" => Some(SloMetric::E2e),
            _ => None,
        }
    }
}

/// One target: `metric` at most `bound_ms` for at least `percentile` % of
/// the requests.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SloTarget {
    /// What is bounded.
    pub metric: SloMetric,
    /// Share of requests, in percent, `(0, 100]`.
    pub percentile: f64,
    /// The bound, ms, finite and positive, at most [`MAX_BOUND_MS`].
    pub bound_ms: f64,
}

/// The largest bound a target may name: one day.
pub const MAX_BOUND_MS: f64 = 86_400_000.0;

/// Targets a `--slo` may hold at most.
pub const MAX_TARGETS: usize = 8;

impl SloTarget {
    /// The target's label, `ttft:p90` (one per metric and percentile).
    pub fn label(&self) -> String {
        format!("{}:p{}", self.metric.name(), self.percentile)
    }

    /// Whether a request whose value of this metric is `value_ms` meets it
    /// (a value the request never reached, `None`, does not).
    pub fn met_by(&self, value_ms: Option<f64>) -> bool {
        value_ms.is_some_and(|v| v <= self.bound_ms)
    }

    /// Whether `met` of `of` requests is at least the percentile (no
    /// request: not held).
    pub fn holds(&self, met: u64, of: u64) -> bool {
        of > 0 && (met as f64) * 100.0 >= self.percentile * of as f64
    }
}

impl fmt::Display for SloTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}ms", self.label(), self.bound_ms)
    }
}

/// A parsed `--slo`: one or more targets, each (metric, percentile) once.
#[derive(Clone, Debug, PartialEq)]
pub struct SloSpec {
    /// The targets, in the order given.
    pub targets: Vec<SloTarget>,
}

impl fmt::Display for SloSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.targets.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{t}")?;
        }
        Ok(())
    }
}

/// Why a `--slo` was refused; each names the offending part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SloParseError {
    /// No target at all.
    Empty,
    /// More than [`MAX_TARGETS`] targets.
    TooMany {
        /// How many were given.
        count: usize,
    },
    /// A part without `=`.
    MissingBound {
        /// The part.
        part: String,
    },
    /// A metric other than `ttft`, `tpot` (`itl`), `e2e` (`e2el`).
    UnknownMetric {
        /// The part.
        part: String,
    },
    /// No `:pNN` after the metric.
    MissingPercentile {
        /// The part.
        part: String,
    },
    /// A percentile that is not a number in `(0, 100]`.
    BadPercentile {
        /// The part.
        part: String,
    },
    /// A bound that is not a positive number with a unit `us`, `ms` or `s`
    /// at most one day.
    BadBound {
        /// The part.
        part: String,
    },
    /// The same metric and percentile twice.
    Duplicate {
        /// The second part.
        part: String,
    },
}

impl fmt::Display for SloParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SloParseError::Empty => write!(f, "no target (expected e.g. ttft:p90=600ms)"),
            SloParseError::TooMany { count } => {
                write!(f, "{count} targets; at most {MAX_TARGETS}")
            }
            SloParseError::MissingBound { part } => {
                write!(f, "`{part}`: expected METRIC:pNN=BOUND")
            }
            SloParseError::UnknownMetric { part } => {
                write!(f, "`{part}`: the metric must be ttft, tpot (itl) or e2e")
            }
            SloParseError::MissingPercentile { part } => {
                write!(f, "`{part}`: expected :pNN after the metric")
            }
            SloParseError::BadPercentile { part } => {
                write!(f, "`{part}`: the percentile must be a number in (0, 100]")
            }
            SloParseError::BadBound { part } => write!(
                f,
                "`{part}`: the bound must be a positive number with unit us, ms or s, at most 1 day"
            ),
            SloParseError::Duplicate { part } => {
                write!(f, "`{part}`: that metric and percentile came before")
            }
        }
    }
}

impl std::error::Error for SloParseError {}

/// A bound such as `600ms`, `10s`, `250us`, in ms.
fn parse_bound(s: &str) -> Option<f64> {
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix("us") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e3)
    } else {
        return None;
    };
    let v: f64 = num.trim().parse().ok()?;
    let ms = v * scale;
    (v.is_finite() && ms > 0.0 && ms <= MAX_BOUND_MS).then_some(ms)
}

fn parse_target(part: &str) -> Result<SloTarget, SloParseError> {
    let owned = || part.to_string();
    let (lhs, rhs) = part
        .split_once('=')
        .ok_or_else(|| SloParseError::MissingBound { part: owned() })?;
    let (metric, pct) = match lhs.split_once(':') {
        Some((m, p)) => (m.trim(), Some(p.trim())),
        None => (lhs.trim(), None),
    };
    let metric = SloMetric::parse(&metric.to_ascii_lowercase())
        .ok_or_else(|| SloParseError::UnknownMetric { part: owned() })?;
    let pct = pct.ok_or_else(|| SloParseError::MissingPercentile { part: owned() })?;
    let percentile = pct
        .strip_prefix(['p', 'P'])
        .and_then(|p| p.parse::<f64>().ok())
        .filter(|p| p.is_finite() && *p > 0.0 && *p <= 100.0)
        .ok_or_else(|| SloParseError::BadPercentile { part: owned() })?;
    let bound_ms =
        parse_bound(rhs.trim()).ok_or_else(|| SloParseError::BadBound { part: owned() })?;
    Ok(SloTarget {
        metric,
        percentile,
        bound_ms,
    })
}

impl FromStr for SloSpec {
    type Err = SloParseError;

    fn from_str(s: &str) -> Result<SloSpec, SloParseError> {
        let parts: Vec<&str> = s
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .collect();
        if parts.is_empty() {
            return Err(SloParseError::Empty);
        }
        if parts.len() > MAX_TARGETS {
            return Err(SloParseError::TooMany { count: parts.len() });
        }
        let mut targets: Vec<SloTarget> = Vec::with_capacity(parts.len());
        for part in parts {
            let t = parse_target(part)?;
            if targets
                .iter()
                .any(|o| o.metric == t.metric && o.percentile == t.percentile)
            {
                return Err(SloParseError::Duplicate {
                    part: part.to_string(),
                });
            }
            targets.push(t);
        }
        Ok(SloSpec { targets })
    }
}

/// What the report needs to judge and size a run, beyond the deployment:
/// the targets (if any), GPUs per worker and the price of a GPU-hour (if
/// any). With none given ([`crate::DeploymentConfig::sizing`] `None`), the
/// report carries none of the figures.
#[derive(Clone, Debug, PartialEq)]
pub struct ReportSizing {
    /// `--slo`.
    pub slo: Option<SloSpec>,
    /// GPUs one data-parallel rank of a worker occupies (its tensor
    /// parallelism; AIConfigurator's `worker_gpus`, `sdk/picking.py`, is
    /// `tp × pp × dp × cp`, and the deployment's `dp_size` counts ranks).
    pub gpus_per_rank: u32,
    /// GPUs one rank of a decode worker occupies when the decode pool runs
    /// at its own TP (`--decode-tp`); `None`: [`ReportSizing::gpus_per_rank`]
    /// as every other worker.
    pub decode_gpus_per_rank: Option<u32>,
    /// `--gpu-hour-usd`: US dollars per GPU-hour (no default price).
    pub gpu_hour_usd: Option<f64>,
}

impl ReportSizing {
    /// GPUs a deployment of `schedulers` rank schedulers occupies, of
    /// which `decode` are decode ranks: prefill (or aggregated) ranks ×
    /// their TP + decode ranks × theirs (AIConfigurator's
    /// `num_total_gpus`, `sdk/picking.py`, sums the two pools' workers ×
    /// `worker_gpus` so).
    pub fn gpus(&self, schedulers: u64, decode: u64) -> u64 {
        let decode = decode.min(schedulers);
        let decode_tp = self.decode_gpus_per_rank.unwrap_or(self.gpus_per_rank);
        (schedulers - decode)
            .saturating_mul(u64::from(self.gpus_per_rank))
            .saturating_add(decode.saturating_mul(u64::from(decode_tp)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_issue_example_parses() {
        let s: SloSpec = "ttft:p90=600ms,tpot:p90=20ms,e2e:p99=10s".parse().unwrap();
        assert_eq!(s.targets.len(), 3);
        assert_eq!(s.targets[0].metric, SloMetric::Ttft);
        assert_eq!(s.targets[1].bound_ms, 20.0);
        assert_eq!(s.targets[2].bound_ms, 10_000.0);
        assert_eq!(s.targets[2].percentile, 99.0);
        assert_eq!(
            s.to_string(),
            "ttft:p90=600ms,tpot:p90=20ms,e2e:p99=10000ms"
        );
        let us: SloSpec = "itl:p50=500us".parse().unwrap();
        assert_eq!(us.targets[0].metric, SloMetric::Tpot);
        assert_eq!(us.targets[0].bound_ms, 0.5);
    }

    #[test]
    fn errors_name_the_part() {
        let cases = [
            ("", SloParseError::Empty),
            (
                "ttft:p90",
                SloParseError::MissingBound {
                    part: "ttft:p90".into(),
                },
            ),
            (
                "ttfb:p90=1s",
                SloParseError::UnknownMetric {
                    part: "ttfb:p90=1s".into(),
                },
            ),
            (
                "ttft=1s",
                SloParseError::MissingPercentile {
                    part: "ttft=1s".into(),
                },
            ),
            (
                "ttft:p0=1s",
                SloParseError::BadPercentile {
                    part: "ttft:p0=1s".into(),
                },
            ),
            (
                "ttft:p101=1s",
                SloParseError::BadPercentile {
                    part: "ttft:p101=1s".into(),
                },
            ),
            (
                "ttft:90=1s",
                SloParseError::BadPercentile {
                    part: "ttft:90=1s".into(),
                },
            ),
            (
                "ttft:p90=1",
                SloParseError::BadBound {
                    part: "ttft:p90=1".into(),
                },
            ),
            (
                "ttft:p90=-1s",
                SloParseError::BadBound {
                    part: "ttft:p90=-1s".into(),
                },
            ),
            (
                "ttft:p90=2d",
                SloParseError::BadBound {
                    part: "ttft:p90=2d".into(),
                },
            ),
            (
                "ttft:p90=1e12s",
                SloParseError::BadBound {
                    part: "ttft:p90=1e12s".into(),
                },
            ),
            (
                "ttft:p90=1s,ttft:p90=2s",
                SloParseError::Duplicate {
                    part: "ttft:p90=2s".into(),
                },
            ),
        ];
        for (text, want) in cases {
            assert_eq!(text.parse::<SloSpec>(), Err(want), "{text}");
        }
        let e = "ttft:p90=1s,e2e:p99=zz".parse::<SloSpec>().unwrap_err();
        assert!(e.to_string().contains("e2e:p99=zz"), "{e}");
    }

    #[test]
    fn holds_at_the_percentile() {
        let t: SloTarget = "ttft:p90=1s".parse::<SloSpec>().unwrap().targets[0];
        assert!(t.holds(9, 10));
        assert!(!t.holds(8, 10));
        assert!(!t.holds(0, 0));
        assert!(t.met_by(Some(1000.0)) && !t.met_by(Some(1000.001)) && !t.met_by(None));
    }

    proptest! {
        #[test]
        fn never_panics(s in ".{0,80}") {
            let _ = s.parse::<SloSpec>();
        }

        #[test]
        fn display_parses_back(
            picks in proptest::collection::btree_map(
                (0usize..3, 1u32..=1000),
                1u32..=1_000_000,
                1..6,
            )
        ) {
            let metrics = ["ttft", "tpot", "e2e"];
            let text: Vec<String> = picks
                .iter()
                .map(|((m, p), b)| format!("{}:p{}={}ms", metrics[*m], f64::from(*p) / 10.0, b))
                .collect();
            let spec: SloSpec = text.join(",").parse().unwrap();
            prop_assert_eq!(spec.targets.len(), picks.len());
            let again: SloSpec = spec.to_string().parse().unwrap();
            prop_assert_eq!(again, spec);
        }

        #[test]
        fn holds_iff_share_reaches_percentile(met in 0u64..1000, extra in 0u64..1000, p in 1u32..=100) {
            let t = SloTarget { metric: SloMetric::Ttft, percentile: f64::from(p), bound_ms: 1.0 };
            let of = met + extra;
            prop_assert_eq!(t.holds(met, of), of > 0 && met * 100 >= u64::from(p) * of);
        }
    }

    #[test]
    fn gpus_count_each_pool_at_its_tp() {
        let z = ReportSizing {
            slo: None,
            gpus_per_rank: 2,
            decode_gpus_per_rank: None,
            gpu_hour_usd: None,
        };
        // 3 prefill + 2 decode ranks, all TP2.
        assert_eq!(z.gpus(5, 2), 10);
        // 6 prefill TP2 + 1 decode TP4 (the issue's Qwen3-32B pick): 16.
        let hetero = ReportSizing {
            decode_gpus_per_rank: Some(4),
            ..z.clone()
        };
        assert_eq!(hetero.gpus(7, 1), 16);
        // More decode ranks than ranks is clamped, never underflows.
        assert_eq!(hetero.gpus(1, 5), 4);
        assert_eq!(hetero.gpus(u64::MAX, 0), u64::MAX);
    }
}
