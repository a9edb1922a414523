//! The P/D conformance report (`GET /debug/conformance`,
//! `<engine>:handoff_conformance_total`), in both serve modes where the
//! mode can see the misbehaviour: a direct client's decode without
//! `kv_transfer_params`, a proxy that drops the params (and so strands its
//! prefill until the lease runs out), a prefill-only client, smg's plain
//! mode (the same prompt prefilled on both pools while the prefill pool
//! idles: one process only, since an engine process sees one pool), a
//! decode naming a prefill engine not in the deployment, SGLang legs
//! without a partner or without bootstrap fields; and the endpoint under
//! query strings and huge headers.

mod common;

use common::pod::Pod;
use handoff_core::{Backend, Duration as ModelDuration, HandoffPolicy};
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_router::Pool;
use handoff_serve::ServeConfig;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const PROMPT: &str = "a router that gets disaggregation wrong does so silently: this prompt \
    is long enough to fill a few blocks of sixteen tokens each, so its hashes name it";

/// The prefill and decode endpoints of one mode, where each side's report
/// is read, and how to stop them.
struct Pair {
    prefill: SocketAddr,
    decode: SocketAddr,
    /// Where the prefill side's `/debug/conformance` and `/metrics` are.
    report_p: SocketAddr,
    /// The decode side's.
    report_d: SocketAddr,
    stop: Box<dyn FnOnce()>,
}

fn vllm(lease: Option<ModelDuration>) -> ServeConfig {
    let spec = EngineSpec {
        source_lease_ttl: lease,
        ..EngineSpec::default()
    };
    common::loopback_pd(DeploymentConfig::default(), spec)
}

fn sglang(timeout_s: f64) -> ServeConfig {
    let spec = EngineSpec {
        backend: Backend::Sglang,
        block_size: 16,
        max_running: EngineSpec::default_max_running(Backend::Sglang, 16_384 * 16),
        ..EngineSpec::default()
    };
    let base = DeploymentConfig::default();
    let cfg = DeploymentConfig {
        backend: Backend::Sglang,
        policy: HandoffPolicy::DestinationFirst,
        prefill_workers: 1,
        decode_workers: 1,
        block_size: spec.event_block_tokens(),
        // A decode leg that reserved on arrival waits as long for its KV.
        handoff: handoff_core::HandoffConfig {
            reservation_ttl: ModelDuration::from_secs_f64(timeout_s),
            ..handoff_core::HandoffConfig::for_backend(Backend::Sglang)
        },
        ..base
    };
    ServeConfig {
        bootstrap_timeout_s: timeout_s,
        ..common::loopback(cfg, vec![spec; 2])
    }
}

/// One `serve` process with per-worker listeners: worker 0 prefills,
/// worker 1 decodes; the front port reports.
fn one_process(c: ServeConfig) -> Pair {
    let (l, server) = common::start(ServeConfig {
        worker_http: common::worker_listeners(2),
        ..c
    });
    let w = common::worker_addrs(&l);
    Pair {
        prefill: w[0],
        decode: w[1],
        report_p: l.http,
        report_d: l.http,
        stop: Box::new(move || {
            server.stop();
        }),
    }
}

/// `serve --engine prefill` and `serve --engine decode`, each reporting
/// on its own port.
fn engines(c: impl Fn() -> ServeConfig) -> Pair {
    let p = Pod::run(common::pod::config(c(), Pool::Prefill));
    let d = Pod::run(common::pod::config(c(), Pool::Decode));
    Pair {
        prefill: p.l.http,
        decode: d.l.http,
        report_p: p.l.http,
        report_d: d.l.http,
        stop: Box::new(move || {
            p.stop();
            d.stop();
        }),
    }
}

fn post(to: SocketAddr, body: &Value) -> (u16, Value) {
    let (status, text) = common::call(to, "POST", "/v1/completions", &body.to_string());
    let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, v)
}

fn plain(max_tokens: u32) -> Value {
    json!({"model": "m", "prompt": PROMPT, "max_tokens": max_tokens, "ignore_eos": true})
}

fn prefill_params(to: SocketAddr) -> Value {
    let body = json!({"model": "m", "prompt": PROMPT, "max_tokens": 1,
                      "kv_transfer_params": {"do_remote_decode": true}});
    let (status, v) = post(to, &body);
    assert_eq!(status, 200, "{v}");
    v["kv_transfer_params"].clone()
}

fn report(at: SocketAddr) -> Value {
    let (status, text) = common::call(at, "GET", "/debug/conformance", "");
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).expect("json")
}

fn count(at: SocketAddr, kind: &str) -> u64 {
    report(at)["kinds"][kind]["count"].as_u64().expect("count")
}

/// Waits (up to 10 s) until `kind` reaches `n` at `at`.
fn wait_count(at: SocketAddr, kind: &str, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while count(at, kind) < n {
        assert!(
            Instant::now() < deadline,
            "{kind} never reached {n}: {}",
            report(at)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn metric(at: SocketAddr, prefix: &str, kind: &str) -> Option<f64> {
    let (_, text) = common::call(at, "GET", "/metrics", "");
    let head = format!("{prefix}:handoff_conformance_total{{model_name=\"m\",kind=\"{kind}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&head))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn a_direct_clients_decode_without_params_is_counted_and_listed_in_both_modes() {
    for (mode, pair) in [
        ("one process", one_process(vllm(None))),
        ("engines", engines(|| vllm(None))),
    ] {
        assert_eq!(count(pair.report_d, "decode_without_params"), 0, "{mode}");
        let (status, v) = post(pair.decode, &plain(4));
        assert_eq!(status, 200, "{mode}: {v}");
        let r = report(pair.report_d);
        let k = &r["kinds"]["decode_without_params"];
        assert_eq!(k["count"], 1, "{mode}: {r}");
        let ex = &k["examples"][0];
        assert!(ex["request_id"].is_u64(), "{mode}: {r}");
        assert!(ex["engine"].is_u64(), "{mode}: {r}");
        assert!(
            ex["at_unix_s"].as_f64().is_some_and(|t| t > 0.0),
            "{mode}: {r}"
        );
        let m = metric(pair.report_d, "vllm", "decode_without_params");
        assert_eq!(m, Some(1.0), "{mode}");
        assert_eq!(r["max_examples"], 16);
        (pair.stop)();
    }
}

#[test]
fn a_proxy_that_drops_the_params_recomputes_on_decode_and_strands_the_prefill() {
    let lease = Some(ModelDuration::from_millis(300));
    for (mode, pair) in [
        ("one process", one_process(vllm(lease))),
        ("engines", engines(|| vllm(lease))),
    ] {
        // The proxy's prefill call pins; its decode call drops the params.
        let params = prefill_params(pair.prefill);
        assert!(params.is_object(), "{mode}: {params}");
        let (status, v) = post(pair.decode, &plain(4));
        assert_eq!(status, 200, "{mode}: {v}");
        assert_eq!(count(pair.report_d, "decode_without_params"), 1, "{mode}");
        // No decode ever reads the pin: its lease runs out unread.
        wait_count(pair.report_p, "lease_expired_unread", 1);
        assert_eq!(count(pair.report_p, "lease_expired_reading"), 0, "{mode}");
        (pair.stop)();
    }
}

#[test]
fn a_prefill_only_client_is_a_lease_expired_unread_in_both_modes() {
    let lease = Some(ModelDuration::from_millis(200));
    for (mode, pair) in [
        ("one process", one_process(vllm(lease))),
        ("engines", engines(|| vllm(lease))),
    ] {
        prefill_params(pair.prefill);
        prefill_params(pair.prefill);
        wait_count(pair.report_p, "lease_expired_unread", 2);
        let m = metric(pair.report_p, "vllm", "lease_expired_unread");
        assert_eq!(m, Some(2.0), "{mode}");
        assert_eq!(count(pair.report_d, "decode_without_params"), 0, "{mode}");
        (pair.stop)();
    }
}

/// smg with command-line vLLM workers (no `kv_connector`): the prompt with
/// `max_tokens: 1` and no params to the prefill worker, then the plain
/// request to the decode worker. One process sees both pools: the same
/// prompt prefilled twice, and the decode computing it while the prefill
/// pool idles.
#[test]
fn smg_plain_mode_is_a_duplicate_prefill_with_the_prefill_pool_idle() {
    let pair = one_process(vllm(None));
    let (status, v) = post(pair.prefill, &plain(1));
    assert_eq!(status, 200, "{v}");
    // The prefill pool's next snapshot shows it idle.
    common::wait_drained(pair.report_p);
    let (status, v) = post(pair.decode, &plain(4));
    assert_eq!(status, 200, "{v}");
    let r = report(pair.report_d);
    assert_eq!(r["kinds"]["duplicate_prefill"]["count"], 1, "{r}");
    assert_eq!(r["kinds"]["decode_without_params"]["count"], 1, "{r}");
    let idle = r["kinds"]["idle_pool"]["examples"]
        .as_array()
        .expect("examples");
    assert!(
        idle.iter().any(|e| e["detail"] == "idle pool: prefill"),
        "{r}"
    );
    (pair.stop)();
    // The same two calls with params, on a fresh server, are no finding.
    let pair = one_process(vllm(None));
    let params = prefill_params(pair.prefill);
    let body = json!({"model": "m", "prompt": PROMPT, "max_tokens": 4,
                      "kv_transfer_params": params});
    let (status, v) = post(pair.decode, &body);
    assert_eq!(status, 200, "{v}");
    let r = report(pair.report_d);
    for k in ["duplicate_prefill", "decode_without_params", "idle_pool"] {
        assert_eq!(r["kinds"][k]["count"], 0, "{k}: {r}");
    }
    (pair.stop)();
}

#[test]
fn a_decode_naming_a_prefill_engine_not_in_the_deployment_is_counted() {
    // One process: a remote_engine_id no prefill worker has.
    let pair = one_process(vllm(None));
    let mut params = prefill_params(pair.prefill);
    params["remote_engine_id"] = json!("7");
    let body = json!({"model": "m", "prompt": PROMPT, "max_tokens": 4,
                      "kv_transfer_params": params});
    let (status, v) = post(pair.decode, &body);
    assert!((400..500).contains(&status), "{status} {v}");
    let r = report(pair.report_d);
    assert_eq!(r["kinds"]["unknown_prefill_engine"]["count"], 1, "{r}");
    assert_eq!(
        r["kinds"]["unknown_prefill_engine"]["examples"][0]["detail"],
        "named 7"
    );
    (pair.stop)();
    // Engines: a host outside --kv-peer-allow, and a port nothing answers.
    let pair = engines(|| vllm(None));
    let params = prefill_params(pair.prefill);
    let mut far = params.clone();
    far["remote_host"] = json!("192.0.2.1");
    let body = json!({"model": "m", "prompt": PROMPT, "max_tokens": 4,
                      "kv_transfer_params": far});
    let (status, v) = post(pair.decode, &body);
    assert_eq!(status, 403, "{v}");
    assert_eq!(count(pair.report_d, "unknown_prefill_engine"), 1);
    let mut dead = params;
    dead["remote_port"] = json!(common::free_port());
    let body = json!({"model": "m", "prompt": PROMPT, "max_tokens": 4,
                      "kv_transfer_params": dead});
    let _ = post(pair.decode, &body);
    wait_count(pair.report_d, "unknown_prefill_engine", 2);
    (pair.stop)();
}

/// An SGLang leg of `room`.
fn leg(room: u64) -> Value {
    json!({"model": "m", "prompt": PROMPT, "max_tokens": 4, "ignore_eos": true,
           "bootstrap_host": "127.0.0.1", "bootstrap_port": 8998, "bootstrap_room": room})
}

#[test]
fn an_sglang_leg_whose_partner_never_came_is_counted_in_both_modes() {
    // One process: a prefill leg and a decode leg, each alone in its room
    // (the decode's reserves at once, its one prefill worker known, and
    // waits for KV that never comes: SGLang's waiting timeout).
    let pair = one_process(sglang(0.3));
    let (status, v) = post(pair.prefill, &leg(1));
    assert!(status >= 400, "{status} {v}");
    let (status, v) = post(pair.decode, &leg(2));
    assert!(status >= 400, "{status} {v}");
    let r = report(pair.report_d);
    let k = &r["kinds"]["unpaired_leg"];
    assert_eq!(k["count"], 2, "{r}");
    assert_eq!(
        k["examples"][0]["detail"], "room 1, prefill leg only",
        "{r}"
    );
    assert_eq!(k["examples"][1]["detail"], "room 2, decode leg only", "{r}");
    assert_eq!(metric(pair.report_d, "sglang", "unpaired_leg"), Some(2.0));
    (pair.stop)();
    // Engines: the prefill engine's leg times out.
    let pair = engines(|| sglang(0.3));
    let (status, v) = post(pair.prefill, &leg(3));
    assert!(status >= 400, "{status} {v}");
    assert_eq!(count(pair.report_p, "unpaired_leg"), 1);
    // SGLang has no lease: the timed-out source is not a lease expiry.
    assert_eq!(count(pair.report_p, "lease_expired_unread"), 0);
    (pair.stop)();
}

#[test]
fn an_sglang_decode_without_bootstrap_fields_is_counted_in_both_modes() {
    for (mode, pair) in [
        ("one process", one_process(sglang(300.0))),
        ("engines", engines(|| sglang(300.0))),
    ] {
        let (status, v) = post(pair.decode, &plain(4));
        assert_eq!(status, 400, "{mode}: {v}");
        assert_eq!(
            count(pair.report_d, "decode_without_params"),
            1,
            "{mode}: {v}"
        );
        // A prefill leg without them is refused too, but is no decode.
        let before = count(pair.report_p, "decode_without_params");
        let (status, _) = post(pair.prefill, &plain(1));
        assert_eq!(status, 400, "{mode}");
        assert_eq!(
            count(pair.report_p, "decode_without_params"),
            before,
            "{mode}"
        );
        (pair.stop)();
    }
}

/// The status line of one raw GET of `path` with `headers`, or `None` when
/// the server closed the connection without an answer.
fn raw_status(to: SocketAddr, path: &str, headers: &str) -> Option<u16> {
    let mut s = TcpStream::connect(to).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).ok();
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n{headers}Connection: close\r\n\r\n");
    let _ = s.write_all(req.as_bytes());
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    text.split(' ').nth(1).and_then(|c| c.parse().ok())
}

#[test]
fn debug_conformance_takes_query_strings_and_huge_headers_as_debug_workers_does() {
    let pair = one_process(vllm(None));
    let at = pair.report_d;
    let (status, text) = common::call(at, "GET", "/debug/conformance?kind=x&%00=%ff&a", "");
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["kinds"].as_object().map(|k| k.len()), Some(7));
    let long_query = format!("?q={}", "a".repeat(8 << 10));
    let big = format!("X-Big: {}\r\n", "b".repeat(16 << 10));
    let huge = format!("X-Huge: {}\r\n", "h".repeat(1 << 20));
    let many: String = (0..200).map(|i| format!("X-{i}: v\r\n")).collect();
    // A server refusing a head may close before the client reads its
    // answer: what is compared is whether each endpoint served it.
    for (headers, served) in [(&big, true), (&huge, false), (&many, false)] {
        for q in ["", long_query.as_str()] {
            let workers = raw_status(at, &format!("/debug/workers{q}"), headers);
            let conf = raw_status(at, &format!("/debug/conformance{q}"), headers);
            let what = format!("{} header bytes, query {}", headers.len(), q.len());
            assert_eq!(workers == Some(200), served, "/debug/workers, {what}");
            assert_eq!(conf == Some(200), served, "/debug/conformance, {what}");
        }
    }
    let (status, _) = common::call(at, "POST", "/debug/conformance", "{}");
    let (wstatus, _) = common::call(at, "POST", "/debug/workers", "{}");
    assert_eq!(status, wstatus);
    // The server still answers.
    assert_eq!(common::call(at, "GET", "/health", "").0, 200);
    (pair.stop)();
}
