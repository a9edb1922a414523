//! The facts that cross roles. Every message names its attempt and carries
//! the sender's generation, so a restarted peer's old facts are recognised.

use crate::ids::{Generation, HandoffId};
use crate::scheduler::ReservationSummary;
use crate::transition::CancelReason;
use core::fmt;

pub use crate::state::Role;

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

/// One fact from one role to its peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct HandoffMsg {
    /// The attempt.
    pub id: HandoffId,
    /// The sender's incarnation.
    pub generation: Generation,
    /// The fact.
    pub body: MsgBody,
}

/// The fact a [`HandoffMsg`] carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub enum MsgBody {
    /// Source → destination: the prefill KV is pinned.
    SourceReady {
        /// Blocks held.
        blocks: u64,
        /// Tokens held.
        tokens: u64,
    },
    /// Destination → source: a reservation holds; with what must move.
    DestinationReserved {
        /// The reservation.
        summary: ReservationSummary,
    },
    /// Source → destination (destination-first): the sender's writes are
    /// complete, the destination KV is valid.
    ReceiveCompleted,
    /// Destination → source (source-first): the reader is done.
    ReaderCompleted,
    /// Destination → source: still trying, keep the KV this much longer.
    LeaseRenewal {
        /// Extension from the moment the source handles it, in nanoseconds
        /// (clocks are not shared across processes, durations are).
        extend_nanos: u64,
    },
    /// Either way: the sender abandoned the attempt.
    Abort {
        /// Why.
        reason: CancelReason,
        /// The role the abort is for.
        to: Role,
    },
}

impl MsgBody {
    /// The role that consumes this fact.
    pub fn target(&self) -> Role {
        match self {
            MsgBody::SourceReady { .. } | MsgBody::ReceiveCompleted => Role::Destination,
            MsgBody::DestinationReserved { .. }
            | MsgBody::ReaderCompleted
            | MsgBody::LeaseRenewal { .. } => Role::Source,
            MsgBody::Abort { to, .. } => *to,
        }
    }

    /// Which kind of fact this is, without its payload.
    pub fn kind(&self) -> FactKind {
        match self {
            MsgBody::SourceReady { .. } => FactKind::SourceReady,
            MsgBody::DestinationReserved { .. } => FactKind::DestinationReserved,
            MsgBody::ReceiveCompleted => FactKind::ReceiveCompleted,
            MsgBody::ReaderCompleted => FactKind::ReaderCompleted,
            MsgBody::LeaseRenewal { .. } => FactKind::LeaseRenewal,
            MsgBody::Abort { .. } => FactKind::Abort,
        }
    }

    /// Stable name for logs (that of its [`Self::kind`]).
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }
}

/// The kind of a [`MsgBody`]: its variant without the payload, which is what
/// a dropped-fact report ([`crate::WorkerEvent::Dropped`]) names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub enum FactKind {
    /// [`MsgBody::SourceReady`]: source to destination, the KV is pinned.
    SourceReady,
    /// [`MsgBody::DestinationReserved`]: destination to source, a
    /// reservation holds.
    DestinationReserved,
    /// [`MsgBody::ReceiveCompleted`]: source to destination
    /// (destination-first), the sender's writes are complete.
    ReceiveCompleted,
    /// [`MsgBody::ReaderCompleted`]: destination to source (source-first),
    /// the reader is done.
    ReaderCompleted,
    /// [`MsgBody::LeaseRenewal`]: destination to source, keep the KV longer.
    LeaseRenewal,
    /// [`MsgBody::Abort`]: either way, the sender abandoned the attempt.
    Abort,
}

impl FactKind {
    /// Stable name for logs.
    pub fn name(self) -> &'static str {
        match self {
            FactKind::SourceReady => "SourceReady",
            FactKind::DestinationReserved => "DestinationReserved",
            FactKind::ReceiveCompleted => "ReceiveCompleted",
            FactKind::ReaderCompleted => "ReaderCompleted",
            FactKind::LeaseRenewal => "LeaseRenewal",
            FactKind::Abort => "Abort",
        }
    }

    /// Every kind, for table tests.
    pub const ALL: [FactKind; 6] = [
        FactKind::SourceReady,
        FactKind::DestinationReserved,
        FactKind::ReceiveCompleted,
        FactKind::ReaderCompleted,
        FactKind::LeaseRenewal,
        FactKind::Abort,
    ];
}

impl fmt::Display for FactKind {
    /// The [`FactKind::name`], honouring width and alignment.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_prints_the_stable_names() {
        for k in FactKind::ALL {
            assert_eq!(k.to_string(), k.name());
        }
    }
}
