//! Session-affine serving (seed 002) on the one engine: closed-loop session
//! arrivals, direct-to-D appends on the real SGLang core's session slots,
//! reseeds through the prefill worker, and replay == virtual-clock live,
//! byte for byte, on a generated session workload.

use handoff_core::{Backend, Duration, HandoffPolicy, Instant};
use handoff_replay::RequestRecord;
use handoff_replay::{make_core, EngineSpec, Replay, ReplayConfig, SessionServing};
use handoff_router::{RouterMode, SessionRouting};
use handoff_tests::parity::report_divergence;
use handoff_workload::{generate_sessions, LengthDist, SessionConfig, TraceItem};
use std::cell::RefCell;
use std::rc::Rc;

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

struct Run {
    report: handoff_replay::Report,
    transcript: handoff_core::Transcript,
    log: Vec<String>,
    records: Vec<RequestRecord>,
}

fn replay(
    cfg: &ReplayConfig,
    specs: &[EngineSpec],
    sessions: SessionServing,
    items: &[TraceItem],
) -> (handoff_replay::Report, handoff_core::Transcript) {
    let r = replay_all(cfg, specs, sessions, items);
    (r.report, r.transcript)
}

fn replay_all(
    cfg: &ReplayConfig,
    specs: &[EngineSpec],
    sessions: SessionServing,
    items: &[TraceItem],
) -> Run {
    let make = |w: handoff_core::WorkerId, _| make_core(&specs[w.0 as usize]).expect("valid spec");
    let records = Rc::new(RefCell::new(Vec::new()));
    let sink = Rc::clone(&records);
    let o = Replay::sessions(cfg.clone(), items.iter().cloned(), sessions, make)
        .with_request_sink(Box::new(move |r: &RequestRecord| {
            sink.borrow_mut().push(r.clone())
        }))
        .run_all();
    let records = records.borrow().clone();
    Run {
        report: o.report,
        transcript: o.transcript.expect("transcript asked for"),
        log: o.session_log,
        records,
    }
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
        let run = replay_all(&cfg, &specs, sessions, &items);
        let (rr, rt) = (run.report, run.transcript);
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
        assert!(!run.log.is_empty());
        assert_eq!(
            run.log, live.session_log,
            "decode kv {decode_kv}: session logs"
        );
    }
}

#[test]
fn session_runs_report_modes_per_request_and_in_the_summary() {
    let items = workload(4, 3);
    let (cfg, specs, sessions) = deployment(16_000);
    let run = replay_all(&cfg, &specs, sessions, &items);
    assert_eq!(run.records.len(), items.len());
    let sum = run
        .report
        .sessions
        .as_ref()
        .expect("a session run has a summary");
    let modes = |m: &str| {
        run.records
            .iter()
            .filter(|r| r.session.is_some_and(|s| s.execution_mode == m))
            .count()
    };
    assert_eq!(modes("seed"), 4);
    assert_eq!(
        modes("seed") + modes("direct") + modes("reseed"),
        items.len()
    );
    assert_eq!(
        sum.modes.get("reseed").copied().unwrap_or(0) as usize,
        modes("reseed")
    );
    assert!(modes("reseed") > 0);
    assert!(sum.slot_evictions.get("capacity").is_some_and(|&n| n > 0));
    // Sessions still resident at the end were closed by their client.
    let closes = run
        .log
        .iter()
        .filter(|l| l.contains("\"reason\":\"session_close\""))
        .count();
    assert!((1..=4).contains(&closes), "{:#?}", run.log);
    // No pushes without D->P sync; reseeds re-prefill (no snapshot).
    assert_eq!(sum.pushes_enqueued, 0);
    assert!(run
        .records
        .iter()
        .all(|r| r.session.is_some_and(|s| !s.d_to_p_snapshot_used)));
    let json = serde_json::to_string(&run.records[0]).unwrap();
    assert!(json.contains("\"execution_mode\":\"seed\""), "{json}");
    assert!(
        json.contains("\"d_to_p_push_count_during_session\":0"),
        "{json}"
    );
}
