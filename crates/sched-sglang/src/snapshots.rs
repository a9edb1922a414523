//! The core's side of the [`PrefillSnapshotStore`] (see `snapshot_store.rs`
//! for the design): reserving, ingesting, cancelling and evicting snapshot
//! entries, and the prefill bypass that lends an entry's pages to a reseed.

use crate::core::SglangCore;
use crate::radix::Owner;
use crate::seq::Kind;
use crate::snapshot_store::{
    Pending, PrefillSnapshotStore, SnapshotEntry, SnapshotRefusal, SnapshotReservation,
};
use handoff_core::session::{MissReason, SessionEvent, SnapshotEvictReason};
use handoff_core::{HandoffId, Instant, SessionId};
use handoff_perf::PerfModel;

impl<P: PerfModel> SglangCore<P> {
    /// The prefill worker's snapshot store.
    pub fn snapshot_store(&self) -> &PrefillSnapshotStore {
        &self.store
    }

    fn drop_entry(&mut self, session: SessionId, reason: SnapshotEvictReason) -> bool {
        let Some(e) = self.store.remove(session) else {
            return false;
        };
        self.private[Owner::Session as usize] =
            self.private[Owner::Session as usize].saturating_sub(e.pages);
        self.store.events.push(SessionEvent::SnapshotEvicted {
            session,
            tokens: e.kv_committed_len,
            reason,
        });
        true
    }

    /// Evicts the least recently used entry; whether there was one.
    pub(crate) fn evict_lru_snapshot(&mut self) -> bool {
        match self.store.oldest() {
            Some(s) => self.drop_entry(s, SnapshotEvictReason::Lru),
            None => false,
        }
    }

    /// Drops the session's entry (session close); whether there was one.
    pub(crate) fn release_snapshot(&mut self, session: SessionId) -> bool {
        self.drop_entry(session, SnapshotEvictReason::SessionClose)
    }

    /// Reserves pages for a push of `tokens` tokens of `session` (the
    /// destination's reservation, before any transfer: DEP invariant 1).
    /// Evicts LRU entries past `snapshot_max_sessions`, then cache and LRU
    /// entries for pages; refuses, evicting nothing, when that could not
    /// make room.
    pub fn reserve_snapshot(
        &mut self,
        id: HandoffId,
        session: SessionId,
        tokens: u64,
    ) -> Result<SnapshotReservation, SnapshotRefusal> {
        if !self.sessions_on() {
            return Err(SnapshotRefusal::Disabled);
        }
        if let Some(p) = self.store.pending.get(&id) {
            return Ok(SnapshotReservation {
                pages: p.pages,
                double_push: false,
            });
        }
        let pages = self.pages_for(tokens.max(1));
        if pages >= self.cfg.total_pages {
            return Err(SnapshotRefusal::TooLarge);
        }
        let reclaimable =
            self.free_pages() + self.radix.evictable_pages() + self.evictable_session_pages();
        if reclaimable < pages {
            return Err(SnapshotRefusal::Unavailable);
        }
        let max = self.cfg.sessions.snapshot_max_sessions as usize;
        while self.store.sessions_with(session) > max {
            // Never the session's own entry: the push replaces it.
            let victim = self
                .store
                .lru
                .iter()
                .map(|&(_, s)| s)
                .find(|&s| s != session);
            match victim {
                Some(s) => {
                    self.drop_entry(s, SnapshotEvictReason::Lru);
                }
                None => break,
            }
        }
        if !self.ensure_free(pages, false) {
            return Err(SnapshotRefusal::Unavailable);
        }
        let double_push = self.store.pending.values().any(|p| p.session == session);
        self.private[Owner::Reserved as usize] += pages;
        self.store.pending_pages += pages;
        self.store.pending.insert(
            id,
            Pending {
                session,
                tokens,
                pages,
            },
        );
        Ok(SnapshotReservation { pages, double_push })
    }

    /// The push's KV has landed: the reservation becomes the session's
    /// entry (`snapshot_recv_ingested`), replacing an older one.
    pub fn ingest_snapshot(&mut self, id: HandoffId, now: Instant) -> bool {
        let Some(p) = self.store.pending.remove(&id) else {
            return false;
        };
        self.store.pending_pages = self.store.pending_pages.saturating_sub(p.pages);
        self.private[Owner::Reserved as usize] =
            self.private[Owner::Reserved as usize].saturating_sub(p.pages);
        let double_push = self.store.pending.values().any(|q| q.session == p.session);
        let replaced = self.store.remove(p.session).map(|old| {
            self.private[Owner::Session as usize] =
                self.private[Owner::Session as usize].saturating_sub(old.pages);
            old.kv_committed_len
        });
        self.private[Owner::Session as usize] += p.pages;
        self.store.insert(
            p.session,
            SnapshotEntry {
                kv_committed_len: p.tokens,
                pages: p.pages,
                last_recv: now,
                lru: 0,
            },
        );
        self.store.events.push(SessionEvent::SnapshotIngested {
            session: p.session,
            push: id,
            tokens: p.tokens,
            replaced,
            double_push,
        });
        true
    }

    /// Frees a reservation that will not be written (the push failed or
    /// was aborted). Whether it existed.
    pub fn cancel_snapshot(&mut self, id: HandoffId) -> bool {
        let Some(p) = self.store.pending.remove(&id) else {
            return false;
        };
        self.store.pending_pages = self.store.pending_pages.saturating_sub(p.pages);
        self.private[Owner::Reserved as usize] =
            self.private[Owner::Reserved as usize].saturating_sub(p.pages);
        true
    }

    /// `prefill_bypass_check` at admission, once per request: a handoff
    /// prefill of a session whose snapshot covers its prompt takes the
    /// entry's pages as its prefix. False when the hit must wait because
    /// its pages exceed `spare_tokens` (what admission has not yet promised
    /// of the free and evictable pool).
    pub(crate) fn try_bypass(&mut self, idx: u32, spare_tokens: f64) -> bool {
        let now = self.now;
        let Some(seq) = self.seqs.get(idx) else {
            return true;
        };
        if seq.bypass_checked || seq.computed > 0 || !matches!(seq.kind, Kind::Source(_)) {
            return true;
        }
        let Some(session) = seq.session else {
            return true;
        };
        let (request, fill) = (seq.id, seq.fill_len());
        let sc = &self.cfg.sessions;
        let verdict = match self.store.entry(session) {
            _ if !sc.bypass => Err(MissReason::Disabled),
            None => Err(MissReason::NoEntry),
            Some(e)
                if sc
                    .snapshot_max_age
                    .is_some_and(|a| now.saturating_since(e.last_recv) > a) =>
            {
                Err(MissReason::Stale)
            }
            Some(e) if e.kv_committed_len + sc.tail_tolerance_tokens < fill => {
                Err(MissReason::SeqlenShort)
            }
            Some(e) => Ok(e),
        };
        if let Ok(e) = verdict {
            if (e.pages * self.page) as f64 > spare_tokens {
                return false;
            }
        }
        if let Some(seq) = self.seqs.get_mut(idx) {
            seq.bypass_checked = true;
        }
        let entry = match verdict {
            Ok(e) => e,
            Err(reason) => {
                if reason == MissReason::Stale {
                    self.drop_entry(session, SnapshotEvictReason::Stale);
                }
                self.store.events.push(SessionEvent::BypassMiss {
                    session,
                    request,
                    reason,
                });
                return true;
            }
        };
        self.store.remove(session);
        self.private[Owner::Session as usize] =
            self.private[Owner::Session as usize].saturating_sub(entry.pages);
        let covered = entry.kv_committed_len.min(fill);
        let pages = self.pages_for(covered);
        // A longer snapshot's pages past the prompt are freed now.
        self.private[Owner::Active as usize] += pages;
        if let Some(seq) = self.seqs.get_mut(idx) {
            seq.hashes.clear();
            seq.computed = covered;
            seq.private_pages = pages;
            seq.lent_snapshot = Some(entry.last_recv);
        }
        self.store.events.push(SessionEvent::BypassHit {
            session,
            request,
            tokens: covered,
            tail: fill - covered,
            age: now.saturating_since(entry.last_recv),
        });
        true
    }

    /// A bypassing reseed's source ended: its KV (now the whole prompt)
    /// goes back to the store as the session's entry, unless a newer push
    /// landed or the store is full; then it is freed. Returns false when
    /// `idx` did not read a snapshot.
    pub(crate) fn return_lent_snapshot(&mut self, idx: u32) -> bool {
        let Some(seq) = self.seqs.get(idx) else {
            return false;
        };
        let (Some(last_recv), Some(session)) = (seq.lent_snapshot, seq.session) else {
            return false;
        };
        let (tokens, pages, owner, has_slot) =
            (seq.computed, seq.private_pages, seq.owner, seq.has_slot);
        let keep = tokens > 0
            && !self.store.entries.contains_key(&session)
            && self.store.sessions_with(session)
                <= self.cfg.sessions.snapshot_max_sessions as usize;
        if !keep {
            self.release_kv(idx, false);
            self.seqs.remove(idx);
            return true;
        }
        self.private[owner as usize] = self.private[owner as usize].saturating_sub(pages);
        self.private[Owner::Session as usize] += pages;
        if has_slot {
            self.free_slots += 1;
        }
        self.seqs.remove(idx);
        self.store.insert(
            session,
            SnapshotEntry {
                kv_committed_len: tokens,
                pages,
                last_recv,
                lru: 0,
            },
        );
        true
    }
}
