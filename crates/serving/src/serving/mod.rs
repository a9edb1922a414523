//! [`Serving`]: the engine's [`Director`] for serving a workload: the shared
//! [`handoff_router::Frontend`] routes, the [`Recorder`] measures, and the
//! lifecycle [`Transcript`] is kept when asked. Replay and every live mode
//! direct their engines with it, so they report the same way.
//!
//! It also decides each request's outcome. A request whose current handoff
//! attempt ends early because a worker was lost (torn down, peer lost or
//! restarted) or its transfer failed is migrated once, as Dynamo does: its
//! bookings are released, the attempt is voided and the request is routed
//! again as a new attempt (a new handoff id) to the workers still up. It
//! fails only when it already was migrated, the reason is not a loss
//! (expiries, refusals, client cancels), or no worker can take it. Events of
//! a voided attempt still reach the recorder's lifecycle figures but no
//! longer move the router or the request's outcome.
//!
//! Closed-loop sessions ([`Serving::set_sessions`]): a session's first turn
//! arrives at its trace time; each later turn arrives its think time
//! (`TraceItem::delay`) after the previous turn finished or failed, and the
//! client closes the session `close_delay` after its last turn, which frees
//! its slot and snapshots on the workers (`WorkerRequest::CloseSession`).
//! Routing is the frontend's session-affine mode.

mod director;
mod migration;
mod proxied;

use crate::kv_order::KvOrder;
use crate::report::{Details, Recorder, Report, RequestSink};
use handoff_core::fasthash::{FastMap, FastSet};
use handoff_core::host::HostFinal;
use handoff_core::{
    CancelReason, DestinationState, Generation, HandoffId, Instant, Request, RequestError,
    RequestId, RoleState, Transcript, WorkerEvent, WorkerId, WorkerRequest,
};
use handoff_core::{Duration, FailureReason, SessionId};
use handoff_deployment::{deployment, frontend_config, DeploymentConfig};
use handoff_engine::fault::FaultCounts;
use handoff_engine::{Director, Route, Undeliverable};
use handoff_router::{Frontend, Pool, SessionRouting};
use handoff_workload::TraceItem;
use std::collections::{BTreeMap, VecDeque};

/// Something due in a closed-loop session run.
enum Due {
    Turn(Box<TraceItem>),
    Close(SessionId),
}

/// Closed-loop session arrivals; see the module docs.
struct SessionLoop {
    close_delay: Duration,
    /// Turns not sent yet, per session, in order.
    turns: BTreeMap<SessionId, VecDeque<TraceItem>>,
    /// What is due, by (time, order of scheduling).
    due: BTreeMap<(Instant, u64), Due>,
    order: u64,
    /// The session and turn index of each turn in flight.
    of_request: FastMap<RequestId, (SessionId, u32)>,
    /// Force a capacity eviction of the session's slot after this turn.
    evict_after_turn: Option<u32>,
    /// Fixed frontend latencies of a session's turns.
    overheads: handoff_deployment::SessionOverheads,
}

impl SessionLoop {
    fn schedule(&mut self, at: Instant, what: Due) {
        self.order += 1;
        self.due.insert((at, self.order), what);
    }

    /// The turn `r` ended (finished or failed): its session's next turn
    /// after its think time, or the close.
    fn turn_ended(&mut self, r: RequestId, now: Instant) {
        let Some((s, _)) = self.of_request.remove(&r) else {
            return;
        };
        match self.turns.get_mut(&s).and_then(VecDeque::pop_front) {
            Some(item) => {
                let at = now + item.delay.unwrap_or(Duration::ZERO);
                self.schedule(at, Due::Turn(Box::new(item)));
            }
            None => {
                self.turns.remove(&s);
                self.schedule(now + self.close_delay, Due::Close(s));
            }
        }
    }
}

/// What the director keeps of a request until it ends.
struct Flight {
    /// The request as it arrived, to route it again.
    request: Request,
    /// The worker it was last routed to.
    holder: WorkerId,
    /// Its current handoff attempt, if it is handed off.
    attempt: Option<HandoffId>,
    /// It was migrated once already.
    migrated: bool,
    /// A destination was routed for its current attempt: from then on the
    /// destination decides its fate (a source whose lease ran out after its
    /// reader activated fails nothing).
    has_destination: bool,
    /// Its destination activated (holds the KV and decodes): from then on
    /// no source's fate matters to it.
    destination_active: bool,
    /// Roles of its current attempt routed and not yet ended, and where:
    /// what a client cancel must reach.
    roles: Vec<(WorkerId, HandoffId)>,
    /// Served whole on the worker a proxy sent it to, though that worker
    /// is in a disaggregated pool ([`Serving::arrive_local`]): its tokens
    /// and its finish count even on a prefill worker.
    local: bool,
}

/// See the module docs.
pub struct Serving<I> {
    frontend: Frontend,
    pools: Vec<Pool>,
    workload: I,
    next: Option<TraceItem>,
    rec: Option<Recorder>,
    transcript: Option<Transcript>,
    report: Option<Report>,
    flights: FastMap<RequestId, Flight>,
    /// Attempts a migration replaced: their events still feed the figures
    /// but no longer move the router or the request's outcome.
    voided: FastSet<HandoffId>,
    /// Requests their clients cancelled whose source role has not ended:
    /// a decode the frontend routes for one afterwards (its source pinned
    /// after the cancel) is not sent, and its booking comes off at once.
    cancelled: FastSet<RequestId>,
    /// Requests ever migrated (the DST checker allows their second booking).
    rerouted: FastSet<RequestId>,
    /// Migrate requests whose worker was lost (on by default).
    migration: bool,
    /// What a request whose KV load failed does (vLLM's
    /// `kv_load_failure_policy`).
    kv_load_failure: handoff_core::KvLoadFailurePolicy,
    lost: Vec<WorkerId>,
    /// An elastic run's fleet history (the report's scaling section) and
    /// GPUs per prefill and decode worker.
    fleet: Option<handoff_engine::scale::FleetSummary>,
    fleet_gpus: [u32; 2],
    /// Roles unwound by removals, by reason (the scaling section).
    unwinds: crate::report::Unwinds,
    /// Closed loop: requests allowed in flight (`None`: open loop, at the
    /// workload's timestamps).
    concurrency: Option<usize>,
    /// Closed-loop sessions, when on.
    sessions: Option<SessionLoop>,
    /// The seed's §6 log and per-request session fields (session runs).
    session_log: Option<crate::session_log::SessionLog>,
    /// The model time of the last callback (closed-loop arrivals happen
    /// then).
    now: Instant,
    details: Option<Details>,
    /// Every worker's KV events, in each worker's id order
    /// (`--kv-events-out`).
    kv_sink: Option<OrderedSink>,
}

/// Receives every KV event a worker reports, with the worker and when
/// (`Serving::set_kv_sink`).
pub type KvSink = Box<dyn FnMut(WorkerId, &handoff_core::KvEvent, Instant)>;

/// A [`KvSink`] fed through a [`KvOrder`]: it sees each worker's events in
/// the order the worker produced them.
struct OrderedSink {
    sink: KvSink,
    order: KvOrder,
}

impl OrderedSink {
    fn event(&mut self, w: WorkerId, ev: &handoff_core::KvEvent, at: Instant) {
        let mut out = Vec::new();
        self.order.push(w, ev.clone(), at, &mut out);
        self.send(out);
    }

    fn worker_down(&mut self, w: WorkerId) {
        let mut out = Vec::new();
        self.order.worker_down(w, &mut out);
        self.send(out);
    }

    fn finish(&mut self) {
        let mut out = Vec::new();
        self.order.finish(&mut out);
        self.send(out);
    }

    fn send(&mut self, out: Vec<crate::kv_order::Released>) {
        for (w, e, at) in out {
            (self.sink)(w, &e, at);
        }
    }
}

/// The request and attempt `r` carries (`None` for a session close, which
/// belongs to no request).
fn parts(r: &WorkerRequest) -> Option<(RequestId, Option<HandoffId>)> {
    match r {
        WorkerRequest::Ordinary(q) => Some((q.id, None)),
        WorkerRequest::HandoffSource { request, id }
        | WorkerRequest::HandoffDestination { request, id, .. } => Some((request.id, Some(*id))),
        WorkerRequest::CloseSession(_)
        | WorkerRequest::EvictSession(_)
        | WorkerRequest::PushSource { .. }
        | WorkerRequest::PushDestination { .. } => None,
    }
}

/// Whether an early end of `reason` is a loss a new attempt can get past.
fn migratable(reason: CancelReason) -> bool {
    matches!(
        reason,
        CancelReason::Teardown
            | CancelReason::PeerLost
            | CancelReason::PeerRestarted
            | CancelReason::TransferFailed
    )
}

impl<I: Iterator<Item = TraceItem>> Serving<I> {
    /// A request's last token: it leaves the flights, and a session turn
    /// ends (with the seed's forced eviction after the configured turn).
    fn request_finished(
        &mut self,
        w: WorkerId,
        request: RequestId,
        now: Instant,
        out: &mut Vec<Route>,
    ) {
        self.flights.remove(&request);
        if let Some(lp) = self.sessions.as_mut() {
            let turn = lp.of_request.get(&request).copied();
            if let (Some((s, k)), Some(n)) = (turn, lp.evict_after_turn) {
                if k == n {
                    out.push(Route {
                        to: w,
                        request: WorkerRequest::EvictSession(s),
                        delay: handoff_core::Duration::ZERO,
                    });
                }
            }
            lp.turn_ended(request, now);
        }
        if let Some(log) = self.session_log.as_mut() {
            log.take_fields(request);
        }
    }

    /// A transfer of handoff `id` (of `request`) started at `at`: only the
    /// recorder reads it.
    fn transfer_started(&mut self, id: HandoffId, request: RequestId, at: Instant) {
        if let Some(rec) = self.rec.as_mut() {
            rec.transfer_started(id, request, at);
        }
    }

    /// A live role of `request` ended on `w`: it leaves the flight, and an
    /// early end migrates or fails the request unless an active
    /// destination elsewhere decides. Returns whether the request was
    /// migrated (its event then routes nothing more).
    #[allow(clippy::too_many_arguments)]
    fn role_ended(
        &mut self,
        w: WorkerId,
        id: HandoffId,
        request: RequestId,
        role: handoff_core::Role,
        reason: Option<CancelReason>,
        now: Instant,
        out: &mut Vec<Route>,
    ) -> bool {
        if let Some(f) = self.flights.get_mut(&request) {
            f.roles.retain(|x| *x != (w, id));
        }
        if role == handoff_core::Role::Source {
            self.cancelled.remove(&request);
        }
        if let Some(reason) = reason {
            // Source-first, a destination reading a source that ended reports
            // the failed load itself (and may recompute). Destination-first,
            // a destination not yet active waits for its source's KV, which
            // a source that gave up on its own (SGLang's bootstrap timeout,
            // `reservation-expired`, under overload) never sends: that
            // reason is the request's, not the `peer-aborted` its
            // destination later ends with. A lost peer or an abort from the
            // destination still leaves the decision to the usual paths.
            let gave_up = self.frontend.policy().source_writes()
                && !migratable(reason)
                && reason != CancelReason::PeerAborted;
            let destination_decides = role == handoff_core::Role::Source
                && self
                    .flights
                    .get(&request)
                    .is_some_and(|f| f.has_destination && (!gave_up || f.destination_active));
            let recomputed = role == handoff_core::Role::Destination
                && reason == CancelReason::KvLoadFailed
                && self.kv_load_failure == handoff_core::KvLoadFailurePolicy::Recompute;
            // A source outliving its destination's failed load (told by the
            // destination's abort) ends an attempt the request already left
            // to recompute on its decode worker (`Serving::recompute`).
            let superseded = role == handoff_core::Role::Source
                && self
                    .flights
                    .get(&request)
                    .is_some_and(|f| f.attempt.is_none());
            if destination_decides || superseded {
                // The destination lives on elsewhere (an active one
                // ignores its source's fate): it decides.
            } else if recomputed {
                // The decode worker computes the prompt itself
                // (`Serving::recompute`, once its booking was released).
            } else if migratable(reason) {
                if self.migrate_or_fail(request, reason.into(), now, out, None) {
                    return true;
                }
            } else {
                self.fail(request, reason.into(), None);
            }
        }
        false
    }

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
            flights: FastMap::default(),
            voided: FastSet::default(),
            cancelled: FastSet::default(),
            rerouted: FastSet::default(),
            migration: true,
            kv_load_failure: handoff_core::KvLoadFailurePolicy::Fail,
            lost: Vec::new(),
            fleet: None,
            fleet_gpus: [1, 1],
            unwinds: crate::report::Unwinds::default(),
            concurrency: None,
            sessions: None,
            session_log: None,
            now: Instant::ZERO,
            details: None,
            kv_sink: None,
        }
    }

    /// Closed loop: at most `n` requests in flight. Requests arrive when a
    /// slot is free, at that model time, whatever their timestamps; the
    /// engine must be asked again after a completion
    /// ([`handoff_engine::Engine::arrivals_changed`]), which
    /// [`crate::Replay::closed_loop`] does.
    pub fn set_concurrency(&mut self, n: usize) {
        self.concurrency = Some(n.max(1));
    }

    /// Hands every KV event the workers report to `sink`, physical events
    /// all (a voided attempt's blocks were still stored and evicted), each
    /// worker's in the order the worker produced them ([`KvOrder`]): ids
    /// strictly increasing and, within one incarnation, without gaps.
    pub fn set_kv_sink(&mut self, sink: KvSink) {
        self.kv_sink = Some(OrderedSink {
            sink,
            order: KvOrder::new(),
        });
    }

    /// Closed-loop session arrivals, with session-affine routing (see the
    /// module docs); the engine must be asked again after every unit of
    /// work, as for [`Serving::set_concurrency`]. Reads the whole workload
    /// now (turns wait for their predecessors). Turns of no session arrive
    /// at their trace times.
    /// `evict_after_turn` forces a capacity eviction of a session's slot
    /// after its turn of that index finishes (the seed's §8 smoke test).
    /// Without `routing` the turns are routed like any request (naive PD
    /// disaggregation on a session trace, the seed's E1).
    pub fn set_sessions(
        &mut self,
        routing: Option<SessionRouting>,
        close_delay: Duration,
        evict_after_turn: Option<u32>,
    ) {
        if let Some(r) = routing {
            self.frontend.set_sessions(r);
        }
        let mut lp = SessionLoop {
            evict_after_turn,
            overheads: handoff_deployment::SessionOverheads::default(),
            close_delay,
            turns: BTreeMap::new(),
            due: BTreeMap::new(),
            order: 0,
            of_request: FastMap::default(),
        };
        for item in self.next.take().into_iter().chain(self.workload.by_ref()) {
            match item.request.session {
                Some(s) => lp.turns.entry(s).or_default().push_back(item),
                None => lp.schedule(item.request.arrival, Due::Turn(Box::new(item))),
            }
        }
        let firsts: Vec<SessionId> = lp.turns.keys().copied().collect();
        for s in firsts {
            if let Some(item) = lp.turns.get_mut(&s).and_then(VecDeque::pop_front) {
                lp.schedule(item.request.arrival, Due::Turn(Box::new(item)));
            }
        }
        self.sessions = Some(lp);
        self.session_log = Some(crate::session_log::SessionLog::new(true));
    }

    /// Delays each session-routed turn by `o` (see
    /// [`crate::SessionOverheads`]); after [`Serving::set_sessions`], which
    /// starts with none.
    pub fn set_session_overheads(&mut self, o: handoff_deployment::SessionOverheads) {
        if let Some(lp) = self.sessions.as_mut() {
            lp.overheads = o;
        }
    }

    /// The session log (session runs only).
    pub fn session_log(&self) -> Option<&crate::session_log::SessionLog> {
        self.session_log.as_ref()
    }

    /// See [`Recorder::set_request_sink`].
    pub fn set_request_sink(&mut self, sink: RequestSink) {
        if let Some(rec) = self.rec.as_mut() {
            rec.set_request_sink(sink);
        }
    }

    /// GPUs per prefill and per decode worker, for the scaling section's
    /// GPU-hours (1 each unless set).
    pub fn set_fleet_gpus(&mut self, prefill: u32, decode: u32) {
        self.fleet_gpus = [prefill, decode];
    }

    /// See [`Recorder::set_slo_window`].
    pub fn set_slo_window(&mut self, window: handoff_core::Duration) {
        if let Some(rec) = self.rec.as_mut() {
            rec.set_slo_window(window);
        }
    }

    /// See [`Recorder::keep_details`].
    pub fn keep_details(&mut self, points: usize) {
        if let Some(rec) = self.rec.as_mut() {
            rec.keep_details(points);
        }
    }

    /// See [`Recorder::fold_latencies`].
    pub fn fold_latencies(&mut self) {
        if let Some(rec) = self.rec.as_mut() {
            rec.fold_latencies();
        }
    }

    /// See [`Recorder::capacity`].
    pub fn capacity(&mut self, w: WorkerId, at: Instant, c: &handoff_core::KvCapacitySnapshot) {
        if let Some(rec) = self.rec.as_mut() {
            rec.capacity(w, at, c);
        }
    }

    /// The session log's JSONL lines (empty unless a session run).
    pub fn take_session_lines(&mut self) -> Vec<String> {
        self.session_log
            .as_mut()
            .map(crate::session_log::SessionLog::take_lines)
            .unwrap_or_default()
    }

    /// The report and the transcript (if kept), once the engine finished.
    pub fn into_outcome(self) -> (Option<Report>, Option<Transcript>) {
        (self.report, self.transcript)
    }

    /// A route of `request` to `worker` that its director held back and
    /// dropped (an SGLang decode leg's early pair whose prefill leg never
    /// came): no role on `worker` will ever report it, so its booking there
    /// is released now, as for a worker lost before delivery.
    pub fn route_dropped(&mut self, request: RequestId, worker: WorkerId) {
        self.frontend.request_lost(request, worker);
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

    /// Whether `request` arrived and has neither finished nor failed (as
    /// the report will count it); `false` once the run finished.
    pub fn is_in_flight(&self, request: RequestId) -> bool {
        self.rec.as_ref().is_some_and(|r| r.is_in_flight(request))
    }

    /// The router frontend, for inspection (its routers' bookings).
    pub fn frontend(&self) -> &Frontend {
        &self.frontend
    }

    fn pool(&self, w: WorkerId) -> Pool {
        self.pools
            .get(w.0 as usize)
            .copied()
            .unwrap_or(Pool::Decode)
    }

    /// Notes where each routed request went and under which attempt.
    fn track(&mut self, to: WorkerId, request: &WorkerRequest) {
        let Some((rid, attempt)) = parts(request) else {
            return;
        };
        if let Some(f) = self.flights.get_mut(&rid) {
            f.holder = to;
            if let Some(id) = attempt {
                f.attempt = attempt;
                f.roles.push((to, id));
            }
            if matches!(request, WorkerRequest::HandoffDestination { .. }) {
                f.has_destination = true;
            }
        }
    }

    /// Whether `request`, routed to `to` by the frontend, is of a request
    /// its client cancelled: then it is not sent (a proxy sends no decode
    /// for a request its client left) and its booking on `to` comes off.
    fn drop_cancelled(&mut self, to: WorkerId, request: &WorkerRequest) -> bool {
        let Some((rid, _)) = parts(request) else {
            return false;
        };
        if !self.cancelled.contains(&rid) {
            return false;
        }
        self.frontend.request_lost(rid, to);
        true
    }

    /// Fails `r`. Its bookings come off as its roles end (each where it
    /// lives), except on `lost`, a worker gone for good, where no role will
    /// ever report it.
    fn fail(&mut self, r: RequestId, reason: FailureReason, lost: Option<WorkerId>) {
        self.flights.remove(&r);
        if let Some(lp) = self.sessions.as_mut() {
            lp.turn_ended(r, self.now);
        }
        if let Some(log) = self.session_log.as_mut() {
            log.take_fields(r);
        }
        if let Some(w) = lost {
            self.frontend.request_lost(r, w);
        }
        let now = self.now;
        if let Some(rec) = self.rec.as_mut() {
            rec.fail_at(r, reason, Some(now));
        }
    }

    /// Migrates `r` once, or fails it for `reason`. Returns whether its
    /// bookings were released here (a migration was tried): the event that
    /// caused it must then not release them again.
    fn migrate_or_fail(
        &mut self,
        r: RequestId,
        reason: FailureReason,
        now: Instant,
        out: &mut Vec<Route>,
        lost: Option<WorkerId>,
    ) -> bool {
        let Some(f) = self.flights.get_mut(&r) else {
            return false;
        };
        if f.migrated || !self.migration {
            self.fail(r, reason, lost);
            return false;
        }
        f.migrated = true;
        if let Some(a) = f.attempt.take() {
            self.voided.insert(a);
        }
        self.rerouted.insert(r);
        let Some(f) = self.flights.get_mut(&r) else {
            return false;
        };
        f.has_destination = false;
        f.destination_active = false;
        f.roles.clear();
        let request = f.request.clone();
        self.frontend.request_rerouted(r);
        let routes = self.frontend.arrive(request, now);
        if routes.is_empty() {
            self.fail(r, reason, None);
            return true;
        }
        if let Some(rec) = self.rec.as_mut() {
            rec.migrated(r);
        }
        for (to, request) in routes {
            self.track(to, &request);
            out.push(Route {
                to,
                request,
                delay: handoff_core::Duration::ZERO,
            });
        }
        true
    }

    /// The destination of `r` on decode worker `w` ended with a failed KV
    /// load: under `recompute` the request goes on there as an ordinary
    /// request (the decode worker computes the prompt itself); if `w`
    /// cannot take it, or under `fail`, the request fails.
    fn recompute(&mut self, w: WorkerId, r: RequestId, now: Instant, out: &mut Vec<Route>) {
        if self.kv_load_failure != handoff_core::KvLoadFailurePolicy::Recompute {
            return;
        }
        let Some(f) = self.flights.get_mut(&r) else {
            return;
        };
        f.has_destination = false;
        f.destination_active = false;
        f.attempt = None;
        let request = f.request.clone();
        // Booked a second time, as a migrated request is.
        self.rerouted.insert(r);
        match self.frontend.recompute_on(w, request, now) {
            Some(request) => self.send_now(w, request, out),
            None => self.fail(r, CancelReason::KvLoadFailed.into(), None),
        }
    }

    /// Whether `e` is a D→P push's.
    fn push_event(&self, e: &WorkerEvent) -> bool {
        let request = match e {
            WorkerEvent::Transition(t) => t.request,
            WorkerEvent::PrefillPinned { request, .. }
            | WorkerEvent::StartTransfer { request, .. }
            | WorkerEvent::RoleEnded { request, .. } => *request,
            _ => return false,
        };
        handoff_router::is_push(request)
    }

    /// Whether `e` belongs to a voided attempt (one a migration replaced).
    fn stale(&self, e: &WorkerEvent) -> bool {
        let (id, request) = match e {
            WorkerEvent::Transition(t) => (t.id, t.request),
            WorkerEvent::PrefillPinned { id, request, .. }
            | WorkerEvent::StartTransfer { id, request, .. }
            | WorkerEvent::RoleEnded { id, request, .. } => (*id, *request),
            _ => return false,
        };
        let _ = request;
        self.voided.contains(&id)
    }
}

/// The director that serves `workload` on `cfg`'s deployment.
pub fn serving<I: Iterator<Item = TraceItem>>(cfg: &DeploymentConfig, workload: I) -> Serving<I> {
    let workers = deployment(cfg);
    let frontend = Frontend::new(frontend_config(cfg), &workers);
    let rec = Recorder::new(cfg, workers.iter().copied());
    let pools = workers.iter().map(|(_, p)| *p).collect();
    let mut s = Serving::new(frontend, pools, workload, rec, cfg.transcript);
    s.kv_load_failure = cfg.handoff.kv_load_failure;
    s
}
