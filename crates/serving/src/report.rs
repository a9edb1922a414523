//! What a replay measured: request latencies in the shape of Dynamo's replay
//! report, plus the lifecycle figures this project exists for (stranding,
//! reservation waits, transfers, held and reserved block-time per worker).

use crate::deployment::ReplayConfig;
use crate::metrics::{Accuracy, Coalesced, Distribution, Histogram, Summary};
use crate::per_worker::{PerWorker, MAX_DENSE};
use crate::request_table::RequestTable;
use crate::timeline::Series;
use handoff_core::fasthash::FastMap;
use handoff_core::host::HostFinal;
use handoff_core::FailureReason;
use handoff_core::{
    Duration, HandoffId, Instant, KvCapacitySnapshot, Request, RequestError, RequestId, Role,
    TokenEmission, WorkerEvent, WorkerId,
};
use handoff_engine::fault::FaultCounts;
use handoff_engine::TransferModel;
use handoff_engine::Undeliverable;
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
    /// Router mode.
    pub router: &'static str,
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
    /// Source lease lifetime in seconds (the backend's default when not
    /// overridden).
    pub source_lease_ttl_s: f64,
    /// SGLang decode radix cache (`--disaggregation-decode-enable-radix-cache`);
    /// written only when on.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub decode_radix_cache: bool,
}

impl EngineReport {
    /// Whether `other` describes the same engine in the same pool.
    fn same_engine(&self, other: &EngineReport) -> bool {
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
    /// Released ids remembered to classify late facts as stale.
    pub tombstones: usize,
}

impl ReportConfig {
    /// The configuration of `cfg`, whose workers are `workers`.
    pub fn of(cfg: &ReplayConfig, workers: &[(WorkerId, Pool)]) -> ReportConfig {
        let secs = |d: Duration| round3(d.as_secs_f64());
        let transfer = match cfg.transfer {
            TransferModel::Fixed(d) => TransferReport {
                model: "fixed",
                base_ms: round3(d.as_secs_f64() * 1e3),
                bytes_per_token: None,
                bandwidth_gbps: None,
            },
            TransferModel::Bytes {
                base,
                bytes_per_token,
                bandwidth,
            }
            | TransferModel::Contention {
                base,
                bytes_per_token,
                bandwidth,
            } => TransferReport {
                model: if matches!(cfg.transfer, TransferModel::Bytes { .. }) {
                    "bytes"
                } else {
                    "contention"
                },
                base_ms: round3(base.as_secs_f64() * 1e3),
                bytes_per_token: Some(bytes_per_token),
                bandwidth_gbps: Some(round3(bandwidth / 1e9)),
            },
        };
        let mut engines: Vec<EngineReport> = Vec::new();
        for ((w, pool), spec) in workers.iter().zip(&cfg.engines) {
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
                source_lease_ttl_s: secs(spec.effective_source_lease_ttl()),
                decode_radix_cache: spec.decode_radix_cache
                    && spec.backend == handoff_core::Backend::Sglang,
            };
            match engines.last_mut() {
                Some(last) if last.same_engine(&e) => last.workers.push(w.0),
                _ => engines.push(e),
            }
        }
        ReportConfig {
            backend: cfg.backend.name(),
            policy: if cfg.decode_workers == 0 {
                "aggregated"
            } else {
                cfg.policy.name()
            },
            prefill_workers: cfg.prefill_workers,
            decode_workers: cfg.decode_workers,
            router: cfg.router.name(),
            seed: cfg.seed,
            router_block_size: cfg.block_size,
            engines,
            transfer,
            message_latency_us: round3(cfg.message_latency.as_nanos() as f64 / 1e3),
            timers: TimersReport {
                reservation_ttl_s: cfg
                    .handoff
                    .reservation_expires()
                    .then(|| secs(cfg.handoff.reservation_ttl)),
                renew_source_lease_s: cfg.handoff.renew_source_lease.map(secs),
                early_fact_ttl_s: secs(cfg.handoff.early_fact_ttl),
                tombstones: cfg.handoff.tombstones,
            },
            multi_step: cfg.multi_step,
            faults: if cfg.faults.is_empty() {
                String::new()
            } else {
                cfg.faults
                    .to_string()
                    .lines()
                    .collect::<Vec<_>>()
                    .join("; ")
            },
        }
    }
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
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One worker's figures.
#[derive(Clone, Debug, Serialize)]
pub struct WorkerReport {
    /// Worker id.
    pub worker: u32,
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

/// A request in flight: what its tokens touch inline, the rest (written at
/// lifecycle transitions, read when it ends) behind a box, so the window of
/// records the per-token path walks stays small. One cache line each
/// (aligned, 48 bytes used): a decode pass touches the records of its whole
/// batch, and a record across two lines cost two misses.
#[derive(Clone, Debug, Default)]
#[repr(align(64))]
struct ReqRec {
    tok: TokenRec,
    cold: Box<ColdRec>,
}

const _: () = assert!(std::mem::size_of::<Option<ReqRec>>() == 64);

/// `Option<Instant>` in 8 bytes: model time never reaches `Instant::MAX`
/// (the engine's "never").
#[derive(Clone, Copy, Debug)]
struct Stamp(u64);

impl Default for Stamp {
    fn default() -> Self {
        Stamp(u64::MAX)
    }
}

impl Stamp {
    fn get(self) -> Option<Instant> {
        (self.0 != u64::MAX).then_some(Instant(self.0))
    }

    fn of(t: Option<Instant>) -> Self {
        Stamp(t.map_or(u64::MAX, |t| t.0))
    }
}

/// `Option<WorkerId>` in 4 bytes (no worker id is `u32::MAX`: ids are
/// positions in a pool list).
#[derive(Clone, Copy, Debug)]
struct WorkerSlot(u32);

impl Default for WorkerSlot {
    fn default() -> Self {
        WorkerSlot(u32::MAX)
    }
}

impl WorkerSlot {
    fn get(self) -> Option<WorkerId> {
        (self.0 != u32::MAX).then_some(WorkerId(self.0))
    }
}

/// What every output token touches (one update per request per pass),
/// packed: see [`ReqRec`].
#[derive(Clone, Copy, Debug, Default)]
struct TokenRec {
    first: Stamp,
    second: Stamp,
    last: Stamp,
    tokens: u64,
    decode_worker: WorkerSlot,
    prefill_worker: WorkerSlot,
}

impl TokenRec {
    fn first(&self) -> Option<Instant> {
        self.first.get()
    }

    fn second(&self) -> Option<Instant> {
        self.second.get()
    }

    fn last(&self) -> Option<Instant> {
        self.last.get()
    }

    fn set_first(&mut self, t: Option<Instant>) {
        self.first = Stamp::of(t);
    }

    fn set_second(&mut self, t: Option<Instant>) {
        self.second = Stamp::of(t);
    }

    fn set_last(&mut self, t: Option<Instant>) {
        self.last = Stamp::of(t);
    }

    fn decode_worker(&self) -> Option<WorkerId> {
        self.decode_worker.get()
    }

    fn prefill_worker(&self) -> Option<WorkerId> {
        self.prefill_worker.get()
    }

    fn set_decode_worker(&mut self, w: WorkerId) {
        self.decode_worker = WorkerSlot(w.0);
    }

    fn set_prefill_worker(&mut self, w: WorkerId) {
        self.prefill_worker = WorkerSlot(w.0);
    }

    /// The prefill worker, unless one is already known.
    fn note_prefill_worker(&mut self, w: WorkerId) {
        if self.prefill_worker().is_none() {
            self.set_prefill_worker(w);
        }
    }
}

/// A request's arrival and handoff milestones.
#[derive(Clone, Debug, Default)]
struct ColdRec {
    arrival: Instant,
    input: u32,
    pinned_at: Option<Instant>,
    routed_at: Option<Instant>,
    reserved_at: Option<Instant>,
    transfer_start: Option<Instant>,
    transfer_end: Option<Instant>,
    activated_at: Option<Instant>,
    released_at: Option<Instant>,
    session: Option<crate::session_log::SessionFields>,
}

/// How one request ended, as `--per-request-jsonl` writes it: one JSON
/// object per request, in the order requests ended (times in ms of model
/// time; latencies absent when the request never got that far).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RequestRecord {
    /// Request id (the trace's record index).
    pub id: u64,
    /// `completed` or `failed`.
    pub outcome: &'static str,
    /// Why it failed (`lease-expired`, `worker-lost`, `unfinished`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<FailureReason>,
    /// Arrival, ms.
    pub arrival_ms: f64,
    /// When it ended (completion or failure), ms.
    pub end_ms: f64,
    /// Prompt tokens.
    pub input_tokens: u32,
    /// Output tokens produced.
    pub output_tokens: u64,
    /// Time to first token, ms.
    pub ttft_ms: Option<f64>,
    /// First to second token, ms.
    pub ttst_ms: Option<f64>,
    /// Mean time per output token after the first, ms.
    pub tpot_ms: Option<f64>,
    /// Arrival to completion, ms (completed requests only).
    pub e2e_ms: Option<f64>,
    /// The prefill (or aggregated) worker that computed its prompt.
    pub prefill_worker: Option<u32>,
    /// The decode worker that produced its tokens.
    pub decode_worker: Option<u32>,
    /// Handoff phase times, ms of model time (absent when the request had
    /// no handoff or never reached the phase).
    pub handoff: HandoffTimes,
    /// Session fields (session runs only; seed 002 §6).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub session: Option<crate::session_log::SessionFields>,
}

/// When one request's handoff reached each phase, ms of model time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct HandoffTimes {
    /// The prefill completed and its KV pinned.
    pub pinned_ms: Option<f64>,
    /// The decode side was routed.
    pub routed_ms: Option<f64>,
    /// The destination reserved its blocks.
    pub reserved_ms: Option<f64>,
    /// The KV transfer started.
    pub transfer_start_ms: Option<f64>,
    /// The KV transfer completed.
    pub transfer_end_ms: Option<f64>,
    /// The destination activated (decode may run).
    pub activated_ms: Option<f64>,
    /// The source released its pinned KV.
    pub source_released_ms: Option<f64>,
    /// Pinned to released: how long the source KV was stranded, ms.
    pub source_pinned_for_ms: Option<f64>,
}

/// What the HTML report draws besides the [`Report`]: latency and phase
/// distributions as CDFs, and per-worker timelines. Kept only when asked
/// ([`Recorder::keep_details`]); never part of the report's JSON.
#[derive(Clone, Debug, Default)]
pub struct Details {
    /// Latency CDFs: (name, points of (ms, fraction at or below)).
    pub latency_cdfs: Vec<(&'static str, Vec<(f64, f64)>)>,
    /// Handoff phase duration CDFs, likewise.
    pub phase_cdfs: Vec<(&'static str, Vec<(f64, f64)>)>,
    /// Per-worker timelines, in worker order, with each worker's pool.
    pub timelines: Vec<(WorkerId, &'static str, Series)>,
}

/// Up to `points` (value, fraction at or below) pairs of sorted `v`.
fn cdf(v: &[f64], points: usize) -> Vec<(f64, f64)> {
    let n = v.len();
    if n == 0 {
        return Vec::new();
    }
    let step = n.div_ceil(points.max(1)).max(1);
    let mut out: Vec<(f64, f64)> = (0..n)
        .filter(|i| (i + 1) % step == 0)
        .map(|i| (v[i], (i + 1) as f64 / n as f64))
        .collect();
    if out.last().map(|p| p.1) != Some(1.0) {
        out.push((v[n - 1], 1.0));
    }
    out
}

/// Points of each CDF in [`Details`].
const CDF_POINTS: usize = 400;

/// A worker's last step, as its tokens need it: when each pass ended.
#[derive(Clone, Debug, Default)]
struct StepShape {
    start: Instant,
    steps: u64,
    /// End of the first pass and of the last.
    end_first: Instant,
    end_last: Instant,
    /// With several passes, each pass's time in nanoseconds and its end
    /// (from `start`): the times the core computed, so every token's time
    /// is exact (pass times are not linear in the pass index).
    passes: Vec<u64>,
    ends: Vec<u64>,
}

impl StepShape {
    /// Becomes the shape of a step, reusing its buffers. A core that
    /// covered several passes without listing their times (ours always
    /// list them) gets the rest of the step split evenly after its first.
    fn set(
        &mut self,
        start: Instant,
        steps: u64,
        first: Duration,
        duration: Duration,
        passes: &[Duration],
    ) {
        self.start = start;
        self.steps = steps;
        self.passes.clear();
        self.ends.clear();
        if steps > 1 {
            if passes.len() as u64 == steps {
                self.passes
                    .extend(passes.iter().map(|d| d.as_nanos() as u64));
            } else {
                let first = first.as_nanos() as u64;
                let rest = (duration.as_nanos() as u64).saturating_sub(first);
                let n = steps - 1;
                self.passes.push(first);
                for i in 0..n {
                    self.passes.push(rest / n + u64::from(i < rest % n));
                }
            }
            let mut end = 0u64;
            for &ns in &self.passes {
                end += ns;
                self.ends.push(end);
            }
        }
        self.end_first = start + first;
        self.end_last = match self.ends.last() {
            Some(ns) => Instant(start.0 + ns),
            None => start + first,
        };
    }

    /// End of pass `j` (1-based), if the step had it.
    fn end_of(&self, j: u64) -> Option<Instant> {
        if self.ends.is_empty() {
            return (j == 1).then_some(self.end_first);
        }
        let i = usize::try_from(j).ok()?.checked_sub(1)?;
        self.ends.get(i).map(|ns| Instant(self.start.0 + ns))
    }

    /// Times of passes 2..=k, in nanoseconds.
    fn later_passes(&self, k: u64) -> &[u64] {
        let k = usize::try_from(k)
            .unwrap_or(usize::MAX)
            .min(self.passes.len());
        self.passes.get(1..k).unwrap_or(&[])
    }
}

#[derive(Clone, Debug, Default)]
struct WorkerAcc {
    steps: u64,
    prefill_tokens: u64,
    pinned: i64,
    reserved: i64,
    peak_pinned: i64,
    peak_reserved: i64,
    pinned_ns: f64,
    reserved_ns: f64,
    last_change: Instant,
}

impl WorkerAcc {
    fn advance(&mut self, at: Instant) {
        if at > self.last_change {
            let dt = (at - self.last_change).as_nanos() as f64;
            self.pinned_ns += self.pinned as f64 * dt;
            self.reserved_ns += self.reserved as f64 * dt;
            self.last_change = at;
        }
    }
}

/// Where each finished request's [`RequestRecord`] goes.
pub type RequestSink = Box<dyn FnMut(&RequestRecord)>;

/// Folds worker events into a [`Report`].
pub struct Recorder {
    config: ReportConfig,
    reqs: RequestTable<ReqRec>,
    workers: PerWorker<WorkerAcc>,
    /// Each worker's last step, by worker id (ids are small and dense):
    /// the per-token path reads it without a tree walk; larger ids use
    /// `sparse_shapes`.
    shapes: Vec<StepShape>,
    sparse_shapes: BTreeMap<WorkerId, StepShape>,
    pools: BTreeMap<WorkerId, Pool>,
    transfers: FastMap<HandoffId, (RequestId, Instant)>,
    first_arrival: Option<Instant>,
    last_finish: Instant,
    num_requests: u64,
    completed: u64,
    failed: u64,
    input_tokens: u64,
    arrived_prompt_tokens: u64,
    output_tokens: u64,
    ttft: Vec<f64>,
    ttst: Vec<f64>,
    tpot: Vec<f64>,
    e2e: Vec<f64>,
    itl: Histogram,
    pinned_ms: Vec<f64>,
    wait_ms: Vec<f64>,
    transfer_ms: Vec<f64>,
    activation_ms: Vec<f64>,
    life: Lifecycle,
    sink: Option<RequestSink>,
    timelines: Option<BTreeMap<WorkerId, Series>>,
    details: Option<Details>,
    /// Roles torn down at the end.
    pub unresolved_teardown: u64,
    /// Faults the engine injected.
    pub faults: FaultCounts,
}

fn ms(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

fn at_ms(t: Instant) -> f64 {
    round3(t.0 as f64 / 1e6)
}

impl Recorder {
    /// A recorder for `cfg`'s workers.
    pub fn new(cfg: &ReplayConfig, workers: impl Iterator<Item = (WorkerId, Pool)>) -> Self {
        let workers: Vec<(WorkerId, Pool)> = workers.collect();
        Recorder {
            config: ReportConfig::of(cfg, &workers),
            reqs: RequestTable::default(),
            workers: workers.iter().map(|(w, _)| *w).collect(),
            shapes: {
                let n = workers
                    .iter()
                    .filter(|(w, _)| w.0 < MAX_DENSE)
                    .map(|(w, _)| w.0 as usize + 1)
                    .max()
                    .unwrap_or(0);
                vec![StepShape::default(); n]
            },
            sparse_shapes: BTreeMap::new(),
            pools: workers.iter().copied().collect(),
            transfers: FastMap::default(),
            first_arrival: None,
            last_finish: Instant::ZERO,
            num_requests: 0,
            completed: 0,
            failed: 0,
            input_tokens: 0,
            arrived_prompt_tokens: 0,
            output_tokens: 0,
            ttft: Vec::new(),
            ttst: Vec::new(),
            tpot: Vec::new(),
            e2e: Vec::new(),
            itl: Histogram::default(),
            pinned_ms: Vec::new(),
            wait_ms: Vec::new(),
            transfer_ms: Vec::new(),
            activation_ms: Vec::new(),
            life: Lifecycle::default(),
            sink: None,
            timelines: None,
            details: None,
            unresolved_teardown: 0,
            faults: FaultCounts::default(),
        }
    }

    /// Hands every request's [`RequestRecord`] to `sink` when it ends (in
    /// the order requests end, which the inputs fix).
    pub fn set_request_sink(&mut self, sink: RequestSink) {
        self.sink = Some(sink);
    }

    /// Keeps what the HTML report draws ([`Details`]): CDFs at the end, and
    /// timelines of the capacity reports handed to [`Recorder::capacity`],
    /// at most `points` per worker.
    pub fn keep_details(&mut self, points: usize) {
        self.timelines = Some(
            self.workers
                .keys()
                .map(|w| (w, Series::new(points)))
                .collect(),
        );
        self.details = Some(Details::default());
    }

    /// Worker `w`'s capacity report at `at` (a driver that can read its
    /// hosts hands these over; the recorder never reads a worker). Kept
    /// only with [`Recorder::keep_details`].
    pub fn capacity(&mut self, w: WorkerId, at: Instant, snapshot: &KvCapacitySnapshot) {
        if let Some(s) = self.timelines.as_mut().and_then(|t| t.get_mut(&w)) {
            s.observe(at, snapshot);
        }
    }

    /// The session fields of in-flight request `r` (a session run's
    /// director keeps them current).
    pub fn set_session(&mut self, r: RequestId, fields: crate::session_log::SessionFields) {
        if let Some(rec) = self.reqs.get_mut(r) {
            rec.cold.session = Some(fields);
        }
    }

    /// A request arrived.
    pub fn arrival(&mut self, r: &Request) {
        self.num_requests += 1;
        self.arrived_prompt_tokens += u64::from(r.prompt_tokens);
        self.first_arrival.get_or_insert(r.arrival);
        self.reqs.insert(
            r.id,
            ReqRec {
                tok: TokenRec::default(),
                cold: Box::new(ColdRec {
                    arrival: r.arrival,
                    input: r.prompt_tokens,
                    ..Default::default()
                }),
            },
        );
    }

    /// The request ended as it did: counted, and handed to the sink.
    fn end(&mut self, id: RequestId, rec: &ReqRec, reason: Option<FailureReason>, at: Instant) {
        match reason {
            None => self.completed += 1,
            Some(r) => {
                self.failed += 1;
                *self.life.failure_reasons.entry(r).or_default() += 1;
            }
        }
        let Some(sink) = self.sink.as_mut() else {
            return;
        };
        let since = |t: Option<Instant>, from: Option<Instant>| match (t, from) {
            (Some(t), Some(f)) => Some(round3(ms(t - f))),
            _ => None,
        };
        let tpot = match (rec.tok.first(), rec.tok.last()) {
            (Some(f), Some(l)) if rec.tok.tokens > 1 => {
                Some(round3(ms(l - f) / (rec.tok.tokens - 1) as f64))
            }
            _ => None,
        };
        let record = RequestRecord {
            id: id.0,
            outcome: if reason.is_none() {
                "completed"
            } else {
                "failed"
            },
            failure_reason: reason,
            arrival_ms: at_ms(rec.cold.arrival),
            end_ms: at_ms(at),
            input_tokens: rec.cold.input,
            output_tokens: rec.tok.tokens,
            ttft_ms: since(rec.tok.first(), Some(rec.cold.arrival)),
            ttst_ms: since(rec.tok.second(), rec.tok.first()),
            tpot_ms: tpot,
            e2e_ms: reason.is_none().then(|| round3(ms(at - rec.cold.arrival))),
            prefill_worker: rec.tok.prefill_worker().map(|w| w.0),
            decode_worker: rec.tok.decode_worker().map(|w| w.0),
            handoff: HandoffTimes {
                pinned_ms: rec.cold.pinned_at.map(at_ms),
                routed_ms: rec.cold.routed_at.map(at_ms),
                reserved_ms: rec.cold.reserved_at.map(at_ms),
                transfer_start_ms: rec.cold.transfer_start.map(at_ms),
                transfer_end_ms: rec.cold.transfer_end.map(at_ms),
                activated_ms: rec.cold.activated_at.map(at_ms),
                source_released_ms: rec.cold.released_at.map(at_ms),
                source_pinned_for_ms: since(rec.cold.released_at, rec.cold.pinned_at),
            },
            session: rec.cold.session,
        };
        sink(&record);
    }

    /// Request `r` failed for `reason` (its worker was lost, say); a
    /// request already finished or failed is left alone.
    pub fn fail(&mut self, r: RequestId, reason: FailureReason) {
        self.fail_at(r, reason, None);
    }

    /// [`Recorder::fail`] at a known model time (for its record).
    pub fn fail_at(&mut self, r: RequestId, reason: FailureReason, at: Option<Instant>) {
        if let Some(rec) = self.reqs.remove(r) {
            let at = at.unwrap_or(self.last_finish.max(rec.cold.arrival));
            self.end(r, &rec, Some(reason), at);
        }
    }

    /// Requests that arrived and have neither finished nor failed.
    pub fn in_flight(&self) -> usize {
        self.reqs.len()
    }

    /// Whether `request` arrived and has neither finished nor failed.
    pub fn is_in_flight(&self, request: RequestId) -> bool {
        self.reqs.contains(request)
    }

    /// A worker refused a request.
    pub fn refused(&mut self, _e: RequestError) {
        self.life.refused_requests += 1;
    }

    /// A request could not be handed to its worker (the worker was down);
    /// the director decides what becomes of the request.
    pub fn undeliverable(&mut self, _why: Undeliverable) {
        self.life.undeliverable_requests += 1;
    }

    /// Request `r` was routed again as a new attempt (its worker was lost):
    /// its output so far is discarded, since the new attempt produces it
    /// all again; its arrival and prompt stand, so its latencies include
    /// the loss and its input tokens count once.
    pub fn migrated(&mut self, r: RequestId) {
        self.life.migrated_requests += 1;
        if let Some(rec) = self.reqs.get_mut(r) {
            let (arrival, input) = (rec.cold.arrival, rec.cold.input);
            *rec = ReqRec {
                tok: TokenRec::default(),
                cold: Box::new(ColdRec {
                    arrival,
                    input,
                    ..Default::default()
                }),
            };
        }
    }

    /// A transfer started.
    pub fn transfer_started(&mut self, id: HandoffId, request: RequestId, at: Instant) {
        self.transfers.insert(id, (request, at));
        if let Some(rec) = self.reqs.get_mut(request) {
            rec.cold.transfer_start = Some(at);
        }
    }

    /// A transfer completed.
    pub fn transfer_done(&mut self, id: HandoffId, at: Instant) {
        if let Some((r, s)) = self.transfers.remove(&id) {
            self.transfer_ms.push(ms(at - s));
            if let Some(rec) = self.reqs.get_mut(r) {
                rec.cold.transfer_end = Some(at);
            }
        }
    }

    /// Worker `w`'s last step (a worker's `Step` comes before its tokens).
    fn shape_mut(&mut self, w: WorkerId) -> &mut StepShape {
        match self.shapes.get_mut(w.0 as usize) {
            Some(s) => s,
            None => self.sparse_shapes.entry(w).or_default(),
        }
    }

    /// Folds one worker event. `stale` marks an event of a voided attempt
    /// (one a migration replaced): it counts toward the workers' and the
    /// lifecycle's figures, not toward its request's.
    pub fn event(&mut self, w: WorkerId, pool: Pool, e: &WorkerEvent, stale: bool) {
        match e {
            WorkerEvent::Step {
                start,
                steps,
                first_step,
                duration,
                passes,
                prefill_tokens,
                ..
            } => {
                if let Some(acc) = self.workers.get_mut(w) {
                    acc.steps += steps;
                    acc.prefill_tokens += prefill_tokens;
                    self.shape_mut(w)
                        .set(*start, *steps, *first_step, *duration, passes);
                }
            }
            WorkerEvent::Tokens { emissions } if pool != Pool::Prefill => {
                let shape = match self.shapes.get(w.0 as usize) {
                    Some(s) => s,
                    None => match self.sparse_shapes.get(&w) {
                        Some(s) => s,
                        None => return,
                    },
                };
                self.reqs
                    .warm(emissions.iter().map(|e| e.request), |r| r.tok.tokens);
                let mut whole_runs = 0;
                let mut itl = Coalesced::default();
                for em in emissions {
                    whole_runs += u64::from(record_tokens(
                        &mut self.reqs,
                        &mut self.itl,
                        &mut itl,
                        w,
                        pool,
                        shape,
                        em,
                    ));
                }
                itl.flush(&mut self.itl);
                // Requests that took every pass of a run share its
                // inter-token latencies: recorded once per pass for all of
                // them, not once per token.
                if whole_runs > 0 {
                    for &ns in shape.later_passes(shape.steps) {
                        self.itl.record_n(ns, whole_runs);
                    }
                }
            }
            // SGLang PD decode streams the prefill's token when the request
            // joins its batch: the first token, with no pass of its own.
            WorkerEvent::FirstTokenFromPrefill { request, at } if pool != Pool::Prefill => {
                if let Some(rec) = self.reqs.get_mut(*request) {
                    rec.tok.set_decode_worker(w);
                    rec.tok.set_first(Some(*at));
                    rec.tok.set_second(None);
                    rec.tok.set_last(Some(*at));
                    rec.tok.tokens += 1;
                }
            }
            WorkerEvent::RequestFinished { request, at } if pool != Pool::Prefill => {
                if let Some(rec) = self.reqs.remove(*request) {
                    self.last_finish = self.last_finish.max(*at);
                    self.output_tokens += rec.tok.tokens;
                    self.input_tokens += u64::from(rec.cold.input);
                    self.e2e.push(ms(*at - rec.cold.arrival));
                    if let Some(f) = rec.tok.first() {
                        self.ttft.push(ms(f - rec.cold.arrival));
                        if let Some(s) = rec.tok.second() {
                            self.ttst.push(ms(s - f));
                        }
                        if rec.tok.tokens > 1 {
                            if let Some(l) = rec.tok.last() {
                                self.tpot.push(ms(l - f) / (rec.tok.tokens - 1) as f64);
                            }
                        }
                    }
                    self.end(*request, &rec, None, *at);
                }
            }
            WorkerEvent::Preempted { .. } => self.life.preemptions += 1,
            WorkerEvent::Dropped { .. } => self.life.dropped_facts += 1,
            WorkerEvent::Transition(t) => {
                if let Some(acc) = self.workers.get_mut(w) {
                    acc.advance(t.at);
                    acc.pinned += t.delta.pinned;
                    acc.reserved += t.delta.reserved;
                    acc.peak_pinned = acc.peak_pinned.max(acc.pinned);
                    acc.peak_reserved = acc.peak_reserved.max(acc.reserved);
                }
                if stale {
                    return;
                }
                let Some(rec) = self.reqs.get_mut(t.request) else {
                    return;
                };
                use handoff_core::{
                    DestinationEventKind as DE, DestinationState as DS, LifecycleEvent as E,
                    RoleState as St, SourceEventKind as SE, SourceState as SS,
                };
                match (t.event, t.to) {
                    (E::Source(SE::PrefillPinned), _) => {
                        rec.cold.pinned_at = Some(t.at);
                        rec.tok.set_prefill_worker(t.worker);
                        self.life.handoffs_pinned += 1;
                    }
                    (_, St::Source(SS::Released)) => {
                        rec.cold.released_at = Some(t.at);
                        if let Some(p) = rec.cold.pinned_at {
                            self.pinned_ms.push(ms(t.at - p));
                        }
                    }
                    (E::Destination(DE::Routed), _) => {
                        rec.cold.routed_at = Some(t.at);
                        rec.tok.set_decode_worker(t.worker);
                    }
                    (E::Destination(DE::Reserved), _) => {
                        rec.cold.reserved_at = Some(t.at);
                        if let Some(r) = rec.cold.routed_at {
                            self.wait_ms.push(ms(t.at - r));
                        }
                    }
                    (E::Destination(DE::ReceiveCompleted), St::Destination(DS::Active)) => {
                        self.life.handoffs_activated += 1;
                        rec.cold.activated_at = Some(t.at);
                        if let Some(r) = rec.cold.reserved_at {
                            self.activation_ms.push(ms(t.at - r));
                        }
                    }
                    _ => {}
                }
                // The source role lives on the prefill worker.
                if t.role == Role::Source {
                    rec.tok.note_prefill_worker(t.worker);
                }
            }
            WorkerEvent::RoleEnded {
                request,
                reason: Some(reason),
                at,
                ..
            } => {
                *self.life.early_ends.entry(reason.name()).or_default() += 1;
                match reason {
                    handoff_core::CancelReason::LeaseExpired => self.life.lease_expiries += 1,
                    handoff_core::CancelReason::ReservationExpired => {
                        self.life.reservation_expiries += 1
                    }
                    _ => {}
                }
                // What becomes of the request (migration or failure) is the
                // director's decision: it calls `fail` or `migrated`.
                let _ = (request, at);
            }
            _ => {}
        }
    }

    /// The report at `end`.
    pub fn finish(self, end: Instant, workers: impl Iterator<Item = (HostFinal, Pool)>) -> Report {
        self.finish_detailed(end, workers).0
    }

    /// The report at `end`, and the [`Details`] kept (with
    /// [`Recorder::keep_details`]).
    pub fn finish_detailed(
        mut self,
        end: Instant,
        workers: impl Iterator<Item = (HostFinal, Pool)>,
    ) -> (Report, Option<Details>) {
        let start = self.first_arrival.unwrap_or(Instant::ZERO);
        // Throughput is over the serving span, first arrival to last
        // completion, not to the last (possibly idle) timer.
        let duration_s = (self.last_finish.max(start) - start).as_secs_f64();
        let per_s = |n: u64| {
            if duration_s > 0.0 {
                round3(n as f64 / duration_s)
            } else {
                0.0
            }
        };
        let mut out = Vec::new();
        let mut computed_prefill = 0u64;
        for (w, pool) in workers {
            let acc = self.workers.entry(w.worker);
            acc.advance(end);
            if pool != Pool::Decode {
                computed_prefill += acc.prefill_tokens;
            }
            let cap: KvCapacitySnapshot = w.capacity;
            out.push(WorkerReport {
                worker: w.worker.0,
                pool: pool.name(),
                steps: acc.steps,
                prefill_tokens: acc.prefill_tokens,
                peak_pinned_blocks: acc.peak_pinned.max(0) as u64,
                peak_reserved_blocks: acc.peak_reserved.max(0) as u64,
                pinned_block_seconds: round3(acc.pinned_ns / 1e9),
                reserved_block_seconds: round3(acc.reserved_ns / 1e9),
                drained: w.drained,
                final_kv_used_blocks: cap.kv_used_blocks(),
            });
        }
        // Requests never finished (torn down mid-flight) count as failed,
        // in id order.
        let left = self.reqs.drain_sorted();
        for (r, rec) in left {
            self.end(r, &rec, Some(FailureReason::Unfinished), end);
        }
        let reuse = if self.arrived_prompt_tokens == 0 {
            0.0
        } else {
            (1.0 - computed_prefill as f64 / self.arrived_prompt_tokens as f64).clamp(0.0, 1.0)
        };
        let flat = FlatLatencies {
            ttft: Distribution::exact(&mut self.ttft),
            ttst: Distribution::exact(&mut self.ttst),
            tpot: Distribution::exact(&mut self.tpot),
            itl: self.itl.distribution(),
            e2e_latency: Distribution::exact(&mut self.e2e),
        };
        let mut life = self.life;
        life.unresolved_at_teardown = self.unresolved_teardown;
        life.faults = self.faults;
        life.source_pinned_ms = Summary::exact(&mut self.pinned_ms);
        life.reservation_wait_ms = Summary::exact(&mut self.wait_ms);
        life.transfer_ms = Summary::exact(&mut self.transfer_ms);
        life.reservation_to_activation_ms = Summary::exact(&mut self.activation_ms);
        let details = self.details.take().map(|mut d| {
            // Every vector above is sorted now.
            d.latency_cdfs = vec![
                ("TTFT", cdf(&self.ttft, CDF_POINTS)),
                ("TTST", cdf(&self.ttst, CDF_POINTS)),
                ("TPOT", cdf(&self.tpot, CDF_POINTS)),
                ("ITL", self.itl.cdf(CDF_POINTS)),
                ("E2E", cdf(&self.e2e, CDF_POINTS)),
            ];
            d.phase_cdfs = vec![
                ("source pinned (stranded)", cdf(&self.pinned_ms, CDF_POINTS)),
                ("reservation wait", cdf(&self.wait_ms, CDF_POINTS)),
                ("transfer", cdf(&self.transfer_ms, CDF_POINTS)),
                (
                    "reserved -> activated",
                    cdf(&self.activation_ms, CDF_POINTS),
                ),
            ];
            let pools = &self.pools;
            d.timelines = self
                .timelines
                .take()
                .unwrap_or_default()
                .into_iter()
                .map(|(w, s)| (w, pools.get(&w).map_or("decode", |p| p.name()), s))
                .collect();
            d
        });
        let report = Report {
            config: self.config,
            num_requests: self.num_requests,
            completed_requests: self.completed,
            failed_requests: self.failed,
            total_input_tokens: self.input_tokens,
            total_output_tokens: self.output_tokens,
            duration_s: round3(duration_s),
            duration_ms: round3(duration_s * 1e3),
            request_throughput_rps: per_s(self.completed),
            input_throughput_tok_s: per_s(self.input_tokens),
            output_token_throughput_tps: per_s(self.output_tokens),
            output_throughput_tok_s: per_s(self.output_tokens),
            total_throughput_tok_s: per_s(self.input_tokens + self.output_tokens),
            prefix_cache_reused_ratio: round6(reuse),
            ttft_ms: flat.ttft.summary(),
            ttst_ms: flat.ttst.summary(),
            tpot_ms: flat.tpot.summary(),
            itl_ms: flat.itl.summary(),
            e2e_latency_ms: flat.e2e_latency.summary(),
            latency_accuracy: Accuracy::REPORTED,
            flat,
            lifecycle: life,
            workers: out,
            sessions: None,
        };
        (report, details)
    }
}

/// One request's tokens of the step `shape`: its first, second and last
/// token times, its count, and the latencies between its tokens. Returns
/// whether it took every pass of a multi-pass step, leaving the latencies
/// within the step for the caller to record for all such requests at once.
fn record_tokens(
    reqs: &mut RequestTable<ReqRec>,
    itl: &mut Histogram,
    pending: &mut Coalesced,
    w: WorkerId,
    pool: Pool,
    shape: &StepShape,
    em: &TokenEmission,
) -> bool {
    let Some(rec) = reqs.get_mut(em.request) else {
        return false;
    };
    let k = u64::from(em.tokens);
    if k == 0 {
        return false;
    }
    rec.tok.set_decode_worker(w);
    if pool == Pool::Aggregated {
        rec.tok.note_prefill_worker(w);
    }
    // A step's tokens come from its first passes: a request in a step
    // takes part from the first pass on.
    let e1 = shape.end_first;
    if em.first || rec.tok.first().is_none() {
        rec.tok.set_first(Some(e1));
        rec.tok
            .set_second(if k > 1 { shape.end_of(2) } else { None });
    } else {
        if rec.tok.second().is_none() {
            rec.tok.set_second(Some(e1));
        }
        if let Some(last) = rec.tok.last() {
            pending.push(itl, (e1 - last).as_nanos() as u64);
        }
    }
    rec.tok.set_last(Some(if k >= shape.steps {
        shape.end_last
    } else {
        shape.end_of(k).unwrap_or(shape.end_last)
    }));
    rec.tok.tokens += k;
    if k > 1 {
        if k >= shape.steps {
            return true;
        }
        for &ns in shape.later_passes(k) {
            pending.push(itl, ns);
        }
    }
    false
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_core::TokenEmission;

    fn request(id: u64) -> Request {
        Request {
            id: RequestId(id),
            prompt_tokens: 300,
            max_output_tokens: 3,
            prefix_hashes: vec![],
            hash_block_tokens: 512,
            session: None,
            arrival: Instant::ZERO,
        }
    }

    fn step(start_ms: u64, passes_ms: &[u64]) -> WorkerEvent {
        let passes: Vec<Duration> = passes_ms
            .iter()
            .map(|&m| Duration::from_millis(m))
            .collect();
        WorkerEvent::Step {
            start: Instant::ZERO + Duration::from_millis(start_ms),
            steps: passes.len() as u64,
            duration: passes.iter().copied().sum(),
            first_step: passes[0],
            last_step: passes[passes.len() - 1],
            passes: if passes.len() > 1 { passes } else { vec![] },
            prefill_tokens: 0,
        }
    }

    fn tokens(id: u64, n: u32, first: bool) -> WorkerEvent {
        WorkerEvent::Tokens {
            emissions: vec![TokenEmission {
                request: RequestId(id),
                tokens: n,
                first,
            }],
        }
    }

    fn recorder() -> Recorder {
        Recorder::new(
            &ReplayConfig::default(),
            [(WorkerId(0), Pool::Prefill), (WorkerId(1), Pool::Decode)].into_iter(),
        )
    }

    #[test]
    fn a_migrated_request_keeps_its_prompt() {
        let mut rec = recorder();
        rec.arrival(&request(1));
        rec.migrated(RequestId(1));
        let d = WorkerId(1);
        rec.event(d, Pool::Decode, &step(10, &[5]), false);
        rec.event(d, Pool::Decode, &tokens(1, 1, true), false);
        let at = Instant::ZERO + Duration::from_millis(15);
        let done = WorkerEvent::RequestFinished {
            request: RequestId(1),
            at,
        };
        rec.event(d, Pool::Decode, &done, false);
        let report = rec.finish(at, std::iter::empty());
        assert_eq!(report.total_input_tokens, 300);
        assert_eq!(report.completed_requests, 1);
    }

    /// Token times come from the passes' own times, not a line through the
    /// first and last (a prefill first pass, then decodes that slow down).
    #[test]
    fn multi_pass_token_times_are_the_passes_own() {
        let mut one = recorder();
        let mut many = recorder();
        let d = WorkerId(1);
        for r in [&mut one, &mut many] {
            r.arrival(&request(1));
        }
        let passes = [40u64, 10, 11, 13];
        let mut t = 0;
        for &p in &passes {
            one.event(d, Pool::Decode, &step(t, &[p]), false);
            one.event(d, Pool::Decode, &tokens(1, 1, t == 0), false);
            t += p;
        }
        many.event(d, Pool::Decode, &step(0, &passes), false);
        many.event(d, Pool::Decode, &tokens(1, 4, true), false);
        let at = Instant::ZERO + Duration::from_millis(t);
        let done = WorkerEvent::RequestFinished {
            request: RequestId(1),
            at,
        };
        let a = {
            one.event(d, Pool::Decode, &done, false);
            serde_json::to_string(&one.finish(at, std::iter::empty())).expect("json")
        };
        let b = {
            many.event(d, Pool::Decode, &done, false);
            serde_json::to_string(&many.finish(at, std::iter::empty())).expect("json")
        };
        assert_eq!(a, b);
        assert!(a.contains("\"max_itl_ms\":13.0"), "{a}");
    }
}
