//! `handoff-mocker scenario NAME`: the DEP's test scenarios, each with its
//! expectations, observations and verdicts as JSON; the command exits
//! non-zero when any check fails. Scenario 7 (live/replay parity) runs here
//! because it needs the live adapter; the others run in
//! `handoff_lab::scenarios`.

use clap::{Args, ValueEnum};
use handoff_core::{Backend, Transcript};
use handoff_lab::scenarios::{judged, Checks, Scenario};
use handoff_replay::Replay;
use handoff_router::RouterMode;
use handoff_serving::{make_core, EngineSpec, ReplayConfig};
use serde_json::{json, Value};

/// A scenario name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ScenarioArg {
    /// Scenario 1: vLLM stranded source (SGLang's gate in the same situation).
    StrandedSource,
    /// Scenario 2: SGLang destination gate: zero, partial and full prefix hits.
    DestinationGate,
    /// Scenario 3: Router booking vs physical reservation along one handoff.
    RouterParity,
    /// Scenario 4: No KV-index visibility of a reservation before activation.
    NoFalseOverlap,
    /// Scenario 5: Cancel, lose the channel or restart an owner at every phase.
    FailureMatrix,
    /// Scenario 6: Duplicate, stale and late facts.
    DuplicateStaleLate,
    /// Scenario 7: The same trace on replay, virtual-clock and wall-clock live.
    LiveReplayParity,
    /// Scenario 8: Every supported disaggregated router mode.
    RouterModes,
    /// All of the above, in order.
    All,
}

impl ScenarioArg {
    fn scenarios(self) -> Vec<Scenario> {
        use ScenarioArg as A;
        let one = match self {
            A::All => return Scenario::ALL.to_vec(),
            A::StrandedSource => Scenario::StrandedSource,
            A::DestinationGate => Scenario::DestinationGate,
            A::RouterParity => Scenario::RouterParity,
            A::NoFalseOverlap => Scenario::NoFalseOverlap,
            A::FailureMatrix => Scenario::FailureMatrix,
            A::DuplicateStaleLate => Scenario::DuplicateStaleLate,
            A::LiveReplayParity => Scenario::LiveReplayParity,
            A::RouterModes => Scenario::RouterModes,
        };
        vec![one]
    }
}

/// Options of `scenario`.
#[derive(Args, Debug)]
pub struct ScenarioArgs {
    /// Which scenario.
    #[arg(value_enum)]
    name: ScenarioArg,
    /// Tests only: break the first check of every outcome, to see a
    /// failure exit non-zero.
    #[arg(long, hide = true)]
    break_first_check: bool,
}

/// Runs the scenarios and prints their outcomes; fails when any check did.
pub fn run(a: ScenarioArgs) -> Result<(), String> {
    let mut out = Vec::new();
    for s in a.name.scenarios() {
        let outcomes = match judged(s, a.break_first_check) {
            Some(v) => v,
            None => live_replay_parity(a.break_first_check)?,
        };
        out.extend(outcomes);
    }
    let failed: Vec<String> = out
        .iter()
        .filter(|o| o["verdict"] != "pass")
        .map(|o| {
            format!(
                "{} ({})",
                o["scenario"].as_str().unwrap_or("?"),
                o["backend"].as_str().unwrap_or("?")
            )
        })
        .collect();
    let v = if out.len() == 1 {
        out.remove(0)
    } else {
        Value::Array(out)
    };
    out!(
        "{}",
        serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
    );
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("scenario checks failed: {}", failed.join(", ")))
    }
}

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
fn live_replay_parity(sabotage: bool) -> Result<Vec<Value>, String> {
    let mut outs = Vec::new();
    for backend in [Backend::Vllm, Backend::Sglang] {
        let block_size = if backend == Backend::Sglang { 1 } else { 16 };
        let spec = |kv_tokens| EngineSpec {
            backend,
            kv_tokens,
            block_size,
            ..EngineSpec::default()
        };
        let specs = vec![spec(1 << 18), spec(24 * 1024)];
        let cfg = ReplayConfig {
            backend,
            policy: backend.native_policy(),
            prefill_workers: 1,
            decode_workers: 1,
            router: RouterMode::KvAware,
            block_size: specs[0].event_block_tokens(),
            transcript: true,
            engines: specs.clone(),
            ..ReplayConfig::default()
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
        .run();
        let rt = rt.unwrap_or_default();
        let virt = handoff_live_adapter::run_virtual_threads(&cfg, &specs, items())
            .map_err(|e| format!("live-replay-parity: virtual live: {e}"))?;
        let vt = virt.transcript.unwrap_or_default();
        let (wall, _) = handoff_live_adapter::run_in_process(&cfg, &specs, 20.0, items())
            .map_err(|e| format!("live-replay-parity: wall-clock live: {e}"))?;
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
            backend.name(),
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
