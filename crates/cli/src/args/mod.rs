//! Flags shared by `replay`, `live`, `worker` and `frontend`, and their
//! translation into library configurations. Every flag is validated here so
//! a bad value is an error naming the flag, never a panic.

use crate::hardware_args::{HardwareArgs, PoolSide};
use clap::{Args, ValueEnum};
use handoff_core::{Backend, Duration, HandoffConfig, HandoffPolicy, WorkerId};
use handoff_deployment::{check_core, make_core, DeploymentConfig, EngineSpec, PerfChoice};
use handoff_engine::fault::{Fault, FaultPlan};
use handoff_engine::TransferModel;
use handoff_router::{KvKnobs, Pool, RouterMode};
use handoff_workload::file::{check_regular, FileKind};
use std::sync::Arc;

mod hardware;
pub mod invocation;
pub mod rerun;
mod scale;
mod sglang_env;
mod workload;

pub use scale::ScaleArgs;
pub use sglang_env::{early_send_cached_prefix, heartbeat, EARLY_SEND_ENV, WAITING_TIMEOUT_ENV};
pub use workload::{Workload, WorkloadArgs};

/// Most `--overhead` flags one command takes (eight terms, each settable).
const MAX_OVERHEAD_FLAGS: usize = 64;

/// `--backend`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum BackendArg {
    /// vLLM v1 (source-first).
    Vllm,
    /// SGLang (destination-first).
    Sglang,
    /// TensorRT-LLM (refuses destination reservation; no built-in
    /// profile, so give --perf).
    Trtllm,
}

/// `--policy`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum PolicyArg {
    /// No handoff ownership (the pre-DEP behaviour).
    Disabled,
    /// vLLM ordering.
    SourceFirst,
    /// SGLang ordering.
    DestinationFirst,
}

/// `--kv-transfer-mode`: vLLM's NIXL connector, pull or push.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum KvTransferModeArg {
    /// `NixlConnector`: the prefill pins its KV and the decode engine
    /// reads it (source-first).
    #[default]
    Pull,
    /// `NixlPushConnector`: both legs start at once, the decode engine
    /// allocates and registers its blocks, the prefill engine writes into
    /// them and frees its own when the write completes.
    Push,
}

/// `--kv-lease`: how a vLLM prefill worker holds KV for its reader.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum KvLeaseArg {
    /// Upstream vLLM's NIXL lease: `kv_lease_duration` (30 s unless
    /// `--lease-ttl-s`), renewed by the decode worker's heartbeats every
    /// lease/6 until its read completes.
    #[default]
    Heartbeat,
    /// vLLM before the lease (PR #41383): a fixed
    /// `VLLM_NIXL_ABORT_REQUEST_TIMEOUT` (480 s unless `--lease-ttl-s`), no
    /// heartbeat.
    AbortTimeout,
}

/// `--kv-load-failure-policy`.
#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub enum KvLoadFailureArg {
    /// The request fails (`kv-load-failed`).
    #[default]
    Fail,
    /// The decode worker computes the prompt itself.
    Recompute,
}

/// `--stale-kv-read`.
#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub enum StaleReadArg {
    /// As vLLM: the read completes and the request goes on (counted in the
    /// report as a stale read).
    #[default]
    Complete,
    /// Stricter than vLLM: the load fails and the request follows
    /// `--kv-load-failure-policy`.
    Fail,
}

/// `--cancel-frees`.
#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub enum CancelFreesArg {
    /// As vLLM: a finished prefill keeps its KV until its decode reads it
    /// or its lease ends; a decode whose load is in flight keeps its blocks
    /// until the load ends; a decode cancelled before its load releases
    /// the prefill's KV at once.
    #[default]
    Upstream,
    /// The cancel frees both sides' KV at once (a read of it fails).
    Immediately,
}

/// `--router`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum RouterArg {
    /// Dynamo 1.6.1's KV router cost: prefix overlap from KV events against
    /// prompt load (and, on decode, active blocks).
    Kv,
    /// The project's earlier kv cost: booked blocks plus prompt load minus
    /// overlap, ties to the lowest id.
    KvLegacy,
    /// Cycle through workers.
    RoundRobin,
    /// Seeded random.
    Random,
    /// Least booked + used blocks.
    LeastLoaded,
    /// Seeded power of two choices.
    PowerOfTwo,
}

/// `--transfer`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum TransferArg {
    /// Fixed time per transfer.
    Fixed,
    /// Setup + bytes / bandwidth.
    Bytes,
    /// Bytes with processor sharing per worker link (replay only; live uses bytes).
    Contention,
}

/// The deployment: engines, pools, routing, transfers, timers.
#[derive(Args, Debug, Clone)]
pub struct DeployArgs {
    /// Engine to imitate.
    #[arg(long, value_enum, default_value = "vllm")]
    pub backend: BackendArg,
    /// Handoff ordering [default: the backend's own: vllm and trtllm
    /// source-first, sglang destination-first].
    #[arg(long, value_enum)]
    pub policy: Option<PolicyArg>,
    /// vLLM's NIXL transfer mode (`transfer_mode` in `kv_transfer_params`):
    /// `pull`, the decode engine reads the prefill's pinned KV; `push`, the
    /// decode engine registers its blocks and the prefill engine writes
    /// into them (the `push` ordering; vLLM only).
    #[arg(long, value_enum, default_value_t = KvTransferModeArg::Pull, value_name = "MODE")]
    pub kv_transfer_mode: KvTransferModeArg,
    /// vLLM's `kv_recompute_threshold` (`kv_connector_extra_config`): a
    /// decode's pull of fewer prompt tokens than this, past its own prefix
    /// hit, reads nothing; the decode prefills them itself and the prefill's
    /// KV is freed by the notice. 0 disables. Pull mode only (push ignores it,
    /// as upstream's push scheduler does).
    #[arg(long, default_value_t = handoff_sched_vllm::KV_RECOMPUTE_THRESHOLD, value_name = "N")]
    pub kv_recompute_threshold: u64,
    /// Prefill workers (aggregated workers with --decode 0).
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub prefill: u32,
    /// Decode workers; 0 runs aggregated (no disaggregation).
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub decode: u32,
    /// Attention data-parallel ranks per worker (1..=256): each rank is an
    /// independent scheduler with its own KV pool of the worker's size,
    /// sharing the worker's listener; routers address (worker, rank).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub dp_size: u64,
    /// The --dp-size ranks of each worker step in lockstep, every forward
    /// pass together at the slowest rank's pace, idle ranks running dummy
    /// batches: what --enable-expert-parallel (or --ep-size, or either
    /// pool's expert-parallel flag) sets for an MoE engine.
    #[arg(long, hide = true)]
    pub dp_lockstep: bool,
    /// Router mode of both pools.
    #[arg(long, value_enum, default_value = "kv")]
    pub router: RouterArg,
    /// `--router kv`: blocks of prompt load one cached block takes off
    /// (Dynamo's `overlap_score_credit`; 0 ignores prefix overlap).
    #[arg(long, default_value_t = 1.0, value_name = "BLOCKS")]
    pub overlap_score_credit: f64,
    /// `--router kv`: multiplies the prompt load after the overlap credit
    /// (Dynamo's `prefill_load_scale`).
    #[arg(long, default_value_t = 1.0, value_name = "SCALE")]
    pub prefill_load_scale: f64,
    /// `--router kv`: blocks of cost per request live on a worker (Dynamo's
    /// `decode_active_request_weight`).
    #[arg(long, default_value_t = 0.0, value_name = "BLOCKS")]
    pub decode_active_request_weight: f64,
    /// `--router kv`: softmax temperature over worker costs, sampled with
    /// the seeded generator; 0 takes the lowest (Dynamo's
    /// `router_temperature`).
    #[arg(long, default_value_t = 0.0, value_name = "T")]
    pub router_temperature: f64,
    /// KV capacity of a prefill (or aggregated) worker, in tokens
    /// [default: sized from --model on --gpu as the engine sizes its pool;
    /// with none of --model, --gpu, --perf: Qwen3-8B on one H100, 402592
    /// tokens for vllm, 372270 for sglang; 262144 with --perf alone].
    #[arg(long, value_name = "TOKENS")]
    pub prefill_kv_tokens: Option<u64>,
    /// KV capacity of a decode worker, in tokens [default: as
    /// --prefill-kv-tokens].
    #[arg(long, value_name = "TOKENS")]
    pub decode_kv_tokens: Option<u64>,
    /// vLLM block size / SGLang page size, in tokens [default: 16 for vllm
    /// and trtllm, 1 for sglang].
    #[arg(long, value_name = "TOKENS")]
    pub block_size: Option<u32>,
    /// Running-batch limit per worker, in requests [default: vllm and
    /// trtllm 1024, vLLM's max_num_seqs as `vllm serve` derives it on an
    /// H100-class GPU (>= 70 GiB, not A100; EngineArgs.get_batch_defaults);
    /// sglang derived from the worker's KV pool as SGLang derives
    /// --max-running-requests: min(clamp(KV tokens / 131072 context × 512,
    /// 2048, 4096), KV tokens / 2), so 2048 for the default pool].
    #[arg(long, value_name = "N")]
    pub max_running: Option<u32>,
    /// Prefill tokens per pass (max_num_batched_tokens / chunked_prefill_size).
    #[arg(long, default_value_t = 8192, value_name = "TOKENS")]
    pub max_batched_tokens: u32,
    /// Distinct LoRA adapters one scheduled batch may hold: vLLM's
    /// `max_loras` (`Scheduler.schedule`), SGLang's `--max-loras-per-batch`
    /// (also accepted by that name; the base model counts as one)
    /// [default: replay no limit; serve 1, vLLM's default, when it serves
    /// LoRA].
    #[arg(long, alias = "max-loras-per-batch", value_name = "N")]
    pub max_loras: Option<u32>,
    /// Divides every modelled forward-pass time (a faster GPU): 2 halves
    /// prefill and decode pass times. Not Dynamo's `--speedup-ratio`, which
    /// speeds up the wall clock (here: `--speed` on live commands).
    #[arg(long, default_value_t = 1.0, value_name = "RATIO")]
    pub pass_speedup_ratio: f64,
    /// Deprecated spelling of `--pass-speedup-ratio` (warns).
    #[arg(
        long,
        hide = true,
        value_name = "RATIO",
        conflicts_with = "pass_speedup_ratio"
    )]
    pub speedup_ratio: Option<f64>,
    /// Step-time model: `dynamo-polynomial` (Dynamo's legacy fit: decode
    /// by KV fraction of the pool, cached-prefix attention free),
    /// `profile:FILE` (interpolation over a measured profile, prefill by
    /// new and cached tokens, decode by batch and context tokens; format in
    /// profiles/README.md, e.g. profile:profiles/qwen3-4b-a100-sglang.json)
    /// or `npz:FILE` (a Dynamo profiler `.npz`, e.g. perf_data.npz, looked
    /// up as Dynamo's mocker does: prefill by new tokens, decode by active
    /// KV tokens and mean context length) [default: the AIConfigurator
    /// profile of --model on --gpu, --tp and --backend; with none of them
    /// profile:qwen3-8b-h100-tp1-vllm (or -sglang)].
    #[arg(long, value_name = "MODEL")]
    pub perf: Option<String>,
    /// The step-time terms a profile adds to its tables' times
    /// (docs/step-time-terms.md): `off` (every term off), `profile` (the
    /// profile's own `overheads` section; none: all off) or FILE (the
    /// `overheads` section of another profile file, e.g. a calibrated one,
    /// applied to this profile's tables). Profiles only, not
    /// dynamo-polynomial or npz: [default: profile].
    #[arg(long, value_name = "off|profile|FILE")]
    pub overheads: Option<String>,
    /// Sets one step-time term after --overheads, TERM=VALUE: kernel_scale,
    /// step_ms, per_seq_ms, sched_ms, allreduce_us, allreduce_us_per_mib (a
    /// number), async_scheduling (true or false), cuda_graph (off, vllm,
    /// sglang, or batch sizes such as 1,2,4,8); repeatable, e.g.
    /// `--overhead step_ms=4 --overhead cuda_graph=vllm`.
    #[arg(long, value_name = "TERM=VALUE")]
    pub overhead: Vec<String>,
    /// SGLang decode workers keep a radix prefix cache (SGLang's flag of
    /// the same name): only the prompt's uncached delta is preallocated and
    /// transferred, and decode publishes KV events (the DEP's locked-prefix
    /// mode). Without it decode runs SGLang's default chunk cache: no prefix
    /// reuse, the whole prompt moves, no decode KV events.
    #[arg(long)]
    pub disaggregation_decode_enable_radix_cache: bool,
    /// SGLang prefill workers send a request's cached prefix (its
    /// radix-cache hit) as its first pass begins instead of with its first
    /// chunk (SGLang's `SGLANG_DISAGG_PREFILL_EARLY_SEND_CACHED_PREFIX`;
    /// `true` or `false`, as SGLang reads that variable: also 1/0, yes/no,
    /// y/n). Wins over the variable [default: the variable, else true].
    #[arg(long, value_name = "BOOL")]
    pub disagg_prefill_early_send_cached_prefix: Option<String>,
    /// SGLang decode workers probe each prefill worker this often, seconds
    /// (`SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL`; under 2 is 2) [default:
    /// the variable, else 5].
    #[arg(long, value_name = "S")]
    pub sglang_heartbeat_interval_s: Option<f64>,
    /// Missed probes after which an SGLang decode worker takes a prefill
    /// worker for dead and aborts what it was receiving from it
    /// (`SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE`; under 1 is 1)
    /// [default: the variable, else 2].
    #[arg(long, value_name = "N")]
    pub sglang_heartbeat_max_failure: Option<u32>,
    /// Transfer timing model; the default scales with the bytes moved
    /// (setup --transfer-ms + KV bytes / bandwidth).
    #[arg(long, value_enum, default_value = "bytes")]
    pub transfer: TransferArg,
    /// Fixed transfer time, or setup latency of the bytes models, in ms.
    #[arg(long, default_value_t = 10.0, value_name = "MS")]
    pub transfer_ms: f64,
    /// KV bytes per token (bytes models) [default: the model's layers × KV
    /// heads × head dim × 2 × dtype bytes: 147456 for the default Qwen3-8B;
    /// 131072 (a Llama-3-8B-like 128 KiB) with --perf and no --model].
    #[arg(long, value_name = "BYTES")]
    pub bytes_per_token: Option<u64>,
    /// Link bandwidth in GB/s (bytes models).
    #[arg(long, default_value_t = 25.0, value_name = "GBPS")]
    pub bandwidth_gbps: f64,
    /// One-way control-message latency, µs of model time: replay,
    /// virtual-clock live and serve (whose workers share one process)
    /// delay every fact between workers and the frontend's decode hop by
    /// it; wall-clock live only the hop (facts cross the real network). On
    /// the wall clock it takes latency/--speed of real time (at most 60 s).
    #[arg(long, default_value_t = 500, value_name = "US")]
    pub message_latency_us: u64,
    /// Destination reservation lifetime, in seconds [default: vllm and
    /// trtllm none (vLLM has no decode-side deadline), vllm push 480
    /// (`push_registration_timeout`), sglang 300].
    #[arg(long, value_name = "S")]
    pub reservation_ttl_s: Option<u64>,
    /// Source lease lifetime, in seconds [default: vllm 30 (480 with
    /// `--kv-lease abort-timeout`), trtllm 480, sglang 300].
    #[arg(long, value_name = "S")]
    pub lease_ttl_s: Option<u64>,
    /// How vLLM's prefill workers hold KV for their readers (ignored by
    /// the other backends).
    #[arg(long, value_enum, default_value_t = KvLeaseArg::Heartbeat, value_name = "MODEL")]
    pub kv_lease: KvLeaseArg,
    /// A destination waiting for room renews its source's lease by this many
    /// seconds, every half of that [default: off; vLLM never renews].
    #[arg(long, value_name = "S")]
    pub renew_lease_s: Option<u64>,
    /// What a request does when its decode worker's KV load failed (a
    /// failed transfer; a stale read under `--stale-kv-read fail`): vLLM's
    /// `kv_load_failure_policy`.
    #[arg(long, value_enum, default_value_t = KvLoadFailureArg::Fail, value_name = "POLICY")]
    pub kv_load_failure_policy: KvLoadFailureArg,
    /// What a decode worker's read of KV its source already released (lease
    /// expiry) does: `complete` as vLLM (the request goes on, counted as a
    /// stale read), or `fail` (a KV load failure).
    #[arg(long, value_enum, default_value_t = StaleReadArg::Complete, value_name = "CHOICE")]
    pub stale_kv_read: StaleReadArg,
    /// What a client's cancel frees (vLLM's orders; SGLang frees at once):
    /// `upstream` as vLLM, or `immediately` both sides' KV at the cancel.
    #[arg(long, value_enum, default_value_t = CancelFreesArg::Upstream, value_name = "RULE")]
    pub cancel_frees: CancelFreesArg,
    /// Seed for routers and the synthetic workload.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub seed: u64,
    /// The model, GPU and TP every worker imitates.
    #[command(flatten)]
    pub hardware: HardwareArgs,
    /// Faults to inject: a fault-plan file, or the plan itself with `;`
    /// between directives, e.g. "kill 2 at 1s; restart 2 at 3s; drop 0.01".
    /// Directives: seed N, kill W at T, restart W at T, partition A B from T
    /// to T, cancel R at T, drop P, duplicate P, delay P max T,
    /// transfer-fail P (times with ns/us/ms/s; P a probability) [default:
    /// none].
    #[arg(long, value_name = "FILE|PLAN")]
    pub faults: Option<String>,
    /// Latency targets, each at a percentile of the requests that arrived,
    /// e.g. `ttft:p90=600ms,tpot:p90=20ms,e2e:p99=10s` (metrics ttft, tpot
    /// or itl, e2e; units us, ms, s): the report then says which requests
    /// met each target, the attainment, goodput and GPUs used [default:
    /// none, and no such figures].
    #[arg(long, value_name = "TARGETS")]
    pub slo: Option<handoff_deployment::SloSpec>,
    /// Price of one GPU-hour in US dollars: the report adds GPUs used,
    /// tokens/s/GPU and the cost of a million output tokens [default: no
    /// price, no cost].
    #[arg(long, value_name = "USD")]
    pub gpu_hour_usd: Option<f64>,
}

pub fn positive(name: &str, x: f64) -> Result<f64, String> {
    if x.is_finite() && x > 0.0 {
        Ok(x)
    } else {
        Err(format!("--{name}: must be a positive number"))
    }
}

impl DeployArgs {
    /// The engine.
    pub fn backend(&self) -> Backend {
        match self.backend {
            BackendArg::Vllm => Backend::Vllm,
            BackendArg::Sglang => Backend::Sglang,
            BackendArg::Trtllm => Backend::TrtLlm,
        }
    }

    /// The ordering: the flag, else the backend's own.
    pub fn policy(&self) -> HandoffPolicy {
        if self.kv_transfer_mode == KvTransferModeArg::Push {
            return HandoffPolicy::Push;
        }
        match self.policy {
            Some(PolicyArg::Disabled) => HandoffPolicy::Disabled,
            Some(PolicyArg::SourceFirst) => HandoffPolicy::SourceFirst,
            Some(PolicyArg::DestinationFirst) => HandoffPolicy::DestinationFirst,
            None => match self.backend() {
                // TRT-LLM has no reservation: a handoff ordering still runs,
                // and every reservation is refused as unsupported.
                Backend::TrtLlm => HandoffPolicy::SourceFirst,
                b => b.native_policy(),
            },
        }
    }

    /// The routing mode.
    pub fn router(&self) -> RouterMode {
        match self.router {
            RouterArg::Kv => RouterMode::KvAware,
            RouterArg::KvLegacy => RouterMode::KvLegacy,
            RouterArg::RoundRobin => RouterMode::RoundRobin,
            RouterArg::Random => RouterMode::Random,
            RouterArg::LeastLoaded => RouterMode::LeastLoaded,
            RouterArg::PowerOfTwo => RouterMode::PowerOfTwo,
        }
    }

    /// The `kv` router's knobs.
    pub fn router_kv(&self) -> KvKnobs {
        KvKnobs {
            overlap_score_credit: self.overlap_score_credit,
            prefill_load_scale: self.prefill_load_scale,
            decode_active_request_weight: self.decode_active_request_weight,
            router_temperature: self.router_temperature,
        }
    }

    /// The deployment as the engine runs it (replay, and both live clocks),
    /// with every worker's engine spec in id order (prefill or aggregated
    /// workers first). Every spec is checked to build a core.
    pub fn deployment(
        &self,
        multi_step: bool,
    ) -> Result<(DeploymentConfig, Vec<EngineSpec>), String> {
        self.check_ranges()?;
        self.check_transfer_mode()?;
        if self.prefill == 0 {
            return Err(if self.decode == 0 {
                "--prefill 0 --decode 0: there is no worker to serve on".into()
            } else {
                "--prefill 0: a disaggregated deployment needs at least one prefill worker".into()
            });
        }
        if self.backend() == Backend::TrtLlm && self.decode > 0 {
            return Err(
                "--backend trtllm: TensorRT-LLM refuses destination reservation, so it \
                        cannot run disaggregated here; use --decode 0 (aggregated) or \
                        --backend vllm/sglang"
                    .into(),
            );
        }
        let (prefill_spec, decode_spec) = self.engines()?;
        let dp = handoff_core::DpLayout::new(self.dp_size)
            .map_err(|e| format!("--dp-size {}: {e}", self.dp_size))?
            .with_coupling(if self.dp_lockstep || self.moe_ranks_coupled()? {
                handoff_core::DpCoupling::Lockstep
            } else {
                handoff_core::DpCoupling::Independent
            });
        let schedulers =
            (u64::from(self.prefill) + u64::from(self.decode)) * u64::from(dp.dp_size());
        if schedulers > u64::from(u32::MAX) {
            return Err(format!(
                "--dp-size {}: {schedulers} rank schedulers do not fit in worker ids",
                self.dp_size
            ));
        }
        let cfg = DeploymentConfig {
            backend: self.backend(),
            policy: self.policy(),
            prefill_workers: self.prefill,
            decode_workers: self.decode,
            dp,
            router: self.router(),
            router_kv: self.router_kv(),
            block_size: prefill_spec.event_block_tokens(),
            transfer: self.transfer()?,
            message_latency: Duration::from_micros(self.message_latency_us),
            handoff: self.handoff(),
            seed: self.seed,
            multi_step,
            transcript: false,
            faults: self.faults()?,
            heartbeat: self.sglang_heartbeat()?,
            engines: Vec::new(),
            sizing: None,
        };
        // The first prefill and (if any) decode scheduler: every other
        // scheduler of a pool runs the same spec.
        let first_decode = WorkerId(self.prefill * u32::from(dp.dp_size()));
        for (w, s) in [(WorkerId(0), &prefill_spec), (first_decode, &decode_spec)] {
            let core = make_core(s).map_err(|e| e.to_string())?;
            check_core(&cfg, w, core.as_ref()).map_err(|e| e.to_string())?;
        }
        let specs: Vec<EngineSpec> = handoff_deployment::deployment(&cfg)
            .iter()
            .map(|(_, pool)| {
                if *pool == Pool::Decode {
                    decode_spec.clone()
                } else {
                    prefill_spec.clone()
                }
            })
            .collect();
        let cfg = DeploymentConfig {
            engines: specs.clone(),
            sizing: self.sizing()?,
            ..cfg
        };
        let fan = handoff_deployment::rank_fan(&cfg);
        if !fan.divides() && self.backend() != Backend::Sglang {
            return Err(format!(
                "prefill TP {} and decode TP {}: vLLM's NIXL connector needs one to divide \
                 the other (TpKVTopology.tp_ratio); SGLang sends any M-to-N",
                fan.prefill_tp(),
                fan.decode_tp()
            ));
        }
        Ok((cfg, specs))
    }

    /// `--pass-speedup-ratio`, or the deprecated `--speedup-ratio` (with a
    /// warning on stderr, once per process).
    pub fn pass_speedup_ratio(&self) -> Result<f64, String> {
        match self.speedup_ratio {
            Some(x) => {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    eprintln!(
                        "warning: --speedup-ratio is deprecated; it divides pass times here, so use --pass-speedup-ratio (Dynamo's --speedup-ratio speeds up the wall clock: --speed on live commands; arrivals: --arrival-speedup-ratio)"
                    )
                });
                positive("speedup-ratio", x)
            }
            None => positive("pass-speedup-ratio", self.pass_speedup_ratio),
        }
    }

    /// The step-time model of `--perf` (a profile is read and checked
    /// here), else the profile of `--model` on `--gpu` (by default
    /// Qwen3-8B on an H100: [`crate::hardware_args::DEFAULT_MODEL`]), with
    /// the step-time terms of `--overheads` and `--overhead`.
    pub fn perf(&self) -> Result<PerfChoice, String> {
        self.perf_for(PoolSide::Prefill)
    }

    /// [`DeployArgs::perf`] of `side`'s pool: its own profile at its TP
    /// unless `--perf` names one model for both.
    pub fn perf_for(&self, side: PoolSide) -> Result<PerfChoice, String> {
        self.with_overheads(self.perf_model(side)?)
    }

    /// `choice` with the terms `--overheads` and `--overhead` say in place
    /// of its profile's (untouched without them); an error for a model
    /// that is not a profile.
    fn with_overheads(&self, choice: PerfChoice) -> Result<PerfChoice, String> {
        if self.overheads.is_none() && self.overhead.is_empty() {
            return Ok(choice);
        }
        let PerfChoice::Profile(p) = choice else {
            return Err(format!(
                "--overheads/--overhead: the step-time terms apply to profiles only (--perf profile:FILE, or the profile of --model/--gpu), not to {}",
                choice.label()
            ));
        };
        if self.overhead.len() > MAX_OVERHEAD_FLAGS {
            return Err(format!(
                "--overhead: given {} times, at most {MAX_OVERHEAD_FLAGS}",
                self.overhead.len()
            ));
        }
        let mut o = match self.overheads.as_deref() {
            None | Some("profile") => p.overheads().clone(),
            Some("off") => Default::default(),
            Some(path) => {
                check_regular("--overheads", path.as_ref()).map_err(|e| e.to_string())?;
                handoff_profiles::profile_file::load_file(path.as_ref())
                    .map_err(|e| format!("--overheads: {e}"))?
                    .overheads
                    .ok_or_else(|| format!("--overheads: {path}: has no overheads section"))?
            }
        };
        for a in &self.overhead {
            o.assign(a).map_err(|e| format!("--overhead {a}: {e}"))?;
        }
        let profile = (*p)
            .clone()
            .with_overheads(o)
            .map_err(|e| format!("--overheads/--overhead: {e}"))?;
        Ok(PerfChoice::Profile(Arc::new(profile)))
    }

    /// The step-time model of `--perf`, else of `--model` on `--gpu` at
    /// `side`'s TP.
    fn perf_model(&self, side: PoolSide) -> Result<PerfChoice, String> {
        let Some(other) = self.perf.as_deref() else {
            return Ok(match self.hardware_for(side)? {
                Some(s) => PerfChoice::Profile(Arc::new(s.file.profile)),
                None => PerfChoice::DynamoPolynomial,
            });
        };
        if other == "dynamo-polynomial" {
            return Ok(PerfChoice::DynamoPolynomial);
        }
        if let Some(path) = other.strip_prefix("profile:").filter(|p| !p.is_empty()) {
            // The profile reader bounds its size; a FIFO must not block it.
            check_regular("--perf", path.as_ref()).map_err(|e| e.to_string())?;
            return handoff_profiles::profile_file::load(path.as_ref())
                .map(|p| PerfChoice::Profile(Arc::new(p)))
                .map_err(|e| format!("--perf: {e}"));
        }
        if let Some(path) = other.strip_prefix("npz:").filter(|p| !p.is_empty()) {
            check_regular("--perf", path.as_ref()).map_err(|e| e.to_string())?;
            return handoff_profiles::npz_file::load(path.as_ref())
                .map(|g| PerfChoice::Npz(Arc::new(g)))
                .map_err(|e| format!("--perf: {e}"));
        }
        Err(format!(
            "--perf: `{other}`: expected dynamo-polynomial, profile:FILE or npz:FILE"
        ))
    }

    /// The transfer model (the flags in their ranges:
    /// [`DeployArgs::check_ranges`] first).
    pub fn transfer(&self) -> Result<TransferModel, String> {
        let bandwidth = self.bandwidth_gbps * 1e9;
        let base = Duration::from_secs_f64(self.transfer_ms / 1e3);
        // What a handoff moves is what the decode pool holds: its ranks'
        // KV of a token together (the prefill's, when the TPs are equal).
        let bytes_per_token = match (self.bytes_per_token, self.pool_hardware()?.1) {
            (Some(b), _) => b,
            (None, Some(s)) => s.model.kv_bytes_per_token(),
            (None, None) => 131_072,
        };
        Ok(match self.transfer {
            TransferArg::Fixed => TransferModel::Fixed(base),
            TransferArg::Bytes => TransferModel::Bytes {
                base,
                bytes_per_token,
                bandwidth,
            },
            TransferArg::Contention => TransferModel::Contention {
                base,
                bytes_per_token,
                bandwidth,
            },
        })
    }

    /// The fault plan of `--faults`, checked against the deployment.
    pub fn faults(&self) -> Result<FaultPlan, String> {
        let Some(spec) = &self.faults else {
            return Ok(FaultPlan::none());
        };
        let path = std::path::Path::new(spec);
        let (text, origin) = if path.is_file() {
            let text =
                handoff_workload::file::read_to_string("--faults", path, FileKind::FaultPlan)
                    .map_err(|e| e.to_string())?;
            (text, spec.clone())
        } else {
            (spec.clone(), "--faults".to_string())
        };
        let plan = FaultPlan::parse(&text).map_err(|e| format!("{origin}: {e}"))?;
        let workers = self.prefill.max(1) + self.decode;
        for f in &plan.timed {
            let w = match f.fault {
                Fault::Kill { worker }
                | Fault::Restart { worker }
                | Fault::Ready { worker }
                | Fault::Drain { worker }
                | Fault::Remove { worker } => Some(worker),
                Fault::Partition { a, b, .. } => Some(if a.0 >= b.0 { a } else { b }),
                Fault::Cancel { .. } | Fault::ScaleUp { .. } => None,
            };
            if let Some(w) = w.filter(|w| w.0 >= workers) {
                return Err(format!(
                    "{origin}: worker {w} does not exist (the deployment has workers 0..{})",
                    workers - 1
                ));
            }
        }
        if let Some(m) = plan.fleet.members.iter().find(|m| m.worker.0 >= workers) {
            return Err(format!(
                "{origin}: fleet worker {} does not exist (the deployment has workers 0..{})",
                m.worker,
                workers - 1
            ));
        }
        Ok(plan)
    }

    /// `--kv-transfer-mode push` is vLLM's connector and its own ordering.
    fn check_transfer_mode(&self) -> Result<(), String> {
        if self.kv_transfer_mode == KvTransferModeArg::Pull {
            return Ok(());
        }
        if self.backend() != Backend::Vllm {
            return Err(format!(
                "--kv-transfer-mode push: vLLM's NixlPushConnector; --backend {} has no push mode",
                self.backend().name()
            ));
        }
        if self.policy.is_some() {
            return Err(
                "--kv-transfer-mode push is an ordering of its own (push); drop --policy".into(),
            );
        }
        Ok(())
    }

    /// The recompute threshold the decode's core runs with: the flag, 0
    /// under push (`nixl/push_scheduler.py`
    /// `NixlPushConnectorScheduler.get_num_new_matched_tokens` has no
    /// threshold).
    pub(crate) fn kv_recompute_threshold(&self) -> u64 {
        if self.policy() == HandoffPolicy::Push {
            0
        } else {
            self.kv_recompute_threshold
        }
    }

    /// The source lease override: `--lease-ttl-s`, else vLLM's former
    /// abort timeout under `--kv-lease abort-timeout`, else the backend's.
    pub(crate) fn source_lease_ttl(&self) -> Option<Duration> {
        match (self.lease_ttl_s, self.backend(), self.kv_lease) {
            (Some(s), ..) => Some(Duration::from_secs(s)),
            (None, Backend::Vllm, KvLeaseArg::AbortTimeout) => {
                Some(handoff_sched_vllm::NIXL_ABORT_REQUEST_TIMEOUT)
            }
            _ => None,
        }
    }

    /// SGLang's decode→prefill heartbeat (`None` for the other backends):
    /// the flags, else SGLang's variables, else its defaults.
    pub fn sglang_heartbeat(&self) -> Result<Option<handoff_engine::fault::Heartbeat>, String> {
        if self.backend() != Backend::Sglang {
            return Ok(None);
        }
        let mut warnings = Vec::new();
        let hb = heartbeat(
            self.sglang_heartbeat_interval_s,
            self.sglang_heartbeat_max_failure,
            |k: &str| std::env::var_os(k),
            &mut warnings,
        )
        .map_err(|e| format!("--sglang-heartbeat-interval-s: {e}"))?;
        for w in warnings {
            eprintln!("{w}");
        }
        Ok(Some(hb))
    }

    /// Lifecycle timers. SGLang's reservation lifetime without the flag is
    /// its `SGLANG_DISAGGREGATION_WAITING_TIMEOUT` (300 s unset or unread).
    pub fn handoff(&self) -> HandoffConfig {
        let mut h = HandoffConfig::for_backend(self.backend());
        let env_ttl = || {
            let (s, w) = sglang_env::sglang_number(
                WAITING_TIMEOUT_ENV,
                std::env::var_os(WAITING_TIMEOUT_ENV).as_deref(),
                300.0,
                false,
            );
            if let Some(w) = w {
                eprintln!("{w}");
            }
            s.clamp(1.0, 1e9) as u64
        };
        match self.reservation_ttl_s {
            Some(s) => h.reservation_ttl = Duration::from_secs(s),
            None if self.backend() == Backend::Sglang => {
                h.reservation_ttl = Duration::from_secs(env_ttl());
            }
            // vLLM's push mode: the decode drops a registration nothing
            // fulfilled after `push_registration_timeout`.
            None if self.policy() == HandoffPolicy::Push => {
                h.reservation_ttl = handoff_sched_vllm::PUSH_REGISTRATION_TIMEOUT;
            }
            None => {}
        }
        h.renew_source_lease = self
            .renew_lease_s
            .filter(|s| *s > 0)
            .map(Duration::from_secs);
        // vLLM's decode workers heartbeat the lease their prefill workers
        // hold (both sides share `kv_lease_duration`).
        h.heartbeat = match (self.backend(), self.kv_lease) {
            (Backend::Vllm, KvLeaseArg::Heartbeat) => Some(handoff_core::Heartbeat::for_lease(
                self.source_lease_ttl()
                    .unwrap_or(handoff_core::Heartbeat::VLLM_LEASE),
            )),
            _ => None,
        };
        h.kv_load_failure = match self.kv_load_failure_policy {
            KvLoadFailureArg::Fail => handoff_core::KvLoadFailurePolicy::Fail,
            KvLoadFailureArg::Recompute => handoff_core::KvLoadFailurePolicy::Recompute,
        };
        h.stale_read = match self.stale_kv_read {
            StaleReadArg::Complete => handoff_core::StaleReadPolicy::Complete,
            StaleReadArg::Fail => handoff_core::StaleReadPolicy::Fail,
        };
        h.cancel_frees = match self.cancel_frees {
            CancelFreesArg::Upstream => handoff_core::CancelFrees::Upstream,
            CancelFreesArg::Immediately => handoff_core::CancelFrees::Immediately,
        };
        h
    }
}
