//! Caller-supplied time. The state machines never read a clock: every handler
//! takes `now` as an [`Instant`], so replay passes virtual time and live passes
//! wall time through the same code.

use core::ops::{Add, Sub};
pub use core::time::Duration;

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

/// A monotonic instant in nanoseconds since the driver's epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct Instant(pub u64);

impl Instant {
    /// The driver's epoch.
    pub const ZERO: Instant = Instant(0);
    /// Later than any instant a run reaches; used for "no deadline".
    pub const MAX: Instant = Instant(u64::MAX);

    /// Nanoseconds since the epoch.
    pub fn as_nanos(self) -> u64 {
        self.0
    }

    /// An instant `ms` milliseconds after the epoch.
    pub fn from_millis(ms: u64) -> Instant {
        Instant(ms.saturating_mul(1_000_000))
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, rhs: Duration) -> Instant {
        Instant(self.0.saturating_add(nanos(rhs)))
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_since(rhs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Instant::MAX + Duration::from_secs(1), Instant::MAX);
        assert_eq!(Instant(5) - Instant(9), Duration::ZERO);
        assert_eq!(
            Instant::from_millis(2) - Instant(0),
            Duration::from_millis(2)
        );
    }
}
