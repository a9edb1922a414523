//! The server end to end over loopback with a plain HTTP/1.1 client: whole
//! and streamed completions, OpenAI errors, and a client that disconnects
//! mid-stream leaving every worker drained (its lease and reservation
//! ended). The Python suite (`tests/python/`) checks the same with real
//! clients; this one runs with `cargo test`.

mod common;

use common::Server;
use handoff_deployment::{DeploymentConfig, EngineSpec};
use std::net::{SocketAddr, TcpStream};

struct Running {
    addr: SocketAddr,
    server: Server,
}

impl Running {
    fn start() -> Running {
        Running::start_with(DeploymentConfig::default(), EngineSpec::default())
    }

    /// One prefill and one decode worker of `spec`'s engine.
    fn start_with(base: DeploymentConfig, spec: EngineSpec) -> Running {
        let (l, server) = common::start(common::loopback_pd(base, spec));
        Running {
            addr: l.http,
            server,
        }
    }

    fn send(&self, method: &str, path: &str, body: &str) -> TcpStream {
        common::send(self.addr, method, path, body)
    }

    /// Status and body of a request read to the end.
    fn call(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        common::call(self.addr, method, path, body)
    }

    fn json(&self, path: &str) -> serde_json::Value {
        let (status, body) = self.call("GET", path, "");
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str(&body).expect("json body")
    }

    fn wait_drained(&self) -> serde_json::Value {
        common::wait_drained(self.addr)
    }

    fn stop(self) -> handoff_serving::Report {
        self.server.stop()
    }
}

const PROMPT: &str = "The quick brown fox jumps over the lazy dog while the mock engine \
    prefills every block of this prompt and hands its KV to the decode worker.";

#[test]
fn whole_streamed_errors_and_disconnect() {
    let s = Running::start();
    // Whole completion, usage and token counts.
    let body = format!(r#"{{"model":"m","prompt":"{PROMPT}","max_tokens":6,"ignore_eos":true}}"#);
    let (status, text) = s.call("POST", "/v1/completions", &body);
    assert_eq!(status, 200, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["usage"]["completion_tokens"], 6);
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    let prompt_tokens = v["usage"]["prompt_tokens"].as_u64().expect("count");
    assert!(prompt_tokens > 16);

    // The same prompt again hits the prefill worker's prefix cache.
    let (_, text) = s.call("POST", "/v1/completions", &body);
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("cached");
    assert!(
        cached > 0 && cached.is_multiple_of(16) && cached < prompt_tokens,
        "{cached}"
    );

    // Streamed chat: one chunk per token, usage, then [DONE].
    let chat = r#"{"model":"m","messages":[{"role":"user","content":"hi there"}],"max_tokens":5,
        "ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}"#;
    let (status, text) = s.call("POST", "/v1/chat/completions", chat);
    assert_eq!(status, 200);
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"));
    let chunks: Vec<serde_json::Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).expect("chunk json"))
        .collect();
    let content = chunks
        .iter()
        .filter(|c| c["choices"][0]["delta"]["content"].is_string())
        .count();
    assert_eq!(content, 5);
    assert_eq!(
        chunks.last().expect("usage")["usage"]["completion_tokens"],
        5
    );

    // Errors are OpenAI JSON with a 4xx status.
    for (path, body, status) in [
        ("/v1/completions", "{not json", 400),
        ("/v1/completions", r#"{"model":"x","prompt":"a"}"#, 404),
        (
            "/v1/completions",
            r#"{"model":"m","prompt":"a","max_tokens":70000}"#,
            400,
        ),
        (
            "/v1/chat/completions",
            r#"{"model":"m","messages":[]}"#,
            400,
        ),
        ("/nope", "", 404),
    ] {
        let (got, text) = s.call("POST", path, body);
        assert_eq!(got, status, "{path} {body}: {text}");
        let v: serde_json::Value = serde_json::from_str(&text).expect("error json");
        assert_eq!(v["error"]["code"], status);
    }

    // A client that goes away mid-stream: its request is cancelled and
    // every worker drains (lease released, reservation ended).
    let long = format!(
        r#"{{"model":"m","prompt":"{PROMPT} and more","max_tokens":30000,"ignore_eos":true,"stream":true}}"#
    );
    let mut conn = s.send("POST", "/v1/completions", &long);
    common::read_events(&mut conn, 4);
    let v = s.json("/debug/workers");
    assert_eq!(v["open_streams"], 1);
    drop(conn);
    let v = s.wait_drained();
    for w in v["workers"].as_array().expect("workers") {
        assert_eq!(w["live_handoffs"], 0);
        assert_eq!(w["capacity"]["pinned_source_blocks"], 0);
        assert_eq!(w["capacity"]["reserved_destination_blocks"], 0);
        assert_eq!(w["capacity"]["active_blocks"], 0);
    }
    let report = s.stop();
    assert_eq!(report.completed_requests, 3);
    assert_eq!(report.failed_requests, 1);
    assert_eq!(
        report
            .lifecycle
            .failure_reasons
            .get(&handoff_core::FailureReason::Handoff(
                handoff_core::CancelReason::Client
            )),
        Some(&1)
    );
}

#[test]
fn sglang_destination_first_serves_with_its_metric_names() {
    let spec = EngineSpec {
        backend: handoff_core::Backend::Sglang,
        ..EngineSpec::default()
    };
    let cfg = DeploymentConfig {
        backend: handoff_core::Backend::Sglang,
        policy: handoff_core::HandoffPolicy::DestinationFirst,
        block_size: spec.event_block_tokens(),
        ..DeploymentConfig::default()
    };
    let s = Running::start_with(cfg, spec);
    let body = format!(r#"{{"model":"m","prompt":"{PROMPT}","max_tokens":4,"ignore_eos":true}}"#);
    let (status, text) = s.call("POST", "/v1/completions", &body);
    assert_eq!(status, 200, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["usage"]["completion_tokens"], 4);
    s.wait_drained();
    let (status, metrics) = s.call("GET", "/metrics", "");
    assert_eq!(status, 200);
    for name in [
        "sglang:num_running_reqs{",
        "sglang:num_queue_reqs{",
        "sglang:token_usage{",
        "sglang:cache_hit_rate{",
        "sglang:handoff_reserved_destination_blocks{",
        "sglang:e2e_request_latency_seconds_count{",
    ] {
        assert!(metrics.contains(name), "{name} missing");
    }
    assert!(!metrics.contains("vllm:"));
    let report = s.stop();
    assert_eq!(report.completed_requests, 1);
    assert_eq!(report.lifecycle.handoffs_activated, 1);
}

/// A body too large to read is refused with the connection closed (its
/// rest would otherwise be read as the next request on a keep-alive
/// connection), and a known route asked with the wrong method gets a 405
/// in the OpenAI error shape, not an empty body.
#[test]
fn oversized_bodies_close_and_wrong_methods_are_json() {
    use std::io::{Read, Write};
    let s = Running::start();
    let mut c = TcpStream::connect(s.addr).expect("connect");
    c.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .ok();
    let big = handoff_serve::MAX_BODY_BYTES + 1;
    write!(
        c,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {big}\r\n\r\n"
    )
    .expect("write head");
    // Just past the limit: refused on the announced length; the server
    // reads and drops the body while it answers, then closes, so the whole
    // body is written and nothing of it is read as a next request.
    c.write_all(&vec![b' '; big]).expect("write body");
    let mut text = Vec::new();
    // The server closes: reading ends (or the write side was reset).
    let _ = c.read_to_end(&mut text);
    let text = String::from_utf8_lossy(&text).to_lowercase();
    assert!(text.starts_with("http/1.1 413"), "{text}");
    assert!(text.contains("connection: close"), "{text}");
    assert!(text.contains("\"error\""), "{text}");

    let (status, body) = s.call("GET", "/v1/completions", "");
    assert_eq!(status, 405, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json body");
    assert!(v["error"]["message"].as_str().is_some(), "{v}");
    s.stop();
}
