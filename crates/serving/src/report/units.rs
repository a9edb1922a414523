//! Rounding and unit conversions the report's figures share.

pub(super) use crate::metrics::round3;
use handoff_core::{Duration, Instant};

pub(super) fn ms(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

pub(super) fn at_ms(t: Instant) -> f64 {
    round3(t.0 as f64 / 1e6)
}

pub(super) fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}
