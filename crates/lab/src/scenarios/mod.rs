//! The DEP's test scenarios, run on the real backend cores: each states what
//! it expects, what it observed, and a verdict (`handoff-mocker scenario
//! NAME`, which exits non-zero when any check fails). [`judged`] runs any of
//! them, 7 (live/replay parity, on the live adapter) included.
//!
//! The lab is a configuration of the one [`Engine`]: a prefill and a decode
//! [`WorkerHost`] in this thread ([`LocalHosts`], cores from
//! [`make_core`]) and a lab director that routes through the shared
//! [`Frontend`], as [`handoff_serving::Serving`] does, and records what the scenarios
//! look at. Nothing is held back to look at the middle of a handoff: a
//! scenario runs the engine until the phase it wants
//! ([`Engine::run_until`]), inspects the hosts and the director there, and
//! injects faults at that instant ([`Engine::inject_fault`]). Transfers take
//! a fixed [`TRANSFER`], facts and the frontend's decode leg take
//! [`LATENCY`], and every step is one pass, so each phase of a handoff lasts
//! at least one instant and the engine can stop in it.
//!
//! One module per scenario holds its run and its checks; the lab they share
//! is in `harness.rs`.
//!
//! [`Engine`]: handoff_engine::Engine
//! [`Engine::run_until`]: handoff_engine::Engine::run_until
//! [`Engine::inject_fault`]: handoff_engine::Engine::inject_fault
//! [`WorkerHost`]: handoff_core::host::WorkerHost
//! [`LocalHosts`]: handoff_engine::LocalHosts
//! [`make_core`]: handoff_deployment::make_core
//! [`Frontend`]: handoff_router::Frontend

mod checks;
mod destination_gate;
mod duplicate_stale_late;
mod failure_matrix;
mod harness;
mod live_replay_parity;
mod no_false_overlap;
mod router_modes;
mod router_parity;
mod scenario;
mod stranded_source;

pub use checks::{Check, Checks};
pub use harness::{Flavour, LATENCY, TRANSFER};
pub use scenario::Scenario;

use crate::error::LabError;
use serde_json::Value;

/// Names accepted by [`run`] (the observations alone).
pub const NAMES: [&str; 6] = [
    "stranded-source",
    "destination-gate",
    "router-parity",
    "no-false-overlap",
    "failure-matrix",
    "duplicate-stale-late",
];

/// A scenario's run on one flavour: its observations.
type Observe = fn(Flavour) -> Value;

/// A scenario's checks on one backend's observations.
type Judge = fn(&Value) -> Checks;

/// Runs `scenario` for vLLM (pull), SGLang and vLLM push and judges it:
/// one outcome per [`Flavour`] (see [`Checks::outcome`]). [`Scenario::LiveReplayParity`] fails
/// when the live adapter cannot run it. With `sabotage`, the first check of
/// each outcome is broken on purpose.
pub fn judged(scenario: Scenario, sabotage: bool) -> Result<Vec<Value>, LabError> {
    let (f, judge): (Observe, Judge) = match scenario {
        Scenario::StrandedSource => (stranded_source::stranded, stranded_source::judge),
        Scenario::DestinationGate => (destination_gate::gate, destination_gate::judge),
        Scenario::RouterParity => (router_parity::router_parity, router_parity::judge),
        Scenario::NoFalseOverlap => (no_false_overlap::no_false_overlap, no_false_overlap::judge),
        Scenario::FailureMatrix => (failure_matrix::failure_matrix, failure_matrix::judge),
        Scenario::DuplicateStaleLate => (
            duplicate_stale_late::duplicate_stale_late,
            duplicate_stale_late::judge,
        ),
        Scenario::RouterModes => (router_modes::router_modes, router_modes::judge),
        Scenario::LiveReplayParity => return live_replay_parity::live_replay_parity(sabotage),
    };
    Ok(Flavour::ALL
        .into_iter()
        .map(|b| {
            let o = f(b);
            let mut c = judge(&o);
            if sabotage {
                c.sabotage();
            }
            c.outcome(scenario, b.name(), o)
        })
        .collect())
}

/// Runs scenario `name` for every [`Flavour`]; `None` for an unknown name.
pub fn run(name: &str) -> Option<Value> {
    let f: Observe = match name {
        "stranded-source" => stranded_source::stranded,
        "destination-gate" => destination_gate::gate,
        "router-parity" => router_parity::router_parity,
        "no-false-overlap" => no_false_overlap::no_false_overlap,
        "failure-matrix" => failure_matrix::failure_matrix,
        "duplicate-stale-late" => duplicate_stale_late::duplicate_stale_late,
        "router-modes" => router_modes::router_modes,
        _ => return None,
    };
    Some(Value::Array(Flavour::ALL.into_iter().map(f).collect()))
}

#[cfg(test)]
mod tests;
