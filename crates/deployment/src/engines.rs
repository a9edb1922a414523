//! Building scheduler cores of either backend from one backend-neutral spec.

use handoff_core::Backend;
use handoff_core::CoreBox;
use handoff_perf::DynamoGrid;
use handoff_perf::GridPerf;
use handoff_perf::PerfProfile;
use handoff_perf::PolynomialPerf;
use handoff_perf::ProfilePerf;
use handoff_perf::StepModel;
use handoff_sched_sglang::{SglangConfig, SglangCore};
use handoff_sched_vllm::{VllmConfig, VllmCore};
use std::sync::Arc;

/// The step-time model an engine is timed by (`--perf`).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum PerfChoice {
    /// Dynamo's legacy polynomial ([`PolynomialPerf`]), the default.
    #[default]
    DynamoPolynomial,
    /// Interpolation over a measured profile ([`ProfilePerf`]), loaded
    /// with `handoff_profiles::profile_file::load`, with the step-time terms
    /// it carries ([`PerfProfile::overheads`]: its file's section, or what
    /// `--overheads`/`--overhead` put in its place); shared by every worker.
    Profile(Arc<PerfProfile>),
    /// Dynamo's profiled interpolation ([`GridPerf`]) over a profiler
    /// `.npz`, loaded with `handoff_profiles::npz_file::load`; shared by every worker.
    Npz(Arc<DynamoGrid>),
}

impl PerfChoice {
    /// The model of an engine of `max_running` sequences and
    /// `max_batched_tokens` per pass at `speedup_ratio`: a profile's
    /// CUDA-graph capture rules read the engine's limits
    /// ([`ProfilePerf::for_engine`]); [`make_core`] builds every worker's
    /// model so.
    pub fn model_for(
        &self,
        speedup_ratio: f64,
        max_running: u32,
        max_batched_tokens: u32,
    ) -> StepModel {
        match self {
            PerfChoice::Profile(p) => StepModel::Profile(ProfilePerf::for_engine(
                p.clone(),
                speedup_ratio,
                max_running,
                max_batched_tokens,
            )),
            other => other.model(speedup_ratio),
        }
    }

    /// The step-time terms in force beyond the tables, when some term is
    /// on (a profile's; the other models have none).
    pub fn overheads(&self) -> Option<&handoff_perf::Overheads> {
        match self {
            PerfChoice::Profile(p) if !p.overheads().is_off() => Some(p.overheads()),
            _ => None,
        }
    }

    /// The model at `speedup_ratio`, a profile's capture rules resolved
    /// without an engine's limits ([`ProfilePerf::new`]).
    pub fn model(&self, speedup_ratio: f64) -> StepModel {
        match self {
            PerfChoice::DynamoPolynomial => StepModel::Polynomial(PolynomialPerf { speedup_ratio }),
            PerfChoice::Profile(p) => {
                StepModel::Profile(ProfilePerf::new(p.clone(), speedup_ratio))
            }
            PerfChoice::Npz(g) => StepModel::Grid(GridPerf::new(g.clone(), speedup_ratio)),
        }
    }

    /// As `--perf` and the report's `config.engines[].perf` spell it:
    /// `dynamo-polynomial`, `profile:NAME` with the profile's own name, or
    /// `npz:FILE_NAME`.
    pub fn label(&self) -> String {
        self.model(1.0).label()
    }
}

/// One worker's engine, in backend-neutral terms.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineSpec {
    /// Which engine.
    pub backend: Backend,
    /// KV capacity in tokens (blocks × block size).
    pub kv_tokens: u64,
    /// vLLM block size / SGLang page size, in tokens.
    pub block_size: u32,
    /// Running-batch limit (vLLM `max_num_seqs`, SGLang `max_running_requests`).
    pub max_running: u32,
    /// Tokens one pass may prefill (vLLM `max_num_batched_tokens`, SGLang
    /// `chunked_prefill_size`).
    pub max_batched_tokens: u32,
    /// Divides modelled pass times.
    pub speedup_ratio: f64,
    /// The step-time model.
    pub perf: PerfChoice,
    /// Tensor-parallel ranks of one worker (GPUs per data-parallel rank):
    /// its pool's TP, which the profile in [`EngineSpec::perf`] and the KV
    /// pool were chosen for; the handoff between pools of different TPs
    /// fans out by it ([`crate::rank_fan`]).
    pub tp: u32,
    /// Overrides the backend's source lease lifetime (vLLM 480 s, SGLang 300 s).
    pub source_lease_ttl: Option<handoff_core::Duration>,
    /// SGLang decode servers keep a radix prefix cache
    /// (`--disaggregation-decode-enable-radix-cache`; off: a chunk cache).
    /// Ignored by vLLM.
    pub decode_radix_cache: bool,
    /// SGLang prefill servers send a request's cached prefix as its first
    /// pass begins (`SGLANG_DISAGG_PREFILL_EARLY_SEND_CACHED_PREFIX`,
    /// default on; `handoff_sched_sglang::SglangConfig`'s
    /// `disagg_prefill_early_send_cached_prefix`). The CLI sets it from that
    /// variable or its flag. Ignored by vLLM.
    pub early_send_cached_prefix: bool,
    /// SGLang session slots, snapshot store and bypass (seed 002); off by
    /// default and ignored by vLLM.
    pub sessions: handoff_sched_sglang::SessionConfig,
    /// Distinct LoRA adapters per scheduled batch: vLLM's `--max-loras`
    /// (`handoff_sched_vllm::VllmConfig::max_loras`), SGLang's
    /// `--max-loras-per-batch` (`handoff_sched_sglang::SglangConfig::max_loras_per_batch`,
    /// where the base model counts as one); `None`, no limit (no LoRA
    /// served).
    pub max_loras: Option<u32>,
    /// vLLM's `kv_recompute_threshold` on a decode's pull
    /// (`handoff_sched_vllm::VllmConfig::kv_recompute_threshold`, default
    /// 64; 0 disables). Ignored by SGLang.
    pub kv_recompute_threshold: u64,
}

impl Default for EngineSpec {
    fn default() -> Self {
        EngineSpec {
            backend: Backend::Vllm,
            kv_tokens: 16_384 * 16,
            block_size: 16,
            max_running: EngineSpec::default_max_running(Backend::Vllm, 16_384 * 16),
            max_batched_tokens: 8192,
            speedup_ratio: 1.0,
            perf: PerfChoice::DynamoPolynomial,
            tp: 1,
            source_lease_ttl: None,
            decode_radix_cache: false,
            early_send_cached_prefix: true,
            sessions: handoff_sched_sglang::SessionConfig::default(),
            max_loras: None,
            kv_recompute_threshold: handoff_sched_vllm::KV_RECOMPUTE_THRESHOLD,
        }
    }
}

impl EngineSpec {
    /// The running-batch limit a `backend` worker gets unless told: vLLM's
    /// `max_num_seqs` as `vllm serve` derives it on the H100-class GPU the
    /// mocker assumes ([`handoff_sched_vllm::DEFAULT_MAX_NUM_SEQS`], 1024), or
    /// SGLang's derivation from the pool
    /// (`handoff_sched_sglang::default_max_running_requests` at
    /// `handoff_sched_sglang::ASSUMED_CONTEXT_LEN`).
    pub fn default_max_running(backend: Backend, kv_tokens: u64) -> u32 {
        match backend {
            Backend::Sglang => handoff_sched_sglang::default_max_running_requests(
                kv_tokens,
                handoff_sched_sglang::ASSUMED_CONTEXT_LEN,
            ),
            Backend::Vllm | Backend::TrtLlm => handoff_sched_vllm::DEFAULT_MAX_NUM_SEQS,
        }
    }

    /// The granularity of the engine's KV events, which routers must hash
    /// requests with.
    pub fn event_block_tokens(&self) -> u32 {
        match self.backend {
            Backend::Sglang => self.sglang().event_block_tokens,
            _ => self.block_size.max(1),
        }
    }

    /// The source lease lifetime the core runs with: the override, else the
    /// backend's default (vLLM's NIXL `kv_lease_duration`, 30 s, renewed by
    /// heartbeats; TRT-LLM's refusal mode keeps vLLM's former
    /// `VLLM_NIXL_ABORT_REQUEST_TIMEOUT`, 480 s; SGLang's 300 s).
    pub fn effective_source_lease_ttl(&self) -> handoff_core::Duration {
        match self.backend {
            Backend::Sglang => self.sglang().source_lease_ttl,
            _ => self.vllm().source_lease_ttl,
        }
    }

    fn sglang(&self) -> SglangConfig {
        let mut c = SglangConfig::with_page_size(self.block_size.max(1));
        c.total_pages = (self.kv_tokens / u64::from(c.page_size)).max(1);
        c.max_running_requests = self.max_running.max(1);
        c.prealloc_slot_margin =
            handoff_sched_sglang::default_prealloc_slot_margin(c.max_running_requests);
        c.chunked_prefill_size = self.max_batched_tokens.max(1);
        c.disaggregation_decode_enable_radix_cache = self.decode_radix_cache;
        c.disagg_prefill_early_send_cached_prefix = self.early_send_cached_prefix;
        if let Some(ttl) = self.source_lease_ttl {
            c.source_lease_ttl = ttl;
        }
        c.sessions = self.sessions;
        c.max_loras_per_batch = self.max_loras;
        c
    }

    fn vllm(&self) -> VllmConfig {
        let bs = self.block_size.max(1);
        VllmConfig {
            num_blocks: (self.kv_tokens / u64::from(bs)).max(1),
            block_size: bs,
            max_num_seqs: self.max_running.max(1),
            max_num_batched_tokens: self.max_batched_tokens.max(1),
            refuse_destination_reservation: self.backend == Backend::TrtLlm,
            speedup_ratio: self.speedup_ratio,
            max_loras: self.max_loras,
            kv_recompute_threshold: self.kv_recompute_threshold,
            source_lease_ttl: self
                .source_lease_ttl
                .unwrap_or(if self.backend == Backend::TrtLlm {
                    handoff_sched_vllm::NIXL_ABORT_REQUEST_TIMEOUT
                } else {
                    handoff_sched_vllm::KV_LEASE_DURATION
                }),
            ..VllmConfig::default()
        }
    }
}

/// Why a core could not be built from an [`EngineSpec`].
#[derive(Clone, Debug, PartialEq)]
pub enum EngineError {
    /// SGLang refused the configuration the spec gives it.
    Sglang(handoff_sched_sglang::ConfigError),
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineError::Sglang(e) => write!(f, "sglang config: {e:?}"),
        }
    }
}

impl std::error::Error for EngineError {}

/// A core for `spec`, timed by its [`EngineSpec::perf`] model.
pub fn make_core(spec: &EngineSpec) -> Result<CoreBox, EngineError> {
    let perf = spec.perf.model_for(
        spec.speedup_ratio,
        spec.max_running.max(1),
        spec.max_batched_tokens.max(1),
    );
    match spec.backend {
        Backend::Vllm | Backend::TrtLlm => Ok(Box::new(VllmCore::with_perf(spec.vllm(), perf))),
        Backend::Sglang => SglangCore::new(spec.sglang(), perf)
            .map(|c| Box::new(c) as CoreBox)
            .map_err(EngineError::Sglang),
    }
}
