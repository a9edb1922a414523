//! Latency statistics: exact percentiles over per-request values, and a
//! log-linear histogram for per-token values (inter-token latency), whose
//! count follows tokens and must not be sorted.

use serde::Serialize;

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
    /// Exact summary of `values` (sorted in place); nearest-rank percentiles.
    pub fn exact(values: &mut [f64]) -> Summary {
        if values.is_empty() {
            return Summary::default();
        }
        values.sort_by(|a, b| a.total_cmp(b));
        let n = values.len();
        let rank = |q: f64| values[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
        let mean = values.iter().sum::<f64>() / n as f64;
        Summary {
            mean: round3(mean),
            p50: round3(rank(0.5)),
            p90: round3(rank(0.9)),
            p99: round3(rank(0.99)),
            max: round3(values[n - 1]),
        }
    }
}

/// Log-linear histogram over nanoseconds: 64 sub-buckets per power of two,
/// so a reported percentile is within ~1.6% of the true value.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    sum_ns: f64,
    max_ns: u64,
}

const SUB: u32 = 64;

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; (64 * SUB) as usize],
            total: 0,
            sum_ns: 0.0,
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
        self.max_ns = self.max_ns.max(ns);
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    fn quantile_ns(&self, q: f64) -> u64 {
        let target = ((q * self.total as f64).ceil() as u64).clamp(1, self.total.max(1));
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= target {
                return Self::lower(i).min(self.max_ns);
            }
        }
        self.max_ns
    }

    /// The summary in milliseconds.
    pub fn summary(&self) -> Summary {
        if self.total == 0 {
            return Summary::default();
        }
        let ms = |ns: u64| round3(ns as f64 / 1e6);
        Summary {
            mean: round3(self.sum_ns / self.total as f64 / 1e6),
            p50: ms(self.quantile_ns(0.5)),
            p90: ms(self.quantile_ns(0.9)),
            p99: ms(self.quantile_ns(0.99)),
            max: ms(self.max_ns),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_percentiles() {
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = Summary::exact(&mut v);
        assert_eq!((s.p50, s.p90, s.p99, s.max), (50.0, 90.0, 99.0, 100.0));
        assert_eq!(s.mean, 50.5);
    }

    #[test]
    fn histogram_within_two_percent() {
        let mut h = Histogram::default();
        for i in 1..=10_000u64 {
            h.record_n(i * 1000, 1);
        }
        let s = h.summary();
        assert!((s.p50 - 5.0).abs() / 5.0 < 0.02, "{s:?}");
        assert!((s.p99 - 9.9).abs() / 9.9 < 0.02, "{s:?}");
        assert_eq!(s.max, 10.0);
        for ns in [0u64, 1, 63, 64, 65, 1 << 20, u64::MAX / 2] {
            assert!(Histogram::lower(Histogram::index(ns)) <= ns);
        }
    }
}
