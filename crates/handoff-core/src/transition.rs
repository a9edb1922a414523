//! Types shared by both role machines: how a fact is judged, what it costs in
//! ownership, and the small action list a transition returns.

use crate::ids::HandoffId;
use core::fmt;

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

/// Why a handoff was abandoned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub enum CancelReason {
    /// The client went away or the frontend aborted the request.
    Client,
    /// The peer role told us it gave up.
    PeerAborted,
    /// The transport to the peer was lost.
    PeerLost,
    /// The peer came back with a new generation: its old attempts are void.
    PeerRestarted,
    /// Moving the KV failed.
    TransferFailed,
    /// The source lease ran out before a reader finished.
    LeaseExpired,
    /// The destination reservation ran out before activation.
    ReservationExpired,
    /// The destination backend cannot reserve at all (TRT-LLM).
    Unsupported,
    /// This worker is shutting down.
    Teardown,
}

impl CancelReason {
    /// Whether the peer already knows (so no abort needs to be sent back).
    pub fn peer_knows(self) -> bool {
        matches!(
            self,
            CancelReason::PeerAborted | CancelReason::PeerLost | CancelReason::PeerRestarted
        )
    }

    /// Stable name for transcripts and reports.
    pub fn name(self) -> &'static str {
        match self {
            CancelReason::Client => "client",
            CancelReason::PeerAborted => "peer-aborted",
            CancelReason::PeerLost => "peer-lost",
            CancelReason::PeerRestarted => "peer-restarted",
            CancelReason::TransferFailed => "transfer-failed",
            CancelReason::LeaseExpired => "lease-expired",
            CancelReason::ReservationExpired => "reservation-expired",
            CancelReason::Unsupported => "unsupported",
            CancelReason::Teardown => "teardown",
        }
    }
}

/// A fact a role machine refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransitionError {
    /// The attempt already ended; late facts for it are dropped.
    Stale {
        /// The attempt.
        id: HandoffId,
        /// The fact's name.
        event: &'static str,
    },
    /// The fact makes no sense in the current state (a protocol violation).
    Invalid {
        /// The attempt.
        id: HandoffId,
        /// The state's name.
        state: &'static str,
        /// The fact's name.
        event: &'static str,
    },
    /// The fact contradicts one already applied (e.g. a second, different
    /// lease for the same attempt).
    Conflict {
        /// The attempt.
        id: HandoffId,
        /// The fact's name.
        event: &'static str,
    },
    /// A timer fired before its deadline (an old timer after a renewal).
    Premature {
        /// The attempt.
        id: HandoffId,
        /// The fact's name.
        event: &'static str,
    },
}

impl fmt::Display for TransitionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransitionError::Stale { id, event } => {
                write!(f, "{id}: {event} after release (stale)")
            }
            TransitionError::Invalid { id, state, event } => {
                write!(f, "{id}: {event} is invalid in {state}")
            }
            TransitionError::Conflict { id, event } => {
                write!(f, "{id}: {event} conflicts with an applied fact")
            }
            TransitionError::Premature { id, event } => {
                write!(f, "{id}: {event} before its deadline")
            }
        }
    }
}

impl std::error::Error for TransitionError {}

/// Block ownership a transition moved on its own worker. Deltas are signed:
/// `+n` acquired, `-n` released.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct OwnershipDelta {
    /// Change in pinned source blocks.
    pub pinned: i64,
    /// Change in reserved destination blocks.
    pub reserved: i64,
    /// Change in active blocks (a reservation becoming a running request).
    pub active: i64,
}

impl OwnershipDelta {
    /// No change.
    pub const NONE: OwnershipDelta = OwnershipDelta {
        pinned: 0,
        reserved: 0,
        active: 0,
    };
}

impl fmt::Display for OwnershipDelta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = 0;
        for (n, what) in [
            (self.pinned, "pinned"),
            (self.reserved, "reserved"),
            (self.active, "active"),
        ] {
            if n != 0 {
                if parts > 0 {
                    f.write_str(" ")?;
                }
                write!(f, "{n:+} {what}")?;
                parts += 1;
            }
        }
        if parts == 0 {
            f.write_str("±0")?;
        }
        Ok(())
    }
}

/// At most [`ActionList::CAP`] actions, inline: transitions never allocate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActionList<A: Copy> {
    items: [Option<A>; 4],
    len: u8,
}

impl<A: Copy> Default for ActionList<A> {
    fn default() -> Self {
        ActionList {
            items: [None; 4],
            len: 0,
        }
    }
}

impl<A: Copy> ActionList<A> {
    /// Most actions one transition can return.
    pub const CAP: usize = 4;

    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `a`. More than [`Self::CAP`] is a bug in a transition table,
    /// caught by the table tests; release builds drop the excess.
    pub fn push(&mut self, a: A) {
        debug_assert!((self.len as usize) < Self::CAP, "action list overflow");
        if let Some(slot) = self.items.get_mut(self.len as usize) {
            *slot = Some(a);
            self.len += 1;
        }
    }

    /// Number of actions.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The actions in order.
    pub fn iter(&self) -> impl Iterator<Item = A> + '_ {
        self.items[..self.len as usize].iter().flatten().copied()
    }
}

impl<A: Copy> FromIterator<A> for ActionList<A> {
    fn from_iter<I: IntoIterator<Item = A>>(iter: I) -> Self {
        let mut l = ActionList::new();
        for a in iter {
            l.push(a);
        }
        l
    }
}

/// A fact a role machine accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict<S: Copy, A: Copy> {
    /// The fact moved the machine (possibly to the same state) and asks for
    /// these local actions.
    Applied {
        /// State before.
        from: S,
        /// State after.
        to: S,
        /// What the worker must do.
        actions: ActionList<A>,
        /// Ownership moved on this worker.
        delta: OwnershipDelta,
    },
    /// An exact repeat of an applied fact: nothing to do.
    Duplicate,
}
