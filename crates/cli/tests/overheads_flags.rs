//! `--overheads off|profile|FILE` and `--overhead TERM=VALUE` on `replay`:
//! off and profile replay as no flag does (the shipped profiles carry no
//! terms), FILE applies another profile's section, the terms show in the
//! report's config, and a bad flag or a non-profile model is a clear error.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_handoff-mocker");

fn replay(flags: &[&str]) -> Output {
    let mut args = vec!["replay", "--json", "--requests", "6"];
    args.extend(flags);
    Command::new(BIN).args(&args).output().expect("run")
}

/// The report without the flags it records (which differ by design).
fn report(flags: &[&str]) -> Value {
    let out = replay(flags);
    assert!(
        out.status.success(),
        "{flags:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut r: Value = serde_json::from_slice(&out.stdout).expect("report JSON");
    r["config"].as_object_mut().unwrap().remove("flags");
    r
}

fn error(flags: &[&str]) -> String {
    let out = replay(flags);
    assert!(!out.status.success(), "{flags:?} ran");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("overheads-flags-{}-{name}", std::process::id()))
}

#[test]
fn off_and_profile_replay_as_no_flag() {
    let none = report(&[]);
    assert_eq!(report(&["--overheads", "off"]), none);
    assert_eq!(report(&["--overheads", "profile"]), none);
    assert!(none["config"]["engines"][0].get("perf_overheads").is_none());
}

#[test]
fn terms_from_flags_and_files_show_in_the_report() {
    let r = report(&["--overhead", "step_ms=4", "--overhead", "cuda_graph=vllm"]);
    let o = &r["config"]["engines"][0]["perf_overheads"];
    assert_eq!(o["step_ms"], 4.0, "{o}");
    assert_eq!(o["cuda_graph"], "vllm", "{o}");
    assert!(r["tpot_ms"]["mean"].as_f64() > report(&[])["tpot_ms"]["mean"].as_f64());

    // A calibrated copy of another profile lends its section; a flag after
    // it changes one term.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../profiles");
    let text = std::fs::read_to_string(root.join("qwen3-4b-a100-sglang.json")).unwrap();
    let lent = handoff_perf::Overheads {
        per_seq_ms: 0.02,
        kernel_scale: 1.1,
        ..Default::default()
    };
    let written = handoff_profiles::profile_file::with_overheads(&text, &lent, "c").unwrap();
    let file = temp("calibrated.json");
    std::fs::write(&file, written).unwrap();
    let path = file.to_str().unwrap();
    let r = report(&["--overheads", path, "--overhead", "sched_ms=1"]);
    let o = &r["config"]["engines"][0]["perf_overheads"];
    assert_eq!(
        (&o["per_seq_ms"], &o["kernel_scale"], &o["sched_ms"]),
        (&Value::from(0.02), &Value::from(1.1), &Value::from(1.0)),
        "{o}"
    );
    // A profile without a section lends nothing: refused.
    let e = error(&[
        "--overheads",
        root.join("qwen3-4b-a100-sglang.json").to_str().unwrap(),
    ]);
    assert!(e.contains("has no overheads section"), "{e}");
    std::fs::remove_file(&file).ok();
}

#[test]
fn bad_terms_and_other_models_are_refused_by_name() {
    let e = error(&["--perf", "dynamo-polynomial", "--overhead", "step_ms=4"]);
    assert!(
        e.contains("the step-time terms apply to profiles only") && e.contains("dynamo-polynomial"),
        "{e}"
    );
    let e = error(&["--perf", "dynamo-polynomial", "--overheads", "off"]);
    assert!(e.contains("profiles only"), "{e}");
    let e = error(&["--overhead", "step_ms=400"]);
    assert!(e.contains("step_ms: 400 is not in [0, 100]"), "{e}");
    let e = error(&["--overhead", "steps=4"]);
    assert!(e.contains("`steps`: no such term"), "{e}");
    let e = error(&["--overhead", "cuda_graph=4,2"]);
    assert!(e.contains("cuda_graph: sizes must be"), "{e}");
    let e = error(&["--overheads", "/nonexistent/calibrated.json"]);
    assert!(e.contains("--overheads"), "{e}");
}
