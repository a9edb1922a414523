//! The [`Checker`]: every lifecycle rule, fed the workers' events in their own order and the director's view.

mod bookings;
mod hosts;
mod roles;
mod stale;

pub use stale::LeaseTerms;

use super::paths::*;
use super::violations::*;
use handoff_core::accounting::{check_identity, Holding, Ledger};
use handoff_core::fasthash::{FastMap, FastSet};
use handoff_core::{
    CancelReason, DestinationEventKind as DE, DestinationState as DS, Duration, HandoffId, Instant,
    KvEventData, LifecycleEvent, Request, RequestId, Role, RoleState, SchedulerCore,
    SourceEventKind as SE, SourceState as SS, Transition, WorkerEvent, WorkerHost, WorkerId,
    WorkerRequest,
};
use handoff_engine::fault::FaultCounts;
use handoff_engine::Route;
use handoff_router::Pool;
use handoff_serving::Serving;
use handoff_workload::TraceItem;
use std::collections::BTreeMap;

/// What the checker reads from the serving director after each call: the
/// report's view of a request and the routers' bookings.
pub trait ServingView {
    /// Whether the report still counts `r` as neither finished nor failed.
    fn in_flight(&self, r: RequestId) -> bool;
    /// The worker `pool`'s router holds a booking for `r` on, if any.
    fn booked(&self, pool: Pool, r: RequestId) -> Option<WorkerId>;
    /// Live bookings in `pool`'s router.
    fn live_bookings(&self, pool: Pool) -> usize;
    /// Both routers' own total-versus-bookings audit.
    fn audit(&self) -> Result<(), String>;
    /// KV events the routers saw out of id order so far.
    fn out_of_order_kv_events(&self) -> u64;
    /// Whether `r` was migrated as a new attempt (its old bookings come off
    /// at the migration and it books again).
    fn migrated(&self, r: RequestId) -> bool;
}

impl<I: Iterator<Item = TraceItem>> ServingView for Serving<I> {
    fn in_flight(&self, r: RequestId) -> bool {
        self.is_in_flight(r)
    }

    fn migrated(&self, r: RequestId) -> bool {
        self.was_migrated(r)
    }

    fn booked(&self, pool: Pool, r: RequestId) -> Option<WorkerId> {
        let f = self.frontend();
        match pool {
            Pool::Decode => f.decode_router().and_then(|d| d.booking(r)),
            _ => f.prefill_router().booking(r),
        }
        .map(|b| b.worker)
    }

    fn live_bookings(&self, pool: Pool) -> usize {
        let f = self.frontend();
        match pool {
            Pool::Decode => f.decode_router().map_or(0, |d| d.live_bookings()),
            _ => f.prefill_router().live_bookings(),
        }
    }

    fn audit(&self) -> Result<(), String> {
        let f = self.frontend();
        f.prefill_router()
            .audit()
            .map_err(|e| format!("prefill router: {e}"))?;
        if let Some(d) = f.decode_router() {
            d.audit().map_err(|e| format!("decode router: {e}"))?;
        }
        Ok(())
    }

    fn out_of_order_kv_events(&self) -> u64 {
        let f = self.frontend();
        f.prefill_router().stats().out_of_order_events
            + f.decode_router()
                .map_or(0, |d| d.stats().out_of_order_events)
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct RoleRec {
    pub(crate) worker: WorkerId,
    pub(crate) request: RequestId,
    pub(crate) state: RoleState,
    pub(crate) ended: bool,
    pub(crate) pinned: i64,
    pub(crate) reserved: i64,
    /// Destination: reached `Reserved` at some point.
    pub(crate) reserved_once: bool,
}

pub(crate) fn released(s: RoleState) -> bool {
    matches!(
        s,
        RoleState::Source(SS::Released) | RoleState::Destination(DS::Released)
    )
}

pub(crate) fn holds_lease(s: RoleState) -> bool {
    matches!(
        s,
        RoleState::Source(SS::Pinned | SS::AwaitingReaderCompletion)
    )
}

pub(crate) fn holds_reservation(s: RoleState) -> bool {
    matches!(s, RoleState::Destination(DS::Reserved | DS::Receiving))
}

/// One pool's booking of one request, as the checker saw it change.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Bk {
    /// Times booked.
    pub(crate) booked: u8,
    /// Held now, and on which worker.
    pub(crate) live: bool,
    pub(crate) worker: Option<WorkerId>,
    /// Released by the request failing with a lost worker (the frontend's
    /// blanket release): later triggers for it are expected no-ops.
    pub(crate) lost: bool,
    /// Released by its own trigger.
    pub(crate) triggered: bool,
}

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ReqRec {
    /// Neither finished nor failed yet.
    pub(crate) live: bool,
    pub(crate) finished: bool,
    pub(crate) failed: bool,
    /// Failed by its client's cancel: a decode that the cancel did not
    /// reach (its route raced the cancel, or the abandoned source's word
    /// of it was lost) may still decode it, as a decode request already at
    /// its engine runs upstream unless an abort reaches it.
    pub(crate) cancelled: bool,
    pub(crate) pre: Bk,
    pub(crate) dec: Bk,
}

/// What a director call was, for judging the booking and terminal changes
/// it made.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Call {
    /// A trace request arrived.
    Arrive,
    /// A call that changes no booking or terminal state.
    Other,
    Event {
        request: RequestId,
        /// A source's end (prefill release trigger).
        source_end: bool,
        /// A decode completion or a destination's early end (decode
        /// release trigger).
        decode_end: bool,
        /// A decode pool's `RequestFinished`.
        finished: bool,
    },
    WorkerLost(WorkerId),
    Undeliverable(WorkerId),
    /// The client cancelled the request (it fails at once).
    Cancel,
}

/// What a worker event means for the booking and terminal checks; see
/// [`Checker::event_call`].
#[derive(Clone, Copy, Debug)]
pub struct EventCall(Option<Call>);

/// Per decode worker: what the no-`Stored`-before-activation rule tracks.
#[derive(Clone, Debug, Default)]
pub(crate) struct StoreGuard {
    /// Block hash → reserved-but-not-active destinations holding it.
    pub(crate) pending: FastMap<u64, u32>,
    /// Hashes of requests activated here this incarnation.
    pub(crate) allowed: FastSet<u64>,
}

/// The checker's state; fed by [`Dst`] and by the host checks after every
/// engine unit. Usable on its own (with any [`ServingView`]) to test that
/// it catches a broken input.
pub struct Checker {
    pub(crate) pools: Vec<Pool>,
    pub(crate) block_size: u32,
    pub(crate) now: Instant,
    pub(crate) violations: Vec<Violation>,
    pub(crate) roles: FastMap<(HandoffId, Role), RoleRec>,
    pub(crate) ledger: Ledger,
    /// Per worker: live roles, open leases, open reservations.
    pub(crate) live_roles: Vec<i64>,
    pub(crate) open_leases: Vec<i64>,
    pub(crate) open_reservations: Vec<i64>,
    pub(crate) transfers: FastMap<HandoffId, u32>,
    pub(crate) dest_requests: FastMap<HandoffId, Request>,
    pub(crate) dest_hashes: FastMap<HandoffId, Vec<u64>>,
    /// Attempts whose source released its KV early and whose destination
    /// has not ended yet.
    pub(crate) released_early: FastSet<HandoffId>,
    pub(crate) guards: Vec<StoreGuard>,
    pub(crate) reqs: BTreeMap<RequestId, ReqRec>,
    pub(crate) live_pre: usize,
    pub(crate) live_dec: usize,
    /// The trace, in arrival order, to name each arrival.
    pub(crate) arrivals: std::collections::VecDeque<RequestId>,
    pub(crate) paths: Paths,
    pub(crate) faults: FaultCounts,
    pub(crate) torn_down: u64,
    /// Per worker: the end of the step whose held outputs were last read.
    pub(crate) step_seen: Vec<Option<Instant>>,
    /// Per worker: held step outputs already checked in the worker's order,
    /// to skip when the driver sees them at the step's end.
    pub(crate) held: Vec<std::collections::VecDeque<WorkerEvent>>,
    /// Sources' lease terms as seen, until their destination ends.
    pub(crate) terms: FastMap<HandoffId, stale::SourceTerm>,
    /// Destinations allowed to activate from a stale read.
    pub(crate) stale_ok: FastSet<HandoffId>,
    pub(crate) lease_terms: LeaseTerms,
}

/// The events the role, ledger, transfer and KV checks follow (in the
/// worker's own order).
pub(crate) fn followed(e: &WorkerEvent) -> bool {
    matches!(
        e,
        WorkerEvent::Transition(_)
            | WorkerEvent::RoleEnded { .. }
            | WorkerEvent::StartTransfer { .. }
            | WorkerEvent::Kv { .. }
            | WorkerEvent::Preempted { .. }
            | WorkerEvent::StaleRead { .. }
    )
}

impl Checker {
    /// A checker for workers of `pools` (by id) whose routers hash blocks of
    /// `block_size` tokens, for a trace arriving as `arrivals`.
    pub fn new(pools: Vec<Pool>, block_size: u32, arrivals: Vec<RequestId>) -> Self {
        let n = pools.len();
        Checker {
            pools,
            block_size,
            now: Instant::ZERO,
            violations: Vec::new(),
            roles: FastMap::default(),
            ledger: Ledger::new(),
            live_roles: vec![0; n],
            open_leases: vec![0; n],
            open_reservations: vec![0; n],
            transfers: FastMap::default(),
            dest_requests: FastMap::default(),
            dest_hashes: FastMap::default(),
            released_early: FastSet::default(),
            guards: vec![StoreGuard::default(); n],
            reqs: BTreeMap::new(),
            live_pre: 0,
            live_dec: 0,
            arrivals: arrivals.into(),
            paths: Paths::default(),
            faults: FaultCounts::default(),
            torn_down: 0,
            step_seen: vec![None; n],
            held: vec![std::collections::VecDeque::new(); n],
            terms: FastMap::default(),
            stale_ok: FastSet::default(),
            lease_terms: LeaseTerms::default(),
        }
    }

    /// A worker event as the driver sees it: checked now unless it is a
    /// held step output the checker already followed in the worker's order.
    pub fn seen(&mut self, w: WorkerId, e: &WorkerEvent, now: Instant) {
        self.now = now;
        if !followed(e) {
            return;
        }
        if let Some(q) = self.held.get_mut(w.0 as usize) {
            if q.front() == Some(e) {
                q.pop_front();
                return;
            }
        }
        self.event(w, e, now);
    }

    /// The hosts' steps that began since the last look, with the outputs
    /// they hold (read before any later input's outputs, so in the
    /// worker's order).
    pub(crate) fn new_steps<S: SchedulerCore>(
        &self,
        hosts: &[WorkerHost<S>],
    ) -> Vec<(WorkerId, Option<Instant>, Vec<WorkerEvent>)> {
        let mut out = Vec::new();
        for h in hosts {
            let w = h.id();
            let end = h.step_end();
            if self.step_seen.get(w.0 as usize) == Some(&end) {
                continue;
            }
            let events = match end {
                Some(_) => h
                    .held()
                    .iter()
                    .filter_map(|o| match o {
                        handoff_core::HostOutput::Event(e) if followed(e) => Some(e.clone()),
                        _ => None,
                    })
                    .collect(),
                None => Vec::new(),
            };
            out.push((w, end, events));
        }
        out
    }

    /// Follows the held outputs of steps that began, in the worker's order.
    pub(crate) fn follow_steps(
        &mut self,
        steps: Vec<(WorkerId, Option<Instant>, Vec<WorkerEvent>)>,
    ) {
        for (w, end, events) in steps {
            let wi = w.0 as usize;
            if let Some(s) = self.step_seen.get_mut(wi) {
                *s = end;
            }
            if end.is_none() {
                continue;
            }
            if self.held.get(wi).is_some_and(|q| !q.is_empty()) {
                let n = self.held[wi].len();
                self.flag(Kind::Transition, || {
                    format!("{w} began a step with {n} outputs of its last one never released")
                });
                self.held[wi].clear();
            }
            let now = self.now;
            for e in &events {
                self.event(w, e, now);
            }
            if let Some(q) = self.held.get_mut(wi) {
                q.extend(events);
            }
        }
    }

    /// Violations found so far.
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// Paths reached so far.
    pub fn paths(&self) -> Paths {
        self.paths
    }

    pub(crate) fn pool(&self, w: WorkerId) -> Pool {
        self.pools
            .get(w.0 as usize)
            .copied()
            .unwrap_or(Pool::Decode)
    }

    pub(crate) fn flag(&mut self, kind: Kind, detail: impl FnOnce() -> String) {
        if self.violations.len() < MAX_VIOLATIONS {
            self.violations.push(Violation {
                kind,
                at: self.now,
                detail: detail(),
            });
        }
    }

    /// A request the director routed (the checker keeps destinations'
    /// requests to know their block hashes).
    pub fn routed(&mut self, r: &Route) {
        match &r.request {
            WorkerRequest::HandoffDestination { id, request, .. } => {
                self.dest_requests.insert(*id, request.clone());
            }
            // A decode worker computing a prompt itself (a failed KV load
            // recomputed) publishes its blocks legitimately, whatever
            // destination there holds the same prefix reserved.
            WorkerRequest::Ordinary(request) if self.pool(r.to) == Pool::Decode => {
                let mut hashes = Vec::new();
                request.block_hashes(self.block_size, &mut hashes);
                if let Some(g) = self.guards.get_mut(r.to.0 as usize) {
                    g.allowed.extend(hashes);
                }
            }
            _ => {}
        }
    }

    /// A worker event, in the order the worker produced it (the role,
    /// ledger, transfer and KV checks).
    pub fn event(&mut self, w: WorkerId, e: &WorkerEvent, now: Instant) {
        self.now = now;
        match e {
            WorkerEvent::Transition(t) => self.transition(t),
            WorkerEvent::RoleEnded {
                id,
                request,
                role,
                reason,
                ..
            } => self.role_ended(w, *id, *request, *role, *reason),
            WorkerEvent::StartTransfer { id, .. } => self.start_transfer(*id),
            WorkerEvent::Kv { event, .. } => self.kv(w, &event.data),
            WorkerEvent::Preempted { .. } => self.paths.preemptions += 1,
            WorkerEvent::StaleRead { id, reused, .. } => self.stale_read(w, *id, *reused),
            _ => {}
        }
    }
}
