//! SIGTERM drain of an engine process (`serve --engine`), as Kubernetes'
//! scale-down sends it: readiness fails at once, so a router that follows
//! readiness (a Service's endpoints, a router's health checks) stops
//! sending; a new request sent anyway is refused with a 503, as vLLM's
//! graceful shutdown and SGLang's do; the requests in flight finish, a
//! prefill engine's pinned KV is read before it goes, and then the engine
//! ends on its own, before the grace period.

mod common;

use common::pod::Pod;
use handoff_core::Duration as ModelDuration;
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_engine::TransferModel;
use handoff_router::Pool;
use handoff_serve::pod::PodConfig;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const PROMPT: &str = "a scale-down sends SIGTERM and waits for the grace period";

/// Engine `role` of `base` (one prefill and one decode worker, or one
/// aggregated), with a grace period of `grace`.
fn start(role: Pool, base: DeploymentConfig, grace: Duration) -> Pod {
    let serve = if role == Pool::Aggregated {
        let cfg = DeploymentConfig {
            prefill_workers: 1,
            decode_workers: 0,
            ..base
        };
        common::loopback(cfg, vec![EngineSpec::default()])
    } else {
        common::loopback_pd(base, EngineSpec::default())
    };
    Pod::run(PodConfig {
        grace,
        liveness: common::pod::liveness(Duration::from_secs(1)),
        ..common::pod::config(serve, role)
    })
}

fn completion(tokens: u32) -> String {
    json!({"model": "m", "prompt": PROMPT, "max_tokens": tokens, "ignore_eos": true}).to_string()
}

/// A router that follows readiness: the first engine whose `/ready` is 200.
fn route(engines: &[SocketAddr]) -> Option<SocketAddr> {
    engines
        .iter()
        .copied()
        .find(|e| common::call(*e, "GET", "/ready", "").0 == 200)
}

fn running(http: SocketAddr) -> u64 {
    let (_, body) = common::call(http, "GET", "/debug/workers", "");
    let v: Value = serde_json::from_str(&body).expect("json");
    v["workers"].as_array().map_or(0, |ws| {
        ws.iter()
            .filter_map(|w| w["capacity"]["running_requests"].as_u64())
            .sum()
    })
}

#[test]
fn sigterm_fails_readiness_refuses_new_work_and_finishes_in_flight() {
    let grace = Duration::from_secs(20);
    let mut a = start(Pool::Aggregated, DeploymentConfig::default(), grace);
    let b = start(Pool::Aggregated, DeploymentConfig::default(), grace);
    let (ha, hb) = (a.l.http, b.l.http);
    assert_eq!(route(&[ha, hb]), Some(ha));
    let long =
        std::thread::spawn(move || common::call(ha, "POST", "/v1/completions", &completion(600)));
    let t = Instant::now();
    while running(ha) == 0 {
        assert!(t.elapsed() < Duration::from_secs(10), "never ran");
        std::thread::sleep(Duration::from_millis(5));
    }
    let termed = Instant::now();
    a.term();
    // Readiness fails at once, with the reason.
    let t = Instant::now();
    loop {
        let (status, body) = common::call(ha, "GET", "/ready", "");
        if status == 503 {
            assert!(body.contains("draining"), "{body}");
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(2), "still ready");
        std::thread::sleep(Duration::from_millis(5));
    }
    // A request sent to it anyway is refused.
    let (status, body) = common::call(ha, "POST", "/v1/completions", &completion(4));
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("draining"), "{body}");
    // Its metrics still answer (a scrape during the drain).
    assert_eq!(common::call(ha, "GET", "/metrics", "").0, 200);
    // The router sends everything to the other engine now.
    for _ in 0..3 {
        let to = route(&[ha, hb]).expect("an engine is ready");
        assert_eq!(to, hb);
        let (status, body) = common::call(to, "POST", "/v1/completions", &completion(4));
        assert_eq!(status, 200, "{body}");
    }
    // The request in flight finishes whole, and the engine ends on its
    // own well before its grace period.
    let (status, body) = long.join().expect("answered");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["usage"]["completion_tokens"], 600, "{v}");
    let summary = a.join();
    assert!(
        termed.elapsed() < grace / 2,
        "ended after {:?}",
        termed.elapsed()
    );
    assert_eq!(summary.finished, 1, "{summary:?}");
    assert!(summary.failed.is_empty(), "{summary:?}");
    assert!(
        std::net::TcpStream::connect(ha).is_err(),
        "no longer accepting"
    );
    let sb = b.stop();
    assert_eq!(sb.finished, 3);
}

#[test]
fn a_draining_prefill_engine_waits_for_its_decode_to_read() {
    // Reads take 1 s: the prefill engine is told to go while one runs.
    let slow = DeploymentConfig {
        transfer: TransferModel::Fixed(ModelDuration::from_millis(1000)),
        ..DeploymentConfig::default()
    };
    let grace = Duration::from_secs(20);
    let mut p = start(Pool::Prefill, DeploymentConfig::default(), grace);
    let d = start(Pool::Decode, slow, grace);
    let prefill = json!({"model": "m", "prompt": PROMPT, "max_tokens": 1,
        "kv_transfer_params": {"do_remote_decode": true, "do_remote_prefill": false}});
    let (status, v) = p.post(&prefill);
    assert_eq!(status, 200, "{v}");
    let body = json!({"model": "m", "prompt": PROMPT, "max_tokens": 4, "ignore_eos": true,
                      "kv_transfer_params": v["kv_transfer_params"].clone()});
    let http = d.l.http;
    let decode = std::thread::spawn(move || {
        common::call(http, "POST", "/v1/completions", &body.to_string())
    });
    std::thread::sleep(Duration::from_millis(200));
    p.term();
    // Unready at once, but its pinned KV stays readable: the decode gets
    // its tokens, and only then does the prefill engine end.
    let t = Instant::now();
    while common::call(p.l.http, "GET", "/ready", "").0 != 503 {
        assert!(t.elapsed() < Duration::from_secs(2), "still ready");
        std::thread::sleep(Duration::from_millis(5));
    }
    let (status, text) = decode.join().expect("the decode answers");
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["usage"]["completion_tokens"], 4, "{v}");
    let ps = p.join();
    assert!(ps.failed.is_empty(), "{ps:?}");
    assert!(ps.ranks.iter().all(|f| f.drained), "{ps:?}");
    common::wait_drained(d.l.http);
    let ds = d.stop();
    assert!(ds.failed.is_empty(), "{ds:?}");
}
