//! Scenario 8: Every supported disaggregated router mode.

use super::checks::Checks;
use super::harness::Flavour;
use handoff_core::{Backend, WorkerId};
use handoff_deployment::{make_core, EngineSpec};
use handoff_router::RouterMode;
use serde_json::{json, Value};

/// Every router mode of a disaggregated deployment (2 prefill + 2 decode
/// workers), on a small synthetic workload: requests complete, bookings
/// and KV come back, work spreads.
pub(super) fn router_modes(f: Flavour) -> Value {
    let backend = f.backend;
    let mut rows = Vec::new();
    for mode in RouterMode::ALL {
        let spec = |kv| EngineSpec {
            backend,
            kv_tokens: kv,
            block_size: if backend == Backend::Sglang { 1 } else { 16 },
            ..EngineSpec::default()
        };
        let specs = [spec(1 << 18), spec(1 << 18), spec(1 << 16), spec(1 << 16)];
        let cfg = handoff_deployment::DeploymentConfig {
            backend,
            policy: f.policy,
            prefill_workers: 2,
            decode_workers: 2,
            router: mode,
            block_size: specs[0].event_block_tokens(),
            seed: 3,
            ..handoff_deployment::DeploymentConfig::default()
        };
        let workload =
            handoff_workload::SyntheticWorkload::new(handoff_workload::SyntheticConfig {
                seed: 11,
                requests: 60,
                rate_per_sec: 30.0,
                ..handoff_workload::SyntheticConfig::default()
            });
        let o = handoff_replay::Replay::new(cfg, workload, |w: WorkerId, _| {
            make_core(&specs[w.0 as usize]).expect("scenario engines are valid")
        })
        .expect("the scenario's cores publish at its block size")
        .run_all();
        let r = &o.report;
        rows.push(json!({
            "router": mode.name(),
            "requests": r.num_requests,
            "completed": r.completed_requests,
            "failed": r.failed_requests,
            "handoffs_activated": r.lifecycle.handoffs_activated,
            "workers_drained": r.workers.iter().all(|w| w.drained),
            "final_kv_used_blocks": r.workers.iter().map(|w| w.final_kv_used_blocks).sum::<u64>(),
            "router_bookings_left": o.live_bookings,
            "workers_with_steps": r.workers.iter().filter(|w| w.steps > 0).count(),
        }));
    }
    json!({
        "scenario": "router-modes",
        "backend": f.name(),
        "modes": rows,
        "device_aware_weighted": "not modelled: every worker of a pool runs the same engine spec and pass-time model, so device weights would all be equal and the mode would choose as least-loaded, which is covered",
    })
}

fn as_u64(v: &Value) -> u64 {
    v.as_u64().unwrap_or(u64::MAX)
}

/// The checks of scenario 8 on one backend's observations `o`.
pub(super) fn judge(o: &Value) -> Checks {
    let mut c = Checks::default();
    for m in o["modes"].as_array().cloned().unwrap_or_default() {
        let name = m["router"].as_str().unwrap_or("?").to_string();
        c.eq(
            format!("{name}: completed requests"),
            m["requests"].clone(),
            m["completed"].clone(),
        );
        c.eq(format!("{name}: failed requests"), 0, m["failed"].clone());
        c.eq(
            format!("{name}: handoffs activated"),
            m["requests"].clone(),
            m["handoffs_activated"].clone(),
        );
        c.eq(
            format!("{name}: every worker drained"),
            true,
            m["workers_drained"].clone(),
        );
        c.eq(
            format!("{name}: KV in use at the end, blocks"),
            0,
            m["final_kv_used_blocks"].clone(),
        );
        c.eq(
            format!("{name}: router bookings left"),
            0,
            m["router_bookings_left"].clone(),
        );
        let spread = as_u64(&m["workers_with_steps"]);
        c.holds(
            format!("{name}: workers that ran"),
            ">= 3 of 4 (both pools used)",
            spread,
            (3..=4).contains(&spread),
        );
    }
    c
}
