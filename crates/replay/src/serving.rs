//! [`Serving`]: the engine's [`Director`] for serving a workload: the shared
//! [`router::Frontend`] routes, the [`Recorder`] measures, and the
//! lifecycle [`Transcript`] is kept when asked. Replay and every live mode
//! direct their engines with it, so they report the same way.

use crate::report::{Details, Recorder, Report, RequestSink};
use handoff_core::engine::{Director, Route, Undeliverable};
use handoff_core::fasthash::FastMap;
use handoff_core::fault::FaultCounts;
use handoff_core::host::HostFinal;
use handoff_core::{
    Generation, HandoffId, Instant, RequestError, RequestId, Transcript, WorkerEvent, WorkerId,
    WorkerRequest,
};
use router::{Frontend, Pool};
use workload::TraceItem;

/// See the module docs.
pub struct Serving<I> {
    frontend: Frontend,
    pools: Vec<Pool>,
    workload: I,
    next: Option<TraceItem>,
    rec: Option<Recorder>,
    transcript: Option<Transcript>,
    report: Option<Report>,
    scratch: Vec<(WorkerId, WorkerRequest, handoff_core::Duration)>,
    /// The worker each unfinished request was last routed to: a request
    /// whose worker is lost fails then, not at the end of the run.
    holders: FastMap<RequestId, WorkerId>,
    /// Closed loop: requests allowed in flight (`None`: open loop, at the
    /// workload's timestamps).
    concurrency: Option<usize>,
    /// The model time of the last callback (closed-loop arrivals happen
    /// then).
    now: Instant,
    details: Option<Details>,
}

fn request_of(r: &WorkerRequest) -> RequestId {
    match r {
        WorkerRequest::Ordinary(q)
        | WorkerRequest::HandoffSource { request: q, .. }
        | WorkerRequest::HandoffDestination { request: q, .. } => q.id,
    }
}

impl<I: Iterator<Item = TraceItem>> Serving<I> {
    /// Serves `workload` through `frontend` to workers whose pools are
    /// `pools` (indexed by worker id), recording into `rec`.
    pub fn new(
        frontend: Frontend,
        pools: Vec<Pool>,
        workload: I,
        rec: Recorder,
        transcript: bool,
    ) -> Self {
        Serving {
            frontend,
            pools,
            workload,
            next: None,
            rec: Some(rec),
            transcript: transcript.then(Transcript::new),
            report: None,
            scratch: Vec::new(),
            holders: FastMap::default(),
            concurrency: None,
            now: Instant::ZERO,
            details: None,
        }
    }

    /// Closed loop: at most `n` requests in flight. Requests arrive when a
    /// slot is free, at that model time, whatever their timestamps; the
    /// engine must be asked again after a completion
    /// ([`handoff_core::engine::Engine::arrivals_changed`]), which
    /// [`crate::Replay::closed_loop`] does.
    pub fn set_concurrency(&mut self, n: usize) {
        self.concurrency = Some(n.max(1));
    }

    /// See [`Recorder::set_request_sink`].
    pub fn set_request_sink(&mut self, sink: RequestSink) {
        if let Some(rec) = self.rec.as_mut() {
            rec.set_request_sink(sink);
        }
    }

    /// See [`Recorder::keep_details`].
    pub fn keep_details(&mut self, points: usize) {
        if let Some(rec) = self.rec.as_mut() {
            rec.keep_details(points);
        }
    }

    /// See [`Recorder::capacity`].
    pub fn capacity(&mut self, w: WorkerId, at: Instant, c: &handoff_core::KvCapacitySnapshot) {
        if let Some(rec) = self.rec.as_mut() {
            rec.capacity(w, at, c);
        }
    }

    /// The report and the transcript (if kept), once the engine finished.
    pub fn into_outcome(self) -> (Option<Report>, Option<Transcript>) {
        (self.report, self.transcript)
    }

    /// Bookings the routers of both pools still hold.
    pub fn router_bookings(&self) -> usize {
        self.frontend.prefill_router().live_bookings()
            + self
                .frontend
                .decode_router()
                .map_or(0, |d| d.live_bookings())
    }

    /// The report, the transcript and the [`Details`] (each if kept).
    pub fn into_parts(self) -> (Option<Report>, Option<Transcript>, Option<Details>) {
        (self.report, self.transcript, self.details)
    }

    /// Requests that arrived and have neither finished nor failed.
    pub fn in_flight(&self) -> usize {
        self.rec.as_ref().map_or(0, Recorder::in_flight)
    }

    fn pool(&self, w: WorkerId) -> Pool {
        self.pools
            .get(w.0 as usize)
            .copied()
            .unwrap_or(Pool::Decode)
    }
}

impl<I: Iterator<Item = TraceItem>> Director for Serving<I> {
    fn next_arrival(&mut self) -> Option<Instant> {
        if let Some(n) = self.concurrency {
            if self.in_flight() >= n {
                return None;
            }
        }
        if self.next.is_none() {
            self.next = self.workload.next();
        }
        match self.concurrency {
            Some(_) => self.next.as_ref().map(|_| self.now),
            None => self.next.as_ref().map(|i| i.request.arrival),
        }
    }

    fn arrive(&mut self, now: Instant, out: &mut Vec<Route>) {
        self.now = now;
        let Some(mut item) = self.next.take() else {
            return;
        };
        if self.concurrency.is_some() {
            item.request.arrival = now;
        }
        if let Some(rec) = self.rec.as_mut() {
            rec.arrival(&item.request);
        }
        for (to, request) in self.frontend.arrive(item.request, now) {
            self.holders.insert(request_of(&request), to);
            out.push(Route {
                to,
                request,
                delay: handoff_core::Duration::ZERO,
            });
        }
    }

    fn on_event(&mut self, w: WorkerId, e: &WorkerEvent, now: Instant, out: &mut Vec<Route>) {
        self.now = now;
        let pool = self.pool(w);
        if let (Some(t), WorkerEvent::Transition(tr)) = (self.transcript.as_mut(), e) {
            t.record(tr);
        }
        if let Some(rec) = self.rec.as_mut() {
            rec.event(w, pool, e);
        }
        if let WorkerEvent::RequestFinished { request, .. } = e {
            if pool != Pool::Prefill {
                self.holders.remove(request);
            }
        }
        if let WorkerEvent::StartTransfer {
            id, request, at, ..
        } = e
        {
            if let Some(rec) = self.rec.as_mut() {
                rec.transfer_started(*id, *request, *at);
            }
            return;
        }
        let mut routed = std::mem::take(&mut self.scratch);
        routed.extend(self.frontend.on_event(w, pool, e, now));
        for (to, request, delay) in routed.drain(..) {
            self.holders.insert(request_of(&request), to);
            out.push(Route { to, request, delay });
        }
        self.scratch = routed;
    }

    fn on_refused(&mut self, _w: WorkerId, e: RequestError, _now: Instant) {
        if let Some(rec) = self.rec.as_mut() {
            rec.refused(e);
        }
    }

    fn on_undeliverable(
        &mut self,
        _w: WorkerId,
        request: &WorkerRequest,
        _why: Undeliverable,
        now: Instant,
    ) {
        self.now = now;
        if let Some(rec) = self.rec.as_mut() {
            rec.undeliverable_at(request, Some(now));
        }
    }

    fn on_transfer_done(&mut self, id: HandoffId, _ok: bool, now: Instant) {
        self.now = now;
        if let Some(rec) = self.rec.as_mut() {
            rec.transfer_done(id, now);
        }
    }

    fn on_worker_lost(&mut self, w: WorkerId, now: Instant) {
        self.now = now;
        self.frontend.worker_lost(w);
        let mut lost: Vec<RequestId> = self
            .holders
            .iter()
            .filter(|(_, h)| **h == w)
            .map(|(r, _)| *r)
            .collect();
        // Deterministic order whatever the map's.
        lost.sort_unstable();
        for r in lost {
            self.holders.remove(&r);
            self.frontend.request_lost(r);
            if let Some(rec) = self.rec.as_mut() {
                rec.fail_at(r, "worker-lost", Some(now));
            }
        }
    }

    fn on_worker_back(&mut self, w: WorkerId, _generation: Generation, _now: Instant) {
        let pool = self.pool(w);
        self.frontend.worker_back(w, pool);
    }

    fn finish(&mut self, end: Instant, finals: &[HostFinal], torn_down: u64, faults: FaultCounts) {
        if let Some(t) = self.transcript.as_mut() {
            for f in finals {
                t.finish_worker(f.worker, f.drained, f.capacity);
            }
        }
        if let Some(mut rec) = self.rec.take() {
            rec.unresolved_teardown += torn_down;
            rec.faults = faults;
            let pools = &self.pools;
            let (report, details) = rec.finish_detailed(
                end,
                finals.iter().map(|f| {
                    (
                        *f,
                        pools
                            .get(f.worker.0 as usize)
                            .copied()
                            .unwrap_or(Pool::Decode),
                    )
                }),
            );
            self.report = Some(report);
            self.details = details;
        }
    }
}
