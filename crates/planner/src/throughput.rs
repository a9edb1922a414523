//! Dynamo's throughput-based SLA planner, its core.
//!
//! After Dynamo's `components/planner/src/dynamo/planner/utils/planner_core.py`
//! (`_compute_replica_requirements`) and its design doc
//! (`docs/design-docs/component-design/planner-design.md`, "Throughput-Based
//! Scaling"): every adjustment interval the planner predicts the next
//! interval's request count, ISL and OSL (here Dynamo's `constant`
//! predictor: the last interval's values), then
//!
//! ```text
//! prefill: ceil(num_req · isl / interval · min(1, p_correction) / prefill_thpt_per_gpu / prefill_gpus)
//! decode:  ceil(num_req · osl / interval / decode_thpt_per_gpu / decode_gpus)
//! ```
//!
//! each at least `min_endpoint` and here at most the pool's ceiling. The
//! prefill correction factor is observed TTFT over the TTFT the profile
//! expects (`expected_ttft_ms`, when given); Dynamo's `min(1, ·)` keeps a
//! queueing-inflated TTFT from scaling prefill up on its own. Dynamo reads
//! per-GPU throughput from its profiler's interpolation at the predicted
//! ISL (prefill) and at the ITL target (decode); this planner takes one
//! throughput per worker for each pool instead (the interpolation and the
//! decode correction factor, which moves the ITL it interpolates at, are
//! not modelled).

use crate::snapshot::{Decision, FleetSnapshot, PlannerPool};
use crate::Planner;
use handoff_core::Duration;

/// The throughput planner's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ThroughputConfig {
    /// Prompt tokens per second one prefill worker sustains (Dynamo's
    /// `prefill_thpt_per_gpu` times `prefill_engine_num_gpu`).
    pub prefill_tokens_per_s: f64,
    /// Output tokens per second one decode worker sustains at the ITL
    /// target.
    pub decode_tokens_per_s: f64,
    /// Fewest workers per pool (Dynamo's `min_endpoint`).
    pub min_workers: u32,
    /// The adjustment interval (Dynamo's `adjustment_interval`).
    pub interval: Duration,
    /// The TTFT the profile expects at the observed ISL, for the prefill
    /// correction factor; `None`: no correction.
    pub expected_ttft_ms: Option<f64>,
}

impl Default for ThroughputConfig {
    /// Sized for the mocker's default deployment (Qwen3-8B-like polynomial:
    /// a 4K-token prefill in about 86 ms, so ~45K prompt tokens/s a prefill
    /// worker; a decode worker at a few dozen requests per pass, ~2K output
    /// tokens/s), Dynamo's `min_endpoint` 1, and a 10 s interval.
    fn default() -> Self {
        ThroughputConfig {
            prefill_tokens_per_s: 45_000.0,
            decode_tokens_per_s: 2_000.0,
            min_workers: 1,
            interval: Duration::from_secs(10),
            expected_ttft_ms: None,
        }
    }
}

/// See the module docs.
#[derive(Clone, Debug)]
pub struct ThroughputPlanner {
    config: ThroughputConfig,
}

impl ThroughputPlanner {
    /// A planner with `config`.
    pub fn new(config: ThroughputConfig) -> ThroughputPlanner {
        ThroughputPlanner { config }
    }

    /// The settings.
    pub fn config(&self) -> &ThroughputConfig {
        &self.config
    }

    /// Workers needed for `tokens_per_s` at `per_worker` each, within the
    /// minimum and `ceiling`.
    fn workers(&self, tokens_per_s: f64, per_worker: f64, ceiling: u32) -> u32 {
        let need = if per_worker > 0.0 && tokens_per_s.is_finite() {
            (tokens_per_s / per_worker)
                .ceil()
                .clamp(0.0, f64::from(u32::MAX)) as u32
        } else {
            0
        };
        need.max(self.config.min_workers).min(ceiling.max(1))
    }
}

impl Planner for ThroughputPlanner {
    fn tick(&mut self, s: &FleetSnapshot) -> Decision {
        let w = &s.window;
        let secs = w.length.as_secs_f64();
        let next_tick = s.now + self.config.interval;
        if secs <= 0.0 {
            return Decision {
                prefill_target: s.size(PlannerPool::Prefill),
                decode_target: s.size(PlannerPool::Decode),
                next_tick,
            };
        }
        // Dynamo's `constant` predictor: the next interval is the last.
        let (num_req, isl, osl) = (w.arrivals as f64, w.mean_isl(), w.mean_osl());
        let correction = match (self.config.expected_ttft_ms, w.mean_ttft_ms) {
            (Some(expected), Some(observed)) if expected > 0.0 => observed / expected,
            _ => 1.0,
        };
        let prefill_tps = num_req * isl / secs * correction.min(1.0);
        let decode_tps = num_req * osl / secs;
        Decision {
            prefill_target: self.workers(
                prefill_tps,
                self.config.prefill_tokens_per_s,
                s.ceiling(PlannerPool::Prefill),
            ),
            decode_target: self.workers(
                decode_tps,
                self.config.decode_tokens_per_s,
                s.ceiling(PlannerPool::Decode),
            ),
            next_tick,
        }
    }

    fn name(&self) -> &str {
        "throughput"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::WindowTraffic;
    use handoff_core::Instant;

    fn snap(arrivals: u64, isl: u64, osl: u64, ttft: Option<f64>) -> FleetSnapshot {
        FleetSnapshot {
            now: Instant(10_000_000_000),
            workers: Vec::new(),
            window: WindowTraffic {
                length: Duration::from_secs(10),
                arrivals,
                input_tokens: arrivals * isl,
                output_tokens: arrivals * osl,
                finished: arrivals,
                mean_ttft_ms: ttft,
                mean_tpot_ms: None,
            },
            ceiling: [8, 8],
        }
    }

    #[test]
    fn replicas_follow_predicted_token_throughput() {
        let mut p = ThroughputPlanner::new(ThroughputConfig {
            prefill_tokens_per_s: 10_000.0,
            decode_tokens_per_s: 1_000.0,
            ..ThroughputConfig::default()
        });
        // 20 req/s · 4000 tokens = 80K/s: 8 prefill; 20 · 150 = 3K/s: 3 decode.
        let d = p.tick(&snap(200, 4000, 150, None));
        assert_eq!((d.prefill_target, d.decode_target), (8, 3));
        assert_eq!(d.next_tick, Instant(20_000_000_000));
        // Above the ceiling: the ceiling. No traffic: the minimum.
        assert_eq!(p.tick(&snap(400, 4000, 150, None)).prefill_target, 8);
        let idle = p.tick(&snap(0, 0, 0, None));
        assert_eq!((idle.prefill_target, idle.decode_target), (1, 1));
    }

    #[test]
    fn the_correction_factor_only_ever_lowers_prefill() {
        let mut p = ThroughputPlanner::new(ThroughputConfig {
            prefill_tokens_per_s: 10_000.0,
            expected_ttft_ms: Some(100.0),
            ..ThroughputConfig::default()
        });
        // TTFT half what the profile expects (prefix hits): half the load.
        assert_eq!(p.tick(&snap(200, 4000, 150, Some(50.0))).prefill_target, 4);
        // Queueing doubles TTFT: min(1, 2) leaves the prediction alone.
        assert_eq!(p.tick(&snap(200, 4000, 150, Some(200.0))).prefill_target, 8);
    }
}
