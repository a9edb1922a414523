//! LoRA end to end through serve: an adapter loaded at run time (vLLM's
//! `/v1/load_lora_adapter`), listed in `/v1/models` under its parent, a
//! completion naming it, `vllm:lora_requests_info` naming it while it runs,
//! and its `BlockStored` events carrying `lora_id` / `lora_name` under
//! block hashes apart from the same prompt's on the base model.

mod common;

use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_serve::{LoraConfig, ServeConfig};

const PROMPT: &str = "A shared system prompt about storage racks, cables, fans and disks, \
                      long enough for several blocks of sixteen tokens each. Question?";

fn lora_server() -> (
    handoff_serve::Listening,
    common::Server,
    handoff_serve::KvEndpoints,
) {
    let spec = EngineSpec {
        max_loras: Some(1),
        ..EngineSpec::default()
    };
    let cfg = DeploymentConfig {
        prefill_workers: 1,
        decode_workers: 0,
        ..DeploymentConfig::default()
    };
    common::start_with_kv(1, |ep| ServeConfig {
        kv: Some(ep),
        lora: Some(LoraConfig {
            modules: vec![handoff_serve::parse_lora_module("static=/lora/static").expect("module")],
            runtime_updating: true,
            ..LoraConfig::default()
        }),
        ..common::loopback(cfg.clone(), vec![spec.clone()])
    })
}

/// Every `BlockStored` of the replay: (hashes, lora_id, lora_name).
async fn stored(replay: &str) -> Vec<(Vec<u64>, Option<u64>, Option<String>)> {
    let mut out = Vec::new();
    for batch in common::replay_batches(replay).await {
        for e in batch[1].as_array().expect("events") {
            let e = e.as_array().expect("tagged");
            if e[0].as_str() == Some("BlockStored") {
                let hashes = e[1]
                    .as_array()
                    .expect("hashes")
                    .iter()
                    .map(|h| h.as_u64().expect("u64"))
                    .collect();
                let name = e.get(7).and_then(|n| n.as_str()).map(str::to_string);
                out.push((hashes, e[5].as_u64(), name));
            }
        }
    }
    out
}

#[test]
fn a_loaded_adapter_serves_lists_meters_and_hashes_apart() {
    let (l, server, ep) = lora_server();
    let addr = l.http;
    let load = r#"{"lora_name":"sql","lora_path":"/lora/sql"}"#;
    let (status, text) = common::call(addr, "POST", "/v1/load_lora_adapter", load);
    assert_eq!(
        (status, text.as_str()),
        (200, "Success: LoRA adapter 'sql' added successfully.")
    );
    let (status, text) = common::call(addr, "POST", "/v1/load_lora_adapter", load);
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("has already been loaded") && text.contains("InvalidUserInput"));

    let (_, models) = common::call(addr, "GET", "/v1/models", "");
    let v: serde_json::Value = serde_json::from_str(&models).expect("json");
    let data = v["data"].as_array().expect("cards");
    let ids: Vec<_> = data
        .iter()
        .map(|c| c["id"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(ids, ["m", "static", "sql"]);
    assert_eq!(
        (data[2]["parent"].as_str(), data[2]["root"].as_str()),
        (Some("m"), Some("/lora/sql"))
    );

    // A long request on the adapter, seen running in the LoRA gauge.
    let body = |model: &str, n: u32| {
        format!(r#"{{"model":"{model}","prompt":"{PROMPT}","max_tokens":{n},"ignore_eos":true}}"#)
    };
    let long = body("sql", 300);
    let conn = common::send(addr, "POST", "/v1/completions", &long);
    let mut seen = false;
    for _ in 0..500 {
        let (_, m) = common::call(addr, "GET", "/metrics", "");
        if m.lines().any(|x| {
            x.starts_with("vllm:lora_requests_info{")
                && x.contains("max_lora=\"1\"")
                && x.contains("running_lora_adapters=\"sql\"")
        }) {
            seen = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(seen, "the adapter shows as running");
    // An aggregated worker runs it to its end with nobody listening.
    drop(conn);
    for model in ["sql", "m"] {
        let (status, text) = common::call(addr, "POST", "/v1/completions", &body(model, 2));
        assert_eq!(status, 200, "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).expect("json");
        assert_eq!(v["usage"]["completion_tokens"], 2);
        // vLLM answers with the adapter's name when the request ran on
        // one (`OpenAIServing._get_model_name`).
        assert_eq!(v["model"], model, "{text}");
    }
    let (status, text) = common::call(addr, "POST", "/v1/completions", &body("nope", 2));
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("The model `nope` does not exist."));
    let unload = r#"{"lora_name":"sql"}"#;
    let (status, _) = common::call(addr, "POST", "/v1/unload_lora_adapter", unload);
    assert_eq!(status, 200);
    let (status, text) = common::call(addr, "POST", "/v1/unload_lora_adapter", unload);
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("cannot be found") && text.contains("NotFoundError"));
    common::wait_drained(addr);
    let (_, m) = common::call(addr, "GET", "/metrics", "");
    let info: Vec<_> = m
        .lines()
        .filter(|x| x.starts_with("vllm:lora_requests_info{"))
        .collect();
    assert_eq!(info.len(), 1, "one current series per worker: {info:?}");
    assert!(
        info[0].contains("running_lora_adapters=\"\""),
        "{}",
        info[0]
    );

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let events = rt.block_on(stored(&ep.replay[0]));
    let _ = server.stop();
    let lora: Vec<u64> = events
        .iter()
        .filter(|e| e.2.as_deref() == Some("sql"))
        .flat_map(|e| {
            assert_eq!(e.1, Some(2), "the runtime adapter is lora_int_id 2");
            e.0.clone()
        })
        .collect();
    let base: Vec<u64> = events
        .iter()
        .filter(|e| e.2.is_none())
        .flat_map(|e| e.0.clone())
        .collect();
    assert!(!lora.is_empty() && !base.is_empty(), "{events:?}");
    assert!(events.iter().all(|e| e.1.is_some() == e.2.is_some()));
    assert!(
        lora.iter().all(|h| !base.contains(h)),
        "adapter blocks hash apart"
    );
}

#[test]
fn without_the_environment_switch_the_endpoints_do_not_exist() {
    let cfg = DeploymentConfig {
        prefill_workers: 1,
        decode_workers: 0,
        ..DeploymentConfig::default()
    };
    let (l, server) = common::start(ServeConfig {
        lora: Some(LoraConfig {
            modules: vec![handoff_serve::parse_lora_module("a=/a").expect("module")],
            ..LoraConfig::default()
        }),
        ..common::loopback(cfg, vec![EngineSpec::default()])
    });
    let (status, _) = common::call(l.http, "POST", "/v1/load_lora_adapter", "{}");
    assert_eq!(status, 404);
    let body = r#"{"model":"a","prompt":"hi there","max_tokens":2,"ignore_eos":true}"#;
    let (status, text) = common::call(l.http, "POST", "/v1/completions", body);
    assert_eq!(status, 200, "{text}");
    let _ = server.stop();
}

#[test]
fn oversized_names_and_paths_are_refused_and_leave_the_model_list_small() {
    let cfg = DeploymentConfig {
        prefill_workers: 1,
        decode_workers: 0,
        ..DeploymentConfig::default()
    };
    let (l, server) = common::start(ServeConfig {
        lora: Some(LoraConfig {
            runtime_updating: true,
            ..LoraConfig::default()
        }),
        ..common::loopback(cfg, vec![EngineSpec::default()])
    });
    let load = |name: &str, path: &str| {
        let body = serde_json::json!({"lora_name": name, "lora_path": path}).to_string();
        common::call(l.http, "POST", "/v1/load_lora_adapter", &body)
    };
    let (_, before) = common::call(l.http, "GET", "/v1/models", "");
    let huge = "x".repeat(64 << 10);
    for i in 0..100 {
        let (status, text) = load(&format!("{huge}{i}"), "/p");
        assert_eq!(status, 400, "{text}");
        assert!(text.contains("InvalidUserInput") && text.contains("'lora_name' is"));
        assert!(text.len() < 1000, "the answer does not echo the name");
        let (status, text) = load(&format!("n{i}"), &huge);
        assert_eq!(status, 400, "{text}");
        assert!(
            text.contains("'lora_path' is 65536 bytes, more than 4096"),
            "{text}"
        );
    }
    let (status, text) = load("tab\tname", "/p");
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("control character"), "{text}");
    let (_, after) = common::call(l.http, "GET", "/v1/models", "");
    assert_eq!(after, before, "no refused adapter is listed");
    // One within the bounds still loads.
    let (status, text) = load(&"n".repeat(256), &"/p".repeat(2048));
    assert_eq!(status, 200, "{text}");
    let _ = server.stop();
}
