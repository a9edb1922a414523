//! What a profile does past its grid, and how often a run got there.
//!
//! A measured profile (`qwen3-4b-a100-sglang`) extrapolates its last
//! segment: its grid stops short of real runs (decode batch 64) and a line
//! is the best guess. A profile exported from AIConfigurator
//! (`profiles/aic/`) covers every realistic shape instead, so a lookup past
//! it is a run outside what AIC was asked about: the profile then clamps to
//! its edge and the run's report counts the passes that did
//! ([`BeyondGridCounts`]), rather than inventing a slope.

use std::sync::atomic::{AtomicU64, Ordering};

/// A profile's behaviour past the last point of an axis (below the first
/// point every profile clamps: that is a pass's fixed cost).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BeyondGrid {
    /// The last segment's slope continues (`"extrapolate"`, the default).
    #[default]
    Extrapolate,
    /// The value at the edge holds, and the pass is counted (`"clamp"`).
    Clamp,
}

impl BeyondGrid {
    /// As the profile file spells it.
    pub fn name(self) -> &'static str {
        match self {
            BeyondGrid::Extrapolate => "extrapolate",
            BeyondGrid::Clamp => "clamp",
        }
    }

    /// The value of `name`, if it is one.
    pub fn from_name(name: &str) -> Option<BeyondGrid> {
        match name {
            "extrapolate" => Some(BeyondGrid::Extrapolate),
            "clamp" => Some(BeyondGrid::Clamp),
            _ => None,
        }
    }
}

/// Passes whose lookup went past the grid's last point on some axis, by
/// table: one core's count (each core owns its model), which its final
/// state carries to the report wherever the core ran.
#[derive(Debug, Default)]
pub struct BeyondGridCounts {
    prefill: AtomicU64,
    decode: AtomicU64,
}

impl BeyondGridCounts {
    pub(crate) fn count_prefill(&self) {
        self.prefill.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_decode(&self) {
        self.decode.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_decode_n(&self, n: u64) {
        self.decode.fetch_add(n, Ordering::Relaxed);
    }

    /// Passes counted so far: (prefill lookups, decode lookups) past the
    /// grid. A mixed pass past both counts once in each.
    pub fn get(&self) -> (u64, u64) {
        (
            self.prefill.load(Ordering::Relaxed),
            self.decode.load(Ordering::Relaxed),
        )
    }
}

/// A copy starts from the same counts (a profile's copy is a new run's
/// profile only if the caller makes it so).
impl Clone for BeyondGridCounts {
    fn clone(&self) -> Self {
        let (p, d) = self.get();
        BeyondGridCounts {
            prefill: AtomicU64::new(p),
            decode: AtomicU64::new(d),
        }
    }
}

/// Counts are what runs did with a profile, not part of what it is: any
/// two compare equal, so profiles compare by their tables.
impl PartialEq for BeyondGridCounts {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_counts_add_up() {
        for b in [BeyondGrid::Extrapolate, BeyondGrid::Clamp] {
            assert_eq!(BeyondGrid::from_name(b.name()), Some(b));
        }
        assert_eq!(BeyondGrid::from_name("wrap"), None);
        let c = BeyondGridCounts::default();
        c.count_prefill();
        c.count_decode();
        c.count_decode();
        assert_eq!(c.get(), (1, 2));
        assert_eq!(c.clone().get(), (1, 2));
        assert_eq!(c, BeyondGridCounts::default());
    }
}
