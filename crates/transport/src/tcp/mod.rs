//! TCP between workers: one endpoint listens, any endpoint connects, every
//! connection opens with a `Hello` each way and then carries length-prefixed
//! frames ([`crate::codec`]).
//!
//! Threads: one accepting thread per endpoint and one reading thread per
//! connection, all in blocking reads; whatever they hear goes into the
//! endpoint's [`Incoming`] channel. Writes happen on the sender's thread
//! under a per-connection lock, one `write_all` per frame (`TCP_NODELAY`), so
//! a slow peer pushes back on whoever sends to it and on no one else.
//! [`Transport::close`] shuts every socket down, which makes the blocked
//! reads return, and joins the threads.
//!
//! The handshake plays the part of vLLM's NIXL side-channel handshake
//! (`vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py`,
//! `NixlConnectorWorker._nixl_handshake`): before any fact flows, each side
//! learns who the other is and which incarnation, and a peer that comes back
//! with a higher generation replaces the old one (announced as a new
//! [`Incoming::PeerUp`], which the worker turns into voiding the old
//! incarnation's attempts).
//!
//! Liveness: every connection carries a [`Frame::Ping`] each way every
//! [`Liveness::ping_every`] (one pinging thread per connection, so a peer
//! that stops reading holds up only its own pings), and a connection from
//! which nothing (no frame, no ping) came for [`Liveness::silence_limit`] is
//! closed and its peer reported lost. So a peer is seen lost at once when
//! its process dies (the kernel closes its sockets: end of stream or
//! reset), and at most `silence_limit` after its last frame when it hangs
//! or is stopped (`SIGSTOP`). Upstream engines judge peers the same way,
//! by heartbeats that stop rather than by a clean goodbye: SGLang's decode
//! worker checks its prefill servers every
//! `SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL` (5 s) and takes one for
//! offline after `SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE` (2) failed
//! checks (`srt/disaggregation/common/conn.py`, `CommonKVManager`); vLLM's
//! prefill worker frees a reader's KV when its heartbeats stop renewing the
//! lease (modelled by the role machines, not here). The bound here is
//! tighter because the peers are processes on one host. A sender blocked on
//! such a peer's full socket is released by the same close.
//!
//! Connections: both sides may dial each other; a second connection of the
//! same incarnation is kept and read, and sends use the oldest, so nothing
//! in flight is cut off. `PeerLost` comes when the peer's last connection
//! closes. A connection from an *older* generation than the one known is
//! refused as stale. Who may connect at all is the endpoint's
//! [`AcceptPolicy`] ([`policy`]): an engine rank's refuses its own ids, a
//! second frontend and any claim of an id already connected.
//!
//! Bounds: at most [`AcceptPolicy::max_handshakes`] connections in their
//! handshake (one thread each, for at most the handshake deadline; more
//! are closed at once) and [`AcceptPolicy::max_connections`] identified
//! ones (two threads each). An accept that fails for want of descriptors
//! or memory is logged once, retried with a backoff, and logged again when
//! accepting works again: the listener never stops while the endpoint is
//! open.

pub mod policy;

pub use policy::{
    AcceptPolicy, Admit, Claim, Direction, DuplicateRule, FrontendRule, Held, Refusal,
};

use crate::codec::{encode_frame, DecodeError, DecodeErrorKind, FrameReader, ReadError};
use crate::frame::{Frame, PeerRole};
use crate::{Incoming, SendError, Transport};
use crossbeam_channel::{Receiver, Sender};
use handoff_core::{Generation, WorkerId};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::{self, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// How long a new connection may take to say `Hello` before it is dropped,
/// so a silent client cannot hold a thread until shutdown.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// When this endpoint pings its peers and when it gives up on a silent one
/// (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Liveness {
    /// How often every connection carries a [`Frame::Ping`].
    pub ping_every: Duration,
    /// How long a connection may stay silent (no frame, no ping) before its
    /// peer is reported lost. Several `ping_every`, so that a loaded
    /// machine's scheduling delays do not read as a dead peer.
    pub silence_limit: Duration,
}

impl Default for Liveness {
    /// A ping every 500 ms; lost after 5 s of silence (ten missed pings).
    fn default() -> Self {
        Liveness {
            ping_every: Duration::from_millis(500),
            silence_limit: Duration::from_secs(5),
        }
    }
}

/// How long `close` waits to hand a `Bye` to a congested socket.
const BYE_TIMEOUT: Duration = Duration::from_millis(100);

/// Why [`TcpEndpoint::connect`] failed.
#[derive(Debug)]
pub enum ConnectError {
    /// The endpoint is closed.
    Closed,
    /// Connecting or writing failed.
    Io(io::Error),
    /// The peer's first bytes were not a `Hello`.
    Handshake(ReadError),
    /// The peer identified itself but this endpoint's [`AcceptPolicy`]
    /// refuses it (itself, an older incarnation than one already
    /// connected, ...).
    Rejected(Refusal),
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::Closed => f.write_str("endpoint closed"),
            ConnectError::Io(e) => write!(f, "i/o: {e}"),
            ConnectError::Handshake(e) => write!(f, "handshake: {e}"),
            ConnectError::Rejected(why) => write!(f, "rejected: {why}"),
        }
    }
}

impl std::error::Error for ConnectError {}

impl From<io::Error> for ConnectError {
    fn from(e: io::Error) -> Self {
        ConnectError::Io(e)
    }
}

struct Writer {
    stream: TcpStream,
    buf: Vec<u8>,
}

/// A registered connection and the reader of its frames.
type Link = (Arc<Conn>, FrameReader<TcpStream>);

/// An identified connection.
struct Conn {
    id: u64,
    /// Set when this side shut the connection down on purpose (replaced by a
    /// newer incarnation), so its reader's resulting error is not reported.
    retired: AtomicBool,
    /// Set when its reader stopped, so its pinging thread stops too.
    ended: AtomicBool,
    writer: Mutex<Writer>,
}

struct Peer {
    generation: Generation,
    /// Oldest first; sends use the first.
    conns: Vec<Arc<Conn>>,
}

#[derive(Default)]
struct State {
    next_socket: u64,
    /// Every open socket, identified or not, so `close` can shut them all.
    sockets: HashMap<u64, TcpStream>,
    peers: BTreeMap<WorkerId, Peer>,
    /// Accepted sockets whose handshake is under way.
    handshaking: usize,
    /// Whether a connection claiming the frontend's id was ever accepted.
    frontend_seen: bool,
}

impl State {
    fn connections(&self) -> usize {
        self.peers.values().map(|p| p.conns.len()).sum()
    }
}

/// What an endpoint turned away, counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refusals {
    /// Hellos its [`AcceptPolicy`] refused.
    pub hellos: u64,
    /// Sockets closed unread because [`AcceptPolicy::max_handshakes`]
    /// were under way.
    pub overflow: u64,
    /// Accepts that failed for a persistent reason (no descriptors).
    pub accept_failures: u64,
}

#[derive(Default)]
struct Counters {
    hellos: AtomicU64,
    overflow: AtomicU64,
    accept_failures: AtomicU64,
}

/// What the accept loop takes connections from: a listener, or in tests a
/// listener that fails on demand.
trait Accepting: Send + 'static {
    fn accept(&self) -> io::Result<(TcpStream, SocketAddr)>;
}

impl Accepting for TcpListener {
    fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        TcpListener::accept(self)
    }
}

/// The first and the longest wait before retrying an accept that failed
/// for a persistent reason.
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(1));

struct Inner {
    me: WorkerId,
    generation: Generation,
    role: PeerRole,
    liveness: Liveness,
    policy: AcceptPolicy,
    counters: Counters,
    /// The listening address, for log lines.
    listening: SocketAddr,
    tx: Sender<Incoming>,
    /// Dropped by `close`, which wakes every pinging thread at once.
    stop: Mutex<Option<Sender<()>>>,
    stopped: Receiver<()>,
    closed: AtomicBool,
    state: Mutex<State>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

fn transient_accept_error(kind: io::ErrorKind) -> bool {
    matches!(
        kind,
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}

impl Inner {
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    fn report_bad(&self, addr: String, error: String) {
        if !self.is_closed() {
            let _ = self.tx.send(Incoming::BadPeer { addr, error });
        }
    }

    fn track(&self, handle: JoinHandle<()>) {
        let mut threads = self.threads.lock();
        threads.retain(|h| !h.is_finished());
        threads.push(handle);
    }

    /// Accepts until the endpoint closes. A persistent failure (out of
    /// descriptors) is logged once per episode and retried after a backoff
    /// that doubles up to [`ACCEPT_BACKOFF`]'s longest.
    fn accept_loop(self: Arc<Self>, listener: impl Accepting) {
        let mut backoff: Option<Duration> = None;
        loop {
            let accepted = listener.accept();
            if self.is_closed() {
                return;
            }
            let (stream, addr) = match accepted {
                Ok(x) => x,
                Err(e) if transient_accept_error(e.kind()) => continue,
                Err(e) => {
                    self.counters.accept_failures.fetch_add(1, Ordering::SeqCst);
                    let wait = match backoff {
                        None => {
                            let line = format!(
                                "accept failed ({e}); retrying with a backoff, still listening"
                            );
                            eprintln!("handoff-transport: {}: {line}", self.listening);
                            self.report_bad(self.listening.to_string(), line);
                            ACCEPT_BACKOFF.0
                        }
                        Some(w) => (w * 2).min(ACCEPT_BACKOFF.1),
                    };
                    backoff = Some(wait);
                    // Woken early by `close`.
                    let _ = self.stopped.recv_timeout(wait);
                    continue;
                }
            };
            if backoff.take().is_some() {
                eprintln!("handoff-transport: {}: accepting again", self.listening);
            }
            if !self.begin_handshake() {
                self.counters.overflow.fetch_add(1, Ordering::SeqCst);
                let _ = stream.shutdown(Shutdown::Both);
                continue;
            }
            let inner = Arc::clone(&self);
            let spawned = thread::Builder::new()
                .name(format!("tcp-conn-{}", self.me))
                .spawn(move || inner.serve_accepted(stream, addr));
            match spawned {
                Ok(h) => self.track(h),
                Err(e) => {
                    self.end_handshake();
                    self.report_bad(addr.to_string(), format!("no thread: {e}"));
                }
            }
        }
    }

    /// Counts one more accepted socket in its handshake, if the policy
    /// allows another.
    fn begin_handshake(&self) -> bool {
        let mut st = self.state.lock();
        if st.handshaking >= self.policy.max_handshakes {
            return false;
        }
        st.handshaking += 1;
        true
    }

    fn end_handshake(&self) {
        let mut st = self.state.lock();
        st.handshaking = st.handshaking.saturating_sub(1);
    }

    fn serve_accepted(self: Arc<Self>, stream: TcpStream, addr: SocketAddr) {
        let established =
            self.establish(&stream, Direction::Accepted, addr.ip(), HANDSHAKE_TIMEOUT);
        self.end_handshake();
        match established {
            Ok((Some((conn, reader)), hello)) => self.serve(conn, reader, hello.worker, addr),
            // Only a dialled connection is ever already linked.
            Ok((None, _)) => {}
            Err(e) => self.report_bad(addr.to_string(), e.to_string()),
        }
    }

    /// Registers the socket, exchanges `Hello`s and registers the peer, as
    /// the policy decides; `None` when a dialled peer was linked already
    /// (the socket is closed). On failure the socket is shut and forgotten.
    fn establish(
        &self,
        stream: &TcpStream,
        direction: Direction,
        ip: IpAddr,
        deadline: Duration,
    ) -> Result<(Option<Link>, PeerHello), ConnectError> {
        let id = {
            let mut st = self.state.lock();
            if self.is_closed() {
                return Err(ConnectError::Closed);
            }
            let id = st.next_socket;
            st.next_socket += 1;
            st.sockets.insert(id, stream.try_clone()?);
            id
        };
        let result = self
            .handshake(stream, deadline)
            .and_then(|(reader, hello)| {
                let claim = Claim {
                    worker: hello.worker,
                    generation: hello.generation,
                    role: hello.role,
                    direction,
                    ip,
                };
                let conn = self.register(id, &claim, stream)?;
                Ok((conn.map(|c| (c, reader)), hello))
            });
        match &result {
            Err(ConnectError::Rejected(_)) => {
                self.counters.hellos.fetch_add(1, Ordering::SeqCst);
                self.forget(id, None);
            }
            Err(_) | Ok((None, _)) => self.forget(id, None),
            Ok(_) => {}
        }
        result
    }

    fn handshake(
        &self,
        stream: &TcpStream,
        deadline: Duration,
    ) -> Result<(FrameReader<TcpStream>, PeerHello), ConnectError> {
        stream.set_nodelay(true)?;
        let mut hello = Vec::with_capacity(16);
        encode_frame(
            &Frame::Hello {
                worker: self.me,
                generation: self.generation,
                role: self.role,
            },
            &mut hello,
        )
        .map_err(|e| ConnectError::Io(io::Error::other(e.to_string())))?;
        stream.set_write_timeout(Some(deadline))?;
        (&*stream).write_all(&hello)?;
        stream.set_write_timeout(None)?;
        stream.set_read_timeout(Some(deadline))?;
        let mut reader = FrameReader::new(stream.try_clone()?);
        let (worker, generation, role) = reader.read_hello().map_err(ConnectError::Handshake)?;
        // From here on a read that waits this long means a silent peer.
        stream.set_read_timeout(Some(self.liveness.silence_limit))?;
        Ok((
            reader,
            PeerHello {
                worker,
                generation,
                role,
            },
        ))
    }

    /// Registers the connection of `claim` as the policy decides.
    fn register(
        &self,
        id: u64,
        claim: &Claim,
        stream: &TcpStream,
    ) -> Result<Option<Arc<Conn>>, ConnectError> {
        let conn = Arc::new(Conn {
            id,
            retired: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            writer: Mutex::new(Writer {
                stream: stream.try_clone()?,
                buf: Vec::with_capacity(256),
            }),
        });
        let mut guard = self.state.lock();
        let st = &mut *guard;
        if self.is_closed() {
            return Err(ConnectError::Closed);
        }
        let (peer, generation) = (claim.worker, claim.generation);
        let held = Held {
            connected: st.peers.get(&peer).map(|p| p.generation),
            frontend_seen: st.frontend_seen,
            connections: st.connections(),
        };
        let admit = self
            .policy
            .decide(self.me, claim, &held)
            .map_err(ConnectError::Rejected)?;
        if peer == crate::FRONTEND && claim.direction == Direction::Accepted {
            st.frontend_seen = true;
        }
        let up = Incoming::PeerUp { peer, generation };
        match (admit, st.peers.get_mut(&peer)) {
            (Admit::AlreadyLinked, _) => return Ok(None),
            (Admit::Another, Some(p)) => p.conns.push(Arc::clone(&conn)),
            (Admit::Replace, Some(p)) => {
                for old in p.conns.drain(..) {
                    old.retired.store(true, Ordering::SeqCst);
                    if let Some(s) = st.sockets.get(&old.id) {
                        let _ = s.shutdown(Shutdown::Both);
                    }
                }
                p.generation = generation;
                p.conns.push(Arc::clone(&conn));
                let _ = self.tx.send(up);
            }
            // `New` (the policy saw no connected peer).
            _ => {
                st.peers.insert(
                    peer,
                    Peer {
                        generation,
                        conns: vec![Arc::clone(&conn)],
                    },
                );
                let _ = self.tx.send(up);
            }
        }
        Ok(Some(conn))
    }

    /// Writes a [`Frame::Ping`] on `conn` every `ping_every` until the
    /// connection ends or the endpoint closes. A write that fails shuts
    /// the connection, as a failed send does.
    fn ping_loop(&self, conn: &Conn) {
        let mut ping = Vec::with_capacity(8);
        if encode_frame(&Frame::Ping, &mut ping).is_err() {
            return;
        }
        loop {
            match self.stopped.recv_timeout(self.liveness.ping_every) {
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                _ => return,
            }
            if conn.ended.load(Ordering::SeqCst) || self.is_closed() {
                return;
            }
            let w = conn.writer.lock();
            if (&w.stream).write_all(&ping).is_err() {
                let _ = w.stream.shutdown(Shutdown::Both);
                return;
            }
        }
    }

    /// Starts `conn`'s pinging thread.
    fn start_pings(self: &Arc<Self>, conn: &Arc<Conn>) {
        let inner = Arc::clone(self);
        let conn = Arc::clone(conn);
        let spawned = thread::Builder::new()
            .name(format!("tcp-ping-{}", self.me))
            .spawn(move || inner.ping_loop(&conn));
        match spawned {
            Ok(h) => self.track(h),
            // Without pings the peer would see this side as silent: better
            // to say so now than to be dropped later.
            Err(e) => self.report_bad("pinger".into(), format!("no thread: {e}")),
        }
    }

    /// Reads frames until the connection ends (or stays silent for the
    /// silence limit), then forgets it.
    fn serve(
        self: &Arc<Self>,
        conn: Arc<Conn>,
        mut reader: FrameReader<TcpStream>,
        peer: WorkerId,
        addr: SocketAddr,
    ) {
        self.start_pings(&conn);
        let failure = loop {
            match reader.read_frame() {
                Ok(None) | Ok(Some(Frame::Bye)) => break None,
                Ok(Some(Frame::Ping)) => {}
                Ok(Some(Frame::Hello { .. })) => {
                    break Some(
                        DecodeError {
                            offset: reader.frame_start(),
                            kind: DecodeErrorKind::UnexpectedHello,
                        }
                        .to_string(),
                    )
                }
                Ok(Some(frame)) => {
                    if self.tx.send(Incoming::Frame { from: peer, frame }).is_err() {
                        break None;
                    }
                }
                Err(ReadError::Decode(e)) => break Some(e.to_string()),
                Err(ReadError::Io(e))
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    break Some(format!(
                        "silent for {:?} (no frame, no ping): taken for lost",
                        self.liveness.silence_limit
                    ))
                }
                // A reset or shutdown is a lost peer, not a bad one.
                Err(ReadError::Io(_)) => break None,
            }
        };
        conn.ended.store(true, Ordering::SeqCst);
        if let Some(error) = failure {
            if !conn.retired.load(Ordering::SeqCst) {
                self.report_bad(format!("{peer} at {addr}"), error);
            }
        }
        self.forget(conn.id, Some((peer, conn.id)));
    }

    /// Shuts a socket and drops it from the books; `PeerLost` if it was its
    /// peer's last connection.
    fn forget(&self, socket: u64, conn: Option<(WorkerId, u64)>) {
        let mut st = self.state.lock();
        if let Some(s) = st.sockets.remove(&socket) {
            let _ = s.shutdown(Shutdown::Both);
        }
        let Some((peer, id)) = conn else { return };
        let Some(p) = st.peers.get_mut(&peer) else {
            return;
        };
        let before = p.conns.len();
        p.conns.retain(|c| c.id != id);
        if p.conns.len() < before && p.conns.is_empty() {
            st.peers.remove(&peer);
            if !self.is_closed() {
                let _ = self.tx.send(Incoming::PeerLost { peer });
            }
        }
    }
}

/// Connects to the first of `addr`'s addresses that answers within
/// `timeout`, so an unreachable host fails in seconds rather than after the
/// kernel's SYN retries.
fn dial(addr: impl ToSocketAddrs, timeout: Duration) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::InvalidInput, "no address to connect to");
    for a in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Who answered a connection: the peer's `Hello`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerHello {
    /// The peer's worker id.
    pub worker: WorkerId,
    /// Its incarnation.
    pub generation: Generation,
    /// What it serves as.
    pub role: PeerRole,
}

/// Who an endpoint is and how it treats its peers.
struct Me {
    me: WorkerId,
    generation: Generation,
    role: PeerRole,
    liveness: Liveness,
    policy: AcceptPolicy,
}

/// A worker's TCP endpoint: a listener plus its connections.
pub struct TcpEndpoint {
    inner: Arc<Inner>,
    rx: Receiver<Incoming>,
    local_addr: SocketAddr,
    accept: Mutex<Option<JoinHandle<()>>>,
}

impl TcpEndpoint {
    /// Listens on `addr` (use `127.0.0.1:0` for an ephemeral port) as
    /// worker `me` in `generation`, stating no role in its hellos.
    pub fn bind(
        me: WorkerId,
        generation: Generation,
        addr: impl ToSocketAddrs,
    ) -> io::Result<TcpEndpoint> {
        TcpEndpoint::bind_as(me, generation, PeerRole::Any, addr)
    }

    /// [`TcpEndpoint::bind`], announcing `role` in every hello so that
    /// whoever connects can check it is talking to what it expects.
    pub fn bind_as(
        me: WorkerId,
        generation: Generation,
        role: PeerRole,
        addr: impl ToSocketAddrs,
    ) -> io::Result<TcpEndpoint> {
        TcpEndpoint::bind_with(me, generation, role, Liveness::default(), addr)
    }

    /// [`TcpEndpoint::bind_as`] with its own [`Liveness`] (tests use a
    /// short silence limit).
    pub fn bind_with(
        me: WorkerId,
        generation: Generation,
        role: PeerRole,
        liveness: Liveness,
        addr: impl ToSocketAddrs,
    ) -> io::Result<TcpEndpoint> {
        TcpEndpoint::bind_policy(
            me,
            generation,
            role,
            liveness,
            AcceptPolicy::default(),
            addr,
        )
    }

    /// [`TcpEndpoint::bind_with`] under `policy` (an engine rank's:
    /// [`AcceptPolicy::engine`]).
    pub fn bind_policy(
        me: WorkerId,
        generation: Generation,
        role: PeerRole,
        liveness: Liveness,
        policy: AcceptPolicy,
        addr: impl ToSocketAddrs,
    ) -> io::Result<TcpEndpoint> {
        let listener = TcpListener::bind(addr)?;
        let local_addr = listener.local_addr()?;
        let me = Me {
            me,
            generation,
            role,
            liveness,
            policy,
        };
        TcpEndpoint::start(me, listener, local_addr)
    }

    /// Starts the endpoint's accept loop on `listener` (at `local_addr`).
    fn start(m: Me, listener: impl Accepting, local_addr: SocketAddr) -> io::Result<TcpEndpoint> {
        let Me {
            me,
            generation,
            role,
            liveness,
            policy,
        } = m;
        let (tx, rx) = crossbeam_channel::unbounded();
        let (stop, stopped) = crossbeam_channel::bounded(0);
        let inner = Arc::new(Inner {
            me,
            generation,
            role,
            liveness,
            policy,
            counters: Counters::default(),
            listening: local_addr,
            tx,
            stop: Mutex::new(Some(stop)),
            stopped,
            closed: AtomicBool::new(false),
            state: Mutex::new(State::default()),
            threads: Mutex::new(Vec::new()),
        });
        let acceptor = Arc::clone(&inner);
        let accept = thread::Builder::new()
            .name(format!("tcp-accept-{me}"))
            .spawn(move || acceptor.accept_loop(listener))?;
        Ok(TcpEndpoint {
            inner,
            rx,
            local_addr,
            accept: Mutex::new(Some(accept)),
        })
    }

    /// The address peers connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The generation `peer` is connected in, if it is connected.
    pub fn peer_generation(&self, peer: WorkerId) -> Option<Generation> {
        self.inner
            .state
            .lock()
            .peers
            .get(&peer)
            .map(|p| p.generation)
    }

    /// What this endpoint turned away so far.
    pub fn refusals(&self) -> Refusals {
        let c = &self.inner.counters;
        Refusals {
            hellos: c.hellos.load(Ordering::SeqCst),
            overflow: c.overflow.load(Ordering::SeqCst),
            accept_failures: c.accept_failures.load(Ordering::SeqCst),
        }
    }

    /// Identified connections held now.
    pub fn connections(&self) -> usize {
        self.inner.state.lock().connections()
    }

    /// Connects to the endpoint at `addr` and waits for its `Hello`
    /// (at most [`HANDSHAKE_TIMEOUT`] for each). Returns who answered; an
    /// [`Incoming::PeerUp`] is queued too if that peer (in that generation)
    /// is new. If the other side refuses this endpoint (it already knows a
    /// newer incarnation of it), it hangs up after the handshake: this side
    /// then sees `PeerUp` followed by `PeerLost`.
    pub fn connect(
        &self,
        addr: impl ToSocketAddrs,
    ) -> Result<(WorkerId, Generation), ConnectError> {
        self.connect_peer(addr).map(|h| (h.worker, h.generation))
    }

    /// [`TcpEndpoint::connect`], returning the whole hello the peer sent
    /// (its role included).
    pub fn connect_peer(&self, addr: impl ToSocketAddrs) -> Result<PeerHello, ConnectError> {
        self.connect_within(addr, HANDSHAKE_TIMEOUT)
    }

    /// [`TcpEndpoint::connect_peer`] giving up after `timeout` to connect
    /// and as long again for the peer's hello. Dialling a peer this
    /// endpoint is linked to already (in the same generation, under
    /// [`DuplicateRule::Refuse`]) returns its hello and keeps the one
    /// connection.
    pub fn connect_within(
        &self,
        addr: impl ToSocketAddrs,
        timeout: Duration,
    ) -> Result<PeerHello, ConnectError> {
        if self.inner.is_closed() {
            return Err(ConnectError::Closed);
        }
        let stream = dial(addr, timeout)?;
        let remote = stream.peer_addr()?;
        let (conn, hello) =
            self.inner
                .establish(&stream, Direction::Dialled, remote.ip(), timeout)?;
        let Some((conn, reader)) = conn else {
            return Ok(hello);
        };
        let peer = hello.worker;
        let inner = Arc::clone(&self.inner);
        let conn_id = conn.id;
        let spawned = thread::Builder::new()
            .name(format!("tcp-conn-{}", self.inner.me))
            .spawn(move || inner.serve(conn, reader, peer, remote));
        match spawned {
            Ok(h) => self.inner.track(h),
            Err(e) => {
                self.inner.forget(conn_id, Some((peer, conn_id)));
                return Err(ConnectError::Io(e));
            }
        }
        Ok(hello)
    }

    fn first_conn(&self, to: WorkerId) -> Option<Arc<Conn>> {
        let st = self.inner.state.lock();
        st.peers.get(&to).and_then(|p| p.conns.first().cloned())
    }

    fn say_bye(&self) {
        let mut bye = Vec::with_capacity(8);
        if encode_frame(&Frame::Bye, &mut bye).is_err() {
            return;
        }
        let conns: Vec<Arc<Conn>> = {
            let st = self.inner.state.lock();
            st.peers
                .values()
                .flat_map(|p| p.conns.iter().cloned())
                .collect()
        };
        for conn in conns {
            // A sender blocked on a full socket holds the lock; that peer
            // learns of the close from the shutdown instead.
            if let Some(w) = conn.writer.try_lock() {
                let _ = w.stream.set_write_timeout(Some(BYE_TIMEOUT));
                let _ = (&w.stream).write_all(&bye);
            }
        }
    }
}

impl Transport for TcpEndpoint {
    fn me(&self) -> WorkerId {
        self.inner.me
    }

    fn generation(&self) -> Generation {
        self.inner.generation
    }

    fn send(&self, to: WorkerId, frame: Frame) -> Result<(), SendError> {
        if frame.is_control() {
            return Err(SendError::ControlFrame(frame.name()));
        }
        if self.inner.is_closed() {
            return Err(SendError::Closed);
        }
        let conn = self.first_conn(to).ok_or(SendError::UnknownPeer(to))?;
        let mut guard = conn.writer.lock();
        let w = &mut *guard;
        w.buf.clear();
        encode_frame(&frame, &mut w.buf).map_err(SendError::Encode)?;
        if let Err(e) = (&w.stream).write_all(&w.buf) {
            // The reader sees the shutdown and reports PeerLost.
            let _ = w.stream.shutdown(Shutdown::Both);
            return Err(SendError::Lost {
                peer: to,
                reason: e.to_string(),
            });
        }
        Ok(())
    }

    fn incoming(&self) -> &Receiver<Incoming> {
        &self.rx
    }

    fn close(&self) {
        if self.inner.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(accept) = self.accept.lock().take() {
            // Wake the blocked accept with a connection of our own; it then
            // sees `closed`. An unspecified bind address is reached over
            // loopback.
            let mut wake = self.local_addr;
            if wake.ip().is_unspecified() {
                wake.set_ip(match wake {
                    SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                    SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
                });
            }
            if TcpStream::connect_timeout(&wake, HANDSHAKE_TIMEOUT).is_ok() {
                let _ = accept.join();
            }
        }
        self.say_bye();
        // Wakes every pinging thread, which then sees `closed`.
        drop(self.inner.stop.lock().take());
        {
            let st = self.inner.state.lock();
            for s in st.sockets.values() {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        loop {
            let handles = std::mem::take(&mut *self.inner.threads.lock());
            if handles.is_empty() {
                break;
            }
            for h in handles {
                let _ = h.join();
            }
        }
    }
}

impl Drop for TcpEndpoint {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod policy_tests;
#[cfg(test)]
mod tests;
