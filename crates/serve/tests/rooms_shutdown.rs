//! SGLang bootstrap rooms that cannot hang, and a shutdown that ends
//! every open request with its status, in both serve modes: one process
//! (`serve` with per-worker listeners) and an engine per process (`serve
//! --engine`).
//!
//! - A second pair in a room still in use is refused at once (409), both
//!   its legs; an abandoned leg ends at its timeout and every per-leg table
//!   (`/debug/workers`' `held`) is empty again.
//! - When the grace period ends, a stream still open gets an error event
//!   and `[DONE]`, a whole response a 503, and the summary counts each as
//!   failed by `shutdown` (an engine per process); in one process the
//!   engine finishes what is in flight on model time at once and an
//!   unpaired leg fails with `shutdown`.

mod common;

use handoff_core::{Backend, Duration as ModelDuration, HandoffConfig, HandoffPolicy};
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_router::Pool;
use handoff_serve::pod::PodConfig;
use handoff_serve::{serve_workers_until_graced, Listening, ServeConfig, ServeError};
use handoff_serving::Report;
use serde_json::{json, Value};
use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const PROMPT: &str = "two pairs in one bootstrap room, and legs whose partner never comes";

fn sglang_spec() -> EngineSpec {
    EngineSpec {
        backend: Backend::Sglang,
        block_size: 16,
        max_running: EngineSpec::default_max_running(Backend::Sglang, 16_384 * 16),
        ..EngineSpec::default()
    }
}

/// One SGLang prefill and one decode worker; reservations made on arrival
/// wait `reservation_s` for their KV.
fn sglang_cfg(reservation_s: u64) -> DeploymentConfig {
    let handoff = HandoffConfig {
        reservation_ttl: ModelDuration::from_secs(reservation_s),
        ..HandoffConfig::for_backend(Backend::Sglang)
    };
    DeploymentConfig {
        backend: Backend::Sglang,
        policy: HandoffPolicy::DestinationFirst,
        prefill_workers: 1,
        decode_workers: 1,
        block_size: sglang_spec().event_block_tokens(),
        handoff,
        ..DeploymentConfig::default()
    }
}

fn leg_body(room: u64, max_tokens: u32, stream: bool) -> String {
    json!({
        "model": "m", "prompt": PROMPT, "max_tokens": max_tokens, "ignore_eos": true,
        "stream": stream,
        "bootstrap_host": "127.0.0.1", "bootstrap_port": 8998, "bootstrap_room": room,
    })
    .to_string()
}

/// Status and body of a response read to its end from `s`.
fn answer(s: TcpStream) -> (u16, String) {
    common::read_answer("", s)
}

/// Reads off `conn` until the first SSE event came; returns what was read
/// (the response's head among it).
fn first_event(conn: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(6).any(|w| w == b"data: ") {
        let n = conn.read(&mut buf).expect("read");
        assert!(n > 0, "the stream ended early");
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// [`answer`] for a response whose first part was read already.
fn answer_after(head: &str, s: TcpStream) -> (u16, String) {
    common::read_answer(head, s)
}

fn post(to: SocketAddr, body: &str) -> TcpStream {
    common::send(to, "POST", "/v1/completions", body)
}

fn debug(http: SocketAddr) -> Value {
    let (status, body) = common::call(http, "GET", "/debug/workers", "");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("json")
}

/// Polls `/debug/workers` until every `held` table is empty.
fn wait_held_empty(http: SocketAddr) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let v = debug(http);
        let held = v["held"].as_object().expect("held");
        if held.values().all(|n| n == 0) {
            return v;
        }
        assert!(Instant::now() < deadline, "still held: {v}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The error message of a JSON error body.
fn message(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("json: {body}"));
    v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The `data:` payloads of an SSE body.
fn events(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

struct InProcess {
    l: Listening,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<Report, ServeError>>>,
}

impl InProcess {
    /// `c` with a listener per worker, stopping with a `grace` period.
    fn start(c: ServeConfig, grace: Duration) -> InProcess {
        let c = ServeConfig {
            worker_http: common::worker_listeners(2),
            ..c
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (ltx, lrx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            serve_workers_until_graced(
                c,
                move |l| {
                    let _ = ltx.send(l);
                },
                async move {
                    let _ = rx.await;
                },
                grace,
            )
        });
        let l = lrx
            .recv_timeout(Duration::from_secs(20))
            .expect("the server listens");
        InProcess {
            l,
            stop: Some(tx),
            thread: Some(thread),
        }
    }

    fn worker(&self, w: usize) -> SocketAddr {
        common::worker_addrs(&self.l)[w]
    }

    fn stop(mut self) -> Report {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let t = self.thread.take().expect("running");
        t.join().expect("no panic").expect("a clean stop")
    }
}

#[test]
fn in_process_a_second_pair_in_a_room_in_use_is_refused_at_once() {
    let cfg = sglang_cfg(300);
    let s = InProcess::start(
        ServeConfig {
            bootstrap_timeout_s: 300.0,
            ..common::loopback(cfg, vec![sglang_spec(); 2])
        },
        Duration::from_secs(5),
    );
    let (p, d) = (s.worker(0), s.worker(1));
    // A prefill leg waits; a second one for its room is refused at once.
    let p1 = post(p, &leg_body(5, 400, false));
    std::thread::sleep(Duration::from_millis(100));
    let t0 = Instant::now();
    let (status, body) = answer(post(p, &leg_body(5, 400, false)));
    assert_eq!(status, 409, "{body}");
    assert!(message(&body).contains("already waiting"), "{body}");
    // Its decode leg pairs; the pair runs 400 tokens.
    let d1 = post(d, &leg_body(5, 400, true));
    std::thread::sleep(Duration::from_millis(100));
    // Both legs of a second pair in the room: refused at once, streamed or not.
    for (to, stream) in [(p, false), (d, true), (d, false), (p, true)] {
        let (status, body) = answer(post(to, &leg_body(5, 4, stream)));
        assert_eq!(status, 409, "{body}");
        assert!(
            message(&body).contains("in use by a pair in flight"),
            "{body}"
        );
    }
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    let ((ps, pb), (ds, db)) = (answer(p1), answer(d1));
    assert_eq!((ps, ds), (200, 200), "{pb} / {db}");
    assert_eq!(events(&db).last().map(String::as_str), Some("[DONE]"));
    common::wait_drained(s.l.http);
    wait_held_empty(s.l.http);
    // The pair ended: its room serves a new pair (decode first this time).
    let d2 = post(d, &leg_body(5, 4, false));
    std::thread::sleep(Duration::from_millis(100));
    let (ps, pb) = answer(post(p, &leg_body(5, 4, false)));
    let (ds, db) = answer(d2);
    assert_eq!((ps, ds), (200, 200), "{pb} / {db}");
    wait_held_empty(s.l.http);
    let report = s.stop();
    assert_eq!((report.completed_requests, report.failed_requests), (2, 0));
}

#[test]
fn in_process_200_abandoned_legs_end_at_their_timeouts_and_free_everything() {
    // Prefill legs wait the bootstrap timeout (1 s); decode legs, which
    // reserve on arrival (one prefill worker), the waiting timeout (1 s).
    let s = InProcess::start(
        ServeConfig {
            bootstrap_timeout_s: 1.0,
            ..common::loopback(sglang_cfg(1), vec![sglang_spec(); 2])
        },
        Duration::from_secs(5),
    );
    let t0 = Instant::now();
    let conns: Vec<TcpStream> = (0..200u64)
        .map(|i| post(s.worker(0), &leg_body(1000 + i, 4, i % 2 == 0)))
        .collect();
    for c in conns {
        let (status, body) = answer(c);
        assert_eq!(status, 500, "{body}");
        assert!(
            message(&body).contains("its decode leg did not arrive"),
            "{body}"
        );
    }
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    let v = wait_held_empty(s.l.http);
    assert_eq!(v["in_flight"], 0, "{v}");
    // Decode legs reserve at once and end at the waiting timeout; their
    // legs, flows, reservations and both router bookings are freed (the
    // prefill's, made when the pair was routed, with the held source route
    // that never reached its worker).
    let conns: Vec<TcpStream> = (0..20u64)
        .map(|i| post(s.worker(1), &leg_body(5000 + i, 4, i % 2 == 0)))
        .collect();
    for c in conns {
        let (status, body) = answer(c);
        assert_eq!(status, 500, "{body}");
        assert!(message(&body).contains("KVPoll.WaitingForInput"), "{body}");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let v = debug(s.l.http);
        let h = &v["held"];
        let freed = [
            "legs",
            "flows",
            "reserving",
            "recorded",
            "prompt_blocks",
            "router_bookings",
        ]
        .iter()
        .all(|k| h[*k] == 0);
        if freed && v["in_flight"] == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "still held: {v}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let report = s.stop();
    // The decode legs were engine requests (they reserved); prefill legs
    // never were.
    assert_eq!(report.failed_requests, 20);
}

#[test]
fn in_process_shutdown_answers_every_open_response() {
    let s = InProcess::start(
        ServeConfig {
            bootstrap_timeout_s: 300.0,
            ..common::loopback(sglang_cfg(300), vec![sglang_spec(); 2])
        },
        Duration::from_millis(300),
    );
    let plain = |stream: bool| {
        json!({"model": "m", "prompt": PROMPT, "max_tokens": 3000, "ignore_eos": true,
               "stream": stream})
        .to_string()
    };
    let mut streams = Vec::new();
    let mut wholes = Vec::new();
    for _ in 0..2 {
        let mut c = post(s.l.http, &plain(true));
        let head = first_event(&mut c);
        streams.push((head, c));
        wholes.push(post(s.l.http, &plain(false)));
    }
    let waiting = post(s.worker(0), &leg_body(9, 4, false));
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    let report = s.stop();
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    for (head, c) in streams {
        let (status, body) = answer_after(&head, c);
        assert_eq!(status, 200);
        let e = events(&body);
        assert_eq!(e.last().map(String::as_str), Some("[DONE]"), "{body}");
    }
    for c in wholes {
        let (status, body) = answer(c);
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = answer(waiting);
    assert_eq!(status, 503, "{body}");
    assert!(message(&body).contains("shutdown"), "{body}");
    assert_eq!(report.completed_requests, 4, "finished on model time");
}

use common::pod::Pod;

impl Pod {
    fn start(role: Pool, serve: ServeConfig, grace: Duration) -> Pod {
        Pod::run(PodConfig {
            grace,
            ..common::pod::config(serve, role)
        })
    }
}

fn sglang_pod(role: Pool, bootstrap_s: f64) -> Pod {
    let serve = ServeConfig {
        bootstrap_timeout_s: bootstrap_s,
        ..common::loopback(sglang_cfg(300), vec![sglang_spec(); 2])
    };
    Pod::start(role, serve, Duration::from_secs(5))
}

#[test]
fn pods_duplicate_and_reused_rooms_are_refused_and_abandoned_prefill_legs_end_at_the_timeout() {
    let p = sglang_pod(Pool::Prefill, 1.0);
    let http = p.l.http;
    let t0 = Instant::now();
    let first = post(http, &leg_body(7, 4, false));
    std::thread::sleep(Duration::from_millis(100));
    let (status, body) = answer(post(http, &leg_body(7, 4, true)));
    assert_eq!(status, 409, "{body}");
    assert!(message(&body).contains("already waiting"), "{body}");
    assert!(t0.elapsed() < Duration::from_millis(900));
    // 200 more abandoned legs, streamed and not.
    let conns: Vec<TcpStream> = (0..200u64)
        .map(|i| post(http, &leg_body(100 + i, 4, i % 2 == 0)))
        .collect();
    let (status, body) = answer(first);
    assert_eq!(status, 500, "{body}");
    assert!(
        message(&body).contains("its decode leg did not arrive within 1 s"),
        "{body}"
    );
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
        "the bootstrap timeout, not the lease: {waited:?}"
    );
    for (i, c) in conns.into_iter().enumerate() {
        let (status, body) = answer(c);
        if i % 2 == 0 {
            // Streamed: the leg started on its rank at once, so the error
            // comes inside the stream, then [DONE].
            assert_eq!(status, 200, "{body}");
            let e = events(&body);
            assert_eq!(e.last().map(String::as_str), Some("[DONE]"), "{body}");
            assert!(body.contains("Prefill bootstrap failed"), "{body}");
        } else {
            assert_eq!(status, 500, "{body}");
        }
    }
    let v = wait_held_empty(http);
    assert_eq!(v["in_flight"], 0, "{v}");
    // The room was used: a later leg for it is refused, not left to hang.
    let (status, body) = answer(post(http, &leg_body(7, 4, false)));
    assert_eq!(status, 409, "{body}");
    assert!(
        message(&body).contains("was used by an earlier pair"),
        "{body}"
    );
    common::wait_drained(http);
    let summary = p.stop();
    assert_eq!(
        summary.failed.get("lease-expired"),
        Some(&201),
        "{summary:?}"
    );
    assert_eq!(
        summary.roles_ended.get("source/lease-expired"),
        Some(&201),
        "each source ended once: {summary:?}"
    );
    assert!(summary.ranks.iter().all(|f| f.drained), "{summary:?}");
}

#[test]
fn pods_a_second_decode_leg_for_a_room_is_refused_at_once() {
    let p = sglang_pod(Pool::Prefill, 300.0);
    let serve = ServeConfig {
        bootstrap_timeout_s: 300.0,
        ..common::loopback(sglang_cfg(300), vec![sglang_spec(); 2])
    };
    let d = Pod::start(Pool::Decode, serve, Duration::from_secs(5));
    let body = |room: u64, stream: bool| {
        json!({"model": "m", "prompt": PROMPT, "max_tokens": 200, "ignore_eos": true,
               "stream": stream, "bootstrap_host": "127.0.0.1",
               "bootstrap_port": p.l.side_channel[0], "bootstrap_room": room})
        .to_string()
    };
    let d1 = post(d.l.http, &body(3, true));
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    let (status, text) = answer(post(d.l.http, &body(3, false)));
    assert_eq!(status, 409, "{text}");
    assert!(message(&text).contains("bootstrap_room 3"), "{text}");
    assert!(t0.elapsed() < Duration::from_secs(2));
    // The first pair still completes.
    let p1 = post(p.l.http, &body(3, false));
    let ((ps, pb), (ds, db)) = (answer(p1), answer(d1));
    assert_eq!((ps, ds), (200, 200), "{pb} / {db}");
    assert_eq!(events(&db).last().map(String::as_str), Some("[DONE]"));
    wait_held_empty(p.l.http);
    wait_held_empty(d.l.http);
    let (ps, ds) = (p.stop(), d.stop());
    assert_eq!((ps.finished, ds.finished), (1, 1), "{ps:?} {ds:?}");
    assert!(
        ps.failed.is_empty() && ds.failed.is_empty(),
        "{ps:?} {ds:?}"
    );
}

#[test]
fn pods_shutdown_ends_each_open_request_with_its_status_and_counts_it() {
    let cfg = DeploymentConfig {
        prefill_workers: 1,
        decode_workers: 0,
        ..DeploymentConfig::default()
    };
    let a = Pod::start(
        Pool::Aggregated,
        common::loopback(cfg, vec![EngineSpec::default()]),
        Duration::from_millis(300),
    );
    let http = a.l.http;
    let plain = |stream: bool| {
        json!({"model": "m", "prompt": PROMPT, "max_tokens": 20000, "ignore_eos": true,
               "stream": stream})
        .to_string()
    };
    let mut streams = Vec::new();
    let mut wholes = Vec::new();
    for _ in 0..2 {
        let mut c = post(http, &plain(true));
        let head = first_event(&mut c);
        streams.push((head, c));
        wholes.push(post(http, &plain(false)));
    }
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    let summary = a.stop();
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    for (head, c) in streams {
        let (status, body) = answer_after(&head, c);
        assert_eq!(status, 200);
        let e = events(&body);
        assert_eq!(e.last().map(String::as_str), Some("[DONE]"), "{body}");
        let err: Value = serde_json::from_str(&e[e.len() - 2]).expect("an error event");
        let m = err["error"]["message"].as_str().unwrap_or_default();
        assert!(m.contains("shutdown"), "{body}");
    }
    for c in wholes {
        let (status, body) = answer(c);
        assert_eq!(status, 503, "{body}");
        assert!(message(&body).contains("shutdown"), "{body}");
    }
    assert_eq!(summary.failed.get("shutdown"), Some(&4), "{summary:?}");
    assert_eq!(summary.finished, 0, "{summary:?}");
    assert!(
        TcpStream::connect(http).is_err(),
        "new connections are refused once the grace period began"
    );
}
