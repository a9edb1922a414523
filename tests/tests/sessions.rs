//! Session-affine serving (seed 002) on the one engine: closed-loop session
//! arrivals, direct-to-D appends on the real SGLang core's session slots,
//! reseeds through the prefill worker, and replay == virtual-clock live,
//! byte for byte, on a generated session workload.

use handoff_core::{Backend, Duration, HandoffPolicy, Instant};
use handoff_replay::{make_core, EngineSpec, Replay, ReplayConfig, SessionServing};
use handoff_router::{RouterMode, SessionRouting};
use handoff_tests::parity::report_divergence;
use handoff_workload::{generate_sessions, LengthDist, SessionConfig, TraceItem};

fn workload(sessions: u32, turns: u32) -> Vec<TraceItem> {
    generate_sessions(&SessionConfig {
        sessions,
        turns: LengthDist::Fixed(turns),
        system_prompt_tokens: 1024,
        final_context_tokens: 12_000,
        think_time_mean: Duration::from_millis(500),
        think_time_max: Duration::from_secs(2),
        session_interarrival_mean: Duration::from_millis(300),
        start: Instant::ZERO,
        ..SessionConfig::default()
    })
}

fn deployment(decode_kv_tokens: u64) -> (ReplayConfig, Vec<EngineSpec>, SessionServing) {
    let spec = |kv_tokens| {
        let mut s = EngineSpec {
            backend: Backend::Sglang,
            kv_tokens,
            block_size: 1,
            ..EngineSpec::default()
        };
        s.sessions.enabled = true;
        s
    };
    let cfg = ReplayConfig {
        backend: Backend::Sglang,
        policy: HandoffPolicy::DestinationFirst,
        prefill_workers: 1,
        decode_workers: 2,
        router: RouterMode::KvAware,
        block_size: spec(1).event_block_tokens(),
        transcript: true,
        ..ReplayConfig::default()
    };
    let specs = vec![
        spec(1 << 17),
        spec(decode_kv_tokens),
        spec(decode_kv_tokens),
    ];
    let sessions = SessionServing {
        routing: SessionRouting {
            rebalance_threshold: 0,
        },
        close_delay: Duration::from_millis(100),
    };
    (cfg, specs, sessions)
}

fn replay(
    cfg: &ReplayConfig,
    specs: &[EngineSpec],
    sessions: SessionServing,
    items: &[TraceItem],
) -> (handoff_replay::Report, handoff_core::Transcript) {
    let make = |w: handoff_core::WorkerId, _| make_core(&specs[w.0 as usize]).expect("valid spec");
    let (r, t) = Replay::sessions(cfg.clone(), items.iter().cloned(), sessions, make).run();
    (r, t.expect("transcript asked for"))
}

#[test]
fn later_turns_append_on_their_decode_worker() {
    let items = workload(4, 3);
    let (cfg, specs, sessions) = deployment(1 << 17);
    let (report, transcript) = replay(&cfg, &specs, sessions, &items);
    assert_eq!(report.num_requests as usize, items.len());
    assert_eq!(report.completed_requests as usize, items.len());
    assert_eq!(report.failed_requests, 0);
    // Only each session's first turn is handed off; later turns append
    // directly on the decode worker that holds the session.
    assert_eq!(transcript.handoffs(), 4, "one seed per session");
    // Appends compute only the new tokens: far less than the prompts.
    assert!(
        report.prefix_cache_reused_ratio > 0.4,
        "{}",
        report.prefix_cache_reused_ratio
    );
}

#[test]
fn evicted_sessions_reseed_through_the_prefill_worker() {
    // Decode pools that hold about one session's context: slots are
    // evicted for room and the next turn reseeds.
    let items = workload(4, 3);
    let (cfg, specs, sessions) = deployment(16_000);
    let (report, transcript) = replay(&cfg, &specs, sessions, &items);
    assert_eq!(report.completed_requests as usize, items.len());
    assert!(
        transcript.handoffs() > 4,
        "reseeds: {}",
        transcript.handoffs()
    );
}

#[test]
fn virtual_live_equals_replay_on_a_session_workload() {
    for decode_kv in [1 << 17, 16_000] {
        let items = workload(5, 3);
        let (cfg, specs, sessions) = deployment(decode_kv);
        let (rr, rt) = replay(&cfg, &specs, sessions, &items);
        let live =
            handoff_live::run_virtual_sessions(&cfg, &specs, items.iter().cloned(), sessions)
                .expect("virtual live runs");
        let lt = live.transcript.expect("transcript asked for");
        assert_eq!(rt.first_divergence(&lt), None, "decode kv {decode_kv}");
        assert_eq!(rt.render(), lt.render(), "decode kv {decode_kv}");
        assert_eq!(
            report_divergence(&rr, &live.report),
            None,
            "decode kv {decode_kv}"
        );
        assert_eq!(rr.completed_requests as usize, items.len());
    }
}
