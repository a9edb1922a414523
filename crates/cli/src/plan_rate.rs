//! `plan --max-rate R`: for each layout, the highest Poisson arrival rate
//! at most `R` requests/s at which the SLO still holds, by bisection over
//! `--arrival-speedup-ratio` of the generated workload (so every probe
//! replays the same requests, only closer together or further apart).
//!
//! It assumes the SLO holds at every rate below one where it holds (more
//! load never helps a latency); the answer is the highest probed rate that
//! held, within `--rate-tolerance` (relative) of the lowest that did not.
//! The search starts at `R` and goes no lower than `R / 64`
//! ([`FLOOR_DIVISOR`]): below that a layout counts as holding at no rate.

use crate::replay_cmd::simulate;
use crate::sweep_grid::ReplayOnly;
use clap::Parser as _;

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
    pub fn search(
        &self,
        mut holds: impl FnMut(f64) -> Result<bool, String>,
    ) -> Result<Option<f64>, String> {
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

    /// Whether the SLO holds when the layout `args` (which carry `--slo`)
    /// replays its workload at `rate` requests/s.
    pub fn probe(&self, args: &[String], rate: f64) -> Result<bool, String> {
        let mut a = args.to_vec();
        a.extend([
            "--arrival-speedup-ratio".to_string(),
            (rate / self.base_rps).to_string(),
        ]);
        let parsed = ReplayOnly::try_parse_from(&a).map_err(|e| e.to_string())?;
        let sim = simulate(&parsed.args, false, None)?;
        Ok(sim.report.slo.as_ref().is_some_and(|s| s.holds))
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
                Ok(r <= 23.7)
            })
            .unwrap()
            .unwrap();
        assert!((23.7 * 0.99..=23.7).contains(&found), "{found}");
        assert_eq!(probes[..2], [64.0, 1.0]);
        assert!(probes.len() <= 2 + MAX_PROBES);
    }

    #[test]
    fn the_ends_of_the_range() {
        assert_eq!(search(0.05).search(|_| Ok(true)).unwrap(), Some(64.0));
        assert_eq!(search(0.05).search(|_| Ok(false)).unwrap(), None);
        // Holding only at the floor gives the floor.
        assert_eq!(search(0.05).search(|r| Ok(r <= 1.0)).unwrap(), Some(1.0));
        assert!(search(0.05).search(|_| Err("boom".into())).is_err());
    }
}
