//! Why a request failed, as one enum from the serving director to the
//! report, per-request records, metrics and HTTP errors; the kebab-case
//! name is its only string form, written at the serialisation edge.

use crate::transition::CancelReason;
use core::cmp::Ordering;
use core::fmt;
use core::str::FromStr;

/// Why a request ended without completing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureReason {
    /// Its handoff ended early for this reason and was not migrated (a
    /// client cancel, a lost or restarted peer, an expiry, a failed
    /// transfer, an unsupported reservation, a teardown).
    Handoff(CancelReason),
    /// No worker of the pool it needed was up to take it.
    NoWorker,
    /// A worker holding it was lost and it could not be migrated.
    WorkerLost,
    /// The worker it was sent to was down when it arrived.
    WorkerDown,
    /// The server shut down while it was in flight.
    Shutdown,
    /// The run ended with it still in flight.
    Unfinished,
    /// A role of its handoff ended with no reason given.
    Unspecified,
}

impl FailureReason {
    /// Every reason that is not a [`CancelReason`], for parsing.
    const OWN: [FailureReason; 6] = [
        FailureReason::NoWorker,
        FailureReason::WorkerLost,
        FailureReason::WorkerDown,
        FailureReason::Shutdown,
        FailureReason::Unfinished,
        FailureReason::Unspecified,
    ];

    /// The stable kebab-case name reports, records and errors carry
    /// (a handoff's reason keeps its [`CancelReason::name`]).
    pub fn name(self) -> &'static str {
        match self {
            FailureReason::Handoff(r) => r.name(),
            FailureReason::NoWorker => "no-worker",
            FailureReason::WorkerLost => "worker-lost",
            FailureReason::WorkerDown => "worker-down",
            FailureReason::Shutdown => "shutdown",
            FailureReason::Unfinished => "unfinished",
            FailureReason::Unspecified => "failed",
        }
    }
}

impl From<CancelReason> for FailureReason {
    fn from(r: CancelReason) -> Self {
        FailureReason::Handoff(r)
    }
}

/// Ordered by name, so maps keyed by reason print in the same order as
/// maps keyed by the names did.
impl Ord for FailureReason {
    fn cmp(&self, other: &Self) -> Ordering {
        self.name().cmp(other.name())
    }
}

impl PartialOrd for FailureReason {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is no [`FailureReason`]'s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownFailureReason(pub String);

impl fmt::Display for UnknownFailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown failure reason {:?}", self.0)
    }
}

impl std::error::Error for UnknownFailureReason {}

impl FromStr for FailureReason {
    type Err = UnknownFailureReason;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CancelReason::ALL
            .iter()
            .map(|&r| FailureReason::Handoff(r))
            .chain(Self::OWN)
            .find(|r| r.name() == s)
            .ok_or_else(|| UnknownFailureReason(s.to_string()))
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for FailureReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for FailureReason {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_and_names_are_distinct() {
        let all: Vec<FailureReason> = CancelReason::ALL
            .iter()
            .map(|&r| FailureReason::from(r))
            .chain(FailureReason::OWN)
            .collect();
        let mut names: Vec<&str> = all.iter().map(|r| r.name()).collect();
        for r in &all {
            assert_eq!(r.name().parse::<FailureReason>(), Ok(*r));
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len());
        assert!("hot".parse::<FailureReason>().is_err());
    }

    #[test]
    fn order_is_by_name() {
        let mut v = [
            FailureReason::WorkerLost,
            FailureReason::Handoff(CancelReason::Client),
            FailureReason::NoWorker,
        ];
        v.sort();
        let names: Vec<&str> = v.iter().map(|r| r.name()).collect();
        assert_eq!(names, ["client", "no-worker", "worker-lost"]);
    }
}
