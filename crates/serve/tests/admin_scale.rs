//! `POST /admin/scale` on one-process serve (`--admin`): a scale-up's
//! worker is routable only after its startup delay; a drained worker
//! finishes what it holds, gets nothing new and is gone; a removed one is
//! a kill; `/debug/workers` and the fleet gauge show every phase; hostile
//! bodies, methods and a server without `--admin` are refused.

mod common;

use handoff_core::Duration as ModelDuration;
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_engine::scale::Fleet;
use handoff_serve::ServeConfig;
use serde_json::Value;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// `prefill` + `decode` workers of which the first `up_p`/`up_d` start
/// ready, `delay` of startup, behind `--admin`.
fn elastic(prefill: u32, up_p: u32, decode: u32, up_d: u32, delay_ms: u64) -> ServeConfig {
    let mut cfg = DeploymentConfig {
        prefill_workers: prefill,
        decode_workers: decode,
        ..DeploymentConfig::default()
    };
    cfg.faults.fleet = Fleet::pools(
        prefill,
        up_p,
        decode,
        up_d,
        ModelDuration::from_millis(delay_ms),
    );
    ServeConfig {
        admin: true,
        ..common::loopback(
            cfg,
            vec![EngineSpec::default(); (prefill + decode) as usize],
        )
    }
}

fn scale(http: SocketAddr, body: &str) -> (u16, Value) {
    let (status, text) = common::call(http, "POST", "/admin/scale", body);
    let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, v)
}

/// `/debug/workers`' rows, once the engine has published them.
fn workers(http: SocketAddr) -> Vec<Value> {
    let t = Instant::now();
    loop {
        let (status, body) = common::call(http, "GET", "/debug/workers", "");
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).expect("json");
        let ws = v["workers"].as_array().cloned().unwrap_or_default();
        if !ws.is_empty() {
            return ws;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "no workers: {v}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn phase(http: SocketAddr, w: usize) -> String {
    workers(http)[w]["phase"]
        .as_str()
        .unwrap_or("none")
        .to_string()
}

fn wait_phase(http: SocketAddr, w: usize, want: &str, within: Duration) -> Duration {
    let t = Instant::now();
    loop {
        let p = phase(http, w);
        if p == want {
            return t.elapsed();
        }
        assert!(t.elapsed() < within, "worker {w} still {p}, not {want}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The fleet gauge's sample for `pool` in `state`.
fn gauge(http: SocketAddr, pool: &str, state: &str) -> u64 {
    let (_, text) = common::call(http, "GET", "/metrics", "");
    let key = format!(
        "vllm:handoff_fleet_workers{{model_name=\"m\",pool=\"{pool}\",state=\"{state}\"}} "
    );
    text.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in /metrics"))
}

/// Requests worker `w` finished (its `request_success` counter).
fn successes(http: SocketAddr, w: usize) -> u64 {
    let (_, text) = common::call(http, "GET", "/metrics", "");
    let key = format!("vllm:request_success_total{{model_name=\"m\",engine=\"{w}\"");
    text.lines()
        .filter(|l| l.starts_with(&key))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn completion(tokens: u32) -> String {
    format!(
        r#"{{"model": "m", "prompt": "scale me please", "max_tokens": {tokens}, "ignore_eos": true}}"#
    )
}

fn stream(tokens: u32) -> String {
    format!(
        r#"{{"model": "m", "prompt": "scale me please", "max_tokens": {tokens}, "ignore_eos": true, "stream": true}}"#
    )
}

/// The decode worker (of `ids`) running a request now.
fn busy_decode(http: SocketAddr, ids: &[usize]) -> usize {
    let t = Instant::now();
    loop {
        let ws = workers(http);
        if let Some(w) = ids
            .iter()
            .find(|w| ws[**w]["capacity"]["running_requests"].as_u64() > Some(0))
        {
            return *w;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "no decode running");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn up_is_routable_only_after_the_startup_delay() {
    // 1P + 1D, a second decode worker (2) absent; 3 s to start.
    let (l, server) = common::start(elastic(1, 1, 2, 1, 3000));
    let http = l.http;
    assert_eq!(phase(http, 2), "absent");
    assert_eq!(gauge(http, "decode", "absent"), 1);
    let (status, v) = scale(http, r#"{"action": "up", "pool": "decode"}"#);
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (&v["worker"], &v["from"], &v["state"]),
        (
            &Value::from(2),
            &Value::from("absent"),
            &Value::from("provisioning")
        )
    );
    assert!(v["ready_at_model_s"].as_f64().is_some(), "{v}");
    assert_eq!(gauge(http, "decode", "provisioning"), 1);
    // The pool is at its ceiling now.
    let (status, v) = scale(http, r#"{"action": "up", "pool": "decode"}"#);
    assert_eq!(status, 409, "{v}");
    assert_eq!(v["error"]["param"], "pool");
    // While it provisions, every request decodes on worker 1.
    for _ in 0..3 {
        let (status, body) = common::call(http, "POST", "/v1/completions", &completion(8));
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(phase(http, 2), "provisioning", "the delay is 3 s");
    assert_eq!(successes(http, 2), 0);
    let waited = wait_phase(http, 2, "ready", Duration::from_secs(10));
    assert!(
        waited > Duration::from_millis(500),
        "ready after {waited:?}"
    );
    assert_eq!(gauge(http, "decode", "ready"), 2);
    // Ready: concurrent requests now reach it too.
    let calls: Vec<_> = (0..6)
        .map(|_| {
            std::thread::spawn(move || {
                common::call(http, "POST", "/v1/completions", &completion(300))
            })
        })
        .collect();
    for c in calls {
        let (status, body) = c.join().expect("answered");
        assert_eq!(status, 200, "{body}");
    }
    assert!(successes(http, 2) > 0, "the new worker took none");
    let report = server.stop();
    assert_eq!(report.failed_requests, 0);
}

#[test]
fn drain_finishes_in_flight_takes_nothing_new_and_is_gone() {
    // 1P + 2D, every worker ready.
    let (l, server) = common::start(elastic(1, 1, 2, 2, 1000));
    let http = l.http;
    let long = std::thread::spawn(move || {
        common::call(http, "POST", "/v1/completions", &completion(1500))
    });
    let w = busy_decode(http, &[1, 2]);
    let other = 3 - w;
    let (status, v) = scale(http, &format!(r#"{{"action": "drain", "worker": {w}}}"#));
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (&v["from"], &v["state"]),
        (&Value::from("ready"), &Value::from("draining"))
    );
    // Sampled during the drain: the gauge and the view agree.
    assert_eq!(phase(http, w), "draining");
    assert_eq!(gauge(http, "decode", "draining"), 1);
    assert_eq!(gauge(http, "decode", "ready"), 1);
    // Draining twice is a conflict.
    let (status, v) = scale(http, &format!(r#"{{"action": "drain", "worker": {w}}}"#));
    assert_eq!(
        (status, &v["error"]["param"]),
        (409, &Value::from("worker")),
        "{v}"
    );
    // New work goes to the other decode worker only.
    let before = successes(http, w);
    for _ in 0..3 {
        let (status, body) = common::call(http, "POST", "/v1/completions", &completion(8));
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(
        successes(http, w),
        before,
        "the draining worker took new work"
    );
    assert!(successes(http, other) >= 3);
    assert_eq!(phase(http, w), "draining", "still holding its stream");
    // The request in flight finishes whole.
    let (status, body) = long.join().expect("answered");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["usage"]["completion_tokens"], 1500, "{v}");
    wait_phase(http, w, "gone", Duration::from_secs(10));
    assert_eq!(gauge(http, "decode", "gone"), 1);
    assert_eq!(gauge(http, "decode", "draining"), 0);
    let report = server.stop();
    assert_eq!(report.failed_requests, 0);
    // The report's scaling section has the drain, as a replay's does.
    let events: Vec<(&str, Option<u32>)> = report
        .scaling
        .as_ref()
        .expect("a scaling section")
        .events
        .iter()
        .map(|e| (e.event, e.worker))
        .collect();
    let w = Some(w as u32);
    assert!(
        events.contains(&("drain", w)) && events.contains(&("drained", w)),
        "{events:?}"
    );
}

#[test]
fn remove_is_a_kill_of_what_the_worker_holds() {
    let (l, server) = common::start(elastic(1, 1, 2, 2, 1000));
    let http = l.http;
    let mut conn = common::send(http, "POST", "/v1/completions", &stream(1500));
    common::read_events(&mut conn, 2);
    let w = busy_decode(http, &[1, 2]);
    let (status, v) = scale(http, &format!(r#"{{"action": "remove", "worker": {w}}}"#));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["state"], "gone", "{v}");
    assert_eq!(gauge(http, "decode", "gone"), 1);
    // The stream ends now: migrated and finished elsewhere, or failed with
    // the kill's reason; never left hanging.
    let t = Instant::now();
    let mut body = String::new();
    std::io::Read::read_to_string(&mut conn, &mut body).expect("read");
    assert!(body.contains("[DONE]"), "{body}");
    let migrated = !body.contains("\"error\"");
    assert!(
        migrated
            || ["worker-down", "worker-lost", "migrat"]
                .iter()
                .any(|r| body.contains(r)),
        "{body}"
    );
    assert!(t.elapsed() < Duration::from_secs(60));
    // The other decode worker serves what comes next.
    let (status, body) = common::call(http, "POST", "/v1/completions", &completion(8));
    assert_eq!(status, 200, "{body}");
    // A gone worker is neither drained nor removed again.
    let (status, v) = scale(http, &format!(r#"{{"action": "remove", "worker": {w}}}"#));
    assert_eq!(status, 409, "{v}");
    server.stop();
}

#[test]
fn hostile_requests_are_refused_with_their_status() {
    let (l, server) = common::start(elastic(1, 1, 1, 1, 1000));
    let http = l.http;
    let cases = [
        ("{", 400, Value::Null),
        (
            r#"{"action": "up", "pool": "gpu"}"#,
            400,
            Value::from("pool"),
        ),
        (r#"{"action": "explode"}"#, 400, Value::from("action")),
        (
            r#"{"action": "drain", "worker": "d1"}"#,
            400,
            Value::from("worker"),
        ),
        (
            r#"{"action": "drain", "worker": 77}"#,
            404,
            Value::from("worker"),
        ),
        (
            r#"{"action": "remove", "worker": 4000000000}"#,
            404,
            Value::from("worker"),
        ),
        (
            r#"{"action": "up", "pool": "prefill"}"#,
            409,
            Value::from("pool"),
        ),
    ];
    for (body, want, param) in cases {
        let (status, v) = scale(http, body);
        assert_eq!(status, want, "{body}: {v}");
        assert_eq!(v["error"]["param"], param, "{body}: {v}");
    }
    // Over the admin limit, and over the server's.
    let big = format!(r#"{{"action": "up", "pool": "{}"}}"#, "x".repeat(10_000));
    assert_eq!(scale(http, &big).0, 413);
    let huge = "x".repeat(handoff_serve::MAX_BODY_BYTES + 1);
    assert_eq!(scale(http, &huge).0, 413);
    let (status, _) = common::call(http, "GET", "/admin/scale", "");
    assert_eq!(status, 405);
    let (status, _) = common::call(http, "PUT", "/admin/scale", "{}");
    assert_eq!(status, 405);
    // The server still serves.
    let (status, body) = common::call(http, "POST", "/v1/completions", &completion(4));
    assert_eq!(status, 200, "{body}");
    let report = server.stop();
    assert_eq!(report.failed_requests, 0);
}

#[test]
fn without_admin_there_is_no_route_nor_phase_nor_gauge() {
    let (l, server) = common::start(common::loopback_pd(
        DeploymentConfig::default(),
        EngineSpec::default(),
    ));
    let http = l.http;
    let (status, v) = scale(http, r#"{"action": "up", "pool": "decode"}"#);
    assert_eq!(status, 404, "{v}");
    assert!(workers(http).iter().all(|w| w.get("phase").is_none()));
    let (_, text) = common::call(http, "GET", "/metrics", "");
    assert!(!text.contains("fleet_workers"));
    server.stop();
}
