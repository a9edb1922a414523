//! The injector: a plan being applied, with its seeded random streams.

use super::plan::{nanos, FactFate, Fault, FaultCounts, FaultPlan, TimedFault};
use super::{FACT_DRAWS, TRANSFER_STREAM};
use handoff_core::ids::WorkerId;
use handoff_core::rng::Rng;
use handoff_core::time::{Duration, Instant};
use std::collections::BTreeMap;

/// A [`FaultPlan`] being applied.
///
/// Randomness comes from two streams seeded from the plan's seed, one for
/// facts and one for transfers. [`fact`](FaultInjector::fact) always draws
/// [`FACT_DRAWS`] values and [`transfer_ok`](FaultInjector::transfer_ok)
/// always draws [`TRANSFER_DRAWS`](super::TRANSFER_DRAWS), whatever the probabilities and the
/// outcome (a partition-dropped fact still draws). So the n-th fact's fate
/// depends only on the seed, the probabilities and its own arguments, never
/// on how earlier facts fared or on how many transfers ran in between; and a
/// plan whose probabilities are all 0 delivers every fact once with no extra
/// delay and completes every transfer.
#[derive(Clone, Debug)]
pub struct FaultInjector {
    plan: FaultPlan,
    next: usize,
    fact_rng: Rng,
    transfer_rng: Rng,
    /// Partition windows per unordered worker pair (smaller id first),
    /// sorted, merged and disjoint: `[start, until)` in nanoseconds.
    cuts: BTreeMap<(WorkerId, WorkerId), Vec<(u64, u64)>>,
    counts: FaultCounts,
}

fn pair(a: WorkerId, b: WorkerId) -> (WorkerId, WorkerId) {
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}

/// `[0, 1)` from 64 random bits, as [`Rng::next_f64`] does.
fn unit(x: u64) -> f64 {
    (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// `[0, n)` from 64 random bits, as [`Rng::below`] does (but always from a
/// drawn value, so the draw count does not depend on `n`).
fn scale(x: u64, n: u64) -> u64 {
    ((u128::from(x) * u128::from(n)) >> 64) as u64
}

impl FaultInjector {
    /// Starts applying `plan` (its timed faults are stably sorted by time).
    pub fn new(mut plan: FaultPlan) -> Self {
        plan.timed.sort_by_key(|t| t.at);
        let mut cuts: BTreeMap<(WorkerId, WorkerId), Vec<(u64, u64)>> = BTreeMap::new();
        for t in &plan.timed {
            if let Fault::Partition { a, b, until } = t.fault {
                if t.at < until {
                    cuts.entry(pair(a, b)).or_default().push((t.at.0, until.0));
                }
            }
        }
        for windows in cuts.values_mut() {
            windows.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::with_capacity(windows.len());
            for &(s, e) in windows.iter() {
                match merged.last_mut() {
                    Some(last) if s <= last.1 => last.1 = last.1.max(e),
                    _ => merged.push((s, e)),
                }
            }
            *windows = merged;
        }
        FaultInjector {
            fact_rng: Rng::seeded(plan.seed),
            transfer_rng: Rng::seeded(plan.seed ^ TRANSFER_STREAM),
            plan,
            next: 0,
            cuts,
            counts: FaultCounts::default(),
        }
    }

    /// The plan being applied (timed faults sorted).
    pub fn plan(&self) -> &FaultPlan {
        &self.plan
    }

    /// When the earliest timed fault not yet taken happens; `None` when all
    /// have been taken.
    pub fn next_timed(&self) -> Option<Instant> {
        self.plan.timed.get(self.next).map(|t| t.at)
    }

    /// Timed faults not yet taken, in order.
    pub fn remaining(&self) -> &[TimedFault] {
        &self.plan.timed[self.next..]
    }

    /// Takes the next timed fault if it is due at or before `now`, in plan
    /// order (by time, ties in plan order). Call until `None` to take every
    /// fault due.
    pub fn pop_due(&mut self, now: Instant) -> Option<TimedFault> {
        let t = *self.plan.timed.get(self.next)?;
        if t.at > now {
            return None;
        }
        self.next += 1;
        let c = &mut self.counts;
        match t.fault {
            Fault::Kill { .. } => c.kills += 1,
            Fault::Restart { .. } => c.restarts += 1,
            Fault::Partition { .. } => c.partitions += 1,
            Fault::Cancel { .. } => c.cancels += 1,
            // Scale events are counted by the fleet, not as faults.
            Fault::ScaleUp { .. }
            | Fault::Ready { .. }
            | Fault::Drain { .. }
            | Fault::Remove { .. } => {}
        }
        Some(t)
    }

    /// Adds a timed fault at `at` (not before the last one taken) among
    /// those not yet taken, after any already at `at`: a `ScaleUp`
    /// schedules its worker's `Ready` so.
    pub fn schedule(&mut self, at: Instant, fault: Fault) {
        let rest = &self.plan.timed[self.next..];
        let i = self.next + rest.partition_point(|t| t.at <= at);
        self.plan.timed.insert(i, TimedFault { at, fault });
    }

    /// Cuts the link between `a` and `b` over `[from, until)` now, outside
    /// the plan (a harness injecting a partition at a phase it reached).
    pub fn cut(&mut self, a: WorkerId, b: WorkerId, from: Instant, until: Instant) {
        if from >= until {
            return;
        }
        self.counts.partitions += 1;
        let windows = self.cuts.entry(pair(a, b)).or_default();
        windows.push((from.0, until.0));
        windows.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(windows.len());
        for &(s, e) in windows.iter() {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        *windows = merged;
    }

    /// Whether a partition between `a` and `b` (either order) is active at
    /// `at`, i.e. some partition of the pair has `start <= at < until`.
    /// Independent of which timed faults have been popped.
    pub fn is_partitioned(&self, a: WorkerId, b: WorkerId, at: Instant) -> bool {
        let Some(windows) = self.cuts.get(&pair(a, b)) else {
            return false;
        };
        let i = windows.partition_point(|&(s, _)| s <= at.0);
        i > 0 && at.0 < windows[i - 1].1
    }

    /// Decides the fate of one fact sent from `from` to `to` at `sent`.
    ///
    /// A partition of the pair active at `sent` drops it; otherwise it is
    /// dropped, duplicated and delayed by the plan's [`FactFaults`](super::FactFaults). Always
    /// draws [`FACT_DRAWS`] values from the fact stream.
    pub fn fact(&mut self, from: WorkerId, to: WorkerId, sent: Instant) -> FactFate {
        let mut r = [0u64; FACT_DRAWS as usize];
        for x in &mut r {
            *x = self.fact_rng.next_u64();
        }
        let [drop, dup, delay1, amount1, delay2, amount2] = r;
        self.counts.facts += 1;
        if self.is_partitioned(from, to, sent) {
            self.counts.facts_partitioned += 1;
            return FactFate::Drop;
        }
        let ff = self.plan.facts;
        if unit(drop) < ff.drop {
            self.counts.facts_dropped += 1;
            return FactFate::Drop;
        }
        let first_extra = self.extra(delay1, amount1);
        if unit(dup) < ff.duplicate {
            self.counts.facts_duplicated += 1;
            let second_extra = self.extra(delay2, amount2);
            FactFate::Duplicate {
                first_extra,
                second_extra,
            }
        } else {
            FactFate::Deliver {
                extra_delay: first_extra,
            }
        }
    }

    fn extra(&mut self, decide: u64, amount: u64) -> Duration {
        let max = nanos(self.plan.facts.max_delay);
        if max == 0 || unit(decide) >= self.plan.facts.delay {
            return Duration::ZERO;
        }
        self.counts.facts_delayed += 1;
        Duration::from_nanos(1 + scale(amount, max))
    }

    /// Whether a KV transfer completes: `false` with probability
    /// `transfer_fail`. Always draws exactly [`TRANSFER_DRAWS`](super::TRANSFER_DRAWS) value from
    /// the transfer stream.
    pub fn transfer_ok(&mut self) -> bool {
        let x = self.transfer_rng.next_u64();
        self.counts.transfers += 1;
        let ok = unit(x) >= self.plan.transfer_fail;
        if !ok {
            self.counts.transfers_failed += 1;
        }
        ok
    }

    /// What has been injected so far.
    pub fn injected(&self) -> FaultCounts {
        self.counts
    }
}
