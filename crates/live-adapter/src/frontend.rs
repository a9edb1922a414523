//! The wall-clock live frontend: submits a workload's requests at their
//! (scaled) timestamps and directs the workers with the same
//! [`handoff_serving::Serving`] director the engine uses in replay, so it routes with
//! the same router and writes the same [`Report`]. Workers report events
//! and, when they drain, their final state.

use crate::clock::WallClock;
use crossbeam_channel::RecvTimeoutError;
use handoff_core::{HostFinal, Instant, Transcript, WorkerId, WorkerRequest};
use handoff_engine::fault::FaultCounts;
use handoff_engine::{Director, Route, Undeliverable};
use handoff_serving::{Report, Serving};
use handoff_transport::{Frame, Incoming, Transport};
use handoff_workload::TraceItem;
use std::collections::BTreeMap;

/// How the frontend learned that a worker incarnation was gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossKind {
    /// Its connection ended: the process died (end of stream or reset, at
    /// once) or stayed silent past the transport's silence limit
    /// (`handoff_transport::Liveness`).
    ConnectionLost,
    /// A newer incarnation said hello before the old connection's end was
    /// seen.
    Restarted,
}

impl LossKind {
    /// Stable name for reports.
    pub fn name(self) -> &'static str {
        match self {
            LossKind::ConnectionLost => "connection-lost",
            LossKind::Restarted => "restarted",
        }
    }
}

/// One worker incarnation the frontend saw go, and what it did about it:
/// every request the worker held was migrated once or failed with a reason
/// (the director's `on_worker_lost`) at that moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerLoss {
    /// The worker.
    pub worker: WorkerId,
    /// The incarnation that went (the last one heard from).
    pub generation: handoff_core::Generation,
    /// When the frontend saw it, model time.
    pub at: Instant,
    /// How.
    pub kind: LossKind,
}

/// What a wall-clock live run produced.
#[derive(Debug)]
pub struct LiveOutcome {
    /// The report, in replay's shape (model time).
    pub report: Report,
    /// The lifecycle transcript, when asked for.
    pub transcript: Option<Transcript>,
    /// Facts about the run itself.
    pub run: LiveRun,
    /// Every worker loss seen, in order ([`LiveRun::workers_lost`] of them).
    pub losses: Vec<WorkerLoss>,
}

/// How a wall-clock run went, beyond the report.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LiveRun {
    /// Worker events received.
    pub events: u64,
    /// Workers that disappeared mid-run.
    pub workers_lost: u64,
    /// Whether the run ended because nothing moved for too long.
    pub stalled: bool,
    /// Wall-clock seconds from first arrival to the end.
    pub wall_seconds: f64,
    /// How late, in model milliseconds, the frontend took arrivals in: the
    /// model time it read when it handled the earliest due arrival, minus
    /// that arrival's time (the worst, and the 99th percentile over every
    /// time it took arrivals in). A run that keeps up with the wall clock
    /// stays near zero; lag here shows in every latency measured from an
    /// arrival.
    pub arrival_lag_max_ms: f64,
    /// See [`LiveRun::arrival_lag_max_ms`].
    pub arrival_lag_p99_ms: f64,
}

impl LiveRun {
    /// Model time a run may fall behind the wall clock before its
    /// latencies say more about this machine than about the model.
    pub const LAG_LIMIT_MS: f64 = 50.0;

    /// Whether model time kept up with the wall clock (see
    /// [`LiveRun::LAG_LIMIT_MS`]).
    pub fn kept_up(&self) -> bool {
        self.arrival_lag_p99_ms <= Self::LAG_LIMIT_MS
    }
}

/// The frontend node; see the module docs.
pub struct FrontendNode<T: Transport, I: Iterator<Item = TraceItem>> {
    director: Serving<I>,
    workers: Vec<WorkerId>,
    transport: T,
    clock: WallClock,
    delayed: BTreeMap<(Instant, u64), (WorkerId, WorkerRequest)>,
    seq: u64,
    finals: BTreeMap<WorkerId, HostFinal>,
    lost: Vec<WorkerId>,
    losses: Vec<WorkerLoss>,
    /// The incarnation of each worker last heard from.
    generations: BTreeMap<WorkerId, handoff_core::Generation>,
    routes: Vec<Route>,
    run: LiveRun,
    /// Arrival lags seen, model milliseconds (see [`LiveRun`]).
    lags: Vec<f64>,
    /// Real time without any event after which the run gives up.
    pub idle_limit: std::time::Duration,
}

impl<T: Transport, I: Iterator<Item = TraceItem>> FrontendNode<T, I> {
    /// A frontend directing `workers` with `director`.
    pub fn new(
        director: Serving<I>,
        workers: Vec<WorkerId>,
        transport: T,
        clock: WallClock,
    ) -> Self {
        FrontendNode {
            director,
            workers,
            transport,
            clock,
            delayed: BTreeMap::new(),
            seq: 0,
            finals: BTreeMap::new(),
            lost: Vec::new(),
            losses: Vec::new(),
            generations: BTreeMap::new(),
            routes: Vec::new(),
            run: LiveRun::default(),
            lags: Vec::new(),
            idle_limit: std::time::Duration::from_secs(30),
        }
    }

    /// Puts worker `w` on this frontend's clock.
    fn send_clock(&self, w: WorkerId) {
        let _ = self.transport.send(
            w,
            Frame::Clock {
                origin_unix_nanos: self.clock.origin_unix_nanos(),
                speed_micros: (self.clock.speed() * 1e6).round() as u64,
            },
        );
    }

    fn send(&mut self, to: WorkerId, req: WorkerRequest, now: Instant) {
        if self.lost.contains(&to)
            || self
                .transport
                .send(to, Frame::Request(req.clone()))
                .is_err()
        {
            let mut routes = std::mem::take(&mut self.routes);
            self.director
                .on_undeliverable(to, &req, Undeliverable::WorkerDown, now, &mut routes);
            self.routes.extend(routes);
        }
    }

    fn route(&mut self, now: Instant) {
        // Sending may fail and be answered with routes of its own.
        while !self.routes.is_empty() {
            self.route_once(now);
        }
    }

    fn route_once(&mut self, now: Instant) {
        let routes = std::mem::take(&mut self.routes);
        for r in routes {
            if r.delay == handoff_core::Duration::ZERO {
                self.send(r.to, r.request, now);
            } else {
                self.seq += 1;
                self.delayed
                    .insert((now + r.delay, self.seq), (r.to, r.request));
            }
        }
    }

    fn finished(&mut self) -> bool {
        self.director.next_arrival().is_none()
            && self.delayed.is_empty()
            && self.director.in_flight() == 0
            && self
                .workers
                .iter()
                .all(|w| self.lost.contains(w) || self.finals.get(w).is_some_and(|f| f.drained))
    }

    /// Runs the workload to the end and returns what was observed.
    pub fn run(mut self) -> LiveOutcome {
        // Every worker stamps its events on this clock.
        for w in self.workers.clone() {
            self.send_clock(w);
        }
        let started = std::time::Instant::now();
        let mut last_progress = std::time::Instant::now();
        loop {
            let now = self.clock.now();
            while let Some(due) = self.director.next_arrival().filter(|t| *t <= now) {
                self.lags
                    .push(now.saturating_since(due).as_nanos() as f64 / 1e6);
                let mut routes = std::mem::take(&mut self.routes);
                self.director.arrive(now, &mut routes);
                self.routes = routes;
                self.route(now);
            }
            while let Some((&(t, s), _)) = self.delayed.first_key_value() {
                if t > now {
                    break;
                }
                if let Some((w, r)) = self.delayed.remove(&(t, s)) {
                    self.send(w, r, now);
                    self.route(now);
                }
            }
            if self.finished() {
                break;
            }
            if last_progress.elapsed() > self.idle_limit {
                self.run.stalled = true;
                break;
            }
            let mut deadline = self.director.next_arrival();
            if let Some((&(t, _), _)) = self.delayed.first_key_value() {
                deadline = Some(deadline.map_or(t, |d| d.min(t)));
            }
            let real = deadline.map_or(std::time::Instant::now() + self.idle_limit, |t| {
                self.clock.real(t)
            });
            match self.transport.incoming().recv_deadline(real) {
                Ok(inc) => {
                    last_progress = std::time::Instant::now();
                    self.handle(inc);
                    // Everything already heard (a loss among it) counts
                    // before the run may be judged finished; only that, so
                    // a steady stream of events cannot hold arrivals back.
                    for _ in 0..self.transport.incoming().len() {
                        let Ok(inc) = self.transport.incoming().try_recv() else {
                            break;
                        };
                        self.handle(inc);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        self.run.wall_seconds = started.elapsed().as_secs_f64();
        let lag = handoff_serving::metrics::Summary::exact(&mut self.lags);
        self.run.arrival_lag_max_ms = lag.max;
        self.run.arrival_lag_p99_ms = lag.p99;
        self.transport.close();
        let end = self.clock.now();
        let finals: Vec<HostFinal> = self.finals.values().copied().collect();
        self.director
            .finish(end, &finals, 0, FaultCounts::default());
        let (report, transcript) = self.director.into_outcome();
        LiveOutcome {
            report: report.unwrap_or_else(|| unreachable!("finish writes the report")),
            transcript,
            run: self.run,
            losses: self.losses,
        }
    }

    /// Worker `w`'s incarnation is gone: every request it held moves now.
    fn lose(&mut self, w: WorkerId, kind: LossKind, now: Instant) {
        self.lost.push(w);
        self.run.workers_lost += 1;
        self.losses.push(WorkerLoss {
            worker: w,
            generation: self.generations.get(&w).copied().unwrap_or_default(),
            at: now,
            kind,
        });
        // What the dead incarnation last said no longer holds; a worker
        // still down at the end is missing from the table.
        self.finals.remove(&w);
        let mut routes = std::mem::take(&mut self.routes);
        self.director.on_worker_lost(w, now, &mut routes);
        self.routes = routes;
        self.route(now);
    }

    fn handle(&mut self, inc: Incoming) {
        let now = self.clock.now();
        match inc {
            Incoming::Frame {
                from,
                frame: Frame::Event(e),
            } => {
                self.run.events += 1;
                let mut routes = std::mem::take(&mut self.routes);
                self.director.on_event(from, &e, now, &mut routes);
                self.routes = routes;
                self.route(now);
            }
            Incoming::Frame {
                frame: Frame::TransferDone { id, ok, at },
                ..
            } => {
                self.director.on_transfer_done(id, ok, at);
            }
            Incoming::Frame {
                from,
                frame: Frame::Final(f),
            } => {
                self.finals.insert(from, f);
            }
            Incoming::PeerLost { peer }
                if self.workers.contains(&peer) && !self.lost.contains(&peer) =>
            {
                self.lose(peer, LossKind::ConnectionLost, now);
            }
            Incoming::PeerUp { peer, generation } if self.workers.contains(&peer) => {
                let newer = self.generations.get(&peer).is_some_and(|g| generation > *g);
                if newer && !self.lost.contains(&peer) {
                    // A restart can beat the old connection's loss: a newer
                    // incarnation means the old one and what it held are gone.
                    self.lose(peer, LossKind::Restarted, now);
                }
                self.generations.insert(peer, generation);
                if let Some(i) = self.lost.iter().position(|w| *w == peer) {
                    // A restarted worker dialled back in: it is a new
                    // incarnation with nothing held; its old final state
                    // is void until it sends a new one.
                    self.lost.swap_remove(i);
                    self.finals.remove(&peer);
                    self.send_clock(peer);
                    let mut routes = std::mem::take(&mut self.routes);
                    self.director
                        .on_worker_back(peer, generation, now, &mut routes);
                    self.routes = routes;
                    self.route(now);
                }
            }
            _ => {}
        }
    }
}
