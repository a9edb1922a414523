//! The frontend: routes arrivals to pools and keeps the routers' bookings in
//! step with worker events (DEP "Router And Engine Accounting"):
//!
//! - prefill compute load is released when the prefill pins (or, aggregated,
//!   emits its first token);
//! - prefill request ownership is released when the source role ends;
//! - decode load is booked at selection and released when the request
//!   completes or its destination role fails terminally.
//!
//! It is sans-IO like the workers: it answers with requests to deliver.
//!
//! Session-affine mode ([`Frontend::set_sessions`], seed 002's KVC): a
//! session table maps each session to the decode worker holding its slot. A
//! turn of a resident session goes straight to that worker as an ordinary
//! request (direct-to-D append); otherwise — first turn, slot evicted
//! (admission refused for capacity), worker gone, or moved by the rebalance
//! policy — it is reseeded: prefilled on a prefill worker and handed to a
//! decode worker destination-first, which then holds the session. The table
//! follows the workers' `SlotEvicted` session events.

use crate::{KvKnobs, PoolRole, Router, RouterConfig, RouterMode};
use handoff_core::fasthash::ChurnMap;
use handoff_core::session::{SessionEvent, SlotEvictReason};
use handoff_core::SessionId;
use handoff_core::{
    Duration, Generation, HandoffId, HandoffIdGen, HandoffPolicy, Instant, Request, RequestId,
    Role, SourceReady, WorkerEvent, WorkerId, WorkerRequest,
};
use std::collections::BTreeMap;

/// The worker that mints handoff ids (the frontend itself).
pub const FRONTEND_ID: WorkerId = WorkerId(u32::MAX);

/// D→P pushes serve no client request; their transitions carry request ids
/// from this bit up, which no trace uses.
pub const PUSH_REQUESTS: u64 = 1 << 63;

/// Whether `r` names a D→P push rather than a client request.
pub fn is_push(r: RequestId) -> bool {
    r.0 & PUSH_REQUESTS != 0
}

/// How the frontend routes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FrontendConfig {
    /// The handoff ordering (ignored when aggregated).
    pub policy: HandoffPolicy,
    /// No disaggregation: one pool does prefill and decode.
    pub aggregated: bool,
    /// Routing mode of both pools: a built-in policy, or
    /// [`RouterMode::Custom`], whose factory builds one policy per pool
    /// (the decode role for an aggregated pool).
    pub mode: RouterMode,
    /// Block size requests are hashed with (the engines' KV event granularity).
    pub block_size: u32,
    /// Router seed.
    pub seed: u64,
    /// The `kv` mode's knobs (Dynamo's), for both pools.
    pub kv: KvKnobs,
    /// Delay of the frontend hop that routes decode after a source-first pin.
    pub hop: Duration,
    /// Disabled ordering: delay between prefill completion and decode submission.
    pub disabled_delay: Duration,
}

/// Which pool a worker belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pool {
    /// Prefill (source) workers.
    Prefill,
    /// Decode (destination) workers.
    Decode,
    /// Workers that do both (no disaggregation).
    Aggregated,
}

impl Pool {
    /// Stable lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Pool::Prefill => "prefill",
            Pool::Decode => "decode",
            Pool::Aggregated => "aggregated",
        }
    }
}

/// Session-affine routing knobs (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionRouting {
    /// Rebalance: reseed a resident session elsewhere when its decode
    /// worker has at least this many more live bookings than the least
    /// booked other decode worker; 0 disables.
    pub rebalance_threshold: u32,
}

/// Why a resident-or-not session turn was reseeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReseedCause {
    /// The slot was evicted for room (the worker refused to keep it).
    Capacity,
    /// The slot is gone for another reason (forced, closed, never kept).
    NotResident,
    /// The worker holding the slot is down.
    WorkerDown,
    /// The rebalance policy moved the session.
    Rebalance,
}

impl ReseedCause {
    /// Stable name for reports.
    pub fn name(self) -> &'static str {
        match self {
            ReseedCause::Capacity => "capacity",
            ReseedCause::NotResident => "not_resident",
            ReseedCause::WorkerDown => "worker_down",
            ReseedCause::Rebalance => "rebalance",
        }
    }
}

/// How a session's turn was routed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SessionRoute {
    /// The session's first turn here: prefilled and handed off.
    Seed,
    /// Appended on the decode worker holding the session.
    Direct,
    /// Prefilled again (or bypassed with a snapshot) and handed to a
    /// decode worker.
    Reseed(ReseedCause),
}

impl SessionRoute {
    /// Stable name for reports (the seed's `execution_mode`).
    pub fn name(self) -> &'static str {
        match self {
            SessionRoute::Seed => "seed",
            SessionRoute::Direct => "direct",
            SessionRoute::Reseed(_) => "reseed",
        }
    }
}

#[derive(Debug, Default)]
struct SessionTable {
    routing: Option<SessionRouting>,
    /// Session → where its slot is (or is about to be).
    resident: BTreeMap<SessionId, Placement>,
    /// Why a session's slot went away, until its next turn.
    gone: BTreeMap<SessionId, ReseedCause>,
    /// Sessions seen (a turn of one not seen is a seed).
    seen: BTreeMap<SessionId, ()>,
    /// The prefill worker that last prefilled each session: where its
    /// decode worker pushes snapshots.
    prefill_of: BTreeMap<SessionId, WorkerId>,
    /// Pushes routed (their transitions carry `PUSH_REQUESTS + n`).
    pushes: u64,
    last_route: Option<SessionRoute>,
}

/// Where the session table places a session: the decode worker holding (or
/// about to hold) its slot, and the last turn routed there. A slot eviction
/// from that worker means the session left it only when the evicted slot is
/// that turn's; an older slot's eviction (the turn has not yet reached the
/// worker, or not yet committed) leaves the placement, since the turn
/// builds its own slot there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Placement {
    worker: WorkerId,
    turn: RequestId,
}

/// See the module docs.
pub struct Frontend {
    policy: HandoffPolicy,
    aggregated: bool,
    prefill: Router,
    decode: Option<Router>,
    ids: HandoffIdGen,
    /// Requests between their prefill and decode routing, by id (lookups
    /// only).
    held: ChurnMap<RequestId, Request>,
    /// Source-first prefills that pinned while no decode worker could take
    /// them (all down): routed when one comes back, in pin order.
    waiting: Vec<(WorkerId, HandoffId, SourceReady, RequestId)>,
    hop: Duration,
    disabled_delay: Duration,
    sessions: SessionTable,
}

impl Frontend {
    /// A frontend over `workers`.
    pub fn new(cfg: FrontendConfig, workers: &[(WorkerId, Pool)]) -> Self {
        let pick = |p: Pool| {
            workers
                .iter()
                .filter(|(_, q)| *q == p)
                .map(|(w, _)| *w)
                .collect::<Vec<_>>()
        };
        let aggregated = cfg.aggregated;
        let prefill_ids = if aggregated {
            pick(Pool::Aggregated)
        } else {
            pick(Pool::Prefill)
        };
        let prefill_role = if aggregated {
            PoolRole::Decode
        } else {
            PoolRole::Prefill
        };
        let prefill = Router::new(
            RouterConfig::new(prefill_role, cfg.mode, cfg.block_size)
                .with_seed(cfg.seed)
                .with_kv(cfg.kv)
                .with_aggregated(aggregated),
            prefill_ids,
        );
        let decode = (!aggregated).then(|| {
            Router::new(
                RouterConfig::new(PoolRole::Decode, cfg.mode, cfg.block_size)
                    .with_seed(cfg.seed ^ 0x5eed)
                    .with_kv(cfg.kv),
                pick(Pool::Decode),
            )
        });
        Frontend {
            policy: if aggregated {
                HandoffPolicy::Disabled
            } else {
                cfg.policy
            },
            aggregated,
            prefill,
            decode,
            ids: HandoffIdGen::new(FRONTEND_ID, Generation(0)),
            held: ChurnMap::default(),
            waiting: Vec::new(),
            hop: cfg.hop,
            disabled_delay: cfg.disabled_delay,
            sessions: SessionTable::default(),
        }
    }

    /// Turns session-affine routing on (destination-first disaggregation
    /// only; otherwise it is ignored and turns route like any request).
    pub fn set_sessions(&mut self, routing: SessionRouting) {
        if !self.aggregated && self.policy == HandoffPolicy::DestinationFirst {
            self.sessions.routing = Some(routing);
        }
    }

    /// The handoff policy its disaggregated requests follow.
    pub fn policy(&self) -> HandoffPolicy {
        self.policy
    }

    /// Whether session-affine routing is on.
    pub fn sessions_on(&self) -> bool {
        self.sessions.routing.is_some()
    }

    /// The decode worker holding `session`, per the session table.
    pub fn session_worker(&self, session: SessionId) -> Option<WorkerId> {
        self.sessions.resident.get(&session).map(|p| p.worker)
    }

    /// How the last [`Frontend::arrive`] routed its request, if it was a
    /// session turn in session-affine mode.
    pub fn last_session_route(&self) -> Option<SessionRoute> {
        self.sessions.last_route
    }

    /// The client closed `session`: where to send the close (the decode
    /// worker holding its slot, and every prefill worker, which may hold a
    /// snapshot of it). The session leaves the table.
    pub fn close_session(&mut self, session: SessionId) -> Vec<(WorkerId, WorkerRequest)> {
        let mut out = Vec::new();
        if self.sessions.routing.is_none() {
            return out;
        }
        self.sessions.gone.remove(&session);
        self.sessions.seen.remove(&session);
        self.sessions.prefill_of.remove(&session);
        if let Some(d) = self.sessions.resident.remove(&session) {
            out.push((d.worker, WorkerRequest::CloseSession(session)));
        }
        for p in self.prefill.workers() {
            out.push((p, WorkerRequest::CloseSession(session)));
        }
        out
    }

    /// Session-affine routing of a turn: `Some` routes when it goes direct
    /// to the decode worker holding the session; `None` to reseed (the
    /// caller routes it as a handoff and records the chosen decode worker).
    fn route_session(
        &mut self,
        session: SessionId,
        request: &Request,
        now: Instant,
    ) -> Option<Vec<(WorkerId, WorkerRequest)>> {
        let routing = self.sessions.routing?;
        let first = self.sessions.seen.insert(session, ()).is_none();
        let Some(d) = self.sessions.resident.get(&session).map(|p| p.worker) else {
            let cause = self
                .sessions
                .gone
                .remove(&session)
                .unwrap_or(ReseedCause::NotResident);
            self.sessions.last_route = Some(if first {
                SessionRoute::Seed
            } else {
                SessionRoute::Reseed(cause)
            });
            return None;
        };
        let decode = self.decode.as_mut()?;
        let load = decode.load(d);
        if !load.is_some_and(|l| l.available) {
            self.sessions.resident.remove(&session);
            self.sessions.last_route = Some(SessionRoute::Reseed(ReseedCause::WorkerDown));
            return None;
        }
        if routing.rebalance_threshold > 0 {
            let mine = load.map_or(0, |l| l.booked_requests);
            let least = decode
                .loads()
                .filter(|(w, l)| *w != d && l.available)
                .map(|(_, l)| l.booked_requests)
                .min();
            if least.is_some_and(|l| mine >= l + u64::from(routing.rebalance_threshold)) {
                self.sessions.last_route = Some(SessionRoute::Reseed(ReseedCause::Rebalance));
                return None;
            }
        }
        decode.book(d, request, now)?;
        self.sessions.resident.insert(
            session,
            Placement {
                worker: d,
                turn: request.id,
            },
        );
        self.sessions.last_route = Some(SessionRoute::Direct);
        Some(vec![(d, WorkerRequest::Ordinary(request.clone()))])
    }

    /// Reseed `turn` went to decode worker `to`: it holds the session now;
    /// a slot still on another worker (a rebalance) is closed there.
    fn reseeded(
        &mut self,
        session: SessionId,
        turn: RequestId,
        to: WorkerId,
        out: &mut Vec<(WorkerId, WorkerRequest)>,
    ) {
        let placed = Placement { worker: to, turn };
        if let Some(old) = self.sessions.resident.insert(session, placed) {
            if old.worker != to {
                out.push((old.worker, WorkerRequest::CloseSession(session)));
            }
        }
    }

    /// A decode worker locked a slot for a D→P push: route the reversed
    /// handoff, `w` the source, the session's prefill worker the
    /// destination.
    fn route_push(
        &mut self,
        w: WorkerId,
        event: &SessionEvent,
        out: &mut Vec<(WorkerId, WorkerRequest, Duration)>,
    ) {
        let SessionEvent::PushEnqueued {
            session,
            lock,
            tokens,
            ..
        } = *event
        else {
            return;
        };
        if self.sessions.routing.is_none() {
            return;
        }
        let known = self.sessions.prefill_of.get(&session).copied();
        let Some(p) = known.or_else(|| self.prefill.workers().next()) else {
            return;
        };
        let id = self.ids.next_id();
        self.sessions.pushes += 1;
        let request = RequestId(PUSH_REQUESTS | self.sessions.pushes);
        out.push((
            w,
            WorkerRequest::PushSource {
                id,
                request,
                session,
                lock,
                tokens,
            },
            Duration::ZERO,
        ));
        out.push((
            p,
            WorkerRequest::PushDestination {
                id,
                request,
                session,
                tokens,
                source: w,
            },
            Duration::ZERO,
        ));
    }

    /// The session table follows slot evictions: the session leaves `w`
    /// when `w` frees the slot of the turn last placed there (not a slot a
    /// newer turn replaces, nor an older one a newer turn will rebuild).
    fn on_session_event(&mut self, w: WorkerId, event: &SessionEvent) {
        if let SessionEvent::SlotEvicted {
            session,
            turn,
            reason,
            ..
        } = *event
        {
            let placed = Placement { worker: w, turn };
            if reason != SlotEvictReason::Replaced
                && self.sessions.resident.get(&session) == Some(&placed)
            {
                self.sessions.resident.remove(&session);
                let cause = match reason {
                    SlotEvictReason::Capacity => ReseedCause::Capacity,
                    _ => ReseedCause::NotResident,
                };
                self.sessions.gone.insert(session, cause);
            }
        }
    }

    /// The prefill (or aggregated) pool's router, for inspection.
    pub fn prefill_router(&self) -> &Router {
        &self.prefill
    }

    /// The decode pool's router, for inspection (`None` when aggregated).
    pub fn decode_router(&self) -> Option<&Router> {
        self.decode.as_ref()
    }

    /// The decode pool's router, mutably (overlap queries hash into scratch).
    pub fn decode_router_mut(&mut self) -> Option<&mut Router> {
        self.decode.as_mut()
    }

    /// Worker `w` is gone: route nothing more to it. Its bookings stay until
    /// the requests they belong to end (their owners report that).
    pub fn worker_lost(&mut self, w: WorkerId) {
        let gone: Vec<SessionId> = self
            .sessions
            .resident
            .iter()
            .filter(|(_, d)| d.worker == w)
            .map(|(s, _)| *s)
            .collect();
        for s in gone {
            self.sessions.resident.remove(&s);
            self.sessions.gone.insert(s, ReseedCause::WorkerDown);
        }
        self.prefill.remove_worker(w);
        if let Some(d) = self.decode.as_mut() {
            d.remove_worker(w);
        }
    }

    /// Request `request` is gone from `worker` (lost with it, or never
    /// delivered to it): its booking on that worker, in either pool, is
    /// released, since no role there will ever report it. A booking on
    /// another worker stays: the role there ends (and releases it) as any
    /// role does.
    pub fn request_lost(&mut self, request: RequestId, worker: WorkerId) {
        if self
            .prefill
            .booking(request)
            .is_some_and(|b| b.worker == worker)
        {
            let _ = self.prefill.prefill_completed(request);
            let _ = self.prefill.request_released(request);
            self.held.remove(&request);
        }
        if let Some(d) = self.decode.as_mut() {
            if d.booking(request).is_some_and(|b| b.worker == worker) {
                let _ = d.request_released(request);
            }
        }
        self.waiting.retain(|x| x.3 != request);
    }

    /// Request `request` starts over as a new attempt (a migration): every
    /// booking it still holds, in either pool and on any worker, is
    /// released; its old attempt's roles end without moving the router.
    pub fn request_rerouted(&mut self, request: RequestId) {
        let _ = self.prefill.prefill_completed(request);
        let _ = self.prefill.request_released(request);
        if let Some(d) = self.decode.as_mut() {
            let _ = d.request_released(request);
        }
        self.held.remove(&request);
        self.waiting.retain(|x| x.3 != request);
    }

    /// Worker `w` is back (a restart): route to it again in `pool`. A decode
    /// worker's return routes the prefills that pinned while none was up;
    /// returns those routes.
    pub fn worker_back(
        &mut self,
        w: WorkerId,
        pool: Pool,
        now: Instant,
    ) -> Vec<(WorkerId, WorkerRequest, Duration)> {
        match (pool, self.decode.as_mut()) {
            (Pool::Decode, Some(d)) => {
                d.add_worker(w);
            }
            _ => {
                self.prefill.add_worker(w);
            }
        }
        let mut out = Vec::new();
        if pool == Pool::Decode {
            for (source, id, ready, request) in std::mem::take(&mut self.waiting) {
                self.route_decode(source, id, ready, request, now, &mut out);
            }
        }
        out
    }

    /// Books a decode worker for a pinned source-first prefill, or keeps it
    /// waiting when none can take it.
    fn route_decode(
        &mut self,
        source: WorkerId,
        id: HandoffId,
        ready: SourceReady,
        request: RequestId,
        now: Instant,
        out: &mut Vec<(WorkerId, WorkerRequest, Duration)>,
    ) {
        let Some(req) = self.held.get(&request) else {
            return;
        };
        let Some(d) = self.decode.as_mut() else {
            return;
        };
        match d.select(req, now).map(|s| s.worker) {
            Some(to) => {
                if let Some(req) = self.held.remove(&request) {
                    let r = WorkerRequest::HandoffDestination {
                        id,
                        request: req,
                        source,
                        ready: Some(ready),
                    };
                    out.push((to, r, self.hop));
                }
            }
            None => self.waiting.push((source, id, ready, request)),
        }
    }

    /// The destination of `request` on decode worker `w` found its source's
    /// KV released and the deployment recomputes (vLLM's
    /// `kv_load_failure_policy = recompute`): `w` computes the prompt
    /// itself, booked there again (the failed destination's booking came
    /// off with its end). `None` when `w` is not a selectable decode worker.
    pub fn recompute_on(
        &mut self,
        w: WorkerId,
        request: Request,
        now: Instant,
    ) -> Option<WorkerRequest> {
        self.decode.as_mut()?.book(w, &request, now)?;
        Some(WorkerRequest::Ordinary(request))
    }

    /// Routes a new request; returns where to deliver what (nothing when a
    /// pool it needs has no selectable worker; it then holds no booking).
    pub fn arrive(&mut self, request: Request, now: Instant) -> Vec<(WorkerId, WorkerRequest)> {
        self.sessions.last_route = None;
        let session = request.session.filter(|_| self.sessions.routing.is_some());
        if let Some(s) = session {
            if let Some(direct) = self.route_session(s, &request, now) {
                return direct;
            }
        }
        let turn = request.id;
        let mut routes = self.arrive_handoff(request, now);
        if let Some(s) = session {
            let dest = routes.iter().find_map(|(w, r)| {
                matches!(r, WorkerRequest::HandoffDestination { .. }).then_some(*w)
            });
            let source = routes
                .iter()
                .find_map(|(w, r)| matches!(r, WorkerRequest::HandoffSource { .. }).then_some(*w));
            if let Some(p) = source {
                self.sessions.prefill_of.insert(s, p);
            }
            if let Some(d) = dest {
                self.reseeded(s, turn, d, &mut routes);
            }
        }
        routes
    }

    fn arrive_handoff(&mut self, request: Request, now: Instant) -> Vec<(WorkerId, WorkerRequest)> {
        // A pool is empty when every worker of it is down (killed and not
        // yet restarted); the request is then unserved and the caller fails
        // it.
        let Some(p) = self.prefill.select(&request, now).map(|s| s.worker) else {
            return Vec::new();
        };
        if self.aggregated {
            return vec![(p, WorkerRequest::Ordinary(request))];
        }
        match self.policy {
            HandoffPolicy::Disabled => {
                let mut prefill_only = request.clone();
                prefill_only.max_output_tokens = 1;
                self.held.insert(request.id, request);
                vec![(p, WorkerRequest::Ordinary(prefill_only))]
            }
            HandoffPolicy::SourceFirst => {
                let id = self.ids.next_id();
                self.held.insert(request.id, request.clone());
                vec![(p, WorkerRequest::HandoffSource { id, request })]
            }
            // vLLM's push mode dispatches both legs at once too: the decode
            // needs only the prefill engine's identity to register its
            // blocks (`docs/design/nixl_kv_push_connector.md`, the proxy
            // sends both phases).
            HandoffPolicy::DestinationFirst | HandoffPolicy::Push => {
                let id = self.ids.next_id();
                let Some(d) = self
                    .decode
                    .as_mut()
                    .and_then(|r| r.select(&request, now))
                    .map(|s| s.worker)
                else {
                    // No decode worker: the request goes nowhere, so the
                    // prefill booking just made must not stay.
                    let _ = self.prefill.request_released(request.id);
                    return Vec::new();
                };
                let dest = WorkerRequest::HandoffDestination {
                    id,
                    request: request.clone(),
                    source: p,
                    ready: None,
                };
                vec![(p, WorkerRequest::HandoffSource { id, request }), (d, dest)]
            }
        }
    }

    /// Consumes a worker event; returns requests to deliver after a delay.
    pub fn on_event(
        &mut self,
        w: WorkerId,
        pool: Pool,
        event: &WorkerEvent,
        now: Instant,
    ) -> Vec<(WorkerId, WorkerRequest, Duration)> {
        let mut out = Vec::new();
        match event {
            WorkerEvent::Session { event, .. } => {
                self.on_session_event(w, event);
                self.route_push(w, event, &mut out);
            }
            WorkerEvent::Kv { event, .. } => match pool {
                Pool::Decode => {
                    if let Some(d) = self.decode.as_mut() {
                        d.on_kv_event(w, event);
                    }
                }
                _ => self.prefill.on_kv_event(w, event),
            },
            WorkerEvent::Tokens { emissions } if pool == Pool::Aggregated => {
                for e in emissions.iter().filter(|e| e.first) {
                    let _ = self.prefill.prefill_completed(e.request);
                }
            }
            WorkerEvent::PrefillPinned {
                id,
                request,
                blocks,
                tokens,
                ..
            } => {
                let _ = self.prefill.prefill_completed(*request);
                if self.policy == HandoffPolicy::SourceFirst {
                    let ready = SourceReady {
                        blocks: *blocks,
                        tokens: *tokens,
                    };
                    self.route_decode(w, *id, ready, *request, now, &mut out);
                }
            }
            WorkerEvent::RoleEnded {
                request,
                role,
                reason,
                ..
            } => match role {
                Role::Source => {
                    let _ = self.prefill.request_released(*request);
                    self.held.remove(request);
                    self.waiting.retain(|x| x.3 != *request);
                }
                Role::Destination => {
                    if reason.is_some() {
                        if let Some(d) = self.decode.as_mut() {
                            let _ = d.request_released(*request);
                        }
                    }
                }
            },
            WorkerEvent::RequestFinished { request, .. } => match pool {
                Pool::Aggregated => {
                    let _ = self.prefill.request_released(*request);
                }
                Pool::Decode => {
                    if let Some(d) = self.decode.as_mut() {
                        let _ = d.request_released(*request);
                    }
                }
                Pool::Prefill => {
                    // Disabled ordering: the prefill finished and freed as an
                    // ordinary request; decode gets it after the transfer delay.
                    let _ = self.prefill.prefill_completed(*request);
                    let _ = self.prefill.request_released(*request);
                    if let (Some(req), Some(d)) = (self.held.remove(request), self.decode.as_mut())
                    {
                        let Some(to) = d.select(&req, now).map(|s| s.worker) else {
                            return out;
                        };
                        out.push((to, WorkerRequest::Ordinary(req), self.disabled_delay));
                    }
                }
            },
            _ => {}
        }
        out
    }
}

mod proxied;

#[cfg(test)]
mod session_tests;
