//! A profile folder named by `HANDOFF_PROFILES_DIR` is part of the run: the
//! report's `config.flags` name it as `--profiles-dir`, so `replay --rerun`
//! without it is refused (naming it) instead of quietly timing the run by a
//! built-in profile, and with it gives the report again byte for byte.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_handoff-mocker");
const ENV: &str = "HANDOFF_PROFILES_DIR";

fn run(args: &[&str], env_dir: Option<&Path>) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args).env_remove(ENV);
    if let Some(d) = env_dir {
        cmd.env(ENV, d);
    }
    cmd.output().expect("run")
}

/// A folder holding the built-in RTX PRO 6000 Llama profile under a GPU
/// name no built-in profile has.
fn folder() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("profiles-env-rerun");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../profiles/aic/llama-3.1-8b-rtxpro6000-tp1-vllm.json"),
    )
    .expect("read profile");
    let text = text.replace("\"gpu\": \"rtxpro6000\"", "\"gpu\": \"envgpu\"");
    std::fs::write(dir.join("llama-3.1-8b-envgpu-tp1-vllm.json"), text).expect("write");
    dir
}

#[test]
fn an_environment_profile_folder_is_recorded_and_a_rerun_needs_it() {
    let dir = folder();
    let report = dir.join("report.json");
    let first = run(
        &[
            "replay",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "envgpu",
            "--requests",
            "6",
            "--output",
            report.to_str().unwrap(),
        ],
        Some(&dir),
    );
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("json");
    let flags: Vec<&str> = json["config"]["flags"]
        .as_array()
        .expect("flags")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    let at = flags
        .iter()
        .position(|f| *f == "--profiles-dir")
        .expect("--profiles-dir recorded");
    assert_eq!(flags[at + 1], dir.display().to_string());

    // Without the folder, and without the environment: refused, naming it.
    let bare = run(&["replay", "--rerun", report.to_str().unwrap()], None);
    assert!(!bare.status.success());
    let e = String::from_utf8_lossy(&bare.stderr);
    assert!(e.contains("--profiles-dir"), "{e}");

    // With it: the same report.
    let again = dir.join("again.json");
    let second = run(
        &[
            "replay",
            "--rerun",
            report.to_str().unwrap(),
            "--profiles-dir",
            dir.to_str().unwrap(),
            "--output",
            again.to_str().unwrap(),
        ],
        None,
    );
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert_eq!(
        std::fs::read(&report).unwrap(),
        std::fs::read(&again).unwrap()
    );
}

#[test]
fn no_environment_folder_records_nothing() {
    let out = run(&["replay", "--requests", "3", "--json"], None);
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let flags = json["config"]["flags"].to_string();
    assert!(!flags.contains("--profiles-dir"), "{flags}");
}
