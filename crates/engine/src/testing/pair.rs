//! [`PairSim`]: see the module docs of [`crate::testing`].
//!
//! The pair is a configuration of the one [`Engine`]: two
//! [`LocalHosts`] (a prefill [`SOURCE`] and a decode [`DEST`]) and a
//! private [`Director`] that sends the requests, routes the destinations
//! and records what happens. The channel's misbehaviour is the engine's
//! [`FaultPlan`]; the harness's own faults (cancel, lost link, restart,
//! late re-delivery) go in through [`Engine::inject`] and
//! [`Engine::inject_fault`]. So stepping, step ends, timers, fact delivery
//! and transfer timing run through the same code, in the same order of
//! operations, as replay and live.
//!
//! One consequence of that order: a worker's state moves when its step
//! starts, but the step's outputs are held until the step ends. A fault
//! injected in between (including at the step's last instant, before the
//! engine has handled its end) acts on the state after the step, and its
//! own outputs come out first; the log can then show, say, a source
//! cancelled from `Pinned` before the `PrefillPinned` of the step that
//! pinned it.

use crate::fault::{FactFaults, Fault, FaultCounts, FaultPlan};
use crate::transfer::TransferModel;
use crate::{Director, Engine, EngineConfig, LocalHosts, Route};
use handoff_core::host::{HostFinal, HostInput, WorkerHost};
use handoff_core::testing::FakeCore;
use handoff_core::{
    Backend, CancelReason, Duration, Generation, HandoffConfig, HandoffId, HandoffIdGen,
    HandoffMsg, HandoffPolicy, Instant, LifecycleEvent, Request, RequestId, Rng, RoleState,
    SourceReady, Transition, Worker, WorkerEvent, WorkerId, WorkerRequest,
};

/// The prefill worker.
pub const SOURCE: WorkerId = WorkerId(0);
/// The decode worker.
pub const DEST: WorkerId = WorkerId(1);

/// Milliseconds between two arrivals.
const ARRIVAL_GAP_MS: u64 = 3;
/// Destination-first: the frontend books the decode worker at arrival; its
/// request takes this hop to get there.
const BOOKING_HOP: Duration = Duration::from_micros(100);
/// Source-first: the frontend routes the destination within this long
/// (uniform, seeded) of the source reporting its pinned prefill.
const ROUTE_JITTER: Duration = Duration::from_millis(2);
/// One-way latency of every fact before any extra delay the fault plan adds:
/// none, so `max_delay` bounds a fact's whole time in flight. A fact sent at
/// an instant is still observably in flight, because [`PairSim::step_event`]
/// runs one engine event at a time and its delivery is a later event of
/// that instant.
const FACT_LATENCY: Duration = Duration::ZERO;
/// Mixed into the seed for the director's routing jitter, so it never
/// shares random values with the fault injector's streams.
const ROUTE_STREAM: u64 = 0x726f_7574_6520_6a69;
/// Most units of engine work a run may take before the harness calls it
/// stuck.
const MAX_UNITS: u64 = 1_000_000;

/// What the pair runs and how the channel misbehaves.
#[derive(Clone, Debug)]
pub struct PairConfig {
    /// Handoff ordering.
    pub policy: HandoffPolicy,
    /// Seed of every random choice (the fault plan's seed; the routing
    /// jitter uses a stream mixed from it).
    pub seed: u64,
    /// Percent of facts dropped.
    pub drop_pct: u64,
    /// Percent of facts (not dropped) delivered twice.
    pub dup_pct: u64,
    /// Upper bound of the extra random delay every delivered copy of a fact
    /// gets (uniform in `[1ns, max_delay]`, each copy on its own, so copies
    /// reorder); zero for none.
    pub max_delay: Duration,
    /// Percent of transfers that fail.
    pub transfer_fail_pct: u64,
    /// Requests (arriving 3 ms apart).
    pub requests: u64,
    /// Blocks of the decode worker (a request needs 5).
    pub decode_blocks: u64,
    /// Time every transfer takes.
    pub transfer_time: Duration,
    /// Source lease lifetime.
    pub lease_ttl: Duration,
    /// Destination reservation lifetime.
    pub reservation_ttl: Duration,
    /// Lease renewal by a waiting destination (`HandoffConfig::renew_source_lease`).
    pub renew: Option<Duration>,
    /// vLLM's lease heartbeat (`HandoffConfig::heartbeat`).
    pub heartbeat: Option<handoff_core::Heartbeat>,
    /// What a read of released KV does (`HandoffConfig::stale_read`).
    pub stale_read: handoff_core::StaleReadPolicy,
    /// How late each side hears that the other was killed.
    pub peer_loss: crate::fault::PeerLossDetection,
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
            heartbeat: None,
            stale_read: handoff_core::StaleReadPolicy::Complete,
            peer_loss: crate::fault::PeerLossDetection::default(),
        }
    }
}

impl PairConfig {
    fn handoff_config(&self) -> HandoffConfig {
        HandoffConfig {
            reservation_ttl: self.reservation_ttl,
            early_fact_ttl: Duration::from_secs(5),
            renew_source_lease: self.renew,
            tombstones: 1024,
            heartbeat: self.heartbeat,
            stale_read: self.stale_read,
            ..HandoffConfig::default()
        }
    }

    /// A fresh core for worker `w` (at the start, and on every restart).
    fn core(&self, w: WorkerId) -> FakeCore {
        let backend = if self.policy == HandoffPolicy::SourceFirst {
            Backend::Vllm
        } else {
            Backend::Sglang
        };
        let blocks = if w == DEST { self.decode_blocks } else { 64 };
        FakeCore::new(backend, blocks, 16).with_lease_ttl(self.lease_ttl)
    }

    /// The engine settings: the channel and transfer faults as a fault plan,
    /// fixed transfer time, one pass per step.
    fn engine_config(&self) -> EngineConfig {
        let pct = |p: u64| p as f64 / 100.0;
        EngineConfig {
            message_latency: FACT_LATENCY,
            transfer: TransferModel::Fixed(self.transfer_time),
            transfer_fan: Default::default(),
            dp: Default::default(),
            multi_step: false,
            faults: FaultPlan {
                seed: self.seed,
                facts: FactFaults {
                    drop: pct(self.drop_pct),
                    duplicate: pct(self.dup_pct),
                    delay: if self.max_delay > Duration::ZERO {
                        1.0
                    } else {
                        0.0
                    },
                    max_delay: self.max_delay,
                },
                transfer_fail: pct(self.transfer_fail_pct),
                ..FaultPlan::none()
            },
            peer_loss: self.peer_loss.clone(),
        }
    }
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
        lora: None,
    }
}

/// What the director recorded since [`PairSim`] last collected it.
#[derive(Default)]
struct Record {
    log: Vec<String>,
    transitions: Vec<Transition>,
    sent: Vec<(WorkerId, WorkerId, HandoffMsg)>,
    stale_reads: Vec<(HandoffId, bool)>,
}

/// The pair's frontend: sends `requests` requests to [`SOURCE`] 3 ms apart,
/// routes each destination to [`DEST`] (at arrival after a hop, or when the
/// source pinned), and records transitions, facts sent and transfers.
struct PairDirector {
    policy: HandoffPolicy,
    ids: Vec<HandoffId>,
    next: usize,
    rng: Rng,
    new: Record,
    transfers_in_flight: u64,
}

impl PairDirector {
    fn destination(&self, i: u64, ready: Option<SourceReady>) -> WorkerRequest {
        WorkerRequest::HandoffDestination {
            id: self.ids[i as usize],
            request: request(i),
            source: SOURCE,
            ready,
        }
    }
}

impl Director for PairDirector {
    fn next_arrival(&mut self) -> Option<Instant> {
        (self.next < self.ids.len())
            .then(|| Instant::from_millis(ARRIVAL_GAP_MS.saturating_mul(self.next as u64)))
    }

    fn arrive(&mut self, _now: Instant, out: &mut Vec<Route>) {
        let Some(&id) = self.ids.get(self.next) else {
            return;
        };
        let i = self.next as u64;
        self.next += 1;
        out.push(Route {
            to: SOURCE,
            request: WorkerRequest::HandoffSource {
                id,
                request: request(i),
            },
            delay: Duration::ZERO,
        });
        if self.policy == HandoffPolicy::DestinationFirst {
            out.push(Route {
                to: DEST,
                request: self.destination(i, None),
                delay: BOOKING_HOP,
            });
        }
    }

    fn on_event(&mut self, _w: WorkerId, e: &WorkerEvent, _now: Instant, out: &mut Vec<Route>) {
        match e {
            WorkerEvent::Transition(t) => {
                self.new.log.push(format!(
                    "{} {:?} {} {} -> {} {}",
                    t.worker, t.role, t.event, t.from, t.to, t.delta
                ));
                self.new.transitions.push(*t);
            }
            WorkerEvent::StartTransfer { .. } => self.transfers_in_flight += 1,
            WorkerEvent::StaleRead { id, reused, .. } => {
                self.new
                    .log
                    .push(format!("{id} stale read (reused {reused})"));
                self.new.stale_reads.push((*id, *reused));
            }
            WorkerEvent::PrefillPinned {
                request,
                blocks,
                tokens,
                ..
            } if self.policy == HandoffPolicy::SourceFirst => {
                let max = u64::try_from(ROUTE_JITTER.as_nanos()).unwrap_or(u64::MAX);
                let delay = Duration::from_nanos(self.rng.below(max + 1));
                let ready = SourceReady {
                    blocks: *blocks,
                    tokens: *tokens,
                };
                out.push(Route {
                    to: DEST,
                    request: self.destination(request.0, Some(ready)),
                    delay,
                });
            }
            _ => {}
        }
    }

    fn on_transmit(&mut self, from: WorkerId, to: WorkerId, msg: &HandoffMsg, _now: Instant) {
        self.new.sent.push((from, to, *msg));
    }

    fn on_transfer_done(&mut self, _id: HandoffId, _ok: bool, _now: Instant) {
        self.transfers_in_flight = self.transfers_in_flight.saturating_sub(1);
    }

    fn finish(&mut self, _end: Instant, _: &[HostFinal], _torn_down: u64, _: FaultCounts) {
        // The harness never ends the engine: `check_drained` must see what
        // is left, not what a final teardown would leave.
    }
}

/// Two workers and a faulty channel on a virtual clock: the [`Engine`] with
/// local hosts and the pair's director.
pub struct PairSim {
    engine: Engine<LocalHosts<'static, FakeCore>, PairDirector>,
    units: u64,
    /// Every transition, as `worker role event from -> to delta`, in order.
    pub log: Vec<String>,
    /// The same transitions as `log`, typed, for predicates.
    pub transitions: Vec<Transition>,
    /// Every fact ever sent (before the channel decided its fate), as
    /// `(from, to, fact)`, for late re-delivery tests.
    pub sent: Vec<(WorkerId, WorkerId, HandoffMsg)>,
    /// Transfers the engine started and has not yet completed (or failed).
    pub transfers_in_flight: u64,
    /// Destinations that activated from a read of released KV, with
    /// whether a block had been reused.
    pub stale_reads: Vec<(HandoffId, bool)>,
}

impl PairSim {
    /// A pair ready to run `cfg`.
    pub fn new(cfg: PairConfig) -> PairSim {
        let hosts = [SOURCE, DEST]
            .map(|w| {
                WorkerHost::new(Worker::new(
                    w,
                    Generation(0),
                    cfg.policy,
                    cfg.handoff_config(),
                    cfg.core(w),
                ))
            })
            .into();
        let for_restarts = cfg.clone();
        let port = LocalHosts::new(hosts, move |w| for_restarts.core(w));
        let mut gen = HandoffIdGen::new(WorkerId(99), Generation(0));
        let director = PairDirector {
            policy: cfg.policy,
            ids: (0..cfg.requests).map(|_| gen.next_id()).collect(),
            next: 0,
            rng: Rng::seeded(cfg.seed ^ ROUTE_STREAM),
            new: Record::default(),
            transfers_in_flight: 0,
        };
        PairSim {
            engine: Engine::new(cfg.engine_config(), port, director),
            units: 0,
            log: Vec::new(),
            transitions: Vec::new(),
            sent: Vec::new(),
            transfers_in_flight: 0,
            stale_reads: Vec::new(),
        }
    }

    /// The worker `w`.
    pub fn worker(&self, w: WorkerId) -> &Worker<FakeCore> {
        self.engine.port().hosts()[w.0 as usize].worker()
    }

    /// The handoff id of request `i`.
    pub fn id_of(&self, i: u64) -> HandoffId {
        self.engine.director().ids[i as usize]
    }

    /// Virtual time now: the instant whose events are being handled (after
    /// the last event of an instant, the next instant, none of whose events
    /// has run yet).
    pub fn now(&self) -> Instant {
        self.engine.now()
    }

    /// Moves what the director recorded into the public fields.
    fn collect(&mut self) {
        let d = self.engine.director_mut();
        let new = std::mem::take(&mut d.new);
        self.transfers_in_flight = d.transfers_in_flight;
        self.log.extend(new.log);
        self.transitions.extend(new.transitions);
        self.sent.extend(new.sent);
        self.stale_reads.extend(new.stale_reads);
    }

    /// Does the next single unit of engine work ([`Engine::run_event`]):
    /// one due event (an arrival, a request reaching its worker, a fact, a
    /// transfer completion, a step end or timer), or the steps of the
    /// workers that want to, or a move of the clock; `false` when nothing is
    /// left. Stopping between two calls is how a test reaches a lifecycle
    /// phase.
    pub fn step_event(&mut self) -> bool {
        self.units += 1;
        assert!(self.units < MAX_UNITS, "pair simulation does not converge");
        let more = self.engine.run_event();
        self.collect();
        more
    }

    /// Runs until `stop` holds after a unit of work (true) or nothing is
    /// left (false).
    pub fn run_until(&mut self, mut stop: impl FnMut(&PairSim) -> bool) -> bool {
        while self.step_event() {
            if stop(self) {
                return true;
            }
        }
        false
    }

    /// Runs until nothing is left to happen. The engine is not finished, so
    /// the sim can be driven further (a late re-delivery, say) and
    /// [`PairSim::check_drained`] sees the workers as the run left them.
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

    /// The frontend aborts request `i` on both workers, now.
    pub fn cancel(&mut self, i: u64) {
        let id = self.id_of(i);
        for w in [SOURCE, DEST] {
            self.engine.inject(
                w,
                HostInput::Cancel {
                    id,
                    reason: CancelReason::Client,
                },
            );
        }
        self.collect();
    }

    /// Cuts the channel for good: every fact sent from now on is lost (an
    /// endless partition), and each side learns that its peer is gone.
    /// Facts already in flight still arrive (the engine's partitions cut
    /// facts by when they are sent) and transfers under way still complete.
    /// A source that had not yet heard from its destination when told the
    /// link was lost did not end on it, and still accepts such a fact.
    pub fn lose_link(&mut self) {
        self.engine.inject_fault(Fault::Partition {
            a: SOURCE,
            b: DEST,
            until: Instant::MAX,
        });
        for (w, peer) in [(SOURCE, DEST), (DEST, SOURCE)] {
            self.engine.inject(w, HostInput::PeerLost(peer));
        }
        self.collect();
    }

    /// Kills worker `w` now (the engine's [`Fault::Kill`]); its peer hears
    /// of it as [`PairConfig::peer_loss`] says.
    pub fn kill(&mut self, w: WorkerId) {
        self.engine.inject_fault(Fault::Kill { worker: w });
        self.collect();
    }

    /// Restarts worker `w` now with an empty core and the next generation
    /// (the engine's [`Fault::Restart`]); its peer learns the new
    /// generation, as from a transport hello.
    pub fn restart(&mut self, w: WorkerId) {
        self.engine.inject_fault(Fault::Restart { worker: w });
        self.collect();
    }

    /// Re-delivers every fact ever sent (including those the channel lost),
    /// now, to its addressee.
    pub fn redeliver_all_late(&mut self) {
        let sent = self.sent.clone();
        for (from, to, msg) in sent {
            self.engine.inject(to, HostInput::Message { from, msg });
        }
        self.collect();
    }

    /// Both workers drained (no step or output held back either) and every
    /// lease and reservation their cores opened ended exactly once.
    pub fn check_drained(&self) -> Result<(), DrainError> {
        for host in self.engine.port().hosts() {
            let worker = host.id();
            let w = host.worker();
            if !host.is_drained() {
                return Err(DrainError::NotDrained {
                    worker,
                    log: self.log.join("\n"),
                });
            }
            w.core()
                .ledger()
                .check_drained()
                .map_err(|error| DrainError::Ledger { worker, error })?;
            if w.capacity().kv_used_blocks() != 0 {
                return Err(DrainError::BlocksInUse { worker });
            }
        }
        Ok(())
    }
}

/// Why [`PairSim::check_drained`] failed.
#[derive(Debug)]
pub enum DrainError {
    /// A worker still holds work; the pair's log so far.
    NotDrained {
        /// The worker.
        worker: WorkerId,
        /// Every fact sent, in order.
        log: String,
    },
    /// A lease or reservation did not end exactly once.
    Ledger {
        /// The worker.
        worker: WorkerId,
        /// What its ledger found.
        error: handoff_core::accounting::AccountingError,
    },
    /// A worker drained but still uses KV blocks.
    BlocksInUse {
        /// The worker.
        worker: WorkerId,
    },
}

impl std::fmt::Display for DrainError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DrainError::NotDrained { worker, log } => {
                write!(f, "worker {worker} not drained; log:\n{log}")
            }
            DrainError::Ledger { worker, error } => write!(f, "worker {worker}: {error}"),
            DrainError::BlocksInUse { worker } => write!(f, "worker {worker} still uses blocks"),
        }
    }
}

impl std::error::Error for DrainError {}
