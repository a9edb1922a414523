//! Latency statistics: exact percentiles over per-request values, and an
//! HdrHistogram for per-token values (inter-token latency), whose count
//! follows tokens and must not be kept value by value. [`Accuracy`] says
//! which is which in the report.
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

/// `x` rounded to 0.001 (every reported millisecond figure).
pub(crate) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

impl Summary {
    /// Exact summary of `values` (sorted in place); percentiles by the
    /// rounded rank (see the module docs).
    pub fn exact(values: &mut [f64]) -> Summary {
        Distribution::exact(values).summary()
    }
}

/// Significant decimal digits the ITL histogram keeps (HdrHistogram's
/// precision): 2,048 sub-buckets per power of two, so a bucket is at most
/// 1/1024 of its values wide.
pub const ITL_SIGNIFICANT_DIGITS: u8 = 3;

/// Largest relative error of an ITL percentile: a percentile is reported
/// as the midpoint of its value's bucket, at most half a bucket (1/2048 of
/// the value) away, before rounding to 0.001 ms.
pub const ITL_MAX_RELATIVE_ERROR: f64 = 1.0 / 2048.0;

/// Longest inter-token latency told apart (2^42 ns, about 73 minutes);
/// longer ones count as this, so the histogram never grows.
const ITL_MAX_NS: u64 = 1 << 42;

/// How the report's latency figures are computed, so a reader knows how
/// far to trust a percentile.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Accuracy {
    /// TTFT, TTST, TPOT, end-to-end and lifecycle phases: `exact` (every
    /// per-request value kept, Dynamo's rounded rank), or `hdrhistogram`
    /// as ITL when folded ([`Accuracy::FOLDED`]).
    pub per_request: &'static str,
    /// ITL percentiles: `hdrhistogram` over nanoseconds (mean, min, max
    /// and standard deviation exact).
    pub itl: &'static str,
    /// HdrHistogram precision of the ITL percentiles.
    pub itl_significant_digits: u8,
    /// Largest relative error of an ITL percentile ([`ITL_MAX_RELATIVE_ERROR`]).
    pub itl_max_relative_error: f64,
    /// Every figure is rounded to this many ms.
    pub rounding_ms: f64,
}

impl Accuracy {
    /// The methods this module uses.
    pub const REPORTED: Accuracy = Accuracy {
        per_request: "exact",
        itl: "hdrhistogram",
        itl_significant_digits: ITL_SIGNIFICANT_DIGITS,
        itl_max_relative_error: ITL_MAX_RELATIVE_ERROR,
        rounding_ms: 0.001,
    };

    /// Per-request latencies folded into histograms as ITL is
    /// (`Recorder::fold_latencies`, a server's report).
    pub const FOLDED: Accuracy = Accuracy {
        per_request: "hdrhistogram",
        ..Accuracy::REPORTED
    };
}

/// Per-token values (inter-token latency), whose count follows tokens and
/// must not be kept one by one: an HdrHistogram over nanoseconds at
/// [`ITL_SIGNIFICANT_DIGITS`], plus exact count, sum, sum of squares, min
/// and max. Its percentiles use the same rounded rank as [`Distribution::exact`]
/// and report the midpoint of the bucket holding that rank (an earlier
/// version reported bucket lower edges, 1.6% wide, so ITL p90 and p99 read
/// the same 33.55 ms while TPOT p99 was 34.00 ms). Recording allocates
/// nothing: the bucket array is sized for [`ITL_MAX_NS`] up front.
#[derive(Clone, Debug)]
pub struct Histogram {
    h: hdrhistogram::Histogram<u64>,
    total: u64,
    /// Sums in integers, so they are exact and independent of the order
    /// values arrive in: a run of passes recorded as one `record_n` per
    /// pass gives the same figures as one call per token.
    sum_ns: u128,
    sum_sq_ns: u128,
    min_ns: u64,
    max_ns: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            h: hdrhistogram::Histogram::new_with_bounds(1, ITL_MAX_NS, ITL_SIGNIFICANT_DIGITS)
                .expect("constant bounds are valid"),
            total: 0,
            sum_ns: 0,
            sum_sq_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
        }
    }
}

/// Values waiting to be recorded as one `record_n`: consecutive equal
/// values coalesce. Most of a decode pass's batch took its previous token
/// at the same pass end, so the pass's inter-token latencies are mostly one
/// value; recording it once per run of equal values, not once per request,
/// gives the same histogram (counts and integer sums do not depend on how
/// values are grouped).
#[derive(Clone, Copy, Debug, Default)]
pub struct Coalesced {
    ns: u64,
    n: u64,
}

impl Coalesced {
    /// Adds one value of `ns`, recording the run before it into `h` when
    /// `ns` differs from it.
    #[inline]
    pub fn push(&mut self, h: &mut Histogram, ns: u64) {
        if self.n > 0 && self.ns != ns {
            self.flush(h);
        }
        self.ns = ns;
        self.n += 1;
    }

    /// Records what is waiting into `h`.
    pub fn flush(&mut self, h: &mut Histogram) {
        h.record_n(self.ns, self.n);
        self.n = 0;
    }
}

impl Histogram {
    /// Records `n` values of `ns` nanoseconds.
    #[inline]
    pub fn record_n(&mut self, ns: u64, n: u64) {
        if n == 0 {
            return;
        }
        self.h.saturating_record_n(ns, n);
        self.total += n;
        let (v, n) = (u128::from(ns), u128::from(n));
        self.sum_ns = self.sum_ns.saturating_add(v * n);
        self.sum_sq_ns = self.sum_sq_ns.saturating_add(v * v * n);
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The `p`-th percentile (0..=100) by the rounded rank: the midpoint of
    /// the bucket holding that rank, clamped to the values seen.
    fn quantile_ns(&self, p: f64) -> u64 {
        let rank = percentile_rank(self.total.max(1) as usize, p) as u64;
        let mut seen = 0;
        for v in self.h.iter_recorded() {
            seen += v.count_since_last_iteration();
            if seen > rank {
                let at = v.value_iterated_to();
                return self.h.median_equivalent(at).clamp(self.min_ns, self.max_ns);
            }
        }
        self.max_ns
    }

    /// The distribution in milliseconds (percentiles within
    /// [`ITL_MAX_RELATIVE_ERROR`]; mean, min, max and standard deviation
    /// exact).
    pub fn distribution(&self) -> Distribution {
        if self.total == 0 {
            return Distribution::default();
        }
        let ms = |ns: u64| round3(ns as f64 / 1e6);
        let n = self.total as f64;
        let mean = self.sum_ns as f64 / n / 1e6;
        let var = (self.sum_sq_ns as f64 / 1e12 / n - mean * mean).max(0.0);
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
        let used: Vec<(u64, u64)> = self
            .h
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_since_last_iteration()))
            .collect();
        let step = used.len().div_ceil(points.max(1)).max(1);
        let mut seen = 0u64;
        for (k, &(value, c)) in used.iter().enumerate() {
            seen += c;
            if (k + 1) % step == 0 || k + 1 == used.len() {
                // The bucket's upper edge: every value counted so far is at
                // or below it.
                let upper = self.h.highest_equivalent(value);
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
    fn coalesced_values_record_as_one_at_a_time() {
        let values = [5u64, 5, 7, 5, 5, 5, 9, 9, 1_000_000, 5];
        let mut one = Histogram::default();
        for &v in &values {
            one.record_n(v, 1);
        }
        let mut grouped = Histogram::default();
        let mut c = Coalesced::default();
        for &v in &values {
            c.push(&mut grouped, v);
        }
        assert!(grouped.count() < values.len() as u64, "the tail waits");
        c.flush(&mut grouped);
        c.flush(&mut grouped);
        assert_eq!(grouped.count(), values.len() as u64);
        assert_eq!(
            format!("{:?}", grouped.distribution()),
            format!("{:?}", one.distribution())
        );
        assert_eq!(
            format!("{:?}", grouped.cdf(16)),
            format!("{:?}", one.cdf(16))
        );
    }

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
    fn histogram_percentiles_are_within_the_stated_error() {
        let mut h = Histogram::default();
        let mut exact = Vec::new();
        for i in 1..=10_000u64 {
            h.record_n(i * 1000, 1);
            exact.push(i as f64 / 1000.0);
        }
        let s = h.summary();
        let d = h.distribution();
        let e = Distribution::exact(&mut exact);
        assert_eq!(d.min, 0.001);
        assert!((d.std - 2.8867).abs() < 0.01, "{d:?}");
        let cdf = h.cdf(50);
        assert!(
            cdf.len() <= 50 && cdf.last() == Some(&(10.0, 1.0)),
            "{cdf:?}"
        );
        for (got, want) in [
            (d.median, e.median),
            (d.p75, e.p75),
            (d.p90, e.p90),
            (d.p95, e.p95),
            (d.p99, e.p99),
        ] {
            // Within the stated error, plus the 0.001 ms rounding.
            assert!(
                (got - want).abs() <= want * ITL_MAX_RELATIVE_ERROR + 0.0005,
                "{got} vs {want}"
            );
        }
        assert_eq!(s.max, 10.0);
    }

    #[test]
    fn histogram_tells_p90_from_p99_where_lower_edges_did_not() {
        // The case: 90% of tokens at 33.0 ms, the slowest 10% spread
        // over 33.6..34.0 ms. A 1.6%-wide bucket's lower edge read 33.55 ms
        // for both p90 and p99.
        let mut h = Histogram::default();
        h.record_n(33_000_000, 9_000);
        for i in 0..1_000u64 {
            h.record_n(33_600_000 + i * 400, 1);
        }
        let d = h.distribution();
        assert!((d.p99 - 33.96).abs() < 0.02, "{d:?}");
        assert!(d.p99 - d.p90 > 0.3, "{d:?}");
        assert!(
            (d.median - 33.0).abs() <= 33.0 * ITL_MAX_RELATIVE_ERROR,
            "{d:?}"
        );
        // Repeated tokens of one pass count once each.
        assert_eq!(h.count(), 10_000);
    }

    #[test]
    fn histogram_clamps_instead_of_growing() {
        let mut h = Histogram::default();
        h.record_n(0, 1);
        h.record_n(u64::MAX / 2, 1);
        assert_eq!(h.count(), 2);
        let d = h.distribution();
        assert_eq!(d.min, 0.0);
        assert!(d.max > 1e9);
    }
}
