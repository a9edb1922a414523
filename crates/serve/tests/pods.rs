//! One engine per process (`serve --engine`), two engines in one test
//! process over loopback: vLLM's two proxy calls with the prefill on one
//! engine and the decode on the other (the decode engine dials the side
//! channel named in `kv_transfer_params` and reads from it), and a prefill
//! engine that stops while its decode is reading: the decode ends with the
//! reason, and both sides drain. A decode client that goes away mid-read
//! or mid-stream cancels its request on both engines (`client`).

mod common;

use handoff_core::Duration as ModelDuration;
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_engine::TransferModel;
use handoff_router::Pool;
use handoff_serve::pod::{PodConfig, PodSummary};
use serde_json::{json, Value};
use std::time::Duration;

const PROMPT: &str = "one engine per process, and its decode engine in another process";

use common::pod::Pod;

impl Pod {
    /// The `role` engine of a one-prefill, one-decode deployment (`base`'s
    /// settings otherwise), on free loopback ports.
    fn start(role: Pool, base: DeploymentConfig) -> Pod {
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
            liveness: common::pod::liveness(Duration::from_secs(1)),
            ..common::pod::config(serve, role)
        })
    }
}

fn prefill_body() -> Value {
    json!({"model": "m", "prompt": PROMPT, "max_tokens": 1,
           "kv_transfer_params": {"do_remote_decode": true}})
}

#[test]
fn the_decode_engine_reads_from_the_prefill_engine_named_in_the_params() {
    let p = Pod::start(Pool::Prefill, DeploymentConfig::default());
    let d = Pod::start(Pool::Decode, DeploymentConfig::default());
    let (status, v) = p.post(&prefill_body());
    assert_eq!(status, 200, "{v}");
    let params = v["kv_transfer_params"].clone();
    assert_eq!(params["remote_port"], p.l.side_channel[0]);
    assert_eq!(params["remote_host"], "127.0.0.1");
    assert_eq!(params["remote_engine_id"], p.l.engine_id.1.to_string());
    assert_eq!(params["remote_num_tokens"], v["usage"]["prompt_tokens"]);
    assert_eq!(params["transfer_mode"], "pull");
    let body = json!({"model": "m", "prompt": PROMPT, "max_tokens": 6, "ignore_eos": true,
                      "kv_transfer_params": params});
    let (status, v) = d.post(&body);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 6);
    assert!(v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64() > Some(0));
    // The reader's completion reached the prefill engine: its source is
    // released, both drain.
    common::wait_drained(p.l.http);
    common::wait_drained(d.l.http);
    // A decode that names no side channel cannot find its prefill.
    let mut bad = body.clone();
    bad["kv_transfer_params"]["remote_host"] = Value::Null;
    assert_eq!(d.post(&bad).0, 400);
    let (ps, ds) = (p.stop(), d.stop());
    // The prefill's answer with its params finished it.
    assert_eq!((ps.finished, ds.finished), (1, 1));
    assert!(
        ps.failed.is_empty() && ds.failed.is_empty(),
        "{ps:?} {ds:?}"
    );
}

#[test]
fn a_prefill_engine_lost_mid_read_ends_the_decode_with_its_reason() {
    // Reads take longer than the prefill engine's grace period (2 s): its
    // drain waits for the read, then the grace period cuts it.
    let slow = DeploymentConfig {
        transfer: TransferModel::Fixed(ModelDuration::from_millis(4000)),
        ..DeploymentConfig::default()
    };
    let p = Pod::start(Pool::Prefill, DeploymentConfig::default());
    let d = Pod::start(Pool::Decode, slow);
    let (status, v) = p.post(&prefill_body());
    assert_eq!(status, 200, "{v}");
    let body = json!({"model": "m", "prompt": PROMPT, "max_tokens": 4,
                      "kv_transfer_params": v["kv_transfer_params"].clone()});
    let http = d.l.http;
    let decode = std::thread::spawn(move || {
        common::call(http, "POST", "/v1/completions", &body.to_string())
    });
    std::thread::sleep(Duration::from_millis(300));
    // The prefill engine goes (its ranks tear down, its connections close).
    let ps = p.stop();
    assert!(ps.ranks.iter().all(|f| f.drained), "{ps:?}");
    let (status, text) = decode.join().expect("the decode answers");
    assert_eq!(status, 503, "{text}");
    assert!(
        ["peer-lost", "peer-aborted", "kv-load-failed"]
            .iter()
            .any(|r| text.contains(r)),
        "{text}"
    );
    common::wait_drained(d.l.http);
    let ds = d.stop();
    assert_eq!(ds.failed.values().sum::<u64>(), 1, "{ds:?}");
}

#[test]
fn sigterm_lets_a_response_in_flight_finish_then_refuses_new_ones() {
    let a = Pod::start(Pool::Aggregated, DeploymentConfig::default());
    let http = a.l.http;
    let body = json!({"model": "m", "prompt": PROMPT, "max_tokens": 40, "ignore_eos": true});
    let long = {
        let body = body.to_string();
        std::thread::spawn(move || common::call(http, "POST", "/v1/completions", &body))
    };
    std::thread::sleep(Duration::from_millis(50));
    let started = std::time::Instant::now();
    let summary = a.stop();
    let (status, text) = long.join().expect("answered");
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["usage"]["completion_tokens"], 40);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "within the grace period"
    );
    assert_eq!(
        (summary.finished, summary.failed.len()),
        (1, 0),
        "{summary:?}"
    );
    assert!(
        std::net::TcpStream::connect(http).is_err(),
        "no longer accepting"
    );
}

/// A decode whose client goes away: its engine cancels the destination
/// role (`client`), as one process does, and the prefill engine's source
/// role ends once. `slow` reads take 1.5 s, so a client gone before its
/// first token leaves mid-read: as vLLM's decode (PR #32255) it keeps its
/// blocks until the read ends, and the read's notice frees the source.
fn a_client_gone_from_a_decode(slow: bool) -> (PodSummary, PodSummary) {
    let base = DeploymentConfig::default();
    let d_cfg = if slow {
        DeploymentConfig {
            transfer: TransferModel::Fixed(ModelDuration::from_millis(1500)),
            ..DeploymentConfig::default()
        }
    } else {
        DeploymentConfig::default()
    };
    let p = Pod::start(Pool::Prefill, base);
    let d = Pod::start(Pool::Decode, d_cfg);
    let (status, v) = p.post(&prefill_body());
    assert_eq!(status, 200, "{v}");
    let body = json!({"model": "m", "prompt": PROMPT, "max_tokens": 30000, "ignore_eos": true,
                      "stream": true, "kv_transfer_params": v["kv_transfer_params"].clone()});
    let mut conn = common::send(d.l.http, "POST", "/v1/completions", &body.to_string());
    if slow {
        std::thread::sleep(Duration::from_millis(300));
    } else {
        common::read_events(&mut conn, 4);
    }
    drop(conn);
    if slow {
        // The read has about a second to go: both engines still hold the
        // KV (the gauges stay up), where the immediate rule freed it.
        std::thread::sleep(Duration::from_millis(400));
        let held = |http, k: &str| -> u64 {
            let (_, body) = common::call(http, "GET", "/debug/workers", "");
            let v: serde_json::Value = serde_json::from_str(&body).expect("json");
            let ws = v["workers"].as_array().cloned().unwrap_or_default();
            ws.iter()
                .map(|w| w["capacity"][k].as_u64().unwrap_or(0))
                .sum()
        };
        assert!(held(p.l.http, "pinned_source_blocks") > 0);
        assert!(held(d.l.http, "reserved_destination_blocks") > 0);
    }
    for http in [p.l.http, d.l.http] {
        let v = common::wait_drained(http);
        for w in v["workers"].as_array().expect("workers") {
            assert_eq!(w["live_handoffs"], 0, "{v}");
            assert_eq!(w["capacity"]["pinned_source_blocks"], 0, "{v}");
            assert_eq!(w["capacity"]["reserved_destination_blocks"], 0, "{v}");
            assert_eq!(w["capacity"]["active_blocks"], 0, "{v}");
        }
    }
    let (ps, ds) = (p.stop(), d.stop());
    assert!(ps.ranks.iter().chain(&ds.ranks).all(|f| f.drained));
    // The prefill was answered (pinned); the decode's client went away.
    assert_eq!((ps.finished, ds.finished), (1, 0), "{ps:?} {ds:?}");
    assert!(ps.failed.is_empty(), "{ps:?}");
    assert_eq!(ds.failed.get("client"), Some(&1), "{ds:?}");
    assert_eq!(ds.failed.len(), 1, "{ds:?}");
    let destination: Vec<_> = ds.roles_ended.iter().collect();
    assert_eq!(destination, [(&"destination/client".to_string(), &1)]);
    assert_eq!(ps.roles_ended.values().sum::<u64>(), 1, "{ps:?}");
    (ps, ds)
}

#[test]
fn a_client_gone_mid_stream_cancels_its_decode_and_both_engines_drain() {
    let (ps, _) = a_client_gone_from_a_decode(false);
    // The read had completed: the source was released by its reader.
    assert_eq!(ps.roles_ended.get("source/released"), Some(&1), "{ps:?}");
}

#[test]
fn a_client_gone_mid_read_keeps_both_engines_kv_until_the_read_ends() {
    let (ps, _) = a_client_gone_from_a_decode(true);
    // The read ended before the decode freed its blocks: its notice
    // released the source, no abort did.
    assert_eq!(ps.roles_ended.get("source/released"), Some(&1), "{ps:?}");
}
