//! The discrete-event simulation of one configuration over one session
//! trace: a virtual clock, an event heap ordered by (time, insertion), and
//! the handoff role machines of `handoff-core` for every KV movement.
//!
//! What happens to a turn (seed 002 §3; the E1/E3/E4 matrix of §9):
//!
//! | mode | path | TTFT |
//! |---|---|---|
//! | naive PD (E1) | P open → P prefill (FCFS, prefix cache) → P→D handoff → D start | every turn |
//! | KVC first turn | as naive PD, onto the decode worker with the most headroom | `seed` |
//! | KVC resident | direct-to-D append of the new tokens on the session's worker | `direct` |
//! | KVC reseed | P open → re-prefill, or a snapshot bypass (§3.2) → P→D' → D' start | `reseed` |
//!
//! A reseed happens when the session is not resident (its slot was evicted
//! for room, or its worker restarted), when its worker cannot fit the turn
//! (`capacity`), or when the load policy moves it (`rebalance`).
//!
//! Every KV movement is a handoff driven through a `SourceHandoff` and a
//! `DestinationHandoff` (destination-first, as SGLang): P→D for prefills and
//! reseeds, and, with the roles reversed, D→P for snapshot pushes (§3.1):
//! the decode worker is the source (its "prefill pinned" is the slot lock)
//! and the prefill worker's snapshot store is the destination scheduler.
//! Facts between the two roles are delivered in order and without delay; the
//! roles' actions are interpreted here, and every lease and reservation is
//! recorded in a `Ledger` so a run can prove each ended exactly once.
//!
//! Granularity is the turn, not the token: the prefill worker computes one
//! prompt at a time, first come first served; each decode worker has one
//! extend lane for appends (FCFS) and decodes a turn's output at the
//! per-step time of the perf model for its batch and running KV when the
//! turn's first token appears. Transfers are timed by `handoff-core`'s
//! `TransferTimer`, one per link direction (full duplex) unless configured
//! half duplex. Sessions run closed loop: a turn is sent its think time
//! after the previous one completed (or failed), and the client closes the
//! session `session_close_delay` after its last turn.

use crate::config::{FaultKind, KvcConfig, ServingMode};
use crate::decode::{DecodeWorker, PushJob};
use crate::log::{EventLog, Value};
use crate::metrics::{ExecMode, RequestRecord, RunSummary};
use crate::prefill::PrefillWorker;
use crate::store::{EvictReason, Lookup, MissReason, PrefillSnapshotStore, ReserveError, Reserved};
use handoff_core::accounting::{Holding, Ledger};
use handoff_core::{
    CancelReason, Completion, DestinationAction, DestinationEvent, DestinationHandoff,
    DestinationState, Duration, Generation, HandoffId, HandoffPolicy, Instant, Pass, PerfModel,
    Request, ReservationSummary, Rng, SessionId, SourceAction, SourceEvent, SourceHandoff,
    SourceLease, SourceLeaseId, SourceReady, SourceState, TransferTimer, TransitionError, Verdict,
    WorkerId,
};
use handoff_router::{PoolRole, Router, RouterConfig, RouterMode};
use handoff_workload::TraceItem;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

const P_ID: WorkerId = WorkerId(0);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Arrive(usize),
    Dispatch(usize),
    PrefillDone(HandoffId),
    Transfer(usize, Completion),
    FirstToken {
        req: usize,
        d: usize,
        gen: Generation,
    },
    DecodeDone {
        req: usize,
        d: usize,
        gen: Generation,
    },
    SrcTimer(HandoffId, Instant),
    DstTimer(HandoffId, Instant),
    Close(usize),
    Fault(usize),
}

#[derive(Clone, Copy, Debug)]
enum Fact {
    Src(SourceEvent),
    Dst(DestinationEvent),
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    /// P→D: a prefill (or a snapshot read) handed to decode worker `d`.
    Forward {
        req: usize,
        d: usize,
        bypass: Option<(SessionId, u64)>,
    },
    /// D→P: a session snapshot pushed from decode worker `d`.
    Push {
        sess: usize,
        d: usize,
        gen: Generation,
        attempt: u8,
    },
}

#[derive(Clone, Debug)]
struct Handoff {
    kind: Kind,
    src: SourceHandoff,
    dst: DestinationHandoff,
    src_worker: WorkerId,
    dst_worker: WorkerId,
    tokens: u64,
    transfer: Option<bool>,
    transfer_started: Instant,
    locked: bool,
    activated: bool,
    outcome: Option<&'static str>,
}

#[derive(Clone, Debug)]
struct Req {
    request: Request,
    session: usize,
    turn: u32,
    delay: Duration,
    sent: Option<Instant>,
    mode: ExecMode,
    cause: Option<&'static str>,
    reseed_from: Option<usize>,
    handoff: Option<HandoffId>,
    decode: Option<(usize, Generation)>,
    first_token: Option<Instant>,
    done: Option<Instant>,
    failed: Option<&'static str>,
    prefill_computed: u64,
    append_computed: u64,
    snapshot_used: bool,
    snapshot_age: Option<Duration>,
    push_count: u32,
    miss: Option<&'static str>,
}

#[derive(Clone, Debug)]
struct Sess {
    id: SessionId,
    turns: Vec<usize>,
    next: usize,
    resident: Option<usize>,
    pushes_sent: u32,
    closed: bool,
}

#[derive(Clone, Debug, Default)]
struct Stats {
    pushes_enqueued: u64,
    pushes_started: u64,
    pushes_sent: u64,
    pushes_failed: u64,
    pushes_retried: u64,
    push_bytes: u64,
    push_failures: BTreeMap<String, u64>,
    bypass_hits: u64,
    bypass_misses: BTreeMap<String, u64>,
    evictions: BTreeMap<String, u64>,
    double_pushes: u64,
    slot_evictions: u64,
    stale_facts: u64,
}

/// What a run produced.
#[derive(Clone, Debug)]
pub struct RunOutput {
    /// One record per trace request, in trace order.
    pub records: Vec<RequestRecord>,
    /// The summary.
    pub summary: RunSummary,
    /// The structured JSONL log (empty unless `KvcConfig::log`).
    pub log: Vec<String>,
    /// The end-of-run accounting check: every lease and reservation ended
    /// exactly once, no slot locked, no reservation pending, no handoff
    /// open, no protocol anomaly.
    pub check: Result<(), String>,
}

/// One configuration over one trace; see the module docs.
pub struct Simulation {
    cfg: KvcConfig,
    label: String,
    now: Instant,
    seq: u64,
    queue: BinaryHeap<Reverse<(Instant, u64, Ev)>>,
    reqs: Vec<Req>,
    sessions: Vec<Sess>,
    session_index: BTreeMap<SessionId, usize>,
    prefill: PrefillWorker,
    decodes: Vec<DecodeWorker>,
    handoffs: BTreeMap<HandoffId, Handoff>,
    facts: VecDeque<(HandoffId, Fact)>,
    touched: Vec<HandoffId>,
    ledger: Ledger,
    /// `[P→D, D→P]`; one shared timer when links are half-duplex.
    timers: [TransferTimer; 2],
    router: Option<Router>,
    rng: Rng,
    fail_pushes: u32,
    holding_pushes: bool,
    lease_seq: u64,
    log: EventLog,
    anomalies: Vec<String>,
    stats: Stats,
}

fn summary_for(reserved: u64, transfer: u64) -> ReservationSummary {
    ReservationSummary {
        reservation: None,
        physical_blocks: reserved.max(1),
        matched_prefix_tokens: 0,
        transfer_tokens: transfer,
        transfer_blocks: transfer,
        request_slot: true,
        decode_headroom_tokens: 0,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

impl Simulation {
    /// Builds a run of `cfg` over `items`. Turns of a session (same
    /// `request.session`) are sent closed-loop: the first at its trace
    /// arrival, each next one its `delay` (think time) after the previous
    /// completed. Requests without a session are one-turn sessions.
    pub fn new(cfg: KvcConfig, items: &[TraceItem]) -> Result<Self, String> {
        cfg.validate()?;
        let mut sessions: Vec<Sess> = Vec::new();
        let mut session_index = BTreeMap::new();
        let mut reqs = Vec::with_capacity(items.len());
        for (i, it) in items.iter().enumerate() {
            let sid = it
                .request
                .session
                .unwrap_or(SessionId((1 << 63) | i as u64));
            let s = *session_index.entry(sid).or_insert_with(|| {
                sessions.push(Sess {
                    id: sid,
                    turns: Vec::new(),
                    next: 0,
                    resident: None,
                    pushes_sent: 0,
                    closed: false,
                });
                sessions.len() - 1
            });
            let turn = sessions[s].turns.len() as u32;
            sessions[s].turns.push(i);
            reqs.push(Req {
                request: it.request.clone(),
                session: s,
                turn,
                delay: it.delay.unwrap_or(Duration::ZERO),
                sent: None,
                mode: ExecMode::Pd,
                cause: None,
                reseed_from: None,
                handoff: None,
                decode: None,
                first_token: None,
                done: None,
                failed: None,
                prefill_computed: 0,
                append_computed: 0,
                snapshot_used: false,
                snapshot_age: None,
                push_count: 0,
                miss: None,
            });
        }
        let decodes: Vec<DecodeWorker> = (0..cfg.decode_workers)
            .map(|i| DecodeWorker::new(WorkerId(i + 1), cfg.decode_kv_tokens))
            .collect();
        let router = (cfg.mode == ServingMode::NaivePd).then(|| {
            Router::new(
                RouterConfig::new(PoolRole::Decode, RouterMode::KvAware, 16).with_seed(cfg.seed),
                decodes.iter().map(|d| d.id),
            )
        });
        let store = PrefillSnapshotStore::new(cfg.sync.max_sessions, cfg.sync.store_kv_tokens);
        Ok(Simulation {
            prefill: PrefillWorker::new(P_ID, cfg.prefill_kv_tokens, store),
            timers: [
                TransferTimer::new(cfg.timings.transfer),
                TransferTimer::new(cfg.timings.transfer),
            ],
            rng: Rng::seeded(cfg.seed ^ 0x6b76_6370_7573_6821),
            log: EventLog::new(cfg.log),
            label: String::from("run"),
            cfg,
            now: Instant::ZERO,
            seq: 0,
            queue: BinaryHeap::new(),
            reqs,
            sessions,
            session_index,
            decodes,
            handoffs: BTreeMap::new(),
            facts: VecDeque::new(),
            touched: Vec::new(),
            ledger: Ledger::new(),
            router,
            fail_pushes: 0,
            holding_pushes: false,
            lease_seq: 0,
            anomalies: Vec::new(),
            stats: Stats::default(),
        })
    }

    /// Names the run in its summary and in every log line (`"run"`).
    pub fn with_label(mut self, label: &str) -> Self {
        self.label = label.to_string();
        self.log = EventLog::new(self.cfg.log).with_label(label);
        self
    }

    fn schedule(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((at.max(self.now), self.seq, ev)));
    }

    fn emit(&mut self, event: &str, s: usize, fields: &[(&str, Value<'_>)]) {
        if self.log.enabled() {
            let sid = self.sessions[s].id;
            self.log.emit(self.now, event, sid, fields);
        }
    }

    fn emit_sid(&mut self, event: &str, sid: SessionId, fields: &[(&str, Value<'_>)]) {
        self.log.emit(self.now, event, sid, fields);
    }

    /// Runs to completion.
    pub fn run(mut self) -> RunOutput {
        for s in 0..self.sessions.len() {
            let r = self.sessions[s].turns[0];
            self.sessions[s].next = 1;
            let at = self.reqs[r].request.arrival;
            self.schedule(at, Ev::Arrive(r));
        }
        for i in 0..self.cfg.faults.len() {
            let at = self.cfg.faults[i].at;
            self.schedule(at, Ev::Fault(i));
        }
        while let Some(Reverse((t, _, ev))) = self.queue.pop() {
            self.now = t;
            self.handle(ev);
        }
        self.finish()
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Arrive(r) => self.on_arrive(r),
            Ev::Dispatch(r) => self.on_dispatch(r),
            Ev::PrefillDone(id) => self.on_prefill_done(id),
            Ev::Transfer(lane, c) => self.on_transfer(lane, c),
            Ev::FirstToken { req, d, gen } => self.on_first_token(req, d, gen),
            Ev::DecodeDone { req, d, gen } => self.on_decode_done(req, d, gen),
            Ev::SrcTimer(id, deadline) => {
                if let Some(h) = self.handoffs.get_mut(&id) {
                    if h.src.deadline() == deadline && h.src.state() != SourceState::Released {
                        h.outcome.get_or_insert("lease_expired");
                        self.facts
                            .push_back((id, Fact::Src(SourceEvent::LeaseExpired)));
                    }
                }
            }
            Ev::DstTimer(id, deadline) => {
                if let Some(h) = self.handoffs.get_mut(&id) {
                    if h.dst.deadline() == deadline && h.dst.state() != DestinationState::Released {
                        h.outcome.get_or_insert("reservation_expired");
                        self.facts
                            .push_back((id, Fact::Dst(DestinationEvent::ReservationExpired)));
                    }
                }
            }
            Ev::Close(s) => self.on_close(s),
            Ev::Fault(i) => self.on_fault(i),
        }
        self.drive();
    }

    // ---- requests -------------------------------------------------------

    fn send_next_turn(&mut self, s: usize) {
        let sess = &mut self.sessions[s];
        if let Some(&r) = sess.turns.get(sess.next) {
            sess.next += 1;
            let at = self.now + self.reqs[r].delay;
            self.schedule(at, Ev::Arrive(r));
        } else {
            let at = self.now + self.cfg.session_close_delay;
            self.schedule(at, Ev::Close(s));
        }
    }

    fn on_arrive(&mut self, r: usize) {
        let s = self.reqs[r].session;
        self.reqs[r].sent = Some(self.now);
        self.reqs[r].push_count = self.sessions[s].pushes_sent;
        let p_open = self.cfg.timings.p_open;
        if self.cfg.mode == ServingMode::NaivePd {
            self.reqs[r].mode = ExecMode::Pd;
            self.schedule(self.now + p_open, Ev::Dispatch(r));
            return;
        }
        if self.reqs[r].turn == 0 {
            self.reqs[r].mode = ExecMode::Seed;
            self.schedule(self.now + p_open, Ev::Dispatch(r));
            return;
        }
        let sid = self.sessions[s].id;
        let input = u64::from(self.reqs[r].request.prompt_tokens);
        let output = u64::from(self.reqs[r].request.max_output_tokens);
        let from = self.sessions[s].resident;
        let cause = match from {
            None => "not_resident",
            Some(d) if self.should_rebalance(d) => "rebalance",
            Some(d) => match self.decodes[d].try_append(sid, input, output) {
                Some(a) => {
                    self.on_evicted(d, &a.evicted);
                    self.start_direct(r, d, a.new_tokens);
                    return;
                }
                None => "capacity",
            },
        };
        if let Some(d) = from {
            self.release_session(d, s);
        }
        let req = &mut self.reqs[r];
        req.mode = ExecMode::Reseed;
        req.cause = Some(cause);
        req.reseed_from = from;
        let from_field = from.map_or(Value::S("none"), |d| Value::U(d as u64));
        self.emit(
            "reseed",
            s,
            &[("cause", Value::S(cause)), ("from", from_field)],
        );
        self.schedule(self.now + p_open, Ev::Dispatch(r));
    }

    /// Direct-to-D append (the seed's §3.1 t=0..T1): only the new tokens
    /// are computed, FCFS on the worker's extend lane; the pass that computes
    /// them emits the first token.
    fn start_direct(&mut self, r: usize, d: usize, new_tokens: u64) {
        let gen = self.decodes[d].generation;
        let req = &mut self.reqs[r];
        req.mode = ExecMode::Direct;
        req.decode = Some((d, gen));
        req.append_computed = new_tokens;
        let start = (self.now + self.cfg.timings.direct_route).max(self.decodes[d].lane_free_at);
        let done = start + self.cfg.timings.perf.prefill(new_tokens);
        self.decodes[d].lane_free_at = done;
        self.schedule(done, Ev::FirstToken { req: r, d, gen });
    }

    fn should_rebalance(&self, d: usize) -> bool {
        let t = u64::from(self.cfg.rebalance_threshold);
        if t == 0 || self.decodes.len() < 2 {
            return false;
        }
        let mine = self.decodes[d].active();
        let least = (0..self.decodes.len())
            .filter(|&e| e != d)
            .map(|e| self.decodes[e].active())
            .min()
            .unwrap_or(mine);
        mine >= least + t
    }

    /// KVC placement of a (re)seed: the decode worker with the most room
    /// (free plus evictable), then the fewest running turns, then the lowest
    /// id; never the worker the session just left unless it is the only one.
    fn pick_decode(&self, exclude: Option<usize>) -> usize {
        let n = self.decodes.len();
        let mut best: Option<(usize, u64, u64)> = None;
        for d in 0..n {
            if Some(d) == exclude && n > 1 {
                continue;
            }
            let room = self.decodes[d].headroom();
            let active = self.decodes[d].active();
            let better = match best {
                None => true,
                Some((_, br, ba)) => room > br || (room == br && active < ba),
            };
            if better {
                best = Some((d, room, active));
            }
        }
        best.map_or(0, |b| b.0)
    }

    fn on_dispatch(&mut self, r: usize) {
        let input = u64::from(self.reqs[r].request.prompt_tokens);
        let output = u64::from(self.reqs[r].request.max_output_tokens);
        if input + output > self.cfg.decode_kv_tokens || input > self.cfg.prefill_kv_tokens {
            self.fail_request(r, "too_large");
            return;
        }
        let d = match self.router.as_mut() {
            Some(router) => router
                .select(&self.reqs[r].request, self.now)
                .map_or(0, |sel| sel.worker.0.saturating_sub(1) as usize),
            None => self.pick_decode(self.reqs[r].reseed_from),
        };
        let id = self.prefill.ids.next_id();
        let ttl = self.cfg.handoff_ttl;
        self.handoffs.insert(
            id,
            Handoff {
                kind: Kind::Forward {
                    req: r,
                    d,
                    bypass: None,
                },
                src: SourceHandoff::new(id, HandoffPolicy::DestinationFirst, ttl),
                dst: DestinationHandoff::new(id, HandoffPolicy::DestinationFirst, ttl),
                src_worker: P_ID,
                dst_worker: self.decodes[d].id,
                tokens: input,
                transfer: None,
                transfer_started: self.now,
                locked: false,
                activated: false,
                outcome: None,
            },
        );
        self.reqs[r].handoff = Some(id);
        self.facts.push_back((id, Fact::Src(SourceEvent::Start)));
        self.facts.push_back((
            id,
            Fact::Dst(DestinationEvent::Routed {
                source: P_ID,
                ready: None,
            }),
        ));
    }

    fn on_prefill_done(&mut self, id: HandoffId) {
        if !self.prefill.is_computing(id) {
            return;
        }
        self.prefill.compute_done(id);
        if let Some(h) = self.handoffs.get(&id) {
            let lease = self.lease(h.tokens, self.cfg.handoff_ttl);
            self.facts
                .push_back((id, Fact::Src(SourceEvent::PrefillPinned { lease })));
        }
        self.pump_prefill();
    }

    fn lease(&mut self, tokens: u64, ttl: Duration) -> SourceLease {
        self.lease_seq += 1;
        SourceLease {
            id: SourceLeaseId(self.lease_seq),
            blocks: tokens.max(1),
            tokens,
            deadline: self.now + ttl,
        }
    }

    fn on_first_token(&mut self, r: usize, d: usize, gen: Generation) {
        let req = &self.reqs[r];
        if self.decodes[d].generation != gen || req.done.is_some() || req.first_token.is_some() {
            return;
        }
        self.reqs[r].first_token = Some(self.now);
        let w = &mut self.decodes[d];
        w.decoding += 1;
        let step = self.cfg.timings.perf.pass(&Pass::decode(
            u64::from(w.decoding),
            w.running_tokens(),
            w.capacity(),
        ));
        let rest = self.reqs[r].request.max_output_tokens.saturating_sub(1);
        let done = self.now + step * rest;
        self.schedule(done, Ev::DecodeDone { req: r, d, gen });
    }

    fn on_decode_done(&mut self, r: usize, d: usize, gen: Generation) {
        if self.decodes[d].generation != gen || self.reqs[r].done.is_some() {
            return;
        }
        self.decodes[d].decoding = self.decodes[d].decoding.saturating_sub(1);
        self.reqs[r].done = Some(self.now);
        let s = self.reqs[r].session;
        let sid = self.sessions[s].id;
        let committed = u64::from(self.reqs[r].request.prompt_tokens)
            + u64::from(self.reqs[r].request.max_output_tokens);
        let retain = self.cfg.mode == ServingMode::Kvc;
        self.decodes[d].finish_turn(sid, committed, retain);
        if let Some(id) = self.reqs[r].handoff.take() {
            self.facts
                .push_back((id, Fact::Dst(DestinationEvent::Finished)));
        }
        if let Some(router) = self.router.as_mut() {
            router.request_released(self.reqs[r].request.id);
        }
        if retain && self.cfg.sync_active() {
            self.maybe_push(d, s, committed);
            // The commit hook runs in the iteration that commits: its push
            // locks the slot before queued reservations may evict it.
            self.drive();
        }
        self.pump_decode(d);
        self.send_next_turn(s);
    }

    fn fail_request(&mut self, r: usize, reason: &'static str) {
        if self.reqs[r].done.is_some() {
            return;
        }
        self.reqs[r].failed = Some(reason);
        self.reqs[r].done = Some(self.now);
        self.reqs[r].handoff = None;
        let s = self.reqs[r].session;
        let sid = self.sessions[s].id;
        if let Some((d, gen)) = self.reqs[r].decode {
            if self.decodes[d].generation == gen {
                if self.reqs[r].first_token.is_some() {
                    self.decodes[d].decoding = self.decodes[d].decoding.saturating_sub(1);
                }
                if self.cfg.mode == ServingMode::NaivePd {
                    self.decodes[d].release(sid);
                } else {
                    self.decodes[d].abandon_turn(sid);
                }
                self.pump_decode(d);
            }
        }
        if let Some(router) = self.router.as_mut() {
            router.request_released(self.reqs[r].request.id);
        }
        self.send_next_turn(s);
    }

    fn on_close(&mut self, s: usize) {
        self.sessions[s].closed = true;
        if let Some(d) = self.sessions[s].resident {
            self.release_session(d, s);
        }
        let sid = self.sessions[s].id;
        if let Some(len) = self.prefill.store.release(sid) {
            self.evicted_snapshot(sid, len, EvictReason::SessionClose);
            self.pump_store();
        }
    }

    /// `release_session` on decode worker `d`: the slot goes, queued pushes
    /// are dropped and running pushes are aborted (§3.1: a session released
    /// during its push aborts it).
    fn release_session(&mut self, d: usize, s: usize) {
        let sid = self.sessions[s].id;
        for (id, h) in self.handoffs.iter_mut() {
            if let Kind::Push { sess, d: hd, .. } = h.kind {
                if sess == s && hd == d && h.src.state() != SourceState::Released {
                    h.outcome.get_or_insert("session_released");
                    // The slot goes now; the lock goes with it.
                    h.locked = false;
                    self.facts.push_back((
                        *id,
                        Fact::Src(SourceEvent::Cancelled {
                            reason: CancelReason::Client,
                        }),
                    ));
                }
            }
        }
        self.decodes[d].release(sid);
        if self.sessions[s].resident == Some(d) {
            self.sessions[s].resident = None;
        }
        self.pump_decode(d);
    }

    fn on_evicted(&mut self, d: usize, evicted: &[SessionId]) {
        for sid in evicted {
            self.stats.slot_evictions += 1;
            if let Some(&s) = self.session_index.get(sid) {
                if self.sessions[s].resident == Some(d) {
                    self.sessions[s].resident = None;
                }
            }
        }
    }

    // ---- D→P push ------------------------------------------------------

    /// The §3.1 commit hook (`on_session_step_committed`): push when the
    /// session grew by at least `K_DELTA` since its last successful push.
    /// A session already queued is not queued twice (its push reads the
    /// slot when it starts).
    fn maybe_push(&mut self, d: usize, s: usize, committed: u64) {
        let sid = self.sessions[s].id;
        let last = self.decodes[d].last_pushed.get(&sid).copied().unwrap_or(0);
        let delta = committed.saturating_sub(last);
        if delta < self.cfg.sync.delta_tokens {
            return;
        }
        self.stats.pushes_enqueued += 1;
        self.emit(
            "snapshot_push_enqueued",
            s,
            &[
                ("delta", Value::U(delta)),
                ("seqlen", Value::U(committed)),
                ("worker", Value::U(d as u64)),
            ],
        );
        let w = &mut self.decodes[d];
        if !w.push_queue.iter().any(|j| j.session == sid) {
            w.push_queue.push_back(PushJob {
                session: sid,
                attempt: 1,
            });
        }
        self.start_pushes(d);
    }

    /// The sender pool (§4.1): starts queued pushes up to the concurrency.
    fn start_pushes(&mut self, d: usize) {
        if self.holding_pushes {
            return;
        }
        while self.decodes[d].pushes_in_flight < self.cfg.sync.push_concurrency {
            let Some(job) = self.decodes[d].push_queue.pop_front() else {
                break;
            };
            let Some(slot) = self.decodes[d].slot(job.session) else {
                self.decodes[d].pushes_dropped += 1;
                continue;
            };
            let Some(&s) = self.session_index.get(&job.session) else {
                continue;
            };
            if slot.committed == 0 {
                continue;
            }
            let w = &mut self.decodes[d];
            let id = w.ids.next_id();
            let gen = w.generation;
            w.pushes_in_flight += 1;
            let ttl = self.cfg.sync.push_ttl;
            self.handoffs.insert(
                id,
                Handoff {
                    kind: Kind::Push {
                        sess: s,
                        d,
                        gen,
                        attempt: job.attempt,
                    },
                    src: SourceHandoff::new(id, HandoffPolicy::DestinationFirst, ttl),
                    dst: DestinationHandoff::new(id, HandoffPolicy::DestinationFirst, ttl),
                    src_worker: w.id,
                    dst_worker: P_ID,
                    tokens: slot.committed,
                    transfer: None,
                    transfer_started: self.now,
                    locked: false,
                    activated: false,
                    outcome: None,
                },
            );
            self.stats.pushes_started += 1;
            let source = self.decodes[d].id;
            self.facts.push_back((id, Fact::Src(SourceEvent::Start)));
            self.facts.push_back((
                id,
                Fact::Dst(DestinationEvent::Routed {
                    source,
                    ready: None,
                }),
            ));
        }
    }

    fn evicted_snapshot(&mut self, sid: SessionId, len: u64, reason: EvictReason) {
        *self
            .stats
            .evictions
            .entry(reason.name().to_string())
            .or_default() += 1;
        self.emit_sid(
            "snapshot_evicted",
            sid,
            &[
                ("reason", Value::S(reason.name())),
                ("seqlen", Value::U(len)),
            ],
        );
    }

    fn reserved_in_store(&mut self, id: HandoffId, sid: SessionId, r: Reserved) {
        if r.double_push {
            self.stats.double_pushes += 1;
            self.emit_sid(
                "snapshot_double_push",
                sid,
                &[
                    ("level", Value::S("warn")),
                    ("policy", Value::S("last_write_wins")),
                ],
            );
        }
        for (s, len) in r.evicted {
            self.evicted_snapshot(s, len, EvictReason::Lru);
        }
        let tokens = self.handoffs.get(&id).map_or(0, |h| h.tokens);
        self.facts.push_back((
            id,
            Fact::Dst(DestinationEvent::Reserved {
                summary: summary_for(tokens, tokens),
            }),
        ));
    }

    // ---- prefill worker ---------------------------------------------------

    /// The §4.4 scheduler hook: a reseed with a qualifying snapshot skips
    /// `model.forward()` and goes straight to the P→D' transfer; anything
    /// else queues for a normal prefill.
    fn dispatch_prefill(&mut self, id: HandoffId, r: usize) {
        let s = self.reqs[r].session;
        let sid = self.sessions[s].id;
        let input = u64::from(self.reqs[r].request.prompt_tokens);
        if self.reqs[r].mode == ExecMode::Reseed && self.cfg.sync_active() {
            let lookup = if self.cfg.sync.bypass {
                let mut stale = None;
                let l = self.prefill.store.lookup(
                    sid,
                    input,
                    self.cfg.sync.tail_tolerance,
                    self.cfg.sync.max_age,
                    self.now,
                    &mut stale,
                );
                if let Some(len) = stale {
                    self.evicted_snapshot(sid, len, EvictReason::Stale);
                }
                l
            } else {
                Lookup::Miss(MissReason::Disabled)
            };
            match lookup {
                Lookup::Hit {
                    kv_committed_len,
                    age,
                    version,
                } => {
                    self.stats.bypass_hits += 1;
                    let saved = ms(self.cfg.timings.perf.prefill(input));
                    self.emit(
                        "snapshot_bypass_hit",
                        s,
                        &[
                            ("seqlen", Value::U(kv_committed_len)),
                            ("input_len", Value::U(input)),
                            ("saved_prefill_ms_est", Value::F(saved)),
                            ("age_s", Value::F(age.as_secs_f64())),
                        ],
                    );
                    let req = &mut self.reqs[r];
                    req.snapshot_used = true;
                    req.snapshot_age = Some(age);
                    if let Some(h) = self.handoffs.get_mut(&id) {
                        if let Kind::Forward { bypass, .. } = &mut h.kind {
                            *bypass = Some((sid, version));
                        }
                        h.tokens = kv_committed_len;
                    }
                    let lease = self.lease(kv_committed_len, self.cfg.handoff_ttl);
                    self.facts
                        .push_back((id, Fact::Src(SourceEvent::PrefillPinned { lease })));
                    return;
                }
                Lookup::Miss(reason) => {
                    *self
                        .stats
                        .bypass_misses
                        .entry(reason.name().to_string())
                        .or_default() += 1;
                    self.reqs[r].miss = Some(reason.name());
                    self.emit(
                        "snapshot_bypass_miss",
                        s,
                        &[
                            ("reason", Value::S(reason.name())),
                            ("input_len", Value::U(input)),
                        ],
                    );
                }
            }
        }
        self.prefill.enqueue(id, input);
        self.pump_prefill();
    }

    fn pump_prefill(&mut self) {
        while let Some(id) = self.prefill.startable() {
            let Some(Kind::Forward { req, .. }) = self.handoffs.get(&id).map(|h| h.kind) else {
                self.prefill.release(id, None);
                continue;
            };
            let compute = self.prefill.start(id, &self.reqs[req].request);
            self.reqs[req].prefill_computed = compute;
            let done = self.now + self.cfg.timings.perf.prefill(compute);
            self.schedule(done, Ev::PrefillDone(id));
        }
    }

    fn pump_store(&mut self) {
        while let Some((id, r)) = self.prefill.store.pump() {
            let sid = match self.handoffs.get(&id).map(|h| h.kind) {
                Some(Kind::Push { sess, .. }) => self.sessions[sess].id,
                _ => SessionId(0),
            };
            self.reserved_in_store(id, sid, r);
        }
    }

    fn pump_decode(&mut self, d: usize) {
        while let Some((id, evicted)) = self.decodes[d].pump() {
            self.on_evicted(d, &evicted);
            let (reserved, transfer) = match self.handoffs.get(&id).map(|h| (h.kind, h.tokens)) {
                Some((Kind::Forward { req, .. }, tokens)) => (
                    tokens + u64::from(self.reqs[req].request.max_output_tokens),
                    tokens,
                ),
                _ => (1, 0),
            };
            self.facts.push_back((
                id,
                Fact::Dst(DestinationEvent::Reserved {
                    summary: summary_for(reserved, transfer),
                }),
            ));
        }
    }

    // ---- the role machines ----------------------------------------------

    fn drive(&mut self) {
        loop {
            while let Some((id, fact)) = self.facts.pop_front() {
                self.apply(id, fact);
            }
            if self.touched.is_empty() {
                break;
            }
            let touched = std::mem::take(&mut self.touched);
            for id in touched {
                self.settle(id);
            }
        }
    }

    fn account(&mut self, id: HandoffId, what: Holding, delta: i64) {
        let r = if delta > 0 {
            self.ledger.open(id, what)
        } else if delta < 0 {
            self.ledger.end(id, what)
        } else {
            Ok(())
        };
        if let Err(e) = r {
            self.anomalies.push(e.to_string());
        }
    }

    fn note(&mut self, e: TransitionError) {
        match e {
            TransitionError::Stale { .. } => self.stats.stale_facts += 1,
            other => self.anomalies.push(other.to_string()),
        }
    }

    fn apply(&mut self, id: HandoffId, fact: Fact) {
        let now = self.now;
        let Some(h) = self.handoffs.get_mut(&id) else {
            self.stats.stale_facts += 1;
            return;
        };
        match fact {
            Fact::Src(ev) => match h.src.handle(ev, now) {
                Ok(Verdict::Applied { actions, delta, .. }) => {
                    self.touched.push(id);
                    self.account(id, Holding::SourceLease, delta.pinned);
                    for a in actions.iter() {
                        self.src_action(id, a);
                    }
                }
                Ok(Verdict::Duplicate) => {}
                Err(e) => self.note(e),
            },
            Fact::Dst(ev) => match h.dst.handle(ev, now) {
                Ok(Verdict::Applied { actions, delta, .. }) => {
                    self.touched.push(id);
                    self.account(id, Holding::DestinationReservation, delta.reserved);
                    for a in actions.iter() {
                        self.dst_action(id, a);
                    }
                }
                Ok(Verdict::Duplicate) => {}
                Err(e) => self.note(e),
            },
        }
    }

    fn kind(&self, id: HandoffId) -> Option<Kind> {
        self.handoffs.get(&id).map(|h| h.kind)
    }

    fn src_action(&mut self, id: HandoffId, a: SourceAction) {
        match a {
            SourceAction::DispatchPrefill => match self.kind(id) {
                Some(Kind::Forward { req, .. }) => self.dispatch_prefill(id, req),
                Some(Kind::Push { sess, d, .. }) => self.lock_slot(id, sess, d),
                None => {}
            },
            SourceAction::AnnounceReady { blocks, tokens } => self.facts.push_back((
                id,
                Fact::Dst(DestinationEvent::SourceReady(SourceReady {
                    blocks,
                    tokens,
                })),
            )),
            SourceAction::ArmLease { deadline } => {
                if deadline != Instant::MAX {
                    self.schedule(deadline, Ev::SrcTimer(id, deadline));
                }
            }
            SourceAction::StartTransfer => self.start_transfer(id),
            SourceAction::ReleaseSource => self.end_source(id, true),
            SourceAction::CancelSource => self.end_source(id, false),
            SourceAction::SendReceiveCompleted => self
                .facts
                .push_back((id, Fact::Dst(DestinationEvent::ReceiveCompleted))),
            SourceAction::SendAbort { .. } => self.facts.push_back((
                id,
                Fact::Dst(DestinationEvent::Cancelled {
                    reason: CancelReason::PeerAborted,
                }),
            )),
        }
    }

    fn dst_action(&mut self, id: HandoffId, a: DestinationAction) {
        match a {
            DestinationAction::QueueReservation => self.reserve_destination(id),
            DestinationAction::DequeueReservation => match self.kind(id) {
                Some(Kind::Forward { d, .. }) => {
                    self.decodes[d].unwait(id);
                }
                Some(Kind::Push { .. }) => {
                    self.prefill.store.unwait(id);
                }
                None => {}
            },
            DestinationAction::SendDestinationReserved { summary } => self
                .facts
                .push_back((id, Fact::Src(SourceEvent::DestinationReserved { summary }))),
            DestinationAction::ArmReservation { deadline } => {
                if deadline != Instant::MAX {
                    self.schedule(deadline, Ev::DstTimer(id, deadline));
                }
            }
            DestinationAction::ActivateDestination => self.activate(id),
            DestinationAction::CancelDestination => match self.kind(id) {
                Some(Kind::Forward { d, .. }) => {
                    self.decodes[d].cancel_reservation(id);
                    self.pump_decode(d);
                }
                Some(Kind::Push { .. }) => {
                    self.prefill.store.cancel(id);
                    self.pump_store();
                }
                None => {}
            },
            DestinationAction::SendAbort { .. } => self.facts.push_back((
                id,
                Fact::Src(SourceEvent::Cancelled {
                    reason: CancelReason::PeerAborted,
                }),
            )),
            // Source-first only (a reader pulling) and lease renewal, which
            // neither SGLang's ordering nor this model uses.
            DestinationAction::StartTransfer
            | DestinationAction::SendReaderCompleted
            | DestinationAction::SendLeaseRenewal => {}
        }
    }

    fn reserve_destination(&mut self, id: HandoffId) {
        let Some(h) = self.handoffs.get(&id) else {
            return;
        };
        let tokens = h.tokens;
        match h.kind {
            Kind::Forward { req, d, .. } => {
                let sid = self.sessions[self.reqs[req].session].id;
                let reserve = tokens + u64::from(self.reqs[req].request.max_output_tokens);
                match self.decodes[d].try_reserve(id, sid, reserve) {
                    Some(evicted) => {
                        self.on_evicted(d, &evicted);
                        self.facts.push_back((
                            id,
                            Fact::Dst(DestinationEvent::Reserved {
                                summary: summary_for(reserve, tokens),
                            }),
                        ));
                    }
                    None => {
                        self.decodes[d].wait(id, sid, reserve);
                        self.facts
                            .push_back((id, Fact::Dst(DestinationEvent::Unavailable)));
                    }
                }
            }
            Kind::Push { sess, d, .. } => {
                let sid = self.sessions[sess].id;
                let source = self.decodes[d].id;
                match self.prefill.store.try_reserve(id, sid, tokens, source) {
                    Ok(r) => self.reserved_in_store(id, sid, r),
                    Err(ReserveError::TooLarge) => {
                        if let Some(h) = self.handoffs.get_mut(&id) {
                            h.outcome.get_or_insert("too_large");
                        }
                        self.facts
                            .push_back((id, Fact::Dst(DestinationEvent::Unsupported)));
                    }
                    Err(ReserveError::Unavailable) => {
                        self.prefill.store.wait(id, sid, tokens, source);
                        self.facts
                            .push_back((id, Fact::Dst(DestinationEvent::Unavailable)));
                    }
                }
            }
        }
    }

    /// A push's "prefill" is already done: the KV is in the slot. Locking
    /// the slot is the atomic "pinned" step (§3.1 `lock_ref`).
    fn lock_slot(&mut self, id: HandoffId, s: usize, d: usize) {
        let sid = self.sessions[s].id;
        let fact = match self.decodes[d].lock(sid) {
            Some(committed) => {
                let tokens = self
                    .handoffs
                    .get(&id)
                    .map_or(0, |h| h.tokens)
                    .min(committed);
                let lease = self.lease(tokens, self.cfg.sync.push_ttl);
                if let Some(h) = self.handoffs.get_mut(&id) {
                    h.locked = true;
                    h.tokens = tokens;
                }
                SourceEvent::PrefillPinned { lease }
            }
            None => {
                if let Some(h) = self.handoffs.get_mut(&id) {
                    h.outcome.get_or_insert("session_lost");
                }
                SourceEvent::Cancelled {
                    reason: CancelReason::Client,
                }
            }
        };
        self.facts.push_back((id, Fact::Src(fact)));
    }

    fn start_transfer(&mut self, id: HandoffId) {
        let Some(h) = self.handoffs.get(&id) else {
            return;
        };
        let (tokens, src, dst, kind) = (h.tokens, h.src_worker, h.dst_worker, h.kind);
        let fail = match kind {
            Kind::Push { .. } => {
                self.stats.push_bytes += tokens * self.cfg.timings.bytes_per_token();
                if self.fail_pushes > 0 {
                    self.fail_pushes -= 1;
                    true
                } else {
                    self.cfg.sync.push_failure_rate > 0.0
                        && self.rng.next_f64() < self.cfg.sync.push_failure_rate
                }
            }
            Kind::Forward { .. } => false,
        };
        if let Some(h) = self.handoffs.get_mut(&id) {
            h.transfer = Some(fail);
            h.transfer_started = self.now;
        }
        let lane = self.lane(kind);
        for c in self.timers[lane].start(id, src, src, dst, tokens, self.now) {
            self.schedule(c.at, Ev::Transfer(lane, c));
        }
    }

    /// Which transfer timer a handoff's flow lives in. Full-duplex links
    /// (the default, as RDMA NICs are) time each direction separately, so
    /// pushes into P share bandwidth only with other pushes and reseeds out
    /// of P only with other P→D transfers.
    fn lane(&self, kind: Kind) -> usize {
        match kind {
            Kind::Push { .. } if self.cfg.timings.duplex => 1,
            _ => 0,
        }
    }

    fn on_transfer(&mut self, lane: usize, c: Completion) {
        if !self.timers[lane].is_current(&c) {
            return;
        }
        let Some(h) = self.handoffs.get_mut(&c.id) else {
            return;
        };
        let Some(fail) = h.transfer.take() else {
            return;
        };
        let event = if fail {
            h.outcome.get_or_insert("transfer_failed");
            SourceEvent::Cancelled {
                reason: CancelReason::TransferFailed,
            }
        } else {
            SourceEvent::ReaderCompleted
        };
        self.facts.push_back((c.id, Fact::Src(event)));
        for next in self.timers[lane].finish(c.id, self.now) {
            self.schedule(next.at, Ev::Transfer(lane, next));
        }
    }

    /// `ReleaseSource` (transfer done) and `CancelSource` (abandoned).
    fn end_source(&mut self, id: HandoffId, success: bool) {
        let Some(h) = self.handoffs.get_mut(&id) else {
            return;
        };
        let in_flight = h.transfer.take().is_some();
        let locked = std::mem::replace(&mut h.locked, false);
        let kind = h.kind;
        if in_flight {
            let lane = self.lane(kind);
            for next in self.timers[lane].finish(id, self.now) {
                self.schedule(next.at, Ev::Transfer(lane, next));
            }
        }
        match kind {
            Kind::Forward { req, bypass, .. } => match bypass {
                Some((sid, version)) => {
                    if !self.prefill.store.unpin(sid, version) {
                        self.anomalies
                            .push(format!("{id}: unpin of an unpinned snapshot"));
                    }
                    self.pump_store();
                }
                None => {
                    let cache = success.then_some(&self.reqs[req].request);
                    self.prefill.release(id, cache);
                    self.pump_prefill();
                }
            },
            Kind::Push { sess, d, gen, .. } => {
                if locked && self.decodes[d].generation == gen {
                    let sid = self.sessions[sess].id;
                    self.decodes[d].unlock(sid);
                    self.pump_decode(d);
                }
            }
        }
    }

    fn activate(&mut self, id: HandoffId) {
        let Some(h) = self.handoffs.get(&id) else {
            return;
        };
        let (kind, tokens) = (h.kind, h.tokens);
        match kind {
            Kind::Forward { req, d, bypass } => {
                let Some(sid) = self.decodes[d].activate(id, tokens) else {
                    self.anomalies
                        .push(format!("{id}: activation without a reservation"));
                    return;
                };
                let gen = self.decodes[d].generation;
                if let Some(h) = self.handoffs.get_mut(&id) {
                    h.activated = true;
                }
                let s = self.reqs[req].session;
                if self.cfg.mode == ServingMode::Kvc {
                    self.sessions[s].resident = Some(d);
                }
                self.reqs[req].decode = Some((d, gen));
                let land = self.now + self.cfg.timings.d_start;
                if bypass.is_some() {
                    // D' now holds the snapshot; P holds the same length.
                    self.decodes[d].last_pushed.insert(sid, tokens);
                    // The tail the snapshot lacks is appended on D', as a
                    // direct turn would (at least one token computes).
                    let input = u64::from(self.reqs[req].request.prompt_tokens);
                    let tail = input.saturating_sub(tokens).max(1);
                    self.reqs[req].append_computed = tail;
                    let start = land.max(self.decodes[d].lane_free_at);
                    let done = start + self.cfg.timings.perf.prefill(tail);
                    self.decodes[d].lane_free_at = done;
                    self.schedule(done, Ev::FirstToken { req, d, gen });
                } else {
                    self.schedule(land, Ev::FirstToken { req, d, gen });
                }
            }
            Kind::Push {
                sess,
                d,
                gen,
                attempt,
            } => {
                let Some(ing) = self.prefill.store.ingest(id, self.now) else {
                    self.anomalies
                        .push(format!("{id}: ingest without a reservation"));
                    return;
                };
                let started = self.handoffs.get_mut(&id).map_or(self.now, |h| {
                    h.activated = true;
                    h.transfer_started
                });
                self.stats.pushes_sent += 1;
                self.sessions[sess].pushes_sent += 1;
                if self.decodes[d].generation == gen {
                    self.decodes[d]
                        .last_pushed
                        .insert(ing.session, ing.kv_committed_len);
                }
                let bytes = ing.kv_committed_len * self.cfg.timings.bytes_per_token();
                let dur = ms(self.now.saturating_since(started));
                self.emit(
                    "snapshot_push_sent",
                    sess,
                    &[
                        ("bytes", Value::U(bytes)),
                        ("dur_ms", Value::F(dur)),
                        ("seqlen", Value::U(ing.kv_committed_len)),
                        ("attempt", Value::U(u64::from(attempt))),
                    ],
                );
                let replaced = ing.replaced.map_or(Value::S("none"), Value::U);
                self.emit(
                    "snapshot_recv_ingested",
                    sess,
                    &[
                        ("seqlen", Value::U(ing.kv_committed_len)),
                        ("replaced", replaced),
                    ],
                );
                // The entry is ordinary store state from here on.
                self.facts
                    .push_back((id, Fact::Dst(DestinationEvent::Finished)));
                self.pump_store();
            }
        }
    }

    /// A handoff whose roles both ended leaves the table; an unactivated
    /// P→D handoff fails its request, an unactivated push counts as failed
    /// and is retried once if the cause is transient (§7).
    fn settle(&mut self, id: HandoffId) {
        let done = match self.handoffs.get(&id) {
            Some(h) => {
                h.src.state() == SourceState::Released
                    && h.dst.state() == DestinationState::Released
            }
            None => false,
        };
        if !done {
            return;
        }
        let Some(h) = self.handoffs.remove(&id) else {
            return;
        };
        match h.kind {
            Kind::Forward { req, .. } => {
                if !h.activated {
                    self.fail_request(req, h.outcome.unwrap_or("handoff_aborted"));
                }
            }
            Kind::Push {
                sess,
                d,
                gen,
                attempt,
            } => {
                let same = self.decodes[d].generation == gen;
                if same {
                    let w = &mut self.decodes[d];
                    w.pushes_in_flight = w.pushes_in_flight.saturating_sub(1);
                }
                if !h.activated {
                    let reason = h.outcome.unwrap_or("aborted");
                    self.stats.pushes_failed += 1;
                    *self
                        .stats
                        .push_failures
                        .entry(reason.to_string())
                        .or_default() += 1;
                    let transient = matches!(
                        reason,
                        "transfer_failed"
                            | "reservation_expired"
                            | "lease_expired"
                            | "prefill_restart"
                    );
                    let sid = self.sessions[sess].id;
                    let retry = transient
                        && attempt == 1
                        && same
                        && self.sessions[sess].resident == Some(d)
                        && !self.sessions[sess].closed
                        && !self.decodes[d].push_queue.iter().any(|j| j.session == sid);
                    self.emit(
                        "snapshot_push_failed",
                        sess,
                        &[
                            ("reason", Value::S(reason)),
                            ("attempt", Value::U(u64::from(attempt))),
                            ("retry", Value::B(retry)),
                        ],
                    );
                    if retry {
                        self.stats.pushes_retried += 1;
                        self.decodes[d].push_queue.push_front(PushJob {
                            session: sid,
                            attempt: 2,
                        });
                    }
                }
                if same {
                    self.start_pushes(d);
                }
            }
        }
    }

    // ---- faults ---------------------------------------------------------

    fn on_fault(&mut self, i: usize) {
        let Some(f) = self.cfg.faults.get(i).copied() else {
            return;
        };
        match f.kind {
            FaultKind::RestartDecode(idx) => {
                if (idx as usize) < self.decodes.len() {
                    self.restart_decode(idx as usize);
                }
            }
            FaultKind::RestartPrefill => self.restart_prefill(),
            FaultKind::EvictSession(sid) => {
                let Some(&s) = self.session_index.get(&sid) else {
                    return;
                };
                if let Some(d) = self.sessions[s].resident {
                    if self.decodes[d].evict_if_idle(sid) {
                        self.sessions[s].resident = None;
                        self.stats.slot_evictions += 1;
                        self.pump_decode(d);
                    }
                }
            }
            FaultKind::FailPushes(n) => self.fail_pushes = self.fail_pushes.saturating_add(n),
        }
    }

    /// §7 "D 重启 / session 丢失": every handoff touching the worker is
    /// cancelled (accounting ends while its tables still exist), its turns
    /// fail, and then its memory is wiped.
    fn restart_decode(&mut self, d: usize) {
        let wid = self.decodes[d].id;
        let mut cancel = Vec::new();
        for (id, h) in self.handoffs.iter_mut() {
            let released_dst = h.dst.state() == DestinationState::Released;
            let released_src = h.src.state() == SourceState::Released;
            match h.kind {
                Kind::Forward { .. } if h.dst_worker == wid && !released_dst => {
                    h.outcome.get_or_insert("decode_restart");
                    cancel.push((
                        *id,
                        Fact::Dst(DestinationEvent::Cancelled {
                            reason: CancelReason::Teardown,
                        }),
                    ));
                }
                Kind::Push { .. } if h.src_worker == wid && !released_src => {
                    h.outcome.get_or_insert("decode_restart");
                    cancel.push((
                        *id,
                        Fact::Src(SourceEvent::Cancelled {
                            reason: CancelReason::Teardown,
                        }),
                    ));
                }
                _ => {}
            }
        }
        self.facts.extend(cancel);
        self.holding_pushes = true;
        self.drive();
        let gen = self.decodes[d].generation;
        for r in 0..self.reqs.len() {
            if self.reqs[r].decode == Some((d, gen)) && self.reqs[r].done.is_none() {
                self.fail_request(r, "decode_restart");
            }
        }
        self.drive();
        self.holding_pushes = false;
        let lost = self.decodes[d].restart(self.now);
        for sid in lost {
            if let Some(&s) = self.session_index.get(&sid) {
                if self.sessions[s].resident == Some(d) {
                    self.sessions[s].resident = None;
                }
            }
        }
        for e in 0..self.decodes.len() {
            self.start_pushes(e);
        }
    }

    /// §7 "P 重启": in-flight prefills, reads and pushes are cancelled, then
    /// the cache and the snapshot store are cleared. Pushes aborted by the
    /// restart retry once, after it.
    fn restart_prefill(&mut self) {
        let mut cancel = Vec::new();
        for (id, h) in self.handoffs.iter_mut() {
            match h.kind {
                Kind::Forward { .. } if h.src.state() != SourceState::Released => {
                    h.outcome.get_or_insert("prefill_restart");
                    cancel.push((
                        *id,
                        Fact::Src(SourceEvent::Cancelled {
                            reason: CancelReason::Teardown,
                        }),
                    ));
                }
                Kind::Push { .. } if h.dst.state() != DestinationState::Released => {
                    h.outcome.get_or_insert("prefill_restart");
                    cancel.push((
                        *id,
                        Fact::Dst(DestinationEvent::Cancelled {
                            reason: CancelReason::Teardown,
                        }),
                    ));
                }
                _ => {}
            }
        }
        self.facts.extend(cancel);
        self.holding_pushes = true;
        self.drive();
        self.prefill.restart();
        for (sid, len) in self.prefill.store.clear() {
            self.evicted_snapshot(sid, len, EvictReason::Restart);
        }
        self.holding_pushes = false;
        for d in 0..self.decodes.len() {
            self.start_pushes(d);
        }
    }

    // ---- results ----------------------------------------------------------

    fn check(&self) -> Result<(), String> {
        let mut problems: Vec<String> = Vec::new();
        if let Err(e) = self.ledger.check_drained() {
            problems.push(e.to_string());
        }
        if !self.handoffs.is_empty() {
            problems.push(format!("{} handoffs still open", self.handoffs.len()));
        }
        for (i, w) in self.decodes.iter().enumerate() {
            if w.locked_slots() > 0 {
                problems.push(format!(
                    "decode {i}: {} slots still locked",
                    w.locked_slots()
                ));
            }
            if w.running_slots() > 0 || w.decoding > 0 {
                problems.push(format!("decode {i}: turns still running"));
            }
            if w.reservations() != (0, 0) {
                problems.push(format!(
                    "decode {i}: reservations pending {:?}",
                    w.reservations()
                ));
            }
            if w.pushes_in_flight > 0 || !w.push_queue.is_empty() {
                problems.push(format!("decode {i}: pushes pending"));
            }
        }
        if self.prefill.in_flight() != (0, false, 0) {
            problems.push(format!(
                "prefill: work pending {:?}",
                self.prefill.in_flight()
            ));
        }
        let st = &self.prefill.store;
        if st.pending_reservations() > 0 || st.waiting_reservations() > 0 || st.pins() > 0 {
            problems.push(format!(
                "snapshot store: {} reservations, {} waiting, {} pins",
                st.pending_reservations(),
                st.waiting_reservations(),
                st.pins()
            ));
        }
        if let Some(r) = self.reqs.iter().find(|r| r.done.is_none()) {
            problems.push(format!("request {} never finished", r.request.id));
        }
        problems.extend(self.anomalies.iter().cloned());
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }

    fn finish(self) -> RunOutput {
        let check = self.check();
        let records: Vec<RequestRecord> = self
            .reqs
            .iter()
            .map(|r| {
                let sent = r.sent.unwrap_or(r.request.arrival);
                RequestRecord {
                    request_id: r.request.id.0,
                    session: self.sessions[r.session].id.0,
                    turn: r.turn,
                    execution_mode: r.mode,
                    reseed_cause: r.cause,
                    decode_worker: r.decode.map(|(d, _)| d as u32),
                    sent_ms: ms(sent - Instant::ZERO),
                    ttft_ms: r
                        .first_token
                        .filter(|_| r.failed.is_none())
                        .map(|t| ms(t - sent)),
                    e2e_ms: r.done.filter(|_| r.failed.is_none()).map(|t| ms(t - sent)),
                    input_tokens: u64::from(r.request.prompt_tokens),
                    output_tokens: u64::from(r.request.max_output_tokens),
                    prefill_tokens_computed: r.prefill_computed,
                    append_tokens_computed: r.append_computed,
                    d_to_p_snapshot_used: r.snapshot_used,
                    d_to_p_snapshot_age_s: r.snapshot_age.map(|a| a.as_secs_f64()),
                    d_to_p_push_count_during_session: r.push_count,
                    bypass_miss_reason: r.miss,
                    failed: r.failed,
                }
            })
            .collect();
        let st = &self.stats;
        let mut summary = RunSummary {
            label: self.label.clone(),
            mode: self.cfg.mode.name().to_string(),
            d_to_p_sync: self.cfg.sync_active(),
            bypass: self.cfg.sync_active() && self.cfg.sync.bypass,
            pushes_enqueued: st.pushes_enqueued,
            pushes_started: st.pushes_started,
            pushes_sent: st.pushes_sent,
            pushes_failed: st.pushes_failed,
            pushes_retried: st.pushes_retried,
            pushes_dropped: self.decodes.iter().map(|d| d.pushes_dropped).sum(),
            push_failures: st.push_failures.clone(),
            push_bytes: st.push_bytes,
            bypass_hits: st.bypass_hits,
            bypass_misses: st.bypass_misses.clone(),
            snapshot_evictions: st.evictions.clone(),
            double_pushes: st.double_pushes,
            slot_evictions: st.slot_evictions,
            ledger_opened: self.ledger.opened(),
            ledger_ended: self.ledger.ended(),
            drained: check.is_ok(),
            ..RunSummary::default()
        };
        summary.fill_from_records(&records);
        RunOutput {
            records,
            summary,
            log: self.log.into_lines(),
            check,
        }
    }
}

/// Runs `cfg` over `items` under `label`.
pub fn simulate(cfg: KvcConfig, items: &[TraceItem], label: &str) -> Result<RunOutput, String> {
    Ok(Simulation::new(cfg, items)?.with_label(label).run())
}
