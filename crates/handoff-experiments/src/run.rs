//! One experiment variant as a configuration of the one engine: the real
//! SGLang cores (session slots, snapshot store, bypass at admission) on one
//! prefill and N decode workers, destination-first, routed by the shared
//! frontend, with closed-loop session arrivals — replay
//! ([`handoff_replay::Replay::sessions`]); virtual-clock live runs the same
//! configuration (`handoff_live::run_virtual_sessions`) with the same bytes.

use crate::config::{ExperimentConfig, TimingMode};
use crate::experiment::Variant;
use crate::metrics::RunSummary;
use handoff_core::{Backend, CoreBox, HandoffPolicy, PolynomialPerf, WorkerId};
use handoff_replay::{Pool, Replay, ReplayConfig, Report, RequestRecord, SessionServing};
use handoff_router::{RouterMode, SessionRouting};
use handoff_sglang::{SessionConfig, SglangConfig, SglangCore};
use handoff_workload::TraceItem;
use std::cell::RefCell;
use std::rc::Rc;

/// What one variant's run produced.
#[derive(Debug)]
pub struct RunOutput {
    /// The summary the table compares.
    pub summary: RunSummary,
    /// The engine's report (the same as `replay` prints).
    pub report: Report,
    /// Per-request records, with the seed's §6 session fields.
    pub records: Vec<RequestRecord>,
    /// The seed's §6 JSONL log.
    pub log: Vec<String>,
}

/// The SGLang sessions knobs of `variant` (E1: none).
pub fn sessions_of(cfg: &ExperimentConfig, variant: Variant) -> SessionConfig {
    let (enabled, push, bypass) = match variant {
        Variant::E1 => (false, false, false),
        Variant::E3 => (true, false, false),
        Variant::E4 => (true, true, true),
        Variant::E4Ablate => (true, true, false),
    };
    SessionConfig {
        enabled,
        push,
        push_delta_tokens: cfg.sync.delta_tokens,
        snapshot_max_sessions: cfg.sync.max_sessions,
        bypass,
        tail_tolerance_tokens: cfg.sync.tail_tolerance,
        snapshot_max_age: cfg.sync.max_age,
    }
}

/// The engine configuration of every variant: 1P + N decode SGLang workers,
/// destination-first, KV-aware routing.
pub fn replay_config(cfg: &ExperimentConfig) -> ReplayConfig {
    ReplayConfig {
        backend: Backend::Sglang,
        policy: HandoffPolicy::DestinationFirst,
        prefill_workers: 1,
        decode_workers: cfg.decode_workers,
        router: RouterMode::KvAware,
        block_size: SglangConfig::with_page_size(1).event_block_tokens,
        transfer: cfg.transfer,
        seed: cfg.seed,
        ..ReplayConfig::default()
    }
}

/// How the director serves `variant`: session-affine for KVC, plain routing
/// for E1; closed-loop turns either way.
pub fn serving_of(cfg: &ExperimentConfig, variant: Variant) -> SessionServing {
    SessionServing {
        routing: (variant != Variant::E1).then_some(SessionRouting {
            rebalance_threshold: cfg.rebalance_threshold,
        }),
        close_delay: cfg.session_close_delay,
        evict_after_turn: None,
    }
}

/// Runs `variant` of `cfg` over `items` on the engine.
pub fn run_variant(
    cfg: &ExperimentConfig,
    variant: Variant,
    items: &[TraceItem],
) -> Result<RunOutput, String> {
    cfg.validate()?;
    let sessions = sessions_of(cfg, variant);
    let core_cfg = |pool: Pool| SglangConfig {
        total_pages: match pool {
            Pool::Prefill => cfg.prefill_kv_tokens,
            _ => cfg.decode_kv_tokens,
        },
        sessions,
        ..SglangConfig::with_page_size(1)
    };
    // Validate once, so the factory below cannot fail.
    for pool in [Pool::Prefill, Pool::Decode] {
        core_cfg(pool)
            .validate()
            .map_err(|e| format!("sglang config: {e}"))?;
    }
    let timing = cfg.timing;
    let make = move |_: WorkerId, pool: Pool| -> CoreBox {
        let c = core_cfg(pool);
        let core = match timing {
            TimingMode::Polynomial => {
                SglangCore::new(c, PolynomialPerf::default()).map(|c| Box::new(c) as CoreBox)
            }
            TimingMode::Seed => {
                SglangCore::new(c, TimingMode::seed_perf()).map(|c| Box::new(c) as CoreBox)
            }
        };
        match core {
            Ok(c) => c,
            Err(e) => unreachable!("validated above: {e}"),
        }
    };
    let records = Rc::new(RefCell::new(Vec::new()));
    let sink = Rc::clone(&records);
    let out = Replay::sessions(
        replay_config(cfg),
        items.iter().cloned(),
        serving_of(cfg, variant),
        make,
    )
    .with_request_sink(Box::new(move |r: &RequestRecord| {
        sink.borrow_mut().push(r.clone())
    }))
    .run_all();
    let records = records.take();
    let summary = RunSummary::of(
        variant.label(),
        (sessions.push, sessions.bypass),
        &out.report,
        &records,
        cfg.bytes_per_token(),
    );
    Ok(RunOutput {
        summary,
        report: out.report,
        records,
        log: out.session_log,
    })
}
