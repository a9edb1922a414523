//! One experiment variant as a configuration of the one engine: the real
//! SGLang cores (session slots, snapshot store, bypass at admission) on one
//! prefill and N decode workers, destination-first, routed by the shared
//! frontend, with closed-loop session arrivals — replay
//! ([`handoff_replay::Replay::sessions`]); virtual-clock live runs the same
//! configuration (`handoff_live_adapter::run_virtual_sessions`) with the same bytes.

use crate::config::{ExperimentConfig, TimingMode, Variant};
use crate::error::LabError;
use crate::metrics::RunSummary;
use handoff_core::{Backend, CoreBox, HandoffPolicy, WorkerId};
use handoff_deployment::{make_core, DeploymentConfig, EngineSpec, SessionServing};
use handoff_replay::Replay;
use handoff_router::Pool;
use handoff_router::{RouterMode, SessionRouting};
use handoff_sched_sglang::{SessionConfig, SglangConfig, SglangCore};
use handoff_serving::report::RequestSink;
use handoff_serving::{Report, RequestRecord};
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
pub fn replay_config(cfg: &ExperimentConfig) -> DeploymentConfig {
    DeploymentConfig {
        backend: Backend::Sglang,
        policy: HandoffPolicy::DestinationFirst,
        prefill_workers: 1,
        decode_workers: cfg.decode_workers,
        router: RouterMode::KvAware,
        block_size: SglangConfig::with_page_size(1).event_block_tokens,
        transfer: cfg.transfer,
        seed: cfg.seed,
        ..DeploymentConfig::default()
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
        overheads: cfg.overheads,
    }
}

/// The workers' engine specs of `variant` (prefill first), as virtual-clock
/// live builds its cores from them; `None` under the seed's timings, which
/// no spec expresses (replay only).
pub fn engine_specs(cfg: &ExperimentConfig, variant: Variant) -> Option<Vec<EngineSpec>> {
    if cfg.timing != TimingMode::Polynomial {
        return None;
    }
    let sessions = sessions_of(cfg, variant);
    let spec = |kv_tokens| EngineSpec {
        backend: Backend::Sglang,
        kv_tokens,
        block_size: 1,
        sessions,
        ..EngineSpec::default()
    };
    let mut specs = vec![spec(cfg.prefill_kv_tokens)];
    specs.extend((0..cfg.decode_workers).map(|_| spec(cfg.decode_kv_tokens)));
    Some(specs)
}

/// What an [`EngineRunner`] hands back: the report and the §6 session log.
pub struct EngineRun {
    /// The engine's report.
    pub report: Report,
    /// The seed's §6 JSONL log.
    pub log: Vec<String>,
}

/// Runs one variant's configuration somewhere other than in-process replay
/// (virtual-clock live: `handoff_live_adapter::run_virtual_sessions_recorded`):
/// the deployment, the workers' specs (prefill first), the workload, how
/// the director serves it, and the per-request sink. This crate does not
/// depend on live; the command line injects it.
pub type EngineRunner<'a> = &'a dyn Fn(
    &DeploymentConfig,
    &[EngineSpec],
    &[TraceItem],
    SessionServing,
    RequestSink,
) -> Result<EngineRun, LabError>;

/// Runs `variant` of `cfg` over `items` on the engine, in replay.
pub fn run_variant(
    cfg: &ExperimentConfig,
    variant: Variant,
    items: &[TraceItem],
) -> Result<RunOutput, LabError> {
    run_variant_on(cfg, variant, items, None)
}

/// [`run_variant`], on `runner` when given (replay otherwise). The seed's
/// timings are expressible by no engine spec, so they run in replay only.
pub fn run_variant_on(
    cfg: &ExperimentConfig,
    variant: Variant,
    items: &[TraceItem],
    runner: Option<EngineRunner<'_>>,
) -> Result<RunOutput, LabError> {
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
        core_cfg(pool).validate().map_err(LabError::Sglang)?;
    }
    let specs = engine_specs(cfg, variant);
    let make = move |w: WorkerId, pool: Pool| -> CoreBox {
        // Polynomial: the very cores virtual live builds from the same specs.
        let core = match specs.as_ref().and_then(|s| s.get(w.0 as usize)) {
            Some(spec) => make_core(spec).map_err(|e| e.to_string()),
            None => SglangCore::new(core_cfg(pool), TimingMode::seed_perf())
                .map(|c| Box::new(c) as CoreBox)
                .map_err(|e| e.to_string()),
        };
        match core {
            Ok(c) => c,
            Err(e) => unreachable!("validated above: {e}"),
        }
    };
    let records = Rc::new(RefCell::new(Vec::new()));
    let sink = Rc::clone(&records);
    let sink: RequestSink = Box::new(move |r: &RequestRecord| sink.borrow_mut().push(r.clone()));
    let (report, log) = match runner {
        Some(run) => {
            let Some(specs) = engine_specs(cfg, variant) else {
                return Err(LabError::SeedTimingsReplayOnly);
            };
            let out = run(
                &replay_config(cfg),
                &specs,
                items,
                serving_of(cfg, variant),
                sink,
            )?;
            (out.report, out.log)
        }
        None => {
            let out = Replay::sessions(
                replay_config(cfg),
                items.iter().cloned(),
                serving_of(cfg, variant),
                make,
            )?
            .with_request_sink(sink)
            .run_all();
            (out.report, out.session_log)
        }
    };
    let records = records.take();
    let summary = RunSummary::of(
        variant.label(),
        (sessions.push, sessions.bypass),
        &report,
        &records,
        cfg.bytes_per_token(),
    );
    Ok(RunOutput {
        summary,
        report,
        records,
        log,
    })
}
