//! Exactly-once bookkeeping checks, shared by every crate's tests.
//!
//! [`Ledger`] records every lease and reservation that opens and every end it
//! gets; a second end, an end without an open, or anything left open at drain
//! time is an [`AccountingError`]. [`check_identity`] checks the block
//! identity `free + cached + active + pinned + reserved == total`.

use crate::ids::HandoffId;
use crate::kv::KvCapacitySnapshot;
use std::collections::BTreeMap;
use std::fmt;

/// The two kinds of handoff ownership.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Holding {
    /// A pinned source (prefill KV held for a reader).
    SourceLease,
    /// A destination reservation.
    DestinationReservation,
}

/// A violated accounting rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AccountingError {
    /// Opened twice without an end in between.
    DoubleOpen(HandoffId, Holding),
    /// Ended twice (a double free).
    DoubleEnd(HandoffId, Holding),
    /// Ended without having been opened.
    EndWithoutOpen(HandoffId, Holding),
    /// Still open when everything should have drained (a leak).
    Leaked(HandoffId, Holding),
    /// The block identity does not hold.
    Identity(KvCapacitySnapshot),
}

impl fmt::Display for AccountingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AccountingError::DoubleOpen(id, h) => write!(f, "{h:?} {id} opened twice"),
            AccountingError::DoubleEnd(id, h) => write!(f, "{h:?} {id} ended twice"),
            AccountingError::EndWithoutOpen(id, h) => {
                write!(f, "{h:?} {id} ended but never opened")
            }
            AccountingError::Leaked(id, h) => write!(f, "{h:?} {id} never ended"),
            AccountingError::Identity(s) => write!(f, "block identity broken: {s:?}"),
        }
    }
}

impl std::error::Error for AccountingError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Open,
    Ended,
}

/// Records opens and ends of leases and reservations; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    entries: BTreeMap<(HandoffId, Holding), Status>,
    opened: u64,
    ended: u64,
}

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Self {
        Ledger::default()
    }

    /// Records that `id` acquired `what`.
    pub fn open(&mut self, id: HandoffId, what: Holding) -> Result<(), AccountingError> {
        match self.entries.insert((id, what), Status::Open) {
            Some(Status::Open) => Err(AccountingError::DoubleOpen(id, what)),
            Some(Status::Ended) => Err(AccountingError::DoubleOpen(id, what)),
            None => {
                self.opened += 1;
                Ok(())
            }
        }
    }

    /// Records that `id` released `what`.
    pub fn end(&mut self, id: HandoffId, what: Holding) -> Result<(), AccountingError> {
        match self.entries.get_mut(&(id, what)) {
            Some(s @ Status::Open) => {
                *s = Status::Ended;
                self.ended += 1;
                Ok(())
            }
            Some(Status::Ended) => Err(AccountingError::DoubleEnd(id, what)),
            None => Err(AccountingError::EndWithoutOpen(id, what)),
        }
    }

    /// Whether `id` currently holds `what`.
    pub fn is_open(&self, id: HandoffId, what: Holding) -> bool {
        self.entries.get(&(id, what)) == Some(&Status::Open)
    }

    /// Holdings opened so far.
    pub fn opened(&self) -> u64 {
        self.opened
    }

    /// Holdings ended so far.
    pub fn ended(&self) -> u64 {
        self.ended
    }

    /// Every holding that opened has ended exactly once.
    pub fn check_drained(&self) -> Result<(), AccountingError> {
        match self.entries.iter().find(|(_, s)| **s == Status::Open) {
            Some(((id, what), _)) => Err(AccountingError::Leaked(*id, *what)),
            None => Ok(()),
        }
    }
}

/// Checks `free + cached + active + pinned + reserved == total` without
/// underflow: the categories must not exceed the pool.
pub fn check_identity(s: &KvCapacitySnapshot) -> Result<(), AccountingError> {
    let accounted = s.kv_used_blocks() + s.cached_blocks;
    if accounted > s.total_blocks {
        Err(AccountingError::Identity(*s))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_once() {
        let id = HandoffId(1);
        let mut l = Ledger::new();
        l.open(id, Holding::SourceLease).unwrap();
        assert_eq!(
            l.check_drained(),
            Err(AccountingError::Leaked(id, Holding::SourceLease))
        );
        l.end(id, Holding::SourceLease).unwrap();
        assert_eq!(
            l.end(id, Holding::SourceLease),
            Err(AccountingError::DoubleEnd(id, Holding::SourceLease))
        );
        assert_eq!(
            l.end(id, Holding::DestinationReservation),
            Err(AccountingError::EndWithoutOpen(
                id,
                Holding::DestinationReservation
            ))
        );
        l.check_drained().unwrap();
    }
}
