//! `--dp-lockstep` (hidden; what `--enable-expert-parallel` implies): a
//! worker's `--dp-size` ranks step together. It changes a replay with
//! several ranks, changes nothing with one, and the wall-clock live mode,
//! which steps each rank on its own, refuses it by name.

use serde_json::Value;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_handoff-mocker");

fn mocker(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run")
}

/// The report of `replay ARGS --json`, without its flags (which name the
/// flags given).
fn replay(args: &[&str]) -> Value {
    let mut all = vec![
        "replay",
        "--requests",
        "40",
        "--prefill",
        "1",
        "--decode",
        "1",
    ];
    all.extend_from_slice(args);
    all.push("--json");
    let out = mocker(&all);
    assert!(
        out.status.success(),
        "{all:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut r: Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    r["config"]["flags"] = Value::Null;
    r
}

#[test]
fn lockstep_changes_a_run_with_ranks_and_not_one_without() {
    let own = replay(&["--dp-size", "2"]);
    let coupled = replay(&["--dp-size", "2", "--dp-lockstep"]);
    assert_eq!(coupled["completed_requests"], 40);
    assert_ne!(own, coupled, "lockstep ranks pace each other");
    assert_eq!(replay(&[]), replay(&["--dp-lockstep"]), "one rank");
}

/// `serve --engine` runs each rank as a wall-clock node of its own: it
/// refuses lockstep ranks before it listens.
#[test]
fn one_engine_per_process_refuses_lockstep_ranks() {
    let out = mocker(&[
        "serve",
        "--engine",
        "decode",
        "--dp-size",
        "2",
        "--dp-lockstep",
        "--http",
        "127.0.0.1:0",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--engine decode") && err.contains("lockstep"),
        "{err}"
    );
}

#[test]
fn wall_clock_live_refuses_lockstep_ranks() {
    let out = mocker(&[
        "live",
        "--clock",
        "wall",
        "--requests",
        "4",
        "--dp-size",
        "2",
        "--dp-lockstep",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("live --clock wall"), "{err}");
    assert!(err.contains("lockstep"), "{err}");
}

/// `--enable-expert-parallel` selects the EP profile and steps the ranks
/// together: the report says so, and the hidden flag adds nothing to it.
#[test]
fn expert_parallelism_steps_the_ranks_together() {
    let ep = [
        "--model",
        "qwen3-30b-a3b",
        "--gpu",
        "b200",
        "--tp",
        "1",
        "--dp-size",
        "2",
        "--enable-expert-parallel",
    ];
    let coupled = replay(&ep);
    assert_eq!(coupled["completed_requests"], 40);
    assert_eq!(coupled["config"]["dp_lockstep"], true);
    let mut both = ep.to_vec();
    both.push("--dp-lockstep");
    assert_eq!(coupled, replay(&both));
    let own = replay(&["--dp-size", "2"]);
    assert!(own["config"].get("dp_lockstep").is_none());
}
