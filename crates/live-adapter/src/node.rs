//! A live worker: one [`Worker`] on its own thread, driven by wall-clock
//! time and a [`Transport`]. It blocks on its incoming channel until the
//! next deadline (step end, transfer completion, lease or reservation
//! timer), never spinning. A step's outputs are released when the modelled
//! step ends, exactly as replay does, so both produce the same transitions.

use crate::clock::WallClock;
use crossbeam_channel::RecvTimeoutError;
use handoff_core::{
    CoreBox, Generation, HandoffConfig, HandoffId, HandoffPolicy, Instant, TransferModel, Worker,
    WorkerEvent, WorkerId,
};
use transport::{Frame, Incoming, Transport};

/// Counters of one node's run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Frames handled.
    pub frames: u64,
    /// Forward passes.
    pub steps: u64,
    /// Transfers this node timed.
    pub transfers: u64,
    /// Frames that could not be sent (peer gone).
    pub send_failures: u64,
    /// Peers lost.
    pub peers_lost: u64,
    /// Peer restarts seen.
    pub peer_restarts: u64,
}

/// How a node runs.
#[derive(Clone, Copy, Debug)]
pub struct NodeConfig {
    /// This worker.
    pub id: WorkerId,
    /// Its incarnation.
    pub generation: Generation,
    /// Handoff ordering.
    pub policy: HandoffPolicy,
    /// Lifecycle timers.
    pub handoff: HandoffConfig,
    /// Where worker events go.
    pub frontend: WorkerId,
    /// How long transfers this node starts take.
    pub transfer: TransferModel,
}

/// A worker node; see the module docs.
pub struct WorkerNode<T: Transport> {
    cfg: NodeConfig,
    worker: Worker<CoreBox>,
    transport: T,
    clock: WallClock,
    stepping: Option<Instant>,
    stalled: bool,
    pending: Vec<WorkerEvent>,
    pending_tx: Vec<handoff_core::Transmit>,
    transfers: Vec<(Instant, HandoffId)>,
    last_drained: Option<bool>,
    stats: NodeStats,
}

impl<T: Transport> WorkerNode<T> {
    /// A node running `core` over `transport`.
    pub fn new(cfg: NodeConfig, core: CoreBox, transport: T, clock: WallClock) -> Self {
        WorkerNode {
            worker: Worker::new(cfg.id, cfg.generation, cfg.policy, cfg.handoff, core),
            cfg,
            transport,
            clock,
            stepping: None,
            stalled: false,
            pending: Vec::new(),
            pending_tx: Vec::new(),
            transfers: Vec::new(),
            last_drained: None,
            stats: NodeStats::default(),
        }
    }

    /// The worker (for inspection after `run`).
    pub fn worker(&self) -> &Worker<CoreBox> {
        &self.worker
    }

    /// Runs until the frontend goes away (or the transport closes), then
    /// releases everything locally and returns the counters.
    pub fn run(mut self) -> (NodeStats, Worker<CoreBox>) {
        loop {
            let now = self.clock.now();
            self.fire_due(now);
            self.maybe_step(now);
            let deadline = self.next_deadline();
            let incoming = match deadline {
                Some(t) => self.transport.incoming().recv_deadline(self.clock.real(t)),
                None => self
                    .transport
                    .incoming()
                    .recv()
                    .map_err(|_| RecvTimeoutError::Disconnected),
            };
            match incoming {
                Ok(inc) => {
                    if !self.handle(inc) {
                        break;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        let now = self.clock.now();
        self.worker.teardown(now);
        self.flush(now, false);
        self.transport.close();
        (self.stats, self.worker)
    }

    fn next_deadline(&self) -> Option<Instant> {
        let mut d = self.stepping;
        for (t, _) in &self.transfers {
            d = Some(d.map_or(*t, |x| x.min(*t)));
        }
        if let Some(t) = self.worker.poll_timeout() {
            d = Some(d.map_or(t, |x| x.min(t)));
        }
        d
    }

    /// Handles one input; `false` ends the run.
    fn handle(&mut self, inc: Incoming) -> bool {
        let now = self.clock.now();
        self.stats.frames += 1;
        self.stalled = false;
        match inc {
            Incoming::Frame { from, frame } => match frame {
                Frame::Handoff(msg) => self.worker.handle_message(from, msg, now),
                Frame::Request(req) => {
                    // A refused request (duplicate id, disabled policy) is the
                    // frontend's bug; the worker already kept its state clean.
                    let _ = self.worker.handle_request(req, now);
                }
                _ => {}
            },
            Incoming::PeerUp { peer, generation } => {
                if peer != self.cfg.frontend {
                    let before = self.worker.stats();
                    self.worker.handle_peer_generation(peer, generation, now);
                    if self.worker.stats() != before {
                        self.stats.peer_restarts += 1;
                    }
                }
            }
            Incoming::PeerLost { peer } => {
                self.stats.peers_lost += 1;
                if peer == self.cfg.frontend {
                    return false;
                }
                self.worker.handle_peer_lost(peer, now);
            }
            Incoming::BadPeer { .. } => {}
        }
        self.flush(now, false);
        true
    }

    fn fire_due(&mut self, now: Instant) {
        if self.stepping.is_some_and(|end| end <= now) {
            self.stepping = None;
            // The step's facts leave when it ends, as in replay.
            let txs = std::mem::take(&mut self.pending_tx);
            for t in txs {
                self.transmit(t, now);
            }
            let pending = std::mem::take(&mut self.pending);
            for e in pending {
                self.emit(e, now);
            }
            self.report_drained();
        }
        let mut i = 0;
        while i < self.transfers.len() {
            if self.transfers[i].0 <= now {
                let (_, id) = self.transfers.swap_remove(i);
                self.stalled = false;
                self.worker.handle_transfer_done(id, true, now);
                self.flush(now, false);
            } else {
                i += 1;
            }
        }
        if self.worker.poll_timeout().is_some_and(|t| t <= now) {
            self.stalled = false;
            self.worker.handle_timeout(now);
            self.flush(now, false);
        }
    }

    fn maybe_step(&mut self, now: Instant) {
        if self.stepping.is_some() || self.stalled || self.worker.is_empty() {
            return;
        }
        match self.worker.step(now, now) {
            Some(end) => {
                self.stats.steps += 1;
                self.stepping = Some(end);
                self.flush(now, true);
            }
            None => {
                self.stalled = true;
                self.flush(now, false);
            }
        }
    }

    /// Sends facts out and events on; a running step's events wait for its end.
    fn flush(&mut self, now: Instant, deferred: bool) {
        while let Some(t) = self.worker.poll_transmit() {
            if deferred {
                self.pending_tx.push(t);
            } else {
                self.transmit(t, now);
            }
        }
        while let Some(e) = self.worker.poll_event() {
            if deferred {
                self.pending.push(e);
            } else {
                self.emit(e, now);
            }
        }
        if !deferred {
            self.report_drained();
        }
    }

    fn transmit(&mut self, t: handoff_core::Transmit, now: Instant) {
        if self.transport.send(t.to, Frame::Handoff(t.msg)).is_err() {
            self.stats.send_failures += 1;
            self.worker.handle_peer_lost(t.to, now);
        }
    }

    fn emit(&mut self, e: WorkerEvent, now: Instant) {
        if let WorkerEvent::StartTransfer { id, tokens, .. } = e {
            self.stats.transfers += 1;
            let at = now.max(self.clock.now()) + self.cfg.transfer.isolated_duration(tokens);
            self.transfers.push((at, id));
            return;
        }
        let _ = self.transport.send(self.cfg.frontend, Frame::Event(e));
    }

    /// Tells the frontend whenever this worker's drained state flips, so it
    /// holds every worker's final state without a closing round trip.
    fn report_drained(&mut self) {
        let drained =
            self.worker.is_drained() && self.stepping.is_none() && self.transfers.is_empty();
        if self.last_drained != Some(drained) {
            self.last_drained = Some(drained);
            let capacity = self.worker.capacity();
            let report = Frame::Drained {
                worker: self.cfg.id,
                drained,
                capacity,
            };
            let _ = self.transport.send(self.cfg.frontend, report);
        }
    }
}
