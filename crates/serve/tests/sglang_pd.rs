//! SGLang's PD flow on the per-worker listeners, end to end over loopback,
//! as `sglang-router` drives it: the same body, with `bootstrap_host`,
//! `bootstrap_port` and `bootstrap_room`, to a prefill and a decode worker
//! at once, in either order. The legs meet in their room, the pair runs as
//! one destination-first handoff through the engine, the decode leg
//! streams the tokens and the prefill leg answers when its KV was sent; a
//! leg whose partner never comes fails after the bootstrap timeout; a
//! client that leaves frees what it held.

mod common;

use common::Server;
use handoff_core::{Backend, HandoffConfig, HandoffPolicy};
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_serve::ServeConfig;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;

struct Running {
    http: SocketAddr,
    workers: Vec<SocketAddr>,
    server: Server,
}

/// An SGLang deployment, prefill worker 0 and decode worker 1, each with
/// its own listener; legs wait `timeout_s` for their partner.
fn start(timeout_s: f64) -> Running {
    start_with(timeout_s, HandoffConfig::for_backend(Backend::Sglang))
}

/// [`start`] with the workers' `handoff` timers (a decode leg that reserved
/// on arrival waits `handoff.reservation_ttl` for its KV).
fn start_with(timeout_s: f64, handoff: HandoffConfig) -> Running {
    let spec = EngineSpec {
        backend: Backend::Sglang,
        block_size: 16,
        max_running: EngineSpec::default_max_running(Backend::Sglang, 16_384 * 16),
        ..EngineSpec::default()
    };
    let cfg = DeploymentConfig {
        backend: Backend::Sglang,
        policy: HandoffPolicy::DestinationFirst,
        prefill_workers: 1,
        decode_workers: 1,
        block_size: spec.event_block_tokens(),
        handoff,
        ..DeploymentConfig::default()
    };
    let (l, server) = common::start(ServeConfig {
        worker_http: common::worker_listeners(2),
        bootstrap_timeout_s: timeout_s,
        ..common::loopback(cfg, vec![spec; 2])
    });
    Running {
        http: l.http,
        workers: common::worker_addrs(&l),
        server,
    }
}

const PROMPT: &str = "sglang-router sends this prompt to a prefill and a decode worker at once, \
    each with the same bootstrap room, and either may get it first.";

/// The body the router sends both legs (its own fields included).
fn body(route: &str, room: u64, max_tokens: u32, stream: bool) -> Value {
    let mut b = json!({
        "model": "m", "stream": stream, "ignore_eos": true,
        "no_stop_trim": false, "skip_special_tokens": true, "return_hidden_states": false,
        "bootstrap_host": "127.0.0.1", "bootstrap_port": 8998, "bootstrap_room": room,
    });
    if route == "/v1/chat/completions" {
        b["messages"] = json!([{"role": "user", "content": PROMPT}]);
        b["max_completion_tokens"] = json!(max_tokens);
        b["logprobs"] = json!(false);
    } else {
        b["prompt"] = json!(PROMPT);
        b["max_tokens"] = json!(max_tokens);
        b["echo"] = json!(false);
    }
    if stream {
        b["stream_options"] = json!({"include_usage": true});
    }
    b
}

/// Status and body of one leg sent to `to`.
fn leg(to: SocketAddr, route: &str, b: &Value) -> (u16, String) {
    common::call(to, "POST", route, &b.to_string())
}

/// Sends both legs at once, the second `gap` after the first.
fn pair(
    s: &Running,
    route: &str,
    b: &Value,
    decode_first: bool,
    gap: Duration,
) -> ((u16, String), (u16, String)) {
    let (p, d) = (s.workers[0], s.workers[1]);
    let (first, second) = if decode_first { (d, p) } else { (p, d) };
    let (route1, b1) = (route.to_string(), b.clone());
    let t = std::thread::spawn(move || leg(first, &route1, &b1));
    std::thread::sleep(gap);
    let later = leg(second, route, b);
    let earlier = t.join().expect("leg");
    if decode_first {
        (later, earlier)
    } else {
        (earlier, later)
    }
}

/// The `data:` payloads of an SSE body.
fn events(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

#[test]
fn both_legs_meet_in_either_order_streamed_or_whole() {
    let s = start(300.0);
    let mut room = 1;
    for route in ["/v1/completions", "/v1/chat/completions"] {
        for decode_first in [false, true] {
            for stream in [false, true] {
                room += 1;
                let b = body(route, room, 6, stream);
                let gap = Duration::from_millis(150);
                let ((ps, pb), (ds, db)) = pair(&s, route, &b, decode_first, gap);
                let case = format!("{route} decode_first={decode_first} stream={stream}");
                assert_eq!((ps, ds), (200, 200), "{case}: {pb} / {db}");
                let (pu, du) = if stream {
                    let (pe, de) = (events(&pb), events(&db));
                    assert_eq!(pe.last().map(String::as_str), Some("[DONE]"), "{case}");
                    assert_eq!(de.last().map(String::as_str), Some("[DONE]"), "{case}");
                    let usage = |e: &[String]| -> Value {
                        serde_json::from_str(&e[e.len() - 2]).expect("usage chunk")
                    };
                    (usage(&pe)["usage"].clone(), usage(&de)["usage"].clone())
                } else {
                    let p: Value = serde_json::from_str(&pb).expect("json");
                    let d: Value = serde_json::from_str(&db).expect("json");
                    assert_eq!(p["choices"][0]["finish_reason"], "length", "{case}");
                    (p["usage"].clone(), d["usage"].clone())
                };
                assert_eq!(
                    pu["completion_tokens"], 1,
                    "{case}: the prefill's one token"
                );
                assert_eq!(du["completion_tokens"], 6, "{case}");
                assert_eq!(pu["prompt_tokens"], du["prompt_tokens"], "{case}");
                common::wait_drained(s.http);
            }
        }
    }
    let report = s.server.stop();
    assert_eq!(report.completed_requests, 8);
    assert_eq!(report.failed_requests, 0);
}

#[test]
fn a_prefill_leg_whose_partner_never_comes_times_out_and_frees_everything() {
    let s = start(0.5);
    for route in ["/v1/completions", "/v1/chat/completions"] {
        for stream in [false, true] {
            let t0 = std::time::Instant::now();
            let (status, text) = leg(s.workers[0], route, &body(route, 77, 4, stream));
            let waited = t0.elapsed();
            assert_eq!(status, 500, "{text}");
            let e: Value = serde_json::from_str(&text).expect("error json");
            let msg = e["error"]["message"].as_str().unwrap_or_default();
            assert!(
                msg.contains("bootstrap_room 77") && msg.contains("decode"),
                "{msg}"
            );
            assert!(waited >= Duration::from_millis(450), "{waited:?}");
            let v = common::wait_drained(s.http);
            assert_eq!(v["in_flight"], 0);
        }
    }
    let report = s.server.stop();
    assert_eq!(
        report.num_requests, 0,
        "an unpaired prefill leg never reached the engine"
    );
}

/// The sum of `name`'s samples on `/metrics`.
fn metric(http: SocketAddr, name: &str) -> f64 {
    let (status, text) = common::call(http, "GET", "/metrics", "");
    assert_eq!(status, 200, "{text}");
    text.lines()
        .filter(|l| !l.starts_with('#') && l.contains(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// SGLang's decode engine preallocates as soon as its own leg arrives
/// (`disaggregation/decode.py`, `DecodePreallocQueue.pop_preallocated`)
/// and holds the pages until the KV comes or
/// `SGLANG_DISAGGREGATION_WAITING_TIMEOUT` passes
/// (`common/conn.py`, `CommonKVReceiver._check_waiting_timeout`), when
/// `DecodeTransferQueue.pop_transferred` aborts it with a 500 and frees
/// them. Before, a decode leg reserved nothing until its partner came and
/// failed with the bootstrap timeout's message.
#[test]
fn a_decode_leg_reserves_on_arrival_and_frees_at_the_waiting_timeout() {
    let handoff = HandoffConfig {
        reservation_ttl: handoff_core::Duration::from_secs(1),
        ..HandoffConfig::for_backend(Backend::Sglang)
    };
    let s = start_with(300.0, handoff);
    const RESERVED: &str = "handoff_reserved_destination_blocks";
    for (room, stream) in [(81u64, false), (82, true)] {
        let t0 = std::time::Instant::now();
        let d = {
            let (to, b) = (s.workers[1], body("/v1/completions", room, 4, stream));
            std::thread::spawn(move || leg(to, "/v1/completions", &b))
        };
        std::thread::sleep(Duration::from_millis(300));
        let (_, text) = common::call(s.http, "GET", "/debug/workers", "");
        let v: Value = serde_json::from_str(&text).expect("json");
        let held = &v["workers"][1]["capacity"]["reserved_destination_blocks"];
        assert!(held.as_u64().unwrap_or(0) > 0, "held on arrival: {v}");
        assert!(metric(s.http, RESERVED) > 0.0, "/metrics shows it");
        let (status, text) = d.join().expect("decode leg");
        let waited = t0.elapsed();
        assert_eq!(status, 500, "{text}");
        assert!(
            text.contains(&format!(
                "Request {room} timed out after 1.0s in KVPoll.WaitingForInput"
            )),
            "{text}"
        );
        assert!(waited >= Duration::from_millis(950), "{waited:?}");
        let v = common::wait_drained(s.http);
        for w in v["workers"].as_array().expect("workers") {
            assert_eq!(w["live_handoffs"], 0, "{w}");
            assert_eq!(w["capacity"]["reserved_destination_blocks"], 0, "{w}");
        }
        assert_eq!(metric(s.http, RESERVED), 0.0, "freed once");
    }
    // A prefill leg that comes within the timeout completes the pair.
    let b = body("/v1/completions", 83, 4, false);
    let ((ps, pb), (ds, db)) = pair(&s, "/v1/completions", &b, true, Duration::from_millis(200));
    assert_eq!((ps, ds), (200, 200), "{pb} / {db}");
    common::wait_drained(s.http);
    let report = s.server.stop();
    assert_eq!(
        report.num_requests, 3,
        "both early decodes reached the engine"
    );
    assert_eq!(report.completed_requests, 1);
    assert_eq!(report.failed_requests, 2);
}

#[test]
fn duplicate_rooms_and_stray_requests_are_refused() {
    let s = start(1.0);
    let b = body("/v1/completions", 5, 4, false);
    let waiting = {
        let (to, b) = (s.workers[0], b.clone());
        std::thread::spawn(move || leg(to, "/v1/completions", &b))
    };
    std::thread::sleep(Duration::from_millis(100));
    let (status, text) = leg(s.workers[0], "/v1/completions", &b);
    assert_eq!(status, 409, "{text}");
    // The first leg still waits, and times out alone.
    assert_eq!(waiting.join().expect("leg").0, 500);
    // No room on an SGLang worker; vLLM's params there; a batch of rooms.
    let plain = json!({"model": "m", "prompt": "x", "max_tokens": 2});
    let (status, text) = leg(s.workers[1], "/v1/completions", &plain);
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("bootstrap_room"), "{text}");
    let mut batch = body("/v1/completions", 6, 2, false);
    batch["bootstrap_room"] = json!([6, 7]);
    let (status, text) = leg(s.workers[1], "/v1/completions", &batch);
    assert_eq!(status, 400, "{text}");
    common::wait_drained(s.http);
    s.server.stop();
}

#[test]
fn a_client_that_leaves_frees_both_sides() {
    let s = start(300.0);
    // The decode leg's client leaves mid-stream: the request is cancelled
    // and every reservation and lease it held ends.
    let b = body("/v1/completions", 9, 20_000, true);
    let pre = {
        let (to, b) = (s.workers[0], b.clone());
        std::thread::spawn(move || leg(to, "/v1/completions", &b))
    };
    let mut d = common::send(s.workers[1], "POST", "/v1/completions", &b.to_string());
    common::read_events(&mut d, 5);
    assert_eq!(pre.join().expect("prefill leg").0, 200, "its KV was sent");
    drop(d);
    let v = common::wait_drained(s.http);
    for w in v["workers"].as_array().expect("workers") {
        assert_eq!(w["live_handoffs"], 0, "{w}");
        assert_eq!(w["capacity"]["reserved_destination_blocks"], 0, "{w}");
    }
    // A prefill leg that leaves before its partner came: its room is freed
    // (a decode leg for the room later waits anew and times out alone).
    let b = body("/v1/completions", 10, 4, false);
    let p = common::send(s.workers[0], "POST", "/v1/completions", &b.to_string());
    std::thread::sleep(Duration::from_millis(100));
    let (_, body) = common::call(s.http, "GET", "/debug/workers", "");
    let open: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(open["open_streams"], 1, "the leg waits");
    drop(p);
    common::wait_drained(s.http);
    let report = s.server.stop();
    assert_eq!(report.failed_requests, 1, "the cancelled pair");
}

#[test]
fn native_generate_legs_pair_too() {
    let s = start(300.0);
    for (room, stream) in [(21u64, false), (22, true)] {
        let b = json!({
            "text": PROMPT, "model": null, "stream": stream,
            "sampling_params": {"max_new_tokens": 5, "ignore_eos": true},
            "bootstrap_host": "127.0.0.1", "bootstrap_port": 8998, "bootstrap_room": room,
        });
        let ((ps, pb), (ds, db)) = pair(&s, "/generate", &b, stream, Duration::from_millis(100));
        assert_eq!((ps, ds), (200, 200), "{pb} / {db}");
        let last = |text: &str| -> Value {
            if stream {
                let e = events(text);
                assert_eq!(e.last().map(String::as_str), Some("[DONE]"), "{text}");
                serde_json::from_str(&e[e.len() - 2]).expect("last event")
            } else {
                serde_json::from_str(text).expect("json")
            }
        };
        let (p, d) = (last(&pb), last(&db));
        assert_eq!(p["meta_info"]["completion_tokens"], 1, "{p}");
        assert_eq!(d["meta_info"]["completion_tokens"], 5, "{d}");
        assert_eq!(
            d["meta_info"]["finish_reason"],
            json!({"type": "length", "length": 5})
        );
        assert!(!d["text"].as_str().unwrap_or_default().is_empty(), "{d}");
        if stream {
            // Each event carries the text so far.
            let texts: Vec<String> = events(&db)
                .iter()
                .filter_map(|e| serde_json::from_str::<Value>(e).ok())
                .map(|v| v["text"].as_str().unwrap_or_default().to_string())
                .collect();
            assert!(
                texts.windows(2).all(|w| w[1].starts_with(&w[0])),
                "{texts:?}"
            );
        }
        common::wait_drained(s.http);
    }
    // Without a room, or with a bad sampling parameter: a 4xx naming it.
    let (status, text) = leg(s.workers[1], "/generate", &json!({"text": "x"}));
    assert_eq!(status, 400, "{text}");
    let bad = json!({"text": "x", "sampling_params": {"max_new_tokens": -1},
                     "bootstrap_host": "h", "bootstrap_room": 1});
    let (status, text) = leg(s.workers[1], "/generate", &bad);
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("sampling_params.max_new_tokens"), "{text}");
    let report = s.server.stop();
    assert_eq!(report.completed_requests, 2);
}
