//! The command line a run was started with, kept for its report: the model
//! it imitates, the workload as it ran, and the flags that shape it, so a
//! report names what ran and `replay --rerun REPORT.json` can run it again.
//!
//! `main` records the subcommand's parsed arguments once; every command
//! that prints a report through the binary's `OutputArgs::finish`
//! (`replay`, `live`, `frontend`) describes its run from them, so their
//! reports of one run stay byte-identical.

use super::{early_send_cached_prefix, DeployArgs, WorkloadArgs, EARLY_SEND_ENV};
use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Args, Command, FromArgMatches};
use handoff_core::Backend;
use handoff_serving::report::{ModelReport, RunReport, WorkloadReport};
use handoff_workload::SyntheticConfig;
use std::sync::OnceLock;

/// Closed loop's flag (`replay` only), recorded with the workload's.
const CONCURRENCY: &str = "concurrency";
/// `replay --no-multi-step` (the report's `config.multi_step`).
const NO_MULTI_STEP: &str = "no_multi_step";

static INVOCATION: OnceLock<ArgMatches> = OnceLock::new();

/// Keeps the running subcommand's arguments (once per process; a later
/// call is ignored).
pub fn record(sub: &ArgMatches) {
    let _ = INVOCATION.set(sub.clone());
}

/// The run as the recorded command line describes it, or an empty
/// description when none was recorded (a library caller, a test).
pub fn run_report() -> RunReport {
    INVOCATION.get().map(describe).unwrap_or_default()
}

/// The run the arguments `m` (of `replay`, `live` or `frontend`) describe.
pub fn describe(m: &ArgMatches) -> RunReport {
    let deploy = DeployArgs::from_arg_matches(m).ok();
    let workload = WorkloadArgs::from_arg_matches(m).ok();
    RunReport {
        model: deploy.as_ref().and_then(model),
        workload: workload.map(|w| workload_report(&w, concurrency(m))),
        flags: run_flags(m),
    }
}

/// The model `deploy` imitates, if any (none with `--perf` alone).
fn model(deploy: &DeployArgs) -> Option<ModelReport> {
    let s = deploy.hardware().ok()??;
    Some(ModelReport {
        model: s.model.model,
        gpu: s.model.gpu,
        tp: s.model.tp,
    })
}

fn concurrency(m: &ArgMatches) -> Option<usize> {
    m.try_get_one::<usize>(CONCURRENCY).ok().flatten().copied()
}

/// The workload `w` opens, closed loop with `concurrency` in flight.
fn workload_report(w: &WorkloadArgs, concurrency: Option<usize>) -> WorkloadReport {
    let synthetic = SyntheticConfig::default();
    let open_loop = concurrency.is_none();
    match &w.trace {
        Some(path) => WorkloadReport {
            trace: Some(path.display().to_string()),
            trace_format: Some(w.format(path).name()),
            requests: None,
            rate_per_s: None,
            rate_curve: None,
            limit: w.limit,
            arrival_speedup_ratio: w.arrival_speedup_ratio,
            concurrency,
        },
        None => WorkloadReport {
            trace: None,
            trace_format: None,
            requests: Some(
                w.requests
                    .unwrap_or(synthetic.requests)
                    .min(w.limit.unwrap_or(u64::MAX)),
            ),
            rate_per_s: (open_loop && w.rate_curve.is_none())
                .then(|| w.rate.unwrap_or(synthetic.rate_per_sec)),
            rate_curve: open_loop
                .then(|| w.rate_curve.as_ref().map(|c| c.describe()))
                .flatten(),
            limit: None,
            arrival_speedup_ratio: w.arrival_speedup_ratio,
            concurrency,
        },
    }
}

/// The flags of `m` that shape a run (every deployment and workload flag
/// given on the command line, `--concurrency` and `--no-multi-step`), in
/// the order their structs declare them, whatever order they were typed in
/// (a deprecated spelling under its current name). SGLang's early send of the cached
/// prefix, from its flag or its variable, is written as the flag's value
/// when it is off on `--backend sglang` and left out otherwise, so runs
/// that do the same have the same flags.
pub fn run_flags(m: &ArgMatches) -> Vec<String> {
    let early = "disagg_prefill_early_send_cached_prefix";
    let mut flags = given(m, &DeployArgs::augment_args(Command::new("d")), |id| {
        id != early
    });
    let off = DeployArgs::from_arg_matches(m).is_ok_and(|d| {
        d.backend() == Backend::Sglang
            && early_send_cached_prefix(
                d.disagg_prefill_early_send_cached_prefix.as_deref(),
                std::env::var_os(EARLY_SEND_ENV).as_deref(),
            )
            .is_ok_and(|(on, _)| !on)
    });
    if off {
        flags.extend([
            "--disagg-prefill-early-send-cached-prefix".to_string(),
            "false".to_string(),
        ]);
    }
    // A profile folder named by the environment is part of the run: the
    // report names it as the flag would, so a rerun without it is refused
    // instead of falling back on a built-in profile of the same name.
    if let Ok(d) = DeployArgs::from_arg_matches(m) {
        if let Some(dir) = d
            .hardware
            .profile_dir()
            .filter(|d| d.named_by != "--profiles-dir")
        {
            flags.extend(["--profiles-dir".to_string(), dir.path.display().to_string()]);
        }
    }
    flags.extend(workload_flags(m));
    flags
}

/// The flags shaping a run that were given on the command line of `m`, with
/// their values.
pub fn given_run_flags(m: &ArgMatches) -> Vec<String> {
    let mut flags = given(m, &DeployArgs::augment_args(Command::new("d")), |_| true);
    flags.extend(workload_flags(m));
    flags
}

/// The workload's flags given in `m`, then `replay`'s own that shape its
/// report (`--concurrency`, `--no-multi-step`).
fn workload_flags(m: &ArgMatches) -> Vec<String> {
    let mut flags = given(m, &WorkloadArgs::augment_args(Command::new("w")), |_| true);
    // The elastic fleet's flags (`replay` only: asked only of matches that
    // hold them).
    let scale = super::ScaleArgs::augment_args(Command::new("s"));
    flags.extend(given(m, &scale, |id| m.ids().any(|i| i.as_str() == id)));
    if let Some(n) = concurrency(m) {
        flags.extend([format!("--{CONCURRENCY}"), n.to_string()]);
    }
    if m.try_get_one::<bool>(NO_MULTI_STEP).ok().flatten() == Some(&true) {
        flags.push("--no-multi-step".to_string());
    }
    flags
}

/// The flags of `cmd` given in `m` whose ids `keep` accepts.
fn given(m: &ArgMatches, cmd: &Command, keep: impl Fn(&str) -> bool) -> Vec<String> {
    let mut flags = Vec::new();
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if keep(id) {
            push_given(&mut flags, m, id, arg);
        }
    }
    flags
}

fn push_given(flags: &mut Vec<String>, m: &ArgMatches, id: &str, arg: &clap::Arg) {
    if m.value_source(id) != Some(ValueSource::CommandLine) {
        return;
    }
    // The deprecated spelling is the same flag: one report either way.
    let Some(long) = (if id == "speedup_ratio" {
        Some("pass-speedup-ratio")
    } else {
        arg.get_long()
    }) else {
        return;
    };
    if matches!(arg.get_action(), ArgAction::SetTrue) {
        flags.push(format!("--{long}"));
        return;
    }
    for v in m.try_get_raw(id).ok().flatten().into_iter().flatten() {
        flags.push(format!("--{long}"));
        flags.push(v.to_string_lossy().into_owned());
    }
}

/// The header line naming the model and step-time model of `report`'s
/// run: `model qwen3-8b  gpu h100  tp 1  perf profile:...`.
pub fn model_line(config: &handoff_serving::report::ReportConfig) -> String {
    let mut parts = Vec::new();
    if let Some(m) = &config.run.model {
        parts.push(format!("model {}  gpu {}  tp {}", m.model, m.gpu, m.tp));
    }
    let mut perfs: Vec<&str> = config.engines.iter().map(|e| e.perf.as_str()).collect();
    perfs.dedup();
    if !perfs.is_empty() {
        parts.push(format!("perf {}", perfs.join(", ")));
    }
    parts.join("  ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        deploy: DeployArgs,
        #[command(flatten)]
        workload: WorkloadArgs,
        #[arg(long)]
        concurrency: Option<usize>,
        #[arg(long)]
        no_multi_step: bool,
        #[arg(long)]
        json: bool,
    }

    fn matches(flags: &[&str]) -> ArgMatches {
        use clap::CommandFactory;
        Cli::command()
            .try_get_matches_from(std::iter::once("x").chain(flags.iter().copied()))
            .expect("flags parse")
    }

    #[test]
    fn run_flags_are_the_given_ones_in_declaration_order() {
        let m = matches(&[
            "--json",
            "--requests",
            "10",
            "--no-multi-step",
            "--concurrency",
            "4",
            "--disaggregation-decode-enable-radix-cache",
            "--backend",
            "sglang",
        ]);
        assert_eq!(
            run_flags(&m),
            [
                "--backend",
                "sglang",
                "--disaggregation-decode-enable-radix-cache",
                "--requests",
                "10",
                "--concurrency",
                "4",
                "--no-multi-step"
            ]
        );
        // Defaults are not flags: a run without any has none to repeat.
        assert_eq!(run_flags(&matches(&["--json"])), Vec::<String>::new());
        assert_eq!(given_run_flags(&matches(&["--json"])), Vec::<String>::new());
        // Flags parsed again give the same flags.
        let again = run_flags(&m);
        let again: Vec<&str> = again.iter().map(String::as_str).collect();
        assert_eq!(run_flags(&matches(&again)), again);
    }

    #[test]
    fn the_workload_is_reported_as_it_runs() {
        let w = |flags: &[&str]| {
            let m = matches(flags);
            workload_report(
                &WorkloadArgs::from_arg_matches(&m).unwrap(),
                concurrency(&m),
            )
        };
        let open = w(&["--requests", "50", "--limit", "20"]);
        assert_eq!((open.requests, open.rate_per_s), (Some(20), Some(16.0)));
        let closed = w(&["--concurrency", "32"]);
        assert_eq!(
            (closed.requests, closed.rate_per_s, closed.concurrency),
            (Some(2000), None, Some(32))
        );
        let trace = w(&["--trace", "t.csv", "--limit", "5"]);
        assert_eq!(
            (trace.trace.as_deref(), trace.trace_format, trace.limit),
            (Some("t.csv"), Some("azure"), Some(5))
        );
    }
}
