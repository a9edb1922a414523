//! [`Samples`]: one per-request latency series of the recorder.

use super::details::cdf;
use crate::metrics::{Distribution, Histogram, Summary};

/// The values of one per-request latency (TTFT, E2E, a handoff phase, …)
/// in milliseconds: every one kept, so the report's percentiles are exact
/// (the default), or folded into a [`Histogram`] over nanoseconds, whose
/// memory does not grow with the number of requests (a server that runs
/// indefinitely, [`super::Recorder::fold_latencies`]). Folded, the mean,
/// min, max and standard deviation stay exact to the nanosecond and a
/// percentile is within [`crate::metrics::ITL_MAX_RELATIVE_ERROR`].
#[derive(Clone, Debug)]
pub(super) enum Samples {
    /// Every value, sorted in place when read.
    Exact(Vec<f64>),
    /// Folded into a histogram.
    Folded(Box<Histogram>),
}

impl Default for Samples {
    fn default() -> Self {
        Samples::Exact(Vec::new())
    }
}

/// `ms` in whole nanoseconds (latencies are never negative; a NaN or a
/// value past `u64` saturates, as `as` does).
fn ns(ms: f64) -> u64 {
    (ms * 1e6).round() as u64
}

impl Samples {
    /// Adds one value, in ms.
    #[inline]
    pub(super) fn push(&mut self, ms: f64) {
        match self {
            Samples::Exact(v) => v.push(ms),
            Samples::Folded(h) => h.record_n(ns(ms), 1),
        }
    }

    /// The same values folded into a histogram.
    pub(super) fn fold(&mut self) {
        if let Samples::Exact(v) = self {
            let mut h = Box::<Histogram>::default();
            for x in v.iter() {
                h.record_n(ns(*x), 1);
            }
            *self = Samples::Folded(h);
        }
    }

    /// Their distribution (sorts exact values in place).
    pub(super) fn distribution(&mut self) -> Distribution {
        match self {
            Samples::Exact(v) => Distribution::exact(v),
            Samples::Folded(h) => h.distribution(),
        }
    }

    /// Their summary (sorts exact values in place).
    pub(super) fn summary(&mut self) -> Summary {
        self.distribution().summary()
    }

    /// Up to `points` CDF points; exact values must be sorted already
    /// ([`Self::distribution`] does).
    pub(super) fn cdf(&self, points: usize) -> Vec<(f64, f64)> {
        match self {
            Samples::Exact(v) => cdf(v, points),
            Samples::Folded(h) => h.cdf(points),
        }
    }

    /// Whether values are folded.
    pub(super) fn is_folded(&self) -> bool {
        matches!(self, Samples::Folded(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folded_matches_exact_within_the_histogram_precision() {
        let values: Vec<f64> = (1..=1000).map(|i| f64::from(i) * 0.37).collect();
        let (mut exact, mut folded, mut late) =
            (Samples::default(), Samples::default(), Samples::default());
        folded.fold();
        for (i, v) in values.iter().enumerate() {
            exact.push(*v);
            folded.push(*v);
            late.push(*v);
            if i == 500 {
                late.fold();
            }
        }
        assert!(folded.is_folded() && late.is_folded() && !exact.is_folded());
        let (e, f) = (exact.distribution(), folded.distribution());
        assert_eq!(f, late.distribution());
        assert_eq!((e.mean, e.min, e.max), (f.mean, f.min, f.max));
        for (a, b) in [(e.median, f.median), (e.p90, f.p90), (e.p99, f.p99)] {
            assert!((a - b).abs() <= a / 1024.0 + 0.001, "{a} vs {b}");
        }
        assert!((e.std - f.std).abs() < 0.01, "{} vs {}", e.std, f.std);
    }
}
