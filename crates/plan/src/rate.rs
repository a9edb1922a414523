//! `plan --max-rate R`: for each layout, the highest Poisson arrival rate
//! at most `R` requests/s at which the SLO still holds, by bisection over
//! the arrival-time scale of the generated workload ([`RateSearch::speedup`]) (so every probe
//! replays the same requests, only closer together or further apart).
//!
//! It assumes the SLO holds at every rate below one where it holds (more
//! load never helps a latency); the answer is the highest probed rate that
//! held, within `--rate-tolerance` (relative) of the lowest that did not.
//! The search starts at `R` and goes no lower than `R / 64`
//! ([`FLOOR_DIVISOR`]): below that a layout counts as holding at no rate.

//!
//! The probe (one replay at a rate) is the caller's: [`RateSearch::search`]
//! takes it as a closure.

/// The lowest rate probed is the ceiling divided by this.
pub const FLOOR_DIVISOR: f64 = 64.0;

/// Probes one layout makes at most (a tolerance of 1e-4 needs 17).
pub const MAX_PROBES: usize = 24;

/// A bisection over arrival rates.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateSearch {
    /// The generated workload's own rate, requests/s.
    pub base_rps: f64,
    /// The highest rate tried, requests/s.
    pub max_rps: f64,
    /// Stop when the bracket is this share of its upper end (0.001..=0.5).
    pub tolerance: f64,
}

impl RateSearch {
    /// The highest rate at which `holds` is true, within the tolerance;
    /// `None` when it fails even at the floor. `holds` takes a rate in
    /// requests/s.
    pub fn search<E>(
        &self,
        mut holds: impl FnMut(f64) -> Result<bool, E>,
    ) -> Result<Option<f64>, E> {
        let round = |x: f64| (x * 1e3).round() / 1e3;
        if holds(self.max_rps)? {
            return Ok(Some(round(self.max_rps)));
        }
        let floor = self.max_rps / FLOOR_DIVISOR;
        if !holds(floor)? {
            return Ok(None);
        }
        let (mut lo, mut hi) = (floor, self.max_rps);
        for _ in 0..MAX_PROBES {
            if hi - lo <= self.tolerance * hi {
                break;
            }
            let mid = (lo + hi) / 2.0;
            if holds(mid)? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(Some(round(lo)))
    }

    /// How much faster than the generated workload's own rate the
    /// requests arrive at `rate` requests/s (`--arrival-speedup-ratio`).
    pub fn speedup(&self, rate: f64) -> f64 {
        rate / self.base_rps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn search(tolerance: f64) -> RateSearch {
        RateSearch {
            base_rps: 10.0,
            max_rps: 64.0,
            tolerance,
        }
    }

    #[test]
    fn finds_the_threshold_from_below_within_the_tolerance() {
        let mut probes = Vec::new();
        let found = search(0.01)
            .search(|r| {
                probes.push(r);
                Ok::<_, String>(r <= 23.7)
            })
            .unwrap()
            .unwrap();
        assert!((23.7 * 0.99..=23.7).contains(&found), "{found}");
        assert_eq!(probes[..2], [64.0, 1.0]);
        assert!(probes.len() <= 2 + MAX_PROBES);
    }

    #[test]
    fn the_ends_of_the_range() {
        assert_eq!(
            search(0.05).search(|_| Ok::<_, ()>(true)).unwrap(),
            Some(64.0)
        );
        assert_eq!(search(0.05).search(|_| Ok::<_, ()>(false)).unwrap(), None);
        // Holding only at the floor gives the floor.
        assert_eq!(
            search(0.05).search(|r| Ok::<_, ()>(r <= 1.0)).unwrap(),
            Some(1.0)
        );
        assert!(search(0.05).search(|_| Err("boom")).is_err());
        assert_eq!(search(0.05).speedup(25.0), 2.5);
    }
}
