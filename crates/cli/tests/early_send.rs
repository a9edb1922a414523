//! SGLang's early send of the cached prefix
//! (`SGLANG_DISAGG_PREFILL_EARLY_SEND_CACHED_PREFIX`, on by default) read
//! from the environment of the process, as SGLang reads it, and from
//! `--disagg-prefill-early-send-cached-prefix`, which wins: a replay of 200
//! conversation requests on `--backend sglang` moves KV at other times with
//! it off, and the default is exactly "on".

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_handoff-mocker");
const VAR: &str = "SGLANG_DISAGG_PREFILL_EARLY_SEND_CACHED_PREFIX";
const FLAG: &str = "--disagg-prefill-early-send-cached-prefix";

/// The first 200 requests of the conversation trace (`replay`'s
/// `--requests` sizes only the synthetic workload).
fn trace() -> PathBuf {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(write_trace).clone()
}

fn write_trace() -> PathBuf {
    let full =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/conversation_2000.jsonl");
    let text = std::fs::read_to_string(full).expect("trace");
    let head: String = text.lines().take(200).map(|l| format!("{l}\n")).collect();
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("early_send_200.jsonl");
    std::fs::write(&path, head).expect("write trace");
    path
}

/// `replay --backend sglang` on [`trace`] with the variable set to `env`
/// (`None`: unset) and `extra` flags.
fn replay(env: Option<&str>, extra: &[&str]) -> Output {
    let mut c = Command::new(BIN);
    c.args(["replay", "--backend", "sglang", "--json", "--trace"])
        .arg(trace())
        .args(extra)
        .env_remove(VAR);
    if let Some(v) = env {
        c.env(VAR, v);
    }
    c.output().expect("run")
}

fn report(env: Option<&str>, extra: &[&str]) -> (Vec<u8>, Value) {
    let out = replay(env, extra);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["num_requests"], 200);
    (out.stdout, v)
}

#[test]
fn off_moves_kv_at_other_times_and_the_default_is_on() {
    let (default, d) = report(None, &[]);
    let (on, _) = report(Some("1"), &[]);
    let (_, off) = report(Some("false"), &[]);
    assert_eq!(default, on, "the default is the variable set on");
    let transfer = |v: &Value| v["lifecycle"]["transfer_ms"].clone();
    assert_ne!(transfer(&d), transfer(&off), "{d} / {off}");
    assert!(
        off["lifecycle"]["transfer_ms"]["mean"].as_f64()
            > d["lifecycle"]["transfer_ms"]["mean"].as_f64(),
        "sending the prefix with the first chunk lengthens transfers"
    );
    // Written only when off.
    assert!(d["config"]["engines"][0]
        .get("early_send_cached_prefix")
        .is_none());
    assert_eq!(
        off["config"]["engines"][0]["early_send_cached_prefix"],
        false
    );
    // The flag wins over the variable, both ways.
    let (flag_on, _) = report(Some("0"), &[FLAG, "true"]);
    assert_eq!(flag_on, default);
    let (_, flag_off) = report(Some("yes"), &[FLAG, "false"]);
    assert_eq!(transfer(&flag_off), transfer(&off));
}

#[test]
fn a_bad_variable_warns_and_uses_the_default_a_bad_flag_fails() {
    // SGLang's `EnvField.get` (`python/sglang/srt/environ.py`) warns and
    // falls back to the default for a value its `parse` refuses.
    let (bad, _) = report(Some("maybe"), &[]);
    let (default, _) = report(None, &[]);
    assert_eq!(bad, default);
    let out = replay(Some("maybe"), &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(VAR) && err.contains("`maybe`"), "{err}");
    let out = replay(None, &[FLAG, "2"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(FLAG) && err.contains("`2`"), "{err}");
}
