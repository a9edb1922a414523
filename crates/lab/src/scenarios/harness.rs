//! The lab every scenario but 7 and 8 runs in: one prefill and one decode
//! worker in the one engine, and a director that routes through the shared
//! frontend and records what the scenarios look at.

use handoff_core::host::{HostFinal, HostInput, WorkerHost};
use handoff_core::{
    Backend, CoreBox, DestinationState, Duration, Generation, HandoffConfig, HandoffId, HandoffMsg,
    HandoffPolicy, Instant, KvCapacitySnapshot, KvEventData, LifecycleEvent, MsgBody, Request,
    RequestId, ReservationSummary, RoleState, SourceEventKind as SE, SourceState as SS, Transition,
    Worker, WorkerEvent, WorkerId, WorkerRequest,
};
use handoff_deployment::{make_core, EngineSpec};
use handoff_engine::fault::FaultCounts;
use handoff_engine::Fault;
use handoff_engine::FaultPlan;
use handoff_engine::TransferModel;
use handoff_engine::{Director, Engine, EngineConfig, LocalHosts, Route};
use handoff_router::{Frontend, FrontendConfig, Pool, RouterMode};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};

pub(super) const P: WorkerId = WorkerId(0);
pub(super) const D: WorkerId = WorkerId(1);

/// One-way latency of a fact between the workers, and of the frontend's
/// hop to the decode worker (both legs of routing it: at arrival under
/// destination-first, after the pin under source-first).
pub const LATENCY: Duration = Duration::from_micros(500);

/// How long every KV transfer takes.
pub const TRANSFER: Duration = Duration::from_millis(1);

/// The lab's [`Director`]: arrivals the scenario gives it, routed by the
/// [`Frontend`] (`arrive` for new requests, `on_event` for what workers
/// report), plus the record the scenarios read.
pub(super) struct LabDirector {
    pub(super) frontend: Frontend,
    /// Requests due, with the instant they arrive, in order.
    pub(super) arrivals: VecDeque<(Instant, Request)>,
    /// Every attempt routed, by request, with the worker it went to (what
    /// a client cancel has to reach).
    pub(super) attempts: BTreeMap<RequestId, Vec<(WorkerId, HandoffId)>>,
    /// The request of every attempt routed.
    pub(super) request_of: BTreeMap<HandoffId, RequestId>,
    /// Every transition as text, for the scenario's JSON.
    pub(super) log: Vec<String>,
    /// The same transitions, typed, for the scenarios' predicates.
    pub(super) seen: Vec<Transition>,
    /// Requests whose destination role became active, in order.
    pub(super) activated: Vec<RequestId>,
    /// Watched blocks the decode worker reported Stored before any
    /// activation (false overlap if non-zero).
    pub(super) stored_before_activation: u64,
    /// Watched blocks the decode worker reported Stored from the first
    /// activation on.
    pub(super) stored_at_or_after_activation: u64,
    /// Summaries of `DestinationReserved` facts as they left the decode
    /// worker, with the request they reserve for.
    pub(super) summaries: Vec<(RequestId, ReservationSummary)>,
    /// Requests whose prefill pinned for a handoff.
    pub(super) pinned: Vec<RequestId>,
    /// Requests that finished decoding.
    pub(super) finished: Vec<RequestId>,
    /// Block hashes of the handoff under observation.
    pub(super) watch: HashSet<u64>,
    /// Destination blocks the decode worker holds in reservations, summed
    /// from its transitions' ownership deltas.
    pub(super) decode_reserved: i64,
    /// Decode router booking and decode reservation at the moment the
    /// frontend first routed the decode side (before the worker saw it).
    pub(super) at_routing: Option<(u64, u64)>,
    /// Transfers started whose completion the engine has not reported yet.
    pub(super) transfers: BTreeSet<HandoffId>,
    /// Every fact a worker sent: (from, to, fact), in order.
    pub(super) sent: Vec<(WorkerId, WorkerId, HandoffMsg)>,
    /// Every fact a worker dropped: its attempt and whether it was dropped
    /// as stale (its attempt already released).
    pub(super) dropped: Vec<(HandoffId, bool)>,
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
    pub(super) fn saw(&self, pred: impl Fn(&Transition) -> bool) -> bool {
        self.seen.iter().any(pred)
    }

    /// Whether some transition so far was caused by `event`.
    pub(super) fn saw_event(&self, event: impl Into<LifecycleEvent>) -> bool {
        let event = event.into();
        self.saw(|t| t.event == event)
    }

    /// Whether `event` moved a source role from `from` to `to`.
    pub(super) fn saw_source_move(&self, event: SE, from: SS, to: SS) -> bool {
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

pub(super) type LabEngine = Engine<LocalHosts<'static, CoreBox>, LabDirector>;

/// Reading the lab's state: the director's record and the hosts' books.
pub(super) trait View {
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

/// What a scenario runs on: an engine and its ordering. vLLM runs pull
/// (its default, source-first) and push (`--kv-transfer-mode push`,
/// [`HandoffPolicy::Push`]); SGLang its destination-first order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flavour {
    /// The engine.
    pub backend: Backend,
    /// Its ordering.
    pub policy: HandoffPolicy,
}

impl Flavour {
    /// vLLM pull, SGLang, vLLM push: the order outcomes are listed in.
    pub const ALL: [Flavour; 3] = [
        Flavour {
            backend: Backend::Vllm,
            policy: HandoffPolicy::SourceFirst,
        },
        Flavour {
            backend: Backend::Sglang,
            policy: HandoffPolicy::DestinationFirst,
        },
        Flavour {
            backend: Backend::Vllm,
            policy: HandoffPolicy::Push,
        },
    ];

    /// The backend's name, `vllm-push` for vLLM's push mode.
    pub fn name(self) -> &'static str {
        match (self.backend, self.policy) {
            (Backend::Vllm, HandoffPolicy::Push) => "vllm-push",
            (b, _) => b.name(),
        }
    }
}

/// One prefill and one decode worker of a [`Flavour`] in the engine.
pub(super) struct Lab {
    pub(super) engine: LabEngine,
    /// The decode engine's KV event granularity (what watched hashes use).
    decode_block_tokens: u32,
}

impl View for Lab {
    fn engine(&self) -> &LabEngine {
        &self.engine
    }
}

pub(super) fn request(id: u64, prompt: u32, output: u32, hashes: &[u64]) -> Request {
    Request {
        id: RequestId(id),
        prompt_tokens: prompt,
        max_output_tokens: output,
        prefix_hashes: hashes.to_vec(),
        hash_block_tokens: 512,
        session: None,
        arrival: Instant::ZERO,
        lora: None,
    }
}

pub(super) fn chunks(base: u64, n: u64) -> Vec<u64> {
    (0..n).map(|i| base + i).collect()
}

impl Lab {
    pub(super) fn new(f: Flavour, decode_kv_tokens: u64) -> Lab {
        Lab::with_faults(f, decode_kv_tokens, FaultPlan::none())
    }

    /// A lab whose engine applies `faults` (its lossy-fact settings) to
    /// every fact.
    pub(super) fn with_faults(f: Flavour, decode_kv_tokens: u64, faults: FaultPlan) -> Lab {
        Lab::build(f, decode_kv_tokens, faults, false)
    }

    /// A lab whose SGLang decode worker runs the DEP's locked-prefix mode
    /// (`--disaggregation-decode-enable-radix-cache`) instead of SGLang's
    /// default chunk cache.
    pub(super) fn locked_prefix(f: Flavour, decode_kv_tokens: u64) -> Lab {
        Lab::build(f, decode_kv_tokens, FaultPlan::none(), true)
    }

    fn build(f: Flavour, decode_kv_tokens: u64, faults: FaultPlan, radix: bool) -> Lab {
        let spec = |kv| EngineSpec {
            backend: f.backend,
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
        let policy = f.policy;
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
                kv: handoff_router::KvKnobs::default(),
                hop: LATENCY,
                disabled_delay: TRANSFER,
            },
            &[(P, Pool::Prefill), (D, Pool::Decode)],
        );
        let cfg = EngineConfig {
            message_latency: LATENCY,
            transfer: TransferModel::Fixed(TRANSFER),
            transfer_fan: Default::default(),
            multi_step: false,
            faults,
            peer_loss: Default::default(),
            dp: Default::default(),
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
    pub(super) fn watch(&mut self, r: &Request) {
        let mut h = Vec::new();
        r.block_hashes(self.decode_block_tokens, &mut h);
        self.engine.director_mut().watch = h.into_iter().collect();
    }

    /// `r` arrives at the frontend now.
    pub(super) fn arrive(&mut self, mut r: Request) {
        let now = self.engine.now();
        r.arrival = now;
        self.engine.director_mut().arrivals.push_back((now, r));
        self.engine.arrivals_changed();
    }

    /// Hands `r` to worker `to` now as an ordinary request, past the
    /// frontend (load the scenario puts there, not traffic it routes).
    pub(super) fn submit_ordinary(&mut self, to: WorkerId, r: Request) {
        self.engine
            .inject(to, HostInput::Request(WorkerRequest::Ordinary(r)));
    }

    /// Runs until `stop` holds (checked first, then after each instant), or
    /// nothing is left to happen; returns whether it holds. After a stop the
    /// engine's clock is at the next instant something is due, not yet
    /// handled: what is injected now lands after everything up to the phase
    /// and before anything after it.
    pub(super) fn run_until(&mut self, stop: impl Fn(&LabEngine) -> bool) -> bool {
        stop(&self.engine) || self.engine.run_until(stop)
    }

    /// Runs until nothing is left to happen: every fact delivered, every
    /// transfer and timer that matters done. Nothing is torn down, so the
    /// books read afterwards are what the workers gave back on their own.
    pub(super) fn run_out(&mut self) {
        self.engine.run_until(|_| false);
    }

    /// Applies `plan`'s timed faults now. A partition that never heals is a
    /// lost connection, and both ends are told so (`PeerLost`), as a
    /// transport would tell them.
    pub(super) fn inject(&mut self, plan: &FaultPlan) {
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
