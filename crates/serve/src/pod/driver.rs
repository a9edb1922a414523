//! The driver of one engine process: the frontend of its ranks' nodes
//! ([`super::ranks`]). It takes the commands the worker listener's
//! handlers send ([`Cmd`], the same ones `serve`'s engine thread takes),
//! turns each into the [`WorkerRequest`] vLLM's engine would act on, sends
//! it to a rank, and turns the rank's events back into the HTTP stream:
//!
//! - `do_remote_decode` on a prefill engine: be the source of a new
//!   handoff (vLLM source-first; the id is issued by the rank that pins);
//!   the pin answers with `kv_transfer_params` naming this engine, its
//!   host and the rank's side-channel port;
//! - `do_remote_prefill` on a decode engine: dial the prefill rank the
//!   params name (once per pair of ranks, off this thread), then be the
//!   destination of that handoff reading from it: the lifecycle's own
//!   facts, heartbeats among them, cross the connection;
//! - anything else: an ordinary request served whole.
//!
//! A destination whose handoff ends with a reason (its source's process
//! lost or silent past the liveness bound, a read of released KV, a
//! failed dial) follows vLLM's `kv_load_failure_policy`
//! (`vllm/config/kv_transfer.py`): `fail` ends the request with the reason
//! in the response and the failure metrics, `recompute` serves it whole on
//! the same rank. A client that goes away cancels its request as in one
//! process (`Fault::Cancel`): the role of its attempt on the rank gets a
//! [`Frame::Cancel`] with [`CancelReason::Client`] and ends as any cancelled
//! role does, its peer told by the lifecycle's facts; the role's end fails
//! the request as `client`. A request served whole has no attempt and runs
//! to its end, as in one process.

use crate::director::dp_lb::{RankPicker, RankRule};
use crate::director::driver::{Cmd, EngineView, Placement};
use crate::director::{Held, StreamMsg};
use crate::edge::kv::KvOut;
use crate::edge::view::{worker_row, Row};
use crate::edge::Edge;
use crate::metrics::Metrics;
use crate::openai::prompt::request_for;
use crate::pod::ids::PodIds;
use crate::pod::peers::{self, DialError, PeerPolicy};
use crate::pod::ranks::Ranks;
use crate::vllm::kv_transfer::{Pinned, ProxyError, RemotePrefill};

pub(crate) mod legs;
use handoff_core::fasthash::FastMap;
use handoff_core::{
    CancelReason, DpRank, FailureReason, HandoffId, HandoffIdGen, HostFinal, Instant,
    KvLoadFailurePolicy, Request, RequestId, Role, SourceReady, WorkerEvent, WorkerId,
    WorkerRequest,
};
use handoff_live_adapter::WallClock;
use handoff_router::Pool;
use handoff_transport::{Frame, Incoming, PeerHello, Transport};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc::UnboundedSender;

/// What the driver is built with.
pub(crate) struct DriverSetup {
    /// Who the engine is.
    pub ids: PodIds,
    /// Prefill, decode or aggregated.
    pub role: Pool,
    /// The engine's block size.
    pub block_size: u32,
    /// vLLM's `kv_load_failure_policy`.
    pub kv_failure: KvLoadFailurePolicy,
    /// The rule a request without a rank is placed by.
    pub rank_rule: RankRule,
    /// Prometheus families (indexed by rank).
    pub metrics: Arc<Metrics>,
    /// `/debug/workers` and `/ready`.
    pub view: Arc<Mutex<EngineView>>,
    /// This process's clock.
    pub clock: WallClock,
    /// KV events and the blocks each rank stores.
    pub kv: KvOut,
    /// SGLang PD legs' rooms and bootstrap deadlines.
    pub legs: legs::LegRooms,
    /// Where a decode may dial, and how long a dial may take.
    pub peers: PeerPolicy,
}

/// How an engine process's run ended.
#[derive(Debug, Default, serde::Serialize)]
pub struct PodSummary {
    /// Requests that ended with their response: their last token, or (a
    /// `do_remote_decode` prefill) their `kv_transfer_params` at the pin.
    pub finished: u64,
    /// Requests failed, by reason.
    pub failed: BTreeMap<&'static str, u64>,
    /// Decodes served whole after their KV load failed (`recompute`).
    pub recomputed: u64,
    /// Handoff roles the ranks ended, by `role/reason` (`role/released`
    /// for a role that ended without one): each role ends once.
    pub roles_ended: BTreeMap<String, u64>,
    /// Each rank's final state.
    pub ranks: Vec<HostFinal>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Served whole.
    Whole,
    /// vLLM `do_remote_decode`: answered at the pin.
    Prefill,
    /// SGLang's prefill leg: answered when its KV was sent.
    PrefillLeg,
    /// Reads (vLLM) or receives (SGLang) its KV from `source`.
    Decode { source: WorkerId },
}

/// What the driver knows of a request in flight besides its stream (the
/// edge's flow).
struct Flow {
    rank: usize,
    kind: Kind,
    /// The attempt this flow's rank holds a role of, while it does.
    handoff: Option<HandoffId>,
    request: Request,
}

/// A decode waiting for its rank to reach the prefill rank.
struct PendingDecode {
    rank: usize,
    tokens: Vec<u32>,
    source: WorkerId,
    handoff: HandoffId,
    request: Request,
    ready: SourceReady,
    tx: UnboundedSender<StreamMsg>,
}

/// Where a rank dials: the rank, and the peer's host and port.
type DialKey = (usize, String, u16);

/// A dial's outcome: who answered.
type Dialled = (DialKey, Result<PeerHello, DialError>);

/// What waits for a dial.
enum Waiting {
    Decode(PendingDecode),
    Leg(legs::PendingLeg),
}

/// See the module docs.
pub(crate) struct PodDriver {
    s: DriverSetup,
    /// Streams, KV events and metrics, as in one process.
    edge: Edge,
    ranks: Ranks,
    issuers: Vec<HandoffIdGen>,
    picker: RankPicker,
    flows: FastMap<RequestId, Flow>,
    /// Peers each rank reached, by address.
    linked: FastMap<DialKey, PeerHello>,
    /// What waits for a dial, by address.
    dialling: FastMap<DialKey, Vec<Waiting>>,
    dials: (
        crossbeam_channel::Sender<Dialled>,
        crossbeam_channel::Receiver<Dialled>,
    ),
    finals: Vec<Option<HostFinal>>,
    summary: PodSummary,
}

impl PodDriver {
    /// A driver over started `ranks`.
    pub fn new(mut s: DriverSetup, ranks: Ranks) -> Self {
        let n = ranks.endpoints.len();
        let kv = std::mem::replace(&mut s.kv, KvOut::new(0, s.block_size));
        let edge = Edge::new(vec![s.role; n], s.metrics.clone(), kv);
        let dp = handoff_core::DpLayout::new(n as u64).unwrap_or(handoff_core::DpLayout::SINGLE);
        let issuers = (0..n)
            .map(|r| HandoffIdGen::new(s.ids.scheduler(r), ranks.frontend.generation()))
            .collect();
        PodDriver {
            issuers,
            picker: RankPicker::new(dp, n),
            flows: FastMap::default(),
            linked: FastMap::default(),
            dialling: FastMap::default(),
            dials: crossbeam_channel::unbounded(),
            finals: vec![None; n],
            summary: PodSummary::default(),
            edge,
            ranks,
            s,
        }
    }

    /// Runs until `Shutdown` (or every sender is gone), then fails what is
    /// still open, ends the ranks and returns the summary.
    pub fn run(mut self, rx: crossbeam_channel::Receiver<Cmd>) -> PodSummary {
        let clock = Frame::Clock {
            origin_unix_nanos: self.s.clock.origin_unix_nanos(),
            speed_micros: (self.s.clock.speed() * 1e6).round() as u64,
        };
        for r in 0..self.ranks.endpoints.len() {
            let _ = self
                .ranks
                .frontend
                .send(self.s.ids.scheduler(r), clock.clone());
        }
        let incoming = self.ranks.frontend.incoming().clone();
        let dials = self.dials.1.clone();
        let tick = std::time::Duration::from_millis(200);
        loop {
            crossbeam_channel::select! {
                recv(rx) -> c => match c {
                    Ok(Cmd::Shutdown) | Err(_) => break,
                    Ok(c) => self.handle(c),
                },
                recv(incoming) -> i => if let Ok(i) = i { self.incoming(i) },
                recv(dials) -> d => if let Ok(d) = d { self.dialled(d) },
                default(tick) => {}
            }
            self.expire_legs();
            self.publish();
        }
        let open: Vec<RequestId> = self.flows.keys().copied().collect();
        for r in open {
            self.end(r, StreamMsg::Failed(FailureReason::Shutdown));
        }
        self.summary.ranks = self.ranks.stop();
        self.summary
    }

    fn pick(&mut self, rank: Option<DpRank>) -> usize {
        let rule = rank.map_or(self.s.rank_rule, RankRule::Pinned);
        self.picker
            .pick(WorkerId(0), rule)
            .map_or(0, |w| w.0 as usize)
    }

    fn send(&mut self, rank: usize, req: WorkerRequest) {
        let to = self.s.ids.scheduler(rank);
        if self.ranks.frontend.send(to, Frame::Request(req)).is_err() {
            let gone: Vec<RequestId> = self
                .flows
                .iter()
                .filter(|(_, f)| f.rank == rank)
                .map(|(r, _)| *r)
                .collect();
            for r in gone {
                self.end(r, StreamMsg::Failed(FailureReason::WorkerDown));
            }
        }
    }

    /// A flow of `request` (prompt `tokens`) on `rank`, holding a role of
    /// `handoff` there if it is one's, answered on `tx`.
    fn open(
        &mut self,
        (rank, kind, handoff): (usize, Kind, Option<HandoffId>),
        request: Request,
        tokens: &[u32],
        tx: UnboundedSender<StreamMsg>,
    ) {
        self.edge.open(&request, tokens, tx);
        if kind == Kind::Whole && self.s.role == Pool::Prefill {
            self.edge.serve_whole(request.id);
        }
        let id = request.id;
        let flow = Flow {
            rank,
            kind,
            handoff,
            request,
        };
        self.flows.insert(id, flow);
    }

    fn handle(&mut self, cmd: Cmd) {
        let now = self.s.clock.now();
        match cmd {
            Cmd::SubmitAt {
                placement,
                rank,
                id,
                tokens,
                output_tokens,
                lora,
                tx,
                ..
            } => {
                let r = self.pick(rank);
                let mut req = request_for(id, &tokens, output_tokens, self.s.block_size, now);
                req.lora = lora;
                let (kind, handoff, wr) = match (placement, self.s.role) {
                    (Placement::Proxy, Pool::Prefill) => {
                        let handoff = self.issuers[r].next_id();
                        let wr = WorkerRequest::HandoffSource {
                            id: handoff,
                            request: req.clone(),
                        };
                        (Kind::Prefill, Some(handoff), wr)
                    }
                    _ => (Kind::Whole, None, WorkerRequest::Ordinary(req.clone())),
                };
                self.open((r, kind, handoff), req, &tokens, tx);
                self.edge.started(WorkerId(r as u32), id);
                self.send(r, wr);
            }
            Cmd::Decode {
                rank,
                remote,
                tokens,
                output_tokens,
                tx,
                ..
            } => self.decode(rank, remote, &tokens, output_tokens, now, tx),
            Cmd::Leg {
                side,
                key,
                id,
                tokens,
                output_tokens,
                tx,
                ..
            } => self.leg(side, key, id, &tokens, output_tokens, now, tx),
            Cmd::Submit { tx, .. } => {
                let _ = tx.send(StreamMsg::Failed(FailureReason::NoWorker));
            }
            Cmd::Cancel(id) => self.cancel(id),
            // An engine process has no admin route: Kubernetes scales it.
            Cmd::Scale { .. } | Cmd::Shutdown => {}
        }
    }

    /// The client of `id` went away (`Fault::Cancel` in one process): the
    /// rank's role of its attempt is cancelled, and that role's end ends
    /// the flow. A flow with no role (served whole) runs to its end on the
    /// rank, its stream gone; one still waiting for a dial is dropped.
    fn cancel(&mut self, id: RequestId) {
        for waiting in self.dialling.values_mut() {
            waiting.retain(|w| match w {
                Waiting::Decode(p) => p.request.id != id,
                Waiting::Leg(p) => p.request.id != id,
            });
        }
        let Some(f) = self.flows.get(&id) else {
            return;
        };
        let Some(handoff) = f.handoff else {
            self.flows.remove(&id);
            let gone = StreamMsg::Failed(FailureReason::from(CancelReason::Client));
            self.edge.close(id, gone);
            return;
        };
        let to = self.s.ids.scheduler(f.rank);
        let frame = Frame::Cancel {
            id: handoff,
            reason: CancelReason::Client,
        };
        if self.ranks.frontend.send(to, frame).is_err() {
            self.end(id, StreamMsg::Failed(FailureReason::WorkerDown));
        }
    }

    fn decode(
        &mut self,
        rank: Option<DpRank>,
        remote: RemotePrefill,
        tokens: &[u32],
        output_tokens: u32,
        now: Instant,
        tx: UnboundedSender<StreamMsg>,
    ) {
        let Some((host, port)) = remote.side_channel.clone() else {
            let _ = tx.send(StreamMsg::Refused(ProxyError::BadParam {
                field: "remote_host",
                why: "and remote_port are required by a decode engine of its own".into(),
            }));
            return;
        };
        if let Err(e) = self.admissible(&remote, &host, tokens.len()) {
            if let ProxyError::PeerNotAllowed { host } = &e {
                self.edge.ledger().note(
                    crate::conformance::ConformanceKind::UnknownPrefillEngine,
                    rank.map(|r| u32::from(r.0)),
                    Some(remote.request.0),
                    crate::conformance::peer(host),
                );
            }
            let _ = tx.send(StreamMsg::Refused(e));
            return;
        }
        let r = self.pick(rank);
        let source = PodIds::scheduler_of(remote.engine.at.worker.0, remote.engine.at.dp_rank);
        let request = request_for(
            remote.request,
            tokens,
            output_tokens,
            self.s.block_size,
            now,
        );
        let ready = SourceReady {
            blocks: remote.blocks,
            tokens: remote.tokens.unwrap_or(u64::from(request.prompt_tokens)),
        };
        let p = PendingDecode {
            rank: r,
            tokens: tokens.to_vec(),
            source,
            handoff: remote.handoff,
            request,
            ready,
            tx,
        };
        self.dial((r, host, port), Waiting::Decode(p));
    }

    /// Why a decode of `remote` from `host` with a prompt of `prompt`
    /// tokens cannot be taken: a decode of its request attached or waiting
    /// for its dial (409), a host outside `--kv-peer-allow` (403, before
    /// any dial), more block ids than the prompt fills (400).
    fn admissible(
        &self,
        remote: &RemotePrefill,
        host: &str,
        prompt: usize,
    ) -> Result<(), ProxyError> {
        let waiting = self.dialling.values().flatten().any(|w| match w {
            Waiting::Decode(p) => p.request.id == remote.request,
            Waiting::Leg(p) => p.request.id == remote.request,
        });
        if waiting || self.flows.contains_key(&remote.request) {
            return Err(ProxyError::AlreadyAttached);
        }
        if self.s.peers.allow.host(host) == Some(false) {
            return Err(ProxyError::PeerNotAllowed {
                host: peers::sanitize(host),
            });
        }
        let limit = (prompt as u64).div_ceil(u64::from(self.s.block_size.max(1)));
        if remote.blocks > limit {
            return Err(ProxyError::TooManyBlocks {
                got: remote.blocks,
                limit,
            });
        }
        Ok(())
    }

    /// Runs `w` once rank `key.0` reaches `key`'s address (at once when
    /// it has, and that link is still up in the generation it answered
    /// in: a peer restarted or lost since is dialled again), dialling off
    /// this thread the first time.
    fn dial(&mut self, key: DialKey, w: Waiting) {
        if let Some(hello) = self.linked.get(&key).copied() {
            let ep = &self.ranks.endpoints[key.0];
            if ep.peer_generation(hello.worker) == Some(hello.generation) {
                return self.linked_to(hello, w);
            }
            self.linked.remove(&key);
        }
        let waiting = self.dialling.entry(key.clone()).or_default();
        waiting.push(w);
        if waiting.len() > 1 {
            return;
        }
        let ep = self.ranks.endpoints[key.0].clone();
        let out = self.dials.0.clone();
        let k = key.clone();
        let policy = self.s.peers.clone();
        let spawned = std::thread::Builder::new()
            .name("dial".into())
            .spawn(move || {
                let who = policy.dial(&ep, &k.1, k.2);
                let _ = out.send((k, who));
            });
        if let Err(e) = spawned {
            let _ = self.dials.0.send((key, Err(DialError::Spawn(e))));
        }
    }

    fn dialled(&mut self, (key, who): Dialled) {
        let waiting = self.dialling.remove(&key).unwrap_or_default();
        match who {
            Ok(hello) => {
                self.linked.insert(key, hello);
                for w in waiting {
                    self.linked_to(hello, w);
                }
            }
            Err(DialError::NotAllowed) => {
                let host = peers::sanitize(&key.1);
                self.unknown_peer(&key, &waiting);
                for w in waiting {
                    let tx = match w {
                        Waiting::Decode(p) => p.tx,
                        Waiting::Leg(p) => p.tx,
                    };
                    let host = host.clone();
                    let _ = tx.send(StreamMsg::Refused(ProxyError::PeerNotAllowed { host }));
                }
            }
            Err(e) => {
                eprintln!(
                    "handoff-mocker serve: cannot reach a prefill engine at {}:{}: {}",
                    peers::sanitize(&key.1),
                    key.2,
                    peers::sanitize(&e.to_string())
                );
                self.unknown_peer(&key, &waiting);
                for w in waiting {
                    self.unreachable(w);
                }
            }
        }
    }

    /// The decodes `waiting` for `key`'s peer named a prefill engine that
    /// is not in the deployment: outside `--kv-peer-allow`, or nothing
    /// answers there (the conformance report).
    fn unknown_peer(&self, key: &DialKey, waiting: &[Waiting]) {
        for w in waiting {
            let (rank, request) = match w {
                Waiting::Decode(p) => (p.rank, p.request.id),
                Waiting::Leg(p) => (p.rank, p.request.id),
            };
            self.edge.ledger().note(
                crate::conformance::ConformanceKind::UnknownPrefillEngine,
                Some(rank as u32),
                Some(request.0),
                crate::conformance::peer(&format!("{}:{}", peers::sanitize(&key.1), key.2)),
            );
        }
    }

    fn linked_to(&mut self, hello: PeerHello, w: Waiting) {
        match w {
            Waiting::Decode(p) if p.source == hello.worker => self.attach(p),
            Waiting::Decode(p) => {
                self.edge.ledger().note(
                    crate::conformance::ConformanceKind::UnknownPrefillEngine,
                    Some(p.rank as u32),
                    Some(p.request.id.0),
                    crate::conformance::Detail::Peer(format!(
                        "engine {} at the side channel of engine {}",
                        p.source.0, hello.worker.0
                    )),
                );
                let _ = p.tx.send(StreamMsg::Refused(ProxyError::WrongEngine));
            }
            Waiting::Leg(p) => self.leg_linked(p, hello),
        }
    }

    /// The peer a request waited for cannot be reached: its KV cannot
    /// load (`kv_load_failure_policy`; SGLang aborts).
    fn unreachable(&mut self, w: Waiting) {
        let (rank, request, tokens, tx, source) = match w {
            Waiting::Decode(p) => (p.rank, p.request, p.tokens, p.tx, p.source),
            Waiting::Leg(p) => (p.rank, p.request, p.tokens, p.tx, WorkerId(u32::MAX)),
        };
        let id = request.id;
        self.open((rank, Kind::Decode { source }, None), request, &tokens, tx);
        self.load_failed(id, CancelReason::PeerLost);
    }

    /// The decode reads the pinned prefix instead of computing it, as vLLM
    /// counts a connector's external hit as cached.
    fn attach(&mut self, p: PendingDecode) {
        let cached = p.ready.tokens.min(u64::from(p.request.prompt_tokens)) as u32;
        let id = p.request.id;
        let wr = WorkerRequest::HandoffDestination {
            id: p.handoff,
            request: p.request.clone(),
            source: p.source,
            ready: Some(p.ready),
        };
        let flow = (p.rank, Kind::Decode { source: p.source }, Some(p.handoff));
        self.open(flow, p.request, &p.tokens, p.tx);
        let started = StreamMsg::Started {
            cached_tokens: cached,
        };
        self.edge.tell(id, started);
        self.send(p.rank, wr);
    }

    /// A decode's KV did not load (`why`): `kv_load_failure_policy`.
    fn load_failed(&mut self, id: RequestId, why: CancelReason) {
        let recompute = self.s.kv_failure == KvLoadFailurePolicy::Recompute
            && !matches!(why, CancelReason::Client | CancelReason::Teardown);
        let Some(f) = self.flows.get_mut(&id) else {
            return;
        };
        if recompute && matches!(f.kind, Kind::Decode { .. }) {
            f.kind = Kind::Whole;
            f.handoff = None;
            let (rank, req) = (f.rank, f.request.clone());
            self.summary.recomputed += 1;
            self.send(rank, WorkerRequest::Ordinary(req));
        } else {
            self.end(id, StreamMsg::Failed(FailureReason::from(why)));
        }
    }

    /// Ends request `id`'s flow with `msg`: the edge counts a failure by
    /// its reason and closes the stream; the summary counts the outcome (a
    /// pinned prefill answered is a finished request).
    fn end(&mut self, id: RequestId, msg: StreamMsg) {
        if self.flows.remove(&id).is_none() {
            return;
        }
        self.s.legs.ended(id);
        self.edge.account(&msg);
        match &msg {
            StreamMsg::Failed(why) => {
                *self.summary.failed.entry(why.name()).or_default() += 1;
            }
            StreamMsg::Finished | StreamMsg::Prefilled(_) => self.summary.finished += 1,
            _ => {}
        }
        self.edge.close(id, msg);
    }

    fn incoming(&mut self, i: Incoming) {
        let Incoming::Frame { from, frame } = i else {
            return;
        };
        let Some(r) = self.s.ids.rank_of(from) else {
            return;
        };
        match frame {
            Frame::Event(e) => self.on_event(r, e),
            Frame::Final(f) => self.finals[r] = Some(f),
            _ => {}
        }
    }

    /// Rank `r`'s event: through the edge first (streams, KV events,
    /// metrics), then what only this driver knows of: a `do_remote_decode`
    /// prefill's pin, a role's end.
    fn on_event(&mut self, r: usize, e: WorkerEvent) {
        let now = self.s.clock.now();
        let s = WorkerId(r as u32);
        if let Some(id) = self.edge.observe(s, &e, now) {
            self.end(id, StreamMsg::Finished);
        }
        match e {
            WorkerEvent::PrefillPinned {
                id,
                request,
                blocks,
                tokens,
                ..
            } if self
                .flows
                .get(&request)
                .is_some_and(|f| f.kind == Kind::Prefill) =>
            {
                let pinned = Pinned {
                    request,
                    handoff: id,
                    engine: self.s.ids.engine_id(r),
                    blocks,
                    tokens,
                    side_port: Some(self.ranks.port(r)),
                };
                self.edge.pinned(s, request);
                self.end(request, StreamMsg::Prefilled(pinned));
            }
            WorkerEvent::Transition(t) => self.leg_moved(&t),
            WorkerEvent::RoleEnded {
                reason,
                role,
                request,
                ..
            } => self.role_ended(r, role, request, reason),
            _ => {}
        }
    }

    fn role_ended(&mut self, r: usize, role: Role, id: RequestId, why: Option<CancelReason>) {
        let key = format!("{}/{}", role.name(), why.map_or("released", |w| w.name()));
        *self.summary.roles_ended.entry(key).or_default() += 1;
        if role == Role::Source
            && self
                .flows
                .get(&id)
                .is_some_and(|f| f.kind == Kind::PrefillLeg)
        {
            return self.prefill_leg_ended(id, why);
        }
        let Some(why) = why else {
            return;
        };
        let Some(kind) = self.flows.get(&id).map(|f| f.kind) else {
            return;
        };
        match (role, kind) {
            (Role::Destination, Kind::Decode { source }) => {
                if matches!(why, CancelReason::PeerLost | CancelReason::PeerRestarted) {
                    // Dial again next time: the connection is gone.
                    self.linked.retain(|k, h| !(k.0 == r && h.worker == source));
                }
                self.load_failed(id, why);
            }
            (Role::Source, Kind::Prefill) => self.end(id, StreamMsg::Failed(why.into())),
            _ => {}
        }
    }

    /// After every command, frame or tick: the KV events out, and each
    /// rank's gauges and `/debug/workers` row from its latest state.
    fn publish(&mut self) {
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.edge.kv_mut().flush(unix);
        let n = self.finals.len();
        let mut workers = Vec::new();
        for (r, f) in self.finals.iter().enumerate() {
            let Some(f) = f else {
                // Not every rank has said it is up: not ready yet.
                workers.clear();
                break;
            };
            let row = Row {
                s: r,
                worker: self.s.ids.engine,
                dp_rank: r as u16,
                split: n > 1,
            };
            workers.push(worker_row(
                &self.s.metrics,
                &mut self.picker,
                row,
                self.s.role,
                f,
            ));
        }
        let e = self.edge.held();
        let held = Held {
            flows: self.flows.len(),
            local: e.local,
            reserving: e.reserving,
            prompt_blocks: e.prompt_blocks,
            legs: self.dialling.values().map(Vec::len).sum::<usize>() + self.s.legs.len(),
            lora: e.lora,
            ..Held::default()
        };
        let v = EngineView {
            workers,
            in_flight: self.flows.len(),
            open_streams: e.flows,
            held,
            model_time_s: self.s.clock.now().as_nanos() as f64 / 1e9,
        };
        if let Ok(mut g) = self.s.view.lock() {
            *g = v;
        }
    }
}
