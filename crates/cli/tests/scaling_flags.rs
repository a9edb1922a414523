//! The elastic fleet's flags: ceilings, startup delay, a scale plan and a
//! built-in planner, their located errors, and the report's scaling
//! section (absent from fixed-fleet runs).

use serde_json::Value;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_handoff-mocker");

fn replay(args: &[&str]) -> Result<Value, String> {
    let out = Command::new(BIN)
        .args(["replay", "--json"])
        .args(args)
        .output()
        .expect("run");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(serde_json::from_slice(&out.stdout).expect("json"))
}

#[test]
fn a_scale_plan_grows_then_drains_the_fleet() {
    let v = replay(&[
        "--requests",
        "300",
        "--rate",
        "20",
        "--prefill",
        "1",
        "--max-prefill",
        "2",
        "--decode",
        "1",
        "--max-decode",
        "2",
        "--startup-delay",
        "2",
        "--scale-plan",
        "t=1s:up:prefill, t=1s:up:decode, t=9s:drain:3",
    ])
    .expect("an elastic replay");
    assert_eq!(v["completed_requests"], 300);
    let s = &v["scaling"];
    let kinds: Vec<&str> = s["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "provision",
            "provision",
            "ready",
            "ready",
            "drain",
            "drained"
        ],
        "{s}"
    );
    assert_eq!(s["provisioning_s"], 4.0, "{s}");
    let first = &s["workers_over_time"][0];
    assert_eq!(
        (first["prefill"].as_u64(), first["decode"].as_u64()),
        (Some(1), Some(1))
    );
}

#[test]
fn the_throughput_planner_runs_from_its_flag() {
    let v = replay(&[
        "--requests",
        "400",
        "--rate-curve",
        "step:0=2,20=20,40=2",
        "--prefill",
        "1",
        "--max-prefill",
        "4",
        "--decode",
        "1",
        "--max-decode",
        "4",
        "--startup-delay",
        "5",
        "--planner-interval",
        "5",
        "--planner",
        "throughput:prefill-tps=20000,decode-tps=1500",
    ])
    .expect("a planned replay");
    assert_eq!(v["completed_requests"], 400);
    let s = &v["scaling"];
    assert_eq!(s["planner"], "throughput");
    let peak = s["workers_over_time"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["prefill"].as_u64().unwrap())
        .max()
        .unwrap();
    assert!(peak >= 2, "{s}");
}

#[test]
fn bad_elastic_flags_are_located_errors() {
    for (args, says) in [
        (
            vec!["--scale-plan", "t=1s:up:gpu", "--max-decode", "3"],
            "scale plan at byte 8",
        ),
        (
            vec!["--planner", "load"],
            "--planner: planner spec at byte 0",
        ),
        (
            vec!["--prefill", "2", "--max-prefill", "1"],
            "--max-prefill",
        ),
        (vec!["--scale-plan", "t=1s:drain:9"], "w9 does not exist"),
        (
            vec!["--planner", "throughput", "--concurrency", "4"],
            "open loop only",
        ),
        (
            vec!["--max-decode", "4", "--startup-delay", "nan"],
            "--startup-delay",
        ),
    ] {
        let mut a = vec!["--requests", "5"];
        a.extend(args.iter().copied());
        let e = replay(&a).expect_err("refused");
        assert!(e.contains(says), "{args:?}: {e}");
        assert!(!e.contains("panicked"), "{e}");
    }
}

#[test]
fn a_fixed_fleet_has_no_scaling_section() {
    let v = replay(&["--requests", "5"]).expect("a replay");
    assert!(v.get("scaling").is_none());
}

#[test]
fn an_elastic_report_reruns_byte_for_byte() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join("elastic_report.json");
    let args = [
        "--requests",
        "60",
        "--rate",
        "20",
        "--prefill",
        "1",
        "--max-prefill",
        "2",
        "--startup-delay",
        "1",
        "--scale-plan",
        "t=1s:up:prefill",
    ];
    let first = replay(&args).expect("a replay");
    assert!(first["config"]["flags"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "--scale-plan"));
    std::fs::write(&path, serde_json::to_string(&first).unwrap()).unwrap();
    let again = replay(&["--rerun", path.to_str().unwrap()]).expect("a rerun");
    assert_eq!(first, again);
}

#[test]
fn slo_windows_follow_slo_window_and_need_a_fleet() {
    let v = replay(&[
        "--requests",
        "200",
        "--rate",
        "20",
        "--prefill",
        "1",
        "--decode",
        "1",
        "--max-decode",
        "2",
        "--scale-plan",
        "t=1s:up:decode",
        "--startup-delay",
        "1",
        "--slo",
        "ttft:p90=1s",
        "--slo-window",
        "2.5",
    ])
    .expect("runs");
    let s = &v["scaling"];
    assert_eq!(s["slo_window_s"], 2.5);
    let w = s["slo_windows"].as_array().expect("windows");
    // 200 requests at 20/s: 10 s of arrivals, four windows of 2.5 s.
    assert!((4..=5).contains(&w.len()), "{w:?}");
    let arrived: u64 = w.iter().map(|x| x["arrived"].as_u64().unwrap()).sum();
    assert_eq!(arrived, 200);
    assert!(s["unwound_by_removal"].as_object().unwrap().is_empty());
    let e = replay(&["--requests", "5", "--slo-window", "10"]).unwrap_err();
    assert!(e.contains("--slo-window: needs an elastic fleet"), "{e}");
    let e = replay(&["--requests", "5", "--max-decode", "2", "--slo-window", "0"]).unwrap_err();
    assert!(e.contains("--slo-window: 0 is outside"), "{e}");
}
