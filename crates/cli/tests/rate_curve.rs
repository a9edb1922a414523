//! `--rate-curve`: a located error for a bad curve, and a run whose
//! arrivals follow the curve, reported as its text.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_handoff-mocker");

#[test]
fn a_bad_curve_is_a_located_error() {
    let out = Command::new(BIN)
        .args(["replay", "--requests", "5", "--rate-curve", "step:0=8,30=x"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rate curve at byte 12: not a number"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let both = Command::new(BIN)
        .args(["replay", "--rate", "4", "--rate-curve", "sine:4,2,10"])
        .output()
        .expect("run");
    assert!(!both.status.success(), "--rate and --rate-curve conflict");
}

#[test]
fn a_step_curve_spreads_arrivals_as_it_says() {
    // 400 requests at 2/s for 100 s, then 40/s: about 200 in the first
    // 100 s and the other 200 within about 5 s after.
    let out = Command::new(BIN)
        .args(["replay", "--json", "--requests", "400"])
        .args(["--rate-curve", "step:0=2,100=40"])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let w = &v["config"]["workload"];
    assert_eq!(w["rate_curve"], "step:0=2,100=40", "{w}");
    assert!(w.get("rate_per_s").is_none(), "{w}");
    assert_eq!(v["num_requests"], 400);
    let span = v["duration_s"]
        .as_f64()
        .or_else(|| v["makespan_s"].as_f64());
    if let Some(span) = span {
        assert!((100.0..140.0).contains(&span), "{span}");
    }
}
