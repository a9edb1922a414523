//! Identifiers that cross role and process boundaries.
//!
//! A [`HandoffId`] names one handoff *attempt*. Attempts are never reused: a
//! retry or a restart gets a fresh id, so a late fact for an old attempt can
//! always be recognised as stale instead of being applied to a new one.

use core::fmt;

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

/// A worker (engine instance) in the deployment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct WorkerId(pub u32);

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "w{}", self.0)
    }
}

/// A worker incarnation. A restarted worker comes back with a higher
/// generation; facts stamped with an older one are stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct Generation(pub u32);

impl Generation {
    /// Every worker's first incarnation, the one a deployment starts it
    /// at; a worker takes a peer it has not heard of to be at it.
    pub const FIRST: Generation = Generation(0);

    /// The generation a restart of this incarnation gets.
    pub fn next(self) -> Generation {
        Generation(self.0.wrapping_add(1))
    }
}

/// A client request, unique within one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct RequestId(pub u64);

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

/// A 128-bit handoff attempt id.
///
/// Layout: issuer worker (32 bits) | issuer generation (32 bits) | counter
/// (64 bits). Two issuers never collide, and a restarted issuer (new
/// generation) never re-issues an id of its previous incarnation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct HandoffId(pub u128);

impl HandoffId {
    /// The worker that issued this id.
    pub fn issuer(self) -> WorkerId {
        WorkerId((self.0 >> 96) as u32)
    }

    /// The issuer's generation when it issued this id.
    pub fn generation(self) -> Generation {
        Generation((self.0 >> 64) as u32)
    }

    /// The issuer-local sequence number.
    pub fn sequence(self) -> u64 {
        self.0 as u64
    }
}

/// Written by hand in the canonical 8-4-4-4-12 UUID text form so that the
/// core needs no uuid dependency and logs line up with Dynamo's.
impl fmt::Display for HandoffId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        write!(
            f,
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            (v >> 96) as u32,
            (v >> 80) as u16,
            (v >> 64) as u16,
            (v >> 48) as u16,
            (v & 0xffff_ffff_ffff) as u64
        )
    }
}

/// With the `uuid` feature: a [`HandoffId`] is a UUID with the same 128
/// bits, so it prints the same and goes through systems that key on
/// `uuid::Uuid` (Dynamo's request and transfer ids) unchanged.
#[cfg(feature = "uuid")]
impl From<HandoffId> for uuid::Uuid {
    fn from(id: HandoffId) -> uuid::Uuid {
        uuid::Uuid::from_u128(id.0)
    }
}

/// With the `uuid` feature: the id whose bits are `u`'s. Any UUID converts;
/// one this crate did not issue still names an attempt (its issuer,
/// generation and sequence are read from the bits).
#[cfg(feature = "uuid")]
impl From<uuid::Uuid> for HandoffId {
    fn from(u: uuid::Uuid) -> HandoffId {
        HandoffId(u.as_u128())
    }
}

/// Issues [`HandoffId`]s for one issuer incarnation.
#[derive(Clone, Debug)]
pub struct HandoffIdGen {
    issuer: WorkerId,
    generation: Generation,
    next: u64,
}

impl HandoffIdGen {
    /// A generator for `issuer` in its `generation`.
    pub fn new(issuer: WorkerId, generation: Generation) -> Self {
        HandoffIdGen {
            issuer,
            generation,
            next: 0,
        }
    }

    /// The next never-before-issued id of this incarnation.
    pub fn next_id(&mut self) -> HandoffId {
        let seq = self.next;
        self.next = self.next.wrapping_add(1);
        HandoffId(
            (u128::from(self.issuer.0) << 96)
                | (u128::from(self.generation.0) << 64)
                | u128::from(seq),
        )
    }

    /// A generator for the restarted incarnation: ids restart at zero but
    /// carry the next generation, so none collides with an earlier one.
    pub fn restarted(&self) -> Self {
        HandoffIdGen::new(self.issuer, self.generation.next())
    }
}

/// Names one source lease (a pinned, completed prefill) on its worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct SourceLeaseId(pub u64);

/// Names one destination reservation on its worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct DestinationReservationId(pub u64);

/// A multi-turn session (session-affine serving).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct SessionId(pub u64);

#[cfg(test)]
mod tests {

    #[cfg(feature = "uuid")]
    #[test]
    fn uuid_round_trip_keeps_bits_and_text() {
        let id = HandoffIdGen::new(WorkerId(7), Generation(3)).next_id();
        let u = uuid::Uuid::from(id);
        assert_eq!(u.to_string(), id.to_string());
        assert_eq!(HandoffId::from(u), id);
        let v = uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        assert_eq!(HandoffId::from(v).to_string(), v.to_string());
    }

    use super::*;

    #[test]
    fn restart_never_collides() {
        let mut a = HandoffIdGen::new(WorkerId(7), Generation(3));
        let mut b = a.restarted();
        let first: Vec<_> = (0..100).map(|_| a.next_id()).collect();
        for _ in 0..100 {
            assert!(!first.contains(&b.next_id()));
        }
        let id = first[5];
        assert_eq!(id.issuer(), WorkerId(7));
        assert_eq!(id.generation(), Generation(3));
        assert_eq!(id.sequence(), 5);
    }

    #[test]
    fn uuid_text_form() {
        let id = HandoffId(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        assert_eq!(id.to_string(), "01234567-89ab-cdef-0011-223344556677");
    }
}
