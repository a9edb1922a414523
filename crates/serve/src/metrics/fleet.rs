//! The elastic fleet's gauge (`serve --admin`): workers per pool and
//! lifecycle phase, `<engine>:handoff_fleet_workers{model_name, pool,
//! state}`, set from the engine's fleet after every instant, so a scrape
//! during a drain shows the worker `draining` until it is `gone`. Every
//! (pool, state) pair is written, zeros included, so a rate or a sum over
//! states never misses a series. Registered only in an elastic
//! deployment: a fixed one's `/metrics` is unchanged.

use super::Metrics;
use crate::director::fleet::PHASES;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

/// One (pool, phase) series' labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FleetLabels {
    /// The served model name.
    pub model_name: String,
    /// `prefill` (or aggregated workers) or `decode`.
    pub pool: String,
    /// The phase: absent, provisioning, ready, draining, gone.
    pub state: String,
}

/// The fleet's gauge family.
#[derive(Default)]
pub(crate) struct FleetGauges {
    workers: Family<FleetLabels, Gauge>,
}

const POOLS: [&str; 2] = ["prefill", "decode"];

impl Metrics {
    /// These metrics with the fleet's gauge (`sglang`: under `sglang:`).
    pub fn with_fleet(mut self, sglang: bool) -> Self {
        let g = FleetGauges::default();
        let p = if sglang { "sglang:" } else { "vllm:" };
        self.registry.register(
            format!("{p}handoff_fleet_workers"),
            "Workers of the elastic fleet by pool and lifecycle state",
            g.workers.clone(),
        );
        self.fleet = Some(g);
        self.fleet_counts(&[[0; 5]; 2]);
        self
    }

    /// Sets the fleet's gauge from `counts[pool][phase]` (pools prefill
    /// then decode, phases in [`PHASES`] order); nothing without a fleet.
    pub fn fleet_counts(&self, counts: &[[u32; 5]; 2]) {
        let Some(g) = &self.fleet else { return };
        for (pool, row) in POOLS.iter().zip(counts) {
            for (phase, n) in PHASES.iter().zip(row) {
                let l = FleetLabels {
                    model_name: self.model.clone(),
                    pool: (*pool).to_string(),
                    state: phase.name().to_string(),
                };
                g.workers.get_or_create(&l).set(i64::from(*n));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_core::Backend;
    use handoff_router::Pool;

    #[test]
    fn written_only_with_a_fleet_and_every_state_present() {
        let plain = Metrics::new(Backend::Vllm, "m", &[Pool::Prefill, Pool::Decode]);
        plain.fleet_counts(&[[0, 0, 1, 0, 0], [0, 0, 1, 0, 0]]);
        assert!(!plain.render(None).contains("fleet_workers"));
        let m = Metrics::new(Backend::Vllm, "m", &[Pool::Prefill, Pool::Decode]).with_fleet(false);
        m.fleet_counts(&[[0, 0, 1, 0, 0], [1, 0, 0, 1, 0]]);
        let text = m.render(None);
        assert!(text.contains(
            "vllm:handoff_fleet_workers{model_name=\"m\",pool=\"decode\",state=\"draining\"} 1"
        ));
        assert!(text.contains(
            "vllm:handoff_fleet_workers{model_name=\"m\",pool=\"prefill\",state=\"gone\"} 0"
        ));
        assert_eq!(text.matches("vllm:handoff_fleet_workers{").count(), 10);
    }
}
