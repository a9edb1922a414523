//! [`Dst`]: the checking director around [`Serving`].

use super::checker::*;
use handoff_core::host::HostFinal;
use handoff_core::{
    Generation, HandoffId, HandoffMsg, Instant, RequestError, RequestId, WorkerEvent, WorkerId,
    WorkerRequest,
};
use handoff_engine::fault::FaultCounts;
use handoff_engine::{Director, Route, Undeliverable};
use handoff_serving::Serving;
use handoff_workload::TraceItem;

/// The checking director: [`Serving`] with a [`Checker`] watching every
/// call. Every [`Director`] method delegates to `Serving`.
pub struct Dst<I: Iterator<Item = TraceItem>> {
    pub(crate) inner: Serving<I>,
    /// Print every event but steps and tokens to stderr (`DST_TRACE=1`).
    pub trace: bool,
    /// The checks.
    pub check: Checker,
}

impl<I: Iterator<Item = TraceItem>> Dst<I> {
    /// Wraps `inner`, checking with `check`.
    pub fn new(mut inner: Serving<I>, check: Checker) -> Self {
        // Migration on, as users run it: the booking checks follow each
        // role's own end, and a migrated request's bookings by the router
        // (they move at the migration, outside any role's end).
        inner.set_migration(true);
        Dst {
            inner,
            check,
            trace: false,
        }
    }

    /// The serving director.
    pub fn serving(&self) -> &Serving<I> {
        &self.inner
    }

    /// The director and the checker, once the run finished.
    pub fn into_parts(self) -> (Serving<I>, Checker) {
        (self.inner, self.check)
    }
}

impl<I: Iterator<Item = TraceItem>> Director for Dst<I> {
    fn next_arrival(&mut self) -> Option<Instant> {
        self.inner.next_arrival()
    }

    fn arrive(&mut self, now: Instant, out: &mut Vec<Route>) {
        self.check.now = now;
        let n = out.len();
        self.inner.arrive(now, out);
        for r in &out[n..] {
            self.check.routed(r);
        }
        self.check.arrived(&self.inner, out.len() > n);
    }

    fn on_event(&mut self, w: WorkerId, e: &WorkerEvent, now: Instant, out: &mut Vec<Route>) {
        if self.trace && !matches!(e, WorkerEvent::Tokens { .. } | WorkerEvent::Step { .. }) {
            eprintln!("{:.6} {w} {e:?}", now.as_nanos() as f64 / 1e9);
        }
        self.check.seen(w, e, now);
        // Events of an attempt a migration voided move nothing of their
        // request's any more (the director ignores them for routing).
        let voided = match e {
            WorkerEvent::RoleEnded { id, .. } | WorkerEvent::PrefillPinned { id, .. } => {
                self.inner.is_voided(*id)
            }
            _ => false,
        };
        let call = if voided {
            self.check.event_call_none()
        } else {
            self.check.event_call(w, e)
        };
        let n = out.len();
        self.inner.on_event(w, e, now, out);
        for r in &out[n..] {
            self.check.routed(r);
        }
        self.check.judge_event(&self.inner, call);
    }

    fn on_transmit(&mut self, from: WorkerId, to: WorkerId, msg: &HandoffMsg, now: Instant) {
        self.inner.on_transmit(from, to, msg, now);
    }

    fn on_refused(&mut self, w: WorkerId, e: RequestError, now: Instant) {
        self.inner.on_refused(w, e, now);
    }

    fn on_undeliverable(
        &mut self,
        w: WorkerId,
        request: &WorkerRequest,
        why: Undeliverable,
        now: Instant,
        out: &mut Vec<Route>,
    ) {
        self.check.now = now;
        self.check.paths.undeliverable += 1;
        let n = out.len();
        self.inner.on_undeliverable(w, request, why, now, out);
        for r in &out[n..] {
            self.check.routed(r);
        }
        let live = self.check.live_requests();
        self.check.after(&self.inner, Call::Undeliverable(w), &live);
    }

    fn on_transfer_done(&mut self, id: HandoffId, ok: bool, now: Instant) {
        self.inner.on_transfer_done(id, ok, now);
    }

    fn on_worker_down(&mut self, w: WorkerId, now: Instant) {
        self.inner.on_worker_down(w, now);
    }

    fn on_worker_lost(&mut self, w: WorkerId, now: Instant, out: &mut Vec<Route>) {
        if self.trace {
            eprintln!("{:.6} {w} lost", now.as_nanos() as f64 / 1e9);
        }
        self.check.now = now;
        let live = self.check.live_requests();
        let n = out.len();
        self.inner.on_worker_lost(w, now, out);
        for r in &out[n..] {
            self.check.routed(r);
        }
        self.check.after(&self.inner, Call::WorkerLost(w), &live);
    }

    fn on_worker_back(
        &mut self,
        w: WorkerId,
        generation: Generation,
        now: Instant,
        out: &mut Vec<Route>,
    ) {
        self.check.now = now;
        let live = self.check.live_requests();
        let n = out.len();
        self.inner.on_worker_back(w, generation, now, out);
        for r in &out[n..] {
            self.check.routed(r);
        }
        // A returning decode worker books the prefills that waited for one.
        self.check.after(&self.inner, Call::Other, &live);
    }

    fn cancel(&mut self, request: RequestId, now: Instant) -> Vec<(WorkerId, HandoffId)> {
        self.check.now = now;
        let roles = self.inner.cancel(request, now);
        // The request fails at the cancel; its roles may keep their KV
        // until a read or a lease ends (`CancelFrees::Upstream`).
        self.check.after(&self.inner, Call::Cancel, &[request]);
        roles
    }

    fn finish(&mut self, end: Instant, finals: &[HostFinal], torn_down: u64, faults: FaultCounts) {
        self.check.now = end;
        self.check.faults = faults;
        self.check.torn_down = torn_down;
        for f in finals {
            let s = f.stats;
            let p = &mut self.check.paths;
            p.duplicate_facts += s.duplicates;
            p.stale_facts += s.stale;
            p.old_generation_facts += s.old_generation;
            p.early_facts += s.early;
            p.early_dropped += s.early_dropped;
        }
        self.inner.finish(end, finals, torn_down, faults);
        self.check.finished(&self.inner, torn_down);
    }
}
