//! # handoff-mocker
//!
//! The command line. The binary is [`main`]; argument parsing and file I/O
//! live here so the libraries stay sans-IO. [`flags`] is the one entry for
//! other tools (`cargo xtask parity`): `replay`'s deployment and workload
//! flags read into a deployment, its engines and its requests, with a
//! typed [`flags::FlagError`].
#![forbid(unsafe_code)]

/// `println!` for reports: a reader that goes away (`| head`) ends the
/// program quietly instead of panicking; any other write error is reported.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let mut so = std::io::stdout().lock();
        match writeln!(so, $($t)*) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
            Err(e) => {
                eprintln!("error: writing stdout: {e}");
                std::process::exit(1);
            }
        }
    }};
}

mod args;
mod experiment_cmd;
mod hardware_args;
mod html;
mod html_scaling;
mod limits;
mod live_cmd;
mod plan_aic;
mod plan_cmd;
mod plan_run;
mod pod_cmd;
mod replay_cmd;
mod report_out;
mod scenario_cmd;
mod serve_cmd;
mod serve_gateway_args;
mod sweep_cmd;
mod sweep_experiment;
mod sweep_grid;
mod sweep_map;
mod validate;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::ffi::OsString;
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
    /// Replay a trace (Mooncake JSONL or Azure CSV) or the embedded
    /// synthetic workload on a virtual clock and report latencies and
    /// handoff lifecycle figures (also as HTML, per request, closed loop).
    Replay(Box<replay_cmd::ReplayArgs>),
    /// Run every role live in this process (one thread per worker).
    Live(Box<live_cmd::LiveArgs>),
    /// Run one worker process (prefill, decode or aggregated) over TCP.
    Worker(Box<live_cmd::WorkerArgs>),
    /// Drive worker processes with a workload over TCP.
    Frontend(Box<live_cmd::FrontendArgs>),
    /// Session-affine serving with D->P snapshot push (seed 002): `e4` runs
    /// E1/E3/E4/E4-ablate and judges H4-1..H4-3; `run` runs one configuration.
    Experiment(Box<experiment_cmd::ExperimentCommand>),
    /// Run the DEP's test scenarios for vLLM and SGLang on the real cores:
    /// each prints what it expects, what it observed and a verdict as JSON,
    /// and the command exits non-zero when any check fails.
    Scenario(Box<scenario_cmd::ScenarioArgs>),
    /// Serve the deployment over OpenAI-compatible HTTP on the wall clock,
    /// with vLLM-format KV events on ZMQ and Prometheus metrics.
    Serve(Box<serve_cmd::ServeArgs>),
    /// Replay a grid of configurations (a TOML/JSON grid file or repeated
    /// `--set key=v1,v2,...`) in parallel on every core: one report per
    /// configuration and a CSV + JSON summary; `--shard I/N` and `sweep
    /// merge` split a grid across hosts.
    Sweep(Box<sweep_cmd::SweepArgs>),
    /// Answer the sizing question by simulation: every aggregated layout
    /// and xPyD split within a GPU budget, replayed under an SLO and
    /// ranked by goodput per GPU, with the Pareto frontier and its page;
    /// `--check-aic FILE` simulates AIConfigurator's saved picks.
    Plan(Box<plan_cmd::PlanArgs>),
    /// Replay a real engine run's requests (`vllm bench serve
    /// --save-detailed` JSON, SGLang `bench_serving` output, or the plain
    /// per-request JSONL/CSV) on a stated deployment and print how far
    /// TTFT, TPOT and E2E are from the real ones, request by request.
    Validate(Box<validate::ValidateArgs>),
    /// Fit the step-time model's overhead terms to one real run (as
    /// `validate` reads it) and write the calibrated profile.
    Calibrate(Box<validate::calibrate::CalibrateArgs>),
}

/// The command line, parsed (a `replay --rerun REPORT` with the report's
/// flags in it), its subcommand's arguments recorded for the report.
fn parse() -> Result<Cli, args::rerun::RerunError> {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let parsed = |argv: &[OsString]| {
        let m = Cli::command().get_matches_from(argv);
        let cli =
            Cli::from_arg_matches(&m).unwrap_or_else(|e| e.format(&mut Cli::command()).exit());
        (m, cli)
    };
    let (mut m, mut cli) = parsed(&argv);
    if let (Command::Replay(a), Some(sub)) = (&cli.command, m.subcommand_matches("replay")) {
        if let Some(report) = a.rerun() {
            (m, cli) = parsed(&args::rerun::argv(&argv, report, sub)?);
        }
    }
    if let Some((_, sub)) = m.subcommand() {
        args::invocation::record(sub);
    }
    Ok(cli)
}

/// Runs the command line in `std::env::args_os()` and says how it ended.
pub fn main() -> ExitCode {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Replay(args) => replay_cmd::run(*args),
        Command::Live(args) => live_cmd::run_live(*args),
        Command::Worker(args) => live_cmd::run_worker(*args),
        Command::Frontend(args) => live_cmd::run_frontend(*args),
        Command::Scenario(args) => scenario_cmd::run(*args),
        Command::Experiment(args) => experiment_cmd::run(*args),
        Command::Serve(args) => serve_cmd::run(*args),
        Command::Sweep(args) => sweep_cmd::run(*args),
        Command::Plan(args) => plan_cmd::run(*args),
        Command::Validate(args) => validate::run(*args),
        Command::Calibrate(args) => validate::calibrate::run(*args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

pub mod flags;
