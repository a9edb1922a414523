//! Runs the seed's §9 experiment (E1 / E3 / E4 / E4-ablate) on the default
//! session trace, each variant on the one engine, and prints its table and
//! verdicts (the command line's `experiment e4` has every knob).
//!
//! `cargo run --release -p handoff-lab --example e4`

use handoff_lab::{run_experiment, ExperimentConfig};
use handoff_workload::{generate_sessions, SessionConfig};

fn main() {
    let items = generate_sessions(&SessionConfig::default());
    match run_experiment(&ExperimentConfig::default(), &items) {
        Ok(out) => print!("{}", out.report.table()),
        Err(e) => {
            eprintln!("e4: {e}");
            std::process::exit(1);
        }
    }
}
