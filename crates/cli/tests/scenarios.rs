//! `scenario all` passes every check and exits 0; a scenario broken on
//! purpose (the hidden `--break-first-check`) exits non-zero and says
//! which failed.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_handoff-mocker");

#[test]
fn every_scenario_passes_and_a_broken_one_fails() {
    let out = Command::new(BIN)
        .args(["scenario", "all"])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let outcomes = v.as_array().expect("array");
    // Eight scenarios, each for vLLM, SGLang and vLLM push.
    assert_eq!(outcomes.len(), 24);
    let mut names: Vec<&str> = outcomes
        .iter()
        .map(|o| o["scenario"].as_str().expect("name"))
        .collect();
    names.dedup();
    assert_eq!(names.len(), 8, "{names:?}");
    for o in outcomes {
        assert_eq!(o["verdict"], "pass", "{o}");
        let checks = o["checks"].as_array().expect("checks");
        assert!(!checks.is_empty(), "{o}");
        for c in checks {
            assert_eq!(c["verdict"], "pass", "{c}");
            assert!(c.get("expected").is_some() && c.get("observed").is_some());
        }
    }

    let broken = Command::new(BIN)
        .args(["scenario", "router-parity", "--break-first-check"])
        .output()
        .expect("run");
    assert!(!broken.status.success());
    let err = String::from_utf8_lossy(&broken.stderr);
    assert!(
        err.contains(
            "scenario checks failed: router-parity (vllm), router-parity (sglang), \
             router-parity (vllm-push)"
        ),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&broken.stdout).expect("json");
    assert_eq!(v[0]["verdict"], "fail");
    assert_eq!(v[0]["checks"][0]["verdict"], "fail");
}

#[test]
fn unknown_scenarios_are_refused_with_the_list() {
    let out = Command::new(BIN)
        .args(["scenario", "no-such"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("duplicate-stale-late") && err.contains("router-modes"),
        "{err}"
    );
}
