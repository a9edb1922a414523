//! A report holds what it takes to run it again: `replay --rerun REPORT`
//! reads the report's `config.flags` and writes the same report, byte for
//! byte; the header names the model and the workload as it ran.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_handoff-mocker");
const TRACE: &str = "../../tests/data/conversation_2000.jsonl";

fn mocker(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run")
}

fn ok(args: &[&str]) -> String {
    let out = mocker(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hm-rerun-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Runs `flags` with `--output`, reruns the report with `--output` (and
/// `beside`: the files the run reads, which a rerun never takes from a
/// report), and compares both files and both `--json` prints; returns the
/// report.
fn reruns_identically(name: &str, flags: &[&str], beside: &[&str]) -> Value {
    let d = dir(name);
    let (first, again) = (d.join("first.json"), d.join("again.json"));
    let mut args = vec!["replay", "--output", path(&first), "--json"];
    args.extend(flags);
    let printed = ok(&args);
    let mut rerun = vec![
        "replay",
        "--rerun",
        path(&first),
        "--output",
        path(&again),
        "--json",
    ];
    rerun.extend(beside);
    let reprinted = ok(&rerun);
    let (a, b) = (
        std::fs::read(&first).expect("first"),
        std::fs::read(&again).expect("again"),
    );
    assert!(a == b, "{name}: the rerun's --output differs");
    assert!(printed == reprinted, "{name}: the rerun's --json differs");
    let _ = std::fs::remove_dir_all(&d);
    serde_json::from_slice(&a).expect("report JSON")
}

#[test]
fn a_synthetic_closed_loop_report_reruns_from_its_own_config() {
    let r = reruns_identically(
        "synthetic",
        &[
            "--backend",
            "sglang",
            "--requests",
            "300",
            "--concurrency",
            "8",
            "--seed",
            "3",
            "--decode-kv-tokens",
            "300000",
        ],
        &[],
    );
    let c = &r["config"];
    assert_eq!(c["workload"]["requests"], 300);
    assert_eq!(c["workload"]["concurrency"], 8);
    assert!(c["workload"].get("rate_per_s").is_none());
    assert_eq!(c["model"]["model"], "qwen3-8b");
    assert_eq!(c["seed"], 3);
}

#[test]
fn a_trace_report_reruns_from_its_own_config() {
    let r = reruns_identically(
        "trace",
        &[
            "--trace",
            TRACE,
            "--limit",
            "250",
            "--router",
            "round-robin",
            "--dp-size",
            "2",
            "--arrival-speedup-ratio",
            "2",
            "--no-multi-step",
        ],
        &["--trace", TRACE],
    );
    assert_eq!(r["config"]["multi_step"], false);
    let w = &r["config"]["workload"];
    assert_eq!(w["trace"], TRACE);
    assert_eq!(w["trace_format"], "mooncake");
    assert_eq!(w["limit"], 250);
    assert_eq!(w["arrival_speedup_ratio"], 2.0);
    assert_eq!(r["num_requests"], 250);
}

#[test]
fn a_run_with_one_flag_reruns_with_the_defaults_it_had() {
    let r = reruns_identically("defaults", &["--requests", "40"], &[]);
    assert_eq!(
        r["config"]["flags"],
        serde_json::json!(["--requests", "40"])
    );
    let w = &r["config"]["workload"];
    assert_eq!(
        (w["requests"].as_u64(), w["rate_per_s"].as_f64()),
        (Some(40), Some(16.0))
    );
}

#[test]
fn rerun_refuses_run_flags_beside_it_and_reports_without_a_workload() {
    let d = dir("refuse");
    let report = d.join("r.json");
    ok(&["replay", "--requests", "20", "--output", path(&report)]);
    let out = mocker(&["replay", "--rerun", path(&report), "--backend", "sglang"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("give only output flags") && err.contains("--backend sglang"),
        "{err}"
    );
    // A report without `config.workload` (written before reports recorded
    // how they ran) says so instead of running the defaults.
    let mut v: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    v["config"].as_object_mut().unwrap().remove("workload");
    std::fs::write(&report, v.to_string()).unwrap();
    let out = mocker(&["replay", "--rerun", path(&report)]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no `workload`"));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn the_text_header_names_the_model_and_the_workload_as_it_ran() {
    let text = ok(&["replay", "--requests", "50", "--concurrency", "32"]);
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("embedded synthetic workload: 50 requests, closed loop with 32 in flight")
    );
    assert_eq!(
        lines.next(),
        Some("model qwen3-8b  gpu h100  tp 1  perf profile:qwen3-8b-h100-tp1-vllm")
    );
    let text = ok(&["replay", "--requests", "50", "--perf", "dynamo-polynomial"]);
    assert_eq!(text.lines().nth(1), Some("perf dynamo-polynomial"));
}
