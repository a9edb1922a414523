//! The workloads a plan generates: fixed prompt and output lengths,
//! Poisson arrivals ([`handoff_workload::SyntheticWorkload`]), written as
//! Mooncake JSONL for every layout to replay.

use handoff_deployment::{SloMetric, SloSpec};
use handoff_serving::report::STEADY_LIFETIMES;
use handoff_workload::{LengthDist, SyntheticConfig, SyntheticWorkload};
use std::path::Path;

/// Requests of a generated workload at least (and the most a plan
/// generated before it sized itself).
pub const DEFAULT_REQUESTS: u64 = 2000;
/// The most requests [`steady_requests`] asks for.
pub const MAX_STEADY_REQUESTS: u64 = 100_000;
/// Time per output token assumed when the SLO bounds neither TPOT nor
/// E2E, ms.
pub const FALLBACK_TPOT_MS: f64 = 50.0;

/// The longest median request lifetime (e2e, ms) of a layout that holds
/// `slo` with outputs of `osl` tokens: its TTFT bound plus `osl − 1` times
/// its TPOT bound ([`FALLBACK_TPOT_MS`] without one), or its E2E bound if
/// lower. Only targets at p50 or above bound the median; without a TTFT
/// target that term is 0.
pub fn slo_lifetime_ms(slo: &SloSpec, osl: u32) -> f64 {
    let bound = |m: SloMetric| {
        slo.targets
            .iter()
            .filter(|t| t.metric == m && t.percentile >= 50.0)
            .map(|t| t.bound_ms)
            .reduce(f64::min)
    };
    let tokens = f64::from(osl.saturating_sub(1));
    let per_token = bound(SloMetric::Ttft).unwrap_or(0.0)
        + tokens * bound(SloMetric::Tpot).unwrap_or(FALLBACK_TPOT_MS);
    bound(SloMetric::E2e).map_or(per_token, |e| e.min(per_token))
}

/// Requests a generated workload needs at `rate` per second for every
/// layout that holds `slo` to reach steady state as the report judges it
/// (`handoff_serving::report::RunWarning::NotSteady`): arrivals spanning
/// [`STEADY_LIFETIMES`] × [`slo_lifetime_ms`], so `rate × 3 × lifetime`
/// requests, within [`DEFAULT_REQUESTS`]..=[`MAX_STEADY_REQUESTS`]. A
/// layout that misses the SLO may still warn; the report says so.
pub fn steady_requests(slo: &SloSpec, osl: u32, rate: f64) -> u64 {
    let need = rate * STEADY_LIFETIMES * slo_lifetime_ms(slo, osl) / 1e3;
    if !need.is_finite() {
        return MAX_STEADY_REQUESTS;
    }
    (need.ceil().max(0.0) as u64 + 1).clamp(DEFAULT_REQUESTS, MAX_STEADY_REQUESTS)
}

/// The longest prompt or output, and the most requests, generated.
pub const MAX_TOKENS: u32 = 1_000_000;
/// The most requests generated.
pub const MAX_REQUESTS: u64 = 1_000_000;

/// The shape of a generated workload: fixed lengths, Poisson arrivals.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WorkloadShape {
    /// Prompt tokens.
    pub isl: u32,
    /// Output tokens.
    pub osl: u32,
    /// Requests.
    pub requests: u64,
    /// Arrivals per second.
    pub rate: f64,
    /// Shared-prefix groups (0: none).
    pub prefix_groups: u32,
}

/// Why a workload was not generated.
#[derive(Clone, Debug, PartialEq)]
pub enum WorkloadError {
    /// A length outside `1..=`[`MAX_TOKENS`].
    Lengths,
    /// A request count outside `1..=`[`MAX_REQUESTS`].
    Requests,
    /// A rate that is not a positive number.
    Rate,
    /// Its file could not be written.
    Io {
        /// The file or folder.
        path: String,
        /// The system's reason.
        why: String,
    },
}

impl std::fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkloadError::Lengths => {
                write!(f, "plan: --isl and --osl must be 1..={MAX_TOKENS} tokens")
            }
            WorkloadError::Requests => write!(f, "plan: --requests must be 1..={MAX_REQUESTS}"),
            WorkloadError::Rate => write!(f, "plan: --rate must be a positive number"),
            WorkloadError::Io { path, why } => write!(f, "{path}: {why}"),
        }
    }
}

impl std::error::Error for WorkloadError {}

impl WorkloadShape {
    /// Whether every field is in range.
    pub fn check(&self) -> Result<(), WorkloadError> {
        if !(1..=MAX_TOKENS).contains(&self.isl) || !(1..=MAX_TOKENS).contains(&self.osl) {
            return Err(WorkloadError::Lengths);
        }
        if !(1..=MAX_REQUESTS).contains(&self.requests) {
            return Err(WorkloadError::Requests);
        }
        if !(self.rate.is_finite() && self.rate > 0.0) {
            return Err(WorkloadError::Rate);
        }
        Ok(())
    }
}

/// Writes the workload `w` describes to `path` as Mooncake JSONL; the path
/// as a flag takes it.
pub fn write_workload(path: &Path, w: WorkloadShape) -> Result<String, WorkloadError> {
    w.check()?;
    let io = |p: &Path, e: std::io::Error| WorkloadError::Io {
        path: p.display().to_string(),
        why: e.to_string(),
    };
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| io(d, e))?;
    }
    let items = SyntheticWorkload::new(SyntheticConfig {
        requests: w.requests,
        rate_per_sec: w.rate,
        input_tokens: LengthDist::Fixed(w.isl),
        output_tokens: LengthDist::Fixed(w.osl),
        prefix_groups: w.prefix_groups,
        ..SyntheticConfig::default()
    });
    let f = std::fs::File::create(path).map_err(|e| io(path, e))?;
    let mut out = handoff_workload::TraceWriter::new(std::io::BufWriter::new(f));
    for item in items {
        out.write(&item).map_err(|e| io(path, e))?;
    }
    out.into_inner().map_err(|e| io(path, e))?;
    Ok(path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> WorkloadShape {
        WorkloadShape {
            isl: 100,
            osl: 10,
            requests: 5,
            rate: 2.0,
            prefix_groups: 0,
        }
    }

    #[test]
    fn out_of_range_shapes_are_refused_with_the_flag() {
        let bad = |f: fn(&mut WorkloadShape)| {
            let mut s = shape();
            f(&mut s);
            s.check().unwrap_err()
        };
        assert_eq!(bad(|s| s.isl = 0), WorkloadError::Lengths);
        assert_eq!(bad(|s| s.osl = MAX_TOKENS + 1), WorkloadError::Lengths);
        assert_eq!(bad(|s| s.requests = 0), WorkloadError::Requests);
        assert_eq!(bad(|s| s.rate = f64::NAN), WorkloadError::Rate);
        assert_eq!(bad(|s| s.rate = 0.0), WorkloadError::Rate);
        assert!(WorkloadError::Requests.to_string().contains("--requests"));
        assert_eq!(shape().check(), Ok(()));
    }

    #[test]
    fn requests_cover_three_slo_lifetimes_of_arrivals() {
        let slo: SloSpec = "ttft:p90=600ms,tpot:p90=20ms".parse().unwrap();
        // 600 + 999 × 20 ms = 20.58 s; at 100/s, 3 × 20.58 s of arrivals.
        assert_eq!(slo_lifetime_ms(&slo, 1000), 20_580.0);
        assert_eq!(steady_requests(&slo, 1000, 100.0), 6175);
        // A light load keeps the default.
        assert_eq!(steady_requests(&slo, 1000, 16.0), DEFAULT_REQUESTS);
        // A lower E2E bound wins; a p10 target bounds no median.
        let e2e: SloSpec = "tpot:p90=20ms,e2e:p50=5s,ttft:p10=1ms".parse().unwrap();
        assert_eq!(slo_lifetime_ms(&e2e, 1000), 5000.0);
        let ttft_only: SloSpec = "ttft:p90=1s".parse().unwrap();
        assert_eq!(
            slo_lifetime_ms(&ttft_only, 11),
            1000.0 + 10.0 * FALLBACK_TPOT_MS
        );
        assert_eq!(steady_requests(&slo, 1000, 1e9), MAX_STEADY_REQUESTS);
    }

    #[test]
    fn writes_one_line_per_request() {
        let dir = std::env::temp_dir().join(format!("handoff-plan-wl-{}", std::process::id()));
        let path = dir.join("w.jsonl");
        assert_eq!(
            write_workload(&path, shape()).unwrap(),
            path.display().to_string()
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 5);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
