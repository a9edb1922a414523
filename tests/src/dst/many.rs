//! Many schedules and their summary.

use super::paths::*;
use super::running::*;
use super::schedule::*;
use super::violations::*;
use handoff_engine::fault::FaultCounts;

/// What many schedules found.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Schedules run.
    pub schedules: u64,
    /// Schedules with at least one violation.
    pub failing: Vec<(u64, Vec<Violation>)>,
    /// Faults injected, summed.
    pub faults: FaultCounts,
    /// Paths reached, summed.
    pub paths: Paths,
    /// Schedules whose plan injected something.
    pub faulted: u64,
    /// Engine units run, summed.
    pub units: u64,
}

impl Summary {
    /// Folds one schedule's outcome in.
    pub fn add(&mut self, seed: u64, o: Outcome) {
        self.schedules += 1;
        self.units += o.units;
        add_counts(&mut self.faults, &o.faults);
        if !o.faults.injected_nothing() {
            self.faulted += 1;
        }
        self.paths.add(&o.paths);
        if !o.violations.is_empty() {
            self.failing.push((seed, o.violations));
        }
    }
}

/// Runs schedules `seed..seed + n`, calling `progress(done)` after each.
pub fn run_many(seed: u64, n: u64, mut progress: impl FnMut(u64, &Summary)) -> Summary {
    let mut sum = Summary::default();
    for i in 0..n {
        let s = Schedule::new(seed.wrapping_add(i));
        let o = check(&s);
        sum.add(s.seed, o);
        progress(i + 1, &sum);
    }
    sum
}
