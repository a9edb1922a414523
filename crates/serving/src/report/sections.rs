//! The report's sections: configuration, engines, transfers, timers, lifecycle, workers and the flat latency summary.

use super::run::RunReport;
use super::units::*;
use crate::metrics::{Accuracy, Distribution, Summary};
use handoff_core::FailureReason;
use handoff_core::{Duration, WorkerId};
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_engine::fault::FaultCounts;
use handoff_engine::TransferModel;
use handoff_router::Pool;
use serde::Serialize;
use std::collections::BTreeMap;

/// The run's configuration as reported: enough to run it again (with the
/// same workload).
#[derive(Clone, Debug, Serialize)]
pub struct ReportConfig {
    /// Engine imitated.
    pub backend: &'static str,
    /// Handoff ordering.
    pub policy: &'static str,
    /// Prefill (or aggregated) workers.
    pub prefill_workers: u32,
    /// Decode workers (0 = aggregated).
    pub decode_workers: u32,
    /// Attention data-parallel ranks per worker; written only above 1.
    #[serde(skip_serializing_if = "is_one")]
    pub dp_size: u16,
    /// `true` when the ranks step together (MoE with expert parallelism:
    /// `handoff_core::DpCoupling::Lockstep`); written only then.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dp_lockstep: bool,
    /// Router mode.
    pub router: &'static str,
    /// The `kv` router's knobs (Dynamo's names); only with `router: kv`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub router_kv: Option<KvKnobsReport>,
    /// Router seed.
    pub seed: u64,
    /// Tokens per block the routers hash requests with (the engines' KV
    /// event granularity).
    pub router_block_size: u32,
    /// The workers' engines, one entry per run of equal engines (empty when
    /// the caller did not describe them).
    pub engines: Vec<EngineReport>,
    /// How transfers are timed.
    pub transfer: TransferReport,
    /// One-way latency of a fact between workers, in µs.
    pub message_latency_us: f64,
    /// Lifecycle timers.
    pub timers: TimersReport,
    /// Whether stable passes were advanced as one step.
    pub multi_step: bool,
    /// The fault plan in `--faults` syntax (`;` between directives), or
    /// empty when none.
    pub faults: String,
    /// Passes a clamping profile timed at its grid's edge because the pass
    /// lay past it; written only for such a profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub perf_beyond_grid: Option<BeyondGridReport>,
    /// What the driver that started the run adds (model, workload, flags);
    /// written only when it did.
    #[serde(flatten, skip_serializing_if = "RunReport::is_empty")]
    pub run: RunReport,
}

/// Lookups past a clamping profile's grid during the run
/// ([`handoff_perf::BeyondGrid::Clamp`]): each such pass was timed at the
/// grid's edge, not extrapolated.
#[derive(Clone, Debug, Serialize)]
pub struct BeyondGridReport {
    /// The profile (`profile:NAME`).
    pub perf: String,
    /// Passes whose prefill lay past the prefill grid.
    pub prefill_passes: u64,
    /// Passes whose decode lay past the decode grid.
    pub decode_passes: u64,
}

impl BeyondGridReport {
    /// Watches `spec`'s profile if it clamps past its grid.
    fn watch(spec: &handoff_deployment::EngineSpec) -> Option<BeyondGridReport> {
        let handoff_deployment::PerfChoice::Profile(p) = &spec.perf else {
            return None;
        };
        (p.beyond_grid() == handoff_perf::BeyondGrid::Clamp).then(|| BeyondGridReport {
            perf: spec.perf.label(),
            prefill_passes: 0,
            decode_passes: 0,
        })
    }

    /// Sums the workers' counts (each core counts its own passes and
    /// reports them in its final state, wherever it ran; a restarted
    /// worker's count starts again with its new core).
    pub(super) fn settle(&mut self, workers: impl Iterator<Item = (u64, u64)>) {
        let (mut p, mut d) = (0u64, 0u64);
        for (wp, wd) in workers {
            p = p.saturating_add(wp);
            d = d.saturating_add(wd);
        }
        self.prefill_passes = p;
        self.decode_passes = d;
    }
}

/// The `kv` router's knobs as configured (see [`handoff_router::KvKnobs`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct KvKnobsReport {
    /// `overlap_score_credit`.
    pub overlap_score_credit: f64,
    /// `prefill_load_scale`.
    pub prefill_load_scale: f64,
    /// `decode_active_request_weight`.
    pub decode_active_request_weight: f64,
    /// `router_temperature`.
    pub router_temperature: f64,
}

impl From<handoff_router::KvKnobs> for KvKnobsReport {
    fn from(k: handoff_router::KvKnobs) -> Self {
        KvKnobsReport {
            overlap_score_credit: k.overlap_score_credit,
            prefill_load_scale: k.prefill_load_scale,
            decode_active_request_weight: k.decode_active_request_weight,
            router_temperature: k.router_temperature,
        }
    }
}

/// Engines of a run of workers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EngineReport {
    /// Their pool.
    pub pool: &'static str,
    /// Their ids.
    pub workers: Vec<u32>,
    /// Engine.
    pub backend: &'static str,
    /// KV capacity in tokens.
    pub kv_tokens: u64,
    /// KV capacity in blocks (pages).
    pub kv_blocks: u64,
    /// vLLM block / SGLang page size, in tokens.
    pub block_size: u32,
    /// Running-batch limit.
    pub max_running: u32,
    /// Prefill tokens per pass.
    pub max_batched_tokens: u32,
    /// Divisor of every modelled pass time.
    pub pass_speedup_ratio: f64,
    /// The step-time model (`--perf`): `dynamo-polynomial` or
    /// `profile:NAME`.
    pub perf: String,
    /// The step-time terms a profile adds to its tables' times
    /// (`handoff_perf::Overheads`, docs/step-time-terms.md); written only
    /// when some term is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub perf_overheads: Option<OverheadsReport>,
    /// Source lease lifetime in seconds (the backend's default when not
    /// overridden).
    pub source_lease_ttl_s: f64,
    /// SGLang decode radix cache (`--disaggregation-decode-enable-radix-cache`);
    /// written only when on.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub decode_radix_cache: bool,
    /// SGLang's early send of the cached prefix
    /// (`SGLANG_DISAGG_PREFILL_EARLY_SEND_CACHED_PREFIX`); written only
    /// when off.
    #[serde(skip_serializing_if = "is_true")]
    pub early_send_cached_prefix: bool,
    /// vLLM's `kv_recompute_threshold` on a pulling decode (`--kv-recompute-threshold`);
    /// written only when it is not upstream's 64 (none under push or on
    /// other backends, which have no such rule).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_recompute_threshold: Option<u64>,
}

fn is_true(b: &bool) -> bool {
    *b
}

/// The step-time terms in force, as the profile file's `overheads`
/// section spells them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OverheadsReport {
    /// Multiplies the table time.
    pub kernel_scale: f64,
    /// Added per pass, ms.
    pub step_ms: f64,
    /// Added per sequence in a pass, ms.
    pub per_seq_ms: f64,
    /// CPU scheduling per pass, ms.
    pub sched_ms: f64,
    /// Whether scheduling overlaps the GPU (max, not sum).
    pub async_scheduling: bool,
    /// `off`, `vllm`, `sglang`, or the captured batch sizes.
    pub cuda_graph: CudaGraphReport,
    /// Extra µs per TP all-reduce.
    pub allreduce_us: f64,
    /// Extra µs per MiB all-reduced.
    pub allreduce_us_per_mib: f64,
}

/// A CUDA-graph capture list as reported: a rule's name or the sizes.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum CudaGraphReport {
    /// `off`, `vllm` or `sglang`.
    Rule(&'static str),
    /// Explicit sizes.
    Sizes(Vec<u32>),
}

impl From<&handoff_perf::Overheads> for OverheadsReport {
    fn from(o: &handoff_perf::Overheads) -> Self {
        OverheadsReport {
            kernel_scale: o.kernel_scale,
            step_ms: o.step_ms,
            per_seq_ms: o.per_seq_ms,
            sched_ms: o.sched_ms,
            async_scheduling: o.async_scheduling,
            cuda_graph: match (&o.cuda_graph, o.cuda_graph.rule_name()) {
                (handoff_perf::CudaGraph::Sizes(s), _) => CudaGraphReport::Sizes(s.clone()),
                (_, Some(rule)) => CudaGraphReport::Rule(rule),
                (_, None) => CudaGraphReport::Rule("off"),
            },
            allreduce_us: o.allreduce_us,
            allreduce_us_per_mib: o.allreduce_us_per_mib,
        }
    }
}

impl EngineReport {
    /// Whether `other` describes the same engine in the same pool.
    pub(super) fn same_engine(&self, other: &EngineReport) -> bool {
        let strip = |e: &EngineReport| EngineReport {
            workers: Vec::new(),
            ..e.clone()
        };
        strip(self) == strip(other)
    }
}

/// The transfer model as reported.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TransferReport {
    /// `fixed`, `bytes` or `contention`.
    pub model: &'static str,
    /// Fixed time, or setup latency of the bytes models, in ms.
    pub base_ms: f64,
    /// KV bytes per token (bytes models).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_per_token: Option<u64>,
    /// Link bandwidth in GB/s (bytes models).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bandwidth_gbps: Option<f64>,
}

/// The lifecycle timers as reported.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimersReport {
    /// Destination reservation lifetime, s (absent: reservations never
    /// expire, vLLM's default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation_ttl_s: Option<f64>,
    /// Lease renewal by a waiting destination, s (absent: never).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renew_source_lease_s: Option<f64>,
    /// How long facts that beat their request are held, s.
    pub early_fact_ttl_s: f64,
    /// vLLM's lease heartbeat: interval and extension, s (absent: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_heartbeat_s: Option<[f64; 2]>,
    /// vLLM's `kv_load_failure_policy` when not the default `fail`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_load_failure_policy: Option<&'static str>,
    /// What a read of released source KV does, when not the default
    /// `complete` (vLLM's behaviour).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale_kv_read: Option<&'static str>,
    /// What a client's cancel frees, when not the default `upstream`
    /// (`handoff_core::CancelFrees`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancel_frees: Option<&'static str>,
    /// Released ids remembered to classify late facts as stale.
    pub tombstones: usize,
}

impl ReportConfig {
    /// The configuration of `cfg`, whose workers are `workers`.
    pub fn of(cfg: &DeploymentConfig, workers: &[(WorkerId, Pool)]) -> ReportConfig {
        let transfer = TransferReport::of(&cfg.transfer);
        let engines = engine_reports(cfg, workers);
        ReportConfig {
            backend: cfg.backend.name(),
            policy: if cfg.decode_workers == 0 {
                "aggregated"
            } else {
                cfg.policy.name()
            },
            prefill_workers: cfg.prefill_workers,
            decode_workers: cfg.decode_workers,
            dp_size: cfg.dp.dp_size(),
            dp_lockstep: cfg.dp.is_lockstep(),
            router: cfg.router.name(),
            router_kv: (cfg.router == handoff_router::RouterMode::KvAware)
                .then(|| KvKnobsReport::from(cfg.router_kv)),
            seed: cfg.seed,
            router_block_size: cfg.block_size,
            engines,
            transfer,
            message_latency_us: round3(cfg.message_latency.as_nanos() as f64 / 1e3),
            timers: TimersReport::of(cfg),
            multi_step: cfg.multi_step,
            perf_beyond_grid: cfg.engines.iter().find_map(BeyondGridReport::watch),
            faults: if cfg.faults.is_empty() {
                String::new()
            } else {
                cfg.faults
                    .to_string()
                    .lines()
                    .collect::<Vec<_>>()
                    .join("; ")
            },
            run: RunReport::default(),
        }
    }
}

impl TransferReport {
    /// How transfers of `t` are timed.
    fn of(t: &TransferModel) -> TransferReport {
        TransferReport {
            model: t.name(),
            base_ms: round3(t.base().as_secs_f64() * 1e3),
            bytes_per_token: t.link().map(|(b, _)| b),
            bandwidth_gbps: t.link().map(|(_, bw)| round3(bw / 1e9)),
        }
    }
}

impl TimersReport {
    /// The lifecycle timers of `cfg`'s handoffs.
    fn of(cfg: &DeploymentConfig) -> TimersReport {
        let secs = |d: Duration| round3(d.as_secs_f64());
        TimersReport {
            reservation_ttl_s: cfg
                .handoff
                .reservation_expires()
                .then(|| secs(cfg.handoff.reservation_ttl)),
            renew_source_lease_s: cfg.handoff.renew_source_lease.map(secs),
            early_fact_ttl_s: secs(cfg.handoff.early_fact_ttl),
            lease_heartbeat_s: cfg
                .handoff
                .heartbeat
                .map(|h| [secs(h.every), secs(h.extend)]),
            kv_load_failure_policy: (cfg.handoff.kv_load_failure
                != handoff_core::KvLoadFailurePolicy::Fail)
                .then(|| cfg.handoff.kv_load_failure.name()),
            stale_kv_read: (cfg.handoff.stale_read != handoff_core::StaleReadPolicy::Complete)
                .then(|| cfg.handoff.stale_read.name()),
            cancel_frees: (cfg.handoff.cancel_frees != handoff_core::CancelFrees::Upstream)
                .then(|| cfg.handoff.cancel_frees.name()),
            tombstones: cfg.handoff.tombstones,
        }
    }
}

/// One entry per run of identical engines among `workers` (every rank of a
/// worker runs the worker's engine, so a worker is listed once).
fn engine_reports(cfg: &DeploymentConfig, workers: &[(WorkerId, Pool)]) -> Vec<EngineReport> {
    let secs = |d: Duration| round3(d.as_secs_f64());
    let mut engines: Vec<EngineReport> = Vec::new();
    for ((s, pool), spec) in workers.iter().zip(&cfg.engines) {
        let w = cfg.dp.address(*s).worker;
        let e = EngineReport {
            pool: pool.name(),
            workers: vec![w.0],
            backend: spec.backend.name(),
            kv_tokens: spec.kv_tokens,
            kv_blocks: spec.kv_tokens / u64::from(spec.block_size.max(1)),
            block_size: spec.block_size,
            max_running: spec.max_running,
            max_batched_tokens: spec.max_batched_tokens,
            pass_speedup_ratio: spec.speedup_ratio,
            perf: spec.perf.label(),
            perf_overheads: spec.perf.overheads().map(OverheadsReport::from),
            source_lease_ttl_s: secs(spec.effective_source_lease_ttl()),
            decode_radix_cache: spec.decode_radix_cache
                && spec.backend == handoff_core::Backend::Sglang,
            early_send_cached_prefix: spec.early_send_cached_prefix
                || spec.backend != handoff_core::Backend::Sglang,
            kv_recompute_threshold: (spec.backend == handoff_core::Backend::Vllm
                && cfg.policy != handoff_core::HandoffPolicy::Push
                && spec.kv_recompute_threshold != EngineSpec::default().kv_recompute_threshold)
                .then_some(spec.kv_recompute_threshold),
        };
        match engines.last_mut() {
            Some(last) if last.same_engine(&e) => {
                if last.workers.last() != Some(&w.0) {
                    last.workers.push(w.0);
                }
            }
            _ => engines.push(e),
        }
    }
    engines
}

/// Lifecycle figures, aggregated over handoffs.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Lifecycle {
    /// Handoff attempts that pinned a source.
    pub handoffs_pinned: u64,
    /// Handoff attempts whose destination activated.
    pub handoffs_activated: u64,
    /// Source pinned → source released (stranding), ms.
    pub source_pinned_ms: Summary,
    /// Destination routed → reserved, ms.
    pub reservation_wait_ms: Summary,
    /// Transfer start → completion, ms.
    pub transfer_ms: Summary,
    /// Destination reserved → activated, ms.
    pub reservation_to_activation_ms: Summary,
    /// Roles that ended early, by reason.
    pub early_ends: BTreeMap<&'static str, u64>,
    /// Source leases that expired.
    pub lease_expiries: u64,
    /// Destination reservations that expired.
    pub reservation_expiries: u64,
    /// Roles still alive when the event queue ran dry (torn down).
    pub unresolved_at_teardown: u64,
    /// Facts dropped by workers (stale, duplicate peers, unknown).
    pub dropped_facts: u64,
    /// Requests a worker refused.
    pub refused_requests: u64,
    /// vLLM preemptions / SGLang retractions.
    pub preemptions: u64,
    /// Failed requests by the reason their handoff (or delivery) ended;
    /// requests still unfinished when the run ended count as `unfinished`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub failure_reasons: BTreeMap<FailureReason, u64>,
    /// Requests routed to a worker that was down when they reached it.
    #[serde(skip_serializing_if = "is_zero")]
    pub undeliverable_requests: u64,
    /// Requests routed again as a new attempt after their worker was lost
    /// or their transfer failed (once each at most).
    #[serde(skip_serializing_if = "is_zero")]
    pub migrated_requests: u64,
    /// Faults the engine injected (omitted when none were).
    #[serde(skip_serializing_if = "FaultCounts::injected_nothing")]
    pub faults: FaultCounts,
    /// Destinations that activated from a read of source KV released
    /// before the read ended (omitted when none did).
    #[serde(skip_serializing_if = "super::StaleReads::none")]
    pub stale_reads: super::StaleReads,
}

pub(super) fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_one(n: &u16) -> bool {
    *n == 1
}

/// One worker's figures: one row per data-parallel rank.
#[derive(Clone, Debug, Serialize)]
pub struct WorkerReport {
    /// Worker id.
    pub worker: u32,
    /// The rank of this row, with `--dp-size` above 1 (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dp_rank: Option<u16>,
    /// Its pool.
    pub pool: &'static str,
    /// Forward passes.
    pub steps: u64,
    /// Prefill tokens computed.
    pub prefill_tokens: u64,
    /// Most blocks pinned at once.
    pub peak_pinned_blocks: u64,
    /// Most blocks reserved at once.
    pub peak_reserved_blocks: u64,
    /// Integral of pinned blocks over time (block·seconds).
    pub pinned_block_seconds: f64,
    /// Integral of reserved blocks over time (block·seconds).
    pub reserved_block_seconds: f64,
    /// Whether it ended drained.
    pub drained: bool,
    /// Final used blocks (should be 0).
    pub final_kv_used_blocks: u64,
}

/// The replay report. Field names follow Dynamo's replay report where one
/// exists; the `lifecycle` and `workers` sections are this project's.
///
/// Every field is a function of the inputs: the same configuration and
/// workload give the same bytes, from replay and from virtual-clock live.
/// Wall-clock time is therefore not here (the command line adds
/// `wall_time_ms` to its JSON only when asked, `--wall-time`).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// What ran.
    pub config: ReportConfig,
    /// Requests that arrived.
    pub num_requests: u64,
    /// Requests that produced all their output.
    pub completed_requests: u64,
    /// Requests that ended without output (failed handoff).
    pub failed_requests: u64,
    /// Prompt tokens of the completed requests (Dynamo's
    /// `total_input_tokens`).
    pub total_input_tokens: u64,
    /// Output tokens produced.
    pub total_output_tokens: u64,
    /// Simulated seconds from first arrival to last completion.
    pub duration_s: f64,
    /// The same span in ms (Dynamo's `duration_ms`).
    pub duration_ms: f64,
    /// Completed requests per simulated second.
    pub request_throughput_rps: f64,
    /// Prompt tokens of completed requests per simulated second.
    pub input_throughput_tok_s: f64,
    /// Output tokens per simulated second.
    pub output_token_throughput_tps: f64,
    /// The same, under Dynamo's name.
    pub output_throughput_tok_s: f64,
    /// Input plus output tokens per simulated second.
    pub total_throughput_tok_s: f64,
    /// Share of prompt tokens the prefill (or aggregated) workers did not
    /// have to compute: `1 - computed / prompt`, over every request that
    /// arrived. The cores report computed prefill tokens per step, so a
    /// prompt recomputed after a preemption counts against reuse.
    pub prefix_cache_reused_ratio: f64,
    /// Time to first token.
    pub ttft_ms: Summary,
    /// Time from the first output token to the second (AIPerf's and
    /// Dynamo's TTST), over requests with two or more tokens.
    pub ttst_ms: Summary,
    /// Time per output token after the first, per request.
    pub tpot_ms: Summary,
    /// Inter-token latency over all tokens (HdrHistogram: percentiles
    /// within `latency_accuracy.itl_max_relative_error`).
    pub itl_ms: Summary,
    /// End-to-end latency.
    pub e2e_latency_ms: Summary,
    /// How exact the latency figures above and the flat fields below are.
    pub latency_accuracy: Accuracy,
    /// Dynamo's flat latency fields (`mean_ttft_ms`, `median_ttft_ms`,
    /// `p75_ttft_ms`, ... `max_itl_ms`, ... `std_e2e_latency_ms`).
    #[serde(flatten)]
    pub flat: FlatLatencies,
    /// Handoff lifecycle.
    pub lifecycle: Lifecycle,
    /// Per worker.
    pub workers: Vec<WorkerReport>,
    /// Session-affine serving (session runs only; seed 002).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sessions: Option<crate::session_log::SessionSummary>,
    /// SLO attainment and goodput (only with `--slo`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo: Option<super::slo::SloReport>,
    /// GPUs, tokens/s/GPU, tokens/s/user and cost (only with `--slo` or
    /// `--gpu-hour-usd`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sizing: Option<super::slo::SizingReport>,
    /// What scaling cost (only when the run's fleet scaled).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scaling: Option<super::scaling::ScalingReport>,
    /// What the figures alone do not show (a run not in steady state,
    /// [`super::steady`]); absent when there is nothing to say.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<super::steady::RunWarning>,
}

/// The latency distributions under Dynamo's flat names: for each metric
/// `X` of `ttft`, `ttst`, `tpot`, `itl` and `e2e_latency`, the fields
/// `mean_X_ms`, `min_X_ms`, `max_X_ms`, `median_X_ms`, `p75_X_ms`,
/// `p90_X_ms`, `p95_X_ms`, `p99_X_ms` and `std_X_ms`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FlatLatencies {
    /// Time to first token.
    pub ttft: Distribution,
    /// Time to second token (after the first).
    pub ttst: Distribution,
    /// Time per output token.
    pub tpot: Distribution,
    /// Inter-token latency.
    pub itl: Distribution,
    /// End-to-end latency.
    pub e2e_latency: Distribution,
}

impl Serialize for FlatLatencies {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = serializer.serialize_map(Some(46))?;
        for (name, d) in [
            ("ttft", &self.ttft),
            ("ttst", &self.ttst),
            ("tpot", &self.tpot),
            ("itl", &self.itl),
            ("e2e_latency", &self.e2e_latency),
        ] {
            for (stat, v) in [
                ("mean", d.mean),
                ("min", d.min),
                ("max", d.max),
                ("median", d.median),
                ("p75", d.p75),
                ("p90", d.p90),
                ("p95", d.p95),
                ("p99", d.p99),
                ("std", d.std),
            ] {
                m.serialize_entry(&format!("{stat}_{name}_ms"), &v)?;
            }
        }
        m.end()
    }
}
