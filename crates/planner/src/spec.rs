//! `--planner NAME[:KEY=VALUE,...]`: a built-in planner from its text.

use crate::throughput::{ThroughputConfig, ThroughputPlanner};
use crate::Planner;
use handoff_core::Duration;
use std::fmt;

/// Longest spec accepted, in bytes.
pub const MAX_PLANNER_SPEC_BYTES: usize = 4096;

/// What is wrong with a planner spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlannerSpecProblem {
    /// Longer than [`MAX_PLANNER_SPEC_BYTES`].
    TooLong,
    /// No built-in planner of that name.
    UnknownPlanner,
    /// An option the planner does not take.
    UnknownOption,
    /// An option without `=`.
    MissingValue,
    /// A value that is not a number in the option's range.
    BadValue {
        /// The range, as text.
        range: &'static str,
    },
}

/// A located error in a planner spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannerSpecError {
    /// Byte offset of the offending part.
    pub offset: usize,
    /// What is wrong.
    pub problem: PlannerSpecProblem,
}

impl fmt::Display for PlannerSpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "planner spec at byte {}: ", self.offset)?;
        match &self.problem {
            PlannerSpecProblem::TooLong => {
                write!(f, "longer than {MAX_PLANNER_SPEC_BYTES} bytes")
            }
            PlannerSpecProblem::UnknownPlanner => {
                write!(f, "unknown planner (expected throughput)")
            }
            PlannerSpecProblem::UnknownOption => write!(
                f,
                "unknown option (expected prefill-tps, decode-tps, min, expected-ttft-ms)"
            ),
            PlannerSpecProblem::MissingValue => write!(f, "an option is KEY=VALUE"),
            PlannerSpecProblem::BadValue { range } => write!(f, "value must be in {range}"),
        }
    }
}

impl std::error::Error for PlannerSpecError {}

fn bad(offset: usize, problem: PlannerSpecProblem) -> PlannerSpecError {
    PlannerSpecError { offset, problem }
}

fn real(
    at: usize,
    v: &str,
    lo: f64,
    hi: f64,
    range: &'static str,
) -> Result<f64, PlannerSpecError> {
    match v.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && (lo..=hi).contains(&x) && x > 0.0 => Ok(x),
        _ => Err(bad(at, PlannerSpecProblem::BadValue { range })),
    }
}

/// Builds the built-in planner `spec` names (`throughput`, with options
/// `prefill-tps`, `decode-tps`, `min`, `expected-ttft-ms`), called every
/// `interval`.
pub fn parse_planner(spec: &str, interval: Duration) -> Result<Box<dyn Planner>, PlannerSpecError> {
    if spec.len() > MAX_PLANNER_SPEC_BYTES {
        return Err(bad(MAX_PLANNER_SPEC_BYTES, PlannerSpecProblem::TooLong));
    }
    let (name, opts) = spec.split_once(':').unwrap_or((spec, ""));
    if name.trim() != "throughput" {
        return Err(bad(0, PlannerSpecProblem::UnknownPlanner));
    }
    let mut c = ThroughputConfig {
        interval,
        ..ThroughputConfig::default()
    };
    let mut at = name.len() + 1;
    for opt in opts.split(',') {
        let here = at;
        at += opt.len() + 1;
        if opt.trim().is_empty() {
            continue;
        }
        let Some((k, v)) = opt.split_once('=') else {
            return Err(bad(here, PlannerSpecProblem::MissingValue));
        };
        let vat = here + k.len() + 1;
        match k.trim() {
            "prefill-tps" => c.prefill_tokens_per_s = real(vat, v, 0.0, 1e9, "(0, 1e9]")?,
            "decode-tps" => c.decode_tokens_per_s = real(vat, v, 0.0, 1e9, "(0, 1e9]")?,
            "expected-ttft-ms" => c.expected_ttft_ms = Some(real(vat, v, 0.0, 1e7, "(0, 1e7]")?),
            "min" => {
                c.min_workers = match v.trim().parse::<u32>() {
                    Ok(n) if n <= 65_536 => n,
                    _ => {
                        return Err(bad(
                            vat,
                            PlannerSpecProblem::BadValue { range: "0..=65536" },
                        ))
                    }
                }
            }
            _ => return Err(bad(here, PlannerSpecProblem::UnknownOption)),
        }
    }
    Ok(Box::new(ThroughputPlanner::new(c)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn options_parse_and_errors_are_located() {
        let iv = Duration::from_secs(5);
        assert!(parse_planner("throughput", iv).is_ok());
        assert!(parse_planner("throughput:prefill-tps=20000,decode-tps=900,min=2", iv).is_ok());
        let e = |s| parse_planner(s, iv).err().expect("an error");
        assert_eq!(e("load").problem, PlannerSpecProblem::UnknownPlanner);
        assert_eq!(
            e("throughput:gpu=2"),
            bad(11, PlannerSpecProblem::UnknownOption)
        );
        assert_eq!(
            e("throughput:min"),
            bad(11, PlannerSpecProblem::MissingValue)
        );
        assert_eq!(
            e("throughput:min=1,decode-tps=-4"),
            bad(28, PlannerSpecProblem::BadValue { range: "(0, 1e9]" })
        );
        assert_eq!(
            e("throughput:min=1,decode-tps=-4").to_string(),
            "planner spec at byte 28: value must be in (0, 1e9]"
        );
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in "\\PC{0,48}") {
            let _ = parse_planner(&s, Duration::from_secs(1));
        }
    }
}
