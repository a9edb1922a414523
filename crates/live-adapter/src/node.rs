//! A wall-clock live worker: one [`WorkerHost`] on its own thread (or in its
//! own process), driven by a [`WallClock`] and a [`Transport`]. It blocks on
//! its incoming channel until the host's next deadline or the next transfer
//! completion, never spinning. The driver protocol (when to step, holding a
//! step's outputs until it ends, timers) is the host's, the same one the
//! engine drives in replay and virtual-clock live; this file only moves
//! frames and reads the clock.
//!
//! Wall-clock runs are for real-time use: timing follows the machine, so
//! their reports are close to replay's but not equal (the virtual clock,
//! [`crate::remote`], is exact). Transfers started here are timed here, with
//! contention among this worker's own transfers only, and a read is judged
//! against its source's early release as replay judges it
//! ([`crate::reads`]).

use crate::clock::WallClock;
use crate::confirm::SourceChecks;
use crate::reads::{NodeReads, Notice};
use crossbeam_channel::RecvTimeoutError;
use handoff_core::{
    CoreBox, Generation, HandoffConfig, HandoffId, HandoffPolicy, HostFinal, HostInput, HostOutput,
    Instant, TransferResult, Worker, WorkerEvent, WorkerHost, WorkerId,
};
use handoff_engine::TransferModel;
use handoff_engine::TransferTimer;
use handoff_transport::{Frame, Incoming, Transport};

/// Counters of one node's run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Frames handled.
    pub frames: u64,
    /// Forward passes (steps; a step may cover several passes in replay,
    /// one here).
    pub steps: u64,
    /// Transfers this node timed.
    pub transfers: u64,
    /// Frames that could not be sent (peer gone).
    pub send_failures: u64,
    /// Peers lost.
    pub peers_lost: u64,
    /// Peer generation announcements handled.
    pub peer_announcements: u64,
    /// Reads that found their source's KV already released
    /// ([`handoff_core::TransferResult::SourceReleased`]).
    pub reads_of_released: u64,
    /// Early-release notices this worker sent its sources' readers.
    pub release_notices: u64,
    /// Frontend frames (work, cancels, clocks) that came from a peer other
    /// than the frontend, and were dropped.
    pub foreign_frames: u64,
    /// Reads failed because their source said it holds no such KV, or did
    /// not say in time ([`WorkerNode::confirming_sources`]).
    pub unconfirmed_reads: u64,
    /// Source answers not taken: not from the read's source, about a read
    /// not asked about, or a second answer.
    pub stray_answers: u64,
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
    host: WorkerHost<CoreBox>,
    transport: T,
    clock: WallClock,
    transfers: TransferTimer,
    /// Predicted completions: (when, attempt, prediction version).
    completions: Vec<handoff_engine::Completion>,
    reads: NodeReads,
    last_final: Option<(bool, handoff_core::KvCapacitySnapshot)>,
    /// Report every change of capacity, busy or not ([`WorkerNode::reporting_load`]).
    report_load: bool,
    /// Reads asked of their sources, and how long (wall time) a read whose
    /// bytes moved waits for the answer ([`WorkerNode::confirming_sources`]).
    confirm: Option<(SourceChecks, std::time::Duration)>,
    outs: Vec<HostOutput>,
    stats: NodeStats,
}

impl<T: Transport> WorkerNode<T> {
    /// A node running `core` over `transport`.
    pub fn new(cfg: NodeConfig, core: CoreBox, transport: T, clock: WallClock) -> Self {
        let worker = Worker::new(cfg.id, cfg.generation, cfg.policy, cfg.handoff, core);
        WorkerNode {
            host: WorkerHost::new(worker),
            transfers: TransferTimer::new(cfg.transfer),
            cfg,
            transport,
            clock,
            completions: Vec::new(),
            reads: NodeReads::default(),
            last_final: None,
            report_load: false,
            confirm: None,
            outs: Vec::new(),
            stats: NodeStats::default(),
        }
    }

    /// Also tells the frontend this worker's state whenever its capacity
    /// (running and waiting requests, KV blocks) changes while it is busy,
    /// at most once per input or step, so a frontend that shows load (an
    /// engine process's gauges and `/debug/workers`) follows it live. Off
    /// by default: `live`'s frontends need only the drained states, and
    /// their frame streams stay as they are.
    pub fn reporting_load(mut self) -> Self {
        self.report_load = true;
        self
    }

    /// Also asks the source of every read of another worker's KV whether
    /// its worker holds a live source role of that attempt
    /// ([`Frame::SourceQuery`]), and completes the read only on a yes: a
    /// no fails it at once, and a read whose bytes moved with no answer
    /// waits up to `wait` (wall time; an engine process gives its
    /// transport's silence limit) and then fails, as a read of a source
    /// that is gone fails ([`handoff_core::TransferResult::Failed`]); see
    /// [`crate::confirm`]. Off by default: `live`'s nodes send no query
    /// and their frame streams stay as they are. Every node answers
    /// queries, opted in or not.
    pub fn confirming_sources(mut self, wait: std::time::Duration) -> Self {
        self.confirm = Some((SourceChecks::default(), wait));
        self
    }

    /// The host (for inspection).
    pub fn host(&self) -> &WorkerHost<CoreBox> {
        &self.host
    }

    /// Runs until the frontend goes away (or the transport closes), then
    /// releases everything locally and returns the counters and final state.
    pub fn run(mut self) -> (NodeStats, HostFinal) {
        loop {
            let now = self.clock.now();
            self.fire_due(now);
            if self.host.wants_step() {
                let mut outs = std::mem::take(&mut self.outs);
                if self.host.step(now, now, &mut outs).is_some() {
                    self.stats.steps += 1;
                }
                self.dispatch(&mut outs, now);
                self.outs = outs;
                self.report_final();
                continue;
            }
            let incoming = match self.next_deadline() {
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
        let mut outs = std::mem::take(&mut self.outs);
        self.host.teardown(now, &mut outs);
        self.dispatch(&mut outs, now);
        // The transport stays open: a worker process serves the next
        // frontend session on the same endpoint (dropping it closes it).
        (self.stats, self.host.final_state())
    }

    fn next_deadline(&self) -> Option<Instant> {
        let waiting = self.confirm.as_ref().and_then(|c| c.0.next_deadline());
        let transfer = self.completions.iter().map(|c| c.at).chain(waiting).min();
        match (self.host.next_deadline(), transfer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn deliver(&mut self, input: HostInput, now: Instant) {
        let mut outs = std::mem::take(&mut self.outs);
        self.host.deliver(input, now, &mut outs);
        self.dispatch(&mut outs, now);
        self.outs = outs;
        self.report_final();
    }

    /// Handles one input; `false` ends the run. Work, cancels and clocks
    /// count only from the configured frontend (a peer engine's rank may
    /// send facts, never requests); handoff facts from anyone, as the
    /// worker drops a fact whose sender is not its attempt's peer
    /// (`DropReason::WrongPeer`, `handoff_core::worker::messages`).
    fn handle(&mut self, inc: Incoming) -> bool {
        let now = self.clock.now();
        self.stats.frames += 1;
        match inc {
            Incoming::Frame { from, frame }
                if from != self.cfg.frontend
                    && matches!(
                        frame,
                        Frame::Request(_) | Frame::Cancel { .. } | Frame::Clock { .. }
                    ) =>
            {
                self.stats.foreign_frames += 1;
            }
            Incoming::Frame { from, frame } => match frame {
                Frame::Handoff(msg) => {
                    let told = self.reads.on_fact_in(from, &msg);
                    self.notify(told);
                    self.deliver(HostInput::Message { from, msg }, now)
                }
                // A notice cannot have been sent after it arrived: a sender
                // on another clock (an engine process of `serve --engine`
                // keeps its own) is held to this one's present.
                Frame::SourceReleased {
                    id,
                    at,
                    reused_at,
                    expired,
                } => self
                    .reads
                    .on_notice(id, at.min(now), reused_at.map(|r| r.min(now)), expired),
                // Any connected peer may ask; the answer says only whether
                // this worker holds a live source role of that id.
                Frame::SourceQuery { id } => {
                    let held = self.host.worker().holds_source(id);
                    let _ = self.transport.send(from, Frame::SourceAnswer { id, held });
                }
                Frame::SourceAnswer { id, held } => self.on_answer(from, id, held, now),
                Frame::Request(req) => self.deliver(HostInput::Request(req), now),
                // The frontend's cancel (its client went away) is the host
                // input the one-process engine delivers for a client cancel.
                Frame::Cancel { id, reason } => self.deliver(HostInput::Cancel { id, reason }, now),
                Frame::Clock {
                    origin_unix_nanos,
                    speed_micros,
                } => {
                    // A speed of zero falls back to real time (WallClock
                    // refuses non-positive speeds).
                    let speed = speed_micros as f64 / 1e6;
                    self.clock = WallClock::from_unix(origin_unix_nanos, speed);
                    // The frontend holds every worker's final state; a new
                    // (or restarted) worker says at once that it is idle.
                    self.last_final = None;
                    self.report_final();
                }
                _ => {}
            },
            Incoming::PeerUp { peer, generation } => {
                if peer != self.cfg.frontend {
                    self.stats.peer_announcements += 1;
                    self.deliver(HostInput::PeerGeneration { peer, generation }, now);
                }
            }
            Incoming::PeerLost { peer } => {
                self.stats.peers_lost += 1;
                if peer == self.cfg.frontend {
                    return false;
                }
                self.deliver(HostInput::PeerLost(peer), now);
            }
            Incoming::BadPeer { .. } => {}
        }
        true
    }

    fn fire_due(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.completions.len() {
            let c = self.completions[i];
            if c.at > now {
                i += 1;
                continue;
            }
            self.completions.swap_remove(i);
            if !self.transfers.is_current(&c) {
                continue;
            }
            for n in self.transfers.finish(c.id, now) {
                self.predicted(n);
            }
            let result = self.reads.judge(c.id, now);
            if result.stale().is_some() {
                self.stats.reads_of_released += 1;
            }
            let result = match &mut self.confirm {
                Some((checks, wait)) => {
                    let until = now + model_span(*wait, self.clock.speed());
                    checks.on_complete(c.id, result, until)
                }
                None => Some(result),
            };
            if let Some(result) = result {
                self.transfer_done(c.id, result, now);
            }
            i = 0;
        }
        let expired = match &mut self.confirm {
            Some((checks, _)) => checks.expire(now),
            None => Vec::new(),
        };
        for id in expired {
            self.stats.unconfirmed_reads += 1;
            self.transfer_done(id, handoff_core::TransferResult::Failed, now);
        }
        if self.host.next_deadline().is_some_and(|t| t <= now) {
            let mut outs = std::mem::take(&mut self.outs);
            self.host.advance(now, &mut outs);
            self.dispatch(&mut outs, now);
            self.outs = outs;
            self.report_final();
        }
    }

    /// Tells the frontend, then the worker, that the read of `id` ended
    /// with `result`.
    fn transfer_done(&mut self, id: HandoffId, result: TransferResult, now: Instant) {
        let done = Frame::TransferDone {
            id,
            ok: result == TransferResult::Completed,
            at: now,
        };
        let _ = self.transport.send(self.cfg.frontend, done);
        self.deliver(HostInput::TransferDone { id, result }, now);
    }

    /// A source's answer about the read of `id`.
    fn on_answer(&mut self, from: WorkerId, id: HandoffId, held: bool, now: Instant) {
        let Some((checks, _)) = &mut self.confirm else {
            self.stats.stray_answers += 1;
            return;
        };
        match checks.on_answer(from, id, held) {
            (_, false) => self.stats.stray_answers += 1,
            (Some(result), true) => {
                if result == TransferResult::Failed && !held {
                    self.stats.unconfirmed_reads += 1;
                }
                self.transfer_done(id, result, now);
            }
            (None, true) => {
                if !held {
                    self.stats.unconfirmed_reads += 1;
                }
            }
        }
    }

    fn predicted(&mut self, c: handoff_engine::Completion) {
        self.completions.retain(|x| x.id != c.id);
        self.completions.push(c);
    }

    /// Sends facts to peers and events to the frontend; transfers this
    /// worker must time are started here.
    fn dispatch(&mut self, outs: &mut Vec<HostOutput>, now: Instant) {
        let mut lost = Vec::new();
        while !outs.is_empty() {
            for o in outs.drain(..) {
                self.dispatch_one(o, now, &mut lost);
            }
            // A peer found gone ends the attempts with it, which may have
            // more to say.
            for peer in lost.drain(..) {
                self.host.deliver(HostInput::PeerLost(peer), now, outs);
            }
        }
    }

    fn dispatch_one(&mut self, o: HostOutput, now: Instant, lost: &mut Vec<WorkerId>) {
        {
            match o {
                HostOutput::Transmit(t) => {
                    self.reads.on_fact_out(t.to, t.msg.id);
                    if self.transport.send(t.to, Frame::Handoff(t.msg)).is_err() {
                        self.stats.send_failures += 1;
                        if !lost.contains(&t.to) {
                            lost.push(t.to);
                        }
                    }
                }
                HostOutput::Event(e) => {
                    let told = self.reads.on_event(self.cfg.id, &e);
                    self.notify(told);
                    self.ask_source(&e);
                    if let WorkerEvent::StartTransfer {
                        id,
                        source,
                        destination,
                        tokens,
                        ..
                    } = e
                    {
                        self.stats.transfers += 1;
                        let at = now.max(self.clock.now());
                        for c in
                            self.transfers
                                .start(id, self.cfg.id, source, destination, tokens, at)
                        {
                            self.predicted(c);
                        }
                    }
                    let _ = self.transport.send(self.cfg.frontend, Frame::Event(e));
                }
                HostOutput::Refused(_) => {
                    // A refused request (duplicate id, disabled policy) is the
                    // frontend's bug; the worker already kept its state clean.
                }
            }
        }
    }

    /// Confirming sources: asks a read's source about it as the read starts.
    fn ask_source(&mut self, e: &WorkerEvent) {
        let Some((checks, _)) = &mut self.confirm else {
            return;
        };
        let Some(q) = checks.on_event(self.cfg.id, e) else {
            return;
        };
        if let Frame::SourceQuery { id } = q.frame {
            if self.transport.send(q.to, q.frame).is_err() {
                self.stats.send_failures += 1;
                if let Some((checks, _)) = &mut self.confirm {
                    checks.unsent(id);
                }
            }
        }
    }

    /// Sends a source's early-release notice to its reader (a reader that
    /// is gone needs none).
    fn notify(&mut self, notice: Option<Notice>) {
        if let Some(n) = notice {
            self.stats.release_notices += 1;
            let _ = self.transport.send(n.to, n.frame);
        }
    }

    /// Tells the frontend whenever this worker's drained state or capacity
    /// changes while drained, so it holds every worker's final state without
    /// a closing round trip; reporting load, whenever either changes.
    fn report_final(&mut self) {
        let drained = self.host.is_drained() && self.completions.is_empty();
        let capacity = self.host.worker().capacity();
        let key = (drained, capacity);
        let due = self.report_load || drained || self.last_final.is_none_or(|k| k.0);
        if self.last_final != Some(key) && due {
            self.last_final = Some(key);
            let mut f = self.host.final_state();
            f.drained = drained;
            let _ = self.transport.send(self.cfg.frontend, Frame::Final(f));
        }
    }
}

/// `wall` as model time on a clock running at `speed`.
fn model_span(wall: std::time::Duration, speed: f64) -> handoff_core::Duration {
    let nanos = (wall.as_nanos() as f64 * speed).min(u64::MAX as f64);
    handoff_core::Duration::from_nanos(nanos as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_core::{Request, RequestId, WorkerRequest};
    use handoff_deployment::{make_core, EngineSpec};
    use handoff_transport::ChannelNet;

    /// The busy states (not drained) a node told its frontend while it ran
    /// one request of 40 output tokens to its end.
    fn busy_reports(reporting_load: bool) -> Vec<handoff_core::KvCapacitySnapshot> {
        let net = ChannelNet::new();
        let fe = net.endpoint(WorkerId(99), Generation(0));
        let ep = net.endpoint(WorkerId(0), Generation(0));
        let cfg = NodeConfig {
            id: WorkerId(0),
            generation: Generation(0),
            policy: HandoffPolicy::Disabled,
            handoff: HandoffConfig::default(),
            frontend: WorkerId(99),
            transfer: TransferModel::default(),
        };
        let core = make_core(&EngineSpec::default()).expect("a core");
        let mut node = WorkerNode::new(cfg, core, ep, WallClock::start(50.0));
        if reporting_load {
            node = node.reporting_load();
        }
        let t = std::thread::spawn(move || node.run());
        let req = Request {
            id: RequestId(1),
            prompt_tokens: 64,
            max_output_tokens: 40,
            prefix_hashes: vec![1, 2, 3, 4],
            hash_block_tokens: 16,
            session: None,
            arrival: Instant::ZERO,
            lora: None,
        };
        let _ = fe.send(WorkerId(0), Frame::Request(WorkerRequest::Ordinary(req)));
        let mut busy = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut finished = false;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match fe.incoming().recv_timeout(left) {
                Ok(Incoming::Frame {
                    frame: Frame::Final(f),
                    ..
                }) if !f.drained => busy.push(f.capacity),
                Ok(Incoming::Frame {
                    frame: Frame::Final(_),
                    ..
                }) if finished => break,
                Ok(Incoming::Frame {
                    frame: Frame::Event(WorkerEvent::RequestFinished { .. }),
                    ..
                }) => finished = true,
                Ok(_) => {}
                Err(e) => panic!("the node went quiet: {e}"),
            }
        }
        drop(fe);
        let _ = t.join();
        busy
    }

    #[test]
    fn a_node_reporting_load_tells_every_change_while_busy() {
        let quiet = busy_reports(false);
        assert!(quiet.len() <= 1, "{quiet:?}");
        let live = busy_reports(true);
        // Admitted, then its KV grows a block at a time as it decodes.
        assert!(live.iter().any(|c| c.running_requests == 1), "{live:?}");
        let blocks: Vec<u64> = live.iter().map(|c| c.active_blocks).collect();
        assert!(blocks.windows(2).any(|w| w[1] > w[0]), "{live:?}");
        assert!(
            live.windows(2).all(|w| w[0] != w[1]),
            "only changes: {live:?}"
        );
    }

    fn request(id: u64) -> Request {
        Request {
            id: RequestId(id),
            prompt_tokens: 64,
            max_output_tokens: 4,
            prefix_hashes: vec![1, 2, 3, 4],
            hash_block_tokens: 16,
            session: None,
            arrival: Instant::ZERO,
            lora: None,
        }
    }

    /// A source-first node `id` on `net`, its frontend worker 99.
    fn node_on(net: &ChannelNet, id: u32) -> WorkerNode<handoff_transport::ChannelEndpoint> {
        let cfg = NodeConfig {
            id: WorkerId(id),
            generation: Generation(0),
            policy: HandoffPolicy::SourceFirst,
            handoff: HandoffConfig::default(),
            frontend: WorkerId(99),
            transfer: TransferModel::default(),
        };
        let core = make_core(&EngineSpec::default()).expect("a core");
        let ep = net.endpoint(WorkerId(id), Generation(0));
        WorkerNode::new(cfg, core, ep, WallClock::start(50.0))
    }

    /// The next frame `ep` receives that `pick` takes, within 10 s.
    fn next<T>(
        ep: &handoff_transport::ChannelEndpoint,
        mut pick: impl FnMut(WorkerId, Frame) -> Option<T>,
    ) -> T {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match ep.incoming().recv_timeout(left) {
                Ok(Incoming::Frame { from, frame }) => {
                    if let Some(t) = pick(from, frame) {
                        return t;
                    }
                }
                Ok(_) => {}
                Err(e) => panic!("nothing came: {e}"),
            }
        }
    }

    #[test]
    fn a_node_answers_whether_it_holds_a_source_and_nothing_else() {
        let net = ChannelNet::new();
        let fe = net.endpoint(WorkerId(99), Generation(0));
        let asker = net.endpoint(WorkerId(1), Generation(0));
        // Not opted in: a node answers all the same.
        let node = node_on(&net, 0);
        let t = std::thread::spawn(move || node.run());
        let held = HandoffId(7);
        let src = WorkerRequest::HandoffSource {
            id: held,
            request: request(1),
        };
        let _ = fe.send(WorkerId(0), Frame::Request(src));
        for (id, want) in [(held, true), (HandoffId(8), false)] {
            let _ = asker.send(WorkerId(0), Frame::SourceQuery { id });
            let got = next(&asker, |from, f| match f {
                Frame::SourceAnswer { id: a, held } if from == WorkerId(0) => Some((a, held)),
                _ => None,
            });
            assert_eq!(got, (id, want));
        }
        drop(fe);
        let _ = t.join();
    }

    /// A destination node reading attempt 7 from worker 0, a bare endpoint
    /// that answers each query with `answer` (or never): whether the read
    /// completed, the queries the source got, and the node's counters.
    fn read_from_bare_source(confirm: bool, answer: Option<bool>) -> (bool, usize, NodeStats) {
        let net = ChannelNet::new();
        let fe = net.endpoint(WorkerId(99), Generation(0));
        let source = net.endpoint(WorkerId(0), Generation(0));
        let mut node = node_on(&net, 1);
        if confirm {
            node = node.confirming_sources(std::time::Duration::from_millis(300));
        }
        let t = std::thread::spawn(move || node.run());
        let dst = WorkerRequest::HandoffDestination {
            id: HandoffId(7),
            request: request(1),
            source: WorkerId(0),
            ready: Some(handoff_core::SourceReady {
                blocks: 4,
                tokens: 64,
            }),
        };
        let _ = fe.send(WorkerId(1), Frame::Request(dst));
        let mut queries = 0;
        let ok = loop {
            while let Ok(inc) = source.incoming().try_recv() {
                if let Incoming::Frame {
                    from,
                    frame: Frame::SourceQuery { id },
                } = inc
                {
                    queries += 1;
                    if let Some(held) = answer {
                        let _ = source.send(from, Frame::SourceAnswer { id, held });
                    }
                }
            }
            let wait = std::time::Duration::from_millis(5);
            match fe.incoming().recv_timeout(wait) {
                Ok(Incoming::Frame {
                    frame: Frame::TransferDone { ok, .. },
                    ..
                }) => break ok,
                Ok(_) | Err(RecvTimeoutError::Timeout) => {}
                Err(e) => panic!("the node went away: {e}"),
            }
        };
        drop(fe);
        let (stats, _) = t.join().expect("the node ran");
        (ok, queries, stats)
    }

    #[test]
    fn a_confirming_node_completes_a_read_only_on_its_sources_yes() {
        // Not opted in: no query, and the read of a source holding nothing
        // completes (the behaviour `live` keeps).
        let (ok, queries, stats) = read_from_bare_source(false, None);
        assert!(ok && queries == 0, "{stats:?}");
        let (ok, queries, stats) = read_from_bare_source(true, Some(true));
        assert!(ok && queries == 1, "{stats:?}");
        let (ok, queries, stats) = read_from_bare_source(true, Some(false));
        assert!(
            !ok && queries == 1 && stats.unconfirmed_reads == 1,
            "{stats:?}"
        );
        let started = std::time::Instant::now();
        let (ok, queries, stats) = read_from_bare_source(true, None);
        assert!(
            !ok && queries == 1 && stats.unconfirmed_reads == 1,
            "{stats:?}"
        );
        assert!(started.elapsed() >= std::time::Duration::from_millis(300));
    }
}
