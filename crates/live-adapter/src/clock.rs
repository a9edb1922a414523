//! Wall-clock time for the sans-IO core: model nanoseconds since a shared
//! origin, optionally sped up so tests and demos run fast.

use handoff_core::Instant;

/// A clock whose model time runs `speed` times faster than wall time.
#[derive(Clone, Copy, Debug)]
pub struct WallClock {
    origin: std::time::Instant,
    speed: f64,
}

impl WallClock {
    /// Starts at model time zero now.
    pub fn start(speed: f64) -> Self {
        WallClock::with_origin(std::time::Instant::now(), speed)
    }

    /// A clock sharing `origin` (every thread of one run uses the same one).
    pub fn with_origin(origin: std::time::Instant, speed: f64) -> Self {
        let speed = if speed.is_finite() && speed > 0.0 {
            speed
        } else {
            1.0
        };
        WallClock { origin, speed }
    }

    /// The wall-clock moment model time zero is, as nanoseconds since the
    /// Unix epoch: what a frontend tells its worker processes so that every
    /// process stamps events on one clock.
    pub fn origin_unix_nanos(&self) -> u64 {
        let since = self.origin.elapsed();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        u64::try_from(now.saturating_sub(since).as_nanos()).unwrap_or(u64::MAX)
    }

    /// A clock whose model time zero is `origin_unix_nanos` (see
    /// [`WallClock::origin_unix_nanos`]), at `speed`.
    pub fn from_unix(origin_unix_nanos: u64, speed: f64) -> Self {
        let now_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let ago = now_unix.saturating_sub(std::time::Duration::from_nanos(origin_unix_nanos));
        let origin = std::time::Instant::now()
            .checked_sub(ago)
            .unwrap_or_else(std::time::Instant::now);
        WallClock::with_origin(origin, speed)
    }

    /// The speed model time runs at.
    pub fn speed(&self) -> f64 {
        self.speed
    }

    /// Model time now.
    pub fn now(&self) -> Instant {
        let real = self.origin.elapsed().as_nanos() as f64;
        Instant((real * self.speed) as u64)
    }

    /// The wall-clock moment model time reaches `t`.
    pub fn real(&self, t: Instant) -> std::time::Instant {
        let real_ns = (t.0 as f64 / self.speed).min(1e18) as u64;
        self.origin + std::time::Duration::from_nanos(real_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speed_scales_model_time() {
        let c = WallClock::start(1000.0);
        let t = Instant::from_millis(1000);
        let real = c.real(t) - c.origin;
        assert_eq!(real, std::time::Duration::from_millis(1));
        assert!(WallClock::start(f64::NAN).speed == 1.0);
    }
}
