//! What an elastic run's scaling cost: worker counts over time, worker-
//! and GPU-hours, time spent provisioning and draining, and every scale
//! event. Present only when the run scaled (a fleet in its fault plan).

use super::scale_costs::{SloWindow, StrandedAndWindows, StrandedKv, Unwinds};
use handoff_engine::scale::{FleetSummary, ScaleEvent};
use serde::Serialize;
use std::collections::BTreeMap;

/// One change of the fleet's shape.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct FleetCountPoint {
    /// Model seconds.
    pub t_s: f64,
    /// Routable prefill workers from then on.
    pub prefill: u32,
    /// Routable decode workers from then on.
    pub decode: u32,
    /// Workers provisioning, both pools.
    pub provisioning: u32,
    /// Workers draining, both pools.
    pub draining: u32,
}

/// One scale event.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ScaleEventRow {
    /// Model seconds.
    pub t_s: f64,
    /// `provision`, `at_ceiling`, `ready`, `drain`, `drained` or `removed`.
    pub event: &'static str,
    /// The worker, when one is named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker: Option<u32>,
    /// The pool, for `provision` and `at_ceiling`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<&'static str>,
    /// For `removed`: the phase the worker was in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<&'static str>,
}

/// See the module docs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ScalingReport {
    /// The fleet's counts at each change (the first at time zero).
    pub workers_over_time: Vec<FleetCountPoint>,
    /// Hours prefill workers held a machine (provisioning, ready, draining).
    pub prefill_worker_hours: f64,
    /// The same for decode workers.
    pub decode_worker_hours: f64,
    /// Worker-hours times each pool's GPUs per worker.
    pub gpu_hours: f64,
    /// Seconds workers spent provisioning, all together.
    pub provisioning_s: f64,
    /// Seconds workers spent draining, all together.
    pub draining_s: f64,
    /// Workers removed at once (their handoffs unwound as on a kill).
    pub removals: u64,
    /// Roles that ended early because of removals, by reason (the removed
    /// workers' own and their peers'; `scale_costs.rs`).
    pub unwound_by_removal: BTreeMap<&'static str, u64>,
    /// KV held on draining workers for others, block·s.
    pub stranded_kv: StrandedKv,
    /// The length of [`ScalingReport::slo_windows`], s (with `--slo`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo_window_s: Option<f64>,
    /// SLO attainment and goodput per window of arrivals (with `--slo`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo_windows: Option<Vec<SloWindow>>,
    /// Every scale event, in order.
    pub events: Vec<ScaleEventRow>,
    /// The planner that drove the fleet, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub planner: Option<String>,
}

fn secs(ns: u64) -> f64 {
    (ns as f64 / 1e9 * 1e3).round() / 1e3
}

fn hours(ns: [u64; 3]) -> f64 {
    let total: u64 = ns.iter().fold(0u64, |a, &b| a.saturating_add(b));
    (total as f64 / 3.6e12 * 1e6).round() / 1e6
}

impl ScalingReport {
    /// The section for `summary`, with `gpus` per prefill and per decode
    /// worker.
    pub fn new(summary: &FleetSummary, gpus: [u32; 2]) -> ScalingReport {
        let events = summary
            .events
            .iter()
            .map(|r| {
                let t_s = secs(r.at.0);
                let row = |event, worker: Option<u32>| ScaleEventRow {
                    t_s,
                    event,
                    worker,
                    pool: None,
                    from: None,
                };
                match r.event {
                    ScaleEvent::Provision { pool, worker } => ScaleEventRow {
                        pool: Some(pool.name()),
                        ..row("provision", Some(worker.0))
                    },
                    ScaleEvent::AtCeiling { pool } => ScaleEventRow {
                        pool: Some(pool.name()),
                        ..row("at_ceiling", None)
                    },
                    ScaleEvent::Ready { worker } => row("ready", Some(worker.0)),
                    ScaleEvent::Drain { worker } => row("drain", Some(worker.0)),
                    ScaleEvent::Drained { worker } => row("drained", Some(worker.0)),
                    ScaleEvent::Removed { worker, from } => ScaleEventRow {
                        from: Some(from.name()),
                        ..row("removed", Some(worker.0))
                    },
                }
            })
            .collect();
        let (p, d) = (hours(summary.prefill_ns), hours(summary.decode_ns));
        ScalingReport {
            workers_over_time: summary
                .series
                .iter()
                .map(|pt| FleetCountPoint {
                    t_s: secs(pt.at.0),
                    prefill: pt.prefill,
                    decode: pt.decode,
                    provisioning: pt.provisioning,
                    draining: pt.draining,
                })
                .collect(),
            prefill_worker_hours: p,
            decode_worker_hours: d,
            gpu_hours: ((p * f64::from(gpus[0]) + d * f64::from(gpus[1])) * 1e6).round() / 1e6,
            provisioning_s: secs(summary.prefill_ns[0].saturating_add(summary.decode_ns[0])),
            draining_s: secs(summary.prefill_ns[2].saturating_add(summary.decode_ns[2])),
            removals: summary
                .events
                .iter()
                .filter(|r| matches!(r.event, ScaleEvent::Removed { .. }))
                .count() as u64,
            unwound_by_removal: BTreeMap::new(),
            stranded_kv: StrandedKv::default(),
            slo_window_s: None,
            slo_windows: None,
            events,
            planner: None,
        }
    }

    /// With the recorder's stranded KV and SLO windows and the director's
    /// unwound roles.
    pub fn with_costs(mut self, costs: Option<&StrandedAndWindows>, unwinds: &Unwinds) -> Self {
        self.unwound_by_removal = unwinds.by_reason();
        if let Some(c) = costs {
            self.stranded_kv = c.stranded;
            self.slo_window_s = c.slo_window_s;
            self.slo_windows = c.windows.clone();
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_core::{Duration, Instant, WorkerId};
    use handoff_engine::scale::{Fleet, FleetState, ScalePool};

    #[test]
    fn hours_and_events_add_up() {
        let mut f = FleetState::new(Fleet::pools(1, 1, 2, 1, Duration::from_secs(60)));
        let _ = f.scale_up(ScalePool::Decode, Instant::ZERO);
        let _ = f.ready(WorkerId(2), Instant(60_000_000_000));
        let _ = f.remove(WorkerId(2), Instant(1_800_000_000_000));
        let r = ScalingReport::new(&f.summary(Instant(3_600_000_000_000)), [1, 2]);
        assert_eq!(r.prefill_worker_hours, 1.0);
        // Decode: worker 1 an hour, worker 2 half an hour.
        assert_eq!(r.decode_worker_hours, 1.5);
        assert_eq!(r.gpu_hours, 4.0);
        assert_eq!(r.provisioning_s, 60.0);
        assert_eq!(r.removals, 1);
        let kinds: Vec<&str> = r.events.iter().map(|e| e.event).collect();
        assert_eq!(kinds, ["provision", "ready", "removed"]);
        assert_eq!(r.events[2].from, Some("ready"));
        // A change at an instant replaces that instant's point: the
        // provisioning at 0 s shows in the first.
        let points: Vec<(f64, u32, u32)> = r
            .workers_over_time
            .iter()
            .map(|p| (p.t_s, p.decode, p.provisioning))
            .collect();
        assert_eq!(points, [(0.0, 1, 1), (60.0, 2, 0), (1800.0, 1, 0)]);
    }

    #[test]
    fn costs_join_the_section_and_windows_only_with_an_slo() {
        use crate::report::{ScaleCosts, Unwinds};
        use handoff_core::{CancelReason, HandoffId, OwnershipDelta};
        let mut f = FleetState::new(Fleet::pools(2, 2, 1, 1, Duration::from_secs(1)));
        let s1 = Instant(1_000_000_000);
        let _ = f.drain(WorkerId(0), s1);
        let _ = f.remove(WorkerId(1), s1);
        let mut costs = ScaleCosts::new(Duration::from_secs(10));
        let mut unwinds = Unwinds::default();
        costs.transition(
            WorkerId(0),
            Instant::ZERO,
            OwnershipDelta {
                pinned: 8,
                reserved: 0,
                active: 0,
            },
        );
        for r in f.events() {
            costs.scale(r);
            unwinds.scale(r);
        }
        unwinds.role_ended(WorkerId(1), HandoffId(5), CancelReason::Teardown);
        unwinds.role_ended(WorkerId(2), HandoffId(5), CancelReason::PeerLost);
        costs.arrived(Instant::ZERO);
        let end = Instant(3_000_000_000);
        let plain = ScalingReport::new(&f.summary(end), [1, 1])
            .with_costs(Some(&costs.report(end, false)), &unwinds);
        let json = serde_json::to_string(&plain).unwrap();
        assert!(
            json.contains(
                r#""unwound_by_removal":{"peer-lost":1,"teardown":1},"stranded_kv":{"pinned_source_block_s":16.0,"reserved_destination_block_s":0.0,"total_block_s":16.0}"#
            ),
            "{json}"
        );
        assert!(!json.contains("slo_window"), "{json}");
        let judged = ScalingReport::new(&f.summary(end), [1, 1])
            .with_costs(Some(&costs.report(end, true)), &unwinds);
        let json = serde_json::to_string(&judged).unwrap();
        assert!(
            json.contains(
                r#""slo_window_s":10.0,"slo_windows":[{"start_s":0.0,"arrived":1,"met_all":0"#
            ),
            "{json}"
        );
    }
}
