//! The series gateways read besides the engines' core set, under the names
//! each consumer looks for (`docs/gateways.md` lists who reads what).
//!
//! - `<engine>:cache_config_info`, an info gauge set to 1 whose labels carry
//!   the cache geometry: vLLM's `block_size` and `num_gpu_blocks`
//!   (`vllm/v1/metrics/loggers.py`, `PrometheusStatLogger.log_metrics_info`,
//!   labels from `CacheConfig.metrics_info()`, plus `engine`), SGLang's
//!   `page_size` and `num_pages`. llm-d's endpoint picker reads both
//!   (`llm-d/llm-d-router`,
//!   `pkg/epp/framework/plugins/datalayer/extractor/metrics/factories.go`,
//!   `defaultEngineConfigs`). Of vLLM's other `CacheConfig` fields only
//!   `enable_prefix_caching` is written: the mock has no values for the rest.
//! - `vllm:lora_requests_info` (labels `max_lora`, `waiting_lora_adapters`,
//!   `running_lora_adapters`, comma-separated names), whose value is the
//!   Unix time of its last update (`set_to_current_time` in
//!   `PrometheusStatLogger.record`); llm-d and AIBrix
//!   (`vllm-project/aibrix`, `pkg/metrics/metrics.go`, `MaxLora`,
//!   `RunningLoraAdapters`, `WaitingLoraAdapters`) read its labels. It
//!   exists only with LoRA served (`serve --enable-lora`, `--lora-modules`),
//!   as `PrometheusStatLogger` creates `gauge_lora_info` only when the
//!   engine has a `lora_config`: without it `/metrics` has no such family.
//!   Unlike vLLM's it also carries the worker's labels (`engine`,
//!   `role`, ...), so a worker's own `/metrics` keeps it.
//!   `max_lora` is `--max-loras` and the lists name the adapters with requests waiting
//!   for, and running on, that worker (vLLM `vllm/v1/metrics/stats.py`,
//!   `LoRARequestStates`; `loggers.py` joins the names with `,` in the
//!   order its dicts first saw them: here, the order of each adapter's
//!   oldest request in the state). A request waits from its routing to its
//!   first token and runs from then to its end. Where vLLM keeps every
//!   label set it ever wrote (each with the time of its last write; readers
//!   take the newest), a worker here keeps only its current one, so the
//!   series stay bounded.
//! - `vllm:gpu_cache_usage_perc`, vLLM's deprecated name for
//!   `kv_cache_usage_perc`, set to the same value (AIBrix reads either).
//! - `vllm:time_per_output_token_seconds`, observed with every inter-token
//!   gap as `inter_token_latency_seconds` is (AIBrix's `TimePerOutputToken`
//!   reads either name), on vLLM's TPOT buckets.
//! - `<engine>:prompt_tokens_total` and `<engine>:generation_tokens_total`
//!   (vLLM's `counter_prompt_tokens`, `counter_generation_tokens`; SGLang's
//!   `sglang/srt/metrics/collector.py` has the same names): here a prompt's
//!   tokens count on the worker that prefills it when it is routed there,
//!   and output tokens on the worker that streams them to the client.
//! - `sglang:num_waiting_reqs` beside `sglang:num_queue_reqs`, the same
//!   value: AIBrix reads the first name, llm-d the second.

use super::{Count, FGauge, Hist, IGauge, WorkerLabels};
use handoff_deployment::EngineSpec;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// One worker's `lora_requests_info` lists and last label set.
#[derive(Clone, Debug, Default)]
struct LoraLists {
    running: String,
    waiting: String,
    written: Option<InfoLabels>,
}

/// An info gauge's labels: a worker's labels, then the info's own.
pub(crate) type InfoLabels = Vec<(String, String)>;

/// vLLM's TPOT and ITL buckets (`histogram_time_per_output_token` in
/// `vllm/v1/metrics/loggers.py`).
pub(crate) const TPOT_BUCKETS: [f64; 19] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];

/// vLLM's TTFT buckets (`histogram_time_to_first_token`).
pub(crate) const TTFT_BUCKETS: [f64; 22] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];

/// vLLM's request latency buckets (`request_latency_buckets`: e2e and
/// queue time).
pub(crate) const REQUEST_BUCKETS: [f64; 21] = [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

pub(crate) fn tpot_hist() -> Histogram {
    Histogram::new(TPOT_BUCKETS)
}

/// The gateway series of one registry.
pub(crate) struct GatewaySeries {
    sglang: bool,
    cache_info: Family<InfoLabels, Gauge>,
    lora_info: Family<InfoLabels, Gauge<f64, AtomicU64>>,
    /// `--max-loras`, 0 without LoRA.
    max_lora: AtomicU32,
    /// The registry holding `lora_info` alone (vLLM only), rendered only
    /// with LoRA served ([`GatewaySeries::splice_lora`]).
    lora_registry: OnceLock<Registry>,
    /// Each worker's adapter lists (running, waiting) and the label set it
    /// last wrote, by scheduler id.
    lora_state: Mutex<Vec<LoraLists>>,
    gpu_cache_usage: Option<FGauge>,
    waiting_alias: Option<IGauge>,
    tpot: Option<Hist>,
    prompt_tokens: Count,
    generation_tokens: Count,
}

/// `l`'s labels as pairs, in the order [`WorkerLabels`] writes them, so a
/// worker's filter (`engine="W"`) finds them.
fn pairs(l: &WorkerLabels) -> InfoLabels {
    let mut v = vec![
        ("model_name".to_string(), l.model_name.clone()),
        ("engine".to_string(), l.engine.clone()),
    ];
    if let Some(r) = &l.dp_rank {
        v.push(("dp_rank".to_string(), r.clone()));
    }
    v.push(("role".to_string(), l.role.clone()));
    v
}

/// The blocks of `spec`'s pool, as its core sizes it
/// (`handoff_deployment::EngineSpec`'s vLLM `num_blocks` and SGLang
/// `total_pages`: KV tokens over the block size, at least one).
fn pool_blocks(spec: &EngineSpec) -> u64 {
    (spec.kv_tokens / u64::from(spec.block_size.max(1))).max(1)
}

impl GatewaySeries {
    pub(crate) fn new(sglang: bool) -> Self {
        GatewaySeries {
            sglang,
            cache_info: Family::default(),
            lora_info: Family::default(),
            max_lora: AtomicU32::new(0),
            lora_registry: OnceLock::new(),
            lora_state: Mutex::new(Vec::new()),
            gpu_cache_usage: (!sglang).then(FGauge::default),
            waiting_alias: sglang.then(IGauge::default),
            tpot: (!sglang).then(|| Hist::new_with_constructor(tpot_hist as fn() -> Histogram)),
            prompt_tokens: Count::default(),
            generation_tokens: Count::default(),
        }
    }

    pub(crate) fn register(&self, registry: &mut Registry, p: &str) {
        let n = |s: &str| format!("{p}{s}");
        registry.register(
            n("cache_config_info"),
            "Information of the engine's KV cache configuration",
            self.cache_info.clone(),
        );
        if let Some(g) = &self.gpu_cache_usage {
            registry.register(
                n("gpu_cache_usage_perc"),
                "KV cache usage, 0-1 (vLLM's deprecated name for kv_cache_usage_perc)",
                g.clone(),
            );
            let mut lora = Registry::default();
            lora.register(
                n("lora_requests_info"),
                "Running stats on LoRA requests",
                self.lora_info.clone(),
            );
            let _ = self.lora_registry.set(lora);
        }
        if let Some(g) = &self.waiting_alias {
            registry.register(
                n("num_waiting_reqs"),
                "Requests waiting for admission (num_queue_reqs under AIBrix's name)",
                g.clone(),
            );
        }
        if let Some(h) = &self.tpot {
            registry.register(
                n("time_per_output_token_seconds"),
                "Time per output token (each inter-token gap)",
                h.clone(),
            );
        }
        registry.register(
            n("prompt_tokens"),
            "Prompt tokens routed to this worker for prefill",
            self.prompt_tokens.clone(),
        );
        registry.register(
            n("generation_tokens"),
            "Output tokens this worker streamed",
            self.generation_tokens.clone(),
        );
    }

    /// Writes every worker's `cache_config_info` from its engine spec
    /// (`labels` and `specs` by scheduler id).
    pub(crate) fn cache_config(&self, labels: &[WorkerLabels], specs: &[EngineSpec]) {
        let (size, count) = if self.sglang {
            ("page_size", "num_pages")
        } else {
            ("block_size", "num_gpu_blocks")
        };
        for (l, s) in labels.iter().zip(specs) {
            let mut v = pairs(l);
            v.push((size.to_string(), s.block_size.to_string()));
            v.push((count.to_string(), pool_blocks(s).to_string()));
            if !self.sglang {
                v.push(("enable_prefix_caching".to_string(), "True".to_string()));
            }
            self.cache_info.get_or_create(&v).set(1);
        }
    }

    /// Whether LoRA is served (a `--max-loras` was set).
    fn lora_served(&self) -> bool {
        !self.sglang && self.max_lora.load(Ordering::Relaxed) > 0
    }

    /// Puts `lora_requests_info`'s OpenMetrics text into `text` (the main
    /// registry's, ending `# EOF`) before its end, with LoRA served; leaves
    /// `text` as it is without.
    pub(crate) fn splice_lora(&self, text: &mut String) {
        let Some(r) = self.lora_registry.get().filter(|_| self.lora_served()) else {
            return;
        };
        let mut lora = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut lora, r);
        let body = lora.strip_suffix("# EOF\n").unwrap_or(&lora);
        let at = text.rfind("# EOF\n").unwrap_or(text.len());
        text.insert_str(at, body);
    }

    /// Sets every worker's `lora_requests_info` to `unix` seconds (vLLM
    /// sets it to the current time whenever it records), with LoRA served.
    pub(crate) fn lora_now(&self, labels: &[WorkerLabels], unix: f64) {
        if !self.lora_served() {
            return;
        }
        let max = self.max_lora.load(Ordering::Relaxed).to_string();
        let Ok(mut state) = self.lora_state.lock() else {
            return;
        };
        if state.len() < labels.len() {
            state.resize(labels.len(), LoraLists::default());
        }
        for (l, s) in labels.iter().zip(state.iter_mut()) {
            let mut v = pairs(l);
            v.push(("max_lora".to_string(), max.clone()));
            v.push(("running_lora_adapters".to_string(), s.running.clone()));
            v.push(("waiting_lora_adapters".to_string(), s.waiting.clone()));
            if let Some(old) = s.written.take().filter(|o| *o != v) {
                self.lora_info.remove(&old);
            }
            self.lora_info.get_or_create(&v).set(unix);
            s.written = Some(v);
        }
    }

    /// `--max-loras`, written as `max_lora`.
    pub(crate) fn set_max_lora(&self, n: u32) {
        self.max_lora.store(n, Ordering::Relaxed);
    }

    /// Worker `w`'s adapters with running and with waiting requests,
    /// comma-separated.
    pub(crate) fn lora_adapters(&self, w: usize, running: String, waiting: String) {
        if let Ok(mut state) = self.lora_state.lock() {
            if state.len() <= w {
                state.resize(w + 1, LoraLists::default());
            }
            state[w].running = running;
            state[w].waiting = waiting;
        }
    }

    pub(crate) fn usage(&self, l: &WorkerLabels, usage: f64, waiting: i64) {
        if let Some(g) = &self.gpu_cache_usage {
            g.get_or_create(l).set(usage);
        }
        if let Some(g) = &self.waiting_alias {
            g.get_or_create(l).set(waiting);
        }
    }

    pub(crate) fn gap(&self, l: &WorkerLabels, secs: f64) {
        if let Some(h) = &self.tpot {
            h.get_or_create(l).observe(secs);
        }
    }

    pub(crate) fn prompt(&self, l: &WorkerLabels, tokens: u64) {
        self.prompt_tokens.get_or_create(l).inc_by(tokens);
    }

    pub(crate) fn generated(&self, l: &WorkerLabels, tokens: u64) {
        self.generation_tokens.get_or_create(l).inc_by(tokens);
    }

    /// Lists `l`'s series at zero.
    pub(crate) fn touch(&self, l: &WorkerLabels) {
        if let Some(g) = &self.gpu_cache_usage {
            let _ = g.get_or_create(l);
        }
        if let Some(g) = &self.waiting_alias {
            let _ = g.get_or_create(l);
        }
        if let Some(h) = &self.tpot {
            let _ = h.get_or_create(l);
        }
        let _ = self.prompt_tokens.get_or_create(l);
        let _ = self.generation_tokens.get_or_create(l);
    }
}
