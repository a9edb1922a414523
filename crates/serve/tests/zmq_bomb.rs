//! The ZMQ sockets refuse a frame whose header claims more than they
//! accept, before allocating it: a ZMTP greeting followed by a frame header
//! claiming 2^62 bytes, with no handshake, used to abort the process (the
//! `zeromq` crate allocated the claimed size). Now the sender is
//! disconnected and the sockets go on serving: a subscriber still gets
//! events, the replay socket still answers.

mod common;

use handoff_serve::kv_events::zmq::{KvPublishers, MAX_INBOUND_BYTES};
use handoff_serve::WireEvent;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use zeromq::{Socket, SocketRecv};

/// A ZMTP 3.0 greeting with the NULL mechanism (RFC 23: signature, version,
/// mechanism padded to 20 bytes, as-server, filler).
fn greeting() -> Vec<u8> {
    let mut g = vec![0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 3, 0];
    let mut mechanism = b"NULL".to_vec();
    mechanism.resize(20, 0);
    g.extend_from_slice(&mechanism);
    g.push(0);
    g.resize(64, 0);
    g
}

/// Sends the greeting and a long frame header (`flags`: 0x02 a message,
/// 0x06 a command) claiming `size` bytes to `endpoint`, then reads until
/// the socket closes it; panics if it is still open after 10 s.
fn bomb(endpoint: &str, flags: u8, size: u64) {
    let addr = endpoint.trim_start_matches("tcp://");
    let mut s = TcpStream::connect(addr).expect("connect");
    let mut packet = greeting();
    packet.push(flags);
    packet.extend_from_slice(&size.to_be_bytes());
    s.write_all(&packet).expect("send the bomb");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            // The socket's own greeting, then the close.
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) => {
                return
            }
            Err(e) => panic!("{endpoint}: still connected after the bomb ({e})"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_claiming_2_pow_62_bytes_disconnects_its_sender_only() {
    let ep = common::kv_endpoints(1);
    let publishers = KvPublishers::start_keeping(&ep, 1_000).await.expect("bind");
    let (publish, replay) = (ep.publish[0].clone(), ep.replay[0].clone());
    tokio::task::spawn_blocking(move || {
        for endpoint in [&publish, &replay] {
            for flags in [0x02, 0x06] {
                bomb(endpoint, flags, 1 << 62);
                // One byte over the limit is refused the same way.
                bomb(endpoint, flags, MAX_INBOUND_BYTES as u64 + 1);
            }
        }
    })
    .await
    .expect("every bomb's sender was disconnected");

    // A normal subscriber still gets events (published until one arrives:
    // a subscription takes a moment to reach the publisher).
    let mut sub = zeromq::SubSocket::new();
    sub.connect(&ep.publish[0]).await.expect("connect");
    sub.subscribe("").await.expect("subscribe");
    let deadline = Instant::now() + Duration::from_secs(10);
    let got = loop {
        publishers.publish(0, 1.0, &[WireEvent::AllBlocksCleared]);
        match tokio::time::timeout(Duration::from_millis(100), sub.recv()).await {
            Ok(Ok(m)) => break m.into_vec(),
            _ => assert!(Instant::now() < deadline, "no event after the bombs"),
        }
    };
    assert_eq!(got.len(), 3, "[topic, seq, payload]");
    // And the replay socket still answers.
    assert!(!common::replay_batches(&ep.replay[0]).await.is_empty());
}

/// A peer that completes the handshake and then streams parts of one
/// message without end (libzmq would keep every part until the last) is
/// closed after a few parts, and the sockets go on answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_parts_of_one_message_disconnect_their_sender() {
    let ep = common::kv_endpoints(1);
    let _publishers = KvPublishers::start_keeping(&ep, 10).await.expect("bind");
    let replay = ep.replay[0].clone();
    let sent = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(replay.trim_start_matches("tcp://")).expect("connect");
        s.write_all(&greeting()).expect("greeting");
        let ready = b"\x05READY\x0bSocket-Type\x00\x00\x00\x06DEALER";
        let mut cmd = vec![0x04, ready.len() as u8];
        cmd.extend_from_slice(ready);
        s.write_all(&cmd).expect("ready");
        let mut part = vec![0x03];
        part.extend_from_slice(&4000u64.to_be_bytes());
        part.resize(part.len() + 4000, b'x');
        // At most 40 MB; the guard closes after its ninth part.
        (0..10_000)
            .take_while(|_| s.write_all(&part).is_ok())
            .count()
    })
    .await
    .expect("joined");
    assert!(sent < 10_000, "still accepted after {sent} parts");
    let answer = common::replay_batches(&ep.replay[0]).await;
    assert!(
        answer.is_empty(),
        "nothing was published, the marker came back"
    );
}
