//! The DEP's test scenarios 1–5, run on the real backend cores, reporting
//! what was observed as JSON (`handoff-mocker scenario NAME`).
//!
//! The lab is a configuration of the one [`Engine`]: a prefill and a decode
//! [`WorkerHost`] in this thread ([`LocalHosts`], cores from
//! [`make_core`]) and a lab director that routes through the shared
//! [`Frontend`], as [`crate::Serving`] does, and records what the scenarios
//! look at. Nothing is held back to look at the middle of a handoff: a
//! scenario runs the engine until the phase it wants
//! ([`Engine::run_until`]), inspects the hosts and the director there, and
//! injects faults at that instant ([`Engine::inject_fault`]). Transfers take
//! a fixed [`TRANSFER`], facts and the frontend's decode leg take
//! [`LATENCY`], and every step is one pass, so each phase of a handoff lasts
//! at least one instant and the engine can stop in it.

use crate::engines::{make_core, EngineSpec};
use handoff_core::engine::{Director, Engine, EngineConfig, LocalHosts, Route};
use handoff_core::fault::FaultCounts;
use handoff_core::host::{HostFinal, HostInput, WorkerHost};
use handoff_core::{
    Backend, CoreBox, DestinationEventKind as DE, DestinationState, Duration, Fault, FaultPlan,
    Generation, HandoffConfig, HandoffId, HandoffMsg, Instant, KvCapacitySnapshot, KvEventData,
    LifecycleEvent, MsgBody, Request, RequestId, ReservationSummary, Role, RoleState,
    SourceEventKind as SE, SourceState as SS, TransferModel, Transition, Worker, WorkerEvent,
    WorkerId, WorkerRequest,
};
use router::{Frontend, FrontendConfig, Pool, RouterMode};
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

/// Names accepted by [`run`].
pub const NAMES: [&str; 5] = [
    "stranded-source",
    "destination-gate",
    "router-parity",
    "no-false-overlap",
    "failure-matrix",
];

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

    fn on_transmit(&mut self, _from: WorkerId, _to: WorkerId, msg: &HandoffMsg, _now: Instant) {
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
        let spec = |kv| EngineSpec {
            backend,
            kv_tokens: kv,
            block_size: 16,
            source_lease_ttl: Some(Duration::from_secs(30)),
            ..EngineSpec::default()
        };
        let specs = [spec(1 << 18), spec(decode_kv_tokens)];
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
                block_size: specs[0].event_block_tokens(),
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
            faults: FaultPlan::none(),
        };
        Lab {
            engine: Engine::new(
                cfg,
                LocalHosts::new(hosts, core),
                LabDirector::new(frontend),
            ),
            decode_block_tokens: specs[1].event_block_tokens(),
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

/// Zero, partial and full destination-prefix hits after decode learned a prefix.
fn gate(backend: Backend) -> Value {
    let mut lab = Lab::new(backend, 1 << 16);
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

/// Overlap a router sees on decode for a request's prefix, before and after activation.
fn no_false_overlap(backend: Backend) -> Value {
    let mut lab = Lab::new(backend, 1 << 16);
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
    let load = |r: &router::Router, w| r.load(w).map_or(0, |l| l.booked_blocks);
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

/// Runs scenario `name` for vLLM and SGLang; `None` for an unknown name.
pub fn run(name: &str) -> Option<Value> {
    let f: fn(Backend) -> Value = match name {
        "stranded-source" => stranded,
        "destination-gate" => gate,
        "router-parity" => router_parity,
        "no-false-overlap" => no_false_overlap,
        "failure-matrix" => failure_matrix,
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
        for b in [vllm, sglang] {
            assert_eq!(
                b["at_activation"]["decode_stored_blocks_before_activation"], 0,
                "{b}"
            );
            assert!(
                b["stored_blocks_after_activation"].as_u64() > Some(0),
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
