//! The states and fact kinds of both role machines, and the role tag: the
//! vocabulary [`crate::transition`] judges facts in. It sits below the role
//! machines ([`crate::source`], [`crate::destination`]) and the messages
//! ([`crate::msg`]), which re-export these types under their old paths, so
//! every arrow between those files points down to here.

use core::fmt;

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

/// Which role a message is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub enum Role {
    /// The prefill side, holding the KV.
    Source,
    /// The decode side, receiving the KV.
    Destination,
}

impl Role {
    /// Stable name for transcripts.
    pub fn name(self) -> &'static str {
        match self {
            Role::Source => "source",
            Role::Destination => "destination",
        }
    }
}

/// Where a source role is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum SourceState {
    /// Known, not dispatched.
    NotStarted,
    /// Prefill dispatched.
    Computing,
    /// Held, no reader yet.
    Pinned,
    /// Held, a reader has reserved and the transfer is (about to be) under way.
    AwaitingReaderCompletion,
    /// Ended.
    Released,
}

impl SourceState {
    /// Stable name for transcripts.
    pub fn name(self) -> &'static str {
        match self {
            SourceState::NotStarted => "NotStarted",
            SourceState::Computing => "Computing",
            SourceState::Pinned => "Pinned",
            SourceState::AwaitingReaderCompletion => "AwaitingReaderCompletion",
            SourceState::Released => "Released",
        }
    }

    /// Every state, for table tests.
    pub const ALL: [SourceState; 5] = [
        SourceState::NotStarted,
        SourceState::Computing,
        SourceState::Pinned,
        SourceState::AwaitingReaderCompletion,
        SourceState::Released,
    ];
}

impl fmt::Display for SourceState {
    /// The [`SourceState::name`], honouring width and alignment.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// The kind of a [`SourceEvent`](crate::SourceEvent): its variant without the payload, which is
/// what a [`crate::Transition`] records and a [`TransitionError`](crate::TransitionError) names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum SourceEventKind {
    /// [`SourceEvent::Start`](crate::SourceEvent::Start): the request arrived at the source worker.
    Start,
    /// [`SourceEvent::DestinationReserved`](crate::SourceEvent::DestinationReserved): the destination holds a
    /// reservation for the attempt.
    DestinationReserved,
    /// [`SourceEvent::PrefillPinned`](crate::SourceEvent::PrefillPinned): the prefill finished and its KV is
    /// held under a lease.
    PrefillPinned,
    /// [`SourceEvent::ReaderCompleted`](crate::SourceEvent::ReaderCompleted): every reader is done with the KV.
    ReaderCompleted,
    /// [`SourceEvent::LeaseRenewed`](crate::SourceEvent::LeaseRenewed): the destination extended the lease.
    LeaseRenewed,
    /// [`SourceEvent::LeaseExpired`](crate::SourceEvent::LeaseExpired): the lease (or the wait for a
    /// destination) ran out.
    LeaseExpired,
    /// [`SourceEvent::Cancelled`](crate::SourceEvent::Cancelled): the attempt was abandoned.
    Cancelled,
}

impl SourceEventKind {
    /// Stable name for transcripts and errors.
    pub fn name(self) -> &'static str {
        match self {
            SourceEventKind::Start => "Start",
            SourceEventKind::DestinationReserved => "DestinationReserved",
            SourceEventKind::PrefillPinned => "PrefillPinned",
            SourceEventKind::ReaderCompleted => "ReaderCompleted",
            SourceEventKind::LeaseRenewed => "LeaseRenewed",
            SourceEventKind::LeaseExpired => "LeaseExpired",
            SourceEventKind::Cancelled => "Cancelled",
        }
    }

    /// Every kind, for table tests.
    pub const ALL: [SourceEventKind; 7] = [
        SourceEventKind::Start,
        SourceEventKind::DestinationReserved,
        SourceEventKind::PrefillPinned,
        SourceEventKind::ReaderCompleted,
        SourceEventKind::LeaseRenewed,
        SourceEventKind::LeaseExpired,
        SourceEventKind::Cancelled,
    ];
}

impl fmt::Display for SourceEventKind {
    /// The [`SourceEventKind::name`], honouring width and alignment.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// Where a destination role is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum DestinationState {
    /// No routing fact yet.
    NotRouted,
    /// Routed; waiting for the source to be ready.
    Routed,
    /// Queued for a physical reservation.
    Reserving,
    /// Reservation held.
    Reserved,
    /// KV in flight.
    Receiving,
    /// KV valid, request decoding.
    Active,
    /// Ended.
    Released,
}

impl DestinationState {
    /// Stable name for transcripts.
    pub fn name(self) -> &'static str {
        match self {
            DestinationState::NotRouted => "NotRouted",
            DestinationState::Routed => "Routed",
            DestinationState::Reserving => "Reserving",
            DestinationState::Reserved => "Reserved",
            DestinationState::Receiving => "Receiving",
            DestinationState::Active => "Active",
            DestinationState::Released => "Released",
        }
    }

    /// Every state, for table tests.
    pub const ALL: [DestinationState; 7] = [
        DestinationState::NotRouted,
        DestinationState::Routed,
        DestinationState::Reserving,
        DestinationState::Reserved,
        DestinationState::Receiving,
        DestinationState::Active,
        DestinationState::Released,
    ];
}

impl fmt::Display for DestinationState {
    /// The [`DestinationState::name`], honouring width and alignment.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// The kind of a [`DestinationEvent`](crate::DestinationEvent): its variant without the payload,
/// which is what a [`crate::Transition`] records and a [`TransitionError`](crate::TransitionError)
/// names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum DestinationEventKind {
    /// [`DestinationEvent::Routed`](crate::DestinationEvent::Routed): a router chose this worker.
    Routed,
    /// [`DestinationEvent::SourceReady`](crate::DestinationEvent::SourceReady): the source announced its pinned KV.
    SourceReady,
    /// [`DestinationEvent::Reserved`](crate::DestinationEvent::Reserved): the scheduler took a reservation.
    Reserved,
    /// [`DestinationEvent::Unavailable`](crate::DestinationEvent::Unavailable): no room yet; the attempt stays
    /// queued.
    Unavailable,
    /// [`DestinationEvent::Unsupported`](crate::DestinationEvent::Unsupported): the backend cannot reserve at all.
    Unsupported,
    /// [`DestinationEvent::ReceiveCompleted`](crate::DestinationEvent::ReceiveCompleted): the incoming KV is valid.
    ReceiveCompleted,
    /// [`DestinationEvent::ReservationExpired`](crate::DestinationEvent::ReservationExpired): the reservation timer fired.
    ReservationExpired,
    /// [`DestinationEvent::Cancelled`](crate::DestinationEvent::Cancelled): the attempt was abandoned.
    Cancelled,
    /// [`DestinationEvent::Finished`](crate::DestinationEvent::Finished): the activated request finished
    /// decoding.
    Finished,
}

impl DestinationEventKind {
    /// Stable name for transcripts and errors.
    pub fn name(self) -> &'static str {
        match self {
            DestinationEventKind::Routed => "Routed",
            DestinationEventKind::SourceReady => "SourceReady",
            DestinationEventKind::Reserved => "Reserved",
            DestinationEventKind::Unavailable => "Unavailable",
            DestinationEventKind::Unsupported => "Unsupported",
            DestinationEventKind::ReceiveCompleted => "ReceiveCompleted",
            DestinationEventKind::ReservationExpired => "ReservationExpired",
            DestinationEventKind::Cancelled => "Cancelled",
            DestinationEventKind::Finished => "Finished",
        }
    }

    /// Every kind, for table tests.
    pub const ALL: [DestinationEventKind; 9] = [
        DestinationEventKind::Routed,
        DestinationEventKind::SourceReady,
        DestinationEventKind::Reserved,
        DestinationEventKind::Unavailable,
        DestinationEventKind::Unsupported,
        DestinationEventKind::ReceiveCompleted,
        DestinationEventKind::ReservationExpired,
        DestinationEventKind::Cancelled,
        DestinationEventKind::Finished,
    ];
}

impl fmt::Display for DestinationEventKind {
    /// The [`DestinationEventKind::name`], honouring width and alignment.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}
