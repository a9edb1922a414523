//! [`HttpDirector`]: the engine's director when requests come over HTTP.
//!
//! It is the shared [`Serving`] director (router frontend, recorder,
//! migration, request outcomes) with three taps on what passes through it,
//! none of which changes a decision:
//!
//! - output tokens (`WorkerEvent::Tokens` from decode or aggregated
//!   workers, as the report counts them) go to the request's HTTP stream as
//!   they are reported, its end (`RequestFinished`) or failure (the request
//!   is no longer in flight without having finished) closes it;
//! - KV events become vLLM wire events (the core's block hashes, with the
//!   stored blocks' token ids, kept from the prompts they came from) and,
//!   when asked, Dynamo `RouterEvent` lines with the same hashes;
//! - lifecycle figures feed the Prometheus families.
//!
//! Per-worker listeners add flows the router does not place: vLLM's
//! `kv_transfer_params` proxy flow and plain requests served whole on the
//! worker they were sent to ([`proxy`]), and SGLang's bootstrap-room pairs
//! ([`pairs`]).

pub(crate) mod dp_lb;
pub(crate) mod driver;
mod lora;
mod pairs;
mod proxy;
pub(crate) mod wire;

use proxy::Parked;
use wire::BlockTokens;

pub use pairs::LegOut;

use crate::metrics::Metrics;
use crate::openai::prompt::chained_block_hashes_salted;
use crate::vllm::kv_transfer::{Pinned, ProxyError};
use crate::vllm::wire::WireEvent;
use handoff_core::fasthash::{FastMap, FastSet};
use handoff_core::msg::HandoffMsg;
use handoff_core::FailureReason;
use handoff_core::{
    CancelReason, DestinationState, Generation, HandoffId, HostFinal, Instant, KvEvent, Request,
    RequestError, RequestId, Role, RoleState, SourceReady, WorkerEvent, WorkerId, WorkerRequest,
};
use handoff_engine::fault::FaultCounts;
use handoff_engine::{Director, Route, Undeliverable};
use handoff_kv_events::dynamo_events::RouterEventWriter;
use handoff_kv_events::vllm_hash::BlockHashMode;
use handoff_router::Pool;
use handoff_serving::KvOrder;
use handoff_serving::Serving;
use handoff_workload::TraceItem;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;

/// What the engine tells one HTTP request, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamMsg {
    /// It was routed; this many prompt tokens were cached on the worker
    /// that prefills it.
    Started {
        /// `usage.prompt_tokens_details.cached_tokens`.
        cached_tokens: u32,
    },
    /// Output tokens were produced.
    Tokens(u32),
    /// It finished.
    Finished,
    /// It failed, for this reason.
    Failed(FailureReason),
    /// Per-worker HTTP, `do_remote_decode`: the prefill pinned (its one
    /// token is implied); the response carries the `kv_transfer_params`.
    Prefilled(Pinned),
    /// Per-worker HTTP: the worker's listener refused it (a 4xx).
    Refused(ProxyError),
    /// SGLang PD leg: refused at its bootstrap room, its partner never
    /// came, or (a decode leg that reserved early) its KV never came.
    Bootstrap(crate::sglang::bootstrap::BootstrapError),
}

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

/// One HTTP request while it is in flight.
struct Flow {
    tx: UnboundedSender<StreamMsg>,
    arrival: Instant,
    last_token: Option<Instant>,
    prompt_tokens: u32,
    /// The prompt's chained block hashes (for `cached_tokens` and the KV
    /// event token ids).
    hashes: Vec<u64>,
    /// Its LoRA adapter's name.
    lora: Option<Arc<str>>,
}

/// How many entries each per-request table of the director and the
/// serving director under it holds (`/debug/workers`' `held`). Every one
/// is keyed by a request, a leg or a handoff in flight and is emptied when
/// it ends, so all are zero once nothing is in flight, however many
/// requests came before: a long run's state does not grow with its count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Held {
    /// HTTP streams open (one per request in flight).
    pub flows: usize,
    /// Arrivals queued and not yet arrived.
    pub arriving: usize,
    /// Per-worker `do_remote_decode` prefills not yet pinned.
    pub proxied: usize,
    /// Pinned prefills waiting for their decode.
    pub parked: usize,
    /// Plain requests served whole on a prefill worker.
    pub local: usize,
    /// Destinations waiting for a reservation.
    pub reserving: usize,
    /// Prompt blocks held for flows in flight (their token ids).
    pub prompt_blocks: usize,
    /// SGLang PD legs waiting in rooms, open prefill legs and rooms whose
    /// pair is in flight.
    pub legs: usize,
    /// Requests the recorder tracks (arrived, not ended).
    pub recorded: usize,
    /// Requests booked on the routers.
    pub router_bookings: usize,
    /// LoRA requests tracked for `vllm:lora_requests_info`.
    pub lora: usize,
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
    /// The prompt blocks of each pinned per-worker prefill, held in
    /// [`BlockTokens`] from its response until its source role ends: the
    /// prefill's `Stored` events may still wait in the reorder buffer when
    /// the pin ends its stream, and must carry the prompt's token ids.
    pinned_prompts: FastMap<RequestId, Vec<u64>>,
    /// Per-worker HTTP plain requests served whole on a prefill worker
    /// (smg's passthrough prefill): their tokens and finish end their
    /// stream, which a prefill worker's otherwise do not.
    local: FastSet<RequestId>,
    pools: Vec<Pool>,
    block_size: u32,
    flows: FastMap<RequestId, Flow>,
    /// LoRA requests in flight, by worker and state.
    lora: lora::LoraLoad,
    blocks: BlockTokens,
    /// Wire events per worker since the last flush, with their ids.
    wire: Vec<Vec<(u64, WireEvent)>>,
    jsonl: Option<RouterEventWriter>,
    /// The hashes blocks are published under.
    hash_mode: BlockHashMode,
    /// Maps each scheduler to the (worker, rank) its events are from.
    dp: handoff_core::DpLayout,
    /// Puts each worker's KV events back in the order it produced them
    /// before any channel sees them.
    order: KvOrder,
    metrics: Arc<Metrics>,
    /// Destinations waiting for a reservation, since when.
    reserving: FastMap<HandoffId, Instant>,
    /// SGLang PD legs: waiting in their rooms, and paired prefill legs.
    pairs: pairs::Pairs,
}

impl HttpDirector {
    /// Wraps `inner`, whose workload is `arrivals`, for workers of `pools`;
    /// an SGLang PD leg waits at most `bootstrap_timeout` (model time) for
    /// its partner.
    pub fn new(
        inner: Serving<Arrivals>,
        arrivals: Arrivals,
        pools: Vec<Pool>,
        block_size: u32,
        metrics: Arc<Metrics>,
        jsonl: Option<RouterEventWriter>,
        bootstrap_timeout: handoff_core::Duration,
    ) -> Self {
        let n = pools.len();
        HttpDirector {
            inner,
            arrivals,
            arriving: VecDeque::new(),
            proxied: FastSet::default(),
            parked: FastMap::default(),
            pinned_prompts: FastMap::default(),
            local: FastSet::default(),
            pools,
            block_size,
            flows: FastMap::default(),
            lora: lora::LoraLoad::default(),
            blocks: BlockTokens {
                pending: FastMap::default(),
                stored: (0..n).map(|_| FastMap::default()).collect(),
            },
            wire: vec![Vec::new(); n],
            jsonl,
            hash_mode: BlockHashMode::Mocker,
            dp: handoff_core::DpLayout::SINGLE,
            order: KvOrder::new(),
            metrics,
            reserving: FastMap::default(),
            pairs: pairs::Pairs::new(bootstrap_timeout),
        }
    }

    /// Publishes blocks under `mode`'s hashes (the cores' own by default).
    pub fn with_block_hash(mut self, mode: BlockHashMode) -> Self {
        self.hash_mode = mode;
        self
    }

    /// Attributes each scheduler's KV events to its (worker, rank) under
    /// `dp` (one rank per worker by default).
    pub fn with_dp(mut self, dp: handoff_core::DpLayout) -> Self {
        self.dp = dp;
        self
    }

    /// How long an early decode reservation waits for its KV (the
    /// workers' `reservation_ttl`), as its error names it.
    pub fn with_waiting_timeout(mut self, t: handoff_core::Duration) -> Self {
        self.pairs.set_waiting_timeout(t);
        self
    }

    /// How schedulers group into workers' ranks.
    pub fn dp(&self) -> handoff_core::DpLayout {
        self.dp
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
        let hashes = chained_block_hashes_salted(tokens, self.block_size, request.lora_salt());
        self.blocks.hold(
            &hashes,
            tokens,
            self.block_size,
            &self.hash_mode,
            request.lora.as_ref(),
        );
        let id = request.id;
        self.flows.insert(
            id,
            Flow {
                tx,
                arrival: request.arrival,
                last_token: None,
                prompt_tokens: request.prompt_tokens,
                hashes,
                lora: request.lora.as_ref().map(|l| Arc::from(l.name.as_str())),
            },
        );
    }

    /// Writes worker `w`'s adapter lists to the metrics.
    fn lora_changed(&self, w: usize) {
        let (running, waiting) = self.lora.lists(w);
        self.metrics.lora_adapters(w, running, waiting);
    }

    /// Requests the director still tracks (the serving director's count).
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }

    /// The size of every per-request table ([`Held`]).
    pub fn held(&self) -> Held {
        Held {
            flows: self.flows.len(),
            arriving: self.arriving.len(),
            proxied: self.proxied.len(),
            parked: self.parked.len(),
            local: self.local.len(),
            reserving: self.reserving.len(),
            prompt_blocks: self.blocks.pending.len(),
            legs: self.pairs.held(),
            recorded: self.inner.in_flight(),
            router_bookings: self.inner.router_bookings(),
            lora: self.lora.len(),
        }
    }

    /// HTTP requests not yet ended (SGLang PD legs waiting for their
    /// partner and open prefill legs count too).
    pub fn open_streams(&self) -> usize {
        self.flows.len() + self.pairs.open()
    }

    /// The vLLM wire events each worker produced since the last call, in
    /// the worker's event id order: an input handled inside a step releases
    /// its events before the step's held ones (ARCHITECTURE.md, "Known
    /// modelling gap"), and a subscriber applies events in the order sent.
    pub fn take_wire(&mut self) -> impl Iterator<Item = (usize, Vec<WireEvent>)> + '_ {
        self.wire
            .iter_mut()
            .enumerate()
            .filter(|(_, v)| !v.is_empty())
            .map(|(i, v)| {
                v.sort_by_key(|(id, _)| *id);
                (i, v.drain(..).map(|(_, e)| e).collect())
            })
    }

    /// The serving director, for its report at the end.
    pub fn into_serving(self) -> Serving<Arrivals> {
        self.inner
    }

    fn pool(&self, w: WorkerId) -> Pool {
        self.pools
            .get(w.0 as usize)
            .copied()
            .unwrap_or(Pool::Decode)
    }

    fn end(&mut self, r: RequestId, msg: StreamMsg) {
        if let StreamMsg::Failed(reason) = msg {
            self.metrics.request_failed(reason);
        }
        let msg = self.early_ended(r, msg);
        if !matches!(msg, StreamMsg::Prefilled(_)) {
            self.proxied.remove(&r);
        }
        self.local.remove(&r);
        // A pair's prefill leg still open when its request ends: finished,
        // its KV was sent (the decode had it); failed, it fails alike.
        match msg {
            StreamMsg::Finished => self.end_prefill_leg(r, pairs::PrefillEnd::Sent),
            StreamMsg::Failed(why) => self.end_prefill_leg(r, pairs::PrefillEnd::Failed(why)),
            _ => {}
        }
        let pinned = matches!(msg, StreamMsg::Prefilled(_));
        if let Some(w) = self.lora.ended(r) {
            self.lora_changed(w);
        }
        if let Some(f) = self.flows.remove(&r) {
            let _ = f.tx.send(msg);
            if pinned {
                self.pinned_prompts.insert(r, f.hashes);
            } else {
                self.blocks.release(&f.hashes);
            }
        }
    }

    /// Ends the stream of `r` if the serving director no longer has it in
    /// flight (it failed; a finished request was ended already).
    fn check(&mut self, r: RequestId, why: FailureReason) {
        if self.flows.contains_key(&r) && !self.inner.is_in_flight(r) {
            self.end(r, StreamMsg::Failed(why));
        }
    }

    fn check_all(&mut self, why: FailureReason) {
        let mut gone: Vec<RequestId> = self
            .flows
            .keys()
            .copied()
            .filter(|r| !self.inner.is_in_flight(*r))
            .collect();
        gone.sort_unstable();
        for r in gone {
            self.end(r, StreamMsg::Failed(why));
        }
    }

    /// Worker `w` went down: its KV events still waiting for a lower id
    /// go out now, and its next ones come from a new core.
    fn kv_worker_down(&mut self, w: WorkerId) {
        let mut ready = Vec::new();
        self.order.worker_down(w, &mut ready);
        self.kv_all(ready);
    }

    /// Events the reorder buffer let through, to every channel in order.
    fn kv_all(&mut self, ready: Vec<handoff_serving::kv_order::Released>) {
        for (w, e, _) in ready {
            self.kv(w, &e);
        }
    }

    /// One KV event, in its worker's order, to every channel. A block has
    /// one identity everywhere: the hash its core published, or under
    /// `--block-hash vllm` vLLM's hash of it ([`wire`] documents both). Its
    /// token ids (vLLM's `BlockStored.token_ids`) are the prompt's when a
    /// prompt in flight or a block stored earlier has them, else a
    /// generated block's stand-ins ([`handoff_kv_events::dynamo_hash`]); Dynamo's
    /// `tokens_hash` is of those ids.
    fn kv(&mut self, w: WorkerId, ev: &KvEvent) {
        let wi = w.0 as usize;
        let p = self
            .blocks
            .publish(wi, ev, self.block_size, &self.hash_mode);
        if let Some(j) = self.jsonl.as_mut() {
            j.write(self.dp.address(w), &p.event, |h| {
                p.tokens_hashes.get(&h).copied().unwrap_or_default()
            });
        }
        if let Some(v) = self.wire.get_mut(wi) {
            v.push((ev.event_id, p.wire));
        }
    }

    /// Tokens of `r`'s prompt cached on `w` now: its leading blocks that
    /// `w` published as stored, never the whole prompt (the last token is
    /// always computed, as in vLLM).
    fn cached_on(&self, w: WorkerId, r: RequestId) -> u32 {
        let (Some(f), Some(m)) = (self.flows.get(&r), self.blocks.stored.get(w.0 as usize)) else {
            return 0;
        };
        let n = f.hashes.iter().take_while(|h| m.contains_key(h)).count() as u32;
        let tokens = n * self.block_size;
        if tokens >= f.prompt_tokens {
            n.saturating_sub(1) * self.block_size
        } else {
            tokens
        }
    }

    /// `tokens` output tokens of `request` reached the client at `now`:
    /// the stream, TTFT and ITL see them.
    fn stream(&mut self, wi: usize, request: RequestId, tokens: u32, now: Instant) {
        if let Some((left, on)) = self.lora.running(request, wi) {
            self.lora_changed(left);
            self.lora_changed(on);
        }
        if let Some(f) = self.flows.get_mut(&request) {
            match f.last_token {
                None => self.metrics.ttft(wi, (now - f.arrival).as_secs_f64()),
                Some(t) => {
                    let gap = (now - t).as_secs_f64() / f64::from(tokens);
                    for _ in 0..tokens {
                        self.metrics.itl(wi, gap);
                    }
                }
            }
            f.last_token = Some(now);
            self.metrics.generated(wi, u64::from(tokens));
            let _ = f.tx.send(StreamMsg::Tokens(tokens));
        }
    }

    fn observe(&mut self, w: WorkerId, e: &WorkerEvent, now: Instant) {
        let wi = w.0 as usize;
        let pool = self.pool(w);
        match e {
            WorkerEvent::Kv { event, at } => {
                let mut ready = Vec::new();
                self.order.push(w, event.clone(), *at, &mut ready);
                self.kv_all(ready);
            }
            WorkerEvent::Tokens { emissions } if pool != Pool::Prefill => {
                for e in emissions.iter().filter(|e| e.tokens > 0) {
                    self.stream(wi, e.request, e.tokens, now);
                }
            }
            // A prefill worker's tokens reach a client only for a request it
            // serves whole (the passthrough's prefill).
            WorkerEvent::Tokens { emissions } if !self.local.is_empty() => {
                for e in emissions.iter().filter(|e| e.tokens > 0) {
                    if self.local.contains(&e.request) {
                        self.stream(wi, e.request, e.tokens, now);
                    }
                }
            }
            // SGLang PD decode streams the token its prefill sampled when the
            // request joins the decode batch: the first token, no pass of its own.
            WorkerEvent::FirstTokenFromPrefill { request, at } if pool != Pool::Prefill => {
                self.stream(wi, *request, 1, *at)
            }
            WorkerEvent::RequestFinished { request, .. }
                if pool != Pool::Prefill || self.local.contains(request) =>
            {
                if let Some(f) = self.flows.get(request) {
                    self.metrics.e2e(wi, (now - f.arrival).as_secs_f64());
                }
                self.end(*request, StreamMsg::Finished);
            }
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
            WorkerEvent::Preempted { .. } => self.metrics.preempted(wi),
            WorkerEvent::StaleRead { reused, .. } => self.metrics.stale_read(wi, *reused),
            WorkerEvent::Transition(t) => match t.to {
                RoleState::Destination(DestinationState::Reserving) => {
                    self.reserving.insert(t.id, now);
                }
                RoleState::Destination(s) if s != DestinationState::Reserving => {
                    if let Some(since) = self.reserving.remove(&t.id) {
                        if s == DestinationState::Reserved && now > since {
                            self.metrics
                                .reservation_wait(wi, (now - since).as_secs_f64());
                        }
                    }
                }
                _ => {}
            },
            WorkerEvent::RoleEnded {
                id,
                reason,
                role,
                request,
                ..
            } => {
                self.reserving.remove(id);
                if *role == Role::Source {
                    // Its lease ran out (or it was torn down) before a decode
                    // attached: the blocks are freed, the handoff is gone.
                    self.parked.remove(id);
                    if let Some(hashes) = self.pinned_prompts.remove(request) {
                        self.blocks.release(&hashes);
                    }
                    self.source_ended(*request, *reason);
                }
                match reason {
                    Some(CancelReason::LeaseExpired) => self.metrics.lease_expired(wi),
                    Some(CancelReason::ReservationExpired) => self.metrics.reservation_expired(wi),
                    _ => {}
                }
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
            let cached = self.cached_on(w, rid);
            if let Some(name) = self.flows.get(&rid).and_then(|f| f.lora.clone()) {
                let w = self.lora.waiting(rid, name, w.0 as usize);
                self.lora_changed(w);
            }
            if let Some(f) = self.flows.get(&rid) {
                self.metrics.prefix_query(
                    w.0 as usize,
                    u64::from(f.prompt_tokens),
                    u64::from(cached),
                );
                let _ = f.tx.send(StreamMsg::Started {
                    cached_tokens: cached,
                });
            }
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
        self.kv_worker_down(w);
    }

    fn on_worker_lost(&mut self, w: WorkerId, now: Instant, out: &mut Vec<Route>) {
        self.inner.on_worker_lost(w, now, out);
        self.kv_worker_down(w);
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

    fn cancel(&mut self, request: RequestId, now: Instant) -> Vec<(WorkerId, HandoffId)> {
        self.inner.cancel(request, now)
    }

    fn finish(&mut self, end: Instant, finals: &[HostFinal], torn_down: u64, faults: FaultCounts) {
        let mut ready = Vec::new();
        self.order.finish(&mut ready);
        self.kv_all(ready);
        self.inner.finish(end, finals, torn_down, faults);
        self.check_all(FailureReason::Shutdown);
    }
}
