//! `experiment run --sessions 500` overloads its deployment (one prefill
//! worker, three decode workers): a few reseed turns wait in a decode
//! worker's reservation queue past SGLang's 300 s bootstrap deadline, and
//! their prefill worker gives up on them. They used to fail as
//! `peer-aborted` (the decode side's late abort), which the run's check
//! took for a lost request and exited 1. Now the request fails with its
//! source's own timeout and the run reports it as the overload it is.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_handoff-mocker");

#[test]
fn five_hundred_sessions_complete_with_their_timeouts_reported() {
    let dir = std::env::temp_dir().join(format!("handoff-overload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let metrics = dir.join("metrics.jsonl");
    let out = Command::new(BIN)
        .args(["experiment", "run", "--sessions", "500", "--metrics"])
        .arg(&metrics)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let text = std::fs::read_to_string(&metrics).expect("metrics");
    let mut failed = 0;
    for line in text.lines() {
        let r: serde_json::Value = serde_json::from_str(line).expect("json");
        if let Some(reason) = r["failure_reason"].as_str() {
            failed += 1;
            assert!(
                ["lease-expired", "reservation-expired"].contains(&reason),
                "request {} failed as {reason}",
                r["id"]
            );
        }
    }
    assert!(failed > 0, "this size overloads the deployment");
    assert!(
        stderr.contains(&format!("E3: {failed} requests timed out")),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
