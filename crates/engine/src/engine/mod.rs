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
//!   tokens, but for an aggregated worker a request's first token, and KV
//!   events when no observer keeps their order), bounds the
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
//!
//! Files: `api` (the host port, the director, the settings), `run` (the
//! clock and the event queue), `hosts` (stepping hosts and absorbing their
//! outputs), `handle` (one event, faults, the end of a run), `local` (hosts
//! in this thread); this file holds the engine's state and queue entries.

use crate::fault::FaultInjector;
use crate::min_tree::MinTree;
use crate::transfer::{Completion, TransferTimer};
use handoff_core::host::{HostOutput, HostStatus};
use handoff_core::ids::{Generation, WorkerId};
use handoff_core::msg::HandoffMsg;
use handoff_core::time::Instant;
use handoff_core::worker::WorkerRequest;
use std::collections::BinaryHeap;

mod api;
mod handle;
mod hosts;
mod local;
mod reads;
mod run;
mod scale;

pub use api::{Director, EngineConfig, HostOp, HostPort, QuietEvents, Route, Undeliverable};
pub use local::{apply_op, LocalHosts};

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
    /// A loss notice of `Engine::notices` comes due.
    PeerNotice,
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
    /// Whether each destination's read found its source's KV still held.
    reads: reads::SourceReads,
    faults: FaultInjector,
    /// Peers still to hear of a killed worker (heartbeat detection).
    notices: crate::fault::LossNotices,
    outs: Vec<HostOutput>,
    routes: Vec<Route>,
    arrival_pending: bool,
    /// Hosts that may want to step, as a bitset by id: set whenever a
    /// status says so, cleared when `step_hosts` finds one that does not.
    /// Each instant then costs the hosts that step, not every host.
    may_step: Vec<u64>,
    /// Hosts whose last status was not drained.
    undrained: usize,
    /// The elastic fleet's phases (empty without scaling).
    fleet: crate::scale::FleetState,
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
                generation: Generation::FIRST,
            })
            .collect();
        let mut e = Engine {
            transfers: TransferTimer::new(cfg.transfer).with_fan(cfg.transfer_fan),
            reads: reads::SourceReads::default(),
            faults: FaultInjector::new(cfg.faults.clone()),
            notices: crate::fault::LossNotices::default(),
            may_step: vec![0; (port.hosts() as usize).div_ceil(64)],
            undrained: 0,
            fleet: crate::scale::FleetState::new(cfg.faults.fleet.clone()),
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
        e.start_fleet();
        e.schedule_arrival();
        if let Some(t) = e.faults.next_timed() {
            e.at(t, Ev::Fault);
        }
        // Every host starts at `Generation::FIRST`, the generation a worker
        // takes a peer it has not heard of to be at: the hello in which
        // transports tell each worker every other's generation is implied,
        // so that a worker that later hears a newer generation of a peer
        // voids its attempts with it, even attempts that never got a fact
        // from that peer (a destination routed with the source's
        // readiness), and an idle host holds nothing per peer.
        e
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
