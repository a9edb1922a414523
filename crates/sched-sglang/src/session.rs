//! Streaming session slots on a decode worker, and the decode side of the
//! D→P snapshot push.
//!
//! After SGLang's streaming sessions (`srt/managers/session_controller.py`,
//! `Session.create_req`: a request naming an open session continues its
//! context) and the session-aware cache seed 002 §3.1 describes
//! (`SessionAwareCache.cache_finished_req` writes a finished turn's KV back
//! into the session's `SessionSlot`, whose `lock_ref` keeps it from eviction
//! while a snapshot is sent):
//!
//! - a turn of a session that finishes here keeps its KV (prompt and
//!   output) and its request slot in the session's slot instead of freeing
//!   them; the KV is private to the slot, never published into the shared
//!   radix tree;
//! - the session's next request appends: it is admitted through the normal
//!   extend batching with the slot's KV as its prefix, and computes only
//!   the new tokens;
//! - idle slots are evicted least recently used first when the pool or the
//!   request slots run short (after the radix cache); a running slot, or
//!   one locked by a push, is never evicted;
//! - `release_session` closes a session (after its running turn, if any);
//!   a push in flight is aborted (seed §3.1: the snapshot would be
//!   inconsistent);
//! - when a turn commits and the session grew by at least `K_DELTA` tokens
//!   since its last successful push, the slot is locked for a push (the
//!   source "pin" of a reversed handoff) and [`SessionEvent::PushEnqueued`]
//!   is reported; a failed push is retried once, then abandoned (the prefill
//!   worker keeps its older entry; seed §7).
//!
//! Page accounting: a slot's pages are counted as [`Owner::Session`] while it
//! is idle or locked and as active while its turn runs; the capacity
//! snapshot reports session pages inside `active_blocks`, and
//! [`SglangCore::session_capacity`] splits them out exactly.

use crate::core::SglangCore;
use crate::radix::Owner;
use crate::seq::{Kind, Phase, Seq};
use crate::session_slots::{Push, SessionCapacity, Slot};
use handoff_core::session::{PushResult, SessionEvent, SlotEvictReason};
use handoff_core::{CommandOutcome, Request, SessionId, SourceLeaseId};
use handoff_perf::PerfModel;

impl<P: PerfModel> SglangCore<P> {
    /// Whether the session layer is on.
    pub(crate) fn sessions_on(&self) -> bool {
        self.cfg.sessions.enabled
    }

    /// Moves pending session events into `out` (appending), in order.
    pub fn drain_session_events(&mut self, out: &mut Vec<SessionEvent>) {
        out.append(&mut self.sessions.events);
        out.append(&mut self.store.events);
    }

    /// Whether `session` has a slot on this worker (the router's residency
    /// question).
    pub fn session_resident(&self, session: SessionId) -> bool {
        self.sessions.slots.contains_key(&session)
    }

    /// Tokens `session`'s slot holds, if resident.
    pub fn session_tokens(&self, session: SessionId) -> Option<u64> {
        self.sessions.slots.get(&session).map(|s| s.committed)
    }

    /// Session-held pages, exactly.
    pub fn session_capacity(&self) -> SessionCapacity {
        let mut c = SessionCapacity {
            slots: self.sessions.slots.len() as u64,
            idle_slot_pages: self.sessions.evictable_pages,
            snapshots: self.store.len() as u64,
            snapshot_pages: self.store.entry_pages(),
            snapshot_reserved_pages: self.store.pending_pages(),
            ..SessionCapacity::default()
        };
        for slot in self.sessions.slots.values() {
            if !slot.running && slot.push.is_some() {
                c.locked_slot_pages += self.seqs.get(slot.idx).map_or(0, |s| s.private_pages);
            }
        }
        c
    }

    /// Pages that evicting idle slots and snapshot entries would free.
    pub(crate) fn evictable_session_pages(&self) -> u64 {
        self.sessions.evictable_pages + self.store.entry_pages()
    }

    fn set_evictable(&mut self, session: SessionId, on: bool) {
        let Some(slot) = self.sessions.slots.get(&session).copied() else {
            return;
        };
        let pages = self.seqs.get(slot.idx).map_or(0, |s| s.private_pages);
        let key = (slot.lru, session);
        if on {
            if self.sessions.evictable.insert(key) {
                self.sessions.evictable_pages += pages;
            }
        } else if self.sessions.evictable.remove(&key) {
            self.sessions.evictable_pages = self.sessions.evictable_pages.saturating_sub(pages);
        }
    }

    /// A request naming a session, on `Submit`: queued like any request;
    /// at admission it takes the session's slot if the slot is still
    /// resident ([`Self::take_session_slot`]), so a turn waiting in the queue
    /// holds no KV and its idle slot stays evictable. `None` when the
    /// session layer does not take the request (sessions off, or no session
    /// named).
    pub(crate) fn submit_session(&mut self, request: &Request) -> Option<CommandOutcome> {
        let session = request.session.filter(|_| self.sessions_on())?;
        let prompt = u64::from(request.prompt_tokens.max(1));
        let max_out = u64::from(request.max_output_tokens.max(1));
        if !self.fits_empty_pool(prompt, max_out) {
            return Some(CommandOutcome::Unsupported(Some(request.clone())));
        }
        let mut seq = Seq::new(
            request.id,
            Kind::Ordinary,
            Phase::Waiting,
            prompt,
            max_out,
            Vec::new(),
        );
        seq.session = Some(session);
        seq.lora = request.lora.as_ref().map_or(0, |l| l.id);
        let idx = self.seqs.insert(seq);
        self.waiting.push_back(idx);
        Some(CommandOutcome::Submitted)
    }

    /// At admission: a waiting turn whose session has an idle slot here
    /// takes the slot's KV and request slot (direct-to-D append); the slot
    /// now runs and cannot be evicted. A slot whose context the turn does
    /// not extend is freed (the turn starts over). Nothing happens for
    /// other requests, or when the slot is gone (evicted meanwhile: a cold
    /// prefill of the whole context). False when the slot's pages exceed
    /// `spare_tokens` (what admission has not yet promised of the free and
    /// evictable pool this pass): the turn waits to be first.
    pub(crate) fn take_session_slot(&mut self, idx: u32, spare_tokens: f64) -> bool {
        let Some(seq) = self.seqs.get(idx) else {
            return true;
        };
        if seq.kind != Kind::Ordinary || seq.has_slot || seq.computed > 0 {
            return true;
        }
        let Some(session) = seq.session else {
            return true;
        };
        let (request, fill) = (seq.id, seq.fill_len());
        let Some(slot) = self.sessions.slots.get(&session).copied() else {
            return true;
        };
        if slot.running || slot.idx == idx {
            return true;
        }
        if slot.committed >= fill {
            self.free_slot(session, SlotEvictReason::Replaced);
            return true;
        }
        let slot_pages = self.seqs.get(slot.idx).map_or(0, |s| s.private_pages);
        if slot.push.is_none() && (slot_pages * self.page) as f64 > spare_tokens {
            return false;
        }
        self.set_evictable(session, false);
        let Some(old) = self.seqs.remove(slot.idx) else {
            return true;
        };
        let pages = old.private_pages;
        self.private[old.owner as usize] = self.private[old.owner as usize].saturating_sub(pages);
        self.private[Owner::Active as usize] += pages;
        if let Some(seq) = self.seqs.get_mut(idx) {
            seq.computed = old.computed;
            seq.private_pages = pages;
            seq.has_slot = old.has_slot;
        }
        let tick = self.sessions.touch();
        if let Some(s) = self.sessions.slots.get_mut(&session) {
            s.idx = idx;
            s.turn = request;
            s.running = true;
            s.lru = tick;
        }
        self.sessions.events.push(SessionEvent::Appended {
            session,
            request,
            reused_tokens: old.computed,
        });
        true
    }

    /// `cache_finished_req` for a session's turn: the KV stays in the slot.
    /// Returns false when `idx` is not a session turn (free it as usual).
    pub(crate) fn commit_session(&mut self, idx: u32) -> bool {
        let Some(seq) = self.seqs.get(idx) else {
            return false;
        };
        let Some(session) = seq.session.filter(|_| self.sessions_on()) else {
            return false;
        };
        if matches!(seq.kind, Kind::Source(_)) || !seq.has_slot {
            return false;
        }
        let (request, tokens) = (seq.id, seq.computed);
        if let Some(old) = self.sessions.slots.get(&session).copied() {
            if old.idx != idx {
                self.free_slot(session, SlotEvictReason::Replaced);
            }
        }
        self.relabel(idx, Owner::Session);
        if let Some(s) = self.seqs.get_mut(idx) {
            s.phase = Phase::SessionIdle;
        }
        let tick = self.sessions.touch();
        let slot = self.sessions.slots.entry(session).or_insert(Slot {
            idx,
            turn: request,
            running: false,
            committed: 0,
            pushed: 0,
            push: None,
            close_after_turn: false,
            evict_pending: false,
            lru: tick,
        });
        slot.idx = idx;
        slot.turn = request;
        slot.running = false;
        slot.committed = tokens;
        slot.lru = tick;
        let (close, locked) = (slot.close_after_turn, slot.push.is_some());
        self.sessions.events.push(SessionEvent::Committed {
            session,
            request,
            tokens,
        });
        if close {
            self.free_slot(session, SlotEvictReason::Closed);
            return true;
        }
        if !locked {
            self.set_evictable(session, true);
            self.offer_push(session, 1);
        }
        self.evict_if_pending(session);
        true
    }

    /// Carries out a deferred forced eviction once the slot is idle and
    /// unlocked.
    fn evict_if_pending(&mut self, session: SessionId) {
        let due = self
            .sessions
            .slots
            .get(&session)
            .is_some_and(|s| s.evict_pending && !s.running && s.push.is_none());
        if due {
            self.free_slot(session, SlotEvictReason::Forced);
        }
    }

    /// Locks the slot for a push if it grew by `K_DELTA` since the last one.
    fn offer_push(&mut self, session: SessionId, attempt: u8) {
        if !self.cfg.sessions.push {
            return;
        }
        let Some(slot) = self.sessions.slots.get(&session).copied() else {
            return;
        };
        let delta = slot.committed.saturating_sub(slot.pushed);
        if slot.push.is_some() || slot.running || delta < self.cfg.sessions.push_delta_tokens {
            return;
        }
        let lock = SourceLeaseId(self.next_lease);
        self.next_lease += 1;
        self.set_evictable(session, false);
        if let Some(s) = self.sessions.slots.get_mut(&session) {
            s.push = Some(Push {
                lock,
                tokens: slot.committed,
                attempt,
            });
        }
        self.sessions.locks += 1;
        self.sessions.events.push(SessionEvent::PushEnqueued {
            session,
            lock,
            tokens: slot.committed,
            delta,
            attempt,
        });
    }

    /// The push under `lock` ended. A first failure retries under the same
    /// lock; a second abandons the push (the prefill worker keeps its older
    /// entry). Answers `Noop` for an unknown or ended lock.
    pub fn finish_push(
        &mut self,
        session: SessionId,
        lock: SourceLeaseId,
        result: PushResult,
    ) -> CommandOutcome {
        let Some(slot) = self.sessions.slots.get(&session).copied() else {
            return CommandOutcome::Noop;
        };
        let Some(push) = slot.push.filter(|p| p.lock == lock) else {
            return CommandOutcome::Noop;
        };
        match result {
            PushResult::Failed(reason) if push.attempt < 2 => {
                if let Some(s) = self.sessions.slots.get_mut(&session) {
                    s.push = Some(Push {
                        attempt: push.attempt + 1,
                        ..push
                    });
                }
                self.sessions.events.push(SessionEvent::PushFailed {
                    session,
                    lock,
                    reason,
                    retry: true,
                });
                self.sessions.events.push(SessionEvent::PushEnqueued {
                    session,
                    lock,
                    tokens: push.tokens,
                    delta: push.tokens.saturating_sub(slot.pushed),
                    attempt: push.attempt + 1,
                });
                return CommandOutcome::Applied;
            }
            PushResult::Failed(reason) => {
                self.sessions.events.push(SessionEvent::PushFailed {
                    session,
                    lock,
                    reason,
                    retry: false,
                });
            }
            PushResult::Sent => {
                if let Some(s) = self.sessions.slots.get_mut(&session) {
                    s.pushed = push.tokens;
                }
                self.sessions.events.push(SessionEvent::PushSent {
                    session,
                    lock,
                    tokens: push.tokens,
                });
            }
        }
        if let Some(s) = self.sessions.slots.get_mut(&session) {
            s.push = None;
        }
        self.sessions.locks = self.sessions.locks.saturating_sub(1);
        if !slot.running {
            if slot.evict_pending {
                self.evict_if_pending(session);
                return CommandOutcome::Applied;
            }
            self.set_evictable(session, true);
            // A turn that committed during the push may be due one itself.
            if push.attempt == 1 || result == PushResult::Sent {
                self.offer_push(session, 1);
            }
        }
        CommandOutcome::Applied
    }

    /// The push under `lock`, if it is open: tokens to send.
    pub fn push_tokens(&self, session: SessionId, lock: SourceLeaseId) -> Option<u64> {
        let push = self.sessions.slots.get(&session)?.push?;
        (push.lock == lock).then_some(push.tokens)
    }

    /// `release_session`: frees the session's slot (after its running turn
    /// commits, if one runs), aborting a push in flight, and drops its
    /// snapshot entry if this worker holds one. `Noop` if the session holds
    /// nothing here.
    pub fn release_session(&mut self, session: SessionId) -> CommandOutcome {
        let dropped = self.release_snapshot(session);
        match self.sessions.slots.get_mut(&session) {
            Some(slot) if slot.running => {
                slot.close_after_turn = true;
                CommandOutcome::Applied
            }
            Some(_) => {
                self.free_slot(session, SlotEvictReason::Closed);
                CommandOutcome::Applied
            }
            None if dropped => CommandOutcome::Applied,
            None => CommandOutcome::Noop,
        }
    }

    /// Evicts the session's slot as a capacity eviction would (a forced
    /// "session not resident", the seed's §8 smoke test's shrunken
    /// admission budget): now if it is idle and unlocked, otherwise once
    /// its running turn commits and its push ends (a running or locked slot
    /// is never evicted). Whether it was evicted now.
    pub fn evict_session(&mut self, session: SessionId) -> bool {
        match self.sessions.slots.get_mut(&session) {
            Some(s) if !s.running && s.push.is_none() => {
                self.free_slot(session, SlotEvictReason::Forced);
                true
            }
            Some(s) => {
                s.evict_pending = true;
                false
            }
            None => false,
        }
    }

    /// Frees an idle slot's KV and request slot (a running one only loses
    /// its record; its seq runs on and starts a fresh slot at commit).
    fn free_slot(&mut self, session: SessionId, reason: SlotEvictReason) {
        self.set_evictable(session, false);
        let Some(slot) = self.sessions.slots.remove(&session) else {
            return;
        };
        if let Some(push) = slot.push {
            self.sessions.locks = self.sessions.locks.saturating_sub(1);
            self.sessions.events.push(SessionEvent::PushAborted {
                session,
                lock: push.lock,
            });
        }
        if !slot.running {
            self.release_kv(slot.idx, false);
            self.seqs.remove(slot.idx);
        }
        self.sessions.events.push(SessionEvent::SlotEvicted {
            session,
            turn: slot.turn,
            tokens: slot.committed,
            reason,
        });
    }

    /// Evicts the least recently used idle slot; whether there was one.
    pub(crate) fn evict_lru_slot(&mut self) -> bool {
        let Some(&(_, session)) = self.sessions.evictable.iter().next() else {
            return false;
        };
        self.free_slot(session, SlotEvictReason::Capacity);
        true
    }

    /// Whether [`Self::reclaim_request_slot`] would succeed.
    pub(crate) fn can_reclaim_request_slot(&self) -> bool {
        self.free_slots > 0 || !self.sessions.evictable.is_empty()
    }

    /// Frees a request slot by evicting an idle session, if one is idle.
    pub(crate) fn reclaim_request_slot(&mut self) -> bool {
        self.free_slots > 0 || (self.sessions_on() && self.evict_lru_slot())
    }

    /// After the radix cache: evicts snapshot entries, then idle slots,
    /// least recently used first, until `pages` are free.
    pub(crate) fn evict_session_held(&mut self, pages: u64) {
        while self.free_pages() < pages {
            if !self.evict_lru_snapshot() && !self.evict_lru_slot() {
                break;
            }
        }
    }
}
