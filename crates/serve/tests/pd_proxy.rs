//! Per-worker HTTP behind a disaggregation proxy, end to end over loopback:
//! the two calls of vLLM's `toy_proxy_server.py` (a `do_remote_decode`
//! prefill with `max_tokens: 1` to a prefill worker, then the decode with
//! the returned `kv_transfer_params` to a decode worker), the abandoned
//! decode whose source lease expires and frees the pin, smg's passthrough
//! (plain requests, no params: each worker serves its call whole), the
//! 4xx answers to bad params, and the KV events of a proxied prefill,
//! which carry its prompt's token ids (as the worker's render gives them).

mod common;

use common::{Server, Shared};
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_kv_events::dynamo_hash::tokens_hash;
use handoff_kv_events::RouterEventWriter;
use handoff_serve::ServeConfig;
use serde_json::{json, Value};
use std::net::SocketAddr;

struct Running {
    http: SocketAddr,
    workers: Vec<SocketAddr>,
    server: Server,
}

impl Running {
    /// One prefill (worker 0) and one decode worker (worker 1), each with
    /// its own listener.
    fn start(spec: EngineSpec, base: DeploymentConfig) -> Running {
        Self::start_with(spec, base, None)
    }

    /// As [`Running::start`], writing Dynamo `RouterEvent` JSONL to
    /// `kv_jsonl`.
    fn start_with(
        spec: EngineSpec,
        base: DeploymentConfig,
        kv_jsonl: Option<RouterEventWriter>,
    ) -> Running {
        let (l, server) = common::start(ServeConfig {
            kv_jsonl,
            worker_http: common::worker_listeners(2),
            ..common::loopback_pd(base, spec)
        });
        assert_eq!(
            l.workers.iter().map(|(w, _)| *w).collect::<Vec<_>>(),
            [0, 1]
        );
        Running {
            http: l.http,
            workers: common::worker_addrs(&l),
            server,
        }
    }

    fn call(&self, to: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
        common::call(to, method, path, body)
    }

    /// A whole completion on worker `w`: status and JSON body.
    fn post(&self, w: usize, body: &Value) -> (u16, Value) {
        let (status, text) = self.call(
            self.workers[w],
            "POST",
            "/v1/completions",
            &body.to_string(),
        );
        let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("json: {text}"));
        (status, v)
    }

    fn debug(&self) -> Value {
        let (status, body) = self.call(self.http, "GET", "/debug/workers", "");
        assert_eq!(status, 200);
        serde_json::from_str(&body).expect("json")
    }

    fn wait_drained(&self) -> Value {
        common::wait_drained(self.http)
    }

    fn stop(self) -> handoff_serving::Report {
        self.server.stop()
    }
}

const PROMPT: &str = "A disaggregation proxy sends this prompt to the prefill worker first, \
    then hands the returned kv_transfer_params to the decode worker, like vLLM's toy proxy.";

/// The proxy's first call: `max_tokens: 1`, `do_remote_decode`.
fn prefill_body(prompt: &str) -> Value {
    json!({
        "model": "m", "prompt": prompt, "max_tokens": 1,
        "kv_transfer_params": {
            "do_remote_decode": true, "do_remote_prefill": false,
            "remote_engine_id": null, "remote_block_ids": null,
            "remote_host": null, "remote_port": null,
        },
    })
}

/// The proxy's second call: the original request with the prefill's
/// params.
fn decode_body(prompt: &str, params: &Value, max_tokens: u32, stream: bool) -> Value {
    json!({
        "model": "m", "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": true,
        "stream": stream, "stream_options": if stream { json!({"include_usage": true}) } else { Value::Null },
        "kv_transfer_params": params,
    })
}

#[test]
fn proxy_prefill_then_decode() {
    let s = Running::start(EngineSpec::default(), DeploymentConfig::default());
    let (status, v) = s.post(0, &prefill_body(PROMPT));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 1);
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    let prompt_tokens = v["usage"]["prompt_tokens"].as_u64().expect("count");
    let p = v["kv_transfer_params"].clone();
    assert_eq!(p["do_remote_prefill"], true);
    assert_eq!(p["do_remote_decode"], false);
    assert_eq!(p["remote_engine_id"], "0");
    assert_eq!(p["remote_host"], "127.0.0.1");
    assert_eq!(p["remote_port"], s.workers[0].port());
    // One list of ids per KV cache group (one group).
    let blocks = p["remote_block_ids"][0].as_array().expect("ids").len() as u64;
    assert_eq!(blocks, prompt_tokens.div_ceil(16), "{p}");
    // The prefill is pinned on worker 0, waiting for its decode.
    let d = s.debug();
    assert_eq!(d["workers"][0]["drained"], false, "{d}");
    assert_eq!(d["workers"][0]["live_handoffs"], 1, "{d}");
    assert_eq!(d["in_flight"], 1);

    // The decode on worker 1: every token streams from there, the pinned
    // prefix counts as cached.
    let (status, v) = s.post(1, &decode_body(PROMPT, &p, 6, false));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 6);
    assert_eq!(v["usage"]["prompt_tokens"], prompt_tokens);
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("cached");
    assert!(cached > 0 && cached <= prompt_tokens, "{cached}");
    assert!(v.get("kv_transfer_params").is_none());
    s.wait_drained();

    // The same handoff cannot be decoded twice.
    let (status, v) = s.post(1, &decode_body(PROMPT, &p, 6, false));
    assert_eq!(status, 404, "{v}");
    assert_eq!(v["error"]["param"], "kv_transfer_params");

    // Streamed decode (the toy proxy streams it).
    let other = format!("{PROMPT} Streamed this time.");
    let (status, v) = s.post(0, &prefill_body(&other));
    assert_eq!(status, 200, "{v}");
    let body = decode_body(&other, &v["kv_transfer_params"], 5, true).to_string();
    let (status, text) = s.call(s.workers[1], "POST", "/v1/completions", &body);
    assert_eq!(status, 200, "{text}");
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).expect("chunk"))
        .collect();
    let texts = chunks
        .iter()
        .filter(|c| {
            c["choices"][0]["text"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
        })
        .count();
    assert_eq!(texts, 5);
    assert_eq!(
        chunks.last().expect("usage")["usage"]["completion_tokens"],
        5
    );

    // The frontend still routes as before.
    let (status, _) = s.call(
        s.http,
        "POST",
        "/v1/completions",
        &json!({"model": "m", "prompt": "plain", "max_tokens": 3}).to_string(),
    );
    assert_eq!(status, 200);
    s.wait_drained();
    let r = s.stop();
    assert_eq!(r.num_requests, 3);
    assert_eq!(r.completed_requests, 3);
    assert_eq!(r.failed_requests, 0);
    assert_eq!(r.lifecycle.lease_expiries, 0);
}

#[test]
fn abandoned_decode_lease_expires_and_frees_the_pin() {
    let spec = EngineSpec {
        source_lease_ttl: Some(handoff_core::Duration::from_millis(300)),
        ..EngineSpec::default()
    };
    let s = Running::start(spec, DeploymentConfig::default());
    let (status, v) = s.post(0, &prefill_body(PROMPT));
    assert_eq!(status, 200, "{v}");
    let p = v["kv_transfer_params"].clone();
    // The proxy never sends the decode: the lease runs out, the pinned
    // blocks are freed and the worker drains.
    let d = s.wait_drained();
    assert_eq!(
        d["workers"][0]["capacity"]["pinned_source_blocks"], 0,
        "{d}"
    );
    let (status, v) = s.post(1, &decode_body(PROMPT, &p, 4, false));
    assert_eq!(status, 404, "{v}");
    let r = s.stop();
    assert_eq!(r.num_requests, 1);
    assert_eq!(r.failed_requests, 1);
    assert_eq!(r.lifecycle.lease_expiries, 1);
}

/// One worker's capacity as `/debug/workers` shows it: no block held by a
/// request, a pin or a reservation (cached blocks may stay).
fn no_block_in_use(d: &Value) {
    for w in d["workers"].as_array().expect("workers") {
        let c = &w["capacity"];
        for k in [
            "active_blocks",
            "pinned_source_blocks",
            "reserved_destination_blocks",
        ] {
            assert_eq!(c[k], 0, "{k}: {d}");
        }
        assert_eq!(c["running_requests"], 0, "{d}");
        assert_eq!(w["live_handoffs"], 0, "{d}");
    }
}

/// smg's PD passthrough for vLLM workers it knows no KV connector of: the
/// request with `max_tokens: 1` and no `kv_transfer_params` to the prefill
/// worker, then the plain request to the decode worker. Each worker serves
/// its call whole, as vLLM does a request without remote params: the
/// decode worker prefills the prompt again (nothing cached there the first
/// time), and a repeated prompt hits each worker's own prefix cache.
#[test]
fn passthrough_serves_each_plain_call_whole() {
    let s = Running::start(EngineSpec::default(), DeploymentConfig::default());
    let plain = |max_tokens: u32, stream: bool| {
        json!({
            "model": "m", "prompt": PROMPT, "max_tokens": max_tokens, "ignore_eos": true,
            "stream": stream,
            "stream_options": if stream { json!({"include_usage": true}) } else { Value::Null },
        })
    };
    let mut first_cached = Vec::new();
    for round in 0..2 {
        let (status, v) = s.post(0, &plain(1, false));
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["usage"]["completion_tokens"], 1, "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        assert!(v.get("kv_transfer_params").is_none(), "{v}");
        let prompt_tokens = v["usage"]["prompt_tokens"].as_u64().expect("count");
        let cached = |v: &Value| v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64();
        first_cached.push(cached(&v).expect("cached"));
        // Nothing pinned for a decode: the prefill worker is free again.
        let d = s.debug();
        assert_eq!(d["workers"][0]["live_handoffs"], 0, "{d}");
        assert_eq!(
            d["workers"][0]["capacity"]["pinned_source_blocks"], 0,
            "{d}"
        );

        let (status, v) = s.post(1, &plain(6, false));
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["usage"]["completion_tokens"], 6, "{v}");
        assert_eq!(v["usage"]["prompt_tokens"], prompt_tokens);
        let c = cached(&v).expect("cached");
        if round == 0 {
            assert_eq!(c, 0, "the decode worker computes the prompt itself: {v}");
        } else {
            assert!(c > 0 && c < prompt_tokens, "its own prefix cache: {v}");
        }
    }
    assert_eq!(first_cached[0], 0);
    assert!(first_cached[1] > 0, "the prefill worker's own prefix cache");

    // Streamed, on both workers: every token on its own chunk, then usage.
    for (w, n) in [(0, 1), (1, 4)] {
        let (status, text) = s.call(
            s.workers[w],
            "POST",
            "/v1/completions",
            &plain(n, true).to_string(),
        );
        assert_eq!(status, 200, "{text}");
        let data: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .collect();
        assert_eq!(data.last(), Some(&"[DONE]"), "{text}");
        let last: Value = serde_json::from_str(data[data.len() - 2]).expect("usage chunk");
        assert_eq!(last["usage"]["completion_tokens"], n, "{text}");
    }
    let d = s.wait_drained();
    no_block_in_use(&d);
    let r = s.stop();
    assert_eq!(r.num_requests, 6);
    assert_eq!(r.completed_requests, 6);
    assert_eq!(r.failed_requests, 0);
    assert_eq!(r.lifecycle.lease_expiries, 0);
}

#[test]
fn bad_params_are_4xx() {
    let s = Running::start(EngineSpec::default(), DeploymentConfig::default());
    // do_remote_decode to the decode worker; a streamed prefill.
    assert_eq!(s.post(1, &prefill_body(PROMPT)).0, 400);
    let mut streamed = prefill_body(PROMPT);
    streamed["stream"] = json!(true);
    assert_eq!(s.post(0, &streamed).0, 400);
    // Malformed params.
    for params in [
        json!(7),
        json!({"do_remote_decode": "yes"}),
        json!({"do_remote_decode": true, "do_remote_prefill": true}),
        json!({"do_remote_prefill": true, "remote_engine_id": "0"}),
    ] {
        let body = json!({"model": "m", "prompt": PROMPT, "kv_transfer_params": params});
        let (status, v) = s.post(1, &body);
        assert_eq!(status, 400, "{params}: {v}");
    }
    // A real prefill, then decodes that do not match it.
    let (_, v) = s.post(0, &prefill_body(PROMPT));
    let p = v["kv_transfer_params"].clone();
    let mut wrong_engine = p.clone();
    wrong_engine["remote_engine_id"] = json!("1");
    let mut wrong_handoff = p.clone();
    wrong_handoff["handoff_id"] = json!("12345");
    let mut few_blocks = p.clone();
    few_blocks["remote_block_ids"] = json!([0]);
    for (body, status) in [
        (decode_body("something else", &p, 3, false), 400),
        (decode_body(PROMPT, &wrong_engine, 3, false), 400),
        (decode_body(PROMPT, &wrong_handoff, 3, false), 404),
        (decode_body(PROMPT, &wrong_handoff, 3, true), 404),
        (decode_body(PROMPT, &few_blocks, 3, false), 400),
    ] {
        let (got, v) = s.post(1, &body);
        assert_eq!(got, status, "{body}: {v}");
        assert_eq!(v["error"]["code"], status);
    }
    // do_remote_prefill to the prefill worker.
    assert_eq!(s.post(0, &decode_body(PROMPT, &p, 3, false)).0, 400);
    // None of those cancelled the pinned prefill: the right decode works.
    let (status, v) = s.post(1, &decode_body(PROMPT, &p, 3, false));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 3);
    s.wait_drained();
    let r = s.stop();
    assert_eq!(r.completed_requests, 1);
    assert_eq!(r.failed_requests, 0);
}

#[test]
fn sglang_workers_refuse_with_a_typed_400() {
    let base = DeploymentConfig {
        backend: handoff_core::Backend::Sglang,
        policy: handoff_core::HandoffPolicy::DestinationFirst,
        ..DeploymentConfig::default()
    };
    let spec = EngineSpec {
        backend: handoff_core::Backend::Sglang,
        ..EngineSpec::default()
    };
    let s = Running::start(spec, base);
    let (status, v) = s.post(0, &prefill_body(PROMPT));
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("SGLang")));
    s.stop();
}

/// A proxied prefill answers when it pins, in the step that stores its
/// blocks; their `Stored` event still carries the prompt's own token ids
/// (Dynamo's `tokens_hash` of the ids the prefill worker's
/// `/v1/completions/render` gives), not a generated block's stand-ins.
#[test]
fn proxied_prefill_events_carry_the_prompts_token_ids() {
    let jsonl = Shared::default();
    let s = Running::start_with(
        EngineSpec::default(),
        DeploymentConfig::default(),
        Some(RouterEventWriter::new(Box::new(jsonl.clone()))),
    );
    let (status, text) = s.call(
        s.workers[0],
        "POST",
        "/v1/completions/render",
        &json!({"model": "m", "prompt": PROMPT}).to_string(),
    );
    assert_eq!(status, 200, "{text}");
    let rendered: Value = serde_json::from_str(&text).expect("json");
    let ids: Vec<u32> =
        serde_json::from_value(rendered[0]["token_ids"].clone()).expect("token ids");
    let want: Vec<u64> = ids.chunks_exact(16).map(tokens_hash).collect();
    assert!(want.len() >= 2, "{} tokens", ids.len());
    let (status, v) = s.post(0, &prefill_body(PROMPT));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["prompt_tokens"], ids.len());
    let (status, v) = s.post(1, &decode_body(PROMPT, &v["kv_transfer_params"], 4, false));
    assert_eq!(status, 200, "{v}");
    s.wait_drained();
    s.stop();
    let text = jsonl.text();
    let on_prefill: Vec<u64> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("json line"))
        .filter(|e| e["worker_id"] == 0)
        .flat_map(|e| {
            e["event"]["data"]["stored"]["blocks"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|b| b["tokens_hash"].as_u64().expect("tokens_hash"))
        .collect();
    assert_eq!(on_prefill, want, "the prefill worker's stored blocks");
}

/// vLLM's push mode behind a proxy that passes `kv_transfer_params`
/// through (the toy proxy's two calls): the prefill answers with
/// `transfer_mode: "push"`, as `NixlPushConnectorScheduler.request_finished`
/// does (`vllm/distributed/kv_transfer/kv_connector/v1/nixl/push_scheduler.py`),
/// and stays pinned until the decode engine it is handed to registers its
/// blocks; the prefill engine then writes and frees its own at the write's
/// end, before the decode finishes.
#[test]
fn push_mode_answers_transfer_mode_push_and_the_proxied_decode_completes() {
    let base = DeploymentConfig {
        policy: handoff_core::HandoffPolicy::Push,
        ..DeploymentConfig::default()
    };
    let s = Running::start(EngineSpec::default(), base);
    let (status, v) = s.post(0, &prefill_body(PROMPT));
    assert_eq!(status, 200, "{v}");
    let p = v["kv_transfer_params"].clone();
    assert_eq!(p["transfer_mode"], "push", "{p}");
    assert_eq!(p["do_remote_prefill"], true);
    let d = s.debug();
    assert_eq!(d["workers"][0]["live_handoffs"], 1, "pinned, waiting: {d}");
    let (status, v) = s.post(1, &decode_body(PROMPT, &p, 6, false));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 6);
    s.wait_drained();
    let r = s.stop();
    assert_eq!(r.completed_requests, 1, "{:?}", r.lifecycle);
    assert_eq!(r.failed_requests, 0);
    assert_eq!(r.lifecycle.handoffs_activated, 1);
    assert_eq!(r.lifecycle.lease_expiries, 0);
}
