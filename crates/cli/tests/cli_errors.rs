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
        vec!["replay", "--pass-speedup-ratio", "nan"],
        vec!["replay", "--arrival-speedup-ratio", "0"],
        vec!["replay", "--trace-block-size", "0"],
        vec!["replay", "--trace", "/nonexistent/trace.jsonl"],
        vec!["live", "--speed", "0", "--requests", "1"],
        vec!["scenario", "no-such-scenario"],
        // Values that used to panic, size huge allocations or run nonsense.
        vec!["replay", "--transfer-ms", "1e300"],
        vec!["replay", "--bandwidth-gbps", "1e-300"],
        vec!["replay", "--prefill-kv-tokens", "1000000000001"],
        vec!["replay", "--max-running", "4294967295"],
        vec!["replay", "--prefill", "100000", "--requests", "10"],
        vec!["replay", "--message-latency-us", "18446744073709551615"],
        vec!["replay", "--lease-ttl-s", "18446744073709551615"],
        vec!["replay", "--rate", "inf"],
        vec!["replay", "--router-temperature=-1"],
        vec!["replay", "--overlap-score-credit", "nan"],
        vec!["replay", "--prefill-load-scale", "1e300"],
        vec!["replay", "--decode-active-request-weight", "inf"],
        vec!["serve", "--transfer-ms", "1e300"],
        vec![
            "worker",
            "--id",
            "1",
            "--role",
            "decode",
            "--transfer-ms",
            "1e300",
        ],
        // A trace with no request in it is no replay.
        vec!["replay", "--trace", "/dev/null"],
        vec!["live", "--speed", "1e-300", "--requests", "1"],
        vec!["experiment", "run", "--snapshot-max-age-s", "1e300"],
        vec![
            "experiment",
            "run",
            "--enable-d-to-p-sync",
            "--d-to-p-sync-delta-tokens",
            "0",
        ],
        vec!["experiment", "e4", "--bandwidth-gbps", "0"],
        vec!["experiment", "e4", "--open-session-ms", "nan"],
        vec!["experiment", "e4", "--decode-start-ms=-1"],
        vec!["experiment", "e4", "--direct-route-ms", "1e300"],
        vec!["experiment", "e4", "--session-turns", "0"],
        vec!["experiment", "e4", "--session-final-tokens", "0"],
    ] {
        let out = Command::new(BIN).args(&args).output().expect("run");
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error:"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// Pools of 10^11 tokens (6.25e9 vLLM blocks) run: the pools take memory
/// for the blocks a run touches, not for their size (refused before, as a
/// pool that size would have been a 100 GB allocation).
#[test]
fn pools_of_10_to_the_11_tokens_run() {
    for backend in ["vllm", "sglang"] {
        let out = Command::new(BIN)
            .args(["replay", "--json", "--requests", "10", "--backend", backend])
            .args(["--prefill-kv-tokens", "100000000000"])
            .args(["--decode-kv-tokens", "100000000000"])
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{backend}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(v["completed_requests"], 10, "{backend}");
        assert_eq!(v["config"]["engines"][0]["kv_tokens"], 100_000_000_000u64);
    }
}

#[test]
fn the_old_speedup_ratio_spelling_works_and_warns() {
    let run = |flag: &str| {
        Command::new(BIN)
            .args(["replay", "--json", "--requests", "40", flag, "2"])
            .output()
            .expect("run")
    };
    let old = run("--speedup-ratio");
    let new = run("--pass-speedup-ratio");
    assert!(old.status.success() && new.status.success());
    assert_eq!(old.stdout, new.stdout, "the same flag under two names");
    let warned = String::from_utf8_lossy(&old.stderr);
    assert!(warned.contains("--speedup-ratio is deprecated"), "{warned}");
    assert!(!String::from_utf8_lossy(&new.stderr).contains("deprecated"));
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
        (
            &["replay", "--dp-size", "0"][..],
            "--dp-size 0: dp size 0 is outside 1..=256",
        ),
        (
            &["serve", "--dp-size", "257"][..],
            "--dp-size 257: dp size 257 is outside 1..=256",
        ),
        (
            &[
                "frontend",
                "--dp-size",
                "2",
                "--worker",
                "0=prefill@127.0.0.1:9",
                "--worker",
                "1=decode@127.0.0.1:9",
            ][..],
            "are not whole workers",
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

#[test]
fn per_request_jsonl_closed_loop_and_wall_time() {
    let dir = std::env::temp_dir().join(format!("hm-jsonl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let jsonl = dir.join("r.jsonl");
    let output = dir.join("r.json");
    let run = |extra: &[&str]| {
        let out = Command::new(BIN)
            .args(["replay", "--requests", "50", "--json"])
            .args(extra)
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("json")
    };
    let open = run(&["--per-request-jsonl", jsonl.to_str().unwrap()]);
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&jsonl)
        .expect("jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("one object per line"))
        .collect();
    assert_eq!(lines.len(), 50);
    let mut ids: Vec<u64> = lines.iter().map(|l| l["id"].as_u64().unwrap()).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..50).collect::<Vec<_>>());
    for l in &lines {
        assert_eq!(l["outcome"], "completed", "{l}");
        assert!(l["ttft_ms"].as_f64().unwrap() > 0.0);
        assert!(l["handoff"]["pinned_ms"].as_f64().is_some(), "{l}");
        assert!(l["prefill_worker"].as_u64().unwrap() < 2);
        assert!(l["decode_worker"].as_u64().unwrap() >= 2);
    }
    assert!(open.get("wall_time_ms").is_none(), "wall time is opt-in");
    assert!(open["total_input_tokens"].as_u64().unwrap() > 0);
    assert!(open.get("p95_ttft_ms").is_some() && open.get("std_ttst_ms").is_some());

    // Closed loop: never more than 4 in flight, so arrivals follow
    // completions and nothing waits behind more than 3 others.
    let closed = run(&[
        "--concurrency",
        "4",
        "--per-request-jsonl",
        jsonl.to_str().unwrap(),
    ]);
    assert_eq!(closed["completed_requests"], 50);
    let recs: Vec<serde_json::Value> = std::fs::read_to_string(&jsonl)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let spans: Vec<(f64, f64)> = recs
        .iter()
        .map(|r| {
            (
                r["arrival_ms"].as_f64().unwrap(),
                r["end_ms"].as_f64().unwrap(),
            )
        })
        .collect();
    for (a, _) in &spans {
        let in_flight = spans.iter().filter(|(s, e)| s <= a && e > a).count();
        assert!(in_flight <= 4, "{in_flight} in flight at {a}");
    }
    assert_eq!(spans.iter().filter(|(a, _)| *a == 0.0).count(), 4);
    assert_eq!(closed, run(&["--concurrency", "4"]), "deterministic");

    let timed = run(&["--wall-time", "--output", output.to_str().unwrap()]);
    assert!(timed["wall_time_ms"].as_f64().is_some());
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&output).unwrap()).unwrap();
    assert!(written["wall_time_ms"].as_f64().is_some());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_perf_profile_fails_with_its_location() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join("bad_profile.json");
    std::fs::write(&path, "{\n  \"name\": \"x\",\n  \"source\": 3\n}\n").expect("write profile");
    let out = Command::new(BIN)
        .args(["replay", "--json", "--perf"])
        .arg(format!("profile:{}", path.display()))
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "no partial report");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--perf: ") && err.contains("bad_profile.json:3:"),
        "{err}"
    );
    let out = Command::new(BIN)
        .args(["replay", "--perf", "polynomial"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("expected dynamo-polynomial, profile:FILE or npz:FILE"),
        "{err}"
    );
}

#[test]
fn the_shipped_profile_runs_and_is_named_in_the_report() {
    let profile = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../profiles/qwen3-4b-a100-sglang.json"
    );
    let out = Command::new(BIN)
        .args(["replay", "--json", "--perf"])
        .arg(format!("profile:{profile}"))
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        v["config"]["engines"][0]["perf"],
        "profile:qwen3-4b-a100-sglang"
    );
    assert_eq!(v["latency_accuracy"]["itl"], "hdrhistogram");
}

#[test]
fn serve_refuses_bad_addresses_before_serving() {
    for (args, expect) in [
        (
            vec![
                "serve",
                "--http",
                "127.0.0.1:0",
                "--kv-events",
                "127.0.0.1:5557",
            ],
            "--kv-events 127.0.0.1:5557: expected tcp://HOST:PORT",
        ),
        (
            vec![
                "serve",
                "--http",
                "127.0.0.1:0",
                "--kv-events",
                "tcp://127.0.0.1:65535",
            ],
            "port is past 65535",
        ),
        (
            vec!["serve", "--http", "not-an-address"],
            "--http not-an-address",
        ),
        (vec!["serve", "--speed", "0"], "--speed"),
    ] {
        let out = Command::new(BIN).args(&args).output().expect("run");
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expect), "{args:?}: {err}");
    }
}

#[test]
fn replay_writes_dynamo_router_events() {
    let path = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kv_events.jsonl");
    let out = Command::new(BIN)
        .args(["replay", "--requests", "20", "--kv-events-out"])
        .arg(&path)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&path).expect("written");
    let first: serde_json::Value =
        serde_json::from_str(text.lines().next().expect("a line")).expect("json line");
    assert!(first["worker_id"].is_u64());
    assert!(first["event"]["event_id"].is_u64());
    assert!(first["event"]["data"]["stored"]["blocks"][0]["block_hash"].is_u64());
}
