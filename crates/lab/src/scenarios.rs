//! The DEP's test scenarios, run on the real backend cores: each states what
//! it expects, what it observed, and a verdict (`handoff-mocker scenario
//! NAME`, which exits non-zero when any check fails). Scenarios 1–6 and 8
//! run here; 7 (live/replay parity) needs the live adapter and runs in the
//! command line, with the same [`Checks`].
//!
//! The lab is a configuration of the one [`Engine`]: a prefill and a decode
//! [`WorkerHost`] in this thread ([`LocalHosts`], cores from
//! [`make_core`]) and a lab director that routes through the shared
//! [`Frontend`], as [`handoff_serving::Serving`] does, and records what the scenarios
//! look at. Nothing is held back to look at the middle of a handoff: a
//! scenario runs the engine until the phase it wants
//! ([`Engine::run_until`]), inspects the hosts and the director there, and
//! injects faults at that instant ([`Engine::inject_fault`]). Transfers take
//! a fixed [`TRANSFER`], facts and the frontend's decode leg take
//! [`LATENCY`], and every step is one pass, so each phase of a handoff lasts
//! at least one instant and the engine can stop in it.

use handoff_core::host::{HostFinal, HostInput, WorkerHost};
use handoff_core::{
    Backend, CoreBox, DestinationEventKind as DE, DestinationState, Duration, Generation,
    HandoffConfig, HandoffId, HandoffMsg, Instant, KvCapacitySnapshot, KvEventData, LifecycleEvent,
    MsgBody, Request, RequestId, ReservationSummary, Role, RoleState, SourceEventKind as SE,
    SourceState as SS, Transition, Worker, WorkerEvent, WorkerId, WorkerRequest,
};
use handoff_engine::fault::FaultCounts;
use handoff_engine::Fault;
use handoff_engine::FaultPlan;
use handoff_engine::TransferModel;
use handoff_engine::{Director, Engine, EngineConfig, LocalHosts, Route};
use handoff_router::{Frontend, FrontendConfig, Pool, RouterMode};
use handoff_serving::{make_core, EngineSpec};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};

const P: WorkerId = WorkerId(0);
const D: WorkerId = WorkerId(1);

/// One-way latency of a fact between the workers, and of the frontend's
/// hop to the decode worker (both legs of routing it: at arrival under
/// destination-first, after the pin under source-first).
pub const LATENCY: Duration = Duration::from_micros(500);

/// How long every KV transfer takes.
pub const TRANSFER: Duration = Duration::from_millis(1);

/// Names accepted by [`run`] (the observations alone).
pub const NAMES: [&str; 6] = [
    "stranded-source",
    "destination-gate",
    "router-parity",
    "no-false-overlap",
    "failure-matrix",
    "duplicate-stale-late",
];

/// The DEP's test scenarios, in its order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// Scenario 1: vLLM stranded source (and SGLang's gate in the same situation).
    StrandedSource,
    /// Scenario 2: SGLang destination gate: zero, partial and full prefix hits.
    DestinationGate,
    /// Scenario 3: Router booking vs physical reservation along one handoff.
    RouterParity,
    /// Scenario 4: A reservation publishes no KV-index visibility before activation.
    NoFalseOverlap,
    /// Scenario 5: Cancel, lose the channel or restart an owner at every phase.
    FailureMatrix,
    /// Scenario 6: Duplicate, stale and late facts: idempotent cleanup, attempt-id
    /// isolation, no resurrection of released handoffs.
    DuplicateStaleLate,
    /// Scenario 7: The same trace on replay and on virtual- and wall-clock live
    /// (run by the command line, which has the live adapter).
    LiveReplayParity,
    /// Scenario 8: Every supported disaggregated router mode.
    RouterModes,
}

impl Scenario {
    /// Every scenario, in the DEP's order.
    pub const ALL: [Scenario; 8] = [
        Scenario::StrandedSource,
        Scenario::DestinationGate,
        Scenario::RouterParity,
        Scenario::NoFalseOverlap,
        Scenario::FailureMatrix,
        Scenario::DuplicateStaleLate,
        Scenario::LiveReplayParity,
        Scenario::RouterModes,
    ];

    /// Stable name (the command line's).
    pub fn name(self) -> &'static str {
        match self {
            Scenario::StrandedSource => "stranded-source",
            Scenario::DestinationGate => "destination-gate",
            Scenario::RouterParity => "router-parity",
            Scenario::NoFalseOverlap => "no-false-overlap",
            Scenario::FailureMatrix => "failure-matrix",
            Scenario::DuplicateStaleLate => "duplicate-stale-late",
            Scenario::LiveReplayParity => "live-replay-parity",
            Scenario::RouterModes => "router-modes",
        }
    }
}

/// One expectation of a scenario, with what was observed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Check {
    /// What is checked.
    pub what: String,
    /// What the DEP expects (a value, or a relation such as `> 0`).
    pub expected: Value,
    /// What the run showed.
    pub observed: Value,
    /// `pass` or `fail`.
    pub verdict: &'static str,
}

/// A scenario's checks for one backend.
#[derive(Clone, Debug, Default)]
pub struct Checks {
    checks: Vec<Check>,
}

impl Checks {
    fn push(&mut self, what: impl Into<String>, expected: Value, observed: Value, ok: bool) {
        self.checks.push(Check {
            what: what.into(),
            expected,
            observed,
            verdict: if ok { "pass" } else { "fail" },
        });
    }

    /// `observed` must equal `expected`.
    pub fn eq(
        &mut self,
        what: impl Into<String>,
        expected: impl Into<Value>,
        observed: impl Into<Value>,
    ) {
        let (e, o) = (expected.into(), observed.into());
        let ok = e == o;
        self.push(what, e, o, ok);
    }

    /// `observed` must be above zero.
    pub fn positive(&mut self, what: impl Into<String>, observed: &Value) {
        let ok = observed.as_f64().is_some_and(|x| x > 0.0);
        self.push(what, json!("> 0"), observed.clone(), ok);
    }

    /// `observed` must be below `bound`.
    pub fn below(&mut self, what: impl Into<String>, observed: &Value, bound: f64) {
        let ok = observed.as_f64().is_some_and(|x| x < bound);
        self.push(what, json!(format!("< {bound}")), observed.clone(), ok);
    }

    /// A check decided by the caller, with `expected` described in words.
    pub fn holds(
        &mut self,
        what: impl Into<String>,
        expected: &str,
        observed: impl Into<Value>,
        ok: bool,
    ) {
        self.push(what, json!(expected), observed.into(), ok);
    }

    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.verdict == "pass")
    }

    /// Breaks the first check on purpose (the command line's hidden
    /// `--break-first-check`, so a test can see a failure exit non-zero):
    /// it now expects anything but what it observed.
    pub fn sabotage(&mut self) {
        if let Some(c) = self.checks.first_mut() {
            c.expected = json!(format!("anything but {}", c.observed));
            c.verdict = "fail";
        }
    }

    /// The scenario's outcome for `backend` as JSON: its verdict, checks
    /// and the observations they were read from.
    pub fn outcome(self, scenario: Scenario, backend: &str, observed: Value) -> Value {
        json!({
            "scenario": scenario.name(),
            "backend": backend,
            "verdict": if self.passed() { "pass" } else { "fail" },
            "checks": self.checks,
            "observed": observed,
        })
    }
}

/// The lab's [`Director`]: arrivals the scenario gives it, routed by the
/// [`Frontend`] (`arrive` for new requests, `on_event` for what workers
/// report), plus the record the scenarios read.
struct LabDirector {
    frontend: Frontend,
    /// Requests due, with the instant they arrive, in order.
    arrivals: VecDeque<(Instant, Request)>,
    /// Every attempt routed, by request, with the worker it went to (what
    /// a client cancel has to reach).
    attempts: BTreeMap<RequestId, Vec<(WorkerId, HandoffId)>>,
    /// The request of every attempt routed.
    request_of: BTreeMap<HandoffId, RequestId>,
    /// Every transition as text, for the scenario's JSON.
    log: Vec<String>,
    /// The same transitions, typed, for the scenarios' predicates.
    seen: Vec<Transition>,
    /// Requests whose destination role became active, in order.
    activated: Vec<RequestId>,
    /// Watched blocks the decode worker reported Stored before any
    /// activation (false overlap if non-zero).
    stored_before_activation: u64,
    /// Watched blocks the decode worker reported Stored from the first
    /// activation on.
    stored_at_or_after_activation: u64,
    /// Summaries of `DestinationReserved` facts as they left the decode
    /// worker, with the request they reserve for.
    summaries: Vec<(RequestId, ReservationSummary)>,
    /// Requests whose prefill pinned for a handoff.
    pinned: Vec<RequestId>,
    /// Requests that finished decoding.
    finished: Vec<RequestId>,
    /// Block hashes of the handoff under observation.
    watch: HashSet<u64>,
    /// Destination blocks the decode worker holds in reservations, summed
    /// from its transitions' ownership deltas.
    decode_reserved: i64,
    /// Decode router booking and decode reservation at the moment the
    /// frontend first routed the decode side (before the worker saw it).
    at_routing: Option<(u64, u64)>,
    /// Transfers started whose completion the engine has not reported yet.
    transfers: BTreeSet<HandoffId>,
    /// Every fact a worker sent: (from, to, fact), in order.
    sent: Vec<(WorkerId, WorkerId, HandoffMsg)>,
    /// Every fact a worker dropped: its attempt and whether it was dropped
    /// as stale (its attempt already released).
    dropped: Vec<(HandoffId, bool)>,
}

impl LabDirector {
    fn new(frontend: Frontend) -> Self {
        LabDirector {
            frontend,
            arrivals: VecDeque::new(),
            attempts: BTreeMap::new(),
            request_of: BTreeMap::new(),
            log: Vec::new(),
            seen: Vec::new(),
            activated: Vec::new(),
            stored_before_activation: 0,
            stored_at_or_after_activation: 0,
            summaries: Vec::new(),
            pinned: Vec::new(),
            finished: Vec::new(),
            watch: HashSet::new(),
            decode_reserved: 0,
            at_routing: None,
            transfers: BTreeSet::new(),
            sent: Vec::new(),
            dropped: Vec::new(),
        }
    }

    fn pool(w: WorkerId) -> Pool {
        if w == P {
            Pool::Prefill
        } else {
            Pool::Decode
        }
    }

    /// Hands `request` on to `to` after `delay`, remembering the attempt it
    /// belongs to and, for the decode side's first routing, the books then.
    fn route(
        &mut self,
        to: WorkerId,
        request: WorkerRequest,
        delay: Duration,
        out: &mut Vec<Route>,
    ) {
        if let WorkerRequest::HandoffSource { id, request: r }
        | WorkerRequest::HandoffDestination { id, request: r, .. } = &request
        {
            self.attempts.entry(r.id).or_default().push((to, *id));
            self.request_of.insert(*id, r.id);
        }
        if to == D
            && matches!(request, WorkerRequest::HandoffDestination { .. })
            && self.at_routing.is_none()
        {
            let booked = self
                .frontend
                .decode_router()
                .and_then(|d| d.load(D))
                .map_or(0, |l| l.booked_blocks);
            let reserved = u64::try_from(self.decode_reserved).unwrap_or(0);
            self.at_routing = Some((booked, reserved));
        }
        out.push(Route { to, request, delay });
    }

    fn observe(&mut self, w: WorkerId, e: &WorkerEvent) {
        match e {
            WorkerEvent::Transition(t) => {
                self.log.push(format!(
                    "{} {} {} {} -> {} [{}]",
                    t.worker,
                    t.role.name(),
                    t.event,
                    t.from,
                    t.to,
                    t.delta
                ));
                self.seen.push(*t);
                if t.worker == D {
                    self.decode_reserved += t.delta.reserved;
                }
                if t.to == RoleState::Destination(DestinationState::Active) {
                    self.activated.push(t.request);
                }
            }
            WorkerEvent::StartTransfer { id, .. } => {
                self.transfers.insert(*id);
            }
            WorkerEvent::PrefillPinned { request, .. } => self.pinned.push(*request),
            WorkerEvent::Dropped { id, reason, .. } => {
                let stale = matches!(
                    reason,
                    handoff_core::DropReason::Rejected(handoff_core::TransitionError::Stale { .. })
                );
                self.dropped.push((*id, stale));
            }
            WorkerEvent::RequestFinished { request, .. } => self.finished.push(*request),
            WorkerEvent::Kv { event, .. } if w == D => {
                if let KvEventData::Stored { block_hashes, .. } = &event.data {
                    let n = block_hashes
                        .iter()
                        .filter(|h| self.watch.contains(h))
                        .count() as u64;
                    // Activation is the only way handoff KV becomes valid on
                    // decode; anything stored before it would be false overlap.
                    if self.activated.is_empty() {
                        self.stored_before_activation += n;
                    } else {
                        self.stored_at_or_after_activation += n;
                    }
                }
            }
            _ => {}
        }
    }

    /// Whether some transition so far satisfies `pred`.
    fn saw(&self, pred: impl Fn(&Transition) -> bool) -> bool {
        self.seen.iter().any(pred)
    }

    /// Whether some transition so far was caused by `event`.
    fn saw_event(&self, event: impl Into<LifecycleEvent>) -> bool {
        let event = event.into();
        self.saw(|t| t.event == event)
    }

    /// Whether `event` moved a source role from `from` to `to`.
    fn saw_source_move(&self, event: SE, from: SS, to: SS) -> bool {
        self.saw(|t| {
            t.event == LifecycleEvent::Source(event)
                && t.from == RoleState::Source(from)
                && t.to == RoleState::Source(to)
        })
    }
}

impl Director for LabDirector {
    fn next_arrival(&mut self) -> Option<Instant> {
        self.arrivals.front().map(|(t, _)| *t)
    }

    /// Routes the arrival through the frontend. The decode leg of a
    /// destination-first arrival travels the frontend's hop, so the engine
    /// can stop after the source has its request and before the decode
    /// worker has its own.
    fn arrive(&mut self, now: Instant, out: &mut Vec<Route>) {
        let Some((_, request)) = self.arrivals.pop_front() else {
            return;
        };
        for (to, req) in self.frontend.arrive(request, now) {
            let delay = if Self::pool(to) == Pool::Decode {
                LATENCY
            } else {
                Duration::ZERO
            };
            self.route(to, req, delay, out);
        }
    }

    fn on_event(&mut self, w: WorkerId, e: &WorkerEvent, now: Instant, out: &mut Vec<Route>) {
        self.observe(w, e);
        if matches!(e, WorkerEvent::StartTransfer { .. }) {
            // The engine times transfers; the frontend has no part in them.
            return;
        }
        for (to, req, delay) in self.frontend.on_event(w, Self::pool(w), e, now) {
            self.route(to, req, delay, out);
        }
    }

    fn on_transmit(&mut self, from: WorkerId, to: WorkerId, msg: &HandoffMsg, _now: Instant) {
        self.sent.push((from, to, *msg));
        if let MsgBody::DestinationReserved { summary } = msg.body {
            if let Some(r) = self.request_of.get(&msg.id) {
                self.summaries.push((*r, summary));
            }
        }
    }

    fn on_transfer_done(&mut self, id: HandoffId, _ok: bool, _now: Instant) {
        self.transfers.remove(&id);
    }

    fn on_worker_lost(&mut self, w: WorkerId, _now: Instant, _out: &mut Vec<Route>) {
        self.frontend.worker_lost(w);
        // The lab does not migrate: what a lost worker held ends with it,
        // and the frontend releases every booking of those requests (their
        // owner will never report them). The finished ones hold none.
        let lost: Vec<RequestId> = self
            .attempts
            .iter()
            .filter(|(r, a)| !self.finished.contains(r) && a.iter().any(|(x, _)| *x == w))
            .map(|(r, _)| *r)
            .collect();
        for r in lost {
            self.frontend.request_lost(r, w);
        }
    }

    fn on_worker_back(
        &mut self,
        w: WorkerId,
        _generation: Generation,
        now: Instant,
        out: &mut Vec<Route>,
    ) {
        for (to, request, delay) in self.frontend.worker_back(w, Self::pool(w), now) {
            out.push(Route { to, request, delay });
        }
    }

    /// Every attempt of `request`, where it was routed (a delivery still on
    /// its way gets there after the cancel, as it would on a network).
    fn cancel(&mut self, request: RequestId, _now: Instant) -> Vec<(WorkerId, HandoffId)> {
        self.attempts.get(&request).cloned().unwrap_or_default()
    }

    /// The lab reads its books from the hosts before anything would be torn
    /// down, so the end of a run adds nothing to them.
    fn finish(&mut self, _end: Instant, _finals: &[HostFinal], _torn: u64, _faults: FaultCounts) {}
}

type LabEngine = Engine<LocalHosts<'static, CoreBox>, LabDirector>;

/// Reading the lab's state: the director's record and the hosts' books.
trait View {
    /// The engine read.
    fn engine(&self) -> &LabEngine;

    /// The director's record.
    fn d(&self) -> &LabDirector {
        self.engine().director()
    }

    /// Worker `w`'s host. Its worker's state includes a step in progress
    /// (the core has run it); the step's outputs reach the director when it
    /// ends.
    fn host(&self, w: WorkerId) -> &WorkerHost<CoreBox> {
        &self.engine().port().hosts()[w.0 as usize]
    }

    /// Worker `w`'s KV books.
    fn cap(&self, w: WorkerId) -> KvCapacitySnapshot {
        self.host(w).worker().capacity()
    }

    /// Both workers' drained flags and KV in use, for a scenario's `end`.
    fn end(&self) -> Value {
        json!({
            "prefill": { "drained": self.host(P).is_drained(), "kv_used_blocks": self.cap(P).kv_used_blocks() },
            "decode": { "drained": self.host(D).is_drained(), "kv_used_blocks": self.cap(D).kv_used_blocks() },
        })
    }
}

impl View for LabEngine {
    fn engine(&self) -> &LabEngine {
        self
    }
}

/// One prefill and one decode worker of `backend` in the engine.
struct Lab {
    engine: LabEngine,
    /// The decode engine's KV event granularity (what watched hashes use).
    decode_block_tokens: u32,
}

impl View for Lab {
    fn engine(&self) -> &LabEngine {
        &self.engine
    }
}

fn request(id: u64, prompt: u32, output: u32, hashes: &[u64]) -> Request {
    Request {
        id: RequestId(id),
        prompt_tokens: prompt,
        max_output_tokens: output,
        prefix_hashes: hashes.to_vec(),
        hash_block_tokens: 512,
        session: None,
        arrival: Instant::ZERO,
    }
}

fn chunks(base: u64, n: u64) -> Vec<u64> {
    (0..n).map(|i| base + i).collect()
}

impl Lab {
    fn new(backend: Backend, decode_kv_tokens: u64) -> Lab {
        Lab::with_faults(backend, decode_kv_tokens, FaultPlan::none())
    }

    /// A lab whose engine applies `faults` (its lossy-fact settings) to
    /// every fact.
    fn with_faults(backend: Backend, decode_kv_tokens: u64, faults: FaultPlan) -> Lab {
        Lab::build(backend, decode_kv_tokens, faults, false)
    }

    /// A lab whose SGLang decode worker runs the DEP's locked-prefix mode
    /// (`--disaggregation-decode-enable-radix-cache`) instead of SGLang's
    /// default chunk cache.
    fn locked_prefix(backend: Backend, decode_kv_tokens: u64) -> Lab {
        Lab::build(backend, decode_kv_tokens, FaultPlan::none(), true)
    }

    fn build(backend: Backend, decode_kv_tokens: u64, faults: FaultPlan, radix: bool) -> Lab {
        let spec = |kv| EngineSpec {
            backend,
            kv_tokens: kv,
            block_size: 16,
            source_lease_ttl: Some(Duration::from_secs(30)),
            ..EngineSpec::default()
        };
        let specs = [
            spec(1 << 18),
            EngineSpec {
                decode_radix_cache: radix,
                ..spec(decode_kv_tokens)
            },
        ];
        let (block_size, decode_block_tokens) =
            (specs[0].event_block_tokens(), specs[1].event_block_tokens());
        let policy = backend.native_policy();
        let handoff = HandoffConfig {
            reservation_ttl: Duration::from_secs(30),
            ..HandoffConfig::default()
        };
        let core =
            move |w: WorkerId| make_core(&specs[w.0 as usize]).expect("scenario engines are valid");
        let hosts = [P, D]
            .into_iter()
            .map(|w| WorkerHost::new(Worker::new(w, Generation(0), policy, handoff, core(w))))
            .collect();
        let frontend = Frontend::new(
            FrontendConfig {
                policy,
                aggregated: false,
                mode: RouterMode::KvAware,
                block_size,
                seed: 0,
                hop: LATENCY,
                disabled_delay: TRANSFER,
            },
            &[(P, Pool::Prefill), (D, Pool::Decode)],
        );
        let cfg = EngineConfig {
            message_latency: LATENCY,
            transfer: TransferModel::Fixed(TRANSFER),
            multi_step: false,
            faults,
        };
        Lab {
            engine: Engine::new(
                cfg,
                LocalHosts::new(hosts, core),
                LabDirector::new(frontend),
            ),
            decode_block_tokens,
        }
    }

    /// Counts Stored events for `r`'s blocks only.
    fn watch(&mut self, r: &Request) {
        let mut h = Vec::new();
        r.block_hashes(self.decode_block_tokens, &mut h);
        self.engine.director_mut().watch = h.into_iter().collect();
    }

    /// `r` arrives at the frontend now.
    fn arrive(&mut self, mut r: Request) {
        let now = self.engine.now();
        r.arrival = now;
        self.engine.director_mut().arrivals.push_back((now, r));
        self.engine.arrivals_changed();
    }

    /// Hands `r` to worker `to` now as an ordinary request, past the
    /// frontend (load the scenario puts there, not traffic it routes).
    fn submit_ordinary(&mut self, to: WorkerId, r: Request) {
        self.engine
            .inject(to, HostInput::Request(WorkerRequest::Ordinary(r)));
    }

    /// Runs until `stop` holds (checked first, then after each instant), or
    /// nothing is left to happen; returns whether it holds. After a stop the
    /// engine's clock is at the next instant something is due, not yet
    /// handled: what is injected now lands after everything up to the phase
    /// and before anything after it.
    fn run_until(&mut self, stop: impl Fn(&LabEngine) -> bool) -> bool {
        stop(&self.engine) || self.engine.run_until(stop)
    }

    /// Runs until nothing is left to happen: every fact delivered, every
    /// transfer and timer that matters done. Nothing is torn down, so the
    /// books read afterwards are what the workers gave back on their own.
    fn run_out(&mut self) {
        self.engine.run_until(|_| false);
    }

    /// Applies `plan`'s timed faults now. A partition that never heals is a
    /// lost connection, and both ends are told so (`PeerLost`), as a
    /// transport would tell them.
    fn inject(&mut self, plan: &FaultPlan) {
        for f in &plan.timed {
            self.engine.inject_fault(f.fault);
            if let Fault::Partition { a, b, until } = f.fault {
                if until != Instant::MAX {
                    continue;
                }
                self.engine.inject(a, HostInput::PeerLost(b));
                self.engine.inject(b, HostInput::PeerLost(a));
            }
        }
    }
}

/// Decode holds one 4K request; a second handoff arrives while it runs.
fn stranded(backend: Backend) -> Value {
    let mut lab = Lab::new(backend, 6 * 1024);
    lab.submit_ordinary(D, request(100, 4096, 400, &chunks(1000, 8)));
    lab.run_until(|e| e.cap(D).running_requests > 0);
    let r = request(1, 4096, 16, &chunks(1, 8));
    lab.watch(&r);
    lab.arrive(r);
    // Let the lifecycle move as far as it can while decode is full.
    lab.run_until(|e| {
        e.d().saw_event(DE::Unavailable)
            && (e.d().saw_event(SE::PrefillPinned) || backend == Backend::Sglang)
    });
    // Any move out of Reserving (the Unavailable self-transition included).
    let reserving = RoleState::Destination(DestinationState::Reserving);
    lab.run_until(|e| e.now() >= Instant::from_millis(500) || e.d().saw(|t| t.from == reserving));
    let prefill = lab.d().frontend.prefill_router().load(P);
    let during = json!({
        "prefill_pinned_blocks": lab.cap(P).pinned_source_blocks,
        "prefill_compute_booked_tokens": prefill.map_or(0, |l| l.booked_prefill_tokens),
        "prefill_request_booked_blocks": prefill.map_or(0, |l| l.booked_blocks),
        "prefill_dispatched": lab.d().saw_source_move(SE::DestinationReserved, SS::NotStarted, SS::Computing) || lab.d().saw_source_move(SE::Start, SS::NotStarted, SS::Computing),
        "destination_reservation_unavailable": lab.d().saw_event(DE::Unavailable),
        "decode_reserved_blocks": lab.cap(D).reserved_destination_blocks,
    });
    lab.run_until(|e| e.d().activated.contains(&RequestId(1)));
    let at_activation = json!({
        "decode_stored_blocks_before_activation": lab.d().stored_before_activation,
        "source_still_pinned_at_activation_blocks": lab.cap(P).pinned_source_blocks,
    });
    lab.run_out();
    json!({
        "scenario": "stranded-source",
        "backend": backend.name(),
        "while_decode_full": during,
        "at_activation": at_activation,
        "stored_blocks_after_activation": lab.d().stored_at_or_after_activation,
        "end": lab.end(),
        "transitions": lab.d().log,
    })
}

/// Zero, partial and full destination-prefix hits after decode learned a
/// prefix; SGLang's decode keeps a radix cache here (the DEP's locked-prefix
/// mode), as its default chunk cache never hits.
fn gate(backend: Backend) -> Value {
    let mut lab = Lab::locked_prefix(backend, 1 << 16);
    let mut hits = Vec::new();
    let prefix = chunks(500, 4);
    let cases = [
        ("zero", request(1, 2048, 4, &prefix)),
        (
            "partial",
            request(2, 3072, 4, &[prefix.clone(), chunks(600, 2)].concat()),
        ),
        ("full", request(3, 2048, 4, &prefix)),
    ];
    for (name, r) in cases {
        let id = r.id;
        lab.arrive(r);
        lab.run_until(|e| e.d().finished.contains(&id) && e.host(P).is_drained());
        if let Some((_, s)) = lab.d().summaries.iter().rev().find(|(q, _)| *q == id) {
            hits.push(json!({
                "hit": name,
                "matched_prefix_tokens": s.matched_prefix_tokens,
                "physical_blocks": s.physical_blocks,
                "transfer_tokens": s.transfer_tokens,
                "request_slot": s.request_slot,
                "decode_headroom_tokens": s.decode_headroom_tokens,
            }));
        }
    }
    lab.run_out();
    json!({ "scenario": "destination-gate", "backend": backend.name(), "reservations": hits, "end": lab.end() })
}

/// Router booking vs physical occupancy along one handoff.
fn router_parity(backend: Backend) -> Value {
    let mut lab = Lab::new(backend, 1 << 16);
    let r = request(1, 2048, 8, &chunks(700, 4));
    lab.arrive(r);
    let mut points = Vec::new();
    let sample = |l: &Lab, at: &str| {
        let dl = l.d().frontend.decode_router().and_then(|d| d.load(D));
        let c = l.cap(D);
        json!({
            "point": at,
            "decode_router_booked_blocks": dl.map_or(0, |x| x.booked_blocks),
            "decode_reserved_blocks": c.reserved_destination_blocks,
            "decode_active_blocks": c.active_blocks,
            "decode_kv_used_blocks": c.kv_used_blocks(),
        })
    };
    // Stop in the instant the frontend routed the decode side; the decode
    // worker gets the request a hop later.
    lab.run_until(|e| e.d().at_routing.is_some());
    let (booked, reserved) = lab.d().at_routing.unwrap_or_default();
    points.push(json!({
        "point": "routed",
        "decode_router_booked_blocks": booked,
        "decode_reserved_blocks": reserved,
    }));
    // The transfer takes TRANSFER, so the reservation is seen before it
    // becomes active.
    lab.run_until(|e| e.cap(D).reserved_destination_blocks > 0);
    points.push(sample(&lab, "reserved"));
    lab.run_until(|e| !e.d().activated.is_empty());
    points.push(sample(&lab, "activated"));
    lab.run_out();
    points.push(sample(&lab, "completed"));
    json!({ "scenario": "router-parity", "backend": backend.name(), "points": points, "end": lab.end() })
}

/// Overlap a router sees on decode for a request's prefix, before and after
/// activation. SGLang's decode keeps a radix cache here (the DEP's
/// locked-prefix mode): its default chunk cache publishes nothing at all.
fn no_false_overlap(backend: Backend) -> Value {
    let mut lab = Lab::locked_prefix(backend, 1 << 16);
    let r = request(1, 2048, 8, &chunks(800, 4));
    lab.watch(&r);
    lab.arrive(r.clone());
    let overlap = |l: &mut Lab| {
        l.engine
            .director_mut()
            .frontend
            .decode_router_mut()
            .map_or(0, |d| d.overlap_blocks(D, &r))
    };
    lab.run_until(|e| e.cap(D).reserved_destination_blocks > 0);
    let during = overlap(&mut lab);
    lab.run_until(|e| !e.d().activated.is_empty());
    let after = overlap(&mut lab);
    lab.run_out();
    json!({
        "scenario": "no-false-overlap",
        "backend": backend.name(),
        "decode_overlap_blocks_while_reserved": during,
        "decode_stored_blocks_before_activation": lab.d().stored_before_activation,
        "decode_overlap_blocks_after_activation": after,
        "end": lab.end(),
    })
}

/// The faults of the failure matrix, by name.
const FAULTS: [&str; 4] = [
    "cancel",
    "lose-channel",
    "restart-prefill",
    "restart-decode",
];

/// The fault plan for `fault` at `at`: a client cancel of the handoff's
/// request, the prefill–decode link cut for good, or a restart of an owner.
fn fault_plan(fault: &str, at: Instant) -> FaultPlan {
    let fault = match fault {
        "cancel" => Fault::Cancel {
            request: RequestId(1),
        },
        "lose-channel" => Fault::Partition {
            a: P,
            b: D,
            until: Instant::MAX,
        },
        "restart-prefill" => Fault::Restart { worker: P },
        _ => Fault::Restart { worker: D },
    };
    let mut plan = FaultPlan::none();
    plan.push(at, fault);
    plan
}

/// Cancel, lose the link, or restart an owner at each lifecycle point: run
/// to the point, inject the fault plan there, run out, read the books.
fn failure_matrix(backend: Backend) -> Value {
    // A point holds while the handoff is in that phase, not merely after
    // it passed through it; the fault lands in the phase.
    type Point = (&'static str, u64, fn(&LabEngine) -> bool);
    let points: [Point; 6] = [
        ("before-decode-routing", 1 << 16, |e| {
            e.d().saw_event(SE::Start) && !e.d().saw(|t| t.role == Role::Destination)
        }),
        ("after-booking-before-reservation", 6 * 1024, |e| {
            e.d().saw_event(DE::Routed)
                && e.d().saw_event(DE::Unavailable)
                && e.cap(D).reserved_destination_blocks == 0
        }),
        ("after-reservation", 1 << 16, |e| {
            e.d().saw_event(DE::Reserved) && e.cap(D).reserved_destination_blocks > 0
        }),
        ("while-source-pinned", 1 << 16, |e| {
            e.d().saw_event(SE::PrefillPinned) && e.cap(P).pinned_source_blocks > 0
        }),
        ("after-receive-before-reader", 1 << 16, |e| {
            // One end has finished with the transfer; the other has not
            // heard yet.
            e.d().saw_event(DE::ReceiveCompleted) != e.d().saw_event(SE::ReaderCompleted)
        }),
        ("during-transfer", 1 << 16, |e| !e.d().transfers.is_empty()),
    ];
    let load = |r: &handoff_router::Router, w| r.load(w).map_or(0, |l| l.booked_blocks);
    let mut rows = Vec::new();
    for (point, decode_kv, reached) in points {
        for fault in FAULTS {
            let mut lab = Lab::new(backend, decode_kv);
            if decode_kv < 1 << 16 {
                // No room for the handoff until this long request finishes.
                lab.submit_ordinary(D, request(100, 4096, 400, &chunks(2000, 8)));
                lab.run_until(|e| e.cap(D).running_requests > 0);
            }
            lab.arrive(request(1, 4096, 8, &chunks(3000, 8)));
            let got_there = lab.run_until(reached);
            let plan = fault_plan(fault, lab.engine.now());
            lab.inject(&plan);
            // Every handoff ownership must come back with no help from the
            // peer beyond what the fault tells it (a new generation, a lost
            // link): timers and local cleanup only. The filler finishes.
            lab.run_out();
            // The plan's text: its seed, then the timed fault.
            let plan_text = plan.to_string();
            rows.push(json!({
                "point": point,
                "fault": fault,
                "plan": plan_text.lines().nth(1).unwrap_or_default(),
                "reached": got_there,
                "prefill_drained": lab.host(P).is_drained(),
                "decode_drained": lab.host(D).is_drained(),
                "prefill_kv_used_blocks": lab.cap(P).kv_used_blocks(),
                "decode_kv_used_blocks": lab.cap(D).kv_used_blocks(),
                "prefill_live_handoffs": lab.host(P).worker().live_handoffs(),
                "decode_live_handoffs": lab.host(D).worker().live_handoffs(),
                "prefill_router_booked_blocks": load(lab.d().frontend.prefill_router(), P),
                "decode_router_booked_blocks": lab.d().frontend.decode_router().map_or(0, |r| load(r, D)),
            }));
        }
    }
    json!({ "scenario": "failure-matrix", "backend": backend.name(), "cases": rows })
}

/// Duplicate, stale and late facts. Every fact is duplicated (the second
/// copy late) while two handoffs run, one after the other; then every fact
/// ever sent is delivered again, after both attempts were released, while
/// a third handoff is in flight.
fn duplicate_stale_late(backend: Backend) -> Value {
    let mut plan = FaultPlan::parse("seed 7; duplicate 1; delay 0.5 max 3ms").expect("valid plan");
    plan.seed = 7;
    let mut lab = Lab::with_faults(backend, 1 << 16, plan);
    let released_once = |l: &Lab, r: u64| {
        let ends = |role: Role| {
            l.d()
                .seen
                .iter()
                .filter(|t| {
                    t.request == RequestId(r)
                        && t.role == role
                        && matches!(
                            t.to,
                            RoleState::Source(SS::Released)
                                | RoleState::Destination(DestinationState::Released)
                        )
                })
                .count()
        };
        (ends(Role::Source), ends(Role::Destination))
    };
    for r in [1, 2] {
        lab.arrive(request(r, 2048, 8, &chunks(4000 + 10 * r, 4)));
        lab.run_until(|e| e.d().finished.contains(&RequestId(r)) && e.host(P).is_drained());
    }
    lab.run_out();
    let stats = |l: &Lab| (l.host(P).worker().stats(), l.host(D).worker().stats());
    let (p0, d0) = stats(&lab);
    let duplicates = p0.duplicates + d0.duplicates;
    let drops_before = lab.d().dropped.len();
    // Replay every fact, late, while request 3 is mid-handoff.
    let old: Vec<(WorkerId, WorkerId, HandoffMsg)> = lab.d().sent.clone();
    let old_ids: BTreeSet<HandoffId> = old.iter().map(|(_, _, m)| m.id).collect();
    let transitions_before = lab.d().seen.len();
    lab.arrive(request(3, 2048, 8, &chunks(4100, 4)));
    lab.run_until(|e| e.d().saw_event(SE::PrefillPinned) && e.d().pinned.contains(&RequestId(3)));
    for (from, to, msg) in &old {
        lab.engine.inject(
            *to,
            HostInput::Message {
                from: *from,
                msg: *msg,
            },
        );
    }
    lab.run_until(|e| e.d().finished.contains(&RequestId(3)) && e.host(P).is_drained());
    lab.run_out();
    let stale_old = lab.d().dropped[drops_before..]
        .iter()
        .filter(|(id, stale)| *stale && old_ids.contains(id))
        .count();
    let resurrected = lab.d().seen[transitions_before..]
        .iter()
        .filter(|t| old_ids.contains(&t.id))
        .count();
    json!({
        "scenario": "duplicate-stale-late",
        "backend": backend.name(),
        "duplicate_facts_ignored": duplicates,
        "late_facts_replayed": old.len(),
        "late_facts_dropped_as_stale": stale_old,
        "transitions_of_released_attempts_after_replay": resurrected,
        "roles_released": [released_once(&lab, 1), released_once(&lab, 2), released_once(&lab, 3)],
        "third_request_finished": lab.d().finished.contains(&RequestId(3)),
        "prefill_live_handoffs": lab.host(P).worker().live_handoffs(),
        "decode_live_handoffs": lab.host(D).worker().live_handoffs(),
        "end": lab.end(),
    })
}

/// Every router mode of a disaggregated deployment (2 prefill + 2 decode
/// workers), on a small synthetic workload: requests complete, bookings
/// and KV come back, work spreads.
fn router_modes(backend: Backend) -> Value {
    let mut rows = Vec::new();
    for mode in RouterMode::ALL {
        let spec = |kv| EngineSpec {
            backend,
            kv_tokens: kv,
            block_size: if backend == Backend::Sglang { 1 } else { 16 },
            ..EngineSpec::default()
        };
        let specs = [spec(1 << 18), spec(1 << 18), spec(1 << 16), spec(1 << 16)];
        let cfg = handoff_serving::ReplayConfig {
            backend,
            policy: backend.native_policy(),
            prefill_workers: 2,
            decode_workers: 2,
            router: mode,
            block_size: specs[0].event_block_tokens(),
            seed: 3,
            ..handoff_serving::ReplayConfig::default()
        };
        let workload =
            handoff_workload::SyntheticWorkload::new(handoff_workload::SyntheticConfig {
                seed: 11,
                requests: 60,
                rate_per_sec: 30.0,
                ..handoff_workload::SyntheticConfig::default()
            });
        let o = handoff_replay::Replay::new(cfg, workload, |w: WorkerId, _| {
            make_core(&specs[w.0 as usize]).expect("scenario engines are valid")
        })
        .run_all();
        let r = &o.report;
        rows.push(json!({
            "router": mode.name(),
            "requests": r.num_requests,
            "completed": r.completed_requests,
            "failed": r.failed_requests,
            "handoffs_activated": r.lifecycle.handoffs_activated,
            "workers_drained": r.workers.iter().all(|w| w.drained),
            "final_kv_used_blocks": r.workers.iter().map(|w| w.final_kv_used_blocks).sum::<u64>(),
            "router_bookings_left": o.live_bookings,
            "workers_with_steps": r.workers.iter().filter(|w| w.steps > 0).count(),
        }));
    }
    json!({
        "scenario": "router-modes",
        "backend": backend.name(),
        "modes": rows,
        "device_aware_weighted": "not modelled: every worker of a pool runs the same engine spec and pass-time model, so device weights would all be equal and the mode would choose as least-loaded, which is covered",
    })
}

fn as_u64(v: &Value) -> u64 {
    v.as_u64().unwrap_or(u64::MAX)
}

/// The checks of `scenario` on one backend's observations `o`.
fn judge(scenario: Scenario, o: &Value) -> Checks {
    let mut c = Checks::default();
    let b = o["backend"].as_str().unwrap_or_default();
    let end = |c: &mut Checks, e: &Value| {
        for pool in ["prefill", "decode"] {
            c.eq(
                format!("{pool} worker drained at the end"),
                true,
                e[pool]["drained"].clone(),
            );
            c.eq(
                format!("{pool} KV in use at the end, blocks"),
                0,
                e[pool]["kv_used_blocks"].clone(),
            );
        }
    };
    match scenario {
        Scenario::StrandedSource => {
            let w = &o["while_decode_full"];
            c.eq(
                "decode refuses the reservation while full",
                true,
                w["destination_reservation_unavailable"].clone(),
            );
            if b == "sglang" {
                c.eq(
                    "prefill is not dispatched before a destination reservation",
                    false,
                    w["prefill_dispatched"].clone(),
                );
                c.eq(
                    "prefill pinned blocks while decode is full",
                    0,
                    w["prefill_pinned_blocks"].clone(),
                );
            } else {
                c.positive(
                    "prefill KV pinned (stranded) while decode is full, blocks",
                    &w["prefill_pinned_blocks"],
                );
                c.eq(
                    "prefill compute booking released at the pin, tokens",
                    0,
                    w["prefill_compute_booked_tokens"].clone(),
                );
                c.positive(
                    "prefill request ownership still booked, blocks",
                    &w["prefill_request_booked_blocks"],
                );
                c.positive(
                    "source still pinned when the destination activates, blocks",
                    &o["at_activation"]["source_still_pinned_at_activation_blocks"],
                );
            }
            c.eq(
                "decode publishes no handoff blocks before activation",
                0,
                o["at_activation"]["decode_stored_blocks_before_activation"].clone(),
            );
            if b == "sglang" {
                // SGLang's default decode chunk cache publishes nothing.
                c.eq(
                    "decode publishes nothing (SGLang chunk cache)",
                    0,
                    o["stored_blocks_after_activation"].clone(),
                );
            } else {
                c.positive(
                    "decode publishes the handoff blocks from activation on",
                    &o["stored_blocks_after_activation"],
                );
            }
            end(&mut c, &o["end"]);
        }
        Scenario::DestinationGate => {
            let r = &o["reservations"];
            c.eq(
                "reservations observed (zero, partial, full hit)",
                3,
                r.as_array().map_or(0, Vec::len),
            );
            c.eq(
                "zero hit: matched prefix tokens",
                0,
                r[0]["matched_prefix_tokens"].clone(),
            );
            c.positive(
                "partial hit: matched prefix tokens",
                &r[1]["matched_prefix_tokens"],
            );
            c.below(
                "partial hit: physical blocks fewer than a zero hit's",
                &r[1]["physical_blocks"],
                r[0]["physical_blocks"].as_f64().unwrap_or(0.0),
            );
            c.below(
                "full hit: transfer tokens fewer than a partial hit's",
                &r[2]["transfer_tokens"],
                r[1]["transfer_tokens"].as_f64().unwrap_or(0.0),
            );
            if b == "sglang" {
                c.eq(
                    "full hit: delta pages reserved",
                    0,
                    r[2]["physical_blocks"].clone(),
                );
                for (i, hit) in ["zero", "partial", "full"].iter().enumerate() {
                    c.eq(
                        format!("{hit} hit: request slot reserved"),
                        true,
                        r[i]["request_slot"].clone(),
                    );
                    c.positive(
                        format!("{hit} hit: decode headroom reserved, tokens"),
                        &r[i]["decode_headroom_tokens"],
                    );
                }
            }
            end(&mut c, &o["end"]);
        }
        Scenario::RouterParity => {
            let p = &o["points"];
            c.positive(
                "routed: decode router booked, blocks",
                &p[0]["decode_router_booked_blocks"],
            );
            c.eq(
                "routed: nothing reserved yet, blocks",
                0,
                p[0]["decode_reserved_blocks"].clone(),
            );
            c.positive(
                "reserved: physical reservation, blocks",
                &p[1]["decode_reserved_blocks"],
            );
            c.eq(
                "reserved: booking unchanged since routing",
                p[0]["decode_router_booked_blocks"].clone(),
                p[1]["decode_router_booked_blocks"].clone(),
            );
            c.eq(
                "activated: reservation moved to active, reserved blocks",
                0,
                p[2]["decode_reserved_blocks"].clone(),
            );
            c.positive("activated: active blocks", &p[2]["decode_active_blocks"]);
            c.eq(
                "activated: counted once (used == active)",
                p[2]["decode_active_blocks"].clone(),
                p[2]["decode_kv_used_blocks"].clone(),
            );
            c.eq(
                "completed: booking released, blocks",
                0,
                p[3]["decode_router_booked_blocks"].clone(),
            );
            c.eq(
                "completed: KV released, blocks",
                0,
                p[3]["decode_kv_used_blocks"].clone(),
            );
            end(&mut c, &o["end"]);
        }
        Scenario::NoFalseOverlap => {
            c.eq(
                "router overlap on decode while reserved, blocks",
                0,
                o["decode_overlap_blocks_while_reserved"].clone(),
            );
            c.eq(
                "decode Stored events before activation, blocks",
                0,
                o["decode_stored_blocks_before_activation"].clone(),
            );
            c.positive(
                "router overlap on decode after activation, blocks",
                &o["decode_overlap_blocks_after_activation"],
            );
            end(&mut c, &o["end"]);
        }
        Scenario::FailureMatrix => {
            let cases = o["cases"].as_array().cloned().unwrap_or_default();
            c.eq("cases (6 points x 4 faults)", 24, cases.len());
            for k in &cases {
                let name = format!(
                    "{} / {}",
                    k["point"].as_str().unwrap_or("?"),
                    k["fault"].as_str().unwrap_or("?")
                );
                let clean = k["reached"] == true
                    && k["prefill_drained"] == true
                    && k["decode_drained"] == true
                    && [
                        "prefill_kv_used_blocks",
                        "decode_kv_used_blocks",
                        "prefill_live_handoffs",
                        "decode_live_handoffs",
                        "prefill_router_booked_blocks",
                        "decode_router_booked_blocks",
                    ]
                    .iter()
                    .all(|f| k[*f] == 0);
                c.holds(
                    format!("{name}: phase reached, everything returned exactly once"),
                    "reached; both drained; 0 KV, live handoffs and router bookings",
                    k.clone(),
                    clean,
                );
            }
        }
        Scenario::DuplicateStaleLate => {
            c.positive(
                "duplicated facts ignored as duplicates",
                &o["duplicate_facts_ignored"],
            );
            c.eq(
                "late facts of released attempts dropped as stale",
                o["late_facts_replayed"].clone(),
                o["late_facts_dropped_as_stale"].clone(),
            );
            c.eq(
                "transitions of released attempts after the replay (resurrection)",
                0,
                o["transitions_of_released_attempts_after_replay"].clone(),
            );
            c.eq(
                "each role of each attempt released exactly once",
                json!([[1, 1], [1, 1], [1, 1]]),
                o["roles_released"].clone(),
            );
            c.eq(
                "the attempt in flight during the replay finished (isolation)",
                true,
                o["third_request_finished"].clone(),
            );
            c.eq(
                "live handoffs at the end",
                json!([0, 0]),
                json!([o["prefill_live_handoffs"], o["decode_live_handoffs"]]),
            );
            end(&mut c, &o["end"]);
        }
        Scenario::RouterModes => {
            for m in o["modes"].as_array().cloned().unwrap_or_default() {
                let name = m["router"].as_str().unwrap_or("?").to_string();
                c.eq(
                    format!("{name}: completed requests"),
                    m["requests"].clone(),
                    m["completed"].clone(),
                );
                c.eq(format!("{name}: failed requests"), 0, m["failed"].clone());
                c.eq(
                    format!("{name}: handoffs activated"),
                    m["requests"].clone(),
                    m["handoffs_activated"].clone(),
                );
                c.eq(
                    format!("{name}: every worker drained"),
                    true,
                    m["workers_drained"].clone(),
                );
                c.eq(
                    format!("{name}: KV in use at the end, blocks"),
                    0,
                    m["final_kv_used_blocks"].clone(),
                );
                c.eq(
                    format!("{name}: router bookings left"),
                    0,
                    m["router_bookings_left"].clone(),
                );
                let spread = as_u64(&m["workers_with_steps"]);
                c.holds(
                    format!("{name}: workers that ran"),
                    ">= 3 of 4 (both pools used)",
                    spread,
                    (3..=4).contains(&spread),
                );
            }
        }
        Scenario::LiveReplayParity => {}
    }
    c
}

/// Runs `scenario` for vLLM and SGLang and judges it: one outcome per
/// backend (see [`Checks::outcome`]). `None` for
/// [`Scenario::LiveReplayParity`], which the command line runs. With
/// `sabotage`, the first check of each outcome is broken on purpose.
pub fn judged(scenario: Scenario, sabotage: bool) -> Option<Vec<Value>> {
    let f: fn(Backend) -> Value = match scenario {
        Scenario::StrandedSource => stranded,
        Scenario::DestinationGate => gate,
        Scenario::RouterParity => router_parity,
        Scenario::NoFalseOverlap => no_false_overlap,
        Scenario::FailureMatrix => failure_matrix,
        Scenario::DuplicateStaleLate => duplicate_stale_late,
        Scenario::RouterModes => router_modes,
        Scenario::LiveReplayParity => return None,
    };
    Some(
        [Backend::Vllm, Backend::Sglang]
            .into_iter()
            .map(|b| {
                let o = f(b);
                let mut c = judge(scenario, &o);
                if sabotage {
                    c.sabotage();
                }
                c.outcome(scenario, b.name(), o)
            })
            .collect(),
    )
}

/// Runs scenario `name` for vLLM and SGLang; `None` for an unknown name.
pub fn run(name: &str) -> Option<Value> {
    let f: fn(Backend) -> Value = match name {
        "stranded-source" => stranded,
        "destination-gate" => gate,
        "router-parity" => router_parity,
        "no-false-overlap" => no_false_overlap,
        "failure-matrix" => failure_matrix,
        "duplicate-stale-late" => duplicate_stale_late,
        "router-modes" => router_modes,
        _ => return None,
    };
    Some(json!([f(Backend::Vllm), f(Backend::Sglang)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stranded_source_differs_by_backend() {
        let v = run("stranded-source").expect("known");
        let (vllm, sglang) = (&v[0], &v[1]);
        // vLLM: prefill finished and pinned while decode was full; its compute
        // booking dropped, its request booking stayed.
        assert!(
            vllm["while_decode_full"]["prefill_pinned_blocks"].as_u64() > Some(0),
            "{vllm}"
        );
        assert_eq!(
            vllm["while_decode_full"]["prefill_compute_booked_tokens"], 0,
            "{vllm}"
        );
        assert!(
            vllm["while_decode_full"]["prefill_request_booked_blocks"].as_u64() > Some(0),
            "{vllm}"
        );
        assert_eq!(
            vllm["while_decode_full"]["destination_reservation_unavailable"],
            true
        );
        // SGLang: nothing dispatched, nothing pinned while decode was full.
        assert_eq!(
            sglang["while_decode_full"]["prefill_dispatched"], false,
            "{sglang}"
        );
        assert_eq!(sglang["while_decode_full"]["prefill_pinned_blocks"], 0);
        // SGLang's decode runs its default chunk cache: no decode events.
        assert_eq!(sglang["stored_blocks_after_activation"], 0, "{sglang}");
        assert!(
            vllm["stored_blocks_after_activation"].as_u64() > Some(0),
            "{vllm}"
        );
        for b in [vllm, sglang] {
            assert_eq!(
                b["at_activation"]["decode_stored_blocks_before_activation"], 0,
                "{b}"
            );
            assert_eq!(b["end"]["prefill"]["drained"], true, "{b}");
            assert_eq!(b["end"]["decode"]["drained"], true, "{b}");
        }
    }

    #[test]
    fn destination_gate_hits() {
        let v = run("destination-gate").expect("known");
        let s = &v[1]["reservations"];
        assert_eq!(s[0]["matched_prefix_tokens"], 0, "{s}");
        assert!(s[1]["matched_prefix_tokens"].as_u64() > Some(0), "{s}");
        assert_eq!(
            s[2]["physical_blocks"], 0,
            "full hit reserves no delta pages: {s}"
        );
        assert_eq!(s[2]["request_slot"], true, "{s}");
        assert!(s[2]["decode_headroom_tokens"].as_u64() > Some(0), "{s}");
    }

    #[test]
    fn router_booking_precedes_and_outlives_reservation() {
        for b in run("router-parity")
            .expect("known")
            .as_array()
            .expect("array")
        {
            let p = &b["points"];
            assert!(
                p[0]["decode_router_booked_blocks"].as_u64() > Some(0),
                "{b}"
            );
            assert_eq!(p[0]["decode_reserved_blocks"], 0, "{b}");
            assert!(p[1]["decode_reserved_blocks"].as_u64() > Some(0), "{b}");
            assert_eq!(p[2]["decode_reserved_blocks"], 0, "{b}");
            assert!(p[2]["decode_active_blocks"].as_u64() > Some(0), "{b}");
            assert_eq!(p[3]["decode_router_booked_blocks"], 0, "{b}");
            assert_eq!(p[3]["decode_kv_used_blocks"], 0, "{b}");
        }
    }

    #[test]
    fn reservation_is_not_overlap() {
        for b in run("no-false-overlap")
            .expect("known")
            .as_array()
            .expect("array")
        {
            assert_eq!(b["decode_overlap_blocks_while_reserved"], 0, "{b}");
            assert!(
                b["decode_overlap_blocks_after_activation"].as_u64() > Some(0),
                "{b}"
            );
        }
    }

    #[test]
    fn failure_matrix_returns_everything() {
        for b in run("failure-matrix")
            .expect("known")
            .as_array()
            .expect("array")
        {
            for c in b["cases"].as_array().expect("cases") {
                assert_eq!(c["reached"], true, "{c}");
                assert_eq!(c["prefill_drained"], true, "{b}: {c}");
                assert_eq!(c["decode_drained"], true, "{b}: {c}");
                for k in [
                    "prefill_kv_used_blocks",
                    "decode_kv_used_blocks",
                    "prefill_live_handoffs",
                    "decode_live_handoffs",
                ] {
                    assert_eq!(c[k], 0, "{k}: {b}: {c}");
                }
            }
        }
    }
}
