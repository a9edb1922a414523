//! Types shared by both role machines: how a fact is judged, what it costs in
//! ownership, and the small action list a transition returns.

use crate::ids::HandoffId;
use crate::state::{DestinationEventKind, DestinationState, Role, SourceEventKind, SourceState};
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
    /// A source-first destination's KV load failed as the connector reports
    /// it: the transfer failed (vLLM's NIXL connector marks every block of
    /// the request invalid, `_handle_failed_transfer`, and reports them
    /// through `get_block_ids_with_load_errors`), or, under the strict
    /// [`crate::StaleReadPolicy::Fail`], the read found its source's KV
    /// released. The request then follows `kv_load_failure_policy`
    /// (`vllm/config/kv_transfer.py`, `KVTransferConfig`;
    /// `vllm/v1/core/sched/scheduler.py`, `_handle_invalid_blocks`).
    KvLoadFailed,
}

/// How a KV transfer ended, as the driver that timed it saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub enum TransferResult {
    /// The bytes arrived and are valid.
    Completed,
    /// The transfer itself failed (a transport fault). A source-first
    /// destination reports it as a failed load, as vLLM's NIXL connector
    /// does (`_handle_failed_transfer`).
    Failed,
    /// The source's worker died while its KV was read: a lost worker, which
    /// the serving layer migrates.
    SourceLost,
    /// The bytes were read from a source that had already released them
    /// (before or during the read). Upstream vLLM cannot tell: a NIXL read
    /// of freed blocks returns whatever they hold, the decode worker keeps
    /// it and the request succeeds; the prefill worker only logs
    /// "Potentially invalid KV blocks for unrecognized request" when the
    /// completion notice comes (`nixl/base_worker.py`, `_get_new_notifs`).
    /// `reused`: another request had been given at least one of the
    /// released blocks before the read ended (its KV is certainly wrong);
    /// otherwise the blocks still held the source's KV (possibly intact).
    /// What a destination does with it is [`crate::StaleReadPolicy`].
    SourceReleased {
        /// A released block was reallocated before the read ended.
        reused: bool,
    },
}

impl TransferResult {
    /// Whether the KV arrived from blocks its source still held.
    pub fn ok(self) -> bool {
        self == TransferResult::Completed
    }

    /// Whether the read of released KV ended, and then whether a released
    /// block had been reused.
    pub fn stale(self) -> Option<bool> {
        match self {
            TransferResult::SourceReleased { reused } => Some(reused),
            _ => None,
        }
    }

    /// Why a role that needed this transfer ends under the strict
    /// [`crate::StaleReadPolicy::Fail`], if it failed.
    pub fn failure(self) -> Option<CancelReason> {
        match self {
            TransferResult::Completed => None,
            TransferResult::Failed | TransferResult::SourceLost => {
                Some(CancelReason::TransferFailed)
            }
            TransferResult::SourceReleased { .. } => Some(CancelReason::KvLoadFailed),
        }
    }
}

impl CancelReason {
    /// Every reason, in declaration order.
    pub const ALL: [CancelReason; 10] = [
        CancelReason::Client,
        CancelReason::PeerAborted,
        CancelReason::PeerLost,
        CancelReason::PeerRestarted,
        CancelReason::TransferFailed,
        CancelReason::LeaseExpired,
        CancelReason::ReservationExpired,
        CancelReason::Unsupported,
        CancelReason::Teardown,
        CancelReason::KvLoadFailed,
    ];

    /// Whether the peer already knows (so no abort needs to be sent back).
    pub(crate) fn peer_knows(self) -> bool {
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
            CancelReason::KvLoadFailed => "kv-load-failed",
        }
    }
}

/// The kind of fact that moved (or was refused by) a role, tagged with the
/// role it was for. Displays as the bare kind name ("Routed", "Cancelled"),
/// as transcripts print it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub enum LifecycleEvent {
    /// A fact for a source role.
    Source(SourceEventKind),
    /// A fact for a destination role.
    Destination(DestinationEventKind),
}

impl LifecycleEvent {
    /// The role this kind of fact is for.
    pub fn role(self) -> Role {
        match self {
            LifecycleEvent::Source(_) => Role::Source,
            LifecycleEvent::Destination(_) => Role::Destination,
        }
    }

    /// Stable name for transcripts and errors (the kind's name).
    pub fn name(self) -> &'static str {
        match self {
            LifecycleEvent::Source(k) => k.name(),
            LifecycleEvent::Destination(k) => k.name(),
        }
    }
}

impl From<SourceEventKind> for LifecycleEvent {
    fn from(k: SourceEventKind) -> Self {
        LifecycleEvent::Source(k)
    }
}

impl From<DestinationEventKind> for LifecycleEvent {
    fn from(k: DestinationEventKind) -> Self {
        LifecycleEvent::Destination(k)
    }
}

impl fmt::Display for LifecycleEvent {
    /// The [`LifecycleEvent::name`], honouring width and alignment.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// The state of either role machine, tagged with the role. Displays as the
/// bare state name ("Pinned", "Active"), as transcripts print it; note that
/// both roles have a `Released` state, told apart only by the tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub enum RoleState {
    /// A source role's state.
    Source(SourceState),
    /// A destination role's state.
    Destination(DestinationState),
}

impl RoleState {
    /// The role whose state this is.
    pub fn role(self) -> Role {
        match self {
            RoleState::Source(_) => Role::Source,
            RoleState::Destination(_) => Role::Destination,
        }
    }

    /// Stable name for transcripts and errors (the state's name).
    pub fn name(self) -> &'static str {
        match self {
            RoleState::Source(s) => s.name(),
            RoleState::Destination(s) => s.name(),
        }
    }
}

impl From<SourceState> for RoleState {
    fn from(s: SourceState) -> Self {
        RoleState::Source(s)
    }
}

impl From<DestinationState> for RoleState {
    fn from(s: DestinationState) -> Self {
        RoleState::Destination(s)
    }
}

impl fmt::Display for RoleState {
    /// The [`RoleState::name`], honouring width and alignment.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// A fact a role machine refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub enum TransitionError {
    /// The attempt already ended; late facts for it are dropped.
    Stale {
        /// The attempt.
        id: HandoffId,
        /// The kind of fact that came late.
        event: LifecycleEvent,
    },
    /// The fact makes no sense in the current state (a protocol violation).
    Invalid {
        /// The attempt.
        id: HandoffId,
        /// The state the role was in.
        state: RoleState,
        /// The kind of fact it refused.
        event: LifecycleEvent,
    },
    /// The fact contradicts one already applied (e.g. a second, different
    /// lease for the same attempt).
    Conflict {
        /// The attempt.
        id: HandoffId,
        /// The kind of fact that conflicted.
        event: LifecycleEvent,
    },
    /// A timer fired before its deadline (an old timer after a renewal).
    Premature {
        /// The attempt.
        id: HandoffId,
        /// The kind of timer fact that fired early.
        event: LifecycleEvent,
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

/// A role machine's transition under way: the actions it asks for so far and
/// the ownership it moves (crate-internal, for the per-state handlers).
#[derive(Debug)]
pub(crate) struct Effects<A: Copy> {
    /// What the worker must do, in order.
    pub(crate) actions: ActionList<A>,
    /// Ownership moved on this worker.
    pub(crate) delta: OwnershipDelta,
}

impl<A: Copy> Effects<A> {
    /// Nothing asked, nothing moved.
    pub(crate) fn new() -> Self {
        Effects {
            actions: ActionList::new(),
            delta: OwnershipDelta::NONE,
        }
    }
}

/// Where a per-state handler sends its machine (crate-internal).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Next<S> {
    /// Apply the fact and move to this state (possibly the same one).
    To(S),
    /// The fact repeats one already applied.
    Duplicate,
}

impl<S: Copy> Next<S> {
    /// The verdict for a machine that was in `from`.
    pub(crate) fn verdict<A: Copy>(self, from: S, fx: Effects<A>) -> Verdict<S, A> {
        match self {
            Next::To(to) => Verdict::Applied {
                from,
                to,
                actions: fx.actions,
                delta: fx.delta,
            },
            Next::Duplicate => Verdict::Duplicate,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_prints_the_stable_names() {
        for k in SourceEventKind::ALL {
            assert_eq!(k.to_string(), k.name());
            assert_eq!(LifecycleEvent::from(k).to_string(), k.name());
            assert_eq!(LifecycleEvent::from(k).role(), Role::Source);
        }
        for k in DestinationEventKind::ALL {
            assert_eq!(k.to_string(), k.name());
            assert_eq!(LifecycleEvent::from(k).to_string(), k.name());
            assert_eq!(LifecycleEvent::from(k).role(), Role::Destination);
        }
        for s in SourceState::ALL {
            assert_eq!(RoleState::from(s).to_string(), s.name());
            assert_eq!(RoleState::from(s).role(), Role::Source);
        }
        for s in DestinationState::ALL {
            assert_eq!(RoleState::from(s).to_string(), s.name());
            assert_eq!(RoleState::from(s).role(), Role::Destination);
        }
        // Transcripts pad names into columns.
        let pinned = RoleState::Source(SourceState::Pinned);
        assert_eq!(format!("[{pinned:<8}]"), "[Pinned  ]");
        let routed = LifecycleEvent::Destination(DestinationEventKind::Routed);
        assert_eq!(format!("[{routed:>7}]"), "[ Routed]");
    }

    #[test]
    fn errors_name_typed_states_and_events() {
        let e = TransitionError::Invalid {
            id: HandoffId(1),
            state: RoleState::Destination(DestinationState::NotRouted),
            event: LifecycleEvent::Destination(DestinationEventKind::Finished),
        };
        assert!(
            e.to_string()
                .ends_with(": Finished is invalid in NotRouted"),
            "{e}"
        );
    }
}
