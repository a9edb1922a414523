use super::*;
use crate::frame::samples::{every_frame, handoff};
use std::io::Read;
use std::time::Instant;

const WAIT: Duration = Duration::from_secs(5);

fn bind(w: u32, g: u32) -> TcpEndpoint {
    TcpEndpoint::bind(WorkerId(w), Generation(g), "127.0.0.1:0").expect("bind loopback")
}

fn next(ep: &TcpEndpoint) -> Incoming {
    ep.incoming().recv_timeout(WAIT).expect("an incoming")
}

fn up(w: u32, g: u32) -> Incoming {
    Incoming::PeerUp {
        peer: WorkerId(w),
        generation: Generation(g),
    }
}

/// Bytes of our Hello the server sends first, read and checked.
fn read_server_hello(raw: &mut TcpStream, want: WorkerId) {
    raw.set_read_timeout(Some(WAIT)).unwrap();
    let mut reader = FrameReader::new(&mut *raw);
    let (w, _, _) = reader.read_hello().expect("server hello");
    assert_eq!(w, want);
}

fn read_to_eof(raw: &mut TcpStream) -> Vec<u8> {
    raw.set_read_timeout(Some(WAIT)).unwrap();
    let mut rest = Vec::new();
    match raw.read_to_end(&mut rest) {
        Ok(_) => rest,
        // A reset is as good as an EOF: the server hung up.
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => rest,
        Err(e) => panic!("server did not hang up: {e}"),
    }
}

#[test]
fn hello_both_ways_and_every_frame_kind_round_trips() {
    let a = bind(1, 0);
    let b = bind(2, 7);
    assert_eq!(
        a.connect(b.local_addr()).unwrap(),
        (WorkerId(2), Generation(7))
    );
    assert_eq!(next(&a), up(2, 7));
    assert_eq!(next(&b), up(1, 0));
    let data: Vec<Frame> = every_frame()
        .into_iter()
        .filter(|f| !f.is_control())
        .collect();
    for f in &data {
        a.send(WorkerId(2), f.clone()).unwrap();
        b.send(WorkerId(1), f.clone()).unwrap();
    }
    for f in &data {
        assert_eq!(
            next(&b),
            Incoming::Frame {
                from: WorkerId(1),
                frame: f.clone()
            }
        );
        assert_eq!(
            next(&a),
            Incoming::Frame {
                from: WorkerId(2),
                frame: f.clone()
            }
        );
    }
}

#[test]
fn handoff_facts_flow_both_ways_in_order() {
    let a = bind(1, 0);
    let b = bind(2, 0);
    b.connect(a.local_addr()).unwrap();
    assert_eq!(next(&a), up(2, 0));
    assert_eq!(next(&b), up(1, 0));
    for i in 0..500 {
        a.send(WorkerId(2), Frame::Handoff(handoff(i))).unwrap();
        b.send(WorkerId(1), Frame::Handoff(handoff(1000 + i)))
            .unwrap();
    }
    for i in 0..500 {
        assert_eq!(
            next(&b),
            Incoming::Frame {
                from: WorkerId(1),
                frame: Frame::Handoff(handoff(i))
            }
        );
        assert_eq!(
            next(&a),
            Incoming::Frame {
                from: WorkerId(2),
                frame: Frame::Handoff(handoff(1000 + i))
            }
        );
    }
}

#[test]
fn control_frames_unknown_peers_and_closed_endpoints_are_refused() {
    let a = bind(1, 0);
    assert_eq!(
        a.send(
            WorkerId(1),
            Frame::Hello {
                worker: WorkerId(1),
                generation: Generation(0),
                role: PeerRole::Any,
            }
        ),
        Err(SendError::ControlFrame("Hello"))
    );
    assert_eq!(
        a.send(WorkerId(5), Frame::Handoff(handoff(1))),
        Err(SendError::UnknownPeer(WorkerId(5)))
    );
    a.close();
    assert_eq!(
        a.send(WorkerId(5), Frame::Handoff(handoff(1))),
        Err(SendError::Closed)
    );
    assert!(matches!(
        a.connect("127.0.0.1:1"),
        Err(ConnectError::Closed)
    ));
}

#[test]
fn garbage_is_disconnected_and_the_listener_keeps_serving() {
    let a = bind(1, 0);
    let mut raw = TcpStream::connect(a.local_addr()).unwrap();
    // A plausible length with a body that is no frame.
    raw.write_all(&[0, 0, 0, 3, 0xff, 0xff, 0xff]).unwrap();
    match next(&a) {
        Incoming::BadPeer { error, .. } => assert!(error.contains("bad 3-byte"), "{error}"),
        other => panic!("unexpected {other:?}"),
    }
    read_server_hello(&mut raw, WorkerId(1));
    assert!(read_to_eof(&mut raw).is_empty());

    let b = bind(2, 0);
    b.connect(a.local_addr()).unwrap();
    assert_eq!(next(&a), up(2, 0));
    b.send(WorkerId(1), Frame::Handoff(handoff(3))).unwrap();
    assert_eq!(
        next(&a),
        Incoming::Frame {
            from: WorkerId(2),
            frame: Frame::Handoff(handoff(3))
        }
    );
}

#[test]
fn an_oversize_header_is_refused_promptly() {
    let a = bind(1, 0);
    let mut raw = TcpStream::connect(a.local_addr()).unwrap();
    let started = Instant::now();
    // Claims 2 GiB and never sends it: reading it would wait forever,
    // reserving it would allocate 2 GiB. Both must be avoided.
    raw.write_all(&0x8000_0000u32.to_be_bytes()).unwrap();
    match next(&a) {
        Incoming::BadPeer { error, .. } => {
            assert!(error.contains("2147483648 exceeds"), "{error}")
        }
        other => panic!("unexpected {other:?}"),
    }
    read_server_hello(&mut raw, WorkerId(1));
    assert!(read_to_eof(&mut raw).is_empty());
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn garbage_from_an_identified_peer_is_bad_then_lost() {
    let a = bind(1, 0);
    let mut raw = TcpStream::connect(a.local_addr()).unwrap();
    let mut hello = Vec::new();
    encode_frame(
        &Frame::Hello {
            worker: WorkerId(9),
            generation: Generation(2),
            role: PeerRole::Any,
        },
        &mut hello,
    )
    .unwrap();
    raw.write_all(&hello).unwrap();
    assert_eq!(next(&a), up(9, 2));
    raw.write_all(&u32::MAX.to_be_bytes()).unwrap();
    match next(&a) {
        Incoming::BadPeer { addr, error } => {
            assert!(addr.starts_with("w9 at "), "{addr}");
            assert!(
                error.starts_with(&format!("at byte {}", hello.len())),
                "{error}"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(next(&a), Incoming::PeerLost { peer: WorkerId(9) });
}

#[test]
fn a_first_frame_other_than_hello_is_refused() {
    let a = bind(1, 0);
    let mut raw = TcpStream::connect(a.local_addr()).unwrap();
    let mut bytes = Vec::new();
    encode_frame(&Frame::Handoff(handoff(1)), &mut bytes).unwrap();
    raw.write_all(&bytes).unwrap();
    match next(&a) {
        Incoming::BadPeer { error, .. } => assert!(error.contains("not Hello"), "{error}"),
        other => panic!("unexpected {other:?}"),
    }
    assert!(a.incoming().is_empty());
}

#[test]
fn a_second_hello_is_a_protocol_error() {
    let a = bind(1, 0);
    let mut raw = TcpStream::connect(a.local_addr()).unwrap();
    let mut bytes = Vec::new();
    let hello = Frame::Hello {
        worker: WorkerId(4),
        generation: Generation(0),
        role: PeerRole::Any,
    };
    encode_frame(&hello, &mut bytes).unwrap();
    encode_frame(&hello, &mut bytes).unwrap();
    raw.write_all(&bytes).unwrap();
    assert_eq!(next(&a), up(4, 0));
    match next(&a) {
        Incoming::BadPeer { error, .. } => assert!(error.contains("Hello after"), "{error}"),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(next(&a), Incoming::PeerLost { peer: WorkerId(4) });
}

#[test]
fn peer_drop_and_close_are_peer_lost() {
    let a = bind(1, 0);
    let b = bind(2, 0);
    let c = bind(3, 0);
    b.connect(a.local_addr()).unwrap();
    assert_eq!(next(&a), up(2, 0));
    a.connect(c.local_addr()).unwrap();
    assert_eq!(next(&a), up(3, 0));
    drop(b);
    assert_eq!(next(&a), Incoming::PeerLost { peer: WorkerId(2) });
    c.close();
    assert_eq!(next(&a), Incoming::PeerLost { peer: WorkerId(3) });
    assert_eq!(
        a.send(WorkerId(2), Frame::Handoff(handoff(1))),
        Err(SendError::UnknownPeer(WorkerId(2)))
    );
    assert!(a.incoming().is_empty());
}

#[test]
fn a_raw_peer_vanishing_is_peer_lost() {
    let a = bind(1, 0);
    let mut raw = TcpStream::connect(a.local_addr()).unwrap();
    let mut hello = Vec::new();
    encode_frame(
        &Frame::Hello {
            worker: WorkerId(6),
            generation: Generation(0),
            role: PeerRole::Any,
        },
        &mut hello,
    )
    .unwrap();
    raw.write_all(&hello).unwrap();
    assert_eq!(next(&a), up(6, 0));
    drop(raw);
    assert_eq!(next(&a), Incoming::PeerLost { peer: WorkerId(6) });
}

#[test]
fn a_restarted_peer_is_announced_with_its_new_generation() {
    let a = bind(1, 0);
    let old = bind(2, 1);
    old.connect(a.local_addr()).unwrap();
    assert_eq!(next(&a), up(2, 1));
    // The new incarnation arrives while the old connection is still up:
    // it replaces it, with no PeerLost in between.
    let new = bind(2, 2);
    assert_eq!(
        new.connect(a.local_addr()).unwrap(),
        (WorkerId(1), Generation(0))
    );
    assert_eq!(next(&a), up(2, 2));
    new.send(WorkerId(1), Frame::Handoff(handoff(8))).unwrap();
    assert_eq!(
        next(&a),
        Incoming::Frame {
            from: WorkerId(2),
            frame: Frame::Handoff(handoff(8))
        }
    );
    // The old incarnation was cut off.
    assert_eq!(next(&old), up(1, 0));
    assert_eq!(next(&old), Incoming::PeerLost { peer: WorkerId(1) });
    // An older incarnation cannot come back.
    match old.connect(a.local_addr()) {
        Ok(_) | Err(ConnectError::Closed) => {}
        Err(e) => panic!("the connecting side learns only through the hang-up: {e}"),
    }
    match next(&a) {
        Incoming::BadPeer { error, .. } => assert!(error.contains("older"), "{error}"),
        other => panic!("unexpected {other:?}"),
    }
    // After the old incarnation is gone entirely, a later one reconnects.
    drop(new);
    assert_eq!(next(&a), Incoming::PeerLost { peer: WorkerId(2) });
    let newer = bind(2, 3);
    newer.connect(a.local_addr()).unwrap();
    assert_eq!(next(&a), up(2, 3));
}

#[test]
fn dialing_each_other_keeps_one_peer_up() {
    let a = bind(1, 0);
    let b = bind(2, 0);
    a.connect(b.local_addr()).unwrap();
    b.connect(a.local_addr()).unwrap();
    assert_eq!(next(&a), up(2, 0));
    assert_eq!(next(&b), up(1, 0));
    for i in 0..10 {
        a.send(WorkerId(2), Frame::Handoff(handoff(i))).unwrap();
    }
    for i in 0..10 {
        assert_eq!(
            next(&b),
            Incoming::Frame {
                from: WorkerId(1),
                frame: Frame::Handoff(handoff(i))
            }
        );
    }
    drop(b);
    assert_eq!(next(&a), Incoming::PeerLost { peer: WorkerId(2) });
    assert!(a
        .incoming()
        .recv_timeout(Duration::from_millis(100))
        .is_err());
}

#[test]
fn connecting_to_oneself_is_rejected() {
    let a = bind(1, 0);
    assert!(matches!(
        a.connect(a.local_addr()),
        Err(ConnectError::Rejected(_))
    ));
}

#[test]
fn close_returns_with_idle_and_silent_connections_open() {
    let a = bind(1, 0);
    let b = bind(2, 0);
    b.connect(a.local_addr()).unwrap();
    // Says nothing: its handshake thread is blocked in a read.
    let _silent = TcpStream::connect(a.local_addr()).unwrap();
    assert_eq!(next(&a), up(2, 0));
    assert_eq!(next(&b), up(1, 0));
    let started = Instant::now();
    a.close();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(a.inner.threads.lock().is_empty());
    assert_eq!(next(&b), Incoming::PeerLost { peer: WorkerId(1) });
}

fn bind_quick(w: u32) -> TcpEndpoint {
    let quick = Liveness {
        ping_every: Duration::from_millis(50),
        silence_limit: Duration::from_millis(500),
    };
    TcpEndpoint::bind_with(
        WorkerId(w),
        Generation(0),
        PeerRole::Any,
        quick,
        "127.0.0.1:0",
    )
    .expect("bind loopback")
}

#[test]
fn a_silent_peer_is_lost_after_the_silence_limit_and_pings_reach_it() {
    let a = bind_quick(1);
    let mut raw = TcpStream::connect(a.local_addr()).unwrap();
    let mut hello = Vec::new();
    encode_frame(
        &Frame::Hello {
            worker: WorkerId(5),
            generation: Generation(0),
            role: PeerRole::Any,
        },
        &mut hello,
    )
    .unwrap();
    raw.write_all(&hello).unwrap();
    read_server_hello(&mut raw, WorkerId(1));
    let started = Instant::now();
    assert_eq!(next(&a), up(5, 0));
    // The endpoint pings even a peer that says nothing.
    let mut reader = FrameReader::new(&mut raw);
    assert_eq!(reader.read_frame().expect("a ping"), Some(Frame::Ping));
    // Hung: it never answers. Taken for lost, with why, then lost.
    match next(&a) {
        Incoming::BadPeer { error, .. } => assert!(error.contains("silent"), "{error}"),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(next(&a), Incoming::PeerLost { peer: WorkerId(5) });
    assert!(started.elapsed() >= Duration::from_millis(400));
}

#[test]
fn idle_peers_that_ping_stay_up() {
    let a = bind_quick(1);
    let b = bind_quick(2);
    a.connect(b.local_addr()).unwrap();
    assert_eq!(next(&a), up(2, 0));
    assert_eq!(next(&b), up(1, 0));
    // Several silence limits with no frame but pings.
    std::thread::sleep(Duration::from_millis(2000));
    assert!(a.incoming().is_empty(), "{:?}", a.incoming().try_recv());
    assert!(b.incoming().is_empty(), "{:?}", b.incoming().try_recv());
    a.send(WorkerId(2), Frame::Handoff(handoff(1))).unwrap();
    assert_eq!(
        next(&b),
        Incoming::Frame {
            from: WorkerId(1),
            frame: Frame::Handoff(handoff(1))
        }
    );
    // Pings are not data: sending one is refused like any control frame.
    assert_eq!(
        a.send(WorkerId(2), Frame::Ping),
        Err(SendError::ControlFrame("Ping"))
    );
}
