//! Why a plan, a check of AIConfigurator's picks or one of their files
//! was refused. Each message is the one the command line prints after
//! `error: `, naming the flag or file it is about.

use crate::aic::AicError;
use crate::workload::WorkloadError;

/// What stops a plan.
#[derive(Clone, Debug, PartialEq)]
pub enum PlanError {
    /// No GPU budget, or one outside `1..=most`.
    Budget {
        /// The largest budget ([`crate::MAX_GPUS`]).
        most: u32,
    },
    /// A DP size outside 1..=256.
    Dp(u32),
    /// The smallest layout asked for exceeds the budget.
    MinAboveMax {
        /// `--min-gpus`.
        min: u32,
        /// `--gpus`.
        max: u32,
    },
    /// No layout fits the budget.
    NoLayout {
        /// `--min-gpus`.
        min: u32,
        /// `--gpus`.
        max: u32,
    },
    /// More layouts than a plan runs.
    TooManyLayouts {
        /// Layouts enumerated.
        found: usize,
        /// The most a plan runs ([`crate::MAX_LAYOUTS`]).
        most: usize,
    },
    /// The runner could not make layout `index` a configuration.
    Layout {
        /// Configuration number.
        index: usize,
        /// The runner's reason.
        why: String,
    },
    /// A summary without a `rows` array.
    NoRows,
    /// No row of the summary ran.
    NoneRan,
    /// A chart of the page could not be drawn.
    Chart(String),
    /// JSON could not be written.
    Json(String),
    /// A file could not be written.
    Io {
        /// The file.
        path: String,
        /// The system's reason.
        why: String,
    },
    /// A generated workload's shape is out of range, or its file failed.
    Workload(WorkloadError),
    /// AIConfigurator's file was refused as a whole.
    Aic {
        /// The file as named.
        file: String,
        /// Why.
        error: AicError,
    },
}

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlanError::Budget { most } => {
                write!(f, "plan: give --gpus N (1..={most}), the GPU budget")
            }
            PlanError::Dp(d) => write!(f, "plan --dp {d}: each DP size must be in 1..=256"),
            PlanError::MinAboveMax { min, max } => {
                write!(f, "--min-gpus {min} exceeds --gpus {max}")
            }
            PlanError::NoLayout { min, max } => {
                write!(f, "plan: no layout fits {min}..={max} GPUs")
            }
            PlanError::TooManyLayouts { found, most } => {
                write!(f, "plan: {found} layouts; at most {most}")
            }
            PlanError::Layout { index, why } => write!(f, "layout {index}: {why}"),
            PlanError::NoRows => write!(f, "plan: the summary has no rows"),
            PlanError::NoneRan => {
                write!(f, "plan: no layout ran (see the summary's `error` column)")
            }
            PlanError::Chart(why) | PlanError::Json(why) => f.write_str(why),
            PlanError::Io { path, why } => write!(f, "{path}: {why}"),
            PlanError::Workload(e) => e.fmt(f),
            PlanError::Aic { file, error } => write!(f, "--check-aic {file}: {error}"),
        }
    }
}

impl std::error::Error for PlanError {}

impl From<WorkloadError> for PlanError {
    fn from(e: WorkloadError) -> Self {
        PlanError::Workload(e)
    }
}

/// Writes `body` to `path`, the error naming the file.
pub(crate) fn write_file(path: &std::path::Path, body: &str) -> Result<(), PlanError> {
    std::fs::write(path, body).map_err(|e| PlanError::Io {
        path: path.display().to_string(),
        why: e.to_string(),
    })
}
