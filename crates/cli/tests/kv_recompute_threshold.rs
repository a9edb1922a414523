//! `--kv-recompute-threshold`: vLLM's `kv_recompute_threshold`
//! (`nixl/pull_scheduler.py`, `NixlPullConnectorScheduler
//! ._should_recompute_remote_kv`), default 64: a decode's pull of fewer
//! tokens is replaced by computing them on the decode. Push has no such rule.

use serde_json::Value;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_handoff-mocker");

/// Four 40-token prompts, one prefill and one decode worker.
fn replay(extra: &[&str]) -> Value {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let t = std::env::temp_dir().join(format!("hm-recompute-{}-{n}.jsonl", std::process::id()));
    let mut s = String::new();
    for i in 0..4 {
        s.push_str(&format!(
            "{{\"timestamp\": {}, \"input_length\": 40, \"output_length\": 4, \"hash_ids\": [{}]}}\n",
            1000 * i,
            100 + i
        ));
    }
    std::fs::write(&t, s).expect("write trace");
    let mut args = vec![
        "replay",
        "--trace",
        t.to_str().expect("utf-8"),
        "--prefill",
        "1",
        "--decode",
        "1",
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = Command::new(BIN).args(&args).output().expect("run");
    let _ = std::fs::remove_file(&t);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json report")
}

fn decode_prefill_tokens(r: &Value) -> u64 {
    r["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .find(|w| w["pool"] == "decode")
        .and_then(|w| w["prefill_tokens"].as_u64())
        .expect("a decode worker's prefill tokens")
}

#[test]
fn the_default_recomputes_short_pulls_on_the_decode() {
    let r = replay(&[]);
    assert_eq!(r["completed_requests"], 4);
    assert_eq!(decode_prefill_tokens(&r), 4 * 40);
    // Upstream's default is not written.
    assert!(r["config"]["engines"][1]
        .get("kv_recompute_threshold")
        .is_none());
}

#[test]
fn zero_pulls_every_prompt_and_is_reported() {
    let r = replay(&["--kv-recompute-threshold", "0"]);
    assert_eq!(r["completed_requests"], 4);
    assert_eq!(decode_prefill_tokens(&r), 0);
    assert_eq!(r["config"]["engines"][1]["kv_recompute_threshold"], 0);
    let r = replay(&["--kv-recompute-threshold", "40"]);
    assert_eq!(decode_prefill_tokens(&r), 0, "40 is not below 40");
    let r = replay(&["--kv-recompute-threshold", "41"]);
    assert_eq!(decode_prefill_tokens(&r), 4 * 40);
}

#[test]
fn push_has_no_threshold() {
    let r = replay(&["--kv-transfer-mode", "push"]);
    assert_eq!(r["completed_requests"], 4);
    assert_eq!(decode_prefill_tokens(&r), 0);
    assert!(r["config"]["engines"][1]
        .get("kv_recompute_threshold")
        .is_none());
}

#[test]
fn a_bad_threshold_names_the_flag() {
    let out = Command::new(BIN)
        .args([
            "replay",
            "--requests",
            "1",
            "--kv-recompute-threshold",
            "many",
        ])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--kv-recompute-threshold"), "{err}");
}
