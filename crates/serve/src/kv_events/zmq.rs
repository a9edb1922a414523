//! Per-worker ZMQ publishers of vLLM-format KV event batches, with vLLM's
//! replay socket (`vllm/distributed/kv_events.py`, `ZmqEventPublisher`:
//! `_publisher_thread` sends `(topic, seq, payload)`, `_service_replay`
//! answers a ROUTER request from its bounded buffer). See
//! [`crate::vllm::wire`] for the frames.
//!
//! The sockets are libzmq's (the `zmq` crate, which builds libzmq 4.3 from
//! its bundled source), the library vLLM's publisher uses through pyzmq.
//! Both only ever receive small frames (a subscription, a replay request),
//! so both set `ZMQ_MAXMSGSIZE` to [`MAX_INBOUND_BYTES`]: libzmq's decoder
//! (`src/v2_decoder.cpp`, `v2_decoder_t::size_ready`) compares a frame's
//! announced size with it before allocating and disconnects the peer, so a
//! frame header claiming 2^62 bytes costs nothing but that connection.
//! (The pure-Rust `zeromq` crate used before allocated the announced size
//! first, and aborted the process.) libzmq does keep every part of an
//! unfinished multipart message, so the public ports are
//! [`crate::kv_events::zmtp_guard`]'s, which bounds frames and parts per message
//! before forwarding to the sockets on private Unix sockets. A peer's
//! handshake is bounded by libzmq's `ZMQ_HANDSHAKE_IVL` (30 s); a replay
//! request of more than [`MAX_REQUEST_PARTS`] parts is read and dropped
//! part by part.
//!
//! Replay, as vLLM's `_service_replay` answers it: a request for
//! `start_seq` gets every kept batch whose sequence is at least
//! `start_seq`, in order and without holes, then the end marker (`END_SEQ`,
//! empty payload). A batch is kept before it is published, so any sequence
//! a subscriber has seen can be replayed. The buffer holds the last
//! `keep` batches; when `start_seq` is older than the oldest kept, the
//! answer starts at the oldest kept (its first sequence is above the one
//! asked for, which Dynamo's listener reports as `started_after_requested`)
//! and still ends with the marker; a `start_seq` past the newest is
//! answered with the marker alone. Unlike vLLM's ROUTER, which drops what
//! passes its high-water mark, a replay answer waits for room (up to
//! [`REPLAY_SEND_TIMEOUT_MS`] per message, then the rest of that answer is
//! dropped), so a reading client gets every batch.
//!
//! The answer's layout ([`ReplayLayout`]): vLLM 0.26 on (PR #45177,
//! `ZmqEventPublisher._service_replay`) puts the topic frame before each
//! sequence, `[identity, (b""), topic, seq, payload]`, and ends with an
//! empty topic, `END_SEQ` and an empty payload; vLLM before answers
//! `[identity, (b""), seq, payload]` (`--kv-replay-layout legacy`).
//!
//! Each scheduler's topic is [`KvEndpoints::topics`]' entry when given
//! (llm-d's `kv@HOST:PORT@MODEL`, `kv_events::sources`), else the
//! one [`KvEndpoints::topic`]. With [`KvEndpoints::connect`] the PUB sockets
//! connect to the `publish` endpoints instead of binding them, as vLLM's
//! `KVEventsConfig.endpoint` allows a remote (llm-d's central subscriber
//! that every engine dials); no replay socket then.

use crate::error::ServeError;
use crate::kv_events::zmtp_guard::{self, InnerDir};
use crate::vllm::wire::{encode_batch_as, KvEventEncoding, WireEvent, END_SEQ};
use bytes::Bytes;
use crossbeam_channel::{unbounded, Receiver, Sender};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Batches kept for replay per worker (vLLM's `buffer_steps` default).
pub const REPLAY_BUFFER: usize = 10_000;

/// The largest frame the events and replay sockets accept from a peer
/// (`ZMQ_MAXMSGSIZE`): a subscription topic or an 8-byte replay request,
/// with room for the handshake's READY metadata (a 255-byte identity).
pub const MAX_INBOUND_BYTES: i64 = 4096;

/// Parts of a replay request kept (identity, delimiter, sequence); further
/// parts are read and dropped.
pub const MAX_REQUEST_PARTS: usize = 4;

/// How long one replay message may wait for room in a slow client's queue.
pub const REPLAY_SEND_TIMEOUT_MS: i32 = 5_000;

/// vLLM's `hwm` default for the PUB socket (`ZmqEventPublisher.__init__`).
pub const PUB_HWM: i32 = 100_000;

/// Where llm-d's topic names an engine: explicit `host` and `port`, or
/// those of the engine's own listener.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LlmdTopic {
    /// The host written in every topic (default: the worker's listener's).
    pub host: Option<String>,
    /// The port of worker 0 (worker `w`: this plus `w`; default: each
    /// worker's listener's own port).
    pub port: Option<u16>,
}

/// How often a replay thread looks whether the publishers were dropped.
const REPLAY_POLL_MS: i32 = 200;

/// The batches kept for replay, oldest first, with their sequence numbers.
#[derive(Debug)]
struct Kept {
    keep: usize,
    batches: VecDeque<(u64, Bytes)>,
}

impl Kept {
    fn new(keep: usize) -> Self {
        Kept {
            keep: keep.max(1),
            batches: VecDeque::new(),
        }
    }

    fn push(&mut self, seq: u64, payload: Bytes) {
        self.batches.push_back((seq, payload));
        while self.batches.len() > self.keep {
            self.batches.pop_front();
        }
    }

    /// The kept batches from `start` on. Sequences are consecutive, so the
    /// first one is found by subtraction.
    fn from(&self, start: u64) -> Vec<(u64, Bytes)> {
        let Some(&(oldest, _)) = self.batches.front() else {
            return Vec::new();
        };
        let skip = usize::try_from(start.saturating_sub(oldest)).unwrap_or(usize::MAX);
        self.batches.iter().skip(skip).cloned().collect()
    }
}

type Buffer = Arc<Mutex<Kept>>;

/// How a replay answer lays out its frames (module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReplayLayout {
    /// vLLM 0.26 on: a topic frame before the sequence.
    #[default]
    Topic,
    /// vLLM before 0.26: sequence and payload only.
    Legacy,
}

/// Where worker `w`'s sockets listen.
#[derive(Clone, Debug, Default)]
pub struct KvEndpoints {
    /// `tcp://HOST:PORT` of the PUB socket, one per worker.
    pub publish: Vec<String>,
    /// `tcp://HOST:PORT` of the ROUTER replay socket, one per worker, if any.
    pub replay: Vec<String>,
    /// The topic frame (vLLM's default is empty).
    pub topic: String,
    /// Each scheduler's own topic frame, by id; empty: `topic` for all.
    pub topics: Vec<String>,
    /// Name each scheduler's topic as llm-d does: the server fills
    /// `topics` from it and the listeners once bound
    /// (`kv_events::sources::llmd_topics`).
    pub llmd: Option<LlmdTopic>,
    /// The PUB sockets connect to `publish` instead of binding it.
    pub connect: bool,
    /// The replay answer's layout.
    pub replay_layout: ReplayLayout,
    /// How events are laid out in a batch (vLLM's array form by default).
    pub encoding: KvEventEncoding,
}

impl KvEndpoints {
    /// Scheduler `s`'s topic frame.
    pub fn topic_of(&self, s: usize) -> &str {
        self.topics.get(s).unwrap_or(&self.topic)
    }
}

/// The running publishers; [`KvPublishers::publish`] is called from the
/// engine thread. Dropping them ends the publishing thread and the replay
/// threads (within [`REPLAY_POLL_MS`]) and closes the sockets.
pub struct KvPublishers {
    sender: Sender<(usize, Bytes)>,
    workers: usize,
    encoding: KvEventEncoding,
    stop: Arc<AtomicBool>,
    guards: Vec<tokio::task::AbortHandle>,
    _inner: InnerDir,
}

/// A socket of `kind` bounded as the module docs say, listening on the
/// public `addr` through a [`crate::kv_events::zmtp_guard`] (spawned, its handle in
/// `guards`) and bound itself to socket `name` of `inner`.
async fn guarded_socket(
    ctx: &zmq::Context,
    kind: zmq::SocketType,
    addr: &str,
    flag: &str,
    (inner, name): (&InnerDir, &str),
    guards: &mut Vec<tokio::task::AbortHandle>,
) -> Result<zmq::Socket, ServeError> {
    let listener = zmtp_guard::listen(addr, flag).await?;
    let setup = || -> Result<(zmq::Socket, String), zmq::Error> {
        let sock = ctx.socket(kind)?;
        sock.set_maxmsgsize(MAX_INBOUND_BYTES)?;
        sock.set_linger(0)?;
        sock.bind(&inner.endpoint(name))?;
        let bound = sock.get_last_endpoint()?.unwrap_or_default();
        Ok((sock, bound))
    };
    let (sock, bound) = setup().map_err(|e| ServeError::socket(flag, addr, e))?;
    guards.push(tokio::spawn(zmtp_guard::guard(listener, bound)).abort_handle());
    Ok(sock)
}

impl KvPublishers {
    /// Binds every socket (so a bad address fails here, before serving) and
    /// starts their threads.
    pub async fn start(ep: &KvEndpoints) -> Result<Self, ServeError> {
        Self::start_keeping(ep, REPLAY_BUFFER).await
    }

    /// As [`KvPublishers::start`], keeping the last `keep` batches per
    /// worker for replay.
    pub async fn start_keeping(ep: &KvEndpoints, keep: usize) -> Result<Self, ServeError> {
        let ctx = zmq::Context::new();
        let stop = Arc::new(AtomicBool::new(false));
        let inner = InnerDir::new()?;
        let mut guards = Vec::new();
        let mut publishers = Vec::with_capacity(ep.publish.len());
        let mut replays = Vec::new();
        for (w, addr) in ep.publish.iter().enumerate() {
            let sock = if ep.connect {
                connected_pub(&ctx, addr)?
            } else {
                let name = format!("pub-{w}");
                let at = (&inner, name.as_str());
                guarded_socket(&ctx, zmq::PUB, addr, "--kv-events", at, &mut guards).await?
            };
            sock.set_sndhwm(PUB_HWM)
                .map_err(|e| ServeError::socket("--kv-events", addr, e))?;
            let buffer: Buffer = Arc::new(Mutex::new(Kept::new(keep)));
            let topic = Bytes::from(ep.topic_of(w).as_bytes().to_vec());
            if let Some(raddr) = ep.replay.get(w).filter(|_| !ep.connect) {
                let name = format!("replay-{w}");
                let at = (&inner, name.as_str());
                let router =
                    guarded_socket(&ctx, zmq::ROUTER, raddr, "--kv-replay", at, &mut guards)
                        .await?;
                let tune = || -> Result<(), zmq::Error> {
                    router.set_router_mandatory(true)?;
                    router.set_sndtimeo(REPLAY_SEND_TIMEOUT_MS)?;
                    router.set_rcvtimeo(REPLAY_POLL_MS)
                };
                tune().map_err(|e| ServeError::socket("--kv-replay", raddr, e))?;
                let layout = match ep.replay_layout {
                    ReplayLayout::Topic => Some(topic.clone()),
                    ReplayLayout::Legacy => None,
                };
                replays.push((router, buffer.clone(), layout));
            }
            publishers.push((sock, buffer, topic));
        }
        for (w, (router, buffer, topic)) in replays.into_iter().enumerate() {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(format!("kv-replay-{w}"))
                .spawn(move || serve_replay(&router, &buffer, topic.as_deref(), &stop))
                .map_err(|source| ServeError::Spawn {
                    what: "the --kv-replay thread",
                    source,
                })?;
        }
        let (sender, receiver) = unbounded::<(usize, Bytes)>();
        let workers = publishers.len();
        std::thread::Builder::new()
            .name("kv-publish".into())
            .spawn(move || publish_loop(&publishers, &receiver))
            .map_err(|source| ServeError::Spawn {
                what: "the --kv-events thread",
                source,
            })?;
        Ok(KvPublishers {
            sender,
            workers,
            encoding: ep.encoding,
            stop,
            guards,
            _inner: inner,
        })
    }

    /// Publishes worker `w`'s events of one engine instant as one batch
    /// (rank 0).
    pub fn publish(&self, w: usize, ts: f64, events: &[WireEvent]) {
        self.publish_rank(w, 0, ts, events);
    }

    /// Publishes scheduler `s`'s events of one engine instant as one batch
    /// stamped with its `data_parallel_rank` (publishers are per
    /// scheduler: each rank has its own, as in vLLM).
    pub fn publish_rank(&self, s: usize, dp_rank: u16, ts: f64, events: &[WireEvent]) {
        if s >= self.workers {
            return;
        }
        let payload = Bytes::from(encode_batch_as(
            ts,
            events,
            u32::from(dp_rank),
            self.encoding,
        ));
        let _ = self.sender.send((s, payload));
    }
}

impl Drop for KvPublishers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for g in &self.guards {
            g.abort();
        }
    }
}

/// Sends each batch on its worker's PUB socket, numbered per worker, until
/// the publishers are dropped. A batch is kept first: a subscriber that
/// sees `seq` live and asks for it back finds it.
fn publish_loop(publishers: &[(zmq::Socket, Buffer, Bytes)], batches: &Receiver<(usize, Bytes)>) {
    let mut seqs = vec![0u64; publishers.len()];
    while let Ok((w, payload)) = batches.recv() {
        let (Some((sock, buffer, topic)), Some(seq)) = (publishers.get(w), seqs.get_mut(w)) else {
            continue;
        };
        if let Ok(mut b) = buffer.lock() {
            b.push(*seq, payload.clone());
        }
        let frames: [&[u8]; 3] = [topic, &seq.to_be_bytes(), &payload];
        // No subscriber, or one past its high-water mark, is not an error
        // for a publisher (libzmq drops for it, as vLLM's does).
        let _ = sock.send_multipart(frames, zmq::DONTWAIT);
        *seq += 1;
    }
}

/// One request from `router`: its first [`MAX_REQUEST_PARTS`] parts (the
/// rest read and dropped), or `None` when nothing came in time.
fn recv_request(router: &zmq::Socket) -> Option<Vec<Vec<u8>>> {
    let mut parts = Vec::new();
    loop {
        let part = match router.recv_bytes(0) {
            Ok(p) => p,
            // A timeout before the first part; the rest of a message is
            // already queued whole (libzmq delivers messages atomically).
            Err(_) if parts.is_empty() => return None,
            Err(_) => return Some(parts),
        };
        if parts.len() < MAX_REQUEST_PARTS {
            parts.push(part);
        }
        if !router.get_rcvmore().unwrap_or(false) {
            return Some(parts);
        }
    }
}

/// A PUB socket connected to the remote `addr` (a subscriber that binds),
/// bounded as a bound one is; libzmq reconnects on its own.
fn connected_pub(ctx: &zmq::Context, addr: &str) -> Result<zmq::Socket, ServeError> {
    let setup = || -> Result<zmq::Socket, zmq::Error> {
        let sock = ctx.socket(zmq::PUB)?;
        sock.set_maxmsgsize(MAX_INBOUND_BYTES)?;
        sock.set_linger(0)?;
        sock.connect(addr)?;
        Ok(sock)
    };
    setup().map_err(|e| ServeError::socket("--kv-events-connect", addr, e))
}

/// Answers replay requests until `stop`: `[identity, (b""), start_seq]`
/// gets every kept batch from `start_seq` on, then the end marker, each
/// with the same envelope and, with a `topic`, the topic frame before the
/// sequence (empty on the end marker).
fn serve_replay(router: &zmq::Socket, buffer: &Buffer, topic: Option<&[u8]>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let Some(frames) = recv_request(router) else {
            continue;
        };
        // identity, optional empty delimiter (REQ clients), start sequence.
        let (Some(identity), Some(start)) = (frames.first(), frames.last()) else {
            continue;
        };
        let delimited = frames.len() == 3 && frames[1].is_empty();
        if frames.len() < 2 || frames.len() > 3 || start.len() != 8 {
            continue;
        }
        let mut s = [0u8; 8];
        s.copy_from_slice(start);
        let start = u64::from_be_bytes(s);
        let kept = buffer.lock().map(|b| b.from(start)).unwrap_or_default();
        let reply = |t: &[u8], seq: &[u8], payload: &[u8]| {
            let delimiter: &[u8] = &[];
            let mut v: Vec<&[u8]> = vec![identity];
            if delimited {
                v.push(delimiter);
            }
            if topic.is_some() {
                v.push(t);
            }
            v.push(seq);
            v.push(payload);
            // A client gone or too slow (EHOSTUNREACH, EAGAIN) ends the
            // answer.
            router.send_multipart(v, 0).is_ok()
        };
        let t = topic.unwrap_or_default();
        let answered = kept
            .iter()
            .all(|(seq, payload)| reply(t, &seq.to_be_bytes(), payload));
        if answered {
            reply(&[], &END_SEQ, &[]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zeromq::{Socket, SocketRecv, SocketSend, ZmqMessage};

    fn kept(keep: usize, n: u64) -> Kept {
        let mut k = Kept::new(keep);
        for seq in 0..n {
            k.push(seq, Bytes::from(seq.to_string()));
        }
        k
    }

    fn seqs(v: &[(u64, Bytes)]) -> Vec<u64> {
        v.iter().map(|(s, _)| *s).collect()
    }

    #[test]
    fn any_kept_range_comes_back_whole_and_evicted_starts_at_the_oldest() {
        let k = kept(4, 10);
        assert_eq!(seqs(&k.from(7)), vec![7, 8, 9]);
        assert_eq!(seqs(&k.from(6)), vec![6, 7, 8, 9]);
        // 0..6 are gone: the answer starts at the oldest kept.
        assert_eq!(seqs(&k.from(0)), vec![6, 7, 8, 9]);
        assert!(k.from(10).is_empty());
        assert!(k.from(u64::MAX).is_empty());
        assert!(Kept::new(4).from(0).is_empty());
        assert_eq!(k.from(8)[0].1, Bytes::from("8"));
    }

    /// Asks `dealer`'s replay socket for `start` on; the sequences answered
    /// before the end marker. `topic`: the topic frame each answer carries
    /// (`None`: the legacy layout, no topic frame).
    async fn answer(
        dealer: &mut zeromq::DealerSocket,
        start: u64,
        topic: Option<&str>,
    ) -> Vec<u64> {
        let ask = vec![Bytes::new(), Bytes::copy_from_slice(&start.to_be_bytes())];
        dealer
            .send(ZmqMessage::try_from(ask).expect("frames"))
            .await
            .expect("send");
        let mut got = Vec::new();
        loop {
            let mut f = tokio::time::timeout(std::time::Duration::from_secs(5), dealer.recv())
                .await
                .expect("answer in time")
                .expect("recv")
                .into_vec();
            assert!(f[0].is_empty(), "delimiter first");
            let t = match topic {
                Some(_) => {
                    assert_eq!(f.len(), 4, "[delimiter, topic, seq, payload]");
                    Some(f.remove(1))
                }
                None => {
                    assert_eq!(f.len(), 3, "[delimiter, seq, payload]");
                    None
                }
            };
            if f[2].is_empty() {
                assert_eq!(&f[1][..], &END_SEQ[..], "end marker");
                assert!(
                    t.is_none_or(|t| t.is_empty()),
                    "the end marker's topic is empty"
                );
                return got;
            }
            if let (Some(t), Some(want)) = (t, topic) {
                assert_eq!(&t[..], want.as_bytes());
            }
            got.push(u64::from_be_bytes(f[1][..].try_into().expect("8 bytes")));
        }
    }

    fn loopback(n: usize) -> Vec<String> {
        (0..n)
            .map(|_| {
                let p = std::net::TcpListener::bind("127.0.0.1:0")
                    .and_then(|l| l.local_addr())
                    .map(|a| a.port())
                    .expect("free port");
                format!("tcp://127.0.0.1:{p}")
            })
            .collect()
    }

    /// Publishers on two free loopback ports (`make` builds the endpoints
    /// from them), trying fresh ports when another test took one between
    /// its probe and the bind.
    async fn start_on_free_ports(
        make: impl Fn(Vec<String>) -> KvEndpoints,
    ) -> (KvEndpoints, KvPublishers) {
        let mut last = None;
        for _ in 0..20 {
            let ep = make(loopback(2));
            match KvPublishers::start_keeping(&ep, 5).await {
                Ok(p) => return (ep, p),
                Err(e) => last = Some(e),
            }
        }
        panic!("bind: {last:?}");
    }

    /// A DEALER client (as Dynamo's listener connects) asks the replay
    /// socket for ranges over loopback: kept ones come back in order, each
    /// answer ends with vLLM's end marker, an evicted start is answered
    /// from the oldest kept; in vLLM 0.26's layout each frame carries the
    /// scheduler's own topic.
    #[tokio::test]
    async fn replay_socket_answers_ranges_over_loopback() {
        let (ep, publishers) = start_on_free_ports(|ports| KvEndpoints {
            publish: vec![ports[0].clone()],
            replay: vec![ports[1].clone()],
            topics: vec!["kv@127.0.0.1:8000@m".to_string()],
            ..KvEndpoints::default()
        })
        .await;
        let topic = Some("kv@127.0.0.1:8000@m");
        for i in 0..8u32 {
            publishers.publish(0, f64::from(i), &[WireEvent::AllBlocksCleared]);
        }
        let mut dealer = zeromq::DealerSocket::new();
        dealer.connect(&ep.replay[0]).await.expect("connect");
        // Publishing is asynchronous: wait until the newest batch is kept.
        let mut waited = 0;
        while answer(&mut dealer, 7, topic).await.is_empty() {
            waited += 1;
            assert!(waited < 100, "batches never kept");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(answer(&mut dealer, 4, topic).await, vec![4, 5, 6, 7]);
        assert_eq!(answer(&mut dealer, 5, topic).await, vec![5, 6, 7]);
        assert_eq!(
            answer(&mut dealer, 0, topic).await,
            vec![3, 4, 5, 6, 7],
            "0..3 evicted"
        );
        assert_eq!(answer(&mut dealer, 8, topic).await, Vec::<u64>::new());
    }

    /// `--kv-replay-layout legacy`: vLLM before 0.26's three frames.
    #[tokio::test]
    async fn legacy_layout_has_no_topic_frame() {
        let (ep, publishers) = start_on_free_ports(|ports| KvEndpoints {
            publish: vec![ports[0].clone()],
            replay: vec![ports[1].clone()],
            topic: "t".to_string(),
            replay_layout: ReplayLayout::Legacy,
            ..KvEndpoints::default()
        })
        .await;
        publishers.publish(0, 0.0, &[WireEvent::AllBlocksCleared]);
        let mut dealer = zeromq::DealerSocket::new();
        dealer.connect(&ep.replay[0]).await.expect("connect");
        let mut waited = 0;
        while answer(&mut dealer, 0, None).await.is_empty() {
            waited += 1;
            assert!(waited < 100, "batch never kept");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Connect mode: the PUB socket dials a subscriber that binds (llm-d's
    /// central endpoint), which receives `[topic, seq, payload]`.
    #[tokio::test]
    async fn connect_mode_dials_a_binding_subscriber() {
        let ctx = zmq::Context::new();
        let sub = ctx.socket(zmq::SUB).expect("sub");
        sub.bind("tcp://127.0.0.1:*").expect("bind");
        sub.set_subscribe(b"kv@").expect("subscribe");
        sub.set_rcvtimeo(200).expect("timeout");
        let at = sub.get_last_endpoint().expect("endpoint").expect("utf-8");
        let ep = KvEndpoints {
            publish: vec![at.clone(), at],
            topics: vec!["kv@h:1@m".to_string(), "kv@h:2@m".to_string()],
            connect: true,
            ..KvEndpoints::default()
        };
        let publishers = KvPublishers::start_keeping(&ep, 5).await.expect("connect");
        // A slow joiner: publish until both schedulers' batches arrive.
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..100 {
            publishers.publish(0, 0.0, &[WireEvent::AllBlocksCleared]);
            publishers.publish(1, 0.0, &[WireEvent::AllBlocksCleared]);
            while let Ok(f) = sub.recv_multipart(0) {
                assert_eq!(f.len(), 3, "[topic, seq, payload]");
                seen.insert(String::from_utf8(f[0].clone()).expect("utf-8"));
            }
            if seen.len() == 2 {
                break;
            }
        }
        let want: std::collections::BTreeSet<String> =
            ["kv@h:1@m", "kv@h:2@m"].map(String::from).into();
        assert_eq!(seen, want);
    }
}
