//! `--scale-plan`: scale events in one line, merged into a fault plan.
//!
//! ```text
//! t=30s:up:decode, t=60s:drain:3, t=90s:remove:3
//! ```
//!
//! Items are separated by `,`, `;` or newlines; each is `t=TIME:ACTION:ARG`
//! with TIME as in the fault plan (`1.5s`, `250ms`), ACTION `up` (ARG a
//! pool, `prefill` or `decode`), `drain` or `remove` (ARG a worker id).

use crate::fault::{parse_time, Fault, TimedFault};
use crate::scale::ScalePool;
use handoff_core::ids::WorkerId;
use handoff_core::time::Instant;
use std::fmt;

/// Most events one scale plan may hold.
pub const MAX_SCALE_EVENTS: usize = 100_000;

/// What is wrong with a scale plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScalePlanProblem {
    /// An item that is not `t=TIME:ACTION:ARG`.
    Form,
    /// A time the fault plan's syntax refuses (its message).
    Time(String),
    /// An action other than `up`, `drain` or `remove`.
    Action,
    /// `up` of something other than `prefill` or `decode`.
    Pool,
    /// A worker id that is not a number up to 2^32-1.
    Worker,
    /// More than [`MAX_SCALE_EVENTS`] items.
    TooMany,
}

/// A located error in a scale plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalePlanError {
    /// Byte offset of the offending field.
    pub offset: usize,
    /// What is wrong.
    pub problem: ScalePlanProblem,
}

impl fmt::Display for ScalePlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "scale plan at byte {}: ", self.offset)?;
        match &self.problem {
            ScalePlanProblem::Form => f.write_str("expected t=TIME:ACTION:ARG"),
            ScalePlanProblem::Time(why) => f.write_str(why),
            ScalePlanProblem::Action => f.write_str("expected up, drain or remove"),
            ScalePlanProblem::Pool => f.write_str("expected a pool (prefill or decode)"),
            ScalePlanProblem::Worker => f.write_str("expected a worker id"),
            ScalePlanProblem::TooMany => write!(f, "more than {MAX_SCALE_EVENTS} events"),
        }
    }
}

impl std::error::Error for ScalePlanError {}

fn err(offset: usize, problem: ScalePlanProblem) -> ScalePlanError {
    ScalePlanError { offset, problem }
}

/// Parses a scale plan into timed faults, in text order.
pub fn parse_scale_plan(text: &str) -> Result<Vec<TimedFault>, ScalePlanError> {
    let mut out = Vec::new();
    let mut at = 0;
    for item in text.split([',', ';', '\n']) {
        let here = at;
        at += item.len() + 1;
        let lead = item.len() - item.trim_start().len();
        let t = item.trim();
        if t.is_empty() {
            continue;
        }
        if out.len() >= MAX_SCALE_EVENTS {
            return Err(err(here, ScalePlanProblem::TooMany));
        }
        out.push(item_fault(t, here + lead)?);
    }
    Ok(out)
}

fn item_fault(t: &str, base: usize) -> Result<TimedFault, ScalePlanError> {
    let mut parts = t.splitn(3, ':');
    let (Some(time), Some(action), Some(arg)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(err(base, ScalePlanProblem::Form));
    };
    let Some(time) = time.strip_prefix("t=") else {
        return Err(err(base, ScalePlanProblem::Form));
    };
    let ns = parse_time(time.trim())
        .map_err(|k| err(base + 2, ScalePlanProblem::Time(k.to_string())))?;
    let action_at = base + 2 + time.len() + 1;
    let arg_at = action_at + action.len() + 1;
    let worker = || {
        let a = arg.trim();
        if a.bytes().all(|b| b.is_ascii_digit()) {
            a.parse::<u32>().ok().map(WorkerId)
        } else {
            None
        }
        .ok_or_else(|| err(arg_at, ScalePlanProblem::Worker))
    };
    let fault = match action.trim() {
        "up" => Fault::ScaleUp {
            pool: ScalePool::from_name(arg.trim())
                .ok_or_else(|| err(arg_at, ScalePlanProblem::Pool))?,
        },
        "drain" => Fault::Drain { worker: worker()? },
        "remove" => Fault::Remove { worker: worker()? },
        _ => return Err(err(action_at, ScalePlanProblem::Action)),
    };
    Ok(TimedFault {
        at: Instant(ns),
        fault,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_and_locates_errors() {
        let p = parse_scale_plan("t=30s:up:decode, t=60s:drain:3\nt=1.5s:remove:3").unwrap();
        assert_eq!(
            p,
            vec![
                TimedFault {
                    at: Instant(30_000_000_000),
                    fault: Fault::ScaleUp {
                        pool: ScalePool::Decode
                    }
                },
                TimedFault {
                    at: Instant(60_000_000_000),
                    fault: Fault::Drain {
                        worker: WorkerId(3)
                    }
                },
                TimedFault {
                    at: Instant(1_500_000_000),
                    fault: Fault::Remove {
                        worker: WorkerId(3)
                    }
                },
            ]
        );
        let e = |s| parse_scale_plan(s).unwrap_err();
        assert_eq!(e("t=30s:up:gpu"), err(9, ScalePlanProblem::Pool));
        assert_eq!(
            e("t=1s:up:decode, t=2s:grow:1"),
            err(21, ScalePlanProblem::Action)
        );
        assert_eq!(e("t=1s:drain:x"), err(11, ScalePlanProblem::Worker));
        assert_eq!(e("x=1s:drain:1"), err(0, ScalePlanProblem::Form));
        assert!(matches!(
            e("t=1m:drain:1").problem,
            ScalePlanProblem::Time(_)
        ));
        assert_eq!(e("t=1m:drain:1").offset, 2);
        assert!(e("t=1s:drain:x")
            .to_string()
            .starts_with("scale plan at byte 11"));
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,64}") {
            let _ = parse_scale_plan(&s);
        }

        #[test]
        fn never_panics_on_near_forms(s in "[t=0-9.smu:,;a-z \\n]{0,48}") {
            let _ = parse_scale_plan(&s);
        }
    }
}
