//! `replay --rerun REPORT.json`: a report's own `config.flags` (see
//! [`super::invocation`]) run again, with this command line's output flags.

use super::invocation::given_run_flags;
use clap::ArgMatches;
use handoff_workload::file::{read_to_string, FileError, FileKind};
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

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
                 (--json, --output, --html, ...) beside it, not {}",
                report.display(),
                flags.join(" ")
            ),
            RerunError::Read(error) => write!(f, "{error}"),
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

/// The command line `argv` (whose subcommand `sub` reruns `report`) with
/// the report's flags put right after the subcommand's name.
pub fn argv(
    argv: &[OsString],
    report: &Path,
    sub: &ArgMatches,
) -> Result<Vec<OsString>, RerunError> {
    let beside = given_run_flags(sub);
    if !beside.is_empty() {
        return Err(RerunError::FlagsBeside {
            report: report.to_path_buf(),
            flags: beside,
        });
    }
    let flags = report_flags(report)?;
    // The subcommand is the first argument: the binary takes no option of
    // its own before it.
    let split = argv.len().min(2);
    let mut out: Vec<OsString> = argv[..split].to_vec();
    out.extend(flags.into_iter().map(OsString::from));
    out.extend(argv[split..].iter().cloned());
    Ok(out)
}
