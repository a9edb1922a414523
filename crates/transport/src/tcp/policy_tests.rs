//! The accept policy over real sockets: each refused hello kind, the
//! bounds, and an accept loop that outlives descriptor exhaustion.

use super::*;
use crate::FRONTEND;
use std::sync::atomic::AtomicUsize;
use std::time::Instant;

const WAIT: Duration = Duration::from_secs(5);

/// Rank 0 of a prefill engine whose rank 1 is `WorkerId(11)`.
fn rank(policy: AcceptPolicy) -> TcpEndpoint {
    TcpEndpoint::bind_policy(
        WorkerId(10),
        Generation(3),
        PeerRole::Prefill,
        Liveness::default(),
        policy,
        "127.0.0.1:0",
    )
    .expect("bind loopback")
}

fn prefill_policy() -> AcceptPolicy {
    AcceptPolicy::engine(vec![WorkerId(11)], vec![PeerRole::Decode])
}

fn peer(w: u32, g: u32, role: PeerRole) -> TcpEndpoint {
    TcpEndpoint::bind_as(WorkerId(w), Generation(g), role, "127.0.0.1:0").expect("bind")
}

/// A raw client: says `hello`, then reports whether the endpoint hung up
/// (refused) within a second.
fn raw_hello(at: SocketAddr, w: WorkerId, g: Generation, role: PeerRole) -> (TcpStream, bool) {
    let mut raw = TcpStream::connect(at).unwrap();
    let mut hello = Vec::new();
    encode_frame(
        &Frame::Hello {
            worker: w,
            generation: g,
            role,
        },
        &mut hello,
    )
    .unwrap();
    raw.write_all(&hello).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut reader = FrameReader::new(raw.try_clone().unwrap());
    reader.read_hello().expect("the endpoint's hello");
    let hung_up = match reader.read_frame() {
        Ok(None) | Ok(Some(Frame::Bye)) => true,
        Ok(Some(_)) => false,
        Err(ReadError::Io(e)) => !matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ),
        Err(_) => true,
    };
    (raw, hung_up)
}

/// A decode engine's rank: takes no peer but its driver.
fn decode_rank(w: u32, g: u32) -> TcpEndpoint {
    TcpEndpoint::bind_policy(
        WorkerId(w),
        Generation(g),
        PeerRole::Decode,
        Liveness::default(),
        AcceptPolicy::engine(Vec::new(), Vec::new()),
        "127.0.0.1:0",
    )
    .expect("bind")
}

fn ups(ep: &TcpEndpoint) -> Vec<WorkerId> {
    ep.incoming()
        .try_iter()
        .filter_map(|i| match i {
            Incoming::PeerUp { peer, .. } => Some(peer),
            _ => None,
        })
        .collect()
}

#[test]
fn a_rank_refuses_its_own_ids_a_second_frontend_and_foreign_roles() {
    let ep = rank(prefill_policy());
    let at = ep.local_addr();
    // The driver first: accepted once.
    let (_driver, refused) = raw_hello(at, FRONTEND, Generation(3), PeerRole::Frontend);
    assert!(!refused, "the first frontend is the engine's own driver");
    let max = Generation(u32::MAX);
    for (w, role) in [
        (FRONTEND, PeerRole::Frontend),
        (WorkerId(10), PeerRole::Decode),
        (WorkerId(11), PeerRole::Decode),
        (WorkerId(7), PeerRole::Prefill),
        (WorkerId(7), PeerRole::Aggregated),
    ] {
        let (_s, refused) = raw_hello(at, w, max, role);
        assert!(refused, "{w} as {role} must be refused");
    }
    assert_eq!(ep.refusals().hellos, 5);
    assert_eq!(ups(&ep), vec![FRONTEND], "no refused claim was announced");
    // A real decode still connects.
    let d = peer(7, 1, PeerRole::Decode);
    assert_eq!(d.connect_peer(at).unwrap().worker, WorkerId(10));
    let deadline = Instant::now() + WAIT;
    while ep.peer_generation(WorkerId(7)).is_none() {
        assert!(Instant::now() < deadline, "the decode is never registered");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_connected_id_is_not_replaced_by_a_higher_generation_claim() {
    let ep = rank(prefill_policy());
    let at = ep.local_addr();
    let d = decode_rank(7, 1);
    d.connect_peer(at).unwrap();
    let (_s, refused) = raw_hello(at, WorkerId(7), Generation(u32::MAX), PeerRole::Decode);
    assert!(refused);
    assert_eq!(ep.peer_generation(WorkerId(7)), Some(Generation(1)));
    // The real peer's link still carries frames.
    d.send(
        WorkerId(10),
        Frame::Handoff(crate::frame::samples::handoff(1)),
    )
    .unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        match ep.incoming().recv_timeout(WAIT).expect("an incoming") {
            Incoming::Frame { from, .. } => {
                assert_eq!(from, WorkerId(7));
                break;
            }
            Incoming::PeerLost { peer } => panic!("{peer} was cut off"),
            _ => assert!(Instant::now() < deadline),
        }
    }
    // Dialling it again keeps the one link.
    assert_eq!(d.connect_peer(at).unwrap().worker, WorkerId(10));
    assert_eq!(d.connections(), 1);
    // Once its connection is lost, a restarted incarnation is accepted.
    drop(d);
    let deadline = Instant::now() + WAIT;
    while ep.peer_generation(WorkerId(7)).is_some() {
        assert!(Instant::now() < deadline, "the closed peer is never lost");
        std::thread::sleep(Duration::from_millis(10));
    }
    let d2 = decode_rank(7, 2);
    d2.connect_peer(at).unwrap();
    let deadline = Instant::now() + WAIT;
    while ep.peer_generation(WorkerId(7)) != Some(Generation(2)) {
        assert!(Instant::now() < deadline, "the restarted peer is refused");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn connections_and_handshakes_are_bounded() {
    let ep = rank(AcceptPolicy {
        max_connections: 2,
        max_handshakes: 2,
        ..prefill_policy()
    });
    let at = ep.local_addr();
    let a = peer(1, 0, PeerRole::Decode);
    let b = peer(2, 0, PeerRole::Decode);
    let c = peer(3, 0, PeerRole::Decode);
    a.connect_peer(at).unwrap();
    b.connect_peer(at).unwrap();
    // The dialler hears the hello, then the hang-up.
    let _ = c.connect_within(at, Duration::from_secs(2));
    let deadline = Instant::now() + WAIT;
    while ep.refusals().hellos == 0 {
        assert!(Instant::now() < deadline, "the third peer is never refused");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(ep.connections(), 2);
    assert_eq!(ep.peer_generation(WorkerId(3)), None);
    // Silent sockets hold the two handshake slots; a third is closed
    // unread, and the endpoint keeps answering once they go.
    let s1 = TcpStream::connect(at).unwrap();
    let s2 = TcpStream::connect(at).unwrap();
    let deadline = Instant::now() + WAIT;
    let mut extra = Vec::new();
    while ep.refusals().overflow == 0 {
        assert!(Instant::now() < deadline, "no socket was turned away");
        extra.push(TcpStream::connect(at).unwrap());
        std::thread::sleep(Duration::from_millis(20));
    }
    drop((s1, s2, extra));
    drop(a);
    let deadline = Instant::now() + WAIT;
    while ep.peer_generation(WorkerId(3)).is_none() {
        assert!(Instant::now() < deadline, "never accepted again");
        let _ = c.connect_within(at, Duration::from_secs(1));
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A listener that fails as if out of descriptors while `fail` is above
/// zero.
struct Exhausted {
    listener: TcpListener,
    fail: Arc<AtomicUsize>,
}

impl Accepting for Exhausted {
    fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        if self.fail.load(Ordering::SeqCst) > 0 {
            self.fail.fetch_sub(1, Ordering::SeqCst);
            // EMFILE: "Too many open files".
            return Err(io::Error::from_raw_os_error(24));
        }
        self.listener.accept()
    }
}

#[test]
fn the_accept_loop_outlives_descriptor_exhaustion_and_says_so() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = listener.local_addr().unwrap();
    let fail = Arc::new(AtomicUsize::new(6));
    let me = Me {
        me: WorkerId(10),
        generation: Generation(0),
        role: PeerRole::Prefill,
        liveness: Liveness::default(),
        policy: prefill_policy(),
    };
    let ep = TcpEndpoint::start(
        me,
        Exhausted {
            listener,
            fail: fail.clone(),
        },
        at,
    )
    .unwrap();
    // Said once, not six times.
    match ep.incoming().recv_timeout(WAIT).expect("a report") {
        Incoming::BadPeer { error, .. } => assert!(error.contains("still listening"), "{error}"),
        other => panic!("{other:?}"),
    }
    let d = peer(7, 0, PeerRole::Decode);
    assert_eq!(d.connect_peer(at).unwrap().worker, WorkerId(10));
    assert_eq!(fail.load(Ordering::SeqCst), 0);
    assert_eq!(ep.refusals().accept_failures, 6);
    assert!(ep
        .incoming()
        .try_iter()
        .all(|i| !matches!(i, Incoming::BadPeer { .. })));
    let started = Instant::now();
    ep.close();
    assert!(started.elapsed() < Duration::from_secs(3));
}
