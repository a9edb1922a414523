//! The live frontend: submits a workload's requests at their (scaled)
//! timestamps, routes with the same [`router::Frontend`] replay uses, and
//! collects the lifecycle transcript and final worker states from the
//! workers' events.

use crate::clock::WallClock;
use crossbeam_channel::RecvTimeoutError;
use handoff_core::{
    DestinationState, Instant, RequestId, Role, RoleState, Transcript, WorkerEvent, WorkerId,
    WorkerRequest,
};
use router::{Frontend, Pool};
use std::collections::{BTreeMap, BTreeSet};
use transport::{Frame, Incoming, Transport};
use workload::TraceItem;

/// What a live run observed.
#[derive(Debug, Default)]
pub struct LiveOutcome {
    /// Per-handoff transitions and final worker states.
    pub transcript: Transcript,
    /// Requests submitted.
    pub requests: u64,
    /// Requests that produced all their output.
    pub completed: u64,
    /// Requests whose handoff failed.
    pub failed: u64,
    /// Handoffs whose destination activated.
    pub handoffs: u64,
    /// Worker events received.
    pub events: u64,
    /// Workers that disappeared mid-run.
    pub workers_lost: u64,
    /// Whether the run ended because nothing moved for too long.
    pub stalled: bool,
    /// Wall-clock seconds from first arrival to the end.
    pub wall_seconds: f64,
}

/// The frontend node; see the module docs.
pub struct FrontendNode<T: Transport, I> {
    frontend: Frontend,
    pools: BTreeMap<WorkerId, Pool>,
    transport: T,
    clock: WallClock,
    items: I,
    next: Option<TraceItem>,
    delayed: BTreeMap<(Instant, u64), (WorkerId, WorkerRequest)>,
    seq: u64,
    outstanding: BTreeSet<RequestId>,
    routed_to_decode: BTreeSet<RequestId>,
    assigned: BTreeMap<RequestId, Vec<WorkerId>>,
    drained: BTreeMap<WorkerId, (bool, handoff_core::KvCapacitySnapshot)>,
    out: LiveOutcome,
    /// Real time without any event after which the run gives up.
    pub idle_limit: std::time::Duration,
}

impl<T: Transport, I: Iterator<Item = TraceItem>> FrontendNode<T, I> {
    /// A frontend over `pools` (every worker and its pool).
    pub fn new(
        frontend: Frontend,
        pools: BTreeMap<WorkerId, Pool>,
        transport: T,
        clock: WallClock,
        items: I,
    ) -> Self {
        FrontendNode {
            frontend,
            pools,
            transport,
            clock,
            items,
            next: None,
            delayed: BTreeMap::new(),
            seq: 0,
            outstanding: BTreeSet::new(),
            routed_to_decode: BTreeSet::new(),
            assigned: BTreeMap::new(),
            drained: BTreeMap::new(),
            out: LiveOutcome::default(),
            idle_limit: std::time::Duration::from_secs(30),
        }
    }

    fn send(&mut self, to: WorkerId, req: WorkerRequest) {
        let rid = match &req {
            WorkerRequest::HandoffDestination { request, .. } => {
                self.routed_to_decode.insert(request.id);
                request.id
            }
            WorkerRequest::HandoffSource { request, .. } | WorkerRequest::Ordinary(request) => {
                request.id
            }
        };
        self.assigned.entry(rid).or_default().push(to);
        // A lost worker surfaces as PeerLost; the request then fails there.
        let _ = self.transport.send(to, Frame::Request(req));
    }

    fn finished(&self) -> bool {
        self.next.is_none()
            && self.delayed.is_empty()
            && self.outstanding.is_empty()
            && self
                .pools
                .keys()
                .all(|w| self.drained.get(w).is_some_and(|d| d.0))
    }

    /// Runs the workload to the end and returns what was observed.
    pub fn run(mut self) -> LiveOutcome {
        let started = std::time::Instant::now();
        self.next = self.items.next();
        let mut last_progress = std::time::Instant::now();
        loop {
            let now = self.clock.now();
            while let Some(item) = self.next.take() {
                if item.request.arrival > now {
                    self.next = Some(item);
                    break;
                }
                self.out.requests += 1;
                let rid = item.request.id;
                let routed = self.frontend.arrive(item.request, now);
                if routed.is_empty() {
                    // No worker left to take it.
                    self.out.failed += 1;
                } else {
                    self.outstanding.insert(rid);
                }
                for (w, r) in routed {
                    self.send(w, r);
                }
                self.next = self.items.next();
            }
            while let Some((&(t, s), _)) = self.delayed.first_key_value() {
                if t > now {
                    break;
                }
                if let Some((w, r)) = self.delayed.remove(&(t, s)) {
                    self.send(w, r);
                }
            }
            if self.finished() {
                break;
            }
            if last_progress.elapsed() > self.idle_limit {
                self.out.stalled = true;
                break;
            }
            let mut deadline = self.next.as_ref().map(|i| i.request.arrival);
            if let Some((&(t, _), _)) = self.delayed.first_key_value() {
                deadline = Some(deadline.map_or(t, |d| d.min(t)));
            }
            let real = deadline.map_or(std::time::Instant::now() + self.idle_limit, |t| {
                self.clock.real(t)
            });
            match self.transport.incoming().recv_deadline(real) {
                Ok(inc) => {
                    last_progress = std::time::Instant::now();
                    self.handle(inc);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        for (w, (drained, cap)) in &self.drained {
            self.out.transcript.finish_worker(*w, *drained, *cap);
        }
        self.out.wall_seconds = started.elapsed().as_secs_f64();
        self.transport.close();
        self.out
    }

    /// A worker vanished: nothing more is routed to it, the requests it held
    /// fail, and it counts as drained (its process took its state with it;
    /// its peers reclaim their side on their own).
    fn worker_lost(&mut self, peer: WorkerId) {
        self.frontend.worker_lost(peer);
        self.out.workers_lost += 1;
        let dead: Vec<RequestId> = self
            .assigned
            .iter()
            .filter(|(r, ws)| self.outstanding.contains(r) && ws.contains(&peer))
            .map(|(r, _)| *r)
            .collect();
        for r in dead {
            self.outstanding.remove(&r);
            self.out.failed += 1;
        }
        self.pools.remove(&peer);
        self.drained.remove(&peer);
    }

    fn handle(&mut self, inc: Incoming) {
        let now = self.clock.now();
        let (from, ev) = match inc {
            Incoming::Frame {
                from,
                frame: Frame::Event(e),
            } => (from, e),
            Incoming::Frame {
                frame:
                    Frame::Drained {
                        worker,
                        drained,
                        capacity,
                    },
                ..
            } => {
                self.out.events += 1;
                self.drained.insert(worker, (drained, capacity));
                return;
            }
            Incoming::PeerLost { peer } => return self.worker_lost(peer),
            Incoming::PeerUp { peer, .. } => {
                if let Some(pool) = self.pools.get(&peer).copied() {
                    self.frontend.worker_back(peer, pool);
                }
                return;
            }
            _ => return,
        };
        self.out.events += 1;
        let pool = self.pools.get(&from).copied().unwrap_or(Pool::Decode);
        match &ev {
            WorkerEvent::Transition(t) => {
                self.out.transcript.record(t);
                if t.to == RoleState::Destination(DestinationState::Active) {
                    self.out.handoffs += 1;
                }
            }
            WorkerEvent::RequestFinished { request, .. }
                if pool != Pool::Prefill && self.outstanding.remove(request) =>
            {
                self.out.completed += 1;
            }
            WorkerEvent::RoleEnded {
                request,
                role,
                reason: Some(_),
                ..
            } => {
                // A destination that fails ends the request; so does a source
                // that fails before any destination was routed.
                let dead = *role == Role::Destination || !self.routed_to_decode.contains(request);
                if dead && self.outstanding.remove(request) {
                    self.out.failed += 1;
                }
            }
            _ => {}
        }
        for (to, req, delay) in self.frontend.on_event(from, pool, &ev, now) {
            self.seq += 1;
            self.delayed.insert((now + delay, self.seq), (to, req));
        }
    }
}
