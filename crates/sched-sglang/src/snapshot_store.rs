//! `PrefillSnapshotStore`: the prefill worker's side table of session KV
//! snapshots pushed back by decode workers (seed 002 §4.3; deliberately not
//! the radix cache, §1 "Option C": the tree keeps a single producer), and
//! the prefill bypass that reads it (§4.4).
//!
//! A push is the destination side of a reversed handoff: it reserves pages
//! from this worker's own KV pool before its transfer starts
//! (`SglangCore::reserve_snapshot`, in `snapshots.rs`; counted as reserved
//! destination pages), and the reservation becomes the session's entry when
//! the transfer completes (`SglangCore::ingest_snapshot`), replacing an older
//! one (last write wins; a second push in flight for the same session is
//! reported as a double push). At most `snapshot_max_sessions` entries are
//! kept; the least recently used goes first, and unpinned entries are also
//! evicted, LRU, when prefill admission or a reservation needs their pages
//! (seed decision D2: a ~92K-token pool holds only one or two 50K
//! sessions).
//!
//! A reseed whose prompt the entry covers (`kv_committed_len >= input_len -
//! K_TAIL_TOLERANCE`; a longer snapshot is a hit) takes the entry's pages as
//! its prefix at admission and computes only the tail (nothing when the
//! snapshot covers the prompt), then pins and transfers like any handoff
//! prefill. While the read is in flight the pages belong to that request
//! (the entry is "lent"), so nothing can evict them; when its source ends
//! they return to the store as the session's entry, unless a newer push
//! landed meanwhile. The seed reuses `kv_indices` zero-copy (§4.4, D3);
//! lending the pages is the page-count equivalent.

use handoff_core::session::SessionEvent;
use handoff_core::{HandoffId, Instant, SessionId};
use std::collections::{BTreeMap, BTreeSet};

/// A stored snapshot (the seed's `SnapshotEntry`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotEntry {
    /// Tokens whose KV it holds (`kv_committed_len`).
    pub kv_committed_len: u64,
    /// Pages it holds in this worker's pool.
    pub pages: u64,
    /// When it was ingested (`last_recv_time`).
    pub last_recv: Instant,
    pub(crate) lru: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pending {
    pub(crate) session: SessionId,
    pub(crate) tokens: u64,
    pub(crate) pages: u64,
}

/// Why a snapshot reservation was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotRefusal {
    /// Sessions are off on this worker.
    Disabled,
    /// Not now: even evicting the cache and every entry would not make room.
    Unavailable,
    /// Never: the snapshot is larger than the pool.
    TooLarge,
}

/// A granted snapshot reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotReservation {
    /// Pages reserved.
    pub pages: u64,
    /// Another push for the same session is already being written.
    pub double_push: bool,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct PrefillSnapshotStore {
    pub(crate) entries: BTreeMap<SessionId, SnapshotEntry>,
    pub(crate) lru: BTreeSet<(u64, SessionId)>,
    pub(crate) pending: BTreeMap<HandoffId, Pending>,
    pub(crate) entry_pages: u64,
    pub(crate) pending_pages: u64,
    pub(crate) tick: u64,
    pub(crate) events: Vec<SessionEvent>,
}

impl PrefillSnapshotStore {
    /// The session's entry (the seed's §4.6 status probe).
    pub fn entry(&self, session: SessionId) -> Option<SnapshotEntry> {
        self.entries.get(&session).copied()
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Reservations being written.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Pages of the entries.
    pub fn entry_pages(&self) -> u64 {
        self.entry_pages
    }

    /// Pages of the reservations.
    pub fn pending_pages(&self) -> u64 {
        self.pending_pages
    }

    pub(crate) fn insert(&mut self, session: SessionId, mut e: SnapshotEntry) {
        self.tick += 1;
        e.lru = self.tick;
        self.lru.insert((e.lru, session));
        self.entry_pages += e.pages;
        self.entries.insert(session, e);
    }

    pub(crate) fn remove(&mut self, session: SessionId) -> Option<SnapshotEntry> {
        let e = self.entries.remove(&session)?;
        self.lru.remove(&(e.lru, session));
        self.entry_pages = self.entry_pages.saturating_sub(e.pages);
        Some(e)
    }

    pub(crate) fn oldest(&self) -> Option<SessionId> {
        self.lru.iter().next().map(|&(_, s)| s)
    }

    /// Sessions with an entry or a reservation, counting `extra` too.
    pub(crate) fn sessions_with(&self, extra: SessionId) -> usize {
        let mut seen: BTreeSet<SessionId> = self.entries.keys().copied().collect();
        seen.extend(self.pending.values().map(|p| p.session));
        seen.insert(extra);
        seen.len()
    }
}
