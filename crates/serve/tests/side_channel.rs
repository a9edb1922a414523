//! The side channel of `serve --engine` takes only the engines it
//! expects: a hello claiming the engine's own ids is refused and the
//! engine keeps serving; work frames from a peer are ignored; a decode
//! dials only where `--kv-peer-allow` lets it, refuses a second decode of
//! one request while the first is connecting (409) and block ids beyond
//! its prompt (400); after its prefill engine restarts, the next decode
//! dials again and succeeds; a decode whose named prefill holds no such
//! KV (a fake that answers only the hello) fails the read (503).

mod common;

use handoff_core::{Generation, Instant, Request, RequestId, WorkerId, WorkerRequest};
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_router::Pool;
use handoff_serve::pod::peers::PeerPolicy;
use handoff_serve::pod::PodConfig;
use handoff_transport::{encode_frame, Frame, FrameReader, PeerRole, FRONTEND};
use serde_json::{json, Value};
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

const PROMPT: &str = "a side channel that only the engines it expects can use";

use common::pod::Pod;

impl Pod {
    /// The `role` engine of a one-prefill, one-decode deployment, on free
    /// loopback ports unless `side_port` and `engine_id` are given.
    fn start(role: Pool, side_port: u16, engine_id: Option<&str>, peers: PeerPolicy) -> Pod {
        let serve = common::loopback_pd(DeploymentConfig::default(), EngineSpec::default());
        Pod::run(PodConfig {
            engine_id: engine_id.map(str::to_string),
            side_channel_port: side_port,
            liveness: common::pod::liveness(Duration::from_secs(1)),
            peers,
            ..common::pod::config(serve, role)
        })
    }

    /// The rank-0 side channel's address.
    fn side(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.l.side_channel[0]))
    }
}

fn pod(role: Pool) -> Pod {
    Pod::start(role, 0, None, PeerPolicy::default())
}

fn prefill_body() -> Value {
    json!({"model": "m", "prompt": PROMPT, "max_tokens": 1,
           "kv_transfer_params": {"do_remote_decode": true}})
}

fn decode_body(params: Value) -> Value {
    json!({"model": "m", "prompt": PROMPT, "max_tokens": 4, "ignore_eos": true,
           "kv_transfer_params": params})
}

/// One PD request through `p` and `d`: the decode's status and body.
fn pd(p: &Pod, d: &Pod) -> (u16, Value) {
    let (status, v) = p.post(&prefill_body());
    assert_eq!(status, 200, "{v}");
    d.post(&decode_body(v["kv_transfer_params"].clone()))
}

/// A raw side-channel client that said `hello` and read the engine's.
fn hello(at: std::net::SocketAddr, worker: WorkerId, generation: u32, role: PeerRole) -> TcpStream {
    let mut s = TcpStream::connect(at).expect("connect");
    let mut b = Vec::new();
    let h = Frame::Hello {
        worker,
        generation: Generation(generation),
        role,
    };
    encode_frame(&h, &mut b).unwrap();
    s.write_all(&b).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    FrameReader::new(s.try_clone().unwrap())
        .read_hello()
        .expect("the engine's hello");
    s
}

/// Whether `/debug/workers` says every rank is drained within `wait`.
fn drained_within(http: std::net::SocketAddr, wait: Duration) -> bool {
    let deadline = std::time::Instant::now() + wait;
    while std::time::Instant::now() < deadline {
        let (_, body) = common::call(http, "GET", "/debug/workers", "");
        let v: Value = serde_json::from_str(&body).unwrap_or_default();
        if v["workers"]
            .as_array()
            .is_some_and(|ws| !ws.is_empty() && ws.iter().all(|w| w["drained"] == true))
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn hellos_claiming_the_engines_own_ids_are_refused_and_it_keeps_serving() {
    let p = pod(Pool::Prefill);
    let d = pod(Pool::Decode);
    let rank = WorkerId(p.l.engine_id.1 * 64);
    let mut held = Vec::new();
    for (w, g, role) in [
        (FRONTEND, u32::MAX, PeerRole::Frontend),
        (rank, u32::MAX, PeerRole::Decode),
        (WorkerId(5), 1, PeerRole::Prefill),
    ] {
        held.push(hello(p.side(), w, g, role));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(common::call(p.l.http, "GET", "/health", "").0, 200);
    let (status, v) = pd(&p, &d);
    assert_eq!(status, 200, "{v}");
    drop(held);
    let (ps, ds) = (p.stop(), d.stop());
    assert!(
        ps.failed.is_empty() && ds.failed.is_empty(),
        "{ps:?} {ds:?}"
    );
}

#[test]
fn work_frames_from_a_peer_are_ignored() {
    let p = pod(Pool::Prefill);
    // A decode-role peer, as any engine may connect to a prefill's side
    // channel, sends work with a million output tokens.
    let mut s = hello(p.side(), WorkerId(77), 1, PeerRole::Decode);
    for id in 0..50u64 {
        let req = Request {
            id: RequestId(id),
            prompt_tokens: 512,
            max_output_tokens: 1_000_000,
            prefix_hashes: Vec::new(),
            hash_block_tokens: 16,
            session: None,
            arrival: Instant::ZERO,
            lora: None,
        };
        let mut b = Vec::new();
        encode_frame(&Frame::Request(WorkerRequest::Ordinary(req)), &mut b).unwrap();
        s.write_all(&b).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        drained_within(p.l.http, Duration::from_secs(3)),
        "the injected work runs"
    );
    let (status, v) = p.post(&prefill_body());
    assert_eq!(status, 200, "{v}");
    drop(s);
    p.stop();
}

#[test]
fn a_decode_dials_only_allowed_hosts_and_checks_its_params_first() {
    let d = Pod::start(
        Pool::Decode,
        0,
        None,
        PeerPolicy {
            connect_timeout: Duration::from_secs(1),
            ..PeerPolicy::default()
        },
    );
    // A side channel that accepts and never says hello.
    let mute = TcpListener::bind("127.0.0.1:0").unwrap();
    let mute_port = mute.local_addr().unwrap().port();
    let params = |host: &str, port: u16, blocks: usize| {
        json!({"do_remote_prefill": true, "do_remote_decode": false,
               "remote_engine_id": "3", "remote_block_ids": (0..blocks).collect::<Vec<_>>(),
               "remote_host": host, "remote_port": port,
               "remote_request_id": "42", "handoff_id": "9"})
    };
    let started = std::time::Instant::now();
    let (status, v) = d.post(&decode_body(params("8.8.8.8", 22, 1)));
    assert_eq!(status, 403, "{v}");
    assert!(started.elapsed() < Duration::from_millis(500), "it dialled");
    let (status, v) = d.post(&decode_body(params("evil\nhost", 22, 1)));
    assert_eq!(status, 400, "{v}");
    let (status, v) = d.post(&decode_body(params("127.0.0.1", mute_port, 50_000)));
    assert_eq!(status, 400, "{v}");
    assert!(v.to_string().contains("remote_block_ids"), "{v}");
    // The first decode waits for its dial; a second of the same request
    // meanwhile is a conflict.
    let http = d.l.http;
    let first = decode_body(params("127.0.0.1", mute_port, 1));
    let waiting = std::thread::spawn(move || {
        common::call(http, "POST", "/v1/completions", &first.to_string())
    });
    let _held = mute.accept().expect("the decode dials");
    let (status, v) = d.post(&decode_body(params("127.0.0.1", mute_port, 1)));
    assert_eq!(status, 409, "{v}");
    let (status, text) = waiting.join().expect("answers");
    assert_eq!(status, 503, "a mute peer is not a prefill: {text}");
    d.stop();
}

#[test]
fn after_its_prefill_engine_restarts_the_next_decode_succeeds() {
    let side = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let p = Pod::start(Pool::Prefill, side, Some("7"), PeerPolicy::default());
    let d = pod(Pool::Decode);
    assert_eq!(pd(&p, &d).0, 200);
    p.stop();
    // A new incarnation (its generation is the start second).
    std::thread::sleep(Duration::from_millis(1100));
    let p = Pod::start(Pool::Prefill, side, Some("7"), PeerPolicy::default());
    let (status, v) = pd(&p, &d);
    assert_eq!(status, 200, "the first decode after the restart: {v}");
    let ds = d.stop();
    p.stop();
    assert!(ds.failed.is_empty(), "{ds:?}");
}

/// A fake prefill engine "3" on its own listener: it answers the decode's
/// hello as engine 3's rank 0 and keeps the connection alive with pings,
/// but holds no KV and says nothing else. Returns its port; the threads
/// end when `stop` is dropped.
fn fake_prefill() -> (u16, std::sync::mpsc::Sender<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let Ok((mut s, _)) = l.accept() else { return };
        let mut r = FrameReader::new(s.try_clone().unwrap());
        if r.read_hello().is_err() {
            return;
        }
        let mut b = Vec::new();
        let h = Frame::Hello {
            worker: WorkerId(3 * 64),
            generation: Generation(1),
            role: PeerRole::Prefill,
        };
        encode_frame(&h, &mut b).unwrap();
        if s.write_all(&b).is_err() {
            return;
        }
        // Read (and drop) whatever the decode sends.
        std::thread::spawn(move || while let Ok(Some(_)) = r.read_frame() {});
        let mut ping = Vec::new();
        encode_frame(&Frame::Ping, &mut ping).unwrap();
        while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            stopped.recv_timeout(Duration::from_millis(100))
        {
            if s.write_all(&ping).is_err() {
                return;
            }
        }
    });
    (port, stop)
}

#[test]
fn a_decode_does_not_read_from_a_prefill_that_holds_nothing() {
    let d = pod(Pool::Decode);
    let (port, stop) = fake_prefill();
    let params = json!({"do_remote_prefill": true, "do_remote_decode": false,
           "remote_engine_id": "3", "remote_block_ids": [0],
           "remote_host": "127.0.0.1", "remote_port": port,
           "remote_request_id": "42", "handoff_id": "9"});
    let started = std::time::Instant::now();
    let (status, v) = d.post(&decode_body(params));
    let took = started.elapsed();
    assert_eq!(status, 503, "a read of KV nobody holds: {v}");
    assert!(v.to_string().contains("kv-load-failed"), "{v}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    drop(stop);
    d.stop();
}
