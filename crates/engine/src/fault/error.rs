//! Why a fault plan text does not parse.

use handoff_core::ids::WorkerId;
use handoff_core::time::Instant;
use std::fmt;

/// A [`FaultPlan`](super::FaultPlan) text that does not parse, with where and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultPlanError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters, of the offending token (or just past
    /// the directive's last token when something is missing).
    pub column: usize,
    /// What is wrong.
    pub kind: FaultPlanErrorKind,
}

/// What a token was expected to be, in [`FaultPlanErrorKind::Expected`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expected {
    /// A worker id, `0..=4294967295`.
    WorkerId,
    /// A request id, `0..=18446744073709551615`.
    RequestId,
    /// A seed, `0..=18446744073709551615`.
    Seed,
    /// A decimal number in `[0, 1]`.
    Probability,
    /// A time such as `1.5s`.
    Time,
    /// This keyword.
    Keyword(&'static str),
    /// A pool: `prefill` or `decode`.
    Pool,
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expected::WorkerId => f.write_str("a worker id"),
            Expected::RequestId => f.write_str("a request id"),
            Expected::Seed => f.write_str("a seed (an integer up to 2^64-1)"),
            Expected::Probability => f.write_str("a probability"),
            Expected::Time => f.write_str("a time like 1.5s, 250ms, 20us or 100ns"),
            Expected::Keyword(k) => write!(f, "`{k}`"),
            Expected::Pool => f.write_str("a pool (prefill or decode)"),
        }
    }
}

/// Why a [`FaultPlan`](super::FaultPlan) text does not parse. Quoted tokens are clipped to 40
/// characters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultPlanErrorKind {
    /// The first word of a directive is not a directive.
    UnknownDirective {
        /// The word.
        found: String,
    },
    /// A token is missing (`found: None`) or is not what the grammar needs.
    Expected {
        /// What was needed.
        expected: Expected,
        /// The token found instead; `None` at the end of the directive.
        found: Option<String>,
    },
    /// A number that is not in `[0, 1]` (or not finite) given as a
    /// probability.
    ProbabilityOutOfRange {
        /// The token.
        found: String,
    },
    /// A time with a minus sign.
    NegativeTime {
        /// The token.
        found: String,
    },
    /// A time past `u64::MAX` nanoseconds (about 584 years).
    TimeOutOfRange {
        /// The token.
        found: String,
    },
    /// A time with digits finer than a nanosecond.
    SubNanosecond {
        /// The token.
        found: String,
    },
    /// A partition that does not end after it starts.
    EmptyPartition {
        /// Its start.
        from: Instant,
        /// Its end.
        until: Instant,
    },
    /// A partition between a worker and itself.
    SelfPartition {
        /// The worker named twice.
        worker: WorkerId,
    },
    /// A once-only directive given again.
    Repeated {
        /// The directive.
        directive: &'static str,
        /// The line that gave it first.
        first_line: usize,
    },
    /// More than [`MAX_TIMED_FAULTS`](super::MAX_TIMED_FAULTS) timed faults.
    TooManyTimedFaults {
        /// The limit.
        max: usize,
    },
    /// A `fleet` directive naming a worker a previous one named.
    FleetMemberTwice {
        /// The worker.
        worker: WorkerId,
        /// The line that named it first.
        first_line: usize,
    },
    /// A `fleet` worker id above [`MAX_FLEET_WORKER`](crate::scale::MAX_FLEET_WORKER).
    FleetWorkerTooLarge {
        /// The worker.
        worker: WorkerId,
    },
    /// A token after a complete directive.
    Trailing {
        /// The token.
        found: String,
    },
}

impl fmt::Display for FaultPlanErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use FaultPlanErrorKind as K;
        match self {
            K::UnknownDirective { found } => write!(
                f,
                "unknown directive {found:?} (expected seed, kill, restart, partition, \
                 cancel, drop, duplicate, delay, transfer-fail, fleet, startup-delay, \
                 scale-up, ready, drain or remove)"
            ),
            K::FleetMemberTwice { worker, first_line } => write!(
                f,
                "worker {} is already in the fleet (line {first_line})",
                worker.0
            ),
            K::FleetWorkerTooLarge { worker } => write!(
                f,
                "fleet worker {} is above {}",
                worker.0,
                crate::scale::MAX_FLEET_WORKER
            ),
            K::Expected {
                expected,
                found: Some(found),
            } => write!(f, "expected {expected}, found {found:?}"),
            K::Expected {
                expected,
                found: None,
            } => write!(f, "expected {expected}, found end of directive"),
            K::ProbabilityOutOfRange { found } => {
                write!(f, "probability {found:?} is not a number in [0, 1]")
            }
            K::NegativeTime { found } => write!(f, "time {found:?} is negative"),
            K::TimeOutOfRange { found } => {
                write!(f, "time {found:?} is past {}ns", u64::MAX)
            }
            K::SubNanosecond { found } => {
                write!(f, "time {found:?} is finer than a nanosecond")
            }
            K::EmptyPartition { from, until } => write!(
                f,
                "partition from {} to {} is empty (it must end after it starts)",
                TimeText(from.0),
                TimeText(until.0)
            ),
            K::SelfPartition { worker } => write!(
                f,
                "a partition needs two different workers, found {} twice",
                worker.0
            ),
            K::Repeated {
                directive,
                first_line,
            } => write!(f, "`{directive}` given twice (first on line {first_line})"),
            K::TooManyTimedFaults { max } => write!(f, "more than {max} timed faults"),
            K::Trailing { found } => {
                write!(f, "unexpected {found:?} after a complete directive")
            }
        }
    }
}

impl fmt::Display for FaultPlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}, column {}: {}",
            self.line, self.column, self.kind
        )
    }
}

impl std::error::Error for FaultPlanError {}

/// A time in the text format, in the coarsest unit that is exact.
pub(super) struct TimeText(pub(super) u64);

impl fmt::Display for TimeText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        if n.is_multiple_of(1_000_000_000) {
            write!(f, "{}s", n / 1_000_000_000)
        } else if n.is_multiple_of(1_000_000) {
            write!(f, "{}ms", n / 1_000_000)
        } else if n.is_multiple_of(1_000) {
            write!(f, "{}us", n / 1_000)
        } else {
            write!(f, "{n}ns")
        }
    }
}
