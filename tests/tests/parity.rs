//! DEP scenario 7: live == replay == reviewed snapshot, for every canonical
//! trace and both backends; and virtual-clock live == replay, byte for byte,
//! on a realistic slice of the Mooncake conversation trace.

use handoff_core::Backend;
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_router::RouterMode;
use handoff_tests::parity::{cases, compare, conversation_slice, run_live, run_replay, setup};

#[test]
fn live_equals_replay_equals_snapshot() {
    for case in cases() {
        let replay = run_replay(&case);
        assert!(replay.handoffs() > 0, "{}: no handoff ran", case.name);
        insta::assert_snapshot!(case.name, replay.render());
        let (cfg, specs) = setup(&case);
        if let (Some(d), _) = compare(&cfg, &specs, case.items.clone()) {
            panic!("{}: virtual live differs from replay: {d}", case.name);
        }
        let live = run_live(&case, 10.0);
        assert!(!live.run.stalled, "{}: live run stalled", case.name);
        let lt = live.transcript.unwrap_or_default();
        if let Some(d) = replay.first_divergence(&lt) {
            panic!(
                "{}: wall-clock live differs from replay: {d}\nreplay:\n{}\nlive:\n{}",
                case.name,
                replay.render(),
                lt.render()
            );
        }
    }
}

#[test]
fn virtual_live_equals_replay_on_a_realistic_slice() {
    for backend in [Backend::Vllm, Backend::Sglang] {
        // A pressured deployment: decode pools small enough that
        // reservations queue and stranding is long, so decisions depend on
        // timing and ordering.
        let block_size = if backend == Backend::Sglang { 1 } else { 16 };
        let spec = |kv_tokens| EngineSpec {
            backend,
            kv_tokens,
            block_size,
            ..EngineSpec::default()
        };
        let cfg = DeploymentConfig {
            backend,
            policy: backend.native_policy(),
            prefill_workers: 2,
            decode_workers: 2,
            router: RouterMode::KvAware,
            block_size: spec(1).event_block_tokens(),
            ..DeploymentConfig::default()
        };
        let specs = vec![spec(1 << 18), spec(1 << 18), spec(1 << 16), spec(1 << 16)];
        let (d, t) = compare(&cfg, &specs, conversation_slice(400));
        assert!(t.handoffs() > 300, "{backend:?}: the slice ran handoffs");
        assert_eq!(d, None, "{backend:?}: virtual live differs from replay");
    }
}
