//! LoRA adapters the same in both serve modes: `--lora-modules` served by
//! one `serve` process and by an engine process (`serve --engine`), each
//! listing the adapter at `/v1/models`, running a request that names it
//! and answering with the adapter's name as `model`, as vLLM's OpenAI
//! server does (`OpenAIServing._get_model_name`,
//! `vllm/entrypoints/openai/serving_engine.py`).

mod common;

use common::pod::Pod;
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_router::Pool;
use handoff_serve::{LoraConfig, ServeConfig};
use serde_json::{json, Value};
use std::net::SocketAddr;

fn config() -> ServeConfig {
    let cfg = DeploymentConfig {
        prefill_workers: 1,
        decode_workers: 0,
        ..DeploymentConfig::default()
    };
    let spec = EngineSpec {
        max_loras: Some(1),
        ..EngineSpec::default()
    };
    ServeConfig {
        lora: Some(LoraConfig {
            modules: vec![handoff_serve::parse_lora_module("sql=/lora/sql").expect("module")],
            ..LoraConfig::default()
        }),
        ..common::loopback(cfg, vec![spec])
    }
}

fn serves_its_adapters(http: SocketAddr) {
    let (status, models) = common::call(http, "GET", "/v1/models", "");
    assert_eq!(status, 200, "{models}");
    let v: Value = serde_json::from_str(&models).expect("json");
    let ids: Vec<&str> = v["data"]
        .as_array()
        .expect("cards")
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert!(ids.contains(&"sql") && ids.contains(&"m"), "{ids:?}");
    for model in ["sql", "m"] {
        let body = json!({"model": model, "prompt": "select the rows", "max_tokens": 3,
                          "ignore_eos": true});
        let (status, text) = common::call(http, "POST", "/v1/completions", &body.to_string());
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(v["model"], model, "{v}");
        assert_eq!(v["usage"]["completion_tokens"], 3);
    }
    let body = json!({"model": "nosuch", "prompt": "x", "max_tokens": 1});
    let (status, text) = common::call(http, "POST", "/v1/completions", &body.to_string());
    assert_eq!(status, 404, "{text}");
    let (_, metrics) = common::call(http, "GET", "/metrics", "");
    assert!(
        metrics.contains("vllm:lora_requests_info{"),
        "the LoRA gauge exists with LoRA configured"
    );
}

#[test]
fn one_process_serves_its_lora_modules() {
    let (l, server) = common::start(config());
    serves_its_adapters(l.http);
    common::wait_drained(l.http);
    server.stop();
}

#[test]
fn an_engine_process_serves_its_lora_modules() {
    let pod = Pod::run(common::pod::config(config(), Pool::Aggregated));
    serves_its_adapters(pod.l.http);
    common::wait_drained(pod.l.http);
    let s = pod.stop();
    assert!(s.failed.is_empty(), "{s:?}");
}
