//! The one event-driven engine: a virtual clock, one event queue, worker
//! hosts reached through a [`HostPort`], and a [`Director`] (the frontend:
//! arrivals, routing, recording).
//!
//! Replay, virtual-clock live (hosts on threads over channels, or in
//! processes over TCP), the scenario lab and the lossy-pair harness are all
//! configurations of this loop: they differ only in their `HostPort` (where
//! the hosts run) and their `Director` (what arrives and who records it).
//! Because the loop is the same, its order of operations is the same, and a
//! virtual-clock live run is byte-identical to replay.
//!
//! ## Order of operations
//! Events are ordered by model time, then by the order they were scheduled
//! (a deterministic sequence number). At one instant the engine first
//! handles every event due (arrivals, submissions, facts, transfer
//! completions, host wake-ups at step ends and timers, faults), including
//! those that events at the same instant schedule for it; only then does it
//! step the hosts that want to, in worker-id order. A step's outputs happen
//! at its end.
//!
//! With `multi_step`, the last host to step at an instant gets a horizon,
//! and its step may cover the passes that end by then; every other host
//! gets one pass (a later host's step could end inside the run). The
//! horizon is the next event that is not a wake-up, or an earlier bound
//! from another host, whichever comes first:
//! - a host whose step in progress holds only *quiet* outputs, the events
//!   the director takes in any order among workers' events without
//!   routing on them ([`Director::quiet_events`]: a pass's shape and
//!   tokens, and KV events when no observer keeps their order), bounds the
//!   horizon just before its [`HostPort::quiet_until`]: its step end plus
//!   the core's [`handoff_core::SchedulerCore::quiet_floor`], the time its next
//!   passes are sure to stay quiet if nothing reaches it (asked only while
//!   it is the least bound, and at most once per operation on the host);
//! - any other host bounds it at its next wake-up (a step end or a timer).
//!
//! A run may therefore go past another host's quiet step end. Nothing the
//! run's host does can reach that host before the run ends (its outputs are
//! held), nothing reaches the run's host (every input is an event, and no
//! event but wake-ups comes before the horizon), and the other host's steps
//! up to the horizon release only quiet outputs, which commute with the
//! run's: the report, the transcript and (while a KV sink watches, KV
//! events then not being quiet) the KV event stream are the same as one
//! pass per event (`tests/multi_step_equivalence.rs`). A wake-up that is
//! no host's deadline any more (a timer that already fired) is a no-op and
//! bounds nothing.
//!
//! ## Conservative synchronisation
//! Every effect of one host on another crosses the engine: facts travel with
//! the control-message latency, submissions and transfer completions are
//! scheduled by the engine. A host is therefore only ever asked to act at
//! the instant the engine has reached, which is a safe horizon by
//! construction: nothing earlier can still reach it. Hosts report their next
//! deadline after every operation, and the engine wakes them then. The
//! lookahead between the frontend and a worker is zero (a worker event can
//! cause a submission at the same instant), so grants are instants.

use crate::fault::{FactFate, Fault, FaultCounts, FaultInjector, FaultPlan, TimedFault};
use crate::min_tree::MinTree;
use crate::transfer::{Completion, TransferModel, TransferTimer};
use handoff_core::host::{HostFinal, HostInput, HostOutput, HostStatus};
use handoff_core::ids::{Generation, HandoffId, RequestId, WorkerId};
use handoff_core::msg::HandoffMsg;
use handoff_core::time::{Duration, Instant};
use handoff_core::worker::{RequestError, WorkerEvent, WorkerRequest};
use std::collections::BinaryHeap;

/// What the engine asks of a host.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum HostOp {
    /// [`handoff_core::WorkerHost::deliver`].
    Deliver {
        /// The input.
        input: HostInput,
        /// Model time.
        now: Instant,
    },
    /// [`handoff_core::WorkerHost::advance`].
    Advance {
        /// Model time.
        now: Instant,
    },
    /// [`handoff_core::WorkerHost::step`].
    Step {
        /// Model time.
        now: Instant,
        /// Passes starting before this may be folded into the step.
        horizon: Instant,
    },
    /// [`handoff_core::WorkerHost::teardown`] (end of run, or a kill).
    Teardown {
        /// Model time.
        now: Instant,
    },
    /// [`handoff_core::WorkerHost::restart`] with a fresh core.
    Restart {
        /// Model time.
        now: Instant,
    },
}

/// Where the hosts run: in this thread, on threads behind channels, or in
/// other processes. An implementation performs one operation on one host and
/// returns its outputs in order; it does not interpret them.
pub trait HostPort {
    /// Number of hosts; their ids are `0..hosts()`.
    fn hosts(&self) -> u32;

    /// Performs `op` on host `w`, appends the outputs it released to `out`
    /// and returns the host's status afterwards.
    fn call(&mut self, w: WorkerId, op: HostOp, out: &mut Vec<HostOutput>) -> HostStatus;

    /// Takes back an event of host `w` that the engine has consumed, for its
    /// buffers ([`handoff_core::Worker::recycle`]). A port whose hosts are remote
    /// has nothing to give them back to and drops it.
    fn recycle(&mut self, w: WorkerId, event: WorkerEvent) {
        let _ = (w, event);
    }

    /// [`handoff_core::WorkerHost::quiet_until`] of host `w` (with `kv`, KV events
    /// count as quiet), as of its last operation. Asked only when a
    /// multi-pass horizon could use it, so it costs nothing at a step that
    /// cannot. A port whose hosts are remote answers `None` (the default):
    /// a round trip would cost more than the passes it saves.
    fn quiet_until(&mut self, w: WorkerId, kv: bool) -> Option<Instant> {
        let _ = (w, kv);
        None
    }

    /// Every host's final state, in id order.
    fn finals(&mut self) -> Vec<HostFinal>;
}

/// A request the director wants delivered to a worker after `delay`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The worker.
    pub to: WorkerId,
    /// The work.
    pub request: WorkerRequest,
    /// How long after now it arrives.
    pub delay: Duration,
}

/// Why a request reached no worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Undeliverable {
    /// The worker it was routed to is down (killed, not yet restarted).
    WorkerDown,
    /// The worker it was routed to died while it was on its way and is back
    /// as a new incarnation: the request was lost with the old one's
    /// connection, as a fact in flight is.
    WorkerRestarted,
}

/// The frontend side of a run: what arrives, where it goes, and what is
/// recorded. The engine calls it at the model time of each happening.
pub trait Director {
    /// When the next request arrives, if one does.
    fn next_arrival(&mut self) -> Option<Instant>;

    /// Takes the arrival due at `now` and routes it.
    fn arrive(&mut self, now: Instant, out: &mut Vec<Route>);

    /// A worker event, at the model time it happened. Transfer requests
    /// (`StartTransfer`) come here too; the engine times them.
    fn on_event(&mut self, w: WorkerId, e: &WorkerEvent, now: Instant, out: &mut Vec<Route>);

    /// A fact left worker `from` for `to` (before the fault plan decides
    /// its fate). For observers and checkers; routing never depends on it.
    fn on_transmit(&mut self, _from: WorkerId, _to: WorkerId, _msg: &HandoffMsg, _now: Instant) {}

    /// A worker refused a request.
    fn on_refused(&mut self, _w: WorkerId, _e: RequestError, _now: Instant) {}

    /// A request could not be handed to its worker; the director may route
    /// it (or another attempt of it) elsewhere.
    fn on_undeliverable(
        &mut self,
        _w: WorkerId,
        _request: &WorkerRequest,
        _why: Undeliverable,
        _now: Instant,
        _out: &mut Vec<Route>,
    ) {
    }

    /// A transfer the engine timed finished (`ok`) or failed.
    fn on_transfer_done(&mut self, _id: HandoffId, _ok: bool, _now: Instant) {}

    /// Worker `w` has just died (a kill): route nothing more to it. Called
    /// before what it had done by then (the outputs of a step that ended at
    /// this instant) and its torn-down roles are reported, so that what the
    /// director routes in answer avoids it.
    fn on_worker_down(&mut self, _w: WorkerId, _now: Instant) {}

    /// Worker `w` is down (a kill) and its roles' ends were reported: what
    /// it still held is lost.
    fn on_worker_lost(&mut self, _w: WorkerId, _now: Instant, _out: &mut Vec<Route>) {}

    /// Worker `w` is back as `generation`.
    fn on_worker_back(
        &mut self,
        _w: WorkerId,
        _generation: Generation,
        _now: Instant,
        _out: &mut Vec<Route>,
    ) {
    }

    /// The attempts of `request` to cancel, and where they live.
    fn cancel(&mut self, _request: RequestId, _now: Instant) -> Vec<(WorkerId, HandoffId)> {
        Vec::new()
    }

    /// The run ended at `end`: hosts' final states, roles still alive that
    /// the engine tore down, and the faults injected.
    fn finish(&mut self, end: Instant, finals: &[HostFinal], torn_down: u64, faults: FaultCounts);

    /// Which of worker `w`'s events this director takes in whatever order
    /// they come among other workers' events, without routing on them:
    /// those a run of passes on another host may overtake (module docs).
    /// [`QuietEvents::None`], the default, lets no run overtake anything.
    fn quiet_events(&self, _w: WorkerId) -> QuietEvents {
        QuietEvents::None
    }
}

/// [`Director::quiet_events`]: the events of a worker that commute with any
/// other worker's, for this director.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuietEvents {
    /// None do.
    None,
    /// A pass's shape and tokens (`Step`, `Tokens`).
    Pass,
    /// Those and KV events (`Kv`): nothing keeps the KV event stream's
    /// order across workers, and routing reads it only at events.
    PassAndKv,
}

/// The engine's own settings (the director and hosts carry the rest).
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// One-way latency of a fact between workers.
    pub message_latency: Duration,
    /// How long transfers take.
    pub transfer: TransferModel,
    /// Fold the passes that end by the next event into one step, for the
    /// last host stepping at an instant (off: one pass per step).
    pub multi_step: bool,
    /// Faults to inject.
    pub faults: FaultPlan,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            message_latency: Duration::from_micros(500),
            transfer: TransferModel::default(),
            multi_step: true,
            faults: FaultPlan::none(),
        }
    }
}

/// What one [`Engine::run_event`] did.
enum Unit {
    /// Handled one due event.
    Handled,
    /// Stepped (or found stalled) the hosts that wanted to step.
    Stepped,
    /// Moved the clock to the next instant (`true`), or found nothing left
    /// (`false`).
    Moved(bool),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ev {
    Arrival,
    Submit {
        to: u32,
        slot: u32,
    },
    Deliver {
        to: u32,
        from: u32,
        slot: u32,
    },
    /// A [`Completion`] held in `Engine::completions` (kept out of the
    /// heap: it is 48 bytes, and every event pays for the largest variant
    /// on each sift).
    TransferDone(u32),
    Wake(u32),
    Fault,
}

/// A scheduled event. The queue is a max-heap, so the order is reversed:
/// earliest instant first, then the order of scheduling (`seq` is unique),
/// compared as one 128-bit key. The event itself never takes part (it
/// cannot: `seq` already decides).
#[derive(Clone, Copy, Debug)]
struct Scheduled {
    key: u128,
    ev: Ev,
}

impl Scheduled {
    fn new(at: Instant, seq: u64, ev: Ev) -> Self {
        Scheduled {
            key: (u128::from(at.0) << 64) | u128::from(seq),
            ev,
        }
    }

    fn at(&self) -> Instant {
        Instant((self.key >> 64) as u64)
    }
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for Scheduled {}

impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.key.cmp(&self.key)
    }
}

// The heap moves whole entries on every sift: keep them small.
const _: () = assert!(std::mem::size_of::<Scheduled>() <= 32);

/// Free-list backed slots, so queued payloads are not moved through the heap.
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

struct HostSlot {
    status: HostStatus,
    /// Wake-ups scheduled and not yet popped (a handful at most).
    wakes: Vec<Instant>,
    up: bool,
    generation: Generation,
}

/// See the module docs.
pub struct Engine<P: HostPort, D: Director> {
    cfg: EngineConfig,
    now: Instant,
    seq: u64,
    queue: BinaryHeap<Scheduled>,
    /// The keys of the queued events that are not host wake-ups, so that
    /// the first of them is at hand for a multi-pass horizon. The queue
    /// pops them in key order, so each pop of one pops this heap's first.
    others: BinaryHeap<std::cmp::Reverse<u128>>,
    /// Per host, the latest instant another host's run of passes may end
    /// at without overtaking anything this host does ([`Engine::update`],
    /// [`Engine::horizon`]).
    bounds: MinTree,
    /// Hosts with a step in progress not yet asked whether its end is
    /// quiet since their last operation.
    unasked: Vec<bool>,
    port: P,
    director: D,
    hosts: Vec<HostSlot>,
    msgs: Slots<(HandoffMsg, Instant)>,
    /// Requests on their way, with the incarnation of the worker they were
    /// sent to.
    submits: Slots<(WorkerRequest, Generation)>,
    /// Transfer completions scheduled (current or superseded).
    completions: Slots<Completion>,
    transfers: TransferTimer,
    faults: FaultInjector,
    outs: Vec<HostOutput>,
    routes: Vec<Route>,
    arrival_pending: bool,
    /// Hosts that may want to step, as a bitset by id: set whenever a
    /// status says so, cleared when `step_hosts` finds one that does not.
    /// Each instant then costs the hosts that step, not every host.
    may_step: Vec<u64>,
    /// Hosts whose last status was not drained.
    undrained: usize,
}

impl<P: HostPort, D: Director> Engine<P, D> {
    /// An engine over `port`'s hosts, directed by `director`.
    pub fn new(cfg: EngineConfig, port: P, director: D) -> Self {
        let hosts = (0..port.hosts())
            .map(|_| HostSlot {
                status: HostStatus {
                    drained: true,
                    ..HostStatus::default()
                },
                wakes: Vec::new(),
                up: true,
                generation: Generation(0),
            })
            .collect();
        let mut e = Engine {
            transfers: TransferTimer::new(cfg.transfer),
            faults: FaultInjector::new(cfg.faults.clone()),
            may_step: vec![0; (port.hosts() as usize).div_ceil(64)],
            undrained: 0,
            cfg,
            now: Instant::ZERO,
            seq: 0,
            queue: BinaryHeap::new(),
            others: BinaryHeap::new(),
            bounds: MinTree::new(port.hosts() as usize),
            unasked: vec![false; port.hosts() as usize],
            port,
            director,
            hosts,
            msgs: Slots::default(),
            submits: Slots::default(),
            completions: Slots::default(),
            outs: Vec::new(),
            routes: Vec::new(),
            arrival_pending: false,
        };
        e.schedule_arrival();
        if let Some(t) = e.faults.next_timed() {
            e.at(t, Ev::Fault);
        }
        e.announce_peers();
        e
    }

    /// Tells every host the generation of every other, as transports do in
    /// their hello: a worker that later hears a newer generation of a peer
    /// then voids its attempts with it, even attempts that never got a fact
    /// from that peer (a destination routed with the source's readiness).
    fn announce_peers(&mut self) {
        let n = self.hosts.len() as u32;
        for w in 0..n {
            for p in (0..n).filter(|p| *p != w) {
                let generation = self.hosts[p as usize].generation;
                self.deliver(
                    w,
                    HostInput::PeerGeneration {
                        peer: WorkerId(p),
                        generation,
                    },
                );
            }
        }
    }

    /// The director, for inspection.
    pub fn director(&self) -> &D {
        &self.director
    }

    /// The director, to change what it does next (a harness holding
    /// routing, say).
    pub fn director_mut(&mut self) -> &mut D {
        &mut self.director
    }

    /// The host port, for inspection (local hosts can be looked at).
    pub fn port(&self) -> &P {
        &self.port
    }

    /// Whether worker `w` is up (not killed, or restarted since).
    pub fn is_up(&self, w: WorkerId) -> bool {
        self.hosts.get(w.0 as usize).is_some_and(|h| h.up)
    }

    /// Hands worker `w` an input now, outside the event queue (a harness
    /// re-delivering old facts, or cancelling at a phase it reached).
    pub fn inject(&mut self, w: WorkerId, input: HostInput) {
        if self.is_up(w) {
            self.deliver(w.0, input);
        }
    }

    /// Applies `fault` now, as if the plan had it at this instant. A
    /// `Partition` cuts the link from now until its `until`.
    pub fn inject_fault(&mut self, fault: Fault) {
        if let Fault::Partition { a, b, until } = fault {
            self.faults.cut(a, b, self.now, until);
        }
        self.apply(TimedFault {
            at: self.now,
            fault,
        });
    }

    /// Asks the director again for its next arrival. The engine asks only
    /// when it is built and after each arrival it handles, so a harness that
    /// gives its director a request after the director had run out (the
    /// scenario lab, arriving the next request at a phase it reached) calls
    /// this to have it scheduled. Does nothing while an arrival is already
    /// scheduled: handling that one asks again.
    pub fn arrivals_changed(&mut self) {
        if !self.arrival_pending {
            self.schedule_arrival();
        }
    }

    /// Runs instant by instant until `stop` holds after one (true), or
    /// nothing is left (false). Call [`Engine::run`] afterwards to finish.
    pub fn run_until(&mut self, mut stop: impl FnMut(&Self) -> bool) -> bool {
        while self.run_one() {
            if stop(self) {
                return true;
            }
        }
        stop(self)
    }

    /// The model time reached.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// When the next scheduled event is due, if any: what a wall-clock
    /// driver sleeps until (it may wake earlier for an input it injects).
    pub fn next_event_at(&self) -> Option<Instant> {
        self.queue.peek().map(Scheduled::at)
    }

    /// Runs every instant due at or before `limit`, in the same order as
    /// [`Engine::run_one`], then moves the clock to `limit` without
    /// handling anything later. A wall-clock driver calls it with the wall
    /// clock's model time, so arrivals it injects afterwards (at `limit`)
    /// are never in the engine's past. Nothing is torn down: the run goes on.
    pub fn advance_to(&mut self, limit: Instant) {
        loop {
            match self.unit_until(limit) {
                Unit::Handled | Unit::Stepped => {}
                Unit::Moved(true) => {}
                Unit::Moved(false) => break,
            }
        }
        self.now = self.now.max(limit);
    }

    /// [`Engine::unit`], except that the clock does not move past `limit`
    /// (`Moved(false)`: nothing more is due by then).
    fn unit_until(&mut self, limit: Instant) -> Unit {
        let due = matches!(self.queue.peek(), Some(e) if e.at() <= self.now);
        if due {
            if let Some(e) = self.pop() {
                self.handle(e.ev);
            }
            Unit::Handled
        } else if self.step_hosts() {
            Unit::Stepped
        } else {
            match self.next_event_at() {
                Some(t) if t <= limit => {
                    self.now = self.now.max(t);
                    Unit::Moved(true)
                }
                _ => Unit::Moved(false),
            }
        }
    }

    fn at(&mut self, t: Instant, ev: Ev) {
        self.seq += 1;
        let e = Scheduled::new(t.max(self.now), self.seq, ev);
        if !matches!(ev, Ev::Wake(_)) {
            self.others.push(std::cmp::Reverse(e.key));
        }
        self.queue.push(e);
    }

    /// The next event, off the queue (and off `others` if it is one).
    fn pop(&mut self) -> Option<Scheduled> {
        let e = self.queue.pop()?;
        if !matches!(e.ev, Ev::Wake(_)) {
            let first = self.others.pop();
            debug_assert_eq!(first, Some(std::cmp::Reverse(e.key)));
        }
        Some(e)
    }

    fn at_transfer(&mut self, c: Completion) {
        let at = c.at;
        let slot = self.completions.put(c);
        self.at(at, Ev::TransferDone(slot));
    }

    fn schedule_arrival(&mut self) {
        self.arrival_pending = false;
        if let Some(t) = self.director.next_arrival() {
            self.arrival_pending = true;
            self.at(t, Ev::Arrival);
        }
    }

    /// Runs until nothing is left to happen, then tears down whatever is
    /// still held, hands the director the final states and returns it with
    /// the port.
    pub fn run(mut self) -> (D, P) {
        while self.run_one() {}
        self.finish();
        (self.director, self.port)
    }

    /// Handles the next instant's worth of work, or returns `false` when
    /// nothing is left. Tests use it to stop at a phase.
    pub fn run_one(&mut self) -> bool {
        loop {
            if let Unit::Moved(more) = self.unit() {
                return more;
            }
        }
    }

    /// Does the next single unit of work: handles one event due now, or,
    /// with none due, steps every host that wants to, or, with none wanting
    /// to, moves the clock to the next instant. Returns `false` when nothing
    /// is left. [`Engine::run_one`] is this repeated until the clock moves,
    /// so the order of operations is the same; a harness calling this can
    /// stop between two events of one instant (after a fact is sent and
    /// before it is delivered, or after a request arrives and before its
    /// worker steps).
    pub fn run_event(&mut self) -> bool {
        match self.unit() {
            Unit::Moved(more) => more,
            Unit::Handled | Unit::Stepped => true,
        }
    }

    fn unit(&mut self) -> Unit {
        let due = matches!(self.queue.peek(), Some(e) if e.at() <= self.now);
        if due {
            if let Some(e) = self.pop() {
                self.handle(e.ev);
            }
            Unit::Handled
        } else if self.step_hosts() {
            Unit::Stepped
        } else {
            Unit::Moved(self.next_instant())
        }
    }

    /// Moves the clock to the next event, skipping wake-ups that can no
    /// longer matter (lazily cancelled timers once all work is done).
    fn next_instant(&mut self) -> bool {
        while let Some(e) = self.queue.peek().copied() {
            let (t, ev) = (e.at(), e.ev);
            if let Ev::Wake(w) = ev {
                if !self.arrival_pending
                    && self.faults.next_timed().is_none()
                    && self.undrained == 0
                {
                    self.queue.pop();
                    self.forget_wake(w, t);
                    continue;
                }
            }
            self.now = self.now.max(t);
            return true;
        }
        false
    }

    fn forget_wake(&mut self, w: u32, t: Instant) {
        let wakes = &mut self.hosts[w as usize].wakes;
        if let Some(i) = wakes.iter().position(|x| *x == t) {
            wakes.swap_remove(i);
        }
    }

    /// Steps every host that wants to, in id order. Returns whether any
    /// stepped or stalled (something may now be due at this instant).
    fn step_hosts(&mut self) -> bool {
        let mut any = false;
        let mut next = self.next_stepper(0);
        while let Some(w) = next {
            // Stepping a host changes only its own status (its effects on
            // others are scheduled events), so who steps after it is known
            // before it steps.
            next = self.next_stepper(w + 1);
            any |= self.step_host(w, next.is_none());
        }
        any
    }

    /// The first host from `from` on that wants to step now, dropping from
    /// `may_step` those that no longer do.
    fn next_stepper(&mut self, from: u32) -> Option<u32> {
        let mut word = from as usize / 64;
        let mut bits = self
            .may_step
            .get(word)
            .map_or(0, |b| b & (u64::MAX << (from % 64)));
        loop {
            while bits != 0 {
                let w = (word * 64) as u32 + bits.trailing_zeros();
                bits &= bits - 1;
                let h = &self.hosts[w as usize];
                if h.up && h.status.wants_step {
                    return Some(w);
                }
                self.may_step[word] &= !(1 << (w % 64));
            }
            word += 1;
            bits = *self.may_step.get(word)?;
        }
    }

    /// Steps host `w`, which wants to. Its step may cover several passes
    /// only if nothing it could not overtake happens before they end: it is
    /// the last host stepping at this instant (a later one's step would end
    /// inside the run, releasing outputs a one-pass-per-event run would
    /// have seen after some of this host's passes) and the passes end by
    /// the next event that is not a wake-up and by every host's bound (see
    /// the module docs).
    fn step_host(&mut self, w: u32, last: bool) -> bool {
        let horizon = if self.cfg.multi_step && last {
            self.horizon()
        } else {
            self.now
        };
        let now = self.now;
        self.call(w, HostOp::Step { now, horizon });
        true
    }

    /// How far the last host stepping now may run: to the next event that
    /// is not a wake-up, or to the least host bound before it. The least
    /// bound, while it is a step end not yet asked about, is replaced by
    /// what its host's quiet step end allows (each host is asked at most
    /// once per operation on it: the answer holds until the next).
    fn horizon(&mut self) -> Instant {
        let next = self.others.peek().map_or(u64::MAX, |k| (k.0 >> 64) as u64);
        loop {
            // Mostly the next event comes first: then no host is looked at.
            if self.bounds.min() >= next {
                return Instant(next);
            }
            let (least, h) = self.bounds.min_at();
            if !std::mem::take(&mut self.unasked[h]) {
                return Instant(least);
            }
            let kv = match self.director.quiet_events(WorkerId(h as u32)) {
                QuietEvents::None => return Instant(least),
                QuietEvents::Pass => false,
                QuietEvents::PassAndKv => true,
            };
            // Up to, not including, the instant it could release anything
            // else; a bound that moves no later ends the search here.
            match self.port.quiet_until(WorkerId(h as u32), kv) {
                Some(q) if q.0.saturating_sub(1) > least => {
                    self.bounds.set(h, q.0.saturating_sub(1));
                }
                _ => return Instant(least),
            }
        }
    }

    /// One operation on one host, then its outputs moved on.
    fn call(&mut self, w: u32, op: HostOp) {
        let mut outs = std::mem::take(&mut self.outs);
        let status = self.port.call(WorkerId(w), op, &mut outs);
        self.absorb(w, &mut outs, true);
        self.outs = outs;
        self.update(w, status);
    }

    fn update(&mut self, w: u32, status: HostStatus) {
        // A host bounds runs at its next wake-up, until a horizon that
        // could use more asks whether its step end is quiet
        // (`Engine::horizon`).
        let up = self.hosts[w as usize].up;
        let bound = match status.deadline {
            Some(d) if up => d.0,
            _ => u64::MAX,
        };
        self.bounds.set(w as usize, bound);
        self.unasked[w as usize] = up && status.step_end.is_some();
        let h = &mut self.hosts[w as usize];
        if h.status.drained != status.drained {
            if status.drained {
                self.undrained -= 1;
            } else {
                self.undrained += 1;
            }
        }
        if status.wants_step {
            self.may_step[w as usize / 64] |= 1 << (w % 64);
        }
        h.status = status;
        if let Some(d) = status.deadline {
            if !h.wakes.contains(&d) {
                h.wakes.push(d);
                self.at(d, Ev::Wake(w));
            }
        }
    }

    fn absorb(&mut self, w: u32, outs: &mut Vec<HostOutput>, transmit: bool) {
        let now = self.now;
        let mut routes = std::mem::take(&mut self.routes);
        for o in outs.drain(..) {
            match o {
                HostOutput::Transmit(t) => {
                    if !transmit {
                        continue;
                    }
                    self.director.on_transmit(WorkerId(w), t.to, &t.msg, now);
                    let sent = t.at.max(now);
                    let base = sent + self.cfg.message_latency;
                    match self.faults.fact(WorkerId(w), t.to, sent) {
                        FactFate::Deliver { extra_delay } => {
                            let slot = self.msgs.put((t.msg, sent));
                            self.at(
                                base + extra_delay,
                                Ev::Deliver {
                                    to: t.to.0,
                                    from: w,
                                    slot,
                                },
                            );
                        }
                        FactFate::Drop => {}
                        FactFate::Duplicate {
                            first_extra,
                            second_extra,
                        } => {
                            for extra in [first_extra, second_extra] {
                                let slot = self.msgs.put((t.msg, sent));
                                self.at(
                                    base + extra,
                                    Ev::Deliver {
                                        to: t.to.0,
                                        from: w,
                                        slot,
                                    },
                                );
                            }
                        }
                    }
                }
                HostOutput::Refused(e) => self.director.on_refused(WorkerId(w), e, now),
                HostOutput::Event(e) => {
                    let changed = match e {
                        WorkerEvent::StartTransfer {
                            id,
                            source,
                            destination,
                            tokens,
                            at,
                            ..
                        } => self
                            .transfers
                            .start(id, WorkerId(w), source, destination, tokens, at),
                        WorkerEvent::KvChunkReady {
                            id,
                            source,
                            destination,
                            tokens,
                            at,
                            ..
                        } => {
                            self.transfers
                                .stream(id, WorkerId(w), source, destination, tokens, at)
                        }
                        WorkerEvent::RoleEnded {
                            id,
                            role: handoff_core::msg::Role::Source,
                            at,
                            ..
                        } => self.transfers.abandon(id, at),
                        _ => Vec::new(),
                    };
                    for c in changed {
                        self.at_transfer(c);
                    }
                    self.director.on_event(WorkerId(w), &e, now, &mut routes);
                    // The events whose buffers `Worker::recycle` takes back;
                    // the rest would only be moved there to be dropped.
                    if matches!(
                        e,
                        WorkerEvent::Step { .. }
                            | WorkerEvent::Tokens { .. }
                            | WorkerEvent::Kv { .. }
                    ) {
                        self.port.recycle(WorkerId(w), e);
                    }
                }
            }
        }
        self.route(&mut routes);
        self.routes = routes;
    }

    fn route(&mut self, routes: &mut Vec<Route>) {
        if routes.is_empty() {
            return;
        }
        for r in routes.drain(..) {
            let generation = self
                .hosts
                .get(r.to.0 as usize)
                .map_or(Generation(0), |h| h.generation);
            let slot = self.submits.put((r.request, generation));
            let t = self.now + r.delay;
            self.at(t, Ev::Submit { to: r.to.0, slot });
        }
    }

    fn deliver(&mut self, w: u32, input: HostInput) {
        let now = self.now;
        self.call(w, HostOp::Deliver { input, now });
    }

    fn handle(&mut self, ev: Ev) {
        let now = self.now;
        match ev {
            Ev::Arrival => {
                let mut routes = std::mem::take(&mut self.routes);
                self.director.arrive(now, &mut routes);
                self.route(&mut routes);
                self.routes = routes;
                self.schedule_arrival();
            }
            Ev::Submit { to, slot } => {
                let Some((req, generation)) = self.submits.take(slot) else {
                    return;
                };
                let why = match self.hosts.get(to as usize) {
                    Some(h) if h.up && h.generation == generation => {
                        self.deliver(to, HostInput::Request(req));
                        return;
                    }
                    Some(h) if h.up => Undeliverable::WorkerRestarted,
                    _ => Undeliverable::WorkerDown,
                };
                let mut routes = std::mem::take(&mut self.routes);
                self.director
                    .on_undeliverable(WorkerId(to), &req, why, now, &mut routes);
                self.route(&mut routes);
                self.routes = routes;
            }
            Ev::Deliver { to, from, slot } => {
                let Some((msg, _sent)) = self.msgs.take(slot) else {
                    return;
                };
                // A fact in flight is lost with its sender (a dead process's
                // connection is gone) and with a link cut while it travels;
                // transports never deliver after reporting the peer lost.
                let sender_up = self.hosts.get(from as usize).is_some_and(|h| h.up);
                let cut = self
                    .faults
                    .is_partitioned(WorkerId(from), WorkerId(to), now);
                if sender_up && !cut && self.hosts.get(to as usize).is_some_and(|h| h.up) {
                    self.deliver(
                        to,
                        HostInput::Message {
                            from: WorkerId(from),
                            msg,
                        },
                    );
                }
            }
            Ev::TransferDone(slot) => {
                let Some(c) = self.completions.take(slot) else {
                    return;
                };
                if !self.transfers.is_current(&c) {
                    return;
                }
                if c.drain {
                    for n in self.transfers.reflow(now) {
                        self.at_transfer(n);
                    }
                    return;
                }
                for n in self.transfers.finish(c.id, now) {
                    self.at_transfer(n);
                }
                let ok = self.faults.transfer_ok();
                self.director.on_transfer_done(c.id, ok, now);
                let w = c.owner.0;
                if self.hosts.get(w as usize).is_some_and(|h| h.up) {
                    self.deliver(w, HostInput::TransferDone { id: c.id, ok });
                }
            }
            Ev::Wake(w) => {
                self.forget_wake(w, now);
                if self.hosts[w as usize].up {
                    self.call(w, HostOp::Advance { now });
                }
            }
            Ev::Fault => {
                while let Some(f) = self.faults.pop_due(now) {
                    self.apply(f);
                }
                if let Some(t) = self.faults.next_timed() {
                    self.at(t, Ev::Fault);
                }
            }
        }
    }

    fn apply(&mut self, f: TimedFault) {
        let now = self.now;
        match f.fault {
            Fault::Kill { worker } => self.kill(worker.0),
            Fault::Restart { worker } => {
                let w = worker.0;
                if w as usize >= self.hosts.len() {
                    return;
                }
                // Restarting a worker that is up is a kill, then the restart.
                self.kill(w);
                let mut outs = std::mem::take(&mut self.outs);
                let status = self.port.call(worker, HostOp::Restart { now }, &mut outs);
                // A restarted worker's teardown is local: its peers learn
                // of the new generation, not of its old roles.
                self.absorb(w, &mut outs, false);
                self.outs = outs;
                let h = &mut self.hosts[w as usize];
                h.up = true;
                h.generation = h.generation.next();
                let generation = h.generation;
                self.update(w, status);
                let mut routes = std::mem::take(&mut self.routes);
                self.director
                    .on_worker_back(worker, generation, now, &mut routes);
                self.route(&mut routes);
                self.routes = routes;
                for p in 0..self.hosts.len() as u32 {
                    if p != w && self.hosts[p as usize].up {
                        self.deliver(
                            p,
                            HostInput::PeerGeneration {
                                peer: worker,
                                generation,
                            },
                        );
                    }
                }
            }
            Fault::Partition { .. } => {
                // Applied by the injector to each fact sent while it lasts.
            }
            Fault::Cancel { request } => {
                for (w, id) in self.director.cancel(request, now) {
                    if self.hosts.get(w.0 as usize).is_some_and(|h| h.up) {
                        self.deliver(
                            w.0,
                            HostInput::Cancel {
                                id,
                                reason: handoff_core::transition::CancelReason::Client,
                            },
                        );
                    }
                }
            }
        }
    }

    fn kill(&mut self, w: u32) {
        let now = self.now;
        if !self.hosts.get(w as usize).is_some_and(|h| h.up) {
            return;
        }
        self.hosts[w as usize].up = false;
        // The director hears first that the worker is down, so that
        // whatever it routes again avoids it; then what the worker had done
        // by now and its torn-down roles; then that it is lost.
        self.director.on_worker_down(WorkerId(w), now);
        let mut outs = std::mem::take(&mut self.outs);
        let status = self
            .port
            .call(WorkerId(w), HostOp::Teardown { now }, &mut outs);
        // A dead process sends nothing; its roles are recorded as torn down.
        self.absorb(w, &mut outs, false);
        self.outs = outs;
        self.update(w, status);
        let mut routes = std::mem::take(&mut self.routes);
        self.director.on_worker_lost(WorkerId(w), now, &mut routes);
        self.route(&mut routes);
        self.routes = routes;
        for p in 0..self.hosts.len() as u32 {
            if p != w && self.hosts[p as usize].up {
                self.deliver(p, HostInput::PeerLost(WorkerId(w)));
            }
        }
    }

    fn finish(&mut self) {
        let now = self.now;
        let mut torn_down = 0;
        let finals = self.port.finals();
        for f in &finals {
            let w = f.worker.0;
            if !f.drained && self.hosts.get(w as usize).is_some() {
                torn_down += f.live_handoffs;
                let mut outs = std::mem::take(&mut self.outs);
                let _ = self
                    .port
                    .call(f.worker, HostOp::Teardown { now }, &mut outs);
                self.absorb(w, &mut outs, false);
                self.outs = outs;
            }
        }
        let finals = if torn_down > 0 || finals.iter().any(|f| !f.drained) {
            self.port.finals()
        } else {
            finals
        };
        let counts = self.faults.injected();
        self.director.finish(now, &finals, torn_down, counts);
    }
}

/// Hosts in this thread: the replay's port.
pub struct LocalHosts<'a, S: handoff_core::SchedulerCore> {
    hosts: Vec<handoff_core::host::WorkerHost<S>>,
    make_core: Box<dyn FnMut(WorkerId) -> S + 'a>,
}

impl<'a, S: handoff_core::SchedulerCore> LocalHosts<'a, S> {
    /// Hosts `hosts` (ids in order `0..n`); `make_core` builds a fresh core
    /// for a restarted worker.
    pub fn new(
        hosts: Vec<handoff_core::host::WorkerHost<S>>,
        make_core: impl FnMut(WorkerId) -> S + 'a,
    ) -> Self {
        LocalHosts {
            hosts,
            make_core: Box::new(make_core),
        }
    }

    /// The hosts, for inspection.
    pub fn hosts(&self) -> &[handoff_core::host::WorkerHost<S>] {
        &self.hosts
    }
}

impl<S: handoff_core::SchedulerCore> HostPort for LocalHosts<'_, S> {
    fn hosts(&self) -> u32 {
        self.hosts.len() as u32
    }

    fn call(&mut self, w: WorkerId, op: HostOp, out: &mut Vec<HostOutput>) -> HostStatus {
        let Some(h) = self.hosts.get_mut(w.0 as usize) else {
            return HostStatus::default();
        };
        apply_op(h, op, out, &mut self.make_core);
        h.status()
    }

    fn recycle(&mut self, w: WorkerId, event: WorkerEvent) {
        if let Some(h) = self.hosts.get_mut(w.0 as usize) {
            h.recycle(event);
        }
    }

    fn quiet_until(&mut self, w: WorkerId, kv: bool) -> Option<Instant> {
        self.hosts.get_mut(w.0 as usize)?.quiet_until(kv)
    }

    fn finals(&mut self) -> Vec<HostFinal> {
        self.hosts.iter().map(|h| h.final_state()).collect()
    }
}

/// Performs `op` on `host`: the one interpretation of [`HostOp`], shared by
/// every port (in-thread, and the remote worker side of channel and TCP
/// ports).
pub fn apply_op<S: handoff_core::SchedulerCore>(
    host: &mut handoff_core::host::WorkerHost<S>,
    op: HostOp,
    out: &mut Vec<HostOutput>,
    make_core: &mut dyn FnMut(WorkerId) -> S,
) {
    match op {
        HostOp::Deliver { input, now } => host.deliver(input, now, out),
        HostOp::Advance { now } => host.advance(now, out),
        HostOp::Step { now, horizon } => {
            host.step(now, horizon, out);
        }
        HostOp::Teardown { now } => host.teardown(now, out),
        HostOp::Restart { now } => {
            let core = make_core(host.id());
            host.restart(core, now, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Ev, Instant, Scheduled};
    use proptest::prelude::*;
    use std::collections::BinaryHeap;

    proptest! {
        /// The queue pops by instant, then by scheduling order, whatever
        /// the events: the one-key comparison is the tuple order it
        /// replaced (a reversed `(Instant, seq)`).
        #[test]
        fn the_queue_pops_by_instant_then_seq(
            entries in proptest::collection::vec((0u64..50, 0u32..4), 0..200),
        ) {
            let mut heap = BinaryHeap::new();
            let mut want = Vec::new();
            for (seq, &(t, w)) in entries.iter().enumerate() {
                heap.push(Scheduled::new(Instant(t), seq as u64, Ev::Wake(w)));
                want.push((t, seq as u64, w));
            }
            want.sort();
            let mut got = Vec::new();
            while let Some(e) = heap.pop() {
                let Ev::Wake(w) = e.ev else { unreachable!() };
                got.push((e.at().0, (e.key & u128::from(u64::MAX)) as u64, w));
            }
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn the_latest_instant_survives_the_key() {
        let e = Scheduled::new(Instant::MAX, u64::MAX, Ev::Fault);
        assert_eq!(e.at(), Instant::MAX);
        assert!(
            Scheduled::new(Instant(1), 9, Ev::Fault) > Scheduled::new(Instant(2), 0, Ev::Fault)
        );
    }
}
