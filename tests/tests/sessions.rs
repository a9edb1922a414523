//! Session-affine serving (seed 002) on the one engine: closed-loop session
//! arrivals, direct-to-D appends on the real SGLang core's session slots,
//! reseeds through the prefill worker, and replay == virtual-clock live,
//! byte for byte, on a generated session workload.

use handoff_core::{Backend, Duration, HandoffPolicy, Instant};
use handoff_deployment::{
    make_core, DeploymentConfig, EngineSpec, SessionOverheads, SessionServing,
};
use handoff_replay::Replay;
use handoff_router::{RouterMode, SessionRouting};
use handoff_serving::RequestRecord;
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

fn deployment(decode_kv_tokens: u64) -> (DeploymentConfig, Vec<EngineSpec>, SessionServing) {
    deployment_with(decode_kv_tokens, false)
}

/// 1P2D SGLang with sessions on; `push` turns on the D→P sync.
fn deployment_with(
    decode_kv_tokens: u64,
    push: bool,
) -> (DeploymentConfig, Vec<EngineSpec>, SessionServing) {
    let spec = |kv_tokens| {
        let mut s = EngineSpec {
            backend: Backend::Sglang,
            kv_tokens,
            block_size: 1,
            ..EngineSpec::default()
        };
        s.sessions.enabled = true;
        s.sessions.push = push;
        s
    };
    let cfg = DeploymentConfig {
        backend: Backend::Sglang,
        policy: HandoffPolicy::DestinationFirst,
        prefill_workers: 1,
        decode_workers: 2,
        router: RouterMode::KvAware,
        block_size: spec(1).event_block_tokens(),
        transcript: true,
        ..DeploymentConfig::default()
    };
    let specs = vec![
        spec(1 << 17),
        spec(decode_kv_tokens),
        spec(decode_kv_tokens),
    ];
    let sessions = SessionServing {
        routing: Some(SessionRouting {
            rebalance_threshold: 0,
        }),
        close_delay: Duration::from_millis(100),
        evict_after_turn: None,
        overheads: SessionOverheads::default(),
    };
    (cfg, specs, sessions)
}

struct Run {
    report: handoff_serving::Report,
    transcript: handoff_core::Transcript,
    log: Vec<String>,
    records: Vec<RequestRecord>,
}

fn replay(
    cfg: &DeploymentConfig,
    specs: &[EngineSpec],
    sessions: SessionServing,
    items: &[TraceItem],
) -> (handoff_serving::Report, handoff_core::Transcript) {
    let r = replay_all(cfg, specs, sessions, items);
    (r.report, r.transcript)
}

fn replay_all(
    cfg: &DeploymentConfig,
    specs: &[EngineSpec],
    sessions: SessionServing,
    items: &[TraceItem],
) -> Run {
    let make = |w: handoff_core::WorkerId, _| make_core(&specs[w.0 as usize]).expect("valid spec");
    let records = Rc::new(RefCell::new(Vec::new()));
    let sink = Rc::clone(&records);
    let o = Replay::sessions(cfg.clone(), items.iter().cloned(), sessions, make)
        .expect("the cores publish at the deployment's block size")
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

/// The seed's §3.2 frontend overheads delay each turn before any worker
/// sees it: one session alone (nothing contends), so each turn's TTFT grows
/// by exactly its route's overhead, and the run's shape is unchanged.
#[test]
fn seed_overheads_delay_each_turn_by_its_route() {
    let items = workload(1, 3);
    let (cfg, specs, sessions) = deployment(1 << 17);
    let plain = replay_all(&cfg, &specs, sessions, &items);
    let seed = SessionServing {
        overheads: SessionOverheads::SEED,
        ..sessions
    };
    let slow = replay_all(&cfg, &specs, seed, &items);
    assert_eq!(plain.records.len(), 3);
    assert_eq!(plain.log.len(), slow.log.len(), "the same events happen");
    for (a, b) in plain.records.iter().zip(&slow.records) {
        let mode = a.session.map(|s| s.execution_mode);
        let want = match mode {
            Some("direct") => 10.0,
            Some("seed") => 100.0,
            other => panic!("one session, room for it: {other:?}"),
        };
        let got = b.ttft_ms.unwrap() - a.ttft_ms.unwrap();
        assert!((got - want).abs() < 1e-6, "{mode:?}: {got} ms, want {want}");
    }
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
    for (decode_kv, push) in [(1 << 17, false), (16_000, false), (16_000, true)] {
        let items = workload(5, 3);
        let (cfg, specs, sessions) = deployment_with(decode_kv, push);
        let run = replay_all(&cfg, &specs, sessions, &items);
        let (rr, rt) = (run.report, run.transcript);
        let live = handoff_live_adapter::run_virtual_sessions(
            &cfg,
            &specs,
            items.iter().cloned(),
            sessions,
        )
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
        let pushed = run.log.iter().any(|l| l.contains("snapshot_recv_ingested"));
        assert_eq!(pushed, push, "decode kv {decode_kv}: pushes iff D->P sync");
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

/// The seed's §3.2 timings: 45 us per prefill token (50K tokens 2.25 s),
/// 20 ms per decode pass, RDMA 20 ms + 84 KB per token at 15 GB/s (50K
/// tokens ~300 ms).
fn seed_perf() -> handoff_perf::FixedPerf {
    handoff_perf::FixedPerf {
        prefill_base: Duration::ZERO,
        per_prefill_token: Duration::from_micros(45),
        decode: Duration::from_millis(20),
    }
}

struct Smoke {
    run: Run,
    items: Vec<TraceItem>,
}

/// The seed's §8 smoke test: 1P1D, D→P sync on, 5 sessions × 3 turns whose
/// contexts reach ~50K tokens; after turn 2's direct-to-D append each
/// session's slot is evicted as for capacity (the seed shrinks the
/// admission budget; here the director forces it), so turn 3 reseeds.
fn smoke(bypass: bool) -> Smoke {
    let items = generate_sessions(&SessionConfig {
        sessions: 5,
        turns: LengthDist::Fixed(3),
        // Long agentic contexts that grow by a few thousand tokens a turn
        // (tool results), within K_TAIL_TOLERANCE of the last snapshot.
        system_prompt_tokens: 512,
        first_user_tokens: LengthDist::Fixed(41_500),
        final_context_tokens: 47_500,
        output_tokens: LengthDist::Fixed(64),
        think_time_mean: Duration::from_secs(2),
        think_time_max: Duration::from_secs(4),
        session_interarrival_mean: Duration::from_secs(3),
        start: Instant::ZERO,
        ..SessionConfig::default()
    });
    let mut sessions_cfg = handoff_sched_sglang::SessionConfig {
        enabled: true,
        push: true,
        bypass,
        ..handoff_sched_sglang::SessionConfig::default()
    };
    sessions_cfg.snapshot_max_sessions = 4;
    let core = move |pages: u64| {
        let cfg = handoff_sched_sglang::SglangConfig {
            total_pages: pages,
            sessions: sessions_cfg,
            ..handoff_sched_sglang::SglangConfig::with_page_size(1)
        };
        Box::new(handoff_sched_sglang::SglangCore::new(cfg, seed_perf()).expect("valid"))
            as handoff_core::CoreBox
    };
    let cfg = DeploymentConfig {
        backend: Backend::Sglang,
        policy: HandoffPolicy::DestinationFirst,
        prefill_workers: 1,
        decode_workers: 1,
        router: RouterMode::KvAware,
        block_size: 64,
        transfer: handoff_engine::TransferModel::Bytes {
            base: Duration::from_millis(20),
            bytes_per_token: 84_000,
            bandwidth: 15e9,
        },
        transcript: true,
        ..DeploymentConfig::default()
    };
    // Room for every session on both workers: the only eviction is the
    // forced one.
    let make = move |_: handoff_core::WorkerId, _| core(400_000);
    let records = Rc::new(RefCell::new(Vec::new()));
    let sink = Rc::clone(&records);
    let sessions = SessionServing {
        routing: Some(SessionRouting {
            rebalance_threshold: 0,
        }),
        close_delay: Duration::from_millis(100),
        // The seed forces a capacity eviction after turn 2's append.
        evict_after_turn: Some(1),
        overheads: SessionOverheads::default(),
    };
    let o = Replay::sessions(cfg, items.iter().cloned(), sessions, make)
        .expect("the cores publish at the deployment's block size")
        .with_request_sink(Box::new(move |r: &RequestRecord| {
            sink.borrow_mut().push(r.clone())
        }))
        .run_all();
    let records = records.borrow().clone();
    Smoke {
        run: Run {
            report: o.report,
            transcript: o.transcript.expect("transcript asked for"),
            log: o.session_log,
            records,
        },
        items,
    }
}

/// Turn-3 reseeds of a run, by request id.
fn third_turn_reseeds(s: &Smoke) -> Vec<(u64, RequestRecord)> {
    s.items
        .iter()
        .filter(|it| it.turn == Some(2))
        .filter_map(|it| {
            let r = s.run.records.iter().find(|r| r.id == it.request.id.0)?;
            (r.session?.execution_mode == "reseed").then(|| (r.id, r.clone()))
        })
        .collect()
}

#[test]
fn seed_section_8_smoke_test() {
    let with = smoke(true);
    let without = smoke(false);
    let log = |s: &Smoke, event: &str| {
        let needle = format!("\"event\":\"{event}\"");
        s.run.log.iter().filter(|l| l.contains(&needle)).count()
    };
    assert_eq!(with.run.report.completed_requests, 15);
    assert_eq!(with.run.report.failed_requests, 0);
    assert!(log(&with, "snapshot_push_sent") > 0, "{:#?}", with.run.log);
    assert!(log(&with, "snapshot_recv_ingested") > 0);
    // Pushes are reversed handoffs: in the transcript beside the reseeds.
    assert!(with.run.transcript.handoffs() > 5);

    let hits = third_turn_reseeds(&with);
    assert!(!hits.is_empty(), "some turn 3 reseeds: {:#?}", with.run.log);
    for (_, r) in &hits {
        let s = r.session.unwrap();
        assert!(
            s.d_to_p_snapshot_used,
            "turn 3 of session {} used its snapshot: {:#?}",
            s.session_id, with.run.log
        );
        assert!(s.d_to_p_snapshot_age_s.is_some());
        assert!(s.d_to_p_push_count_during_session >= 1);
        // Against the cold prefill of the same session's first turn
        // (nothing cached but the 512-token system prompt).
        let first = with
            .items
            .iter()
            .find(|it| it.turn == Some(0) && it.request.session.map(|x| x.0) == Some(s.session_id))
            .and_then(|it| with.run.records.iter().find(|q| q.id == it.request.id.0))
            .expect("the session's first turn ran");
        let (hit, cold) = (r.ttft_ms.unwrap(), first.ttft_ms.unwrap());
        assert!(
            cold - hit >= 1000.0,
            "session {}: bypass {hit} ms vs cold {cold} ms\n{r:#?}\n{first:#?}",
            s.session_id
        );
    }
    // E4-ablate: the same pushes, no bypass; its turn 3 reseeds re-prefill.
    assert!(third_turn_reseeds(&without)
        .iter()
        .all(|(_, r)| !r.session.unwrap().d_to_p_snapshot_used));
    assert!(
        log(&without, "snapshot_push_sent") > 0,
        "E4-ablate still pushes"
    );
    assert_eq!(log(&without, "snapshot_bypass_hit"), 0);
}

/// The experiment's variants are engine configurations: each runs on
/// virtual-clock live with the same report and session log as replay.
#[test]
fn experiment_variants_run_on_virtual_live_with_parity() {
    use handoff_lab::{engine_specs, replay_config, run_variant, serving_of};
    use handoff_lab::{ExperimentConfig, Variant};
    let items = generate_sessions(&SessionConfig {
        sessions: 6,
        turns: LengthDist::Fixed(4),
        final_context_tokens: 30_000,
        ..SessionConfig::default()
    });
    let cfg = ExperimentConfig {
        decode_kv_tokens: 60_000,
        prefill_kv_tokens: 120_000,
        ..ExperimentConfig::default()
    };
    for v in Variant::ALL {
        let replay = run_variant(&cfg, v, &items).expect("runs");
        let specs = engine_specs(&cfg, v).expect("polynomial timings have specs");
        let live = handoff_live_adapter::run_virtual_sessions(
            &replay_config(&cfg),
            &specs,
            items.iter().cloned(),
            serving_of(&cfg, v),
        )
        .expect("virtual live runs");
        assert_eq!(
            report_divergence(&replay.report, &live.report),
            None,
            "{v:?}"
        );
        assert_eq!(replay.log, live.session_log, "{v:?}");
        assert_eq!(replay.summary.completed as usize, items.len(), "{v:?}");
    }
}

/// `experiment run --enable-d-to-p-sync --timings seed --sessions 8
/// --decode 1 --decode-kv-tokens 120000 --prefill-kv-tokens 92000`, the
/// seed's 92K prefill pool shrunk to one decode worker: a session closed
/// while its D→P push still waited for a reservation on the prefill worker
/// left that reservation (~50K tokens) pinned for good, since the push's
/// source ended before it knew its peer. Every reseed behind it then waited
/// forever (7 requests unfinished, a worker not drained).
#[test]
fn a_session_closed_mid_push_leaves_no_prefill_reservation_behind() {
    use handoff_lab::config::{SEED_BYTES_PER_TOKEN, SEED_LINK_BANDWIDTH};
    use handoff_lab::{run_variant, ExperimentConfig, TimingMode, Variant};
    let items = generate_sessions(&SessionConfig {
        seed: 7,
        sessions: 8,
        final_context_tokens: 50_000,
        ..SessionConfig::default()
    });
    let cfg = ExperimentConfig {
        decode_workers: 1,
        decode_kv_tokens: 120_000,
        prefill_kv_tokens: 92_000,
        // What `--timings seed` sets: the seed's timings, each transfer
        // alone on its link, and the frontend's overheads.
        timing: TimingMode::Seed,
        transfer: handoff_engine::TransferModel::Bytes {
            base: Duration::from_millis(20),
            bytes_per_token: SEED_BYTES_PER_TOKEN,
            bandwidth: SEED_LINK_BANDWIDTH,
        },
        overheads: SessionOverheads::SEED,
        ..ExperimentConfig::default()
    };
    let out = run_variant(&cfg, Variant::E4, &items).expect("runs");
    assert!(
        out.log.iter().any(|l| l.contains("\"session_released\"")),
        "the workload closes sessions mid-push"
    );
    assert_eq!(out.summary.failed, 0);
    assert_eq!(out.summary.completed as usize, items.len());
    assert!(out.summary.drained, "every reservation ended");
}

/// `experiment run --enable-d-to-p-sync --timings seed --sessions 8
/// --decode 1 --decode-kv-tokens 200000 --prefill-kv-tokens 60000`: on the
/// one decode worker, a turn of session 7 (direct, or a reseed) is placed
/// while the session's older slot is still there, and that older slot is
/// evicted for capacity before the turn builds its own. The frontend's
/// session table must keep the newer placement (the eviction names the
/// older slot's turn), so the client's close reaches the worker and every
/// slot is released by the end of the run.
#[test]
fn a_reseed_landing_on_its_own_stale_slot_stays_in_the_session_table() {
    use handoff_lab::config::{SEED_BYTES_PER_TOKEN, SEED_LINK_BANDWIDTH};
    use handoff_lab::{run_variant, ExperimentConfig, TimingMode, Variant};
    let items = generate_sessions(&SessionConfig {
        seed: 7,
        sessions: 8,
        final_context_tokens: 50_000,
        ..SessionConfig::default()
    });
    let cfg = ExperimentConfig {
        decode_workers: 1,
        decode_kv_tokens: 200_000,
        prefill_kv_tokens: 60_000,
        timing: TimingMode::Seed,
        transfer: handoff_engine::TransferModel::Bytes {
            base: Duration::from_millis(20),
            bytes_per_token: SEED_BYTES_PER_TOKEN,
            bandwidth: SEED_LINK_BANDWIDTH,
        },
        overheads: SessionOverheads::SEED,
        ..ExperimentConfig::default()
    };
    let out = run_variant(&cfg, Variant::E4, &items).expect("runs");
    assert_eq!(out.summary.failed, 0);
    assert!(out.summary.drained, "every session slot released");
}

/// A turn larger than the decode pool (`experiment run --sessions 1
/// --session-turns 2 --session-final-tokens 150000 --decode-kv-tokens
/// 100000 --prefill-kv-tokens 100000`) can never be served: the naive E1
/// run fails it as `unsupported` when its reservation is refused, and the
/// session-affine E3 run, whose turn goes straight to the decode worker,
/// fails it with the same reason rather than leaving it in flight.
#[test]
fn a_turn_larger_than_the_decode_pool_fails_as_unsupported_on_every_path() {
    use handoff_core::{CancelReason, FailureReason};
    use handoff_lab::{run_variant, ExperimentConfig, Variant};
    let items = generate_sessions(&SessionConfig {
        seed: 7,
        sessions: 1,
        turns: LengthDist::Fixed(2),
        final_context_tokens: 150_000,
        ..SessionConfig::default()
    });
    let cfg = ExperimentConfig {
        decode_kv_tokens: 100_000,
        prefill_kv_tokens: 100_000,
        ..ExperimentConfig::default()
    };
    for variant in [Variant::E1, Variant::E3, Variant::E4] {
        let out = run_variant(&cfg, variant, &items).expect("runs");
        let reasons: Vec<_> = out.records.iter().map(|r| r.failure_reason).collect();
        assert_eq!(
            reasons,
            [
                None,
                Some(FailureReason::Handoff(CancelReason::Unsupported))
            ],
            "{variant:?}"
        );
        let busy: Vec<_> = out.report.workers.iter().filter(|w| !w.drained).collect();
        assert!(busy.is_empty(), "{variant:?}: {busy:?}");
    }
}
