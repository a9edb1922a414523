//! Scenario tests: the §3.2 TTFT claim under the seed's timings, the bypass
//! skipping compute, every §7 failure mode ending in the re-prefill
//! fallback with clean accounting, determinism, and a property test over
//! random traces and faults.
//!
//! Fault times are found by running the scenario once without the fault
//! (the model is deterministic, so the second run is identical up to it).

use crate::config::{Fault, FaultKind, KvcConfig, Timings};
use crate::experiment::{run_experiment, Variant};
use crate::metrics::{ExecMode, RequestRecord};
use crate::sim::{simulate, RunOutput};
use handoff_core::{Duration, Instant, Request, RequestId, SessionId};
use handoff_workload::{generate_sessions, SessionConfig, TraceItem};
use proptest::prelude::*;

/// One session whose turn `k` has prompt `prompts[k]` (append-only
/// content: full blocks keep their hash ids across turns).
fn session(sid: u64, start_ms: u64, prompts: &[u32], output: u32, delay_ms: u64) -> Vec<TraceItem> {
    prompts
        .iter()
        .enumerate()
        .map(|(k, &p)| {
            let full = u64::from(p) / 512;
            let mut hashes: Vec<u64> = (0..full).map(|b| sid * 1_000_000 + b).collect();
            if p % 512 != 0 {
                hashes.push(sid * 1_000_000 + 900_000 + k as u64);
            }
            TraceItem {
                request: Request {
                    id: RequestId(0),
                    prompt_tokens: p,
                    max_output_tokens: output,
                    prefix_hashes: hashes,
                    hash_block_tokens: 512,
                    session: Some(SessionId(sid)),
                    arrival: Instant::from_millis(start_ms + k as u64),
                },
                turn: Some(k as u32),
                delay: (k > 0).then(|| Duration::from_millis(delay_ms)),
            }
        })
        .collect()
}

fn trace(sessions: Vec<Vec<TraceItem>>) -> Vec<TraceItem> {
    let mut items: Vec<TraceItem> = sessions.into_iter().flatten().collect();
    items.sort_by_key(|i| (i.request.arrival, i.request.session, i.turn));
    for (n, it) in items.iter_mut().enumerate() {
        it.request.id = RequestId(n as u64);
    }
    items
}

fn seed_cfg(v: Variant) -> KvcConfig {
    let base = KvcConfig {
        timings: Timings::seed(),
        decode_kv_tokens: 400_000,
        prefill_kv_tokens: 400_000,
        log: true,
        ..KvcConfig::default()
    };
    v.configure(&base)
}

/// Runs and insists the accounting drained.
fn run(cfg: &KvcConfig, items: &[TraceItem]) -> RunOutput {
    let out = simulate(cfg.clone(), items, "t").expect("valid config");
    assert_eq!(out.check, Ok(()), "accounting");
    assert_eq!(out.summary.ledger_opened, out.summary.ledger_ended);
    assert!(out
        .records
        .iter()
        .all(|r| r.ttft_ms.is_some() || r.failed.is_some()));
    out
}

fn rec(out: &RunOutput, sid: u64, turn: u32) -> &RequestRecord {
    out.records
        .iter()
        .find(|r| r.session == sid && r.turn == turn)
        .expect("record")
}

fn sent(out: &RunOutput, sid: u64, turn: u32) -> Instant {
    Instant((rec(out, sid, turn).sent_ms * 1e6).round() as u64)
}

fn done(out: &RunOutput, sid: u64, turn: u32) -> Instant {
    let r = rec(out, sid, turn);
    Instant(((r.sent_ms + r.e2e_ms.expect("completed")) * 1e6).round() as u64)
}

fn with_faults(cfg: &KvcConfig, faults: &[(Instant, FaultKind)]) -> KvcConfig {
    let mut c = cfg.clone();
    c.faults = faults
        .iter()
        .map(|&(at, kind)| Fault { at, kind })
        .collect();
    c
}

fn before(t: Instant) -> Instant {
    Instant(t.0 - 1_000_000)
}

fn lines(out: &RunOutput, event: &str) -> Vec<serde_json::Value> {
    let needle = format!("\"event\":\"{event}\"");
    out.log
        .iter()
        .filter(|l| l.contains(&needle))
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

/// Context grows by direct appends to 50K; P only ever saw the first turn.
fn fifty_k() -> Vec<TraceItem> {
    trace(vec![session(
        1,
        0,
        &[4096, 12_000, 20_000, 28_000, 36_000, 44_000, 49_000, 50_000],
        256,
        3000,
    )])
}

/// Forces the last turn of `fifty_k` to reseed (its slot is evicted just
/// before it is sent).
fn reseed_last(cfg: &KvcConfig) -> RunOutput {
    let items = fifty_k();
    let plain = run(cfg, &items);
    for t in 1..8 {
        assert_eq!(rec(&plain, 1, t).execution_mode, ExecMode::Direct);
    }
    let at = before(sent(&plain, 1, 7));
    run(
        &with_faults(cfg, &[(at, FaultKind::EvictSession(SessionId(1)))]),
        &items,
    )
}

#[test]
fn seed_timings_reseed_ttft_falls_from_re_prefill_to_bypass() {
    let e3 = reseed_last(&seed_cfg(Variant::E3));
    let e4 = reseed_last(&seed_cfg(Variant::E4));
    let (a, b) = (rec(&e3, 1, 7), rec(&e4, 1, 7));
    for r in [a, b] {
        assert_eq!(r.execution_mode, ExecMode::Reseed);
        assert_eq!(r.reseed_cause, Some("not_resident"));
    }
    // E3: P open + re-prefill of everything P had not cached + RDMA + D'.
    let t3 = a.ttft_ms.unwrap();
    assert!((1800.0..=3500.0).contains(&t3), "E3 reseed TTFT {t3} ms");
    assert!(a.prefill_tokens_computed > 45_000);
    assert!(!a.d_to_p_snapshot_used);
    // E4: the snapshot of the previous turn is fresh: no P compute at all.
    let t4 = b.ttft_ms.unwrap();
    println!(
        "50K-token reseed under SeedTimings: E3 re-prefill TTFT {t3:.1} ms ({} P tokens), E4 bypass TTFT {t4:.1} ms ({} D' tail tokens)",
        a.prefill_tokens_computed, b.append_tokens_computed
    );
    assert!((300.0..=500.0).contains(&t4), "E4 reseed TTFT {t4} ms");
    assert!(b.d_to_p_snapshot_used);
    assert_eq!(b.prefill_tokens_computed, 0, "bypass skips P compute");
    // The tail the snapshot lacks (this turn's new tokens) ran on D'.
    assert_eq!(b.append_tokens_computed, 50_000 - (49_000 + 256));
    let age = b.d_to_p_snapshot_age_s.unwrap();
    assert!((2.0..4.0).contains(&age), "{age}");
    assert_eq!(b.d_to_p_push_count_during_session, 7);
    let hit = &lines(&e4, "snapshot_bypass_hit")[0];
    assert_eq!(hit["seqlen"], 49_256);
    assert!(hit["saved_prefill_ms_est"].as_f64().unwrap() > 2000.0);
    // Turns 0..=6 pushed. D' learned from the bypass that P holds 49256
    // tokens, so the reseeded turn's 1000 new tokens stay under K_DELTA.
    assert_eq!(lines(&e4, "snapshot_push_sent").len(), 7);
    assert_eq!(e4.summary.pushes_enqueued, 7);
    assert!(lines(&e4, "snapshot_push_failed").is_empty());
    assert!(lines(&e3, "snapshot_push_sent").is_empty());
}

#[test]
fn ablate_pushes_but_never_bypasses() {
    let out = reseed_last(&seed_cfg(Variant::E4Ablate));
    let r = rec(&out, 1, 7);
    assert!(!r.d_to_p_snapshot_used);
    assert_eq!(r.bypass_miss_reason, Some("bypass_disabled"));
    assert!(r.prefill_tokens_computed > 45_000);
    assert_eq!(out.summary.pushes_sent, 7);
    assert_eq!(out.summary.bypass_misses.get("bypass_disabled"), Some(&1));
}

fn miss_reason(out: &RunOutput, sid: u64, turn: u32) -> Option<&'static str> {
    let r = rec(out, sid, turn);
    assert_eq!(r.execution_mode, ExecMode::Reseed);
    assert!(!r.d_to_p_snapshot_used);
    assert!(r.prefill_tokens_computed > 0, "fell back to re-prefill");
    r.bypass_miss_reason
}

#[test]
fn push_failure_is_retried_once_then_the_old_snapshot_stays() {
    let mut cfg = seed_cfg(Variant::E4);
    // Turns grow by ~8K: a one-turn-old snapshot must qualify.
    cfg.sync.tail_tolerance = 8192;
    let items = trace(vec![session(
        1,
        0,
        &[4096, 12_000, 20_000, 28_000, 36_000],
        256,
        3000,
    )]);
    let plain = run(&cfg, &items);
    // Both tries of turn 3's push fail; turn 4 reseeds on turn 2's snapshot.
    let faults = [
        (sent(&plain, 1, 3), FaultKind::FailPushes(2)),
        (
            before(sent(&plain, 1, 4)),
            FaultKind::EvictSession(SessionId(1)),
        ),
    ];
    let out = run(&with_faults(&cfg, &faults), &items);
    let failed: Vec<_> = lines(&out, "snapshot_push_failed")
        .into_iter()
        .filter(|l| l["reason"] != "session_released")
        .collect();
    assert_eq!(failed.len(), 2);
    assert_eq!(failed[0]["reason"], "transfer_failed");
    assert_eq!(
        (failed[0]["attempt"].as_u64(), failed[0]["retry"].as_bool()),
        (Some(1), Some(true))
    );
    assert_eq!(
        (failed[1]["attempt"].as_u64(), failed[1]["retry"].as_bool()),
        (Some(2), Some(false))
    );
    assert_eq!(out.summary.pushes_retried, 1);
    assert_eq!(miss_reason(&out, 1, 4), Some("seqlen_short"));
    let miss = &lines(&out, "snapshot_bypass_miss")[0];
    assert_eq!(miss["reason"], "seqlen_short");
    // The older entry was kept (20000 + 256 tokens) and never replaced.
    let ingested: Vec<u64> = lines(&out, "snapshot_recv_ingested")
        .iter()
        .map(|l| l["seqlen"].as_u64().unwrap())
        .collect();
    assert_eq!(ingested, vec![4352, 12_256, 20_256]);

    // One failure: the retry lands and the reseed bypasses.
    let faults = [
        (sent(&plain, 1, 3), FaultKind::FailPushes(1)),
        (
            before(sent(&plain, 1, 4)),
            FaultKind::EvictSession(SessionId(1)),
        ),
    ];
    let out = run(&with_faults(&cfg, &faults), &items);
    let sent_lines = lines(&out, "snapshot_push_sent");
    assert_eq!(sent_lines.last().unwrap()["attempt"], 2);
    assert!(rec(&out, 1, 4).d_to_p_snapshot_used);
}

#[test]
fn random_push_failures_never_break_accounting() {
    let mut cfg = seed_cfg(Variant::E4);
    cfg.sync.push_failure_rate = 0.5;
    cfg.seed = 11;
    let out = run(&cfg, &fifty_k());
    assert!(out.summary.pushes_failed > 0);
    assert!(out.summary.pushes_sent > 0);
    assert_eq!(out.summary.failed, 0);
}

#[test]
fn full_store_evicts_least_recently_used_and_logs_it() {
    let mut cfg = seed_cfg(Variant::E4);
    cfg.sync.max_sessions = 1;
    let items = trace(vec![
        session(1, 0, &[4096, 8192], 256, 3000),
        session(2, 1000, &[4096, 8192], 256, 3000),
    ]);
    let plain = run(&cfg, &items);
    let at = before(sent(&plain, 1, 1));
    let out = run(
        &with_faults(&cfg, &[(at, FaultKind::EvictSession(SessionId(1)))]),
        &items,
    );
    let evicted = lines(&out, "snapshot_evicted");
    assert!(evicted
        .iter()
        .any(|e| e["sid"] == "1" && e["reason"] == "lru"));
    assert_eq!(miss_reason(&out, 1, 1), Some("no_entry"));
}

#[test]
fn stale_snapshots_fall_back() {
    let items = trace(vec![session(
        1,
        0,
        &[4096, 12_000, 20_000, 28_000, 36_000],
        256,
        3000,
    )]);
    // K_DELTA of 16000: only turns 2 and 4 push; turn 4 reseeds on turn 2's.
    let mut cfg = seed_cfg(Variant::E4);
    cfg.sync.delta_tokens = 16_000;
    let plain = run(&cfg, &items);
    let at = before(sent(&plain, 1, 4));
    let out = run(
        &with_faults(&cfg, &[(at, FaultKind::EvictSession(SessionId(1)))]),
        &items,
    );
    // Turn 4's own push is aborted by the session closing.
    assert_eq!(out.summary.pushes_sent, 1);
    assert_eq!(out.summary.pushes_enqueued, 2);
    assert_eq!(miss_reason(&out, 1, 4), Some("seqlen_short"));

    // Too old: a snapshot older than max_age is stale and evicted as such.
    let mut cfg = seed_cfg(Variant::E4);
    cfg.sync.max_age = Some(Duration::from_secs(1));
    let plain = run(&cfg, &items);
    let at = before(sent(&plain, 1, 4));
    let out = run(
        &with_faults(&cfg, &[(at, FaultKind::EvictSession(SessionId(1)))]),
        &items,
    );
    assert_eq!(miss_reason(&out, 1, 4), Some("stale"));
    assert!(lines(&out, "snapshot_evicted")
        .iter()
        .any(|e| e["reason"] == "stale"));
}

#[test]
fn decode_restart_during_a_push_cleans_up_and_falls_back() {
    let cfg = seed_cfg(Variant::E4);
    let items = trace(vec![session(1, 0, &[4096, 8192], 256, 3000)]);
    let plain = run(&cfg, &items);
    let worker = rec(&plain, 1, 0).decode_worker.unwrap();
    // The first push (~44 ms) is in flight 10 ms after turn 0 completes.
    let at = done(&plain, 1, 0) + Duration::from_millis(10);
    let out = run(
        &with_faults(&cfg, &[(at, FaultKind::RestartDecode(worker))]),
        &items,
    );
    let failed = lines(&out, "snapshot_push_failed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["reason"], "decode_restart");
    assert_eq!(failed[0]["retry"], false);
    assert_eq!(rec(&out, 1, 1).reseed_cause, Some("not_resident"));
    assert_eq!(miss_reason(&out, 1, 1), Some("no_entry"));
}

#[test]
fn decode_restart_mid_turn_fails_it_and_the_session_reseeds() {
    let cfg = seed_cfg(Variant::E4);
    let items = trace(vec![session(1, 0, &[4096, 8192, 12_288], 256, 3000)]);
    let plain = run(&cfg, &items);
    let worker = rec(&plain, 1, 1).decode_worker.unwrap();
    let at = sent(&plain, 1, 1) + Duration::from_secs(1);
    let out = run(
        &with_faults(&cfg, &[(at, FaultKind::RestartDecode(worker))]),
        &items,
    );
    assert_eq!(rec(&out, 1, 1).failed, Some("decode_restart"));
    let next = rec(&out, 1, 2);
    assert_eq!(next.execution_mode, ExecMode::Reseed);
    assert!(next.failed.is_none());
    assert_eq!(out.summary.failed, 1);
}

#[test]
fn prefill_restart_clears_the_store_and_reseeds_fall_back() {
    let cfg = seed_cfg(Variant::E4);
    let items = trace(vec![session(1, 0, &[4096, 8192, 12_288], 256, 3000)]);
    let plain = run(&cfg, &items);
    let evict = (
        before(sent(&plain, 1, 2)),
        FaultKind::EvictSession(SessionId(1)),
    );
    // Control: without the restart the reseed bypasses.
    let control = run(&with_faults(&cfg, &[evict]), &items);
    assert!(rec(&control, 1, 2).d_to_p_snapshot_used);
    let restart = (
        Instant(sent(&plain, 1, 2).0 - 500_000_000),
        FaultKind::RestartPrefill,
    );
    let out = run(&with_faults(&cfg, &[restart, evict]), &items);
    assert!(lines(&out, "snapshot_evicted")
        .iter()
        .any(|e| e["reason"] == "restart"));
    assert_eq!(miss_reason(&out, 1, 2), Some("no_entry"));
}

#[test]
fn prefill_restart_during_a_push_retries_after_it() {
    let cfg = seed_cfg(Variant::E4);
    let items = trace(vec![session(1, 0, &[4096, 8192], 256, 3000)]);
    let plain = run(&cfg, &items);
    let at = done(&plain, 1, 0) + Duration::from_millis(10);
    let evict = (
        before(sent(&plain, 1, 1)),
        FaultKind::EvictSession(SessionId(1)),
    );
    let out = run(
        &with_faults(&cfg, &[(at, FaultKind::RestartPrefill), evict]),
        &items,
    );
    let failed = lines(&out, "snapshot_push_failed");
    assert_eq!(failed[0]["reason"], "prefill_restart");
    assert_eq!(failed[0]["retry"], true);
    assert_eq!(lines(&out, "snapshot_push_sent")[0]["attempt"], 2);
    assert!(rec(&out, 1, 1).d_to_p_snapshot_used);
}

#[test]
fn overlapping_pushes_warn_and_the_last_write_wins() {
    // No think time and one output token: turn 1 commits while turn 0's
    // 40K-token push is still on the wire, so two pushes of the session
    // are in flight at once.
    let mut cfg = seed_cfg(Variant::E4);
    cfg.session_close_delay = Duration::from_secs(2);
    let items = trace(vec![session(1, 0, &[40_000, 41_000], 1, 0)]);
    let out = run(&cfg, &items);
    assert_eq!(out.summary.double_pushes, 1);
    let warn = &lines(&out, "snapshot_double_push")[0];
    assert_eq!(warn["level"], "warn");
    let ingested: Vec<u64> = lines(&out, "snapshot_recv_ingested")
        .iter()
        .map(|l| l["seqlen"].as_u64().unwrap())
        .collect();
    assert_eq!(ingested, vec![40_001, 41_001]);
    // The entry the session leaves behind is the last write.
    let closed = lines(&out, "snapshot_evicted");
    assert_eq!(closed[0]["reason"], "session_close");
    assert_eq!(closed[0]["seqlen"], 41_001);
}

#[test]
fn releasing_the_session_during_a_push_aborts_it() {
    let mut cfg = seed_cfg(Variant::E4);
    cfg.session_close_delay = Duration::from_millis(10);
    let items = trace(vec![session(1, 0, &[4096], 256, 0)]);
    let out = run(&cfg, &items);
    let failed = lines(&out, "snapshot_push_failed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["reason"], "session_released");
    assert_eq!(failed[0]["retry"], false);
    assert!(lines(&out, "snapshot_recv_ingested").is_empty());
}

#[test]
fn pushes_slow_reseeds_only_on_half_duplex_links() {
    let mut cfg = seed_cfg(Variant::E4);
    cfg.session_close_delay = Duration::from_secs(1);
    cfg.timings.transfer = handoff_core::TransferModel::Contention {
        base: Duration::from_millis(20),
        bytes_per_token: crate::config::SEED_BYTES_PER_TOKEN,
        bandwidth: crate::config::SEED_LINK_BANDWIDTH,
    };
    let first = session(1, 0, &[40_000], 1, 0);
    let alone = run(&cfg, &trace(vec![first.clone()]));
    // Session 2's P→D transfer starts ~34 ms into session 1's 244 ms push.
    let start = (done(&alone, 1, 0).0 - 200_000_000) / 1_000_000;
    let items = trace(vec![first, session(2, start, &[4096], 1, 0)]);
    let ttft = |cfg: &KvcConfig| rec(&run(cfg, &items), 2, 0).ttft_ms.unwrap();
    let duplex = ttft(&cfg);
    let no_push = ttft(&Variant::E3.configure(&cfg));
    cfg.timings.duplex = false;
    let shared = ttft(&cfg);
    assert!((duplex - no_push).abs() < 1e-6, "{duplex} vs {no_push}");
    assert!(shared > duplex + 1.0, "{shared} vs {duplex}");
}

#[test]
fn naive_pd_prefills_every_turn_with_prefix_hits() {
    let cfg = seed_cfg(Variant::E1);
    let items = trace(vec![session(1, 0, &[4096, 8192, 12_288], 256, 3000)]);
    let out = run(&cfg, &items);
    assert!(out.records.iter().all(|r| r.execution_mode == ExecMode::Pd));
    // Turn 1 finds turn 0's prompt in P's prefix cache.
    assert_eq!(rec(&out, 1, 1).prefill_tokens_computed, 4096);
    assert!(out.log.iter().all(|l| !l.contains("snapshot")));
}

#[test]
fn capacity_pressure_causes_reseeds() {
    let mut cfg = seed_cfg(Variant::E3);
    cfg.decode_workers = 1;
    cfg.decode_kv_tokens = 40_000;
    let items = trace(vec![
        session(1, 0, &[8192, 16_384, 24_576], 256, 3000),
        session(2, 500, &[8192, 16_384, 24_576], 256, 3000),
    ]);
    let out = run(&cfg, &items);
    assert!(out.summary.modes.get("reseed").copied().unwrap_or(0) > 0);
    assert!(out.summary.slot_evictions > 0);
}

#[test]
fn same_inputs_give_identical_output() {
    let mut cfg = KvcConfig {
        log: true,
        ..KvcConfig::default()
    };
    cfg.sync.push_failure_rate = 0.1;
    let items = generate_sessions(&SessionConfig {
        sessions: 12,
        ..SessionConfig::default()
    });
    let a = run_experiment(&cfg, &items).unwrap();
    let b = run_experiment(&cfg, &items).unwrap();
    for (x, y) in a.outputs.iter().zip(&b.outputs) {
        assert_eq!(x.log, y.log);
        assert_eq!(
            serde_json::to_string(&x.records).unwrap(),
            serde_json::to_string(&y.records).unwrap()
        );
        assert_eq!(x.check, Ok(()));
    }
    assert_eq!(
        serde_json::to_string(&a.report).unwrap(),
        serde_json::to_string(&b.report).unwrap()
    );
}

#[test]
fn default_experiment_drains_and_judges() {
    let items = generate_sessions(&SessionConfig::default());
    let out = run_experiment(&KvcConfig::default(), &items).unwrap();
    assert_eq!(out.report.runs.len(), 4);
    assert_eq!(out.report.verdicts.len(), 3);
    for o in &out.outputs {
        assert_eq!(o.check, Ok(()), "{}", o.summary.label);
        assert_eq!(o.summary.completed, items.len() as u64);
    }
    let table = out.report.table();
    assert!(table.contains("H4-1") && table.contains("E4-ablate"));
}

fn arb_session(sid: u64) -> impl Strategy<Value = Vec<TraceItem>> {
    (
        0u64..5_000,
        prop::collection::vec(256u32..6_000, 1..6),
        1u32..300,
        0u64..2_000,
    )
        .prop_map(move |(start, growth, output, delay)| {
            let mut prompts = Vec::new();
            let mut ctx = 0u32;
            for g in growth {
                ctx += g + output;
                prompts.push(ctx);
            }
            session(sid, start, &prompts, output, delay)
        })
}

fn arb_fault() -> impl Strategy<Value = Fault> {
    (
        0u64..40_000,
        prop_oneof![
            (0u32..3).prop_map(FaultKind::RestartDecode),
            Just(FaultKind::RestartPrefill),
            (1u64..4).prop_map(|s| FaultKind::EvictSession(SessionId(s))),
            (1u32..3).prop_map(FaultKind::FailPushes),
        ],
    )
        .prop_map(|(ms, kind)| Fault {
            at: Instant::from_millis(ms),
            kind,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the trace and the faults, every holding ends exactly once,
    /// nothing stays locked or reserved, every request ends, and failures
    /// name a known cause.
    #[test]
    fn accounting_always_drains(
        s1 in arb_session(1),
        s2 in arb_session(2),
        s3 in arb_session(3),
        faults in prop::collection::vec(arb_fault(), 0..4),
        variant in 0usize..4,
        decode_kv in 8_000u64..40_000,
        max_sessions in 1usize..3,
        seed_timings in any::<bool>(),
        duplex in any::<bool>(),
    ) {
        let items = trace(vec![s1, s2, s3]);
        let mut base = KvcConfig {
            decode_kv_tokens: decode_kv,
            prefill_kv_tokens: 40_000,
            faults,
            log: true,
            ..KvcConfig::default()
        };
        if seed_timings {
            base.timings = Timings::seed();
        }
        base.timings.duplex = duplex;
        base.sync.max_sessions = max_sessions;
        base.sync.store_kv_tokens = 30_000;
        base.sync.push_failure_rate = 0.2;
        let cfg = Variant::ALL[variant].configure(&base);
        let out = simulate(cfg, &items, "p").unwrap();
        prop_assert_eq!(&out.check, &Ok(()));
        prop_assert_eq!(out.summary.ledger_opened, out.summary.ledger_ended);
        for r in &out.records {
            prop_assert!(r.ttft_ms.is_some() || r.failed.is_some());
            if let Some(f) = r.failed {
                prop_assert!(
                    ["too_large", "decode_restart", "prefill_restart"].contains(&f),
                    "unexpected failure {}", f
                );
            }
        }
        for l in &out.log {
            prop_assert!(serde_json::from_str::<serde_json::Value>(l).is_ok());
        }
    }
}
