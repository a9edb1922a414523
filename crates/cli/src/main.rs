//! `handoff-mocker`: the one binary. Argument parsing and file I/O live here
//! so the libraries stay sans-IO.

mod args;
mod live_cmd;
mod replay_cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Mock vLLM / SGLang prefill→decode disaggregated serving with a faithful
/// KV handoff lifecycle.
#[derive(Parser)]
#[command(name = "handoff-mocker", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a Mooncake trace (or the embedded synthetic workload) on a
    /// virtual clock and report latencies and handoff lifecycle figures.
    Replay(Box<replay_cmd::ReplayArgs>),
    /// Run every role live in this process (one thread per worker).
    Live(Box<live_cmd::LiveArgs>),
    /// Run one worker process (prefill, decode or aggregated) over TCP.
    Worker(Box<live_cmd::WorkerArgs>),
    /// Drive worker processes with a workload over TCP.
    Frontend(Box<live_cmd::FrontendArgs>),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Replay(args) => replay_cmd::run(*args),
        Command::Live(args) => live_cmd::run_live(*args),
        Command::Worker(args) => live_cmd::run_worker(*args),
        Command::Frontend(args) => live_cmd::run_frontend(*args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
