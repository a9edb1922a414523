//! Scenario 7 (live/replay parity) runs from the library, like every other
//! scenario: one outcome per flavour (vLLM pull, SGLang, vLLM push), every
//! check passing.

use handoff_lab::scenarios::{judged, Scenario};

#[test]
fn live_replay_parity_runs_from_the_library_and_passes() {
    let outcomes = judged(Scenario::LiveReplayParity, false).expect("the live adapter runs");
    assert_eq!(outcomes.len(), 3, "one outcome per flavour");
    for (o, backend) in outcomes.iter().zip(["vllm", "sglang", "vllm-push"]) {
        assert_eq!(o["scenario"], "live-replay-parity", "{o}");
        assert_eq!(o["backend"], backend, "{o}");
        let checks = o["checks"].as_array().expect("checks");
        assert!(!checks.is_empty(), "{o}");
        for c in checks {
            assert_eq!(c["verdict"], "pass", "{backend}: {c}");
        }
        assert_eq!(o["verdict"], "pass", "{o}");
    }
}
