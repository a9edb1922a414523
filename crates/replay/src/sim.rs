//! The discrete-event replay: a virtual clock, one event queue, N prefill and
//! M decode [`Worker`]s, and the transfer-timing adapter. Everything about a
//! handoff's lifecycle comes from the workers' role machines; this file only
//! moves their outputs to where they are consumed, at the right time.

use crate::report::{Recorder, Report};
use handoff_core::{
    Backend, Duration, Generation, HandoffConfig, HandoffMsg, HandoffPolicy, Instant, Transcript,
    Worker, WorkerEvent, WorkerId, WorkerRequest,
};
use handoff_core::{Completion, TransferModel, TransferTimer};
use router::RouterMode;
use router::{Frontend, FrontendConfig, Pool};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use workload::TraceItem;

pub use handoff_core::CoreBox;

/// Everything a replay needs besides the workload and the cores.
#[derive(Clone, Debug)]
pub struct ReplayConfig {
    /// The engine imitated (for the report).
    pub backend: Backend,
    /// The handoff ordering.
    pub policy: HandoffPolicy,
    /// Prefill workers (aggregated workers when `decode_workers == 0`).
    pub prefill_workers: u32,
    /// Decode workers; 0 runs aggregated (no disaggregation).
    pub decode_workers: u32,
    /// How both routers choose.
    pub router: RouterMode,
    /// KV block size the routers hash requests with.
    pub block_size: u32,
    /// Transfer timing.
    pub transfer: TransferModel,
    /// One-way latency of a control message between workers (and the
    /// frontend hop that routes decode after a source-first prefill).
    pub message_latency: Duration,
    /// Lifecycle timers.
    pub handoff: HandoffConfig,
    /// Seed for the routers.
    pub seed: u64,
    /// Advance stable decode passes as one event (off: one pass per event).
    pub multi_step: bool,
    /// Record the lifecycle transcript (parity tests).
    pub transcript: bool,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        ReplayConfig {
            backend: Backend::Vllm,
            policy: HandoffPolicy::SourceFirst,
            prefill_workers: 2,
            decode_workers: 2,
            router: RouterMode::KvAware,
            block_size: 16,
            transfer: TransferModel::default(),
            message_latency: Duration::from_micros(500),
            handoff: HandoffConfig::default(),
            seed: 0,
            multi_step: true,
            transcript: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Arrival,
    Step(u32),
    Timeout(u32),
    Deliver { to: u32, from: u32, slot: u32 },
    TransferDone(Completion),
    Submit { to: u32, slot: u32 },
}

/// Free-list backed slots so queued payloads are not moved through the heap.
#[derive(Debug)]
struct Slots<T> {
    items: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            items: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slots<T> {
    fn put(&mut self, v: T) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.items[i as usize] = Some(v);
                i
            }
            None => {
                self.items.push(Some(v));
                (self.items.len() - 1) as u32
            }
        }
    }

    fn take(&mut self, i: u32) -> Option<T> {
        let v = self.items.get_mut(i as usize).and_then(Option::take);
        if v.is_some() {
            self.free.push(i);
        }
        v
    }
}

struct Slot {
    worker: Worker<CoreBox>,
    pool: Pool,
    stepping: bool,
    /// The last step found nothing it could run (e.g. waiting work that does
    /// not fit): do not step again until an input reaches the worker.
    stalled: bool,
    timeout_at: Option<Instant>,
    /// Outputs of the step in progress, handled when it ends.
    pending: Vec<WorkerEvent>,
}

/// A replay run; see the module docs.
pub struct Replay<I> {
    cfg: ReplayConfig,
    now: Instant,
    seq: u64,
    queue: BinaryHeap<Reverse<(Instant, u64, Ev)>>,
    workers: Vec<Slot>,
    msgs: Slots<HandoffMsg>,
    submits: Slots<WorkerRequest>,
    transfers: TransferTimer,
    frontend: Frontend,
    workload: I,
    next_item: Option<TraceItem>,
    rec: Recorder,
    transcript: Option<Transcript>,
    scratch: Vec<WorkerEvent>,
}

impl<I: Iterator<Item = TraceItem>> Replay<I> {
    /// A replay of `workload` with cores made by `make_core(worker, pool)`.
    pub fn new(
        cfg: ReplayConfig,
        workload: I,
        mut make_core: impl FnMut(WorkerId, Pool) -> CoreBox,
    ) -> Self {
        let aggregated = cfg.decode_workers == 0;
        let policy = if aggregated {
            HandoffPolicy::Disabled
        } else {
            cfg.policy
        };
        let mut workers = Vec::new();
        let total = cfg.prefill_workers.max(1) + cfg.decode_workers;
        for i in 0..total {
            let id = WorkerId(i);
            let pool = if aggregated {
                Pool::Aggregated
            } else if i < cfg.prefill_workers.max(1) {
                Pool::Prefill
            } else {
                Pool::Decode
            };
            let core = make_core(id, pool);
            workers.push(Slot {
                worker: Worker::new(id, Generation(0), policy, cfg.handoff, core),
                pool,
                stepping: false,
                stalled: false,
                timeout_at: None,
                pending: Vec::new(),
            });
        }
        let frontend = Frontend::new(
            FrontendConfig {
                policy: cfg.policy,
                aggregated,
                mode: cfg.router,
                block_size: cfg.block_size,
                seed: cfg.seed,
                hop: cfg.message_latency,
                disabled_delay: cfg.transfer.base(),
            },
            &workers
                .iter()
                .map(|s| (s.worker.id(), s.pool))
                .collect::<Vec<_>>(),
        );
        let rec = Recorder::new(&cfg, workers.iter().map(|s| (s.worker.id(), s.pool)));
        let transcript = cfg.transcript.then(Transcript::new);
        let mut r = Replay {
            transfers: TransferTimer::new(cfg.transfer),
            cfg,
            now: Instant::ZERO,
            seq: 0,
            queue: BinaryHeap::new(),
            workers,
            msgs: Slots::default(),
            submits: Slots::default(),
            frontend,
            workload,
            next_item: None,
            rec,
            transcript,
            scratch: Vec::new(),
        };
        r.pull_arrival();
        r
    }

    fn at(&mut self, t: Instant, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((t.max(self.now), self.seq, ev)));
    }

    fn pull_arrival(&mut self) {
        self.next_item = self.workload.next();
        if let Some(item) = &self.next_item {
            let t = item.request.arrival;
            self.at(t, Ev::Arrival);
        }
    }

    /// Runs to completion and returns the report.
    pub fn run(mut self) -> (Report, Option<Transcript>) {
        while let Some(Reverse((t, _, ev))) = self.queue.pop() {
            // Lazily cancelled timers may outlive all work: once every worker
            // is drained and no arrival is pending, they have nothing to fire.
            if matches!(ev, Ev::Timeout(_))
                && self.next_item.is_none()
                && self
                    .workers
                    .iter()
                    .all(|s| s.worker.is_drained() && !s.stepping)
            {
                continue;
            }
            self.now = self.now.max(t);
            self.handle(ev);
        }
        // Whatever is still held has no event left that could end it.
        let now = self.now;
        for i in 0..self.workers.len() {
            if !self.workers[i].worker.is_drained() {
                self.rec.unresolved_teardown += self.workers[i].worker.live_handoffs() as u64;
                self.workers[i].worker.teardown(now);
                self.collect(i as u32, false);
            }
        }
        for s in &self.workers {
            if let Some(t) = self.transcript.as_mut() {
                t.finish_worker(s.worker.id(), s.worker.is_drained(), s.worker.capacity());
            }
        }
        let report = self
            .rec
            .finish(self.now, self.workers.iter().map(|s| (&s.worker, s.pool)));
        (report, self.transcript)
    }

    fn handle(&mut self, ev: Ev) {
        let now = self.now;
        match ev {
            Ev::Arrival => {
                if let Some(item) = self.next_item.take() {
                    self.rec.arrival(&item.request);
                    let outs = self.frontend.arrive(item.request, now);
                    for (w, req) in outs {
                        self.submit(w, req);
                    }
                }
                self.pull_arrival();
            }
            Ev::Submit { to, slot } => {
                if let Some(req) = self.submits.take(slot) {
                    self.workers[to as usize].stalled = false;
                    let w = &mut self.workers[to as usize].worker;
                    if let Err(e) = w.handle_request(req, now) {
                        self.rec.refused(e);
                    }
                    self.collect(to, false);
                }
            }
            Ev::Deliver { to, from, slot } => {
                if let Some(msg) = self.msgs.take(slot) {
                    self.workers[to as usize].stalled = false;
                    self.workers[to as usize]
                        .worker
                        .handle_message(WorkerId(from), msg, now);
                    self.collect(to, false);
                }
            }
            Ev::TransferDone(c) => {
                if !self.transfers.is_current(&c) {
                    return;
                }
                for n in self.transfers.finish(c.id, now) {
                    self.at(n.at, Ev::TransferDone(n));
                }
                self.rec.transfer_done(c.id, now);
                let w = c.owner.0;
                self.workers[w as usize].stalled = false;
                self.workers[w as usize]
                    .worker
                    .handle_transfer_done(c.id, true, now);
                self.collect(w, false);
            }
            Ev::Timeout(w) => {
                let slot = &mut self.workers[w as usize];
                if slot.timeout_at.is_some_and(|t| t <= now) {
                    slot.timeout_at = None;
                }
                slot.stalled = false;
                slot.worker.handle_timeout(now);
                self.collect(w, false);
            }
            Ev::Step(w) => {
                // The previous step ended now: its outputs happen now.
                let pending = std::mem::take(&mut self.workers[w as usize].pending);
                self.scratch = pending;
                self.dispatch_events(w);
                let slot = &mut self.workers[w as usize];
                slot.stepping = false;
                let horizon = if self.cfg.multi_step {
                    self.queue
                        .peek()
                        .map_or(Instant::MAX, |Reverse((t, _, _))| *t)
                } else {
                    now
                };
                if let Some(end) = slot.worker.step(now, horizon) {
                    slot.stepping = true;
                    self.at(end, Ev::Step(w));
                    self.collect(w, true);
                } else {
                    slot.stalled = true;
                    self.collect(w, false);
                }
            }
        }
    }

    fn submit(&mut self, w: WorkerId, req: WorkerRequest) {
        let slot = self.submits.put(req);
        let now = self.now;
        self.at(now, Ev::Submit { to: w.0, slot });
    }

    /// Moves worker `w`'s outputs on. Events of a step that is still running
    /// (`deferred`) wait for the step's end.
    fn collect(&mut self, w: u32, deferred: bool) {
        if !deferred
            && !self.workers[w as usize].stepping
            && self.workers[w as usize].worker.is_empty()
        {
            self.workers[w as usize].stalled = false;
        }
        let latency = self.cfg.message_latency;
        while let Some(t) = self.workers[w as usize].worker.poll_transmit() {
            let slot = self.msgs.put(t.msg);
            self.at(
                t.at + latency,
                Ev::Deliver {
                    to: t.to.0,
                    from: w,
                    slot,
                },
            );
        }
        let mut events = std::mem::take(&mut self.scratch);
        {
            let s = &mut self.workers[w as usize];
            let sink = if deferred {
                &mut s.pending
            } else {
                &mut events
            };
            while let Some(e) = s.worker.poll_event() {
                sink.push(e);
            }
        }
        self.scratch = events;
        self.dispatch_events(w);
        let slot = &mut self.workers[w as usize];
        if let Some(t) = slot.worker.poll_timeout() {
            if slot.timeout_at.is_none_or(|cur| t < cur) {
                slot.timeout_at = Some(t);
                self.at(t, Ev::Timeout(w));
            }
        }
        let slot = &mut self.workers[w as usize];
        if !slot.stepping && !slot.stalled && !slot.worker.is_empty() {
            slot.stepping = true;
            let now = self.now;
            self.at(now, Ev::Step(w));
        }
    }

    fn dispatch_events(&mut self, w: u32) {
        let mut events = std::mem::take(&mut self.scratch);
        let pool = self.workers[w as usize].pool;
        for e in events.drain(..) {
            if let (Some(t), WorkerEvent::Transition(tr)) = (self.transcript.as_mut(), &e) {
                t.record(tr);
            }
            self.rec.event(WorkerId(w), pool, &e);
            match e {
                WorkerEvent::StartTransfer {
                    id,
                    source,
                    destination,
                    tokens,
                    at,
                    ..
                } => {
                    self.rec.transfer_started(id, tokens, at);
                    for c in self
                        .transfers
                        .start(id, WorkerId(w), source, destination, tokens, at)
                    {
                        self.at(c.at, Ev::TransferDone(c));
                    }
                }
                other => {
                    let outs = self.frontend.on_event(WorkerId(w), pool, &other, self.now);
                    for (to, req, delay) in outs {
                        let slot = self.submits.put(req);
                        let t = self.now + delay;
                        self.at(t, Ev::Submit { to: to.0, slot });
                    }
                }
            }
        }
        self.scratch = events;
    }
}
