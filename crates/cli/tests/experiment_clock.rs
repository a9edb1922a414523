//! `experiment e4 --clock virtual` runs every variant on virtual-clock live
//! (one thread per worker over channels) and prints the bytes replay does.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_handoff-mocker");

fn e4(extra: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(["experiment", "e4", "--json", "--sessions", "3"])
        .args(extra)
        .output()
        .expect("run")
}

#[test]
fn e4_on_virtual_live_prints_replays_table() {
    let replay = e4(&[]);
    assert!(
        replay.status.success(),
        "{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    let live = e4(&["--clock", "virtual"]);
    assert!(
        live.status.success(),
        "{}",
        String::from_utf8_lossy(&live.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&replay.stdout).expect("json");
    assert_eq!(
        v["runs"].as_array().map(Vec::len),
        Some(4),
        "E1, E3, E4, E4-ablate"
    );
    assert_eq!(replay.stdout, live.stdout, "replay and virtual live differ");
}

#[test]
fn seed_timings_refuse_virtual_live() {
    let out = e4(&["--clock", "virtual", "--timings", "seed"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("replay only"), "{err}");
}

/// A run that leaves a request unserved is a bug, not a result: the
/// command prints its table, then fails naming the run, how many requests
/// failed and why. Here one naive-PD turn outgrows every pool.
#[test]
fn a_run_with_failed_requests_exits_non_zero_saying_why() {
    let out = Command::new(BIN)
        .args(["experiment", "run", "--naive", "--sessions", "1"])
        .args(["--session-turns", "2", "--session-final-tokens", "150000"])
        .args([
            "--decode-kv-tokens",
            "100000",
            "--prefill-kv-tokens",
            "100000",
        ])
        .output()
        .expect("run");
    assert!(!out.status.success(), "a failed request exits non-zero");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("E1: not drained: 1 requests failed (unsupported 1)"),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("failed 1 | drained false"), "{stdout}");
}
