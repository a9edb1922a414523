//! DEP scenario 7: live == replay == reviewed snapshot, for every canonical
//! trace and both backends.

use handoff_tests::parity::{cases, run_live, run_replay};

#[test]
fn live_equals_replay_equals_snapshot() {
    for case in cases() {
        let replay = run_replay(&case);
        assert!(replay.handoffs() > 0, "{}: no handoff ran", case.name);
        insta::assert_snapshot!(case.name, replay.render());
        let live = run_live(&case, 10.0);
        assert!(!live.stalled, "{}: live run stalled", case.name);
        if let Some(d) = replay.first_divergence(&live.transcript) {
            panic!(
                "{}: live differs from replay: {d}\nreplay:\n{}\nlive:\n{}",
                case.name,
                replay.render(),
                live.transcript.render()
            );
        }
    }
}
