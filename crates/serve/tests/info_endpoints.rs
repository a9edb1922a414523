//! The endpoints routers and gateways poll (`crate::info`) and SGLang's
//! native `/generate`, over loopback on the front port and on every
//! worker's listener: their JSON shapes, and values that follow the
//! deployment (each worker's role and pool, its live load during a stream).

mod common;

use common::Server;
use handoff_core::Backend;
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_serve::ServeConfig;
use serde_json::Value;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

struct Running {
    http: SocketAddr,
    workers: Vec<SocketAddr>,
    server: Server,
}

impl Running {
    /// `prefill` + `decode` workers of `backend`, each with its listener.
    fn start(backend: Backend, prefill: usize, decode: usize) -> Running {
        let cfg = DeploymentConfig {
            backend,
            prefill_workers: prefill as u32,
            decode_workers: decode as u32,
            ..DeploymentConfig::default()
        };
        let n = prefill + decode;
        let spec = EngineSpec {
            backend,
            ..EngineSpec::default()
        };
        let (l, server) = common::start(ServeConfig {
            worker_http: common::worker_listeners(n as u32),
            ..common::loopback(cfg, vec![spec; n])
        });
        let r = Running {
            http: l.http,
            workers: common::worker_addrs(&l),
            server,
        };
        // Ready once the engine thread has published its workers.
        let deadline = Instant::now() + Duration::from_secs(20);
        while common::call(r.http, "GET", "/health_generate", "").0 != 200 {
            assert!(Instant::now() < deadline, "never healthy");
            std::thread::sleep(Duration::from_millis(20));
        }
        r
    }

    fn json(&self, to: SocketAddr, path: &str) -> Value {
        let (status, body) = common::call(to, "GET", path, "");
        assert_eq!(status, 200, "{to}{path}: {body}");
        serde_json::from_str(&body).expect("json body")
    }
}

const PROMPT: &str = "A router polls the workers it sends to, and then the quick brown fox \
    jumps over the lazy dog so that the prompt spans a few blocks of sixteen tokens.";

#[test]
fn vllm_pd_info_shapes_and_values() {
    let s = Running::start(Backend::Vllm, 1, 1);
    let debug = s.json(s.http, "/debug/workers");
    let total = |w: usize| {
        debug["workers"][w]["capacity"]["total_blocks"]
            .as_u64()
            .expect("blocks")
            * 16
    };
    let scopes = [
        (s.http, "null", total(0) + total(1)),
        (s.workers[0], "prefill", total(0)),
        (s.workers[1], "decode", total(1)),
    ];
    for (to, mode, tokens) in scopes {
        let m = s.json(to, "/v1/models");
        assert_eq!(m["data"][0]["owned_by"], "vllm");
        assert_eq!(m["data"][0]["id"], "m");
        assert_eq!(m["data"][0]["max_model_len"], 65_536);
        assert!(s.json(to, "/version")["version"].is_string());
        for path in ["/server_info", "/get_server_info"] {
            let i = s.json(to, path);
            assert_eq!(i["disaggregation_mode"], mode, "{to}{path}");
            assert_eq!(i["page_size"], 16);
            assert_eq!(
                (i["tp_size"].as_u64(), i["dp_size"].as_u64()),
                (Some(1), Some(1))
            );
            assert_eq!(i["max_total_num_tokens"], tokens, "{to}{path}");
            assert_eq!(i["model_path"], "m");
            assert!(i["version"].is_string());
            assert!(i["disaggregation_bootstrap_port"].is_null());
            let st = &i["internal_states"];
            assert_eq!(st.as_array().map(Vec::len), Some(1));
            assert_eq!(st[0]["memory_usage"]["token_capacity"], tokens);
        }
        for path in ["/model_info", "/get_model_info"] {
            let i = s.json(to, path);
            assert_eq!(
                (i["model_path"].as_str(), i["is_generation"].as_bool()),
                (Some("m"), Some(true))
            );
            assert_eq!(i["tokenizer_path"], "m");
        }
        let l = s.json(to, "/get_load");
        assert_eq!(l.as_array().map(Vec::len), Some(1));
        for k in ["dp_rank", "num_reqs", "num_waiting_reqs", "num_tokens"] {
            assert_eq!(l[0][k], 0, "{to} /get_load {k}");
        }
        for path in [
            "/v1/loads?include=core,disagg,queues,memory",
            "/loads?model=m",
        ] {
            let l = s.json(to, path);
            assert_eq!(l["dp_rank_count"], 1);
            assert!(l["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')));
            let r = &l["loads"][0];
            assert_eq!(
                (r["dp_rank"].as_u64(), r["num_running_reqs"].as_u64()),
                (Some(0), Some(0))
            );
            assert_eq!(r["max_total_num_tokens"], tokens);
            assert_eq!(r["token_usage"], 0.0);
            assert_eq!(r["disagg_mode"], mode);
        }
        assert_eq!(common::call(to, "GET", "/health_generate", "").0, 200);
    }
    // A worker's /metrics: its own series, as engine 0, with its role.
    for (w, role) in [(0, "prefill"), (1, "decode")] {
        let (status, text) = common::call(s.workers[w], "GET", "/metrics", "");
        assert_eq!(status, 200);
        let samples: Vec<&str> = text.lines().filter(|l| l.starts_with("vllm:")).collect();
        assert!(!samples.is_empty());
        assert!(
            samples
                .iter()
                .all(|l| l.contains("engine=\"0\"") && l.contains(&format!("role=\"{role}\""))),
            "{text}"
        );
    }
    // The front keeps every worker.
    let (_, all) = common::call(s.http, "GET", "/metrics", "");
    assert!(all.contains("engine=\"1\",role=\"decode\""));

    // /generate on the front, whole: SGLang's shape, routed through PD.
    let body = format!(
        r#"{{"text":"{PROMPT}","sampling_params":{{"max_new_tokens":5,"ignore_eos":true}},"rid":"abc"}}"#
    );
    let (status, text) = common::call(s.http, "POST", "/generate", &body);
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).expect("json");
    let meta = &v["meta_info"];
    assert_eq!(meta["id"], "abc");
    assert_eq!(meta["completion_tokens"], 5);
    assert_eq!(meta["finish_reason"]["type"], "length");
    assert!(meta["prompt_tokens"].as_u64().is_some_and(|n| n > 16));
    assert!(v["text"].as_str().is_some_and(|t| !t.is_empty()));
    // Streamed: cumulative text, the finish on the last chunk, [DONE].
    let body = format!(
        r#"{{"text":"{PROMPT}","sampling_params":{{"max_new_tokens":4,"ignore_eos":true}},"stream":true}}"#
    );
    let (status, text) = common::call(s.http, "POST", "/generate", &body);
    assert_eq!(status, 200);
    let chunks: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).expect("chunk"))
        .collect();
    assert!(text.contains("data: [DONE]"));
    assert!(chunks.len() >= 2, "{text}");
    let last = chunks.last().expect("chunks");
    assert_eq!(last["meta_info"]["completion_tokens"], 4);
    assert_eq!(last["meta_info"]["finish_reason"]["type"], "length");
    assert!(chunks[..chunks.len() - 1]
        .iter()
        .all(|c| c["meta_info"]["finish_reason"].is_null()));
    // The second request shares the first's prefix on the prefill worker.
    assert!(last["meta_info"]["cached_tokens"]
        .as_u64()
        .is_some_and(|c| c > 0));
    let texts: Vec<&str> = chunks.iter().filter_map(|c| c["text"].as_str()).collect();
    assert!(texts.windows(2).all(|p| p[1].starts_with(p[0])));

    // A wrong method is a 405 in the OpenAI error shape, as elsewhere.
    for to in [s.http, s.workers[0]] {
        let (status, text) = common::call(to, "GET", "/generate", "");
        assert_eq!(status, 405, "{text}");
        assert!(text.contains("\"error\""), "{text}");
    }

    // A disaggregated vLLM worker takes no plain /generate; a
    // bootstrap_room is SGLang's PD flow, not this deployment's.
    let (status, text) = common::call(s.workers[1], "POST", "/generate", r#"{"text":"hi"}"#);
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("kv_transfer_params"), "{text}");
    let (status, text) = common::call(
        s.workers[0],
        "POST",
        "/generate",
        r#"{"text":"hi","bootstrap_host":"127.0.0.1","bootstrap_room":5}"#,
    );
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("destination-first"), "{text}");
    let (status, text) = common::call(
        s.http,
        "POST",
        "/generate",
        r#"{"text":"hi","sampling_params":{"max_new_tokens":"x"}}"#,
    );
    assert_eq!(status, 400);
    assert!(text.contains("sampling_params.max_new_tokens"), "{text}");

    // The load while a long stream decodes: the decode worker's, live.
    let body = format!(
        r#"{{"text":"{PROMPT}","sampling_params":{{"max_new_tokens":20000,"ignore_eos":true}},"stream":true}}"#
    );
    let mut conn = common::send(s.http, "POST", "/generate", &body);
    common::read_events(&mut conn, 3);
    let l = s.json(s.workers[1], "/get_load");
    assert_eq!(l[0]["num_reqs"], 1, "{l}");
    assert!(l[0]["num_tokens"].as_u64().is_some_and(|t| t > 16));
    let loads = s.json(s.workers[1], "/v1/loads");
    assert_eq!(loads["loads"][0]["num_running_reqs"], 1);
    assert!(loads["loads"][0]["token_usage"]
        .as_f64()
        .is_some_and(|u| u > 0.0));
    let front = s.json(s.http, "/get_load");
    assert!(front[0]["num_reqs"].as_u64().is_some_and(|n| n >= 1));
    let info = s.json(s.workers[1], "/server_info");
    assert_eq!(info["internal_states"][0]["running_batch_size"], 1);
    drop(conn);
    common::wait_drained(s.http);
    assert_eq!(s.json(s.workers[1], "/get_load")[0]["num_reqs"], 0);
    s.server.stop();
}

#[test]
fn sglang_aggregated_worker_generates() {
    let s = Running::start(Backend::Sglang, 1, 0);
    for to in [s.http, s.workers[0]] {
        assert_eq!(s.json(to, "/v1/models")["data"][0]["owned_by"], "sglang");
        assert_eq!(s.json(to, "/server_info")["disaggregation_mode"], "null");
        assert_eq!(
            s.json(to, "/server_info")["load_balance_method"],
            "round_robin"
        );
        assert_eq!(s.json(to, "/v1/loads")["loads"][0]["disagg_mode"], "null");
    }
    let (status, text) = common::call(s.workers[0], "GET", "/metrics", "");
    assert_eq!(status, 200);
    assert!(
        text.contains("sglang:num_running_reqs{model_name=\"m\",engine=\"0\",role=\"aggregated\"}"),
        "{text}"
    );
    let (status, text) = common::call(
        s.workers[0],
        "POST",
        "/generate",
        r#"{"input_ids":[1,2,3,4,5],"sampling_params":{"max_new_tokens":3,"ignore_eos":true}}"#,
    );
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["meta_info"]["prompt_tokens"], 5);
    assert_eq!(v["meta_info"]["completion_tokens"], 3);
    common::wait_drained(s.http);
    let report = s.server.stop();
    assert_eq!(report.completed_requests, 1);
}
