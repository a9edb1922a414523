//! [`Serving`]: the engine's [`Director`] for serving a workload: the shared
//! [`router::Frontend`] routes, the [`Recorder`] measures, and the
//! lifecycle [`Transcript`] is kept when asked. Replay and every live mode
//! direct their engines with it, so they report the same way.

use crate::report::{Recorder, Report};
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
    /// Each request's handoff roles that were routed and have not ended,
    /// and where: what a client cancel must reach.
    attempts: FastMap<RequestId, Vec<(WorkerId, HandoffId)>>,
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
            attempts: FastMap::default(),
        }
    }

    /// The report and the transcript (if kept), once the engine finished.
    pub fn into_outcome(self) -> (Option<Report>, Option<Transcript>) {
        (self.report, self.transcript)
    }

    /// Requests that arrived and have neither finished nor failed.
    pub fn in_flight(&self) -> usize {
        self.rec.as_ref().map_or(0, Recorder::in_flight)
    }

    /// Whether `request` arrived and has neither finished nor failed (as
    /// the report will count it); `false` once the run finished.
    pub fn is_in_flight(&self, request: RequestId) -> bool {
        self.rec.as_ref().is_some_and(|r| r.is_in_flight(request))
    }

    /// The router frontend, for inspection (its routers' bookings).
    pub fn frontend(&self) -> &Frontend {
        &self.frontend
    }

    /// Remembers where a routed handoff role lives, for client cancels, and
    /// tells the recorder when a request gets a destination.
    fn routed(&mut self, to: WorkerId, request: &WorkerRequest) {
        let (WorkerRequest::HandoffSource { id, request: q }
        | WorkerRequest::HandoffDestination { id, request: q, .. }) = request
        else {
            return;
        };
        if matches!(request, WorkerRequest::HandoffDestination { .. }) {
            if let Some(rec) = self.rec.as_mut() {
                rec.destination_routed(q.id);
            }
        }
        self.attempts.entry(q.id).or_default().push((to, *id));
    }

    /// Forgets a role that ended (or never reached its worker).
    fn unrouted(&mut self, w: WorkerId, request: RequestId, id: HandoffId) {
        if let Some(v) = self.attempts.get_mut(&request) {
            v.retain(|x| *x != (w, id));
            if v.is_empty() {
                self.attempts.remove(&request);
            }
        }
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
        if self.next.is_none() {
            self.next = self.workload.next();
        }
        self.next.as_ref().map(|i| i.request.arrival)
    }

    fn arrive(&mut self, now: Instant, out: &mut Vec<Route>) {
        let Some(item) = self.next.take() else {
            return;
        };
        if let Some(rec) = self.rec.as_mut() {
            rec.arrival(&item.request);
        }
        let rid = item.request.id;
        let n = out.len();
        for (to, request) in self.frontend.arrive(item.request, now) {
            self.holders.insert(request_of(&request), to);
            self.routed(to, &request);
            out.push(Route {
                to,
                request,
                delay: handoff_core::Duration::ZERO,
            });
        }
        if out.len() == n {
            // Every worker of a pool it needs is down: nothing will ever
            // report this request, so it fails now.
            if let Some(rec) = self.rec.as_mut() {
                rec.fail(rid, "no-worker");
            }
        }
    }

    fn on_event(&mut self, w: WorkerId, e: &WorkerEvent, now: Instant, out: &mut Vec<Route>) {
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
        if let WorkerEvent::RoleEnded { id, request, .. } = e {
            self.unrouted(w, *request, *id);
        }
        if let WorkerEvent::StartTransfer { id, tokens, at, .. } = e {
            if let Some(rec) = self.rec.as_mut() {
                rec.transfer_started(*id, *tokens, *at);
            }
            return;
        }
        let mut routed = std::mem::take(&mut self.scratch);
        routed.extend(self.frontend.on_event(w, pool, e, now));
        for (to, request, delay) in routed.drain(..) {
            self.holders.insert(request_of(&request), to);
            self.routed(to, &request);
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
        w: WorkerId,
        request: &WorkerRequest,
        why: Undeliverable,
        _now: Instant,
    ) {
        if let WorkerRequest::HandoffSource { id, request: q }
        | WorkerRequest::HandoffDestination { id, request: q, .. } = request
        {
            self.unrouted(w, q.id, *id);
        }
        // No role there will ever report it: its booking there comes off.
        self.frontend.request_lost(request_of(request), w);
        if let Some(rec) = self.rec.as_mut() {
            rec.undeliverable(request, why);
        }
    }

    fn on_transfer_done(&mut self, id: HandoffId, _ok: bool, now: Instant) {
        if let Some(rec) = self.rec.as_mut() {
            rec.transfer_done(id, now);
        }
    }

    fn on_worker_lost(&mut self, w: WorkerId, _now: Instant) {
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
            self.frontend.request_lost(r, w);
            if let Some(rec) = self.rec.as_mut() {
                rec.fail(r, "worker-lost");
            }
        }
    }

    /// The client cancelled `request`: every handoff role of it that was
    /// routed and has not ended, where it was routed (a delivery still on
    /// its way arrives after the cancel, as it would on a network). Each
    /// worker ends its role with `CancelReason::Client`; the roles' ends
    /// then fail the request and release its bookings as any early end
    /// does.
    fn cancel(&mut self, request: RequestId, _now: Instant) -> Vec<(WorkerId, HandoffId)> {
        self.attempts.get(&request).cloned().unwrap_or_default()
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
            let report = rec.finish(
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
        }
    }
}
