//! `replay --rerun REPORT.json`: a report's own `config.flags` (see
//! [`super::invocation`]) run again, with this command line's output flags.
//!
//! A report is input like any other: its flags are taken only from an
//! allow-list, the deployment and workload flags and `replay`'s
//! `--concurrency` and `--no-multi-step` (what [`super::invocation`]
//! records). Anything else it carries (`--output`, `--html`,
//! `--kv-events-out`, `--per-request-jsonl`, a bare word) is dropped with a
//! note. A flag that makes the run read a file (`--trace`, `--profiles-dir`,
//! `--perf profile:`/`npz:`, `--faults FILE`) is not followed either: the
//! rerun reads only the files this command line names, so such a flag is
//! given beside `--rerun`, and a rerun whose report read one that is not
//! given is refused, naming it (without it the run would not be the
//! report's).

use super::invocation::given_run_flags;
use super::{DeployArgs, WorkloadArgs};
use clap::{ArgAction, ArgMatches, Args, Command};
use handoff_workload::file::{read_to_string, FileError, FileKind};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

/// The flags that name a file the run reads.
const PATH_FLAGS: [&str; 5] = ["trace", "perf", "faults", "profiles-dir", "overheads"];

/// Why a report cannot be rerun.
#[derive(Debug)]
pub enum RerunError {
    /// Flags that shape the run were given beside `--rerun`.
    FlagsBeside {
        /// The report.
        report: PathBuf,
        /// The flags given.
        flags: Vec<String>,
    },
    /// The report could not be read (not a regular file, too large, ...).
    Read(FileError),
    /// The report's run read files this command line does not name.
    PathsNotGiven {
        /// The report.
        report: PathBuf,
        /// The report's flags that name them, with their values.
        flags: Vec<String>,
    },
    /// The report is not a report with a run's flags.
    NotRerunnable {
        /// The report.
        report: PathBuf,
        /// What is wrong with it.
        why: String,
    },
}

impl fmt::Display for RerunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RerunError::FlagsBeside { report, flags } => write!(
                f,
                "--rerun {}: the run's flags come from the report; give only output flags \
                 (--json, --output, --html, ...) and the files the run reads (--trace, \
                 --perf, --faults, --profiles-dir) beside it, not {}",
                report.display(),
                flags.join(" ")
            ),
            RerunError::Read(error) => write!(f, "{error}"),
            RerunError::PathsNotGiven { report, flags } => write!(
                f,
                "--rerun {}: the report's run read files ({}); a rerun follows no path \
                 from a report: give {} beside --rerun (the same files to run it again)",
                report.display(),
                flags.join(" "),
                flags
                    .iter()
                    .filter(|f| f.starts_with("--"))
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            RerunError::NotRerunnable { report, why } => {
                write!(f, "--rerun {}: {why}", report.display())
            }
        }
    }
}

impl std::error::Error for RerunError {}

/// The flags of the run `report` describes: its `config.flags` (absent when
/// the run had none), if its `config` was written with its workload.
pub fn report_flags(report: &Path) -> Result<Vec<String>, RerunError> {
    let not = |why: &str| RerunError::NotRerunnable {
        report: report.to_path_buf(),
        why: why.to_string(),
    };
    let text = read_to_string("--rerun", report, FileKind::Report).map_err(RerunError::Read)?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| not(&format!("not JSON: {e}")))?;
    let config = v.get("config").ok_or_else(|| not("no `config`"))?;
    if config.get("workload").is_none() {
        return Err(not(
            "its `config` has no `workload`, so it does not say how it ran (written by \
             an older version, or by a command that does not record its flags)",
        ));
    }
    let Some(flags) = config.get("flags") else {
        return Ok(Vec::new());
    };
    flags
        .as_array()
        .and_then(|a| {
            a.iter()
                .map(|f| f.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| not("`config.flags` is not a list of strings"))
}

/// Why a report's flag is not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// Not a deployment or workload flag (an output flag, a bare word, an
    /// unknown flag): never taken from a report.
    NotARunFlag,
    /// It names a file the run would read.
    NamesAPath,
}

/// One of a report's flags that is not taken, as it was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dropped {
    /// The flag's tokens (the flag, and its value when it takes one).
    pub tokens: Vec<String>,
    /// Why.
    pub why: DropReason,
}

/// Whether each long flag a report may carry takes a value.
fn run_flag_table() -> BTreeMap<String, bool> {
    let mut table = BTreeMap::new();
    let deploy = DeployArgs::augment_args(Command::new("d"));
    let workload = WorkloadArgs::augment_args(Command::new("w"));
    let scale = super::ScaleArgs::augment_args(Command::new("s"));
    for arg in deploy
        .get_arguments()
        .chain(workload.get_arguments())
        .chain(scale.get_arguments())
    {
        if let Some(long) = arg.get_long() {
            let takes = !matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse);
            table.insert(long.to_string(), takes);
        }
    }
    // The deprecated spelling `run_flags` writes under its current name.
    table.remove("speedup-ratio");
    table.insert("concurrency".into(), true);
    table.insert("no-multi-step".into(), false);
    table
}

/// Whether clap takes `token`, after a flag that takes a value, as that
/// value: not a flag, but a negative number is one.
fn is_value(token: &str) -> bool {
    !token.starts_with('-') || token.parse::<f64>().is_ok()
}

/// Whether `--name value` makes the run read a file.
fn names_a_path(name: &str, value: Option<&str>) -> bool {
    match (name, value) {
        ("trace" | "profiles-dir", _) => true,
        ("perf", Some(v)) => v.starts_with("profile:") || v.starts_with("npz:"),
        ("overheads", Some(v)) => v != "off" && v != "profile",
        // `--faults` and `--scale-plan` take a file when one is there,
        // else the plan itself.
        ("faults" | "scale-plan", Some(v)) => Path::new(v).exists(),
        _ => false,
    }
}

/// The report's `flags` split into those taken and those dropped; a flag
/// whose name is in `beside` (given on the command line) is dropped too,
/// the command line's own taking its place.
pub fn filter(flags: &[String], beside: &[String]) -> (Vec<String>, Vec<Dropped>) {
    let table = run_flag_table();
    let (mut kept, mut dropped) = (Vec::new(), Vec::new());
    let mut tokens = flags.iter().peekable();
    while let Some(token) = tokens.next() {
        let Some(body) = token.strip_prefix("--").filter(|b| !b.is_empty()) else {
            dropped.push(Dropped {
                tokens: vec![token.clone()],
                why: DropReason::NotARunFlag,
            });
            continue;
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let Some(&takes) = table.get(name) else {
            dropped.push(Dropped {
                tokens: vec![token.clone()],
                why: DropReason::NotARunFlag,
            });
            continue;
        };
        let mut these = vec![token.clone()];
        let value = match (takes, inline) {
            (_, Some(v)) => Some(v),
            // A value clap would read as a flag (`--seed --output x`) is
            // not one: the flag is dropped and the next token judged alone.
            (true, None) => match tokens.next_if(|v| is_value(v)) {
                Some(v) => {
                    these.push(v.clone());
                    Some(v.clone())
                }
                None => {
                    dropped.push(Dropped {
                        tokens: these,
                        why: DropReason::NotARunFlag,
                    });
                    continue;
                }
            },
            (false, None) => None,
        };
        if names_a_path(name, value.as_deref()) || beside.iter().any(|b| b == name) {
            dropped.push(Dropped {
                tokens: these,
                why: DropReason::NamesAPath,
            });
        } else {
            kept.extend(these);
        }
    }
    (kept, dropped)
}

/// The names of the long flags among `tokens` (`--trace t` gives `trace`).
fn names(tokens: &[String]) -> Vec<String> {
    tokens
        .iter()
        .filter_map(|t| t.strip_prefix("--"))
        .map(|t| t.split_once('=').map_or(t, |(n, _)| n).to_string())
        .collect()
}

/// The tokens of `given` (flags with their values) but those of the
/// flags that name files.
fn not_path_flags(given: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut skipping = false;
    for t in given {
        match t.strip_prefix("--") {
            Some(name) => {
                skipping = PATH_FLAGS.contains(&name);
                if !skipping {
                    out.push(t.clone());
                }
            }
            None if !skipping => out.push(t.clone()),
            None => {}
        }
    }
    out
}

/// The command line `argv` (whose subcommand `sub` reruns `report`) with
/// the report's taken flags put right after the subcommand's name; every
/// dropped flag is noted on stderr.
pub fn argv(
    argv: &[OsString],
    report: &Path,
    sub: &ArgMatches,
) -> Result<Vec<OsString>, RerunError> {
    let beside_tokens = given_run_flags(sub);
    let beside = names(&beside_tokens);
    let refused = not_path_flags(&beside_tokens);
    if !refused.is_empty() {
        return Err(RerunError::FlagsBeside {
            report: report.to_path_buf(),
            flags: refused,
        });
    }
    let (flags, dropped) = filter(&report_flags(report)?, &beside);
    let mut missing = Vec::new();
    for d in &dropped {
        let shown = d.tokens.join(" ");
        match d.why {
            DropReason::NotARunFlag => eprintln!(
                "note: --rerun {}: dropped `{shown}` from the report's flags (only deployment \
                 and workload flags are taken from a report)",
                report.display()
            ),
            DropReason::NamesAPath => {
                let given = names(&d.tokens).iter().all(|n| beside.contains(n));
                if given {
                    eprintln!(
                        "note: --rerun {}: the report's `{shown}` is replaced by the one given",
                        report.display()
                    );
                } else {
                    missing.extend(d.tokens.iter().cloned());
                }
            }
        }
    }
    if !missing.is_empty() {
        return Err(RerunError::PathsNotGiven {
            report: report.to_path_buf(),
            flags: missing,
        });
    }
    // The subcommand is the first argument: the binary takes no option of
    // its own before it.
    let split = argv.len().min(2);
    let mut out: Vec<OsString> = argv[..split].to_vec();
    out.extend(flags.into_iter().map(OsString::from));
    out.extend(argv[split..].iter().cloned());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn run_flags_are_taken_and_everything_else_is_dropped() {
        let report = strings(&[
            "--backend",
            "sglang",
            "--output",
            "/tmp/x.json",
            "--seed",
            "-3",
            "--html=/tmp/x.html",
            "--no-multi-step",
            "--kv-events-out",
            "/tmp/k",
            "--per-request-jsonl",
            "-o",
            "--requests=40",
            "--disaggregation-decode-enable-radix-cache",
        ]);
        let (kept, dropped) = filter(&report, &[]);
        assert_eq!(
            kept,
            strings(&[
                "--backend",
                "sglang",
                "--seed",
                "-3",
                "--no-multi-step",
                "--requests=40",
                "--disaggregation-decode-enable-radix-cache",
            ])
        );
        let shown: Vec<String> = dropped.iter().map(|d| d.tokens.join(" ")).collect();
        assert_eq!(
            shown,
            strings(&[
                "--output",
                "/tmp/x.json",
                "--html=/tmp/x.html",
                "--kv-events-out",
                "/tmp/k",
                "--per-request-jsonl",
                "-o",
            ])
        );
        assert!(dropped.iter().all(|d| d.why == DropReason::NotARunFlag));
        // A flag whose value would be read as a flag is dropped, and what
        // follows judged on its own.
        let report = strings(&["--trace-format", "--output", "/tmp/x", "--prefill"]);
        let (kept, dropped) = filter(&report, &[]);
        assert!(kept.is_empty(), "{kept:?}");
        let shown: Vec<String> = dropped.iter().map(|d| d.tokens.join(" ")).collect();
        assert_eq!(
            shown,
            strings(&["--trace-format", "--output", "/tmp/x", "--prefill"])
        );
    }

    #[test]
    fn flags_that_read_files_are_dropped_as_paths() {
        let report = strings(&[
            "--trace",
            "/etc/passwd",
            "--perf",
            "profile:/dev/zero",
            "--faults",
            "/etc/hostname",
            "--model",
            "qwen3-8b",
            "--profiles-dir",
            "/tmp",
            "--trace-format",
            "mooncake",
        ]);
        let (kept, dropped) = filter(&report, &[]);
        assert_eq!(
            kept,
            strings(&["--model", "qwen3-8b", "--trace-format", "mooncake"])
        );
        assert_eq!(dropped.len(), 4);
        assert!(dropped.iter().all(|d| d.why == DropReason::NamesAPath));
        // A fault plan and a built-in step-time model are not paths.
        let report = strings(&[
            "--faults",
            "kill 1 at 2s; drop 0.01",
            "--perf",
            "dynamo-polynomial",
        ]);
        let (kept, dropped) = filter(&report, &[]);
        assert_eq!(kept, report);
        assert!(dropped.is_empty());
        // A flag given beside --rerun replaces the report's.
        let (kept, dropped) = filter(&report, &strings(&["perf"]));
        assert_eq!(kept, strings(&["--faults", "kill 1 at 2s; drop 0.01"]));
        assert_eq!(dropped[0].tokens, strings(&["--perf", "dynamo-polynomial"]));
    }

    #[test]
    fn every_flag_a_report_records_is_taken() {
        // What `run_flags` writes for a run with every kind of flag parses
        // back whole (none of these reads a file).
        let report = strings(&[
            "--backend",
            "vllm",
            "--prefill",
            "3",
            "--dp-size",
            "2",
            "--pass-speedup-ratio",
            "2",
            "--model",
            "qwen3-8b",
            "--gpu",
            "h100",
            "--slo",
            "ttft:p90=600ms",
            "--requests",
            "10",
            "--skip-bad-lines",
            "--concurrency",
            "4",
            "--no-multi-step",
        ]);
        let (kept, dropped) = filter(&report, &[]);
        assert_eq!(kept, report);
        assert!(dropped.is_empty());
    }
}
