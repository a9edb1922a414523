//! A client gone while its decode worker reads, in one process: the
//! request fails as the client's at once, but the KV-usage gauge stays up
//! until the read ends, as vLLM's would (its prefill ignores the abort of
//! a finished request, PR #25067; its decode keeps blocks loading until
//! the load ends, PR #32255). Reads take 1.5 s here. The same over two
//! engines is `pods.rs`'s `a_client_gone_mid_read_...` test.

mod common;

use handoff_core::{CancelFrees, CancelReason, FailureReason};
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_engine::TransferModel;
use std::time::Duration;

const PROMPT: &str = "A client that goes away while the decode worker reads the KV of \
    this prompt from the prefill worker; the blocks on both sides stay until the read ends.";

fn sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// KV held by the handoff, summed over workers: pinned at the prefill,
/// reserved at the decode; and the usage gauge's sum.
fn sample(http: std::net::SocketAddr) -> (u64, u64, f64) {
    let (status, body) = common::call(http, "GET", "/debug/workers", "");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    let ws = v["workers"].as_array().cloned().unwrap_or_default();
    let f = |k: &str| -> u64 {
        ws.iter()
            .map(|w| w["capacity"][k].as_u64().unwrap_or(0))
            .sum()
    };
    let (_, metrics) = common::call(http, "GET", "/metrics", "");
    (
        f("pinned_source_blocks"),
        f("reserved_destination_blocks"),
        sum(&metrics, "vllm:kv_cache_usage_perc"),
    )
}

fn gone_mid_read(rule: CancelFrees) -> ((u64, u64, f64), handoff_serving::Report) {
    let mut base = DeploymentConfig {
        transfer: TransferModel::Fixed(handoff_core::Duration::from_millis(1500)),
        ..DeploymentConfig::default()
    };
    base.handoff.cancel_frees = rule;
    let (l, server) = common::start(common::loopback_pd(base, EngineSpec::default()));
    let body = format!(
        r#"{{"model":"m","prompt":"{PROMPT}","max_tokens":30000,"ignore_eos":true,"stream":true}}"#
    );
    let conn = common::send(l.http, "POST", "/v1/completions", &body);
    std::thread::sleep(Duration::from_millis(300));
    drop(conn);
    // The cancel is in; the read has about a second to go.
    std::thread::sleep(Duration::from_millis(400));
    let during = sample(l.http);
    let v = common::wait_drained(l.http);
    for w in v["workers"].as_array().expect("workers") {
        assert_eq!(w["live_handoffs"], 0, "{v}");
        assert_eq!(w["capacity"]["active_blocks"], 0, "{v}");
    }
    let after = sample(l.http);
    assert_eq!((after.0, after.1), (0, 0), "{v}");
    let report = server.stop();
    assert_eq!(report.failed_requests, 1);
    assert_eq!(
        report
            .lifecycle
            .failure_reasons
            .get(&FailureReason::Handoff(CancelReason::Client)),
        Some(&1)
    );
    (during, report)
}

#[test]
fn the_kv_gauge_stays_up_until_the_read_ends_as_upstream() {
    let (during, report) = gone_mid_read(CancelFrees::Upstream);
    assert!(during.0 > 0 && during.1 > 0, "{during:?}");
    assert!(during.2 > 0.0, "{during:?}");
    // Only the decode ended for the client; the read's notice ended the
    // source as after any read.
    assert_eq!(
        report.lifecycle.early_ends.get("client"),
        Some(&1),
        "{:?}",
        report.lifecycle.early_ends
    );
}

#[test]
fn the_immediate_rule_drops_the_gauge_at_the_cancel() {
    let (during, report) = gone_mid_read(CancelFrees::Immediately);
    assert_eq!((during.0, during.1), (0, 0), "{during:?}");
    assert_eq!(report.lifecycle.early_ends.get("client"), Some(&2));
}
