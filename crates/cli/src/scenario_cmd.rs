//! `handoff-mocker scenario NAME`: the DEP's test scenarios, each with its
//! expectations, observations and verdicts as JSON; the command exits
//! non-zero when any check fails. Every scenario runs in
//! `handoff_lab::scenarios`.

use clap::{Args, ValueEnum};
use handoff_lab::scenarios::{judged, Scenario};
use serde_json::Value;

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
        out.extend(judged(s, a.break_first_check).map_err(|e| e.to_string())?);
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
