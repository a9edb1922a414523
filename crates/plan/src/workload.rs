//! The workloads a plan generates: fixed prompt and output lengths,
//! Poisson arrivals ([`handoff_workload::SyntheticWorkload`]), written as
//! Mooncake JSONL for every layout to replay.

use handoff_workload::{LengthDist, SyntheticConfig, SyntheticWorkload};
use std::path::Path;

/// The longest prompt or output, and the most requests, generated.
pub const MAX_TOKENS: u32 = 1_000_000;
/// The most requests generated.
pub const MAX_REQUESTS: u64 = 1_000_000;

/// The shape of a generated workload: fixed lengths, Poisson arrivals.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WorkloadShape {
    /// Prompt tokens.
    pub isl: u32,
    /// Output tokens.
    pub osl: u32,
    /// Requests.
    pub requests: u64,
    /// Arrivals per second.
    pub rate: f64,
    /// Shared-prefix groups (0: none).
    pub prefix_groups: u32,
}

/// Why a workload was not generated.
#[derive(Clone, Debug, PartialEq)]
pub enum WorkloadError {
    /// A length outside `1..=`[`MAX_TOKENS`].
    Lengths,
    /// A request count outside `1..=`[`MAX_REQUESTS`].
    Requests,
    /// A rate that is not a positive number.
    Rate,
    /// Its file could not be written.
    Io {
        /// The file or folder.
        path: String,
        /// The system's reason.
        why: String,
    },
}

impl std::fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkloadError::Lengths => {
                write!(f, "plan: --isl and --osl must be 1..={MAX_TOKENS} tokens")
            }
            WorkloadError::Requests => write!(f, "plan: --requests must be 1..={MAX_REQUESTS}"),
            WorkloadError::Rate => write!(f, "plan: --rate must be a positive number"),
            WorkloadError::Io { path, why } => write!(f, "{path}: {why}"),
        }
    }
}

impl std::error::Error for WorkloadError {}

impl WorkloadShape {
    /// Whether every field is in range.
    pub fn check(&self) -> Result<(), WorkloadError> {
        if !(1..=MAX_TOKENS).contains(&self.isl) || !(1..=MAX_TOKENS).contains(&self.osl) {
            return Err(WorkloadError::Lengths);
        }
        if !(1..=MAX_REQUESTS).contains(&self.requests) {
            return Err(WorkloadError::Requests);
        }
        if !(self.rate.is_finite() && self.rate > 0.0) {
            return Err(WorkloadError::Rate);
        }
        Ok(())
    }
}

/// Writes the workload `w` describes to `path` as Mooncake JSONL; the path
/// as a flag takes it.
pub fn write_workload(path: &Path, w: WorkloadShape) -> Result<String, WorkloadError> {
    w.check()?;
    let io = |p: &Path, e: std::io::Error| WorkloadError::Io {
        path: p.display().to_string(),
        why: e.to_string(),
    };
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| io(d, e))?;
    }
    let items = SyntheticWorkload::new(SyntheticConfig {
        requests: w.requests,
        rate_per_sec: w.rate,
        input_tokens: LengthDist::Fixed(w.isl),
        output_tokens: LengthDist::Fixed(w.osl),
        prefix_groups: w.prefix_groups,
        ..SyntheticConfig::default()
    });
    let f = std::fs::File::create(path).map_err(|e| io(path, e))?;
    let mut out = handoff_workload::TraceWriter::new(std::io::BufWriter::new(f));
    for item in items {
        out.write(&item).map_err(|e| io(path, e))?;
    }
    out.into_inner().map_err(|e| io(path, e))?;
    Ok(path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> WorkloadShape {
        WorkloadShape {
            isl: 100,
            osl: 10,
            requests: 5,
            rate: 2.0,
            prefix_groups: 0,
        }
    }

    #[test]
    fn out_of_range_shapes_are_refused_with_the_flag() {
        let bad = |f: fn(&mut WorkloadShape)| {
            let mut s = shape();
            f(&mut s);
            s.check().unwrap_err()
        };
        assert_eq!(bad(|s| s.isl = 0), WorkloadError::Lengths);
        assert_eq!(bad(|s| s.osl = MAX_TOKENS + 1), WorkloadError::Lengths);
        assert_eq!(bad(|s| s.requests = 0), WorkloadError::Requests);
        assert_eq!(bad(|s| s.rate = f64::NAN), WorkloadError::Rate);
        assert_eq!(bad(|s| s.rate = 0.0), WorkloadError::Rate);
        assert!(WorkloadError::Requests.to_string().contains("--requests"));
        assert_eq!(shape().check(), Ok(()));
    }

    #[test]
    fn writes_one_line_per_request() {
        let dir = std::env::temp_dir().join(format!("handoff-plan-wl-{}", std::process::id()));
        let path = dir.join("w.jsonl");
        assert_eq!(
            write_workload(&path, shape()).unwrap(),
            path.display().to_string()
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 5);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
