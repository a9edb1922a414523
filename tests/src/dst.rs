//! Deterministic simulation testing on the real cores.
//!
//! A *schedule* ([`schedule`]) is a whole disaggregated run drawn from one
//! seed: a deployment on the real vLLM or SGLang core (both handoff
//! orderings, tiny pools, short lease and reservation lifetimes so they
//! expire), a small trace (bursts to idle, shared prefixes, prompts that
//! barely fit or do not) and a fault plan from [`FaultPlan::generate`]
//! (intensity drawn from the seed, sometimes zero) with extra client
//! cancels. [`check`] runs it on the one [`Engine`] with in-thread hosts
//! and the [`Serving`] director wrapped in a checking director ([`Dst`]),
//! and checks after every engine unit ([`Engine::run_event`]):
//!
//! - **accounting**: on every worker, `free + cached + used == total` with
//!   `free` counted by the core's allocator ([`SchedulerCore::free_blocks`])
//!   and the categories by its owner counters; request slots within bounds;
//!   no pinned blocks without an open source lease, no reserved blocks
//!   without an open reservation, and as many live roles in the worker as
//!   the checker has seen start and not end;
//! - **roles**: every transition starts from the state the previous one of
//!   that role ended in, on the same worker; nothing follows `Released`;
//!   one `RoleEnded` per role, after its `Released`; every lease and
//!   reservation opens and ends exactly once ([`Ledger`]) and its ownership
//!   deltas net to zero; at the end every role that started has ended;
//! - **no `Stored` before activation**: a decode worker never publishes a
//!   block hash of a destination it holds reserved and not yet active,
//!   unless a request activated on that worker (this incarnation) has the
//!   same hash (a shared prefix published legitimately);
//! - **no transfer before a reservation**: a `StartTransfer` names an
//!   attempt whose destination reached `Reserved`, at most once per attempt;
//! - **router bookings**: each booking is made once and released once, by
//!   the event that ends its request's work in that pool (a source's end; a
//!   decode completion or a destination's early end) or, for a request that
//!   failed, by the loss of the worker it is booked on (or its never
//!   reaching that worker); a release trigger for a booking already
//!   released by a trigger is a double release; the routers' booking counts
//!   always equal the checker's and their totals audit; at the end no
//!   booking remains;
//! - **requests**: each is terminal exactly once, finished (its decode
//!   completed) or failed as the report counts it, never both; a request
//!   still in flight at the end must have had roles torn down by the
//!   engine (then it counts as failed once); the report's totals agree;
//! - **drained**: when nothing is left to happen, every worker that is up
//!   holds no role, no pinned and no reserved block (a role still alive
//!   then is stuck: only the engine's teardown would end it), and after the
//!   teardown it is drained. A worker killed and not restarted holds no
//!   role or lease; the requests its dead core still lists are not checked
//!   (a dead process's memory is gone; they failed at the kill).
//!
//! The role, ledger, transfer and KV checks follow each worker's events in
//! the order the worker produced them: a step's outputs are held until the
//! step ends while an input delivered meanwhile releases its own at once
//! (the engine's documented modelling gap), so the checker reads a step's
//! outputs when it begins ([`WorkerHost::held`]) and skips them when the
//! driver sees them. Booking and terminal checks follow the director, in
//! the order it sees events. `DST_TRACE=1` prints every event a run's
//! director sees.
//!
//! A failing schedule is shrunk ([`shrink`]): timed faults are removed one
//! by one, each fault probability is zeroed, then runs of requests are
//! removed from the trace (halves, quarters, ... single requests), keeping
//! every change under which the same kind of violation still shows.
//! [`Failure::render`] prints the seed, the deployment, the shrunk plan
//! (fault-plan text), the shrunk trace (Mooncake JSONL) and a regression
//! test body that calls [`assert_passes`].

use handoff_core::accounting::{check_identity, Holding, Ledger};
use handoff_core::fasthash::{FastMap, FastSet};
use handoff_core::host::HostFinal;
use handoff_core::{
    Backend, CancelReason, CoreBox, DestinationEventKind as DE, DestinationState as DS, Duration,
    Generation, HandoffConfig, HandoffId, HandoffMsg, HandoffPolicy, Instant, KvEventData,
    LifecycleEvent, Request, RequestError, RequestId, Rng, Role, RoleState, SchedulerCore,
    SourceEventKind as SE, SourceState as SS, Transition, Worker, WorkerEvent, WorkerHost,
    WorkerId, WorkerRequest,
};
use handoff_engine::fault::{Fault, FaultCounts, FaultPlan};
use handoff_engine::TransferModel;
use handoff_engine::{Director, Engine, LocalHosts, Route, Undeliverable};
use handoff_router::RouterMode;
use handoff_serving::{EngineSpec, Pool, ReplayConfig, Serving};
use handoff_workload::TraceItem;
use std::collections::BTreeMap;
use std::fmt;

// ------------------------------------------------------------ violations

/// What kind of rule a [`Violation`] broke; the shrinker keeps a change only
/// if a violation of the same kind still shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `free + cached + used != total`, or more free request slots than slots.
    Accounting,
    /// Pinned or reserved blocks on a worker with no open lease or
    /// reservation, or its live roles differ from what the checker saw.
    Ownership,
    /// A role transition that does not follow from the previous one, or one
    /// after `Released`.
    Transition,
    /// A second `RoleEnded`, one without `Released`, or a role that never
    /// ended.
    RoleEnd,
    /// A lease or reservation opened or ended twice, never ended, or whose
    /// ownership deltas do not net to zero.
    Ledger,
    /// A `Stored` KV event for a destination's blocks before it activated.
    StoredBeforeActivation,
    /// A `StartTransfer` for an attempt whose destination never reserved,
    /// or a second one.
    TransferBeforeReservation,
    /// A router booking made twice, released twice or by the wrong event,
    /// or left at the end; router totals that do not audit.
    Booking,
    /// A request terminal twice (finished and failed, or finished twice),
    /// or never; report totals that disagree.
    Terminal,
    /// A worker not drained at the end.
    Drained,
    /// The run panicked.
    Panic,
}

/// One broken rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Which rule.
    pub kind: Kind,
    /// Model time it was seen.
    pub at: Instant,
    /// What exactly.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{:?} at {:.6}s] {}",
            self.kind,
            self.at.as_nanos() as f64 / 1e9,
            self.detail
        )
    }
}

/// Violations kept per run: the first ones explain a failure; a broken run
/// can produce one per event.
const MAX_VIOLATIONS: usize = 32;

// ------------------------------------------------------------ paths

/// Lifecycle paths a run reached, summed over schedules in the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Paths {
    /// Handoff attempts routed (source roles started).
    pub attempts: u64,
    /// Destinations that activated.
    pub activations: u64,
    /// Requests that finished.
    pub finished: u64,
    /// Requests that failed (including those torn down at the end).
    pub failed: u64,
    /// Roles that ended because their source lease expired.
    pub lease_expiries: u64,
    /// Roles that ended because their reservation expired.
    pub reservation_expiries: u64,
    /// Roles that ended by a client cancel.
    pub client_cancels: u64,
    /// Roles that ended because their peer aborted.
    pub peer_aborts: u64,
    /// Roles that ended because their peer was lost.
    pub peer_lost: u64,
    /// Roles that ended because their peer restarted.
    pub peer_restarted: u64,
    /// Roles that ended because a transfer failed.
    pub transfer_failures: u64,
    /// Roles that ended as unsupported (a prompt no decode pool can hold).
    pub unsupported: u64,
    /// Roles that ended by a teardown (kill, restart or end of run).
    pub teardowns: u64,
    /// Reservation attempts that found no room (the attempt waited).
    pub reservation_waits: u64,
    /// Source leases a waiting destination renewed.
    pub lease_renewals: u64,
    /// Transfers started after their destination had already released.
    pub transfers_to_released: u64,
    /// Transfers started after their source had already released (its
    /// lease ran out unseen by a reader that had not told it of itself: the
    /// read is of freed blocks, as vLLM's abort-timeout race allows).
    pub transfers_from_released: u64,
    /// Facts workers ignored as exact duplicates.
    pub duplicate_facts: u64,
    /// Facts for attempts already released (stale).
    pub stale_facts: u64,
    /// Facts from an older generation of their sender.
    pub old_generation_facts: u64,
    /// Facts that arrived before their attempt and were buffered.
    pub early_facts: u64,
    /// Buffered early facts whose attempt never came.
    pub early_dropped: u64,
    /// Requests routed to a worker that was down when they got there.
    pub undeliverable: u64,
    /// vLLM preemptions / SGLang retractions.
    pub preemptions: u64,
    /// Roles still alive when nothing was left to happen (torn down).
    pub torn_down_at_end: u64,
    /// KV events routers received out of id order (outputs of a step
    /// released after those of a later input).
    pub out_of_order_kv_events: u64,
}

impl Paths {
    fn add(&mut self, o: &Paths) {
        let Paths {
            attempts,
            activations,
            finished,
            failed,
            lease_expiries,
            reservation_expiries,
            client_cancels,
            peer_aborts,
            peer_lost,
            peer_restarted,
            transfer_failures,
            unsupported,
            teardowns,
            reservation_waits,
            lease_renewals,
            transfers_to_released,
            transfers_from_released,
            duplicate_facts,
            stale_facts,
            old_generation_facts,
            early_facts,
            early_dropped,
            undeliverable,
            preemptions,
            torn_down_at_end,
            out_of_order_kv_events,
        } = *o;
        self.attempts += attempts;
        self.activations += activations;
        self.finished += finished;
        self.failed += failed;
        self.lease_expiries += lease_expiries;
        self.reservation_expiries += reservation_expiries;
        self.client_cancels += client_cancels;
        self.peer_aborts += peer_aborts;
        self.peer_lost += peer_lost;
        self.peer_restarted += peer_restarted;
        self.transfer_failures += transfer_failures;
        self.unsupported += unsupported;
        self.teardowns += teardowns;
        self.reservation_waits += reservation_waits;
        self.lease_renewals += lease_renewals;
        self.transfers_to_released += transfers_to_released;
        self.transfers_from_released += transfers_from_released;
        self.duplicate_facts += duplicate_facts;
        self.stale_facts += stale_facts;
        self.old_generation_facts += old_generation_facts;
        self.early_facts += early_facts;
        self.early_dropped += early_dropped;
        self.undeliverable += undeliverable;
        self.preemptions += preemptions;
        self.torn_down_at_end += torn_down_at_end;
        self.out_of_order_kv_events += out_of_order_kv_events;
    }

    /// `(name, count)` for every path, in a fixed order.
    pub fn rows(&self) -> [(&'static str, u64); 26] {
        [
            ("handoff attempts", self.attempts),
            ("destinations activated", self.activations),
            ("requests finished", self.finished),
            ("requests failed", self.failed),
            ("lease expiries", self.lease_expiries),
            ("reservation expiries", self.reservation_expiries),
            ("client cancels", self.client_cancels),
            ("peer aborts", self.peer_aborts),
            ("peer lost", self.peer_lost),
            ("peer restarted", self.peer_restarted),
            ("transfer failures", self.transfer_failures),
            ("unsupported", self.unsupported),
            ("teardowns", self.teardowns),
            ("reservation waits", self.reservation_waits),
            ("lease renewals", self.lease_renewals),
            (
                "transfers to released destinations",
                self.transfers_to_released,
            ),
            (
                "transfers from released sources",
                self.transfers_from_released,
            ),
            ("duplicate facts", self.duplicate_facts),
            ("stale facts", self.stale_facts),
            ("old-generation facts", self.old_generation_facts),
            ("early facts", self.early_facts),
            ("early facts dropped", self.early_dropped),
            ("undeliverable requests", self.undeliverable),
            ("preemptions", self.preemptions),
            ("roles torn down at the end", self.torn_down_at_end),
            ("out-of-order KV events", self.out_of_order_kv_events),
        ]
    }
}

/// Adds `b` into `a`, field by field.
pub fn add_counts(a: &mut FaultCounts, b: &FaultCounts) {
    let FaultCounts {
        kills,
        restarts,
        partitions,
        cancels,
        facts,
        facts_partitioned,
        facts_dropped,
        facts_duplicated,
        facts_delayed,
        transfers,
        transfers_failed,
    } = *b;
    a.kills += kills;
    a.restarts += restarts;
    a.partitions += partitions;
    a.cancels += cancels;
    a.facts += facts;
    a.facts_partitioned += facts_partitioned;
    a.facts_dropped += facts_dropped;
    a.facts_duplicated += facts_duplicated;
    a.facts_delayed += facts_delayed;
    a.transfers += transfers;
    a.transfers_failed += transfers_failed;
}

// ------------------------------------------------------------ the checker

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
struct RoleRec {
    worker: WorkerId,
    request: RequestId,
    state: RoleState,
    ended: bool,
    pinned: i64,
    reserved: i64,
    /// Destination: reached `Reserved` at some point.
    reserved_once: bool,
}

fn released(s: RoleState) -> bool {
    matches!(
        s,
        RoleState::Source(SS::Released) | RoleState::Destination(DS::Released)
    )
}

fn holds_lease(s: RoleState) -> bool {
    matches!(
        s,
        RoleState::Source(SS::Pinned | SS::AwaitingReaderCompletion)
    )
}

fn holds_reservation(s: RoleState) -> bool {
    matches!(s, RoleState::Destination(DS::Reserved | DS::Receiving))
}

/// One pool's booking of one request, as the checker saw it change.
#[derive(Clone, Copy, Debug, Default)]
struct Bk {
    /// Times booked.
    booked: u8,
    /// Held now, and on which worker.
    live: bool,
    worker: Option<WorkerId>,
    /// Released by the request failing with a lost worker (the frontend's
    /// blanket release): later triggers for it are expected no-ops.
    lost: bool,
    /// Released by its own trigger.
    triggered: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct ReqRec {
    /// Neither finished nor failed yet.
    live: bool,
    finished: bool,
    failed: bool,
    pre: Bk,
    dec: Bk,
}

/// What a director call was, for judging the booking and terminal changes
/// it made.
#[derive(Clone, Copy, Debug)]
enum Call {
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
}

/// What a worker event means for the booking and terminal checks; see
/// [`Checker::event_call`].
#[derive(Clone, Copy, Debug)]
pub struct EventCall(Option<Call>);

/// Per decode worker: what the no-`Stored`-before-activation rule tracks.
#[derive(Clone, Debug, Default)]
struct StoreGuard {
    /// Block hash → reserved-but-not-active destinations holding it.
    pending: FastMap<u64, u32>,
    /// Hashes of requests activated here this incarnation.
    allowed: FastSet<u64>,
}

/// The checker's state; fed by [`Dst`] and by the host checks after every
/// engine unit. Usable on its own (with any [`ServingView`]) to test that
/// it catches a broken input.
pub struct Checker {
    pools: Vec<Pool>,
    block_size: u32,
    now: Instant,
    violations: Vec<Violation>,
    roles: FastMap<(HandoffId, Role), RoleRec>,
    ledger: Ledger,
    /// Per worker: live roles, open leases, open reservations.
    live_roles: Vec<i64>,
    open_leases: Vec<i64>,
    open_reservations: Vec<i64>,
    transfers: FastMap<HandoffId, u32>,
    dest_requests: FastMap<HandoffId, Request>,
    dest_hashes: FastMap<HandoffId, Vec<u64>>,
    guards: Vec<StoreGuard>,
    reqs: BTreeMap<RequestId, ReqRec>,
    live_pre: usize,
    live_dec: usize,
    /// The trace, in arrival order, to name each arrival.
    arrivals: std::collections::VecDeque<RequestId>,
    paths: Paths,
    faults: FaultCounts,
    torn_down: u64,
    /// Per worker: the end of the step whose held outputs were last read.
    step_seen: Vec<Option<Instant>>,
    /// Per worker: held step outputs already checked in the worker's order,
    /// to skip when the driver sees them at the step's end.
    held: Vec<std::collections::VecDeque<WorkerEvent>>,
}

/// The events the role, ledger, transfer and KV checks follow (in the
/// worker's own order).
fn followed(e: &WorkerEvent) -> bool {
    matches!(
        e,
        WorkerEvent::Transition(_)
            | WorkerEvent::RoleEnded { .. }
            | WorkerEvent::StartTransfer { .. }
            | WorkerEvent::Kv { .. }
            | WorkerEvent::Preempted { .. }
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
    fn new_steps<S: SchedulerCore>(
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
    fn follow_steps(&mut self, steps: Vec<(WorkerId, Option<Instant>, Vec<WorkerEvent>)>) {
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

    fn pool(&self, w: WorkerId) -> Pool {
        self.pools
            .get(w.0 as usize)
            .copied()
            .unwrap_or(Pool::Decode)
    }

    fn flag(&mut self, kind: Kind, detail: impl FnOnce() -> String) {
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
        if let WorkerRequest::HandoffDestination { id, request, .. } = &r.request {
            self.dest_requests.insert(*id, request.clone());
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
            _ => {}
        }
    }

    fn transition(&mut self, t: &Transition) {
        let key = (t.id, t.role);
        let w = t.worker;
        let initial = match t.role {
            Role::Source => RoleState::Source(SS::NotStarted),
            Role::Destination => RoleState::Destination(DS::NotRouted),
        };
        let prev = match self.roles.get(&key).copied() {
            Some(r) => r,
            None => {
                if t.from != initial {
                    self.flag(Kind::Transition, || {
                        format!(
                            "{} {:?} on {}: first transition is from {:?}, not {initial:?}",
                            t.id, t.role, w, t.from
                        )
                    });
                }
                if let Some(c) = self.live_roles.get_mut(w.0 as usize) {
                    *c += 1;
                }
                if t.role == Role::Source {
                    self.paths.attempts += 1;
                }
                RoleRec {
                    worker: w,
                    request: t.request,
                    state: initial,
                    ended: false,
                    pinned: 0,
                    reserved: 0,
                    reserved_once: false,
                }
            }
        };
        if released(prev.state) {
            self.flag(Kind::Transition, || {
                format!(
                    "{} {:?} on {}: {:?} after Released",
                    t.id, t.role, w, t.event
                )
            });
            return;
        }
        if prev.worker != w {
            self.flag(Kind::Transition, || {
                format!("{} {:?} moved from {} to {}", t.id, t.role, prev.worker, w)
            });
        }
        if t.from != prev.state {
            self.flag(Kind::Transition, || {
                format!(
                    "{} {:?} on {}: {:?} from {:?} but the role was in {:?}",
                    t.id, t.role, w, t.event, t.from, prev.state
                )
            });
        }
        let mut rec = prev;
        rec.state = t.to;
        rec.pinned += t.delta.pinned;
        rec.reserved += t.delta.reserved;
        if t.event == LifecycleEvent::Destination(DE::Reserved) {
            rec.reserved_once = true;
        }
        match t.event {
            LifecycleEvent::Destination(DE::Unavailable) => self.paths.reservation_waits += 1,
            LifecycleEvent::Source(SE::LeaseRenewed) => self.paths.lease_renewals += 1,
            _ => {}
        }
        let wi = w.0 as usize;
        // Leases and reservations: open on entering a holding state, end on
        // leaving it; the deltas must give back exactly what they took.
        let (was, is) = (holds_lease(t.from), holds_lease(t.to));
        if !was && is {
            if let Err(e) = self.ledger.open(t.id, Holding::SourceLease) {
                self.flag(Kind::Ledger, || e.to_string());
            }
            if let Some(c) = self.open_leases.get_mut(wi) {
                *c += 1;
            }
        } else if was && !is {
            if let Err(e) = self.ledger.end(t.id, Holding::SourceLease) {
                self.flag(Kind::Ledger, || e.to_string());
            }
            if let Some(c) = self.open_leases.get_mut(wi) {
                *c -= 1;
            }
            if rec.pinned != 0 {
                self.flag(Kind::Ledger, || {
                    format!(
                        "{} source lease on {w} ended with pinned deltas summing to {}",
                        t.id, rec.pinned
                    )
                });
            }
        }
        let (was, is) = (holds_reservation(t.from), holds_reservation(t.to));
        if !was && is {
            if let Err(e) = self.ledger.open(t.id, Holding::DestinationReservation) {
                self.flag(Kind::Ledger, || e.to_string());
            }
            if let Some(c) = self.open_reservations.get_mut(wi) {
                *c += 1;
            }
            self.guard_reserved(w, t.id);
        } else if was && !is {
            if let Err(e) = self.ledger.end(t.id, Holding::DestinationReservation) {
                self.flag(Kind::Ledger, || e.to_string());
            }
            if let Some(c) = self.open_reservations.get_mut(wi) {
                *c -= 1;
            }
            if rec.reserved != 0 {
                self.flag(Kind::Ledger, || {
                    format!(
                        "{} reservation on {w} ended with reserved deltas summing to {}",
                        t.id, rec.reserved
                    )
                });
            }
            self.guard_ended(w, t.id, t.to == RoleState::Destination(DS::Active));
        }
        if t.to == RoleState::Destination(DS::Active) {
            self.paths.activations += 1;
        }
        self.roles.insert(key, rec);
    }

    /// Destination `id` on `w` holds a reservation now: its hashes must not
    /// be published until it activates.
    fn guard_reserved(&mut self, w: WorkerId, id: HandoffId) {
        if self.pool(w) != Pool::Decode {
            return;
        }
        let Some(req) = self.dest_requests.get(&id) else {
            return;
        };
        let mut hashes = Vec::new();
        req.block_hashes(self.block_size, &mut hashes);
        if let Some(g) = self.guards.get_mut(w.0 as usize) {
            for h in &hashes {
                *g.pending.entry(*h).or_default() += 1;
            }
        }
        self.dest_hashes.insert(id, hashes);
    }

    /// Destination `id` on `w` left its reservation, activating or not.
    fn guard_ended(&mut self, w: WorkerId, id: HandoffId, activated: bool) {
        let Some(hashes) = self.dest_hashes.remove(&id) else {
            return;
        };
        if let Some(g) = self.guards.get_mut(w.0 as usize) {
            for h in &hashes {
                if let Some(c) = g.pending.get_mut(h) {
                    *c -= 1;
                    if *c == 0 {
                        g.pending.remove(h);
                    }
                }
                if activated {
                    g.allowed.insert(*h);
                }
            }
        }
    }

    fn kv(&mut self, w: WorkerId, data: &KvEventData) {
        let wi = w.0 as usize;
        match data {
            KvEventData::Cleared => {
                if let Some(g) = self.guards.get_mut(wi) {
                    g.allowed.clear();
                }
            }
            KvEventData::Stored { block_hashes, .. } => {
                let Some(g) = self.guards.get(wi) else {
                    return;
                };
                if g.pending.is_empty() {
                    return;
                }
                let bad = block_hashes
                    .iter()
                    .find(|h| g.pending.contains_key(h) && !g.allowed.contains(h))
                    .copied();
                if let Some(h) = bad {
                    let who: Vec<String> = self
                        .dest_hashes
                        .iter()
                        .filter(|(_, hs)| hs.contains(&h))
                        .map(|(id, _)| id.to_string())
                        .collect();
                    self.flag(Kind::StoredBeforeActivation, || {
                        format!(
                            "{w} published block {h:#x} of reserved, not yet active destination(s) {}",
                            who.join(", ")
                        )
                    });
                }
            }
            KvEventData::Removed { .. } => {}
        }
    }

    fn start_transfer(&mut self, id: HandoffId) {
        let n = self.transfers.entry(id).or_default();
        *n += 1;
        if *n > 1 {
            self.flag(Kind::TransferBeforeReservation, || {
                format!("{id}: transfer started twice")
            });
        }
        if self
            .roles
            .get(&(id, Role::Source))
            .is_some_and(|r| released(r.state))
        {
            self.paths.transfers_from_released += 1;
        }
        match self.roles.get(&(id, Role::Destination)).copied() {
            Some(d) if d.reserved_once => {
                if released(d.state) {
                    self.paths.transfers_to_released += 1;
                }
            }
            Some(d) => self.flag(Kind::TransferBeforeReservation, || {
                format!(
                    "{id}: transfer started while its destination on {} is {:?} and never reserved",
                    d.worker, d.state
                )
            }),
            None => self.flag(Kind::TransferBeforeReservation, || {
                format!("{id}: transfer started with no destination role seen")
            }),
        }
    }

    fn role_ended(
        &mut self,
        w: WorkerId,
        id: HandoffId,
        request: RequestId,
        role: Role,
        reason: Option<CancelReason>,
    ) {
        match reason {
            Some(CancelReason::LeaseExpired) => self.paths.lease_expiries += 1,
            Some(CancelReason::ReservationExpired) => self.paths.reservation_expiries += 1,
            Some(CancelReason::Client) => self.paths.client_cancels += 1,
            Some(CancelReason::PeerAborted) => self.paths.peer_aborts += 1,
            Some(CancelReason::PeerLost) => self.paths.peer_lost += 1,
            Some(CancelReason::PeerRestarted) => self.paths.peer_restarted += 1,
            Some(CancelReason::TransferFailed) => self.paths.transfer_failures += 1,
            Some(CancelReason::Unsupported) => self.paths.unsupported += 1,
            Some(CancelReason::Teardown) => self.paths.teardowns += 1,
            None => {}
        }
        let Some(rec) = self.roles.get_mut(&(id, role)) else {
            self.flag(Kind::RoleEnd, || {
                format!("{id} {role:?} on {w} ended but never transitioned")
            });
            return;
        };
        if rec.ended {
            self.flag(Kind::RoleEnd, || {
                format!("{id} {role:?} on {w} ended twice ({reason:?})")
            });
            return;
        }
        rec.ended = true;
        let (state, rw, rr) = (rec.state, rec.worker, rec.request);
        if !released(state) || rw != w || rr != request {
            self.flag(Kind::RoleEnd, || {
                format!(
                    "{id} {role:?} ended on {w} for {request} while in {state:?} on {rw} for {rr}"
                )
            });
        }
        if let Some(c) = self.live_roles.get_mut(rw.0 as usize) {
            *c -= 1;
        }
    }

    // ---------------------------------------------------- around calls

    /// The booking state the checker knew before a call, for `r`.
    fn call_of(&self, w: WorkerId, e: &WorkerEvent) -> Option<Call> {
        let pool = self.pool(w);
        let (request, source_end, decode_end, finished) = match e {
            WorkerEvent::RoleEnded {
                request,
                role,
                reason,
                ..
            } => (
                *request,
                *role == Role::Source,
                *role == Role::Destination && reason.is_some(),
                false,
            ),
            WorkerEvent::RequestFinished { request, .. } => {
                let d = pool == Pool::Decode;
                (*request, false, d, d)
            }
            WorkerEvent::PrefillPinned { request, .. } => (*request, false, false, false),
            _ => return None,
        };
        Some(Call::Event {
            request,
            source_end,
            decode_end,
            finished,
        })
    }

    /// What a worker event means for bookings and terminal states, read
    /// before the director sees it ([`Checker::judge_event`] takes it after).
    pub fn event_call(&self, w: WorkerId, e: &WorkerEvent) -> EventCall {
        EventCall(self.call_of(w, e))
    }

    /// An event that means nothing for bookings or terminal states (one of
    /// a voided attempt).
    pub fn event_call_none(&self) -> EventCall {
        EventCall(None)
    }

    /// Judges what the director did with a worker event (see
    /// [`Checker::event_call`]): booking changes and terminal states of its
    /// request, and the routers' totals.
    pub fn judge_event(&mut self, view: &dyn ServingView, call: EventCall) {
        match call.0 {
            Some(c @ Call::Event { request, .. }) => self.after(view, c, &[request]),
            _ => self.after(view, Call::Other, &[]),
        }
    }

    /// The next trace request arrived; `routed` says whether the director
    /// sent it anywhere.
    pub fn arrived(&mut self, view: &dyn ServingView, routed: bool) {
        let Some(r) = self.arrivals.pop_front() else {
            self.flag(Kind::Terminal, || {
                "an arrival beyond the end of the trace".to_string()
            });
            return;
        };
        self.reqs.insert(
            r,
            ReqRec {
                live: true,
                ..ReqRec::default()
            },
        );
        // A request no pool could take fails at once; any other is in flight.
        if routed != view.in_flight(r) {
            self.flag(Kind::Terminal, || {
                format!(
                    "{r} arrived, {} routed, but the report {} it in flight",
                    if routed { "was" } else { "was not" },
                    if routed { "does not count" } else { "counts" }
                )
            });
        }
        self.after(view, Call::Arrive, &[r]);
    }

    /// Judges what a director call changed for `candidates` (bookings and
    /// terminal states), then checks the routers' totals.
    fn after(&mut self, view: &dyn ServingView, call: Call, candidates: &[RequestId]) {
        for &r in candidates {
            self.judge(view, call, r);
        }
        let (pre, dec) = (
            view.live_bookings(Pool::Prefill),
            view.live_bookings(Pool::Decode),
        );
        if pre != self.live_pre || dec != self.live_dec {
            let (lp, ld) = (self.live_pre, self.live_dec);
            self.flag(Kind::Booking, || {
                format!(
                    "routers hold {pre} prefill and {dec} decode bookings, the checker saw {lp} and {ld} ({call:?})"
                )
            });
            self.live_pre = pre;
            self.live_dec = dec;
        }
        if !candidates.is_empty() {
            if let Err(e) = view.audit() {
                self.flag(Kind::Booking, || e);
            }
        }
    }

    fn judge(&mut self, view: &dyn ServingView, call: Call, r: RequestId) {
        let Some(mut rec) = self.reqs.get(&r).copied() else {
            return;
        };
        // Terminal first: a booking released by a loss is justified by the
        // request failing in the same call.
        if rec.live && !view.in_flight(r) {
            rec.live = false;
            match call {
                Call::Event { finished: true, .. } => {
                    rec.finished = true;
                    self.paths.finished += 1;
                }
                _ => {
                    rec.failed = true;
                    self.paths.failed += 1;
                }
            }
        } else if let Call::Event { finished: true, .. } = call {
            if !rec.live {
                let was = if rec.finished { "finished" } else { "failed" };
                self.flag(Kind::Terminal, || {
                    format!("{r} finished decoding after it had already {was}")
                });
            }
        }
        // The frontend releases a lost worker's bookings (and those of
        // requests that never reached their worker) for requests that failed.
        let lost_worker = match call {
            Call::WorkerLost(w) | Call::Undeliverable(w) if !rec.live => Some(w),
            _ => None,
        };
        let (source_end, decode_end) = match call {
            Call::Event {
                source_end,
                decode_end,
                ..
            } => (source_end, decode_end),
            _ => (false, false),
        };
        // A migrated request's bookings move at the migration, outside the
        // events of either attempt's roles; this per-event provenance model
        // does not follow them (the end-of-run check that no booking is
        // left still does).
        let migrated = view.migrated(r);
        for pool in [Pool::Prefill, Pool::Decode] {
            let on = view.booked(pool, r);
            let now = on.is_some();
            let trigger = if pool == Pool::Prefill {
                source_end
            } else {
                decode_end
            };
            let bk = if pool == Pool::Prefill {
                &mut rec.pre
            } else {
                &mut rec.dec
            };
            let live = if pool == Pool::Prefill {
                &mut self.live_pre
            } else {
                &mut self.live_dec
            };
            if migrated {
                // Follow the router for it, keeping the totals in step.
                if bk.live != now {
                    if now {
                        *live += 1;
                    } else {
                        *live -= 1;
                    }
                    bk.live = now;
                }
                bk.worker = on;
                continue;
            }
            let mut problem: Option<String> = None;
            match (bk.live, now) {
                (false, true) => {
                    bk.booked += 1;
                    bk.live = true;
                    bk.worker = on;
                    *live += 1;
                    if bk.booked > 1 + u8::from(view.migrated(r)) {
                        problem = Some(format!("{r} booked twice in the {pool:?} pool"));
                    }
                }
                (true, false) => {
                    bk.live = false;
                    *live -= 1;
                    if trigger {
                        bk.triggered = true;
                    } else if lost_worker.is_some() && lost_worker == bk.worker {
                        bk.lost = true;
                    } else if view.migrated(r) {
                        // A migration releases every booking of the old
                        // attempt at once.
                    } else {
                        problem = Some(format!(
                            "{r}'s {pool:?} booking released by {call:?}, not by its request's end there"
                        ));
                    }
                }
                (false, false) if trigger && !bk.lost => {
                    problem = Some(if bk.triggered {
                        format!("{r}'s {pool:?} booking released twice (again by {call:?})")
                    } else {
                        format!("{r}: {call:?} releases a {pool:?} booking never made")
                    });
                }
                (true, true) if trigger && !view.migrated(r) => {
                    problem = Some(format!("{r}'s {pool:?} booking still held after {call:?}"));
                }
                _ => {}
            }
            if let Some(p) = problem {
                self.flag(Kind::Booking, || p);
            }
        }
        self.reqs.insert(r, rec);
    }

    fn live_requests(&self) -> Vec<RequestId> {
        self.reqs
            .iter()
            .filter(|(_, r)| r.live || r.pre.live || r.dec.live)
            .map(|(id, _)| *id)
            .collect()
    }

    // ---------------------------------------------------- hosts

    /// Checks every host after an engine unit, appending what it finds to
    /// `out` (the hosts and the checker are read at once, so the checker is
    /// not borrowed mutably).
    pub fn hosts<S: SchedulerCore>(&self, hosts: &[WorkerHost<S>], out: &mut Vec<Violation>) {
        let now = self.now;
        let mut flag = |kind: Kind, detail: &dyn Fn() -> String| {
            if out.len() < MAX_VIOLATIONS {
                out.push(Violation {
                    kind,
                    at: now,
                    detail: detail(),
                });
            }
        };
        for h in hosts {
            let w = h.id();
            let worker = h.worker();
            let cap = worker.capacity();
            if let Err(e) = check_identity(&cap) {
                flag(Kind::Accounting, &|| format!("{w}: {e}"));
            }
            if let Some(free) = worker.core().free_blocks() {
                let sum = free + cap.cached_blocks + cap.kv_used_blocks();
                if sum != cap.total_blocks {
                    flag(Kind::Accounting, &|| {
                        format!(
                            "{w}: free {free} + cached {} + used {} (active {} + pinned {} + reserved {}) = {sum} != total {}",
                            cap.cached_blocks,
                            cap.kv_used_blocks(),
                            cap.active_blocks,
                            cap.pinned_source_blocks,
                            cap.reserved_destination_blocks,
                            cap.total_blocks
                        )
                    });
                }
            }
            if cap.free_request_slots > cap.total_request_slots {
                flag(Kind::Accounting, &|| {
                    format!(
                        "{w}: {} free request slots of {}",
                        cap.free_request_slots, cap.total_request_slots
                    )
                });
            }
            let wi = w.0 as usize;
            let seen = self.live_roles.get(wi).copied().unwrap_or(0);
            let have = worker.live_handoffs() as i64;
            if seen != have {
                flag(Kind::Ownership, &|| {
                    format!("{w} holds {have} roles, the checker saw {seen} start and not end")
                });
            }
            if self.open_leases.get(wi) == Some(&0) && cap.pinned_source_blocks > 0 {
                flag(Kind::Ownership, &|| {
                    format!(
                        "{w}: {} pinned blocks with no open source lease",
                        cap.pinned_source_blocks
                    )
                });
            }
            if self.open_reservations.get(wi) == Some(&0) && cap.reserved_destination_blocks > 0 {
                flag(Kind::Ownership, &|| {
                    format!(
                        "{w}: {} reserved blocks with no open reservation",
                        cap.reserved_destination_blocks
                    )
                });
            }
        }
    }

    /// Nothing is left to happen: no worker holds a role (one that is up
    /// would hold it until the engine's teardown: it is stuck) or pinned or
    /// reserved blocks without one.
    fn quiescent<S: SchedulerCore>(
        &self,
        hosts: &[WorkerHost<S>],
        up: &[bool],
        out: &mut Vec<Violation>,
    ) {
        let now = self.now;
        let mut flag = |kind: Kind, detail: &dyn Fn() -> String| {
            out.push(Violation {
                kind,
                at: now,
                detail: detail(),
            });
        };
        for h in hosts {
            let w = h.id();
            let worker = h.worker();
            let cap = worker.capacity();
            if worker.live_handoffs() > 0 {
                let state = if up.get(w.0 as usize) == Some(&false) {
                    "is down but"
                } else {
                    "has nothing left to do and"
                };
                flag(Kind::Drained, &|| {
                    format!("{w} {state} holds {} roles", worker.live_handoffs())
                });
            }
            if cap.pinned_source_blocks + cap.reserved_destination_blocks > 0
                && worker.live_handoffs() == 0
            {
                flag(Kind::Drained, &|| {
                    format!(
                        "{w} holds {} pinned and {} reserved blocks and no role at the end",
                        cap.pinned_source_blocks, cap.reserved_destination_blocks
                    )
                });
            }
        }
    }

    /// Appends violations found elsewhere (the host checks), up to the cap.
    pub fn extend(&mut self, found: Vec<Violation>) {
        for v in found {
            if self.violations.len() < MAX_VIOLATIONS {
                self.violations.push(v);
            }
        }
    }

    /// After the engine's teardown: every worker that is up is drained.
    fn drained<S: SchedulerCore>(&mut self, hosts: &[WorkerHost<S>], up: &[bool]) {
        for h in hosts {
            let w = h.id();
            if up.get(w.0 as usize) == Some(&true) && !h.is_drained() {
                let cap = h.worker().capacity();
                self.flag(Kind::Drained, || {
                    format!(
                        "{w} not drained at the end: {} roles, core empty {}, {cap:?}",
                        h.worker().live_handoffs(),
                        h.worker().is_empty()
                    )
                });
            }
        }
    }

    /// The director finished: every role ended, every holding ended, no
    /// booking left, every request terminal once.
    fn finished(&mut self, view: &dyn ServingView, torn_down: u64) {
        if let Some((w, q)) = self.held.iter().enumerate().find(|(_, q)| !q.is_empty()) {
            let n = q.len();
            self.flag(Kind::Transition, || {
                format!("w{w}: {n} held step outputs were never released")
            });
        }
        if let Err(e) = self.ledger.check_drained() {
            self.flag(Kind::Ledger, || e.to_string());
        }
        let mut open: Vec<(HandoffId, Role, RoleRec)> = self
            .roles
            .iter()
            .filter(|(_, r)| !r.ended)
            .map(|((id, role), r)| (*id, *role, *r))
            .collect();
        open.sort_by_key(|(id, role, _)| (*id, *role as u8));
        if let Some((id, role, r)) = open.first().copied() {
            let n = open.len();
            self.flag(Kind::RoleEnd, || {
                format!(
                    "{n} roles never ended, first {id} {role:?} on {} in {:?}",
                    r.worker, r.state
                )
            });
        }
        if self.live_pre + self.live_dec > 0 {
            let (p, d) = (self.live_pre, self.live_dec);
            let who: Vec<String> = self
                .reqs
                .iter()
                .filter(|(_, r)| r.pre.live || r.dec.live)
                .take(4)
                .map(|(id, _)| id.to_string())
                .collect();
            self.flag(Kind::Booking, || {
                format!(
                    "{p} prefill and {d} decode bookings left at the end ({})",
                    who.join(", ")
                )
            });
        }
        let left: Vec<RequestId> = self
            .reqs
            .iter()
            .filter(|(_, r)| r.live)
            .map(|(id, _)| *id)
            .collect();
        if !left.is_empty() && torn_down == 0 {
            let n = left.len();
            let first = left[0];
            self.flag(Kind::Terminal, || {
                format!("{n} requests neither finished nor failed with nothing torn down, first {first}")
            });
        }
        self.paths.failed += left.len() as u64;
        self.paths.torn_down_at_end += torn_down;
        self.paths.out_of_order_kv_events += view.out_of_order_kv_events();
        if !self.arrivals.is_empty() {
            let n = self.arrivals.len();
            self.flag(Kind::Terminal, || {
                format!("{n} trace requests never arrived")
            });
        }
    }
}

// ------------------------------------------------------------ the director

/// The checking director: [`Serving`] with a [`Checker`] watching every
/// call. Every [`Director`] method delegates to `Serving`.
pub struct Dst<I: Iterator<Item = TraceItem>> {
    inner: Serving<I>,
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
        self.inner.cancel(request, now)
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

// ------------------------------------------------------------ schedules

/// One schedule: a deployment, its engines and a trace (the fault plan is
/// `cfg.faults`).
#[derive(Clone, Debug)]
pub struct Schedule {
    /// The seed it was drawn from.
    pub seed: u64,
    /// The deployment, with the fault plan.
    pub cfg: ReplayConfig,
    /// Worker `i`'s engine.
    pub specs: Vec<EngineSpec>,
    /// The trace, ids `0..n` in arrival order.
    pub items: Vec<TraceItem>,
}

/// The schedule of `seed`: every choice comes from it. Small enough that one
/// costs a few milliseconds in release.
pub fn schedule(seed: u64) -> (ReplayConfig, Vec<EngineSpec>, Vec<TraceItem>) {
    let s = Schedule::new(seed);
    (s.cfg, s.specs, s.items)
}

impl Schedule {
    /// See [`schedule`].
    pub fn new(seed: u64) -> Schedule {
        let mut r = Rng::seeded(seed ^ 0xd57_d57_d57);
        let backend = if r.below(2) == 0 {
            Backend::Vllm
        } else {
            Backend::Sglang
        };
        // Mostly the backend's own ordering; a quarter of the time the other.
        let policy = match (backend, r.below(4) == 0) {
            (Backend::Vllm, false) | (Backend::Sglang, true) => HandoffPolicy::SourceFirst,
            _ => HandoffPolicy::DestinationFirst,
        };
        let prefill = 1 + r.below(3) as u32;
        let decode = 1 + r.below(3) as u32;
        let block_size = if backend == Backend::Sglang {
            [1, 16][r.below(2) as usize]
        } else {
            16
        };
        // Tiny decode pools: reservations wait, fail and expire.
        let decode_kv = [1_024, 2_048, 4_096, 16_384, 65_536][r.below(5) as usize];
        let prefill_kv = [8_192, 16_384, 65_536][r.below(3) as usize];
        let lease =
            Duration::from_millis([20, 100, 500, 2_000, 10_000][r.below(5) as usize] + r.below(50));
        let reservation =
            Duration::from_millis([20, 100, 500, 2_000, 10_000][r.below(5) as usize] + r.below(50));
        let max_running = [2, 4, 16, 64][r.below(4) as usize];
        let max_batched = [256, 1024, 4096][r.below(3) as usize];
        let spec = |kv_tokens: u64| EngineSpec {
            backend,
            kv_tokens,
            block_size,
            max_running,
            max_batched_tokens: max_batched,
            source_lease_ttl: Some(lease),
            ..EngineSpec::default()
        };
        let transfer = match r.below(3) {
            0 => TransferModel::Fixed(Duration::from_millis(1 + r.below(30))),
            1 => TransferModel::Bytes {
                base: Duration::from_millis(r.below(5)),
                bytes_per_token: 131_072,
                bandwidth: 5e9,
            },
            _ => TransferModel::Contention {
                base: Duration::from_millis(r.below(5)),
                bytes_per_token: 131_072,
                bandwidth: 5e9,
            },
        };
        let router = [
            RouterMode::KvAware,
            RouterMode::RoundRobin,
            RouterMode::LeastLoaded,
            RouterMode::PowerOfTwo,
            RouterMode::Random,
        ][r.below(5) as usize];
        // Mean gap from a burst (0) to idle (1 s).
        let gap_ms = [0, 2, 20, 200, 1_000][r.below(5) as usize];
        let most = [4, 16, 48, 128][r.below(4) as usize];
        let n = 1 + r.below(most);
        let families = 1 + r.below(3);
        let mut items = Vec::new();
        let mut t = 0u64;
        for i in 0..n {
            t += r.below(2 * gap_ms + 1);
            let prompt = match r.below(10) {
                // Longer than small decode pools hold.
                0 => 2_000 + r.below(4_000),
                1 | 2 => 500 + r.below(1_500),
                _ => 16 + r.below(500),
            } as u32;
            let chunks = prompt.div_ceil(512) as usize;
            let output = [8, 64, 300][r.below(3) as usize];
            let family = r.below(families);
            let shared = r.below(chunks as u64 + 1) as usize;
            let hashes = (0..chunks)
                .map(|b| {
                    if b < shared {
                        family * 1_000 + b as u64
                    } else {
                        1_000_000 + i * 100 + b as u64
                    }
                })
                .collect();
            items.push(TraceItem {
                request: Request {
                    id: RequestId(i),
                    prompt_tokens: prompt,
                    max_output_tokens: 1 + r.below(output) as u32,
                    prefix_hashes: hashes,
                    hash_block_tokens: 512,
                    session: None,
                    arrival: Instant::from_millis(t),
                },
                turn: None,
                delay: None,
            });
        }
        let workers = prefill + decode;
        // Faults over about the time the work takes.
        let span = Duration::from_millis(t + [50, 300, 2_000][r.below(3) as usize]);
        let intensity = if r.below(5) == 0 { 0.0 } else { r.next_f64() };
        let mut faults = FaultPlan::generate(seed, workers, n, span, intensity);
        // Client cancels of small traces round to none in `generate`.
        if intensity > 0.0 && r.below(2) == 0 {
            for _ in 0..1 + r.below(3) {
                let at = Instant(r.below(span.as_nanos() as u64 + 1));
                faults.push(
                    at,
                    Fault::Cancel {
                        request: RequestId(r.below(n)),
                    },
                );
            }
        }
        let handoff = HandoffConfig {
            reservation_ttl: reservation,
            renew_source_lease: (r.below(4) == 0).then(|| Duration::from_millis(10 + r.below(200))),
            early_fact_ttl: Duration::from_millis([5, 100, 30_000][r.below(3) as usize]),
            tombstones: [4, 1 << 16][r.below(2) as usize],
        };
        let cfg = ReplayConfig {
            engines: Vec::new(),
            backend,
            policy,
            prefill_workers: prefill,
            decode_workers: decode,
            router,
            block_size: spec(1).event_block_tokens(),
            transfer,
            message_latency: Duration::from_micros(50 + r.below(2_000)),
            handoff,
            seed,
            multi_step: r.below(4) != 0,
            transcript: false,
            faults,
        };
        // SGLang decode runs its default chunk cache or, half the time, the
        // radix cache (drawn apart from the stream above, so every other
        // choice of a seed stays as it was).
        let decode_radix =
            backend == Backend::Sglang && Rng::seeded(seed ^ 0x7ad1_c5ac).below(2) == 0;
        let specs = (0..workers)
            .map(|w| {
                if w < prefill {
                    spec(prefill_kv)
                } else {
                    EngineSpec {
                        decode_radix_cache: decode_radix,
                        ..spec(decode_kv)
                    }
                }
            })
            .collect();
        Schedule {
            seed,
            cfg,
            specs,
            items,
        }
    }

    /// Renumbers the trace `0..n` in arrival order (as a Mooncake reader
    /// would) and points cancels at the new ids, dropping cancels of
    /// requests no longer in the trace.
    fn normalised(mut self) -> Schedule {
        self.items
            .sort_by_key(|i| (i.request.arrival, i.request.id));
        let mut map = BTreeMap::new();
        for (k, item) in self.items.iter_mut().enumerate() {
            map.insert(item.request.id, RequestId(k as u64));
            item.request.id = RequestId(k as u64);
        }
        let timed = std::mem::take(&mut self.cfg.faults.timed);
        for mut t in timed {
            if let Fault::Cancel { request } = t.fault {
                match map.get(&request) {
                    Some(&r) => t.fault = Fault::Cancel { request: r },
                    None => continue,
                }
            }
            self.cfg.faults.timed.push(t);
        }
        self
    }

    /// The trace as Mooncake JSONL.
    pub fn trace_jsonl(&self) -> String {
        let mut w = handoff_workload::TraceWriter::new(Vec::new());
        for i in &self.items {
            w.write(i)
                .expect("generated requests use 512-token hash blocks");
        }
        String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
    }

    /// The deployment as one line of `key=value` words (durations in
    /// nanoseconds), which [`Schedule::from_text`] reads back: a regression
    /// test carries it so that it does not depend on how [`schedule`] draws
    /// deployments. Prefill workers share the first spec, decode workers the
    /// last (as [`schedule`] builds them).
    pub fn deployment(&self) -> String {
        let c = &self.cfg;
        let ns = |d: Duration| d.as_nanos();
        let pre = self.specs.first().cloned().unwrap_or_default();
        let dec = self.specs.last().cloned().unwrap_or_default();
        let transfer = match c.transfer {
            TransferModel::Fixed(d) => format!("fixed:{}", ns(d)),
            TransferModel::Bytes {
                base,
                bytes_per_token,
                bandwidth,
            } => format!("bytes:{}:{bytes_per_token}:{bandwidth:?}", ns(base)),
            TransferModel::Contention {
                base,
                bytes_per_token,
                bandwidth,
            } => format!("contention:{}:{bytes_per_token}:{bandwidth:?}", ns(base)),
        };
        format!(
            "seed={} backend={} policy={} prefill={} decode={} router={} router_block={} \
             page={} prefill_kv={} decode_kv={} max_running={} max_batched={} lease_ns={} \
             reservation_ns={} renew_ns={} early_ns={} tombstones={} transfer={transfer} \
             latency_ns={} multi_step={} decode_radix={}",
            c.seed,
            c.backend.name(),
            c.policy.name(),
            c.prefill_workers,
            c.decode_workers,
            c.router.name(),
            c.block_size,
            pre.block_size,
            pre.kv_tokens,
            dec.kv_tokens,
            pre.max_running,
            pre.max_batched_tokens,
            pre.source_lease_ttl.map_or(0, ns),
            ns(c.handoff.reservation_ttl),
            c.handoff.renew_source_lease.map_or(0, ns),
            ns(c.handoff.early_fact_ttl),
            c.handoff.tombstones,
            ns(c.message_latency),
            c.multi_step,
            dec.decode_radix_cache
        )
    }

    /// A schedule from its [`Schedule::deployment`] line, a fault plan in
    /// its text form and a Mooncake JSONL trace: what a regression test
    /// runs.
    pub fn from_text(deployment: &str, plan: &str, trace: &str) -> Result<Schedule, String> {
        let mut kv = BTreeMap::new();
        for word in deployment.split_whitespace() {
            let (k, v) = word
                .split_once('=')
                .ok_or_else(|| format!("deployment: `{word}` is not key=value"))?;
            kv.insert(k, v);
        }
        let get = |k: &str| {
            kv.get(k)
                .copied()
                .ok_or_else(|| format!("deployment: `{k}` missing"))
        };
        let num = |k: &str| -> Result<u64, String> {
            get(k)?
                .parse()
                .map_err(|_| format!("deployment: `{k}` is not a number"))
        };
        let dur = |k: &str| num(k).map(Duration::from_nanos);
        let backend = [Backend::Vllm, Backend::Sglang, Backend::TrtLlm]
            .into_iter()
            .find(|b| Ok(b.name()) == get("backend"))
            .ok_or("deployment: unknown backend")?;
        let policy = [
            HandoffPolicy::SourceFirst,
            HandoffPolicy::DestinationFirst,
            HandoffPolicy::Disabled,
        ]
        .into_iter()
        .find(|p| Ok(p.name()) == get("policy"))
        .ok_or("deployment: unknown policy")?;
        let router = RouterMode::from_name(get("router")?).ok_or("deployment: unknown router")?;
        let t = get("transfer")?;
        let parts: Vec<&str> = t.split(':').collect();
        let bad = || format!("deployment: bad transfer `{t}`");
        let n = |i: usize| -> Result<u64, String> {
            parts.get(i).and_then(|x| x.parse().ok()).ok_or_else(bad)
        };
        let bw =
            || -> Result<f64, String> { parts.get(3).and_then(|x| x.parse().ok()).ok_or_else(bad) };
        let transfer = match parts.first().copied() {
            Some("fixed") => TransferModel::Fixed(Duration::from_nanos(n(1)?)),
            Some("bytes") => TransferModel::Bytes {
                base: Duration::from_nanos(n(1)?),
                bytes_per_token: n(2)?,
                bandwidth: bw()?,
            },
            Some("contention") => TransferModel::Contention {
                base: Duration::from_nanos(n(1)?),
                bytes_per_token: n(2)?,
                bandwidth: bw()?,
            },
            _ => return Err(bad()),
        };
        let lease = num("lease_ns")?;
        let renew = num("renew_ns")?;
        let spec = |kv_tokens: u64| -> Result<EngineSpec, String> {
            Ok(EngineSpec {
                backend,
                kv_tokens,
                block_size: num("page")? as u32,
                max_running: num("max_running")? as u32,
                max_batched_tokens: num("max_batched")? as u32,
                source_lease_ttl: (lease > 0).then(|| Duration::from_nanos(lease)),
                ..EngineSpec::default()
            })
        };
        let prefill = num("prefill")? as u32;
        let decode = num("decode")? as u32;
        let (pre, mut dec) = (spec(num("prefill_kv")?)?, spec(num("decode_kv")?)?);
        // Absent from lines written before the decode chunk cache existed,
        // which ran SGLang's decode with a radix cache.
        dec.decode_radix_cache = match kv.get("decode_radix") {
            Some(v) => *v == "true",
            None => backend == Backend::Sglang,
        };
        let cfg = ReplayConfig {
            engines: Vec::new(),
            backend,
            policy,
            prefill_workers: prefill,
            decode_workers: decode,
            router,
            block_size: num("router_block")? as u32,
            transfer,
            message_latency: dur("latency_ns")?,
            handoff: HandoffConfig {
                reservation_ttl: dur("reservation_ns")?,
                renew_source_lease: (renew > 0).then(|| Duration::from_nanos(renew)),
                early_fact_ttl: dur("early_ns")?,
                tombstones: num("tombstones")? as usize,
            },
            seed: num("seed")?,
            multi_step: get("multi_step")? == "true",
            transcript: false,
            faults: FaultPlan::parse(plan).map_err(|e| format!("plan: {e}"))?,
        };
        let reader = handoff_workload::TraceReader::new(
            std::io::BufReader::new(trace.as_bytes()),
            handoff_workload::ReaderOptions::new("regression"),
        );
        let items = reader
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("trace: {e}"))?;
        Ok(Schedule {
            seed: cfg.seed,
            specs: (0..prefill + decode)
                .map(|w| {
                    if w < prefill {
                        pre.clone()
                    } else {
                        dec.clone()
                    }
                })
                .collect(),
            cfg,
            items,
        })
    }
}

// ------------------------------------------------------------ running

/// What one checked run found.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Broken rules, in the order seen (at most a few dozen).
    pub violations: Vec<Violation>,
    /// Faults the engine injected.
    pub faults: FaultCounts,
    /// Lifecycle paths reached.
    pub paths: Paths,
    /// Engine units run.
    pub units: u64,
}

/// Runs `s` with every check; a panic is reported as a [`Kind::Panic`]
/// violation.
pub fn check(s: &Schedule) -> Outcome {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_checked(s))) {
        Ok(o) => o,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "non-string panic".into());
            Outcome {
                violations: vec![Violation {
                    kind: Kind::Panic,
                    at: Instant::ZERO,
                    detail: msg,
                }],
                faults: FaultCounts::default(),
                paths: Paths::default(),
                units: 0,
            }
        }
    }
}

fn run_checked(s: &Schedule) -> Outcome {
    let cfg = &s.cfg;
    let workers = handoff_serving::deployment(cfg);
    let policy = handoff_serving::worker_policy(cfg);
    let make = |w: WorkerId| -> CoreBox {
        let spec = s.specs.get(w.0 as usize).cloned().unwrap_or_default();
        handoff_serving::make_core(&spec).expect("generated specs are valid")
    };
    let hosts = workers
        .iter()
        .map(|&(id, _)| {
            WorkerHost::new(Worker::new(
                id,
                Generation(0),
                policy,
                cfg.handoff,
                make(id),
            ))
        })
        .collect();
    let port = LocalHosts::new(hosts, make);
    let pools: Vec<Pool> = workers.iter().map(|(_, p)| *p).collect();
    let arrivals = s.items.iter().map(|i| i.request.id).collect();
    let check = Checker::new(pools, cfg.block_size, arrivals);
    let director = Dst::new(
        handoff_serving::serving(cfg, s.items.clone().into_iter()),
        check,
    );
    let mut engine = Engine::new(handoff_serving::engine_config(cfg), port, director);
    engine.director_mut().trace = std::env::var_os("DST_TRACE").is_some();
    let mut units = 0u64;
    while engine.run_event() {
        units += 1;
        check_hosts(&mut engine);
    }
    check_hosts(&mut engine);
    let n = engine.port().hosts().len();
    let up: Vec<bool> = (0..n as u32).map(|w| engine.is_up(WorkerId(w))).collect();
    quiescent(&mut engine, &up);
    let (director, port) = engine.run();
    let (serving, mut check) = director.into_parts();
    check.drained(port.hosts(), &up);
    let (report, _) = serving.into_outcome();
    if let Some(rep) = report {
        let (fin, fail) = (check.paths.finished, check.paths.failed);
        if rep.completed_requests != fin
            || rep.failed_requests != fail
            || rep.num_requests != s.items.len() as u64
        {
            check.flag(Kind::Terminal, || {
                format!(
                    "report counts {} requests, {} completed, {} failed; the checker saw {} requests, {fin} finished, {fail} failed",
                    rep.num_requests,
                    rep.completed_requests,
                    rep.failed_requests,
                    s.items.len()
                )
            });
        }
    }
    Outcome {
        violations: check.violations,
        faults: check.faults,
        paths: check.paths,
        units,
    }
}

type DstEngine<'a> = Engine<LocalHosts<'a, CoreBox>, Dst<std::vec::IntoIter<TraceItem>>>;

fn check_hosts(engine: &mut DstEngine<'_>) {
    let steps = engine.director().check.new_steps(engine.port().hosts());
    if !steps.is_empty() {
        engine.director_mut().check.follow_steps(steps);
    }
    let mut found = Vec::new();
    engine
        .director()
        .check
        .hosts(engine.port().hosts(), &mut found);
    if !found.is_empty() {
        engine.director_mut().check.extend(found);
    }
}

fn quiescent(engine: &mut DstEngine<'_>, up: &[bool]) {
    let mut found = Vec::new();
    engine
        .director()
        .check
        .quiescent(engine.port().hosts(), up, &mut found);
    if !found.is_empty() {
        engine.director_mut().check.extend(found);
    }
}

// ------------------------------------------------------------ shrinking

/// A failing schedule, shrunk.
#[derive(Clone, Debug)]
pub struct Failure {
    /// The seed it came from.
    pub seed: u64,
    /// The violations of the original schedule.
    pub original: Vec<Violation>,
    /// The shrunk schedule.
    pub shrunk: Schedule,
    /// Its violations.
    pub violations: Vec<Violation>,
    /// Runs the shrinker spent.
    pub runs: u64,
}

/// Shrinks failing `s` (whose run found `violations`) to the smallest
/// schedule that still shows a violation of the first one's kind: timed
/// faults removed one at a time, each fault probability zeroed, then runs
/// of requests removed (halves, quarters, ... single requests), repeated
/// until nothing more goes.
pub fn shrink(s: &Schedule, violations: Vec<Violation>) -> Failure {
    let kind = violations.first().map_or(Kind::Panic, |v| v.kind);
    let mut runs = 0u64;
    let mut best = s.clone().normalised();
    let mut best_v = {
        runs += 1;
        let o = check(&best);
        if o.violations.iter().any(|v| v.kind == kind) {
            o.violations
        } else {
            // Renumbering alone lost it: shrink the original as it was.
            best = s.clone();
            violations.clone()
        }
    };
    let mut try_it = |cand: Schedule, best: &mut Schedule, best_v: &mut Vec<Violation>| {
        let cand = cand.normalised();
        runs += 1;
        let o = check(&cand);
        if o.violations.iter().any(|v| v.kind == kind) {
            *best = cand;
            *best_v = o.violations;
            true
        } else {
            false
        }
    };
    loop {
        let mut progress = false;
        // Timed faults, last first.
        let mut i = best.cfg.faults.timed.len();
        while i > 0 {
            i -= 1;
            if i >= best.cfg.faults.timed.len() {
                continue;
            }
            let mut c = best.clone();
            c.cfg.faults.timed.remove(i);
            progress |= try_it(c, &mut best, &mut best_v);
        }
        // Probabilities.
        for k in 0..4 {
            let f = &best.cfg.faults;
            let p = [
                f.facts.drop,
                f.facts.duplicate,
                f.facts.delay,
                f.transfer_fail,
            ][k];
            if p <= 0.0 {
                continue;
            }
            let mut c = best.clone();
            match k {
                0 => c.cfg.faults.facts.drop = 0.0,
                1 => c.cfg.faults.facts.duplicate = 0.0,
                2 => c.cfg.faults.facts.delay = 0.0,
                _ => c.cfg.faults.transfer_fail = 0.0,
            }
            progress |= try_it(c, &mut best, &mut best_v);
        }
        // The trace: drop halves, then quarters, ... then single requests,
        // latest first (later requests matter least to earlier events).
        let mut size = best.items.len() / 2;
        while size >= 1 {
            let mut start = best.items.len().saturating_sub(size);
            loop {
                if best.items.len() > size && start + size <= best.items.len() {
                    let mut c = best.clone();
                    c.items.drain(start..start + size);
                    progress |= try_it(c, &mut best, &mut best_v);
                }
                if start == 0 {
                    break;
                }
                start = start.saturating_sub(size);
            }
            size /= 2;
        }
        if !progress {
            break;
        }
    }
    Failure {
        seed: s.seed,
        original: violations,
        shrunk: best,
        violations: best_v,
        runs,
    }
}

impl Failure {
    /// The seed, the shrunk plan and trace, the violations, and a
    /// regression test body.
    pub fn render(&self) -> String {
        let s = &self.shrunk;
        let plan = s.cfg.faults.to_string();
        let trace = s.trace_jsonl();
        let mut out = String::new();
        out.push_str(&format!(
            "schedule {} failed ({} violations; shrunk in {} runs to {} timed faults, {} requests):\n",
            self.seed,
            self.original.len(),
            self.runs,
            s.cfg.faults.timed.len(),
            s.items.len()
        ));
        for v in self.violations.iter().take(8) {
            out.push_str(&format!("  {v}\n"));
        }
        out.push_str(&format!("--- deployment ---\n{}\n", s.deployment()));
        out.push_str("--- fault plan ---\n");
        out.push_str(&plan);
        if !plan.ends_with('\n') {
            out.push('\n');
        }
        out.push_str("--- trace (Mooncake JSONL) ---\n");
        out.push_str(&trace);
        out.push_str("--- regression test ---\n");
        out.push_str(&format!(
            "#[test]\nfn dst_schedule_{}() {{\n    let deployment = \"{}\";\n    let plan = \"\n{}\";\n    let trace = r#\"\n{}\"#;\n    handoff_tests::dst::assert_passes(deployment, plan, trace);\n}}\n",
            self.seed,
            s.deployment(),
            plan.trim_end(),
            trace.trim_end(),
        ));
        out
    }
}

/// Runs the schedule given by a [`Schedule::deployment`] line, a fault
/// plan and a Mooncake JSONL trace (blank lines and indentation ignored) and
/// panics with every violation found: the body of a DST regression test.
pub fn assert_passes(deployment: &str, plan: &str, trace: &str) {
    let trace: String = trace
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    let s = Schedule::from_text(deployment, plan, &trace).unwrap_or_else(|e| panic!("{e}"));
    let o = check(&s);
    assert!(
        o.violations.is_empty(),
        "schedule {}:\n{}",
        s.seed,
        o.violations
            .iter()
            .map(|v| format!("  {v}\n"))
            .collect::<String>()
    );
}

// ------------------------------------------------------------ many

/// What many schedules found.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Schedules run.
    pub schedules: u64,
    /// Schedules with at least one violation.
    pub failing: Vec<(u64, Vec<Violation>)>,
    /// Faults injected, summed.
    pub faults: FaultCounts,
    /// Paths reached, summed.
    pub paths: Paths,
    /// Schedules whose plan injected something.
    pub faulted: u64,
    /// Engine units run, summed.
    pub units: u64,
}

impl Summary {
    /// Folds one schedule's outcome in.
    pub fn add(&mut self, seed: u64, o: Outcome) {
        self.schedules += 1;
        self.units += o.units;
        add_counts(&mut self.faults, &o.faults);
        if !o.faults.injected_nothing() {
            self.faulted += 1;
        }
        self.paths.add(&o.paths);
        if !o.violations.is_empty() {
            self.failing.push((seed, o.violations));
        }
    }
}

/// Runs schedules `seed..seed + n`, calling `progress(done)` after each.
pub fn run_many(seed: u64, n: u64, mut progress: impl FnMut(u64, &Summary)) -> Summary {
    let mut sum = Summary::default();
    for i in 0..n {
        let s = Schedule::new(seed.wrapping_add(i));
        let o = check(&s);
        sum.add(s.seed, o);
        progress(i + 1, &sum);
    }
    sum
}
