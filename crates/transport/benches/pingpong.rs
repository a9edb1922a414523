//! Ping-pong of one `HandoffMsg` frame between two endpoints, in-process and
//! over loopback TCP: round trips per second, messages per second (two per
//! round trip) and round-trip latency percentiles.
//!
//! `cargo bench -p handoff-transport --bench pingpong`

use handoff_core::{Generation, HandoffId, HandoffMsg, MsgBody, WorkerId};
use handoff_transport::{ChannelNet, Frame, Incoming, TcpEndpoint, Transport};
use std::thread;
use std::time::{Duration, Instant};

const A: WorkerId = WorkerId(1);
const B: WorkerId = WorkerId(2);

fn msg(seq: u64) -> Frame {
    Frame::Handoff(HandoffMsg {
        id: HandoffId((1u128 << 96) | u128::from(seq)),
        generation: Generation(0),
        body: MsgBody::SourceReady {
            blocks: 16,
            tokens: 256,
        },
    })
}

/// Answers every frame with itself until the peer goes away.
fn echo<T: Transport>(ep: T) {
    while let Ok(ev) = ep.incoming().recv() {
        let sent = match ev {
            Incoming::Frame { from, frame } => ep.send(from, frame),
            Incoming::PeerLost { .. } => return,
            _ => Ok(()),
        };
        if sent.is_err() {
            return;
        }
    }
}

fn await_up<T: Transport>(ep: &T) {
    loop {
        match ep.incoming().recv_timeout(Duration::from_secs(5)) {
            Ok(Incoming::PeerUp { .. }) => return,
            Ok(_) => {}
            Err(e) => panic!("peer never came up: {e}"),
        }
    }
}

fn run<T: Transport>(name: &str, ep: &T, warmup: u64, rounds: u64) {
    let mut rtts: Vec<u64> = Vec::with_capacity(rounds as usize);
    let started = Instant::now();
    for i in 0..warmup + rounds {
        let t0 = Instant::now();
        ep.send(B, msg(i)).expect("send");
        match ep.incoming().recv_timeout(Duration::from_secs(5)) {
            Ok(Incoming::Frame { .. }) => {}
            Ok(other) => panic!("unexpected {other:?}"),
            Err(e) => panic!("no echo: {e}"),
        }
        if i >= warmup {
            rtts.push(t0.elapsed().as_nanos() as u64);
        }
    }
    let total = started.elapsed();
    let measured: u64 = rtts.iter().sum();
    rtts.sort_unstable();
    let pct = |p: f64| rtts[((rtts.len() as f64 - 1.0) * p).round() as usize] as f64 / 1000.0;
    let per_sec = rounds as f64 / (measured as f64 / 1e9);
    println!(
        "{name:<10} {rounds:>7} round trips in {:>6.2} s: {:>9.0} round trips/s, {:>9.0} msgs/s, \
         rtt p50 {:>7.2} us, p99 {:>7.2} us, max {:>8.2} us",
        total.as_secs_f64(),
        per_sec,
        2.0 * per_sec,
        pct(0.50),
        pct(0.99),
        pct(1.0),
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "--test");
    let (warmup, rounds) = if quick { (10, 100) } else { (2_000, 50_000) };

    let net = ChannelNet::new();
    let a = net.endpoint(A, Generation(0));
    let b = net.endpoint(B, Generation(0));
    await_up(&a);
    await_up(&b);
    let echoer = thread::spawn(move || echo(b));
    run("in-process", &a, warmup, rounds);
    drop(a);
    echoer.join().expect("echo thread");

    let a = TcpEndpoint::bind(A, Generation(0), "127.0.0.1:0").expect("bind");
    let b = TcpEndpoint::bind(B, Generation(0), "127.0.0.1:0").expect("bind");
    a.connect(b.local_addr()).expect("connect");
    await_up(&a);
    await_up(&b);
    let echoer = thread::spawn(move || echo(b));
    run("tcp", &a, warmup, rounds);
    drop(a);
    echoer.join().expect("echo thread");
}
