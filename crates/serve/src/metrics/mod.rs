//! Prometheus metrics with the engines' own names, one label set per worker.
//!
//! vLLM (`vllm/v1/metrics/loggers.py`, `PrometheusStatLogger`):
//! `vllm:num_requests_running`, `vllm:num_requests_waiting`,
//! `vllm:kv_cache_usage_perc` (a 0-1 fraction despite the name),
//! `vllm:prefix_cache_queries_total` and `vllm:prefix_cache_hits_total`
//! (tokens), `vllm:num_preemptions_total`, `vllm:request_success_total`
//! (without vLLM's `finished_reason` label: the engine does not know
//! whether the client's `max_tokens` or its EOS ended a request), and the histograms
//! `vllm:time_to_first_token_seconds`, `vllm:inter_token_latency_seconds`,
//! `vllm:e2e_request_latency_seconds`, `vllm:request_queue_time_seconds`.
//! SGLang (`sglang/srt/metrics/collector.py`): `sglang:num_running_reqs`,
//! `sglang:num_queue_reqs`, `sglang:token_usage`, `sglang:cache_hit_rate`,
//! `sglang:num_requests_total` (`TokenizerMetricsCollector`),
//! `sglang:time_to_first_token_seconds`, `sglang:inter_token_latency_seconds`,
//! `sglang:e2e_request_latency_seconds`, `sglang:queue_time_seconds`.
//! Both: this project's handoff series in the same style
//! (`<engine>:handoff_pinned_source_blocks`,
//! `<engine>:handoff_reserved_destination_blocks`,
//! `<engine>:handoff_reservation_waits_total`,
//! `<engine>:handoff_lease_expiries_total`,
//! `<engine>:handoff_reservation_expiries_total`), and
//! `<engine>:handoff_requests_failed_total` labelled by `model_name` and
//! the [`FailureReason`]'s name (the frontend's, so no `engine` label).
//!
//! Labels: `model_name`, `engine` (the worker id), with `--dp-size` above 1
//! `dp_rank` (each rank is its own scheduler with its own series), and
//! `role` (prefill, decode, aggregated). Gauges
//! are set from each worker's `KvCapacitySnapshot` after every engine
//! instant; latencies are in model seconds (wall seconds at `--speed 1`).
//! How the counted quantities are defined here: a prefix cache query is a
//! prompt routed to a prefill (or aggregated) worker, counted in tokens, and
//! its hits are the tokens of the leading prompt blocks that worker had
//! published as stored when the request was routed (the same number the
//! response's `cached_tokens` reports). Queue time is how long a destination
//! waited for its reservation (`Reserving` to `Reserved`); prefill-side
//! queueing is not visible in worker events.

pub(crate) mod fleet;
mod gateway;
pub(crate) mod info;
pub(crate) mod nixl;
pub(crate) mod slo;

use handoff_core::{Backend, DpLayout, FailureReason, KvCapacitySnapshot, WorkerId};
use handoff_router::Pool;
use prometheus_client::encoding::{EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// One scheduler's labels: its worker and, with attention data
/// parallelism, its rank.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct WorkerLabels {
    /// The served model name.
    pub model_name: String,
    /// The worker id.
    pub engine: String,
    /// The rank within the worker; written only with `--dp-size` above 1,
    /// so a one-rank deployment's series are unchanged.
    pub dp_rank: Option<String>,
    /// prefill, decode or aggregated.
    pub role: String,
}

impl EncodeLabelSet for WorkerLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        let mut l: Vec<(&str, &str)> =
            vec![("model_name", &self.model_name), ("engine", &self.engine)];
        if let Some(r) = &self.dp_rank {
            l.push(("dp_rank", r));
        }
        l.push(("role", &self.role));
        l.as_slice().encode(encoder)
    }
}

/// A failure's labels: the model and why.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    /// The served model name.
    pub model_name: String,
    /// The [`FailureReason`]'s name.
    pub reason: String,
}

type FGauge = Family<WorkerLabels, Gauge<f64, AtomicU64>>;
type IGauge = Family<WorkerLabels, Gauge>;
type Count = Family<WorkerLabels, Counter>;
type Hist = Family<WorkerLabels, Histogram, fn() -> Histogram>;

/// vLLM's TTFT buckets: every latency of SGLang's series, and vLLM's TTFT.
fn latency_hist() -> Histogram {
    Histogram::new(gateway::TTFT_BUCKETS)
}

/// vLLM's request latency buckets: its e2e and queue time.
fn request_hist() -> Histogram {
    Histogram::new(gateway::REQUEST_BUCKETS)
}

/// The registry and every family in it.
pub struct Metrics {
    registry: Registry,
    labels: Vec<WorkerLabels>,
    running: IGauge,
    waiting: IGauge,
    usage: FGauge,
    cache_hit_rate: Option<FGauge>,
    pinned: IGauge,
    reserved: IGauge,
    queries: Count,
    hits: Count,
    preemptions: Count,
    success: Count,
    reservation_waits: Count,
    lease_expiries: Count,
    stale_reads: Count,
    stale_reused: Count,
    reservation_expiries: Count,
    ttft: Hist,
    itl: Hist,
    e2e: Hist,
    queue: Hist,
    model: String,
    failed: Family<FailureLabels, Counter>,
    gw: gateway::GatewaySeries,
    /// `--slo` / `--gpu-hour-usd` series ([`slo`]).
    slo: Option<slo::SloMetrics>,
    /// The elastic fleet's gauge (`serve --admin`, [`fleet`]).
    fleet: Option<fleet::FleetGauges>,
    /// vLLM's NIXL connector series ([`nixl`]); SGLang exports none.
    nixl: Option<nixl::NixlSeries>,
    /// The P/D conformance report's tally ([`crate::conformance`]).
    conformance: crate::conformance::Ledger,
}

fn role(p: Pool) -> &'static str {
    match p {
        Pool::Prefill => "prefill",
        Pool::Decode => "decode",
        Pool::Aggregated => "aggregated",
    }
}

impl Metrics {
    #[cfg(test)]
    /// Metrics for `workers` (their pools, by id) of `backend`, serving
    /// `model`.
    pub fn new(backend: Backend, model: &str, workers: &[Pool]) -> Self {
        Self::with_ranks(backend, model, workers, DpLayout::SINGLE)
    }

    /// [`Metrics::new`] for schedulers `workers` laid out by `dp`: each
    /// labelled with its worker as `engine` and, with several ranks, its
    /// rank as `dp_rank`.
    pub fn with_ranks(backend: Backend, model: &str, workers: &[Pool], dp: DpLayout) -> Self {
        let sglang = backend == Backend::Sglang;
        let p = if sglang { "sglang:" } else { "vllm:" };
        let mut registry = Registry::default();
        let labels = workers
            .iter()
            .enumerate()
            .map(|(i, pool)| {
                let at = dp.address(WorkerId(i as u32));
                WorkerLabels {
                    model_name: model.to_string(),
                    engine: at.worker.0.to_string(),
                    dp_rank: dp.is_split().then(|| at.dp_rank.0.to_string()),
                    role: role(*pool).to_string(),
                }
            })
            .collect();
        let hist = || Hist::new_with_constructor(latency_hist as fn() -> Histogram);
        // vLLM's own buckets per histogram (`vllm/v1/metrics/loggers.py`).
        let (gap, request) = if sglang {
            (hist(), hist())
        } else {
            (
                Hist::new_with_constructor(gateway::tpot_hist as fn() -> Histogram),
                Hist::new_with_constructor(request_hist as fn() -> Histogram),
            )
        };
        let m = Metrics {
            labels,
            running: IGauge::default(),
            waiting: IGauge::default(),
            usage: FGauge::default(),
            cache_hit_rate: sglang.then(FGauge::default),
            pinned: IGauge::default(),
            reserved: IGauge::default(),
            queries: Count::default(),
            hits: Count::default(),
            preemptions: Count::default(),
            success: Count::default(),
            reservation_waits: Count::default(),
            lease_expiries: Count::default(),
            stale_reads: Count::default(),
            stale_reused: Count::default(),
            reservation_expiries: Count::default(),
            ttft: hist(),
            itl: gap,
            e2e: request,
            queue: Hist::new_with_constructor(if sglang {
                latency_hist as fn() -> Histogram
            } else {
                request_hist as fn() -> Histogram
            }),
            model: model.to_string(),
            failed: Family::default(),
            slo: None,
            fleet: None,
            registry: Registry::default(),
            gw: gateway::GatewaySeries::new(sglang),
            nixl: (!sglang).then(nixl::NixlSeries::new),
            conformance: crate::conformance::Ledger::new(backend, model, workers.len()),
        };
        m.register_engine(&mut registry, p, sglang);
        m.register_handoff(&mut registry, p);
        m.register_latency(&mut registry, p, sglang);
        m.gw.register(&mut registry, p);
        if let Some(n) = &m.nixl {
            n.register(&mut registry);
        }
        m.conformance.register(&mut registry, p);
        Metrics { registry, ..m }
    }

    /// The gauges and counters under the engine's own names: batch,
    /// queue, KV usage, prefix cache, preemptions.
    fn register_engine(&self, registry: &mut Registry, p: &str, sglang: bool) {
        let (running, waiting, usage) = if sglang {
            ("num_running_reqs", "num_queue_reqs", "token_usage")
        } else {
            (
                "num_requests_running",
                "num_requests_waiting",
                "kv_cache_usage_perc",
            )
        };
        let n = |s: &str| format!("{p}{s}");
        registry.register(
            n(running),
            "Requests in the running batch",
            self.running.clone(),
        );
        registry.register(
            n(waiting),
            "Requests waiting for admission",
            self.waiting.clone(),
        );
        registry.register(
            n(usage),
            "KV cache usage: used blocks (active, pinned, reserved) over total, 0-1",
            self.usage.clone(),
        );
        if let Some(c) = &self.cache_hit_rate {
            registry.register(
                n("cache_hit_rate"),
                "Prefix cache hit rate: hit tokens over queried tokens",
                c.clone(),
            );
        }
        registry.register(
            n("prefix_cache_queries"),
            "Prompt tokens routed to this worker's prefix cache",
            self.queries.clone(),
        );
        registry.register(
            n("prefix_cache_hits"),
            "Prompt tokens found in this worker's prefix cache",
            self.hits.clone(),
        );
        registry.register(
            n("num_preemptions"),
            "Preempted (vLLM) or retracted (SGLang) requests",
            self.preemptions.clone(),
        );
        registry.register(
            n(if sglang {
                "num_requests"
            } else {
                "request_success"
            }),
            "Requests finished: their stream ended with its last token, or \
             a pinned prefill answered with its kv_transfer_params",
            self.success.clone(),
        );
    }

    /// The handoff's own gauges and counters: pinned and reserved blocks,
    /// reservation waits, lease and reservation expiries.
    fn register_handoff(&self, registry: &mut Registry, p: &str) {
        let n = |s: &str| format!("{p}{s}");
        registry.register(
            n("handoff_pinned_source_blocks"),
            "KV blocks of finished prefills held for their reader",
            self.pinned.clone(),
        );
        registry.register(
            n("handoff_reserved_destination_blocks"),
            "KV blocks reserved for incoming handoffs, not yet active",
            self.reserved.clone(),
        );
        registry.register(
            n("handoff_reservation_waits"),
            "Destination reservations that had to wait for capacity",
            self.reservation_waits.clone(),
        );
        registry.register(
            n("handoff_lease_expiries"),
            "Source leases that expired before their reader completed",
            self.lease_expiries.clone(),
        );
        registry.register(
            n("handoff_stale_kv_reads"),
            "Reads that ended after their source had released the KV (they \
             complete, as in vLLM, on KV that may be another request's)",
            self.stale_reads.clone(),
        );
        registry.register(
            n("handoff_stale_kv_reads_reused"),
            "Stale reads whose released blocks had already gone to another request",
            self.stale_reused.clone(),
        );
        registry.register(
            n("handoff_reservation_expiries"),
            "Destination reservations that expired",
            self.reservation_expiries.clone(),
        );
    }

    /// The latency histograms and the failures by reason.
    fn register_latency(&self, registry: &mut Registry, p: &str, sglang: bool) {
        let n = |s: &str| format!("{p}{s}");
        let queue = if sglang {
            "queue_time_seconds"
        } else {
            "request_queue_time_seconds"
        };
        registry.register(
            n("time_to_first_token_seconds"),
            "Time to first token",
            self.ttft.clone(),
        );
        registry.register(
            n("inter_token_latency_seconds"),
            "Time between output tokens",
            self.itl.clone(),
        );
        registry.register(
            n("e2e_request_latency_seconds"),
            "End-to-end request latency",
            self.e2e.clone(),
        );
        registry.register(
            n(queue),
            "Time a destination waited for its reservation",
            self.queue.clone(),
        );
        registry.register(
            n("handoff_requests_failed"),
            "Requests that ended without completing, by reason",
            self.failed.clone(),
        );
    }

    fn l(&self, w: usize) -> Option<&WorkerLabels> {
        self.labels.get(w)
    }

    /// Sets worker `w`'s gauges from its capacity snapshot.
    pub fn capacity(&self, w: usize, c: &KvCapacitySnapshot) {
        let Some(l) = self.l(w) else { return };
        let i = |x: u64| i64::try_from(x).unwrap_or(i64::MAX);
        self.running.get_or_create(l).set(i(c.running_requests));
        self.waiting.get_or_create(l).set(i(c.waiting_requests));
        self.usage.get_or_create(l).set(c.usage());
        self.gw.usage(l, c.usage(), i(c.waiting_requests));
        self.pinned.get_or_create(l).set(i(c.pinned_source_blocks));
        self.reserved
            .get_or_create(l)
            .set(i(c.reserved_destination_blocks));
    }

    /// A prompt of `tokens` was routed to worker `w` with `hit` of them cached.
    pub fn prefix_query(&self, w: usize, tokens: u64, hit: u64) {
        let Some(l) = self.l(w) else { return };
        self.gw.prompt(l, tokens);
        let q = self.queries.get_or_create(l).inc_by(tokens) + tokens;
        let h = self.hits.get_or_create(l).inc_by(hit) + hit;
        if let Some(rate) = &self.cache_hit_rate {
            rate.get_or_create(l)
                .set(if q == 0 { 0.0 } else { h as f64 / q as f64 });
        }
    }

    /// Worker `w` preempted a request.
    pub fn preempted(&self, w: usize) {
        if let Some(l) = self.l(w) {
            self.preemptions.get_or_create(l).inc();
        }
    }

    /// Worker `w` finished a request (its last token streamed, or a
    /// pinned prefill answered).
    pub fn request_succeeded(&self, w: usize) {
        if let Some(l) = self.l(w) {
            self.success.get_or_create(l).inc();
        }
    }

    /// A destination on `w` waited `secs` for its reservation.
    pub fn reservation_wait(&self, w: usize, secs: f64) {
        if let Some(l) = self.l(w) {
            self.reservation_waits.get_or_create(l).inc();
            self.queue.get_or_create(l).observe(secs);
        }
    }

    /// A source lease on `w` expired.
    pub fn lease_expired(&self, w: usize) {
        if let Some(l) = self.l(w) {
            self.lease_expiries.get_or_create(l).inc();
        }
    }

    /// A destination on `w` read KV its source had released; `reused`
    /// when a released block had gone to another request first.
    pub fn stale_read(&self, w: usize, reused: bool) {
        if let Some(l) = self.l(w) {
            self.stale_reads.get_or_create(l).inc();
            if reused {
                self.stale_reused.get_or_create(l).inc();
            }
        }
    }

    /// A destination reservation on `w` expired.
    pub fn reservation_expired(&self, w: usize) {
        if let Some(l) = self.l(w) {
            self.reservation_expiries.get_or_create(l).inc();
        }
    }

    /// KV bytes one token weighs in a transfer (the transfer model's).
    pub fn set_kv_bytes_per_token(&self, b: u64) {
        if let Some(n) = &self.nixl {
            n.set_kv_bytes_per_token(b);
        }
    }

    /// The NIXL series and scheduler `w`'s labels, on a vLLM engine.
    pub(crate) fn nixl(&self, w: usize) -> Option<(&nixl::NixlSeries, &WorkerLabels)> {
        Some((self.nixl.as_ref()?, self.l(w)?))
    }

    /// Latency observations on `w`, in seconds.
    pub fn ttft(&self, w: usize, secs: f64) {
        if let Some(l) = self.l(w) {
            self.ttft.get_or_create(l).observe(secs);
        }
    }

    /// An inter-token gap on `w`, in seconds.
    pub fn itl(&self, w: usize, secs: f64) {
        if let Some(l) = self.l(w) {
            self.itl.get_or_create(l).observe(secs);
            self.gw.gap(l, secs);
        }
    }

    /// Worker `w` streamed `tokens` output tokens to a client.
    pub fn generated(&self, w: usize, tokens: u64) {
        if let Some(l) = self.l(w) {
            self.gw.generated(l, tokens);
        }
    }

    /// Writes every worker's `cache_config_info` from its engine spec, by
    /// scheduler id.
    pub fn cache_config(&self, specs: &[handoff_deployment::EngineSpec]) {
        self.gw.cache_config(&self.labels, specs);
    }

    /// A request's end-to-end latency on its decode worker `w`, in seconds.
    pub fn e2e(&self, w: usize, secs: f64) {
        if let Some(l) = self.l(w) {
            self.e2e.get_or_create(l).observe(secs);
        }
    }

    /// The P/D conformance report's tally.
    pub(crate) fn conformance(&self) -> &crate::conformance::Ledger {
        &self.conformance
    }

    /// A request failed for `reason`.
    pub fn request_failed(&self, reason: FailureReason) {
        self.request_failed_as(reason.name());
    }

    /// A request failed for a reason the edge names (a client-injected
    /// fault, `http::client_faults`).
    pub fn request_failed_as(&self, reason: &str) {
        let labels = FailureLabels {
            model_name: self.model.clone(),
            reason: reason.to_string(),
        };
        self.failed.get_or_create(&labels).inc();
    }

    /// `--max-loras`, the `max_lora` label of `vllm:lora_requests_info`.
    pub fn set_max_lora(&self, n: u32) {
        self.gw.set_max_lora(n);
    }

    /// Worker `w`'s adapters with running and with waiting requests, each
    /// list comma-separated ([`gateway`]'s `lora_requests_info`).
    pub fn lora_adapters(&self, w: usize, running: String, waiting: String) {
        self.gw.lora_adapters(w, running, waiting);
    }

    /// The OpenMetrics text of every worker, or of worker `only`.
    pub fn render(&self, only: Option<usize>) -> String {
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.gw.lora_now(&self.labels, unix);
        let mut s = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut s, &self.registry);
        self.gw.splice_lora(&mut s);
        match only {
            None => s,
            Some(w) => {
                // Keep one worker's samples; metadata lines stay.
                let tag = format!("engine=\"{w}\"");
                let mut out = String::with_capacity(s.len());
                for line in s.lines() {
                    if line.starts_with('#') || line.contains(&tag) {
                        out.push_str(line);
                        out.push('\n');
                    }
                }
                out
            }
        }
    }

    /// Registers every worker's series, so a scrape before any traffic
    /// already lists them (at zero).
    pub fn touch_all(&self) {
        for l in &self.labels {
            let _ = self.running.get_or_create(l);
            let _ = self.waiting.get_or_create(l);
            let _ = self.usage.get_or_create(l);
            if let Some(c) = &self.cache_hit_rate {
                let _ = c.get_or_create(l);
            }
            let _ = self.pinned.get_or_create(l);
            let _ = self.reserved.get_or_create(l);
            let _ = self.queries.get_or_create(l);
            let _ = self.hits.get_or_create(l);
            let _ = self.preemptions.get_or_create(l);
            let _ = self.success.get_or_create(l);
            let _ = self.reservation_waits.get_or_create(l);
            let _ = self.lease_expiries.get_or_create(l);
            let _ = self.stale_reads.get_or_create(l);
            let _ = self.stale_reused.get_or_create(l);
            let _ = self.reservation_expiries.get_or_create(l);
            let _ = self.ttft.get_or_create(l);
            let _ = self.itl.get_or_create(l);
            let _ = self.e2e.get_or_create(l);
            let _ = self.queue.get_or_create(l);
            self.gw.touch(l);
            if let Some(n) = &self.nixl {
                n.touch(l);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_values() {
        let m = Metrics::new(Backend::Vllm, "mock", &[Pool::Prefill, Pool::Decode]);
        m.touch_all();
        m.capacity(
            1,
            &KvCapacitySnapshot {
                total_blocks: 100,
                active_blocks: 20,
                reserved_destination_blocks: 5,
                running_requests: 3,
                ..KvCapacitySnapshot::default()
            },
        );
        m.prefix_query(0, 64, 32);
        let text = m.render(None);
        assert!(text.contains(
            "vllm:num_requests_running{model_name=\"mock\",engine=\"1\",role=\"decode\"} 3"
        ));
        assert!(text.contains(
            "vllm:kv_cache_usage_perc{model_name=\"mock\",engine=\"1\",role=\"decode\"} 0.25"
        ));
        assert!(text.contains(
            "vllm:prefix_cache_hits_total{model_name=\"mock\",engine=\"0\",role=\"prefill\"} 32"
        ));
        assert!(text.contains("vllm:handoff_reserved_destination_blocks{model_name=\"mock\",engine=\"1\",role=\"decode\"} 5"));
        assert!(text.contains("# TYPE vllm:time_to_first_token_seconds histogram"));
        let one = m.render(Some(0));
        assert!(!one.contains("engine=\"1\""));
        assert!(one.contains("engine=\"0\""));
    }

    /// `vllm:lora_requests_info` exists only with LoRA served, as vLLM's
    /// `PrometheusStatLogger` makes `gauge_lora_info` only with a
    /// `lora_config` (`vllm/v1/metrics/loggers.py`).
    #[test]
    fn the_lora_gauge_exists_only_with_lora_served() {
        let m = Metrics::new(Backend::Vllm, "mock", &[Pool::Aggregated]);
        m.touch_all();
        let text = m.render(None);
        assert!(!text.contains("lora_requests_info"), "{text}");
        assert!(text.ends_with("# EOF\n"));
        m.set_max_lora(2);
        m.lora_adapters(0, "sql".into(), String::new());
        let text = m.render(None);
        assert!(
            text.contains("# TYPE vllm:lora_requests_info gauge"),
            "{text}"
        );
        let line = text
            .lines()
            .find(|l| l.starts_with("vllm:lora_requests_info{"))
            .expect("a sample");
        assert!(line.contains("max_lora=\"2\"") && line.contains("running_lora_adapters=\"sql\""));
        assert_eq!(text.matches("# EOF").count(), 1);
        assert!(text.ends_with("# EOF\n"));
        let sglang = Metrics::new(Backend::Sglang, "mock", &[Pool::Aggregated]);
        sglang.set_max_lora(2);
        assert!(!sglang.render(None).contains("lora_requests_info"));
    }

    #[test]
    fn ranks_are_labelled_by_worker_and_dp_rank() {
        let dp = DpLayout::new(2).unwrap();
        let pools = [Pool::Prefill, Pool::Prefill, Pool::Decode, Pool::Decode];
        let m = Metrics::with_ranks(Backend::Sglang, "mock", &pools, dp);
        m.touch_all();
        m.capacity(
            3,
            &KvCapacitySnapshot {
                running_requests: 4,
                ..KvCapacitySnapshot::default()
            },
        );
        let text = m.render(None);
        assert!(text.contains(
            "sglang:num_running_reqs{model_name=\"mock\",engine=\"1\",dp_rank=\"1\",role=\"decode\"} 4"
        ));
        assert!(text.contains(
            "sglang:num_running_reqs{model_name=\"mock\",engine=\"0\",dp_rank=\"0\",role=\"prefill\"} 0"
        ));
        // Worker 1's series are both of its ranks.
        let one = m.render(Some(1));
        assert_eq!(one.matches("sglang:num_running_reqs{").count(), 2);
    }

    #[test]
    fn failures_count_by_reason_name() {
        use handoff_core::CancelReason;
        let m = Metrics::new(Backend::Vllm, "mock", &[Pool::Prefill, Pool::Decode]);
        m.request_failed(FailureReason::NoWorker);
        m.request_failed(FailureReason::Handoff(CancelReason::LeaseExpired));
        m.request_failed(FailureReason::Handoff(CancelReason::LeaseExpired));
        let text = m.render(None);
        assert!(text.contains(
            "vllm:handoff_requests_failed_total{model_name=\"mock\",reason=\"lease-expired\"} 2"
        ));
        assert!(text.contains(
            "vllm:handoff_requests_failed_total{model_name=\"mock\",reason=\"no-worker\"} 1"
        ));
        m.stale_read(1, true);
        m.stale_read(1, false);
        let text = m.render(None);
        let decode = "engine=\"1\",role=\"decode\"";
        let has = |name: &str, v: u32| {
            text.lines()
                .any(|l| l.starts_with(name) && l.contains(decode) && l.ends_with(&format!(" {v}")))
        };
        assert!(has("vllm:handoff_stale_kv_reads_total{", 2), "{text}");
        assert!(
            has("vllm:handoff_stale_kv_reads_reused_total{", 1),
            "{text}"
        );
    }

    #[test]
    fn sglang_names() {
        let m = Metrics::new(Backend::Sglang, "mock", &[Pool::Aggregated]);
        m.touch_all();
        m.prefix_query(0, 10, 5);
        let text = m.render(None);
        for name in [
            "sglang:num_running_reqs",
            "sglang:num_queue_reqs",
            "sglang:token_usage",
            "sglang:cache_hit_rate",
            "sglang:e2e_request_latency_seconds",
        ] {
            assert!(text.contains(name), "{name} missing");
        }
        assert!(text.contains(
            "sglang:cache_hit_rate{model_name=\"mock\",engine=\"0\",role=\"aggregated\"} 0.5"
        ));
    }
}
