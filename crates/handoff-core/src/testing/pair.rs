//! [`PairSim`]: see the module docs of [`crate::testing`].

use super::FakeCore;
use crate::{
    Backend, CancelReason, Duration, Generation, HandoffConfig, HandoffId, HandoffIdGen,
    HandoffMsg, HandoffPolicy, Instant, LifecycleEvent, Request, RequestId, Rng, RoleState,
    SourceReady, Transition, Worker, WorkerEvent, WorkerId, WorkerRequest,
};
use std::collections::{BTreeMap, BTreeSet};

/// The prefill worker.
pub const SOURCE: WorkerId = WorkerId(0);
/// The decode worker.
pub const DEST: WorkerId = WorkerId(1);

/// What the pair runs and how the channel misbehaves.
#[derive(Clone, Debug)]
pub struct PairConfig {
    /// Handoff ordering.
    pub policy: HandoffPolicy,
    /// Seed of every random choice.
    pub seed: u64,
    /// Percent of messages dropped.
    pub drop_pct: u64,
    /// Percent of messages delivered twice.
    pub dup_pct: u64,
    /// Upper bound of a message's random delay.
    pub max_delay: Duration,
    /// Percent of transfers that fail.
    pub transfer_fail_pct: u64,
    /// Requests (arriving 3 ms apart).
    pub requests: u64,
    /// Blocks of the decode worker (a request needs 5).
    pub decode_blocks: u64,
    /// Time a transfer takes (plus up to 5 ms random when `max_delay > 0`).
    pub transfer_time: Duration,
    /// Source lease lifetime.
    pub lease_ttl: Duration,
    /// Destination reservation lifetime.
    pub reservation_ttl: Duration,
    /// Lease renewal by a waiting destination (`HandoffConfig::renew_source_lease`).
    pub renew: Option<Duration>,
}

impl Default for PairConfig {
    fn default() -> Self {
        PairConfig {
            policy: HandoffPolicy::SourceFirst,
            seed: 1,
            drop_pct: 0,
            dup_pct: 0,
            max_delay: Duration::ZERO,
            transfer_fail_pct: 0,
            requests: 1,
            decode_blocks: 64,
            transfer_time: Duration::from_millis(2),
            lease_ttl: Duration::from_secs(10),
            reservation_ttl: Duration::from_secs(20),
            renew: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Arrive(u64),
    Deliver {
        to: WorkerId,
        from: WorkerId,
        slot: usize,
        generation: Generation,
    },
    TransferDone {
        at: WorkerId,
        id: HandoffId,
        ok: bool,
    },
    Step(WorkerId),
    Timeout(WorkerId),
    RouteDest {
        id: HandoffId,
        req: u64,
        ready: Option<(u64, u64)>,
    },
}

/// Two workers and a faulty channel on a virtual clock.
pub struct PairSim {
    now: Instant,
    queue: BTreeSet<(Instant, u64, Ev)>,
    seq: u64,
    msgs: Vec<HandoffMsg>,
    workers: BTreeMap<WorkerId, Worker<FakeCore>>,
    busy: BTreeMap<WorkerId, bool>,
    rng: Rng,
    cfg: PairConfig,
    link_up: bool,
    ids: BTreeMap<u64, HandoffId>,
    /// Every transition, as `worker role event from -> to delta`, in order.
    pub log: Vec<String>,
    /// The same transitions as `log`, typed, for predicates.
    pub transitions: Vec<Transition>,
    /// Every message ever sent (for late re-delivery tests).
    pub sent: Vec<(WorkerId, WorkerId, HandoffMsg)>,
    /// Transfers started and not yet completed.
    pub transfers_in_flight: u64,
}

fn request(i: u64) -> Request {
    Request {
        id: RequestId(i),
        prompt_tokens: 64,
        max_output_tokens: 3,
        prefix_hashes: vec![i],
        hash_block_tokens: 512,
        session: None,
        arrival: Instant::ZERO,
    }
}

impl PairSim {
    /// A pair ready to run `cfg`.
    pub fn new(cfg: PairConfig) -> PairSim {
        let mut s = PairSim {
            now: Instant::ZERO,
            queue: BTreeSet::new(),
            seq: 0,
            msgs: Vec::new(),
            workers: BTreeMap::new(),
            busy: BTreeMap::new(),
            rng: Rng::seeded(cfg.seed),
            link_up: true,
            ids: BTreeMap::new(),
            log: Vec::new(),
            transitions: Vec::new(),
            sent: Vec::new(),
            transfers_in_flight: 0,
            cfg,
        };
        for w in [SOURCE, DEST] {
            let worker = Worker::new(
                w,
                Generation(0),
                s.cfg.policy,
                s.handoff_config(),
                s.core(w),
            );
            s.workers.insert(w, worker);
        }
        let mut gen = HandoffIdGen::new(WorkerId(99), Generation(0));
        for i in 0..s.cfg.requests {
            s.ids.insert(i, gen.next_id());
            s.at(Instant::from_millis(i * 3), Ev::Arrive(i));
        }
        s
    }

    fn handoff_config(&self) -> HandoffConfig {
        HandoffConfig {
            reservation_ttl: self.cfg.reservation_ttl,
            early_fact_ttl: Duration::from_secs(5),
            renew_source_lease: self.cfg.renew,
            tombstones: 1024,
        }
    }

    fn core(&self, w: WorkerId) -> FakeCore {
        let backend = if self.cfg.policy == HandoffPolicy::SourceFirst {
            Backend::Vllm
        } else {
            Backend::Sglang
        };
        let blocks = if w == DEST {
            self.cfg.decode_blocks
        } else {
            64
        };
        FakeCore::new(backend, blocks, 16).with_lease_ttl(self.cfg.lease_ttl)
    }

    /// The worker `w`.
    pub fn worker(&self, w: WorkerId) -> &Worker<FakeCore> {
        &self.workers[&w]
    }

    /// The handoff id of request `i`.
    pub fn id_of(&self, i: u64) -> HandoffId {
        self.ids[&i]
    }

    /// Virtual time now.
    pub fn now(&self) -> Instant {
        self.now
    }

    fn at(&mut self, t: Instant, ev: Ev) {
        self.seq += 1;
        self.queue.insert((t.max(self.now), self.seq, ev));
    }

    fn jitter(&mut self, max: Duration) -> Duration {
        let ns = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        if ns == 0 {
            Duration::ZERO
        } else {
            Duration::from_nanos(self.rng.below(ns + 1))
        }
    }

    fn collect(&mut self, w: WorkerId) {
        let generation = self.workers[&w].generation();
        while let Some(t) = self.workers.get_mut(&w).and_then(|x| x.poll_transmit()) {
            self.sent.push((w, t.to, t.msg));
            if !self.link_up || self.rng.below(100) < self.cfg.drop_pct {
                continue;
            }
            let copies = if self.rng.below(100) < self.cfg.dup_pct {
                2
            } else {
                1
            };
            for _ in 0..copies {
                self.msgs.push(t.msg);
                let slot = self.msgs.len() - 1;
                let d = self.jitter(self.cfg.max_delay);
                self.at(
                    t.at + d,
                    Ev::Deliver {
                        to: t.to,
                        from: w,
                        slot,
                        generation,
                    },
                );
            }
        }
        while let Some(e) = self.workers.get_mut(&w).and_then(|x| x.poll_event()) {
            match e {
                WorkerEvent::StartTransfer { id, at, .. } => {
                    let ok = self.rng.below(100) >= self.cfg.transfer_fail_pct;
                    let extra = if self.cfg.max_delay > Duration::ZERO {
                        self.jitter(Duration::from_millis(5))
                    } else {
                        Duration::ZERO
                    };
                    self.transfers_in_flight += 1;
                    self.at(
                        at + self.cfg.transfer_time + extra,
                        Ev::TransferDone { at: w, id, ok },
                    );
                }
                WorkerEvent::PrefillPinned {
                    id,
                    request,
                    blocks,
                    tokens,
                    at,
                } if self.cfg.policy == HandoffPolicy::SourceFirst => {
                    let d = self.jitter(Duration::from_millis(2));
                    self.at(
                        at + d,
                        Ev::RouteDest {
                            id,
                            req: request.0,
                            ready: Some((blocks, tokens)),
                        },
                    );
                }
                WorkerEvent::Transition(t) => {
                    self.log.push(format!(
                        "{} {:?} {} {} -> {} {}",
                        t.worker, t.role, t.event, t.from, t.to, t.delta
                    ));
                    self.transitions.push(t);
                }
                _ => {}
            }
        }
        if let Some(t) = self.workers[&w].poll_timeout() {
            let t = t.max(self.now);
            self.at(t, Ev::Timeout(w));
        }
        if !self.busy.get(&w).copied().unwrap_or(false) && !self.workers[&w].is_empty() {
            self.busy.insert(w, true);
            let now = self.now;
            self.at(now, Ev::Step(w));
        }
    }

    /// Handles the next event; `false` when none is left.
    pub fn step_event(&mut self) -> bool {
        let Some((t, s, ev)) = self.queue.first().copied() else {
            return false;
        };
        self.queue.remove(&(t, s, ev));
        self.now = self.now.max(t);
        let now = self.now;
        let touched = match ev {
            Ev::Arrive(i) => {
                let id = self.ids[&i];
                let req = WorkerRequest::HandoffSource {
                    id,
                    request: request(i),
                };
                let _ = self
                    .workers
                    .get_mut(&SOURCE)
                    .map(|w| w.handle_request(req, now));
                if self.cfg.policy == HandoffPolicy::DestinationFirst {
                    // The frontend books the decode worker at arrival; its
                    // request takes a hop to get there.
                    self.at(
                        now + Duration::from_micros(100),
                        Ev::RouteDest {
                            id,
                            req: i,
                            ready: None,
                        },
                    );
                }
                SOURCE
            }
            Ev::RouteDest { id, req, ready } => {
                let r = WorkerRequest::HandoffDestination {
                    id,
                    request: request(req),
                    source: SOURCE,
                    ready: ready.map(|(blocks, tokens)| SourceReady { blocks, tokens }),
                };
                let _ = self
                    .workers
                    .get_mut(&DEST)
                    .map(|w| w.handle_request(r, now));
                DEST
            }
            Ev::Deliver {
                to,
                from,
                slot,
                generation,
            } => {
                // A message from an incarnation that has since restarted was
                // lost with it; so is anything on a cut link.
                if self.link_up && self.workers[&from].generation() == generation {
                    let msg = self.msgs[slot];
                    if let Some(w) = self.workers.get_mut(&to) {
                        w.handle_message(from, msg, now);
                    }
                }
                to
            }
            Ev::TransferDone { at, id, ok } => {
                self.transfers_in_flight = self.transfers_in_flight.saturating_sub(1);
                let ok = ok && self.link_up;
                if let Some(w) = self.workers.get_mut(&at) {
                    w.handle_transfer_done(id, ok, now);
                }
                at
            }
            Ev::Step(w) => {
                self.busy.insert(w, false);
                if let Some(end) = self.workers.get_mut(&w).and_then(|x| x.step(now, now)) {
                    self.busy.insert(w, true);
                    self.at(end, Ev::Step(w));
                }
                w
            }
            Ev::Timeout(w) => {
                if let Some(x) = self.workers.get_mut(&w) {
                    x.handle_timeout(now);
                }
                w
            }
        };
        self.collect(touched);
        let other = if touched == SOURCE { DEST } else { SOURCE };
        self.collect(other);
        true
    }

    /// Runs until `stop` holds after an event (true) or nothing is left (false).
    pub fn run_until(&mut self, mut stop: impl FnMut(&PairSim) -> bool) -> bool {
        let mut guard = 0u64;
        while self.step_event() {
            guard += 1;
            assert!(guard < 1_000_000, "pair simulation does not converge");
            if stop(self) {
                return true;
            }
        }
        false
    }

    /// Runs until no event is left.
    pub fn run(&mut self) {
        self.run_until(|_| false);
    }

    /// Whether some transition so far satisfies `pred`.
    pub fn saw(&self, pred: impl Fn(&Transition) -> bool) -> bool {
        self.transitions.iter().any(pred)
    }

    /// Whether some transition so far was caused by `event`. Source roles
    /// live on [`SOURCE`] and destination roles on [`DEST`], so the event's
    /// role also names the worker.
    pub fn saw_event(&self, event: impl Into<LifecycleEvent>) -> bool {
        let event = event.into();
        self.saw(|t| t.event == event)
    }

    /// Whether `event` moved some role from `from` to `to`.
    pub fn saw_move(
        &self,
        event: impl Into<LifecycleEvent>,
        from: impl Into<RoleState>,
        to: impl Into<RoleState>,
    ) -> bool {
        let (event, from, to) = (event.into(), from.into(), to.into());
        self.saw(|t| t.event == event && t.from == from && t.to == to)
    }

    /// The frontend aborts request `i` on both workers.
    pub fn cancel(&mut self, i: u64) {
        let id = self.ids[&i];
        let now = self.now;
        for w in [SOURCE, DEST] {
            if let Some(x) = self.workers.get_mut(&w) {
                x.cancel(id, CancelReason::Client, now);
            }
            self.collect(w);
        }
    }

    /// Cuts the channel for good: in-flight and future messages are lost,
    /// and each side learns that its peer is gone.
    pub fn lose_link(&mut self) {
        self.link_up = false;
        let now = self.now;
        for (w, peer) in [(SOURCE, DEST), (DEST, SOURCE)] {
            if let Some(x) = self.workers.get_mut(&w) {
                x.handle_peer_lost(peer, now);
            }
            self.collect(w);
        }
    }

    /// Restarts worker `w` with an empty core and the next generation; its
    /// peer learns the new generation (as from a transport hello).
    pub fn restart(&mut self, w: WorkerId) {
        let now = self.now;
        let core = self.core(w);
        let peer = if w == SOURCE { DEST } else { SOURCE };
        let mut gen = Generation(0);
        if let Some(x) = self.workers.get_mut(&w) {
            x.restart(core, now);
            gen = x.generation();
        }
        self.collect(w);
        if let Some(x) = self.workers.get_mut(&peer) {
            x.handle_peer_generation(w, gen, now);
        }
        self.collect(peer);
    }

    /// Re-delivers every message ever sent, late, to its addressee.
    pub fn redeliver_all_late(&mut self) {
        let now = self.now;
        let sent = std::mem::take(&mut self.sent);
        for (from, to, msg) in &sent {
            if let Some(x) = self.workers.get_mut(to) {
                x.handle_message(*from, *msg, now);
            }
        }
        self.sent = sent;
        for w in [SOURCE, DEST] {
            self.collect(w);
        }
    }

    /// Both workers drained and every lease and reservation their cores
    /// opened ended exactly once.
    pub fn check_drained(&self) -> Result<(), String> {
        for (w, worker) in &self.workers {
            if !worker.is_drained() {
                return Err(format!(
                    "worker {w} not drained; log:\n{}",
                    self.log.join("\n")
                ));
            }
            worker
                .core()
                .ledger()
                .check_drained()
                .map_err(|e| format!("worker {w}: {e}"))?;
            if worker.capacity().kv_used_blocks() != 0 {
                return Err(format!("worker {w} still uses blocks"));
            }
        }
        Ok(())
    }
}
