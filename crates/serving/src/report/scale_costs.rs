//! What an elastic run's scaling cost beyond machine time: KV stranded on
//! draining workers, handoffs unwound by removals, and SLO attainment per
//! time window. Kept only for an elastic run (a fleet in the fault plan);
//! the figures land in the report's `scaling` section.
//!
//! - **Stranded KV** is block·seconds of KV a draining worker holds for
//!   others: a prefill's pinned sources (waiting for their reader or their
//!   lease, vLLM's NIXL `kv_lease_duration`) and a decode's reservations
//!   for KV not yet received. Both come from the roles' ownership deltas
//!   (the `Transition` events every driver reports alike), integrated
//!   from the worker's `Drain` to its `Drained` or `Removed` (or the end
//!   of the run). Exact: the held counts change only at transitions.
//! - **Unwound by removal** counts the roles that ended early because a
//!   worker was removed at once, by [`CancelReason`]: the removed worker's
//!   own (torn down) and their peers' (peer lost, transfer failed, ...).
//! - **Windows** bucket requests by arrival: a window's attainment is the
//!   share of the requests that arrived in it meeting every `--slo`
//!   target, its goodput those requests (and their output tokens) per
//!   second of the window, the report's SLO rules (`slo.rs`) per window.

use super::units::{round3, round6};
use handoff_core::{CancelReason, Duration, HandoffId, Instant, OwnershipDelta, WorkerId};
use handoff_engine::scale::{ScaleEvent, ScaleRecord};
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};

/// The window SLO attainment is reported per unless `--slo-window` says.
pub const DEFAULT_SLO_WINDOW: Duration = Duration::from_secs(60);

/// Most windows kept: arrivals later than the last window's start fall
/// into it (a bound whatever the trace's span).
pub const MAX_SLO_WINDOWS: usize = 100_000;

/// Every reason a role ends early, in the order reports list them.
const REASONS: [CancelReason; 10] = [
    CancelReason::Teardown,
    CancelReason::PeerLost,
    CancelReason::PeerAborted,
    CancelReason::PeerRestarted,
    CancelReason::TransferFailed,
    CancelReason::KvLoadFailed,
    CancelReason::LeaseExpired,
    CancelReason::ReservationExpired,
    CancelReason::Client,
    CancelReason::Unsupported,
];

fn reason_index(r: CancelReason) -> usize {
    match r {
        CancelReason::Teardown => 0,
        CancelReason::PeerLost => 1,
        CancelReason::PeerAborted => 2,
        CancelReason::PeerRestarted => 3,
        CancelReason::TransferFailed => 4,
        CancelReason::KvLoadFailed => 5,
        CancelReason::LeaseExpired => 6,
        CancelReason::ReservationExpired => 7,
        CancelReason::Client => 8,
        CancelReason::Unsupported => 9,
    }
}

/// Roles unwound by removals, by reason (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct Unwinds {
    /// Workers removed and not provisioned since: whatever role ends on
    /// one ends because of the removal.
    removed: Vec<WorkerId>,
    /// Attempts a removal cut: their peers' early ends count too.
    attempts: HashSet<HandoffId>,
    counts: [u64; REASONS.len()],
}

impl Unwinds {
    /// A scale event: a removal starts attributing, a provision of the
    /// same worker (a fresh incarnation) stops.
    pub fn scale(&mut self, r: &ScaleRecord) {
        match r.event {
            ScaleEvent::Removed { worker, .. } if !self.removed.contains(&worker) => {
                self.removed.push(worker);
            }
            ScaleEvent::Provision { worker, .. } => self.removed.retain(|w| *w != worker),
            _ => {}
        }
    }

    /// Whether `w` was removed (and not provisioned again).
    pub fn is_removed(&self, w: WorkerId) -> bool {
        self.removed.contains(&w)
    }

    /// Attempt `id` had a role on a worker just removed.
    pub fn cut(&mut self, id: HandoffId) {
        self.attempts.insert(id);
    }

    /// Attempt `id`'s role on `w` ended early for `reason`.
    pub fn role_ended(&mut self, w: WorkerId, id: HandoffId, reason: CancelReason) {
        if self.is_removed(w) {
            self.attempts.insert(id);
        } else if !self.attempts.contains(&id) {
            return;
        }
        self.counts[reason_index(reason)] += 1;
    }

    /// Counts by reason's report name (only reasons seen).
    pub fn by_reason(&self) -> BTreeMap<&'static str, u64> {
        REASONS
            .iter()
            .zip(self.counts)
            .filter(|(_, n)| *n > 0)
            .map(|(r, n)| (r.name(), n))
            .collect()
    }

    /// All roles unwound by removals.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// One worker's held KV and how long it was stranded.
#[derive(Clone, Copy, Debug, Default)]
struct Held {
    pinned: i64,
    reserved: i64,
    /// Since when it drains (`None`: not draining).
    draining: Option<Instant>,
    /// The last instant integrated to.
    last: Instant,
    /// Block·nanoseconds while draining.
    pinned_bns: u128,
    reserved_bns: u128,
}

impl Held {
    fn advance(&mut self, at: Instant) {
        if self.draining.is_some() && at > self.last {
            let dt = u128::from(u64::try_from((at - self.last).as_nanos()).unwrap_or(u64::MAX));
            self.pinned_bns += u128::from(self.pinned.max(0).unsigned_abs()) * dt;
            self.reserved_bns += u128::from(self.reserved.max(0).unsigned_abs()) * dt;
        }
        self.last = self.last.max(at);
    }
}

/// One window's counts.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct WindowAcc {
    arrived: u64,
    good: u64,
    good_tokens: u64,
}

/// The recorder's part: stranded KV and per-window SLO (see the module
/// docs).
#[derive(Clone, Debug)]
pub struct ScaleCosts {
    held: BTreeMap<WorkerId, Held>,
    window: Duration,
    windows: Vec<WindowAcc>,
}

impl ScaleCosts {
    /// Costs with SLO windows of `window` (at least 1 ms).
    pub fn new(window: Duration) -> ScaleCosts {
        ScaleCosts {
            held: BTreeMap::new(),
            window: window.max(Duration::from_millis(1)),
            windows: Vec::new(),
        }
    }

    /// Sets the SLO window (before any request arrives).
    pub fn set_window(&mut self, window: Duration) {
        self.window = window.max(Duration::from_millis(1));
    }

    /// A role on `w` changed what it holds at `at`.
    pub fn transition(&mut self, w: WorkerId, at: Instant, delta: OwnershipDelta) {
        let h = self.held.entry(w).or_default();
        h.advance(at);
        h.pinned += delta.pinned;
        h.reserved += delta.reserved;
    }

    /// A scale event: a drain starts stranding, its end stops it.
    pub fn scale(&mut self, r: &ScaleRecord) {
        let (w, draining) = match r.event {
            ScaleEvent::Drain { worker } => (worker, true),
            ScaleEvent::Drained { worker } | ScaleEvent::Removed { worker, .. } => (worker, false),
            _ => return,
        };
        let h = self.held.entry(w).or_default();
        h.advance(r.at);
        h.draining = draining.then_some(r.at);
    }

    fn index(&self, arrival: Instant) -> usize {
        let w = u128::from(u64::try_from(self.window.as_nanos()).unwrap_or(u64::MAX));
        let i = u128::from(arrival.0) / w.max(1);
        usize::try_from(i)
            .unwrap_or(usize::MAX)
            .min(MAX_SLO_WINDOWS - 1)
    }

    fn window_mut(&mut self, arrival: Instant) -> &mut WindowAcc {
        let i = self.index(arrival);
        if self.windows.len() <= i {
            self.windows.resize(i + 1, WindowAcc::default());
        }
        &mut self.windows[i]
    }

    /// A request arrived at `arrival`.
    pub fn arrived(&mut self, arrival: Instant) {
        self.window_mut(arrival).arrived += 1;
    }

    /// The request that arrived at `arrival` ended meeting every target
    /// (completed), with `tokens` output tokens.
    pub fn good(&mut self, arrival: Instant, tokens: u64) {
        let w = self.window_mut(arrival);
        w.good += 1;
        w.good_tokens += tokens;
    }

    /// The figures at the run's `end` (`slo`: whether requests were
    /// judged, so windows mean something).
    pub fn report(&self, end: Instant, slo: bool) -> StrandedAndWindows {
        let (mut pinned, mut reserved) = (0u128, 0u128);
        for h in self.held.values() {
            let mut h = *h;
            h.advance(end);
            pinned += h.pinned_bns;
            reserved += h.reserved_bns;
        }
        let block_s = |bns: u128| round3(bns as f64 / 1e9);
        let window_s = self.window.as_secs_f64();
        let windows = slo.then(|| {
            self.windows
                .iter()
                .enumerate()
                .map(|(i, w)| SloWindow {
                    start_s: round3(i as f64 * window_s),
                    arrived: w.arrived,
                    met_all: w.good,
                    attainment: if w.arrived == 0 {
                        0.0
                    } else {
                        round6(w.good as f64 / w.arrived as f64)
                    },
                    goodput_rps: round3(w.good as f64 / window_s),
                    goodput_output_tok_s: round3(w.good_tokens as f64 / window_s),
                })
                .collect()
        });
        StrandedAndWindows {
            stranded: StrandedKv {
                pinned_source_block_s: block_s(pinned),
                reserved_destination_block_s: block_s(reserved),
                total_block_s: block_s(pinned + reserved),
            },
            slo_window_s: slo.then(|| round3(window_s)),
            windows,
        }
    }
}

/// KV held on draining workers, integrated over their drains.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct StrandedKv {
    /// Prefill sources pinned for their readers, block·s.
    pub pinned_source_block_s: f64,
    /// Decode reservations for KV not yet received, block·s.
    pub reserved_destination_block_s: f64,
    /// Both.
    pub total_block_s: f64,
}

/// One window's SLO figures (requests by arrival).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SloWindow {
    /// The window's start, model seconds.
    pub start_s: f64,
    /// Requests that arrived in it.
    pub arrived: u64,
    /// Of those, completed meeting every target.
    pub met_all: u64,
    /// `met_all / arrived` (0 for an empty window).
    pub attainment: f64,
    /// `met_all` per second of the window.
    pub goodput_rps: f64,
    /// Their output tokens per second of the window.
    pub goodput_output_tok_s: f64,
}

/// What [`ScaleCosts::report`] returns.
#[derive(Clone, Debug, PartialEq)]
pub struct StrandedAndWindows {
    /// Stranded KV.
    pub stranded: StrandedKv,
    /// The window length, with `--slo`.
    pub slo_window_s: Option<f64>,
    /// Per window, with `--slo`.
    pub windows: Option<Vec<SloWindow>>,
}

impl super::Recorder {
    /// A scale event (an elastic run only; see [`ScaleCosts::scale`]).
    pub fn scale_event(&mut self, r: &ScaleRecord) {
        if let Some(c) = self.scale.as_mut() {
            c.scale(r);
        }
    }

    /// The SLO window of an elastic run's per-window attainment.
    pub fn set_slo_window(&mut self, window: Duration) {
        if let Some(c) = self.scale.as_mut() {
            c.set_window(window);
        }
    }

    /// An elastic run's stranded KV and SLO windows at `end`.
    pub fn scale_costs(&self, end: Instant) -> Option<StrandedAndWindows> {
        let slo = self.slo.is_some();
        self.scale.as_ref().map(|c| c.report(end, slo))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: u64) -> Instant {
        Instant(x * 1_000_000_000)
    }

    fn rec(at: Instant, event: ScaleEvent) -> ScaleRecord {
        ScaleRecord { at, event }
    }

    fn delta(pinned: i64, reserved: i64) -> OwnershipDelta {
        OwnershipDelta {
            pinned,
            reserved,
            active: 0,
        }
    }

    #[test]
    fn stranded_kv_counts_only_while_draining() {
        let mut c = ScaleCosts::new(DEFAULT_SLO_WINDOW);
        let (p, d) = (WorkerId(0), WorkerId(1));
        // Held before the drain: not stranded.
        c.transition(p, s(1), delta(10, 0));
        c.transition(d, s(1), delta(0, 4));
        c.scale(&rec(s(5), ScaleEvent::Drain { worker: p }));
        c.scale(&rec(s(5), ScaleEvent::Drain { worker: d }));
        // 10 blocks for 2 s, then 6 for 3 s: 38 block·s.
        c.transition(p, s(7), delta(-4, 0));
        c.scale(&rec(s(10), ScaleEvent::Drained { worker: p }));
        // After the drain ends nothing counts.
        c.transition(p, s(12), delta(-6, 0));
        // The decode is removed at 8 s: 4 blocks for 3 s.
        c.scale(&rec(
            s(8),
            ScaleEvent::Removed {
                worker: d,
                from: handoff_engine::scale::Phase::Draining,
            },
        ));
        c.transition(d, s(8), delta(0, -4));
        let r = c.report(s(100), false);
        assert_eq!(r.stranded.pinned_source_block_s, 38.0);
        assert_eq!(r.stranded.reserved_destination_block_s, 12.0);
        assert_eq!(r.stranded.total_block_s, 50.0);
        assert_eq!((r.windows, r.slo_window_s), (None, None));
    }

    #[test]
    fn a_drain_open_at_the_end_counts_to_the_end() {
        let mut c = ScaleCosts::new(DEFAULT_SLO_WINDOW);
        c.scale(&rec(
            s(2),
            ScaleEvent::Drain {
                worker: WorkerId(3),
            },
        ));
        // Nothing held from 2 s to 4 s, then 5 blocks to the end at 6 s.
        c.transition(WorkerId(3), s(4), delta(5, 0));
        assert_eq!(c.report(s(6), false).stranded.pinned_source_block_s, 10.0);
        // Reporting does not consume: the same figures again.
        assert_eq!(c.report(s(6), false).stranded.total_block_s, 10.0);
    }

    #[test]
    fn slo_windows_bucket_requests_by_arrival() {
        let mut c = ScaleCosts::new(Duration::from_secs(10));
        for t in [1, 2, 3, 4] {
            c.arrived(s(t));
        }
        c.arrived(s(25));
        c.good(s(1), 100);
        c.good(s(3), 50);
        c.good(s(4), 50);
        let r = c.report(s(30), true);
        assert_eq!(r.slo_window_s, Some(10.0));
        let w = r.windows.unwrap();
        assert_eq!(w.len(), 3);
        assert_eq!((w[0].arrived, w[0].met_all, w[0].attainment), (4, 3, 0.75));
        assert_eq!((w[0].goodput_rps, w[0].goodput_output_tok_s), (0.3, 20.0));
        // An empty window is kept (the timeline has no gap) at 0.
        assert_eq!(
            (w[1].start_s, w[1].arrived, w[1].attainment),
            (10.0, 0, 0.0)
        );
        assert_eq!((w[2].start_s, w[2].arrived, w[2].met_all), (20.0, 1, 0));
    }

    #[test]
    fn windows_are_bounded_whatever_the_span() {
        let mut c = ScaleCosts::new(Duration::from_millis(1));
        c.arrived(Instant(u64::MAX));
        c.arrived(s(1_000_000));
        let w = c.report(s(1), true).windows.unwrap();
        assert_eq!(w.len(), MAX_SLO_WINDOWS);
        assert_eq!(w[MAX_SLO_WINDOWS - 1].arrived, 2);
    }

    #[test]
    fn unwinds_count_the_removed_worker_and_its_attempts_peers() {
        let mut u = Unwinds::default();
        let id = |n: u64| HandoffId(u128::from(n));
        let removed = ScaleEvent::Removed {
            worker: WorkerId(1),
            from: handoff_engine::scale::Phase::Ready,
        };
        // Before the removal: not counted.
        u.role_ended(WorkerId(1), id(9), CancelReason::LeaseExpired);
        u.scale(&rec(s(1), removed));
        u.role_ended(WorkerId(1), id(1), CancelReason::Teardown);
        u.role_ended(WorkerId(1), id(2), CancelReason::Teardown);
        // Peers of attempts 1 and 2 (elsewhere) end later.
        u.role_ended(WorkerId(3), id(1), CancelReason::PeerLost);
        u.role_ended(WorkerId(3), id(2), CancelReason::TransferFailed);
        // An unrelated attempt elsewhere: not counted.
        u.role_ended(WorkerId(3), id(7), CancelReason::LeaseExpired);
        // An attempt cut while its role on the removed worker reports
        // nothing (a dead process): its peer's end counts.
        u.cut(id(4));
        u.role_ended(WorkerId(2), id(4), CancelReason::PeerLost);
        assert_eq!(u.total(), 5);
        let by: Vec<(&str, u64)> = u.by_reason().into_iter().collect();
        assert_eq!(
            by,
            [("peer-lost", 2), ("teardown", 2), ("transfer-failed", 1)]
        );
        // Provisioned again: a fresh incarnation's ends are its own.
        u.scale(&rec(
            s(50),
            ScaleEvent::Provision {
                pool: handoff_engine::scale::ScalePool::Prefill,
                worker: WorkerId(1),
            },
        ));
        u.role_ended(WorkerId(1), id(11), CancelReason::LeaseExpired);
        assert_eq!(u.total(), 5);
    }
}
