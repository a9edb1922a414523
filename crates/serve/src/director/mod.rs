//! [`HttpDirector`]: the engine's director when requests come over HTTP.
//!
//! It is the shared [`Serving`] director (router frontend, recorder,
//! migration, request outcomes) with the engine edge ([`Edge`]) tapping
//! what passes through it, which changes no decision: every worker event
//! goes to the edge first (streams, KV events, metrics), a request that is
//! routed is placed on the edge (its prefix-cache lookup), and a request
//! that is no longer in flight without having finished fails its stream.
//!
//! Per-worker listeners add flows the router does not place: vLLM's
//! `kv_transfer_params` proxy flow and plain requests served whole on the
//! worker they were sent to ([`proxy`]), and SGLang's bootstrap-room pairs
//! ([`pairs`]).

pub(crate) mod dp_lb;
pub(crate) mod driver;
pub(crate) mod fleet;
mod pairs;
mod proxy;

use proxy::Parked;

pub use pairs::LegOut;

pub use crate::edge::flows::StreamMsg;
use crate::edge::kv::KvOut;
pub use crate::edge::view::Held;
use crate::edge::Edge;
use crate::metrics::Metrics;
use crate::vllm::kv_transfer::Pinned;
use handoff_core::fasthash::{FastMap, FastSet};
use handoff_core::msg::HandoffMsg;
use handoff_core::FailureReason;
use handoff_core::{
    Generation, HandoffId, HostFinal, Instant, Request, RequestError, RequestId, Role, SourceReady,
    WorkerEvent, WorkerId, WorkerRequest,
};
use handoff_engine::fault::FaultCounts;
use handoff_engine::{Director, Route, Undeliverable};
use handoff_router::Pool;
use handoff_serving::Serving;
use handoff_workload::TraceItem;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;

/// An arrival the director has queued, in submission order.
enum Pending {
    /// The next item of the workload (routed by the frontend).
    Routed(RequestId),
    /// Per-worker HTTP: `request` arrives on `worker` itself.
    At { request: Request, worker: WorkerId },
    /// Per-worker HTTP, no `kv_transfer_params` on a disaggregated
    /// worker: `worker` serves `request` whole.
    Local { request: Request, worker: WorkerId },
    /// SGLang PD: one destination-first handoff of `request` from
    /// `prefill` to `decode`, both legs met; or, `early`, a decode leg that
    /// reserves before its prefill leg, whose source route to `prefill` is
    /// held ([`HttpDirector::hold_source`]).
    Pair {
        request: Request,
        prefill: WorkerId,
        decode: WorkerId,
        early: bool,
    },
    /// SGLang PD: the prefill leg of early pair `request` came at `at`: its
    /// held source route goes out.
    Release { request: RequestId, at: Instant },
    /// Per-worker HTTP: the decode of `handoff` attaches to `worker`.
    Decode {
        at: Instant,
        request: RequestId,
        handoff: HandoffId,
        worker: WorkerId,
        output_tokens: u32,
    },
}

/// The workload as HTTP hands it over: requests pushed as they arrive.
#[derive(Clone, Default)]
pub struct Arrivals(Rc<RefCell<VecDeque<TraceItem>>>);

impl Arrivals {
    /// Queues `item` (arriving at `item.request.arrival`).
    pub fn push(&self, item: TraceItem) {
        self.0.borrow_mut().push_back(item);
    }
}

impl Iterator for Arrivals {
    type Item = TraceItem;
    fn next(&mut self) -> Option<TraceItem> {
        self.0.borrow_mut().pop_front()
    }
}

/// See the module docs.
pub struct HttpDirector {
    inner: Serving<Arrivals>,
    arrivals: Arrivals,
    /// Arrivals queued and not yet arrived, in order.
    arriving: VecDeque<Pending>,
    /// Per-worker HTTP prefills (`do_remote_decode`) not yet pinned.
    proxied: FastSet<RequestId>,
    /// Per-worker HTTP prefills pinned, waiting for their decode.
    parked: FastMap<HandoffId, Parked>,
    block_size: u32,
    /// Streams, KV events, metrics and LoRA lists.
    edge: Edge,
    /// SGLang PD legs: waiting in their rooms, and paired prefill legs.
    pairs: pairs::Pairs,
}

impl HttpDirector {
    /// Wraps `inner`, whose workload is `arrivals`, for workers of `pools`
    /// whose KV events go out through `kv`; an SGLang PD leg waits at most
    /// `bootstrap_timeout` (model time) for its partner.
    pub(crate) fn new(
        inner: Serving<Arrivals>,
        arrivals: Arrivals,
        pools: Vec<Pool>,
        metrics: Arc<Metrics>,
        kv: KvOut,
        bootstrap_timeout: handoff_core::Duration,
    ) -> Self {
        HttpDirector {
            inner,
            arrivals,
            arriving: VecDeque::new(),
            proxied: FastSet::default(),
            parked: FastMap::default(),
            block_size: kv.block_size(),
            edge: Edge::new(pools, metrics, kv),
            pairs: pairs::Pairs::new(bootstrap_timeout),
        }
    }

    /// How long an early decode reservation waits for its KV (the
    /// workers' `reservation_ttl`), as its error names it.
    pub fn with_waiting_timeout(mut self, t: handoff_core::Duration) -> Self {
        self.pairs.set_waiting_timeout(t);
        self
    }

    /// How schedulers group into workers' ranks.
    pub fn dp(&self) -> handoff_core::DpLayout {
        self.edge.kv().dp()
    }

    /// The engine edge (KV channels, metrics).
    pub(crate) fn edge_mut(&mut self) -> &mut Edge {
        &mut self.edge
    }

    /// Queues an HTTP request: `tokens` is its prompt, `request` the
    /// engine's view of it (from [`crate::openai::prompt::request_for`]).
    pub fn submit(&mut self, request: Request, tokens: &[u32], tx: UnboundedSender<StreamMsg>) {
        self.open(&request, tokens, tx);
        let id = request.id;
        self.arriving.push_back(Pending::Routed(id));
        self.arrivals.push(TraceItem {
            request,
            turn: None,
            delay: None,
        });
    }

    /// Opens the HTTP stream of `request`.
    fn open(&mut self, request: &Request, tokens: &[u32], tx: UnboundedSender<StreamMsg>) {
        self.edge.open(request, tokens, tx);
    }

    /// Requests the director still tracks (the serving director's count).
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }

    /// The size of every per-request table ([`Held`]).
    pub fn held(&self) -> Held {
        let e = self.edge.held();
        Held {
            flows: e.flows,
            arriving: self.arriving.len(),
            proxied: self.proxied.len(),
            parked: self.parked.len(),
            local: e.local,
            reserving: e.reserving,
            prompt_blocks: e.prompt_blocks,
            legs: self.pairs.held(),
            recorded: self.inner.in_flight(),
            router_bookings: self.inner.router_bookings(),
            lora: e.lora,
        }
    }

    /// HTTP requests not yet ended (SGLang PD legs waiting for their
    /// partner and open prefill legs count too).
    pub fn open_streams(&self) -> usize {
        self.edge.held().flows + self.pairs.open()
    }

    /// The serving director, for its report at the end.
    pub fn into_serving(self) -> Serving<Arrivals> {
        self.inner
    }

    fn pool(&self, w: WorkerId) -> Pool {
        self.edge.pool(w)
    }

    fn end(&mut self, r: RequestId, msg: StreamMsg) {
        self.edge.account(&msg);
        let msg = self.early_ended(r, msg);
        if !matches!(msg, StreamMsg::Prefilled(_)) {
            self.proxied.remove(&r);
        }
        // A pair's prefill leg still open when its request ends: finished,
        // its KV was sent (the decode had it); failed, it fails alike.
        match msg {
            StreamMsg::Finished => self.end_prefill_leg(r, pairs::PrefillEnd::Sent),
            StreamMsg::Failed(why) => self.end_prefill_leg(r, pairs::PrefillEnd::Failed(why)),
            _ => {}
        }
        self.edge.close(r, msg);
    }

    /// Ends the stream of the prefill `pinned` names: pinned on `w`.
    fn end_pinned(&mut self, w: WorkerId, pinned: Pinned) {
        let r = pinned.request;
        self.edge.pinned(w, r);
        self.end(r, StreamMsg::Prefilled(pinned));
    }

    /// Ends the stream of `r` if the serving director no longer has it in
    /// flight (it failed; a finished request was ended already).
    fn check(&mut self, r: RequestId, why: FailureReason) {
        if self.edge.is_open(r) && !self.inner.is_in_flight(r) {
            self.end(r, StreamMsg::Failed(why));
        }
    }

    fn check_all(&mut self, why: FailureReason) {
        let gone: Vec<RequestId> = self
            .edge
            .open_ids()
            .into_iter()
            .filter(|r| !self.inner.is_in_flight(*r))
            .collect();
        for r in gone {
            self.end(r, StreamMsg::Failed(why));
        }
    }

    /// Worker `w`'s event, through the edge first; then what only the
    /// director knows of: a proxied prefill's pin, a source's end.
    fn observe(&mut self, w: WorkerId, e: &WorkerEvent, now: Instant) {
        if let Some(r) = self.edge.observe(w, e, now) {
            self.end(r, StreamMsg::Finished);
        }
        match e {
            WorkerEvent::PrefillPinned {
                id,
                request,
                blocks,
                tokens,
                ..
            } if self.proxied.remove(request) => {
                let ready = SourceReady {
                    blocks: *blocks,
                    tokens: *tokens,
                };
                self.pinned(w, *id, *request, ready);
            }
            // Its lease ran out (or it was torn down) before a decode
            // attached: the blocks are freed, the handoff is gone.
            WorkerEvent::RoleEnded {
                id,
                reason,
                role: Role::Source,
                request,
                ..
            } => {
                self.parked.remove(id);
                self.source_ended(*request, *reason);
            }
            _ => {}
        }
    }
}

fn request_of(e: &WorkerEvent) -> Option<RequestId> {
    match e {
        WorkerEvent::Transition(t) => Some(t.request),
        WorkerEvent::RequestFinished { request, .. }
        | WorkerEvent::Preempted { request, .. }
        | WorkerEvent::PrefillPinned { request, .. }
        | WorkerEvent::StartTransfer { request, .. }
        | WorkerEvent::RoleEnded { request, .. }
        | WorkerEvent::FirstTokenFromPrefill { request, .. } => Some(*request),
        _ => None,
    }
}

impl Director for HttpDirector {
    fn next_arrival(&mut self) -> Option<Instant> {
        match self.arriving.front() {
            Some(
                Pending::At { request, .. }
                | Pending::Local { request, .. }
                | Pending::Pair { request, .. },
            ) => Some(request.arrival),
            Some(Pending::Decode { at, .. } | Pending::Release { at, .. }) => Some(*at),
            Some(Pending::Routed(_)) | None => self.inner.next_arrival(),
        }
    }

    fn arrive(&mut self, now: Instant, out: &mut Vec<Route>) {
        let before = out.len();
        let mut local = false;
        let rid = match self.arriving.pop_front() {
            Some(Pending::Routed(rid)) => {
                self.inner.arrive(now, out);
                rid
            }
            Some(Pending::At { request, worker }) => {
                let rid = request.id;
                self.inner.arrive_at(request, worker, now, out);
                rid
            }
            Some(Pending::Local { request, worker }) => {
                let rid = request.id;
                local = true;
                self.inner.arrive_local(request, worker, now, out);
                rid
            }
            Some(Pending::Pair {
                request,
                prefill,
                decode,
                early,
            }) => {
                let rid = request.id;
                self.inner.arrive_pair(request, prefill, decode, now, out);
                if early {
                    self.hold_source(rid, prefill, out, before);
                }
                rid
            }
            Some(Pending::Release { request, .. }) => {
                out.extend(self.release_source(request));
                request
            }
            Some(Pending::Decode {
                request,
                handoff,
                worker,
                output_tokens,
                ..
            }) => return self.attach(request, handoff, worker, output_tokens, now, out),
            None => return self.inner.arrive(now, out),
        };
        // The worker that prefills it: the first route to a prefill or
        // aggregated worker (destination-first also books the decode
        // worker now), or the one route of a request served whole.
        let prefill = out[before..]
            .iter()
            .map(|r| r.to)
            .find(|w| local || self.pool(*w) != Pool::Decode);
        if let Some(w) = prefill {
            let cached = self.edge.started(w, rid);
            self.prefill_leg_started(rid, cached);
        }
        self.check(rid, FailureReason::NoWorker);
    }

    fn on_event(&mut self, w: WorkerId, e: &WorkerEvent, now: Instant, out: &mut Vec<Route>) {
        self.observe(w, e, now);
        self.inner.on_event(w, e, now, out);
        if let Some(r) = request_of(e) {
            let why = match e {
                WorkerEvent::RoleEnded {
                    reason: Some(reason),
                    ..
                } => FailureReason::from(*reason),
                _ => FailureReason::Unspecified,
            };
            self.check(r, why);
        }
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
        self.inner.on_undeliverable(w, request, why, now, out);
        self.check_all(FailureReason::WorkerDown);
    }

    fn on_transfer_done(&mut self, id: HandoffId, ok: bool, now: Instant) {
        self.inner.on_transfer_done(id, ok, now);
    }

    fn on_worker_down(&mut self, w: WorkerId, now: Instant) {
        self.inner.on_worker_down(w, now);
        self.edge.kv_mut().worker_down(w);
    }

    fn on_worker_lost(&mut self, w: WorkerId, now: Instant, out: &mut Vec<Route>) {
        self.inner.on_worker_lost(w, now, out);
        self.edge.kv_mut().worker_down(w);
        self.check_all(FailureReason::WorkerLost);
    }

    fn on_worker_back(
        &mut self,
        w: WorkerId,
        generation: Generation,
        now: Instant,
        out: &mut Vec<Route>,
    ) {
        self.inner.on_worker_back(w, generation, now, out);
    }

    /// The request fails at the cancel (`Serving::cancel`), so its stream
    /// ends now, though its roles may hold their KV until a read or a
    /// lease ends (`handoff_core::CancelFrees`).
    fn cancel(&mut self, request: RequestId, now: Instant) -> Vec<(WorkerId, HandoffId)> {
        let roles = self.inner.cancel(request, now);
        self.check(
            request,
            FailureReason::from(handoff_core::CancelReason::Client),
        );
        roles
    }

    /// An elastic run's scaling (`serve --admin`) goes into the report.
    fn on_fleet(&mut self, summary: &handoff_engine::scale::FleetSummary) {
        self.inner.on_fleet(summary);
    }

    fn finish(&mut self, end: Instant, finals: &[HostFinal], torn_down: u64, faults: FaultCounts) {
        self.edge.kv_mut().finish();
        self.inner.finish(end, finals, torn_down, faults);
        self.check_all(FailureReason::Shutdown);
    }
}
