//! Why an experiment, a design-map point or a scenario could not run.

use crate::config::ConfigError;
use handoff_deployment::{DeploymentError, EngineError};
use handoff_live_adapter::RemoteError;

/// Why an experiment, a design-map point or a scenario could not run.
#[derive(Debug)]
pub enum LabError {
    /// The experiment's configuration is refused.
    Config(ConfigError),
    /// SGLang refuses the cores' configuration.
    Sglang(handoff_sched_sglang::ConfigError),
    /// An engine spec builds no core.
    Engine(EngineError),
    /// The deployment refuses a core.
    Deployment(DeploymentError),
    /// A live run (virtual or wall clock) failed.
    Live(RemoteError),
    /// The seed's timings have no engine spec, so they run in replay only.
    SeedTimingsReplayOnly,
    /// A session log line is not what the §6 log writes.
    Log {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        problem: LogProblem,
    },
    /// The experiment's output lacks a run of this variant.
    NoRun(&'static str),
    /// The experiment's output lacks this verdict.
    NoVerdict(&'static str),
    /// E4's session log and its summary count reseed lookups differently.
    ReseedsDisagree {
        /// Reseed lookups in the log.
        log: u64,
        /// Reseed lookups in the summary.
        summary: u64,
    },
}

/// What is wrong with a session log line.
#[derive(Debug)]
pub enum LogProblem {
    /// Not JSON.
    Json(serde_json::Error),
    /// A field the event needs is absent.
    Missing(&'static str),
    /// A bypass miss of a reason the log never writes.
    UnknownMiss(String),
}

impl std::fmt::Display for LabError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LabError::Config(e) => e.fmt(f),
            LabError::Sglang(e) => write!(f, "sglang config: {e}"),
            LabError::Engine(e) => e.fmt(f),
            LabError::Deployment(e) => e.fmt(f),
            LabError::Live(e) => e.fmt(f),
            LabError::SeedTimingsReplayOnly => {
                f.write_str("the seed's timings run in replay only (no engine spec expresses them)")
            }
            LabError::Log { line, problem } => match problem {
                LogProblem::Json(e) => write!(f, "session log line {line}: {e}"),
                LogProblem::Missing(key) => write!(f, "session log line {line}: no `{key}`"),
                LogProblem::UnknownMiss(r) => {
                    write!(f, "session log line {line}: unknown miss `{r}`")
                }
            },
            LabError::NoRun(label) => write!(f, "the experiment has no {label} run"),
            LabError::NoVerdict(id) => write!(f, "the experiment has no {id} verdict"),
            LabError::ReseedsDisagree { log, summary } => write!(
                f,
                "E4's session log has {log} reseed lookups, its summary {summary}"
            ),
        }
    }
}

impl std::error::Error for LabError {}

impl From<ConfigError> for LabError {
    fn from(e: ConfigError) -> Self {
        LabError::Config(e)
    }
}

impl From<RemoteError> for LabError {
    fn from(e: RemoteError) -> Self {
        LabError::Live(e)
    }
}

impl From<DeploymentError> for LabError {
    fn from(e: DeploymentError) -> Self {
        LabError::Deployment(e)
    }
}
