//! The state of a core's streaming session slots: the slots, their push
//! locks and LRU order, and the page split [`SessionCapacity`] reports. The
//! core's session behaviour over this state is in `session.rs`.

use handoff_core::session::SessionEvent;
use handoff_core::{RequestId, SessionId, SourceLeaseId};
use std::collections::{BTreeMap, BTreeSet};

/// Session-held pages of one core, exactly; all of them are inside
/// `KvCapacitySnapshot::active_blocks` except pending snapshot reservations,
/// which are reserved destination pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionCapacity {
    /// Resident session slots (idle, locked or running).
    pub slots: u64,
    /// Pages of idle, unlocked slots (evictable).
    pub idle_slot_pages: u64,
    /// Pages of idle slots locked by a push.
    pub locked_slot_pages: u64,
    /// Snapshot entries in the prefill store.
    pub snapshots: u64,
    /// Pages of snapshot entries (evictable, LRU).
    pub snapshot_pages: u64,
    /// Pages reserved for snapshots being pushed (reserved destination).
    pub snapshot_reserved_pages: u64,
}

/// A push in flight from a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Push {
    pub(crate) lock: SourceLeaseId,
    pub(crate) tokens: u64,
    pub(crate) attempt: u8,
}

/// One resident session slot.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    /// The seq holding the KV (its last turn, idle; or the running append).
    pub(crate) idx: u32,
    /// The turn of `idx`: the slot's generation, reported when it is freed.
    pub(crate) turn: RequestId,
    /// A turn is extending it.
    pub(crate) running: bool,
    /// Tokens the slot held at its last commit.
    pub(crate) committed: u64,
    /// Tokens of the last successful push.
    pub(crate) pushed: u64,
    pub(crate) push: Option<Push>,
    /// Close when the running turn commits.
    pub(crate) close_after_turn: bool,
    /// A forced eviction waits for the running turn or the push.
    pub(crate) evict_pending: bool,
    pub(crate) lru: u64,
}

/// The session slots of a core.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    pub(crate) slots: BTreeMap<SessionId, Slot>,
    /// Idle unlocked slots by (last use, session): the eviction order.
    pub(crate) evictable: BTreeSet<(u64, SessionId)>,
    /// Pages of the slots in `evictable`.
    pub(crate) evictable_pages: u64,
    pub(crate) tick: u64,
    pub(crate) events: Vec<SessionEvent>,
    /// Open push locks.
    pub(crate) locks: u64,
}

impl Sessions {
    pub(crate) fn touch(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }
}
