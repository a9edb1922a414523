//! Session-affine serving's typed vocabulary (seed 002,
//! `shared/seeds/002_853f16a73bae9cfb.txt`): what a core's session layer
//! reports ([`SessionEvent`]) and why (the seed's §6 log reasons), shared by
//! the backends that keep session slots or snapshot stores, the router's
//! session table and the reports. Only rendering turns these into names.

use crate::ids::{HandoffId, RequestId, SessionId, SourceLeaseId};
use crate::time::Duration;

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

/// Why a decode session slot was freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub enum SlotEvictReason {
    /// Least recently used idle slot, for pages or a request slot.
    Capacity,
    /// The client closed the session (`release_session`).
    Closed,
    /// Evicted on request although there was no pressure (a forced
    /// "session not resident", as the seed's §8 smoke test does).
    Forced,
    /// A newer turn of the session replaced it (its context did not extend
    /// the slot's, or a reseed landed while the old slot was still here).
    Replaced,
}

impl SlotEvictReason {
    /// Stable name for logs.
    pub fn name(self) -> &'static str {
        match self {
            SlotEvictReason::Capacity => "capacity",
            SlotEvictReason::Closed => "session_close",
            SlotEvictReason::Forced => "forced",
            SlotEvictReason::Replaced => "replaced",
        }
    }
}

/// Why a D→P push failed (the seed's §6 `snapshot_push_failed` reasons).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub enum PushFailure {
    /// The transfer failed (`KVPoll.Failed`).
    Transfer,
    /// The prefill worker's store could not reserve room.
    Refused,
    /// The push's lease expired before the transfer completed.
    Expired,
    /// The destination was lost (restart or partition).
    PeerLost,
}

impl PushFailure {
    /// Stable name for logs.
    pub fn name(self) -> &'static str {
        match self {
            PushFailure::Transfer => "transfer_failed",
            PushFailure::Refused => "store_refused",
            PushFailure::Expired => "lease_expired",
            PushFailure::PeerLost => "peer_lost",
        }
    }
}

/// How a push ended, as the driver of the reversed handoff reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub enum PushResult {
    /// The prefill worker ingested the snapshot.
    Sent,
    /// It did not.
    Failed(PushFailure),
}

/// Why a reseed could not bypass its prefill (the seed's §6
/// `snapshot_bypass_miss` reasons, plus the ablation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub enum MissReason {
    /// No snapshot for the session (never pushed, evicted, or P restarted).
    NoEntry,
    /// The snapshot is shorter than the prompt minus `K_TAIL_TOLERANCE`.
    SeqlenShort,
    /// The snapshot is older than `snapshot_max_age`.
    Stale,
    /// Bypass is switched off (the seed's E4-ablate).
    Disabled,
}

impl MissReason {
    /// Stable name for logs.
    pub fn name(self) -> &'static str {
        match self {
            MissReason::NoEntry => "no_entry",
            MissReason::SeqlenShort => "seqlen_short",
            MissReason::Stale => "stale",
            MissReason::Disabled => "bypass_disabled",
        }
    }
}

/// Why a snapshot entry left the prefill worker's store (the seed's §6
/// `snapshot_evicted` reasons).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub enum SnapshotEvictReason {
    /// Least recently used: for `max_sessions`, or for pool pages.
    Lru,
    /// The session was closed.
    SessionClose,
    /// Found too old at a lookup.
    Stale,
}

impl SnapshotEvictReason {
    /// Stable name for logs.
    pub fn name(self) -> &'static str {
        match self {
            SnapshotEvictReason::Lru => "lru",
            SnapshotEvictReason::SessionClose => "session_close",
            SnapshotEvictReason::Stale => "stale",
        }
    }
}

/// What the session layer of a core did, in order; drained by the driver
/// ([`SglangCore::drain_session_events`]) for routing and the seed's §6
/// log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub enum SessionEvent {
    /// A turn finished and its KV stays in the session's slot.
    Committed {
        /// The session.
        session: SessionId,
        /// The turn.
        request: RequestId,
        /// Tokens the slot now holds (`kv_committed_len`).
        tokens: u64,
    },
    /// A request appended to a resident slot (direct-to-D).
    Appended {
        /// The session.
        session: SessionId,
        /// The turn.
        request: RequestId,
        /// Tokens of KV it reuses.
        reused_tokens: u64,
    },
    /// A slot was freed.
    SlotEvicted {
        /// The session.
        session: SessionId,
        /// The slot's generation: the last turn that committed into it or
        /// is extending it. A router that has since placed a newer turn of
        /// the session on this worker is not told the session left by this
        /// (the newer turn builds its own slot here).
        turn: RequestId,
        /// Tokens it held.
        tokens: u64,
        /// Why.
        reason: SlotEvictReason,
    },
    /// The slot is locked for a push of its first `tokens` tokens
    /// (`snapshot_push_enqueued`).
    PushEnqueued {
        /// The session.
        session: SessionId,
        /// The lock (the push's source pin).
        lock: SourceLeaseId,
        /// Tokens to push.
        tokens: u64,
        /// Growth since the last successful push.
        delta: u64,
        /// 1 for the first try, 2 for the retry.
        attempt: u8,
    },
    /// The push landed (`snapshot_push_sent`); the lock is released.
    PushSent {
        /// The session.
        session: SessionId,
        /// The lock.
        lock: SourceLeaseId,
        /// Tokens pushed.
        tokens: u64,
    },
    /// The push failed (`snapshot_push_failed`); `retry` when it is tried
    /// once more under the same lock, otherwise the lock is released.
    PushFailed {
        /// The session.
        session: SessionId,
        /// The lock.
        lock: SourceLeaseId,
        /// Why.
        reason: PushFailure,
        /// Whether a retry follows.
        retry: bool,
    },
    /// The session was released while its push was in flight: the push is
    /// aborted and the lock ends with the slot.
    PushAborted {
        /// The session.
        session: SessionId,
        /// The lock.
        lock: SourceLeaseId,
    },
    /// The prefill worker's store ingested a snapshot
    /// (`snapshot_recv_ingested`).
    SnapshotIngested {
        /// The session.
        session: SessionId,
        /// The push attempt.
        push: HandoffId,
        /// Tokens stored.
        tokens: u64,
        /// Length of the entry it replaced, if any.
        replaced: Option<u64>,
        /// Another push for the session was in flight too (last write
        /// wins; seed §7 "双重 push").
        double_push: bool,
    },
    /// A snapshot entry left the store (`snapshot_evicted`).
    SnapshotEvicted {
        /// The session.
        session: SessionId,
        /// Tokens it held.
        tokens: u64,
        /// Why.
        reason: SnapshotEvictReason,
    },
    /// A reseed's prompt is covered by a snapshot: its prefill is bypassed
    /// (`snapshot_bypass_hit`).
    BypassHit {
        /// The session.
        session: SessionId,
        /// The reseed.
        request: RequestId,
        /// Tokens the snapshot covers of the prompt.
        tokens: u64,
        /// Tokens of the prompt still computed (at most `K_TAIL_TOLERANCE`).
        tail: u64,
        /// Time since the snapshot was ingested.
        age: Duration,
    },
    /// A reseed re-prefills (`snapshot_bypass_miss`).
    BypassMiss {
        /// The session.
        session: SessionId,
        /// The reseed.
        request: RequestId,
        /// Why.
        reason: MissReason,
    },
}
