//! Scenario 7: The same trace on replay and on virtual- and wall-clock live
//! (the live adapter's threads and in-process wall-clock run).

use super::checks::Checks;
use super::harness::Flavour;
use super::scenario::Scenario;
use crate::error::LabError;
use handoff_core::{Backend, Transcript};
use handoff_deployment::{make_core, DeploymentConfig, EngineSpec};
use handoff_replay::Replay;
use handoff_router::RouterMode;
use serde_json::{json, Value};

/// Whether every role in a rendered transcript ends `Released` and every
/// worker ends drained with nothing held.
fn transcript_settled(t: &Transcript) -> bool {
    let text = t.render();
    let mut last: Option<String> = None;
    let mut role = String::new();
    let mut ok = true;
    for l in text.lines() {
        if l.starts_with("handoff ") || l.starts_with("worker ") {
            ok &= last.take().is_none_or(|x| x.contains("-> Released"));
            role.clear();
            if l.starts_with("worker ") {
                ok &= l.contains("drained=true") && l.contains("active=0 pinned=0 reserved=0");
            }
        } else if let Some(rest) = l.strip_prefix("  ") {
            let r = rest.split_whitespace().next().unwrap_or("").to_string();
            if r != role {
                ok &= last.take().is_none_or(|x| x.contains("-> Released"));
                role = r;
            }
            last = Some(rest.to_string());
        }
    }
    ok && last.is_none_or(|x| x.contains("-> Released"))
}

/// Scenario 7: one handoff trace (a decode pool small enough that sources
/// strand) through replay, virtual-clock live on threads, and wall-clock
/// live in this process; the virtual run must equal replay byte for byte
/// (transcript and report), the wall-clock run must settle every handoff
/// and serve every request.
pub(super) fn live_replay_parity(sabotage: bool) -> Result<Vec<Value>, LabError> {
    let mut outs = Vec::new();
    for f in Flavour::ALL {
        let backend = f.backend;
        let block_size = if backend == Backend::Sglang { 1 } else { 16 };
        let spec = |kv_tokens| EngineSpec {
            backend,
            kv_tokens,
            block_size,
            ..EngineSpec::default()
        };
        let specs = vec![spec(1 << 18), spec(24 * 1024)];
        let cfg = DeploymentConfig {
            backend,
            policy: f.policy,
            prefill_workers: 1,
            decode_workers: 1,
            router: RouterMode::KvAware,
            block_size: specs[0].event_block_tokens(),
            transcript: true,
            engines: specs.clone(),
            ..DeploymentConfig::default()
        };
        let items = || {
            handoff_workload::SyntheticWorkload::new(handoff_workload::SyntheticConfig {
                seed: 5,
                requests: 40,
                rate_per_sec: 8.0,
                ..handoff_workload::SyntheticConfig::default()
            })
        };
        let (replayed, rt) = Replay::new(cfg.clone(), items(), |w: handoff_core::WorkerId, _| {
            make_core(&specs[w.0 as usize]).unwrap_or_else(|_| unreachable!("valid spec"))
        })
        .expect("the scenario's cores publish at its block size")
        .run();
        let rt = rt.unwrap_or_default();
        let virt = handoff_live_adapter::run_virtual_threads(&cfg, &specs, items())?;
        let vt = virt.transcript.unwrap_or_default();
        let (wall, _) = handoff_live_adapter::run_in_process(&cfg, &specs, 20.0, items())?;
        let wt = wall.transcript.unwrap_or_default();
        let json = |r: &handoff_serving::Report| serde_json::to_string(r).unwrap_or_default();
        let mut c = Checks::default();
        c.eq(
            "virtual live transcript equals replay's (byte for byte)",
            true,
            vt.render() == rt.render(),
        );
        c.eq(
            "virtual live report equals replay's (byte for byte)",
            true,
            json(&virt.report) == json(&replayed),
        );
        c.positive(
            "handoffs in the trace",
            &json!(replayed.lifecycle.handoffs_activated),
        );
        c.eq(
            "replay: every role released once, every worker drained",
            true,
            transcript_settled(&rt),
        );
        c.eq(
            "wall-clock live: every role released once, every worker drained",
            true,
            transcript_settled(&wt),
        );
        c.eq(
            "wall-clock live: requests completed",
            replayed.completed_requests,
            wall.report.completed_requests,
        );
        c.eq(
            "wall-clock live: handoffs activated",
            replayed.lifecycle.handoffs_activated,
            wall.report.lifecycle.handoffs_activated,
        );
        c.eq("wall-clock live: run stalled", false, wall.run.stalled);
        if sabotage {
            c.sabotage();
        }
        outs.push(c.outcome(
            Scenario::LiveReplayParity,
            f.name(),
            json!({
                "requests": replayed.num_requests,
                "handoffs": replayed.lifecycle.handoffs_activated,
                "replay_transcript_lines": rt.render().lines().count(),
                "virtual_host_operations": virt.calls,
                "wall_seconds": (wall.run.wall_seconds * 1000.0).round() / 1000.0,
                "wall_completed": wall.report.completed_requests,
            }),
        ));
    }
    Ok(outs)
}
