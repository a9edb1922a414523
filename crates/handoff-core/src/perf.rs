//! How long a forward pass takes: a perf model behind a trait, shared by the
//! backend cores so that vLLM and SGLang runs are timed alike.

use crate::time::Duration;

/// Predicts forward-pass time. Implementations must be pure functions of
/// their arguments so replays are deterministic.
pub trait PerfModel {
    /// Time to compute `new_tokens` prompt tokens (after prefix-cache hits)
    /// in one pass.
    fn prefill(&self, new_tokens: u64) -> Duration;

    /// Time of one decode pass over `batch` sequences while `active_kv_tokens`
    /// of the pool's `total_kv_tokens` are in use.
    fn decode(&self, batch: u64, active_kv_tokens: u64, total_kv_tokens: u64) -> Duration;

    /// A mixed pass (chunked prefill piggybacking decode) costs both parts.
    fn step(&self, prefill_tokens: u64, batch: u64, active: u64, total: u64) -> Duration {
        let p = if prefill_tokens > 0 {
            self.prefill(prefill_tokens)
        } else {
            Duration::ZERO
        };
        let d = if batch > 0 {
            self.decode(batch, active, total)
        } else {
            Duration::ZERO
        };
        p + d
    }
}

/// The default model: the quadratic prefill / KV-utilisation decode fit that
/// Dynamo's mocker ships as its `Polynomial` perf model
/// (ai-dynamo/dynamo `lib/mocker`, `PerfModel::predict_prefill_time` and
/// `predict_decode_time`):
///
/// - prefill ms = 4.209989e-7·t² + 1.518344e-2·t + 16.50142, t = new tokens;
/// - decode ms = −25.74·u² + 54.01·u + 5.74, u = active KV / total KV,
///   floored at 1 ms so token-emitting steps never share a timestamp.
///
/// Both are divided by `speedup_ratio` (2.0 runs twice as fast).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PolynomialPerf {
    /// Divides every predicted time; must be positive.
    pub speedup_ratio: f64,
}

impl Default for PolynomialPerf {
    fn default() -> Self {
        PolynomialPerf { speedup_ratio: 1.0 }
    }
}

impl PolynomialPerf {
    fn scaled(&self, ms: f64) -> Duration {
        let r = if self.speedup_ratio > 0.0 {
            self.speedup_ratio
        } else {
            1.0
        };
        // Whole nanoseconds keep replays byte-identical across platforms.
        Duration::from_nanos((ms / r * 1e6).round().max(0.0) as u64)
    }
}

impl PerfModel for PolynomialPerf {
    fn prefill(&self, new_tokens: u64) -> Duration {
        if new_tokens == 0 {
            return Duration::ZERO;
        }
        let t = new_tokens as f64;
        self.scaled(4.209989e-7 * t * t + 1.518344e-2 * t + 16.50142)
    }

    fn decode(&self, batch: u64, active_kv_tokens: u64, total_kv_tokens: u64) -> Duration {
        if batch == 0 {
            return Duration::ZERO;
        }
        let u = if total_kv_tokens == 0 {
            1.0
        } else {
            (active_kv_tokens as f64 / total_kv_tokens as f64).min(1.0)
        };
        self.scaled((-25.74 * u * u + 54.01 * u + 5.74).max(1.0))
    }
}

/// Fixed per-pass costs, for tests and for matching a measured deployment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedPerf {
    /// Cost of a pass that computes any prefill, plus `per_prefill_token` each.
    pub prefill_base: Duration,
    /// Extra cost per prefill token.
    pub per_prefill_token: Duration,
    /// Cost of a decode pass.
    pub decode: Duration,
}

impl PerfModel for FixedPerf {
    fn prefill(&self, new_tokens: u64) -> Duration {
        if new_tokens == 0 {
            return Duration::ZERO;
        }
        self.prefill_base + self.per_prefill_token * u32::try_from(new_tokens).unwrap_or(u32::MAX)
    }

    fn decode(&self, batch: u64, _active: u64, _total: u64) -> Duration {
        if batch == 0 {
            Duration::ZERO
        } else {
            self.decode
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polynomial_matches_the_cited_fit() {
        let m = PolynomialPerf::default();
        // 4096 tokens: 4.209989e-7*4096^2 + 1.518344e-2*4096 + 16.50142 ms
        let expect = 4.209989e-7 * 4096f64 * 4096f64 + 1.518344e-2 * 4096.0 + 16.50142;
        let got = m.prefill(4096).as_secs_f64() * 1e3;
        assert!((got - expect).abs() < 1e-6, "{got} vs {expect}");
        assert_eq!(m.prefill(0), Duration::ZERO);
        let empty = m.decode(1, 0, 100).as_secs_f64() * 1e3;
        assert!((empty - 5.74).abs() < 1e-6);
        let fast = PolynomialPerf { speedup_ratio: 2.0 };
        assert_eq!(fast.prefill(4096) * 2, m.prefill(4096));
    }

    #[test]
    fn mixed_step_adds_parts() {
        let m = FixedPerf {
            prefill_base: Duration::from_millis(10),
            per_prefill_token: Duration::from_micros(1),
            decode: Duration::from_millis(5),
        };
        assert_eq!(m.step(1000, 3, 0, 0), Duration::from_millis(16));
        assert_eq!(m.step(0, 0, 0, 0), Duration::ZERO);
    }
}
