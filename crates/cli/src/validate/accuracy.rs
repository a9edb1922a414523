//! How far a simulated run is from a real one, request by request.
//!
//! Each real request is paired with its replay (the same index); for each
//! latency the pairs give the per-request absolute percentage error (APE,
//! `|sim - real| / real`) summarised as its mean (MAPE) and median, and the
//! signed error of the two distributions' mean, median and p90 (`sim /
//! real − 1`). Percentiles interpolate linearly between order statistics (as
//! numpy's default does), so the figures are comparable with the ones
//! published for other simulators.

use serde::Serialize;

/// The latencies compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Latency {
    /// Arrival to first token.
    Ttft,
    /// Mean time per output token after the first.
    Tpot,
    /// Arrival to last token.
    E2e,
    /// Arrival to first token of the requests the real engine scheduled
    /// at once (queued under [`UNQUEUED_MS`]): the prefill itself, without
    /// the queue in front of it. Only for runs that record scheduling.
    TtftUnqueued,
}

/// A real request scheduled within this long of its arrival did not queue.
pub const UNQUEUED_MS: f64 = 1.0;

impl Latency {
    /// Every latency, in report order.
    pub const ALL: [Latency; 4] = [
        Latency::Ttft,
        Latency::Tpot,
        Latency::E2e,
        Latency::TtftUnqueued,
    ];

    /// As the report prints it.
    pub fn label(self) -> &'static str {
        match self {
            Latency::Ttft => "TTFT",
            Latency::Tpot => "TPOT",
            Latency::E2e => "E2E",
            Latency::TtftUnqueued => "TTFT, not queued",
        }
    }
}

/// One request's latency, real and simulated, in ms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pair {
    /// Measured.
    pub real: f64,
    /// Replayed.
    pub sim: f64,
}

/// The error of one latency over a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Error {
    /// Which latency.
    pub latency: Latency,
    /// Pairs compared (requests with both values and a positive real one).
    pub n: usize,
    /// Mean absolute percentage error, %.
    pub mape: f64,
    /// Median absolute percentage error, %.
    pub median_ape: f64,
    /// Real and simulated means (ms) and the signed error of the
    /// simulated one, %.
    pub mean: Signed,
    /// The same for the medians.
    pub median: Signed,
    /// The same for the 90th percentiles.
    pub p90: Signed,
}

/// A statistic of the real and the simulated distribution.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Signed {
    /// Of the real values, ms.
    pub real: f64,
    /// Of the simulated values, ms.
    pub sim: f64,
    /// `(sim / real - 1)`, %.
    pub error: f64,
}

impl Error {
    /// The error of `latency` over `pairs`; pairs whose real value is not
    /// positive (a request that emitted one token has no TPOT) are left
    /// out. `None` when no pair is left.
    pub fn of(latency: Latency, pairs: &[Pair]) -> Option<Error> {
        let kept: Vec<Pair> = pairs
            .iter()
            .copied()
            .filter(|p| p.real > 0.0 && p.real.is_finite() && p.sim.is_finite())
            .collect();
        if kept.is_empty() {
            return None;
        }
        let mut ape: Vec<f64> = kept
            .iter()
            .map(|p| 100.0 * (p.sim - p.real).abs() / p.real)
            .collect();
        let mut real: Vec<f64> = kept.iter().map(|p| p.real).collect();
        let mut sim: Vec<f64> = kept.iter().map(|p| p.sim).collect();
        let mape = mean(&ape);
        for v in [&mut ape, &mut real, &mut sim] {
            v.sort_by(f64::total_cmp);
        }
        Some(Error {
            latency,
            n: kept.len(),
            mape,
            median_ape: percentile(&ape, 50.0),
            mean: Signed::new(mean(&real), mean(&sim)),
            median: Signed::new(percentile(&real, 50.0), percentile(&sim, 50.0)),
            p90: Signed::new(percentile(&real, 90.0), percentile(&sim, 90.0)),
        })
    }
}

impl Signed {
    fn new(real: f64, sim: f64) -> Signed {
        let error = if real > 0.0 {
            100.0 * (sim / real - 1.0)
        } else {
            0.0
        };
        Signed { real, sim, error }
    }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// The `q`th percentile of `sorted` (ascending, not empty), interpolated
/// linearly between the order statistics around rank `q/100 · (n - 1)`.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    let rank = q / 100.0 * (sorted.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    let frac = rank - lo as f64;
    sorted[lo] + (sorted[hi] - sorted[lo]) * frac
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(v: &[(f64, f64)]) -> Vec<Pair> {
        v.iter().map(|&(real, sim)| Pair { real, sim }).collect()
    }

    #[test]
    fn percentiles_interpolate_like_numpy() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 50.0), 2.5);
        assert_eq!(percentile(&v, 90.0), 3.7);
        assert_eq!(percentile(&[7.0], 90.0), 7.0);
    }

    #[test]
    fn errors_are_per_request_and_of_the_distributions() {
        // Per request 10%, 10%, 50%: MAPE 23.3, median 10; the means
        // 200 → 246.7 (+23.3%).
        let e = Error::of(
            Latency::E2e,
            &pairs(&[(100.0, 110.0), (200.0, 180.0), (300.0, 450.0)]),
        )
        .unwrap();
        assert_eq!(e.n, 3);
        assert!((e.mape - 70.0 / 3.0).abs() < 1e-9);
        assert!((e.median_ape - 10.0).abs() < 1e-9);
        assert!((e.mean.error - 70.0 / 3.0).abs() < 1e-9);
        assert_eq!(e.median.real, 200.0);
        assert_eq!(e.median.sim, 180.0);
    }

    #[test]
    fn a_shuffled_simulation_has_no_distribution_error_but_a_per_request_one() {
        let e = Error::of(Latency::Ttft, &pairs(&[(1.0, 2.0), (2.0, 1.0)])).unwrap();
        assert_eq!(e.mean.error, 0.0);
        assert_eq!(e.p90.error, 0.0);
        assert!(e.mape > 50.0);
    }

    #[test]
    fn pairs_without_a_positive_real_value_are_left_out() {
        assert!(Error::of(Latency::Tpot, &pairs(&[(0.0, 3.0)])).is_none());
        let e = Error::of(Latency::Tpot, &pairs(&[(0.0, 3.0), (2.0, 2.0)])).unwrap();
        assert_eq!(e.n, 1);
        assert_eq!(e.mape, 0.0);
    }
}
