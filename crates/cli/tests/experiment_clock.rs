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
