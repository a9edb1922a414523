//! Latency statistics: exact percentiles over per-request values, and a
//! log-linear histogram for per-token values (inter-token latency), whose
//! count follows tokens and must not be sorted.
//!
//! Percentiles follow Dynamo's replay report (`lib/mocker` trace collector):
//! the `p`-th percentile of `n` sorted values is the value at index
//! `round((n - 1) · p / 100)` (the "rounded rank"). Here it is taken over
//! the exact values (Dynamo's newer collectors approximate it with a
//! DDSketch at 0.1% relative error); the standard deviation is the
//! population one, as Dynamo's. Every figure is rounded to 0.001 ms so a
//! report's bytes do not depend on summation order noise.

use serde::Serialize;

/// Index of the `p`-th percentile (0..=100) among `n >= 1` sorted values:
/// Dynamo's rounded rank.
pub fn percentile_rank(n: usize, p: f64) -> usize {
    debug_assert!(n > 0);
    (((n - 1) as f64 * p / 100.0).round() as usize).min(n - 1)
}

/// The full distribution of one metric, as Dynamo's report flattens it
/// (`mean_X_ms`, `min_X_ms`, `max_X_ms`, `median_X_ms`, `p75_X_ms`,
/// `p90_X_ms`, `p95_X_ms`, `p99_X_ms`, `std_X_ms`), in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Distribution {
    /// Arithmetic mean.
    pub mean: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// 50th percentile.
    pub median: f64,
    /// 75th percentile.
    pub p75: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Population standard deviation.
    pub std: f64,
}

impl Distribution {
    /// Exact distribution of `values` (sorted in place); all zero when empty.
    pub fn exact(values: &mut [f64]) -> Distribution {
        if values.is_empty() {
            return Distribution::default();
        }
        values.sort_by(|a, b| a.total_cmp(b));
        let n = values.len();
        let at = |p: f64| values[percentile_rank(n, p)];
        let mean = values.iter().sum::<f64>() / n as f64;
        let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
        Distribution {
            mean: round3(mean),
            min: round3(values[0]),
            max: round3(values[n - 1]),
            median: round3(at(50.0)),
            p75: round3(at(75.0)),
            p90: round3(at(90.0)),
            p95: round3(at(95.0)),
            p99: round3(at(99.0)),
            std: round3(var.sqrt()),
        }
    }

    /// The five figures the nested report sections keep.
    pub fn summary(&self) -> Summary {
        Summary {
            mean: self.mean,
            p50: self.median,
            p90: self.p90,
            p99: self.p99,
            max: self.max,
        }
    }
}

/// mean / p50 / p90 / p99 / max of one metric, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Arithmetic mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

impl Summary {
    /// Exact summary of `values` (sorted in place); percentiles by the
    /// rounded rank (see the module docs).
    pub fn exact(values: &mut [f64]) -> Summary {
        Distribution::exact(values).summary()
    }
}

/// Log-linear histogram over nanoseconds: 64 sub-buckets per power of two,
/// so a reported percentile is within ~1.6% of the true value.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    sum_ns: f64,
    sum_sq_ms: f64,
    min_ns: u64,
    max_ns: u64,
}

const SUB: u32 = 64;

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; (64 * SUB) as usize],
            total: 0,
            sum_ns: 0.0,
            sum_sq_ms: 0.0,
            min_ns: u64::MAX,
            max_ns: 0,
        }
    }
}

impl Histogram {
    fn index(ns: u64) -> usize {
        if ns < u64::from(SUB) {
            return ns as usize;
        }
        let exp = 63 - ns.leading_zeros(); // >= 6
        let shift = exp - SUB.trailing_zeros();
        let sub = (ns >> shift) as u32 - SUB;
        ((exp - SUB.trailing_zeros() + 1) * SUB + sub) as usize
    }

    fn lower(idx: usize) -> u64 {
        let idx = idx as u32;
        if idx < SUB {
            return u64::from(idx);
        }
        let group = idx / SUB - 1;
        let sub = idx % SUB;
        u64::from(SUB + sub) << group
    }

    /// Records `n` values of `ns` nanoseconds.
    pub fn record_n(&mut self, ns: u64, n: u64) {
        if n == 0 {
            return;
        }
        let i = Self::index(ns).min(self.counts.len() - 1);
        self.counts[i] += n;
        self.total += n;
        self.sum_ns += ns as f64 * n as f64;
        let ms = ns as f64 / 1e6;
        self.sum_sq_ms += ms * ms * n as f64;
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The `p`-th percentile (0..=100) by the rounded rank, as the lower
    /// edge of its bucket (clamped to the values seen).
    fn quantile_ns(&self, p: f64) -> u64 {
        let rank = percentile_rank(self.total.max(1) as usize, p) as u64;
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen > rank {
                return Self::lower(i).clamp(self.min_ns, self.max_ns);
            }
        }
        self.max_ns
    }

    /// The distribution in milliseconds (percentiles within ~1.6%; mean,
    /// min, max and standard deviation exact).
    pub fn distribution(&self) -> Distribution {
        if self.total == 0 {
            return Distribution::default();
        }
        let ms = |ns: u64| round3(ns as f64 / 1e6);
        let n = self.total as f64;
        let mean = self.sum_ns / n / 1e6;
        let var = (self.sum_sq_ms / n - mean * mean).max(0.0);
        Distribution {
            mean: round3(mean),
            min: ms(self.min_ns),
            max: ms(self.max_ns),
            median: ms(self.quantile_ns(50.0)),
            p75: ms(self.quantile_ns(75.0)),
            p90: ms(self.quantile_ns(90.0)),
            p95: ms(self.quantile_ns(95.0)),
            p99: ms(self.quantile_ns(99.0)),
            std: round3(var.sqrt()),
        }
    }

    /// The summary in milliseconds.
    pub fn summary(&self) -> Summary {
        self.distribution().summary()
    }

    /// Up to `points` (value in ms, fraction of values at or below it)
    /// pairs of the cumulative distribution, at bucket upper edges.
    pub fn cdf(&self, points: usize) -> Vec<(f64, f64)> {
        let mut out = Vec::new();
        if self.total == 0 {
            return out;
        }
        let used: Vec<(usize, u64)> = self
            .counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| (i, *c))
            .collect();
        let step = used.len().div_ceil(points.max(1)).max(1);
        let mut seen = 0u64;
        for (k, (i, c)) in used.iter().enumerate() {
            seen += c;
            if (k + 1) % step == 0 || k + 1 == used.len() {
                // The bucket's upper edge: every value counted so far is at
                // or below it.
                let upper = Self::lower(i + 1).saturating_sub(1);
                let v = upper.clamp(self.min_ns, self.max_ns) as f64 / 1e6;
                out.push((v, seen as f64 / self.total as f64));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_percentiles() {
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = Summary::exact(&mut v);
        // Dynamo's rounded rank: index round(99 · p) of 1..=100.
        assert_eq!((s.p50, s.p90, s.p99, s.max), (51.0, 90.0, 99.0, 100.0));
        assert_eq!(s.mean, 50.5);
        let d = Distribution::exact(&mut v);
        assert_eq!((d.min, d.median, d.p75, d.p95), (1.0, 51.0, 75.0, 95.0));
        // Population standard deviation of 1..=100: sqrt((100² - 1) / 12).
        assert_eq!(d.std, 28.866);
        let mut one = vec![7.0];
        let d = Distribution::exact(&mut one);
        assert_eq!((d.median, d.p99, d.std), (7.0, 7.0, 0.0));
    }

    #[test]
    fn histogram_within_two_percent() {
        let mut h = Histogram::default();
        for i in 1..=10_000u64 {
            h.record_n(i * 1000, 1);
        }
        let s = h.summary();
        let d = h.distribution();
        assert_eq!(d.min, 0.001);
        assert!((d.std - 2.8867).abs() < 0.01, "{d:?}");
        let cdf = h.cdf(50);
        assert!(
            cdf.len() <= 50 && cdf.last() == Some(&(10.0, 1.0)),
            "{cdf:?}"
        );
        assert!((s.p50 - 5.0).abs() / 5.0 < 0.02, "{s:?}");
        assert!((s.p99 - 9.9).abs() / 9.9 < 0.02, "{s:?}");
        assert_eq!(s.max, 10.0);
        for ns in [0u64, 1, 63, 64, 65, 1 << 20, u64::MAX / 2] {
            assert!(Histogram::lower(Histogram::index(ns)) <= ns);
        }
    }
}
