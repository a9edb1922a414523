//! Whether a run's measured window saw the system in steady state.
//!
//! A run is measured from its first arrival to its last completion. Its
//! first requests meet an empty system (warm-up: no queue, no batch to
//! share a pass with) and its last ones one that empties (drain: the batch
//! shrinks, passes get cheaper). With an arrival span `S` (last arrival
//! minus first) and a median request lifetime `L` (the median e2e
//! latency, arrival to last token), the system is filling for about the
//! first `L` and draining for about the last `L` of the window `S + L`,
//! so it holds its steady in-flight count for `S − L` of it. That share,
//! `(S − L) / (S + L)`, is below one half exactly when `S < 3 L`: then
//! warm-up and drain are most of what was measured, and the latencies and
//! throughput are not those of the load sustained. The report warns
//! ([`RunWarning::NotSteady`]); the figures themselves are unchanged.
//!
//! Closed loop (`--concurrency C`) a request arrives as another finishes,
//! so `N` requests span about `(N / C − 1) L`: the rule asks for at least
//! `4 C` of them.

use serde::Serialize;

/// The arrival span must be at least this many median lifetimes.
pub const STEADY_LIFETIMES: f64 = 3.0;

/// Something about a run that its figures alone do not show.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RunWarning {
    /// The arrival span is shorter than [`STEADY_LIFETIMES`] median
    /// request lifetimes: warm-up and drain dominate the measured window.
    NotSteady {
        /// Last arrival minus first, ms.
        arrival_span_ms: f64,
        /// Median e2e latency of the completed requests, ms.
        median_e2e_ms: f64,
    },
}

impl RunWarning {
    /// The warning for a run whose arrivals span `arrival_span_ms` and
    /// whose completed requests' median e2e latency is `median_e2e_ms`,
    /// if it is not in steady state (no completed request: no lifetime to
    /// judge by, no warning).
    pub fn steady(arrival_span_ms: f64, median_e2e_ms: f64) -> Option<RunWarning> {
        let judged = median_e2e_ms.is_finite() && median_e2e_ms > 0.0;
        (judged && arrival_span_ms < STEADY_LIFETIMES * median_e2e_ms).then(|| {
            RunWarning::NotSteady {
                arrival_span_ms: (arrival_span_ms * 1e3).round() / 1e3,
                median_e2e_ms,
            }
        })
    }
}

impl std::fmt::Display for RunWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunWarning::NotSteady {
                arrival_span_ms,
                median_e2e_ms,
            } => write!(
                f,
                "not in steady state: arrivals span {arrival_span_ms:.1} ms, under \
                 {STEADY_LIFETIMES} x the median request lifetime ({median_e2e_ms:.1} ms e2e), \
                 so warm-up and drain are most of the measured window; replay more requests \
                 or a longer trace"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warns_below_three_lifetimes_only() {
        assert_eq!(
            RunWarning::steady(2999.0, 1000.0),
            Some(RunWarning::NotSteady {
                arrival_span_ms: 2999.0,
                median_e2e_ms: 1000.0
            })
        );
        assert_eq!(RunWarning::steady(3000.0, 1000.0), None);
        assert_eq!(RunWarning::steady(0.0, 0.0), None);
        assert_eq!(RunWarning::steady(0.0, f64::NAN), None);
        let w = RunWarning::steady(10.0, 100.0).unwrap();
        assert!(w.to_string().starts_with("not in steady state"), "{w}");
        let j = serde_json::to_value(&w).unwrap();
        assert_eq!(j["kind"], "not_steady");
        assert_eq!(j["median_e2e_ms"], 100.0);
    }
}
