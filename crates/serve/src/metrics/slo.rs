//! SLO series of `serve --slo` (and `--gpu-hour-usd`), in the engines'
//! naming style, labelled by `model_name` (the frontend's, no `engine`):
//!
//! - `<engine>:handoff_slo_judged_requests_total`: requests that ended;
//! - `<engine>:handoff_slo_met_requests_total{target="ttft:p90"}`: those
//!   that met the target (the recorder's judgement,
//!   `handoff_serving::report::SloVerdicts`: a completed request whose value is at
//!   most the bound);
//! - `<engine>:handoff_slo_good_requests_total` and
//!   `<engine>:handoff_slo_good_output_tokens_total`: requests meeting every
//!   target and their output tokens, so `rate()` of them is goodput;
//! - `<engine>:handoff_slo_target_seconds{target}`: each bound;
//!   `<engine>:handoff_slo_target_percentile{target}`: its percentile;
//! - `<engine>:handoff_gpus` (workers × DP ranks × TP) and, with a price,
//!   `<engine>:handoff_gpu_hour_usd`: cost per million output tokens is
//!   `gpus × price / 3600 / rate(tokens) × 1e6` in PromQL.
//!
//! Attainment is `met / judged`. Nothing here exists without `--slo` or
//! `--gpu-hour-usd`, so a server without them exposes what it did before.

use super::Metrics;
use handoff_deployment::ReportSizing;
use handoff_serving::report::RequestSink;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// The labels of a per-target series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TargetLabels {
    /// The served model name.
    pub model_name: String,
    /// `ttft:p90`.
    pub target: String,
}

/// The labels of a whole-run series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelLabels {
    /// The served model name.
    pub model_name: String,
}

type FGauge<L> = Family<L, Gauge<f64, AtomicU64>>;

/// The SLO and sizing series.
#[derive(Debug, Default)]
pub struct SloMetrics {
    judged: Family<ModelLabels, Counter>,
    met: Family<TargetLabels, Counter>,
    good: Family<ModelLabels, Counter>,
    good_tokens: Family<ModelLabels, Counter>,
    bound: FGauge<TargetLabels>,
    percentile: FGauge<TargetLabels>,
    gpus: Family<ModelLabels, Gauge>,
    price: FGauge<ModelLabels>,
}

impl SloMetrics {
    fn register(&self, registry: &mut Registry, p: &str, sizing: &ReportSizing) {
        let n = |s: &str| format!("{p}{s}");
        if sizing.slo.is_some() {
            registry.register(
                n("handoff_slo_judged_requests"),
                "Requests judged against the SLO (every request that ended)",
                self.judged.clone(),
            );
            registry.register(
                n("handoff_slo_met_requests"),
                "Requests that met an SLO target, by target",
                self.met.clone(),
            );
            registry.register(
                n("handoff_slo_good_requests"),
                "Completed requests that met every SLO target",
                self.good.clone(),
            );
            registry.register(
                n("handoff_slo_good_output_tokens"),
                "Output tokens of requests that met every SLO target",
                self.good_tokens.clone(),
            );
            registry.register(
                n("handoff_slo_target_seconds"),
                "Each SLO target's latency bound",
                self.bound.clone(),
            );
            registry.register(
                n("handoff_slo_target_percentile"),
                "Each SLO target's percentile",
                self.percentile.clone(),
            );
        }
        registry.register(
            n("handoff_gpus"),
            "GPUs the deployment occupies (workers x DP ranks x TP)",
            self.gpus.clone(),
        );
        if sizing.gpu_hour_usd.is_some() {
            registry.register(
                n("handoff_gpu_hour_usd"),
                "Price of one GPU-hour given with --gpu-hour-usd",
                self.price.clone(),
            );
        }
    }
}

impl Metrics {
    /// These metrics with the SLO and sizing series of `sizing` (none
    /// when `None`) for `gpus` GPUs; `backend_prefix` is `vllm:` or
    /// `sglang:` as for every other series.
    pub fn with_slo(mut self, sizing: Option<&ReportSizing>, gpus: u64, sglang: bool) -> Self {
        let Some(sizing) = sizing else {
            return self;
        };
        let s = SloMetrics::default();
        let p = if sglang { "sglang:" } else { "vllm:" };
        s.register(&mut self.registry, p, sizing);
        let model = ModelLabels {
            model_name: self.model.clone(),
        };
        s.gpus
            .get_or_create(&model)
            .set(i64::try_from(gpus).unwrap_or(i64::MAX));
        if let Some(price) = sizing.gpu_hour_usd {
            s.price.get_or_create(&model).set(price);
        }
        if let Some(spec) = &sizing.slo {
            let _ = s.judged.get_or_create(&model);
            let _ = s.good.get_or_create(&model);
            let _ = s.good_tokens.get_or_create(&model);
            for t in &spec.targets {
                let l = TargetLabels {
                    model_name: self.model.clone(),
                    target: t.label(),
                };
                let _ = s.met.get_or_create(&l);
                s.bound.get_or_create(&l).set(t.bound_ms / 1e3);
                s.percentile.get_or_create(&l).set(t.percentile);
            }
        }
        self.slo = Some(s);
        self
    }

    /// A request sink that counts each ended request's SLO verdicts, when
    /// `--slo` was given (the serving recorder judges each request and
    /// hands its record to the sink).
    pub fn slo_sink(self: &Arc<Self>) -> Option<RequestSink> {
        self.slo.as_ref()?;
        let m = self.clone();
        Some(Box::new(move |r: &handoff_serving::RequestRecord| {
            let (Some(s), Some(v)) = (m.slo.as_ref(), r.slo.as_ref()) else {
                return;
            };
            let model = ModelLabels {
                model_name: m.model.clone(),
            };
            s.judged.get_or_create(&model).inc();
            for (target, ok) in &v.met {
                if *ok {
                    let l = TargetLabels {
                        model_name: m.model.clone(),
                        target: target.clone(),
                    };
                    s.met.get_or_create(&l).inc();
                }
            }
            if v.all {
                s.good.get_or_create(&model).inc();
                s.good_tokens.get_or_create(&model).inc_by(r.output_tokens);
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_core::Backend;
    use handoff_router::Pool;

    fn record(id: u64, met: &[(&str, bool)], tokens: u64) -> handoff_serving::RequestRecord {
        handoff_serving::RequestRecord {
            id,
            outcome: "completed",
            failure_reason: None,
            arrival_ms: 0.0,
            end_ms: 1.0,
            input_tokens: 1,
            lora_name: None,
            output_tokens: tokens,
            ttft_ms: None,
            ttst_ms: None,
            tpot_ms: None,
            e2e_ms: None,
            prefill_worker: None,
            prefill_dp_rank: None,
            decode_worker: None,
            decode_dp_rank: None,
            handoff: Default::default(),
            session: None,
            stale_kv: None,
            slo: Some(handoff_serving::report::SloVerdicts {
                met: met.iter().map(|(l, b)| (l.to_string(), *b)).collect(),
                all: met.iter().all(|(_, b)| *b),
            }),
        }
    }

    #[test]
    fn counts_verdicts_and_exposes_the_bounds() {
        let sizing = ReportSizing {
            slo: Some("ttft:p90=600ms,tpot:p50=20ms".parse().unwrap()),
            gpus_per_rank: 2,
            decode_gpus_per_rank: None,
            gpu_hour_usd: Some(2.5),
        };
        let m = Arc::new(
            Metrics::new(Backend::Vllm, "mock", &[Pool::Prefill, Pool::Decode]).with_slo(
                Some(&sizing),
                4,
                false,
            ),
        );
        let mut sink = m.slo_sink().expect("a sink with --slo");
        sink(&record(0, &[("ttft:p90", true), ("tpot:p50", true)], 10));
        sink(&record(1, &[("ttft:p90", false), ("tpot:p50", true)], 7));
        let text = m.render(None);
        for line in [
            "vllm:handoff_slo_judged_requests_total{model_name=\"mock\"} 2",
            "vllm:handoff_slo_met_requests_total{model_name=\"mock\",target=\"ttft:p90\"} 1",
            "vllm:handoff_slo_met_requests_total{model_name=\"mock\",target=\"tpot:p50\"} 2",
            "vllm:handoff_slo_good_requests_total{model_name=\"mock\"} 1",
            "vllm:handoff_slo_good_output_tokens_total{model_name=\"mock\"} 10",
            "vllm:handoff_slo_target_seconds{model_name=\"mock\",target=\"ttft:p90\"} 0.6",
            "vllm:handoff_gpus{model_name=\"mock\"} 4",
            "vllm:handoff_gpu_hour_usd{model_name=\"mock\"} 2.5",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
    }

    #[test]
    fn nothing_without_the_flags() {
        // vLLM's LoRA gauge carries the scrape time as its value.
        let timeless = |text: String| -> String {
            text.lines()
                .filter(|l| !l.starts_with("vllm:lora_requests_info{"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let plain = Metrics::new(Backend::Vllm, "mock", &[Pool::Prefill]);
        let before = timeless(plain.render(None));
        let m = Arc::new(plain.with_slo(None, 1, false));
        assert!(m.slo_sink().is_none());
        assert_eq!(timeless(m.render(None)), before);
        assert!(!before.contains("handoff_slo") && !before.contains("handoff_gpus"));
    }
}
