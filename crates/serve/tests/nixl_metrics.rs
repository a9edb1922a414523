//! vLLM's NIXL connector series on the engines that move KV, in both serve
//! modes (one process, and a prefill and a decode engine process):
//!
//! - between a prefill's answer and its decode, the prefill shows the
//!   pinned request in `vllm:nixl_num_pending_sends` and
//!   `vllm:nixl_num_in_process_reqs` (the gauges move while the handoff is
//!   in flight, not only after);
//! - after `N` handoffs the decode (the reader) has observed `N` transfers
//!   in each NIXL histogram, bytes a multiple of the transfer model's KV
//!   bytes per token; the prefill none; nothing failed or expired; the
//!   prefill's gauges are back at zero;
//! - the families have vLLM's types and the transfer time's buckets start
//!   at 5 ms.

mod common;

use common::pod::Pod;
use handoff_core::Duration;
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_engine::TransferModel;
use handoff_router::Pool;
use handoff_serve::ServeConfig;
use serde_json::{json, Value};
use std::net::SocketAddr;

/// Handoffs of the workload.
const N: usize = 4;
/// The transfer model's KV bytes per token.
const BPT: u64 = 1000;

fn deployment() -> DeploymentConfig {
    DeploymentConfig {
        transfer: TransferModel::Bytes {
            base: Duration::from_millis(5),
            bytes_per_token: BPT,
            bandwidth: 1e9,
        },
        ..DeploymentConfig::default()
    }
}

fn metrics(to: SocketAddr) -> String {
    let (status, body) = common::call(to, "GET", "/metrics", "");
    assert_eq!(status, 200, "{body}");
    body
}

/// The sum of `name`'s samples in `text` (every label set).
fn sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// vLLM's proxy, one request at a time; between the prefill's answer and
/// the decode call the prefill's pending-send gauges are sampled.
fn proxy(prefill: SocketAddr, decode: SocketAddr) {
    for i in 0..N {
        // Past vLLM's `kv_recompute_threshold` (64 tokens): a shorter
        // uncached prompt is computed by the decode, and nothing moves.
        let prompt = format!(
            "a disaggregated request, number {i}, {}",
            "long enough to move past the recompute threshold ".repeat(12)
        );
        let body = json!({"model": "m", "prompt": prompt, "max_tokens": 1,
                          "kv_transfer_params": {"do_remote_decode": true}});
        let (status, text) = common::call(prefill, "POST", "/v1/completions", &body.to_string());
        assert_eq!(status, 200, "{text}");
        let p: Value = serde_json::from_str(&text).expect("json");
        let mid = metrics(prefill);
        assert_eq!(sum(&mid, "vllm:nixl_num_pending_sends"), 1.0, "{mid}");
        assert_eq!(sum(&mid, "vllm:nixl_num_in_process_reqs"), 1.0, "{mid}");
        let body = json!({"model": "m", "prompt": prompt, "max_tokens": 3,
                          "kv_transfer_params": p["kv_transfer_params"].clone()});
        let (status, text) = common::call(decode, "POST", "/v1/completions", &body.to_string());
        assert_eq!(status, 200, "{text}");
    }
}

/// What every mode must show after the workload: `p` the prefill's text,
/// `d` the decode's.
fn check_after(p: &str, d: &str) {
    for (name, what) in [
        ("vllm:nixl_xfer_time_seconds", "histogram"),
        ("vllm:nixl_post_time_seconds", "histogram"),
        ("vllm:nixl_bytes_transferred", "histogram"),
        ("vllm:nixl_num_descriptors", "histogram"),
        ("vllm:nixl_num_failed_transfers", "counter"),
        ("vllm:nixl_num_failed_notifications", "counter"),
        ("vllm:nixl_num_kv_expired_reqs", "counter"),
        ("vllm:nixl_num_pending_sends", "gauge"),
        ("vllm:nixl_num_in_process_reqs", "gauge"),
    ] {
        assert!(d.contains(&format!("# TYPE {name} {what}")), "{name}\n{d}");
    }
    assert!(d.contains("vllm:nixl_xfer_time_seconds_bucket{") && d.contains("le=\"0.005\""));
    let n = N as f64;
    for h in [
        "vllm:nixl_xfer_time_seconds_count",
        "vllm:nixl_post_time_seconds_count",
        "vllm:nixl_bytes_transferred_count",
        "vllm:nixl_num_descriptors_count",
    ] {
        assert_eq!(sum(d, h), n, "{h} on the decode\n{d}");
        assert_eq!(sum(p, h), 0.0, "{h} on the prefill\n{p}");
    }
    let bytes = sum(d, "vllm:nixl_bytes_transferred_sum");
    assert!(bytes > 0.0 && bytes % BPT as f64 == 0.0, "{bytes}");
    assert!(sum(d, "vllm:nixl_num_descriptors_sum") >= n);
    assert!(sum(d, "vllm:nixl_xfer_time_seconds_sum") > 0.0);
    for c in [
        "vllm:nixl_num_failed_transfers_total",
        "vllm:nixl_num_kv_expired_reqs_total",
    ] {
        assert_eq!(sum(p, c) + sum(d, c), 0.0, "{c}");
    }
    assert_eq!(sum(p, "vllm:nixl_num_pending_sends"), 0.0, "{p}");
    assert_eq!(sum(p, "vllm:nixl_num_in_process_reqs"), 0.0, "{p}");
}

#[test]
fn one_process_reports_nixl_transfers_on_the_decode_and_pending_sends_on_the_prefill() {
    let (l, server) = common::start(ServeConfig {
        worker_http: common::worker_listeners(2),
        ..common::loopback_pd(deployment(), EngineSpec::default())
    });
    let w = common::worker_addrs(&l);
    proxy(w[0], w[1]);
    common::wait_drained(l.http);
    check_after(&metrics(w[0]), &metrics(w[1]));
    server.stop();
}

#[test]
fn engine_processes_report_nixl_transfers_on_the_decode_and_pending_sends_on_the_prefill() {
    let start = |role| {
        let serve = common::loopback_pd(deployment(), EngineSpec::default());
        Pod::run(common::pod::config(serve, role))
    };
    let (p, d) = (start(Pool::Prefill), start(Pool::Decode));
    proxy(p.l.http, d.l.http);
    common::wait_drained(p.l.http);
    common::wait_drained(d.l.http);
    check_after(&metrics(p.l.http), &metrics(d.l.http));
    let (ps, ds) = (p.stop(), d.stop());
    assert!(
        ps.failed.is_empty() && ds.failed.is_empty(),
        "{ps:?} {ds:?}"
    );
}
