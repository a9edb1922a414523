//! The binary's handling of bad input: located errors, non-zero exit, and
//! nothing half-written on stdout.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_handoff-mocker");

fn bad_trace() -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join("bad_trace.jsonl");
    std::fs::write(
        &path,
        "{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 5, \"hash_ids\": [1]}\n\
         {\"timestamp\": 5, \"input_length\": -3, \"output_length\": 5, \"hash_ids\": [1]}\n\
         {\"timestamp\": 9, \"input_length\": 200, \"output_length\": 5, \"hash_ids\": [1]}\n",
    )
    .expect("write trace");
    path
}

#[test]
fn a_bad_trace_line_fails_with_its_location_and_writes_nothing() {
    let path = bad_trace();
    let out = Command::new(BIN)
        .args(["replay", "--json", "--trace"])
        .arg(&path)
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "no partial report");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad_trace.jsonl:2: input_length:"), "{err}");
}

#[test]
fn skip_bad_lines_counts_them() {
    let path = bad_trace();
    let out = Command::new(BIN)
        .args(["replay", "--json", "--skip-bad-lines", "--trace"])
        .arg(&path)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["num_requests"], 2);
    assert_eq!(v["trace_bad_lines_skipped"]["count"], 1);
}

#[test]
fn bad_flags_are_errors_not_panics() {
    for args in [
        vec!["replay", "--decode-kv-tokens", "0"],
        vec!["replay", "--speedup-ratio", "nan"],
        vec!["replay", "--trace", "/nonexistent/trace.jsonl"],
        vec!["live", "--speed", "0", "--requests", "1"],
        vec!["scenario", "no-such-scenario"],
    ] {
        let out = Command::new(BIN).args(&args).output().expect("run");
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error:"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn replay_is_byte_identical_across_runs() {
    let run = || {
        Command::new(BIN)
            .args([
                "replay",
                "--json",
                "--requests",
                "150",
                "--backend",
                "sglang",
            ])
            .output()
            .expect("run")
            .stdout
    };
    let a = run();
    assert!(!a.is_empty());
    assert_eq!(a, run());
}

#[test]
fn impossible_deployments_are_refused_at_start_with_why() {
    for (args, why) in [
        (
            &["replay", "--backend", "trtllm"][..],
            "TensorRT-LLM refuses destination reservation",
        ),
        (
            &["replay", "--prefill", "0"][..],
            "at least one prefill worker",
        ),
        (
            &["replay", "--decode-kv-tokens", "100"][..],
            "cannot hold the workload's first request",
        ),
        (
            &["live", "--clock", "virtual", "--prefill-kv-tokens", "64"][..],
            "cannot hold the workload's first request",
        ),
    ] {
        let out = Command::new(BIN).args(args).output().expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} must fail");
        assert!(out.stdout.is_empty(), "{args:?}: no report on stdout");
        assert!(err.contains(why), "{args:?}: {err}");
    }
}

#[test]
fn a_run_with_failed_requests_says_why_and_exits_non_zero() {
    let args = [
        "replay",
        "--prefill",
        "1",
        "--decode",
        "1",
        "--faults",
        "kill 1 at 5s",
    ];
    let out = Command::new(BIN).args(args).output().expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "failed requests fail the run: {err}");
    assert!(err.contains("requests failed ("), "{err}");
    let ok = Command::new(BIN)
        .args(args)
        .arg("--allow-failures")
        .output()
        .expect("run");
    assert!(ok.status.success());
}
