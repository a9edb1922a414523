//! vLLM's `kv_transfer_params` in full, the same in both serve modes (one
//! `serve` process with per-worker listeners, and `serve --engine`): the
//! prefill writes `remote_block_ids` one list per KV cache group and the
//! NIXL connector's `dcp_size`, `pp_size`, `remote_blocks_expiry_time`
//! (`NixlPullConnectorScheduler.request_finished`), or the push
//! scheduler's fields; a decode reads the nested and the flat form; every
//! field of the wrong type, out of range or too long is a 400 naming it;
//! and a `transfer_mode` not the decode engine's is refused, as a push and
//! a pull NIXL connector never complete a handshake
//! (`compute_nixl_compatibility_hash`, `nixl/metadata.py`).

mod common;

use common::pod::Pod;
use handoff_core::HandoffPolicy;
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_router::Pool;
use handoff_serve::ServeConfig;
use serde_json::{json, Value};
use std::net::SocketAddr;

const PROMPT: &str = "kv_transfer_params in full: nested block ids, parallel sizes, expiry \
    and the transfer mode, read the same by both serve modes";

/// A prefill and a decode endpoint of one mode, and how to stop them.
struct Pair {
    prefill: SocketAddr,
    decode: SocketAddr,
    stop: Box<dyn FnOnce()>,
}

fn serve_config(policy: HandoffPolicy) -> ServeConfig {
    let base = DeploymentConfig {
        policy,
        ..DeploymentConfig::default()
    };
    common::loopback_pd(base, EngineSpec::default())
}

/// One `serve` process: worker 0 prefills, worker 1 decodes.
fn one_process(policy: HandoffPolicy) -> Pair {
    let (l, server) = common::start(ServeConfig {
        worker_http: common::worker_listeners(2),
        ..serve_config(policy)
    });
    let w = common::worker_addrs(&l);
    Pair {
        prefill: w[0],
        decode: w[1],
        stop: Box::new(move || {
            server.stop();
        }),
    }
}

/// Two engines (`serve --engine prefill` and `--engine decode`), each with
/// its own transfer mode.
fn engines(prefill: HandoffPolicy, decode: HandoffPolicy) -> Pair {
    let p = Pod::run(common::pod::config(serve_config(prefill), Pool::Prefill));
    let d = Pod::run(common::pod::config(serve_config(decode), Pool::Decode));
    Pair {
        prefill: p.l.http,
        decode: d.l.http,
        stop: Box::new(move || {
            p.stop();
            d.stop();
        }),
    }
}

fn post(to: SocketAddr, body: &Value) -> (u16, Value) {
    let (status, text) = common::call(to, "POST", "/v1/completions", &body.to_string());
    let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("json: {text}"));
    (status, v)
}

fn prefill(pair: &Pair) -> Value {
    let body = json!({"model": "m", "prompt": PROMPT, "max_tokens": 1,
                      "kv_transfer_params": {"do_remote_decode": true}});
    let (status, v) = post(pair.prefill, &body);
    assert_eq!(status, 200, "{v}");
    v["kv_transfer_params"].clone()
}

fn decode(pair: &Pair, params: &Value) -> (u16, Value) {
    let body = json!({"model": "m", "prompt": PROMPT, "max_tokens": 4, "ignore_eos": true,
                      "kv_transfer_params": params});
    post(pair.decode, &body)
}

/// The prefill's params are vLLM's pull fields; the decode reads them
/// nested, and flattened as an older proxy would hand them on.
fn writes_nested_and_reads_both_forms(pair: Pair) {
    let p = prefill(&pair);
    let groups = p["remote_block_ids"].as_array().expect("groups");
    assert_eq!(groups.len(), 1, "one KV cache group: {p}");
    assert!(!groups[0].as_array().expect("ids").is_empty(), "{p}");
    assert_eq!((&p["dcp_size"], &p["pp_size"]), (&json!(1), &json!(1)));
    assert_eq!(p["remote_blocks_expiry_time"], Value::Null);
    assert!(p.get("remote_blocks_expiry_time").is_some(), "{p}");
    assert_eq!(p["transfer_mode"], "pull");
    let (status, v) = decode(&pair, &p);
    assert_eq!(status, 200, "nested: {v}");
    assert_eq!(v["usage"]["completion_tokens"], 4);
    let mut flat = prefill(&pair);
    flat["remote_block_ids"] = flat["remote_block_ids"][0].clone();
    let (status, v) = decode(&pair, &flat);
    assert_eq!(status, 200, "flat: {v}");
    (pair.stop)();
}

#[test]
fn one_process_writes_nested_ids_and_reads_both_forms() {
    writes_nested_and_reads_both_forms(one_process(HandoffPolicy::SourceFirst));
}

#[test]
fn engines_write_nested_ids_and_read_both_forms() {
    writes_nested_and_reads_both_forms(engines(
        HandoffPolicy::SourceFirst,
        HandoffPolicy::SourceFirst,
    ));
}

/// Params a decode parses (no prefill holds them: parsing comes first).
fn base_params() -> Value {
    json!({"do_remote_prefill": true, "do_remote_decode": false,
           "remote_request_id": "1", "handoff_id": "2", "remote_engine_id": "0",
           "remote_block_ids": [[0]], "remote_host": "127.0.0.1", "remote_port": 1,
           "tp_size": 1, "dcp_size": 1, "pp_size": 1, "remote_blocks_expiry_time": null,
           "remote_num_tokens": 16, "transfer_mode": "pull"})
}

/// Each field wrong, with the field the 400 must name.
fn hostile() -> Vec<(&'static str, Value)> {
    let too_many = vec![0u8; (1 << 20) + 1];
    vec![
        ("remote_block_ids", json!("[[0]]")),
        ("remote_block_ids", json!([[0], [1]])),
        ("remote_block_ids", json!([[0], 1])),
        ("remote_block_ids", json!([[[0]]])),
        ("remote_block_ids", json!([[-1]])),
        ("remote_block_ids", json!([[1e3]])),
        ("remote_block_ids", json!([[u64::MAX], [0]])),
        ("remote_block_ids", Value::Array(vec![json!([]); 65])),
        ("remote_block_ids", json!([too_many])),
        ("remote_block_ids", json!(too_many)),
        ("dcp_size", json!(0)),
        ("dcp_size", json!(-2)),
        ("dcp_size", json!("1")),
        ("dcp_size", json!(1_000_000)),
        ("pp_size", json!(u64::MAX)),
        ("pp_size", json!(1.5)),
        ("pp_size", json!([1])),
        ("remote_blocks_expiry_time", json!(-1.0)),
        ("remote_blocks_expiry_time", json!(1e300)),
        ("remote_blocks_expiry_time", json!("later")),
        ("remote_blocks_expiry_time", json!({"s": 1})),
        ("transfer_mode", json!("write")),
        ("transfer_mode", json!(1)),
        ("remote_num_tokens", json!(-5)),
        ("remote_port", json!(70_000)),
    ]
}

/// Every hostile field is a 400 naming it, and the engine serves on.
fn hostile_fields_are_400s_naming_the_field(pair: Pair) {
    for (field, bad) in hostile() {
        let mut p = base_params();
        p[field] = bad;
        let (status, v) = decode(&pair, &p);
        let shown: String = p[field].to_string().chars().take(60).collect();
        assert_eq!(status, 400, "{field} = {shown}: {v}");
        assert_eq!(v["error"]["param"], "kv_transfer_params", "{v}");
        let message = v["error"]["message"].as_str().expect("message");
        assert!(
            message.contains(&format!("kv_transfer_params.{field}")),
            "{field} = {shown}: {message}"
        );
    }
    let (status, v) = decode(&pair, &prefill(&pair));
    assert_eq!(status, 200, "still serving: {v}");
    (pair.stop)();
}

#[test]
fn one_process_answers_hostile_fields_with_400s_naming_them() {
    hostile_fields_are_400s_naming_the_field(one_process(HandoffPolicy::SourceFirst));
}

#[test]
fn engines_answer_hostile_fields_with_400s_naming_them() {
    hostile_fields_are_400s_naming_the_field(engines(
        HandoffPolicy::SourceFirst,
        HandoffPolicy::SourceFirst,
    ));
}

fn refuses_mode(pair: &Pair, params: &Value, sent: &str, own: &str) {
    let (status, v) = decode(pair, params);
    assert_eq!(status, 400, "{v}");
    let message = v["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("kv_transfer_params.transfer_mode")
            && message.contains(&format!("{sent:?}"))
            && message.contains(&format!("{own:?}")),
        "{message}"
    );
}

#[test]
fn one_process_refuses_a_transfer_mode_not_the_decode_engines() {
    let pair = one_process(HandoffPolicy::SourceFirst);
    let mut p = prefill(&pair);
    p["transfer_mode"] = json!("push");
    refuses_mode(&pair, &p, "push", "pull");
    p["transfer_mode"] = json!("pull");
    let (status, v) = decode(&pair, &p);
    assert_eq!(status, 200, "the same params with its own mode: {v}");
    (pair.stop)();
}

#[test]
fn engines_of_different_transfer_modes_never_hand_off() {
    let pair = engines(HandoffPolicy::Push, HandoffPolicy::SourceFirst);
    let p = prefill(&pair);
    assert_eq!(p["transfer_mode"], "push", "{p}");
    assert_eq!(p["pp_size"], 1);
    assert!(p.get("dcp_size").is_none() && p.get("remote_blocks_expiry_time").is_none());
    refuses_mode(&pair, &p, "push", "pull");
    (pair.stop)();
    let pair = engines(HandoffPolicy::SourceFirst, HandoffPolicy::Push);
    let p = prefill(&pair);
    refuses_mode(&pair, &p, "pull", "push");
    (pair.stop)();
}
