//! What the HTML report draws ([`Details`]) and the per-worker step shapes behind it.

use crate::timeline::Series;
use handoff_core::{Duration, Instant, WorkerId};

/// What the HTML report draws besides the [`Report`]: latency and phase
/// distributions as CDFs, and per-worker timelines. Kept only when asked
/// ([`Recorder::keep_details`]); never part of the report's JSON.
#[derive(Clone, Debug, Default)]
pub struct Details {
    /// Latency CDFs: (name, points of (ms, fraction at or below)).
    pub latency_cdfs: Vec<(&'static str, Vec<(f64, f64)>)>,
    /// Handoff phase duration CDFs, likewise.
    pub phase_cdfs: Vec<(&'static str, Vec<(f64, f64)>)>,
    /// Per-worker timelines, in worker order, with each worker's pool.
    pub timelines: Vec<(WorkerId, &'static str, Series)>,
}

/// Up to `points` (value, fraction at or below) pairs of sorted `v`.
pub(super) fn cdf(v: &[f64], points: usize) -> Vec<(f64, f64)> {
    let n = v.len();
    if n == 0 {
        return Vec::new();
    }
    let step = n.div_ceil(points.max(1)).max(1);
    let mut out: Vec<(f64, f64)> = (0..n)
        .filter(|i| (i + 1) % step == 0)
        .map(|i| (v[i], (i + 1) as f64 / n as f64))
        .collect();
    if out.last().map(|p| p.1) != Some(1.0) {
        out.push((v[n - 1], 1.0));
    }
    out
}

/// Points of each CDF in [`Details`].
pub(super) const CDF_POINTS: usize = 400;

/// A worker's last step, as its tokens need it: when each pass ended.
#[derive(Clone, Debug, Default)]
pub(super) struct StepShape {
    pub(super) start: Instant,
    pub(super) steps: u64,
    /// End of the first pass and of the last.
    pub(super) end_first: Instant,
    pub(super) end_last: Instant,
    /// With several passes, each pass's time in nanoseconds and its end
    /// (from `start`): the times the core computed, so every token's time
    /// is exact (pass times are not linear in the pass index).
    pub(super) passes: Vec<u64>,
    pub(super) ends: Vec<u64>,
}

impl StepShape {
    /// Becomes the shape of a step, reusing its buffers. A core that
    /// covered several passes without listing their times (ours always
    /// list them) gets the rest of the step split evenly after its first.
    pub(super) fn set(
        &mut self,
        start: Instant,
        steps: u64,
        first: Duration,
        duration: Duration,
        passes: &[Duration],
    ) {
        self.start = start;
        self.steps = steps;
        self.passes.clear();
        self.ends.clear();
        if steps > 1 {
            if passes.len() as u64 == steps {
                self.passes
                    .extend(passes.iter().map(|d| d.as_nanos() as u64));
            } else {
                let first = first.as_nanos() as u64;
                let rest = (duration.as_nanos() as u64).saturating_sub(first);
                let n = steps - 1;
                self.passes.push(first);
                for i in 0..n {
                    self.passes.push(rest / n + u64::from(i < rest % n));
                }
            }
            let mut end = 0u64;
            for &ns in &self.passes {
                end += ns;
                self.ends.push(end);
            }
        }
        self.end_first = start + first;
        self.end_last = match self.ends.last() {
            Some(ns) => Instant(start.0 + ns),
            None => start + first,
        };
    }

    /// End of pass `j` (1-based), if the step had it.
    pub(super) fn end_of(&self, j: u64) -> Option<Instant> {
        if self.ends.is_empty() {
            return (j == 1).then_some(self.end_first);
        }
        let i = usize::try_from(j).ok()?.checked_sub(1)?;
        self.ends.get(i).map(|ns| Instant(self.start.0 + ns))
    }

    /// Times of passes 2..=k, in nanoseconds.
    pub(super) fn later_passes(&self, k: u64) -> &[u64] {
        let k = usize::try_from(k)
            .unwrap_or(usize::MAX)
            .min(self.passes.len());
        self.passes.get(1..k).unwrap_or(&[])
    }
}

#[derive(Clone, Debug, Default)]
pub(super) struct WorkerAcc {
    pub(super) steps: u64,
    pub(super) prefill_tokens: u64,
    pub(super) pinned: i64,
    pub(super) reserved: i64,
    pub(super) peak_pinned: i64,
    pub(super) peak_reserved: i64,
    pub(super) pinned_ns: f64,
    pub(super) reserved_ns: f64,
    pub(super) last_change: Instant,
}

impl WorkerAcc {
    pub(super) fn advance(&mut self, at: Instant) {
        if at > self.last_change {
            let dt = (at - self.last_change).as_nanos() as f64;
            self.pinned_ns += self.pinned as f64 * dt;
            self.reserved_ns += self.reserved as f64 * dt;
            self.last_change = at;
        }
    }
}
