//! What a broken rule looks like ([`Violation`], by [`Kind`]).

use handoff_core::Instant;
use std::fmt;

/// What kind of rule a [`Violation`] broke; the shrinker keeps a change only
/// if a violation of the same kind still shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `free + cached + used != total`, or more free request slots than slots.
    Accounting,
    /// Pinned or reserved blocks on a worker with no open lease or
    /// reservation, or its live roles differ from what the checker saw.
    Ownership,
    /// A role transition that does not follow from the previous one, or one
    /// after `Released`.
    Transition,
    /// A second `RoleEnded`, one without `Released`, or a role that never
    /// ended.
    RoleEnd,
    /// A lease or reservation opened or ended twice, never ended, or whose
    /// ownership deltas do not net to zero.
    Ledger,
    /// A `Stored` KV event for a destination's blocks before it activated.
    StoredBeforeActivation,
    /// A `StartTransfer` for an attempt whose destination never reserved,
    /// or a second one.
    TransferBeforeReservation,
    /// A router booking made twice, released twice or by the wrong event,
    /// or left at the end; router totals that do not audit.
    Booking,
    /// A request terminal twice (finished and failed, or finished twice),
    /// or never; report totals that disagree.
    Terminal,
    /// A worker not drained at the end.
    Drained,
    /// A destination activated from a read of KV its source had already
    /// released without a stale read being reported, or a stale read
    /// followed anything but a real lease expiry (a renewal arrived in
    /// time, the term had not run, or the source ended for another reason).
    ReadOfReleasedSource,
    /// The run panicked.
    Panic,
}

/// One broken rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Which rule.
    pub kind: Kind,
    /// Model time it was seen.
    pub at: Instant,
    /// What exactly.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{:?} at {:.6}s] {}",
            self.kind,
            self.at.as_nanos() as f64 / 1e9,
            self.detail
        )
    }
}

/// Violations kept per run: the first ones explain a failure; a broken run
/// can produce one per event.
pub(crate) const MAX_VIOLATIONS: usize = 32;
