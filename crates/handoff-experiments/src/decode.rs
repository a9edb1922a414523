//! A decode worker at session granularity: a KV pool in tokens holding
//! session slots and incoming-handoff reservations.
//!
//! A session slot is SGLang's `SessionSlot` (`python/sglang/srt/mem_cache/
//! session_aware_cache.py`): `cache_finished_req` saves the finished turn's
//! KV (`kv_committed_len`) into the slot instead of the radix tree, and the
//! next turn's `match_prefix` restores it, so only the new tokens are
//! computed (the seed's "direct-to-D append"). Ordinary radix eviction never
//! takes a slot; here the KVC admission evicts idle slots least recently
//! used when a turn or a reservation needs room. A slot whose turn is
//! running, or that a D→P push has locked (seed §3.1: the sender holds the
//! slot's lock for the transfer), is never evicted.

use handoff_core::{Generation, HandoffId, HandoffIdGen, Instant, SessionId, WorkerId};
use std::collections::{BTreeMap, VecDeque};

/// One session's KV on this worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Tokens allocated (committed, plus the running turn's input and
    /// output while it runs).
    pub allocated: u64,
    /// Tokens with valid KV after the last finished turn.
    pub committed: u64,
    /// A turn of the session is running here.
    pub in_use: bool,
    /// Push locks held.
    pub locks: u32,
    last_use: u64,
}

/// A queued D→P push of one session (the seed's `SnapshotSendQueue`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PushJob {
    /// The session.
    pub session: SessionId,
    /// 1 for the first try, 2 for the retry (§7: one retry).
    pub attempt: u8,
}

/// What a granted direct append needs computed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Append {
    /// New tokens to prefill on this worker.
    pub new_tokens: u64,
    /// Idle sessions evicted to make room.
    pub evicted: Vec<SessionId>,
}

/// See the module docs.
#[derive(Clone, Debug)]
pub struct DecodeWorker {
    /// This worker.
    pub id: WorkerId,
    /// Its incarnation; bumped by a restart.
    pub generation: Generation,
    /// Issues this incarnation's push handoff ids.
    pub ids: HandoffIdGen,
    capacity: u64,
    slots: BTreeMap<SessionId, Slot>,
    reservations: BTreeMap<HandoffId, (SessionId, u64)>,
    waiting: VecDeque<(HandoffId, SessionId, u64)>,
    /// When the append lane (extend passes, FCFS) is next free.
    pub lane_free_at: Instant,
    /// Requests decoding (the decode batch).
    pub decoding: u32,
    /// Pushes not started yet, FIFO.
    pub push_queue: VecDeque<PushJob>,
    /// Pushes started and not ended.
    pub pushes_in_flight: u32,
    /// Committed length of each session's last successful push from here
    /// (the `last_pushed_seqlen` of §3.1).
    pub last_pushed: BTreeMap<SessionId, u64>,
    /// Queued pushes dropped because their session left this worker.
    pub pushes_dropped: u64,
    tick: u64,
}

impl DecodeWorker {
    /// An empty worker of `capacity` tokens.
    pub fn new(id: WorkerId, capacity: u64) -> Self {
        DecodeWorker {
            id,
            generation: Generation(0),
            ids: HandoffIdGen::new(id, Generation(0)),
            capacity,
            slots: BTreeMap::new(),
            reservations: BTreeMap::new(),
            waiting: VecDeque::new(),
            lane_free_at: Instant::ZERO,
            decoding: 0,
            push_queue: VecDeque::new(),
            pushes_in_flight: 0,
            last_pushed: BTreeMap::new(),
            pushes_dropped: 0,
            tick: 0,
        }
    }

    /// Pool size in tokens.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Tokens held by slots and reservations.
    pub fn used(&self) -> u64 {
        self.slots.values().map(|s| s.allocated).sum::<u64>()
            + self.reservations.values().map(|r| r.1).sum::<u64>()
    }

    fn evictable_except(&self, keep: Option<SessionId>) -> u64 {
        self.slots
            .iter()
            .filter(|(s, sl)| Some(**s) != keep && !sl.in_use && sl.locks == 0)
            .map(|(_, sl)| sl.allocated)
            .sum()
    }

    /// Tokens a new admission could get: free plus evictable.
    pub fn headroom(&self) -> u64 {
        (self.capacity.saturating_sub(self.used())).saturating_add(self.evictable_except(None))
    }

    /// KV of the sessions whose turn is running: what a decode step reads
    /// (idle slots are memory, not attention work).
    pub fn running_tokens(&self) -> u64 {
        self.slots
            .values()
            .filter(|s| s.in_use)
            .map(|s| s.allocated)
            .sum()
    }

    /// Turns running or arriving here (in-use slots plus reservations).
    pub fn active(&self) -> u64 {
        self.slots.values().filter(|s| s.in_use).count() as u64 + self.reservations.len() as u64
    }

    /// The session's slot.
    pub fn slot(&self, session: SessionId) -> Option<Slot> {
        self.slots.get(&session).copied()
    }

    /// Sessions resident here.
    pub fn sessions(&self) -> impl Iterator<Item = (SessionId, Slot)> + '_ {
        self.slots.iter().map(|(s, sl)| (*s, *sl))
    }

    /// Makes `need` tokens free, evicting idle unlocked slots (not `keep`)
    /// least recently used first; evicts nothing if that cannot suffice.
    fn make_room(&mut self, need: u64, keep: Option<SessionId>) -> Option<Vec<SessionId>> {
        let free = self.capacity.saturating_sub(self.used());
        if free >= need {
            return Some(Vec::new());
        }
        if free + self.evictable_except(keep) < need {
            return None;
        }
        let mut victims: Vec<(u64, SessionId)> = self
            .slots
            .iter()
            .filter(|(s, sl)| Some(**s) != keep && !sl.in_use && sl.locks == 0)
            .map(|(s, sl)| (sl.last_use, *s))
            .collect();
        victims.sort_unstable();
        let mut evicted = Vec::new();
        let mut free = free;
        for (_, s) in victims {
            if free >= need {
                break;
            }
            if let Some(sl) = self.slots.remove(&s) {
                free += sl.allocated;
                self.forget(s);
                evicted.push(s);
            }
        }
        Some(evicted)
    }

    /// Admits the next turn of a resident session as a direct append of
    /// `input` prompt tokens and `output` output tokens. `None` when the
    /// session is not resident, already running, or does not fit.
    pub fn try_append(&mut self, session: SessionId, input: u64, output: u64) -> Option<Append> {
        let slot = self.slots.get(&session).copied()?;
        if slot.in_use {
            return None;
        }
        let target = input + output;
        let need = target.saturating_sub(slot.allocated);
        let evicted = self.make_room(need, Some(session))?;
        let s = self.slots.get_mut(&session)?;
        s.in_use = true;
        s.allocated = target;
        // SGLang `match_prefix` restores min(committed, input - 1) tokens:
        // at least one token is always computed.
        let prefix = s.committed.min(input.saturating_sub(1));
        Some(Append {
            new_tokens: input - prefix,
            evicted,
        })
    }

    /// Reserves `tokens` for incoming KV of `session` (destination-first,
    /// SGLang `DecodePreallocQueue.pop_preallocated`). `None`: no room now.
    pub fn try_reserve(
        &mut self,
        id: HandoffId,
        session: SessionId,
        tokens: u64,
    ) -> Option<Vec<SessionId>> {
        if tokens > self.capacity {
            return None;
        }
        let evicted = self.make_room(tokens, None)?;
        self.reservations.insert(id, (session, tokens));
        Some(evicted)
    }

    /// Queues a reservation that did not fit (FIFO).
    pub fn wait(&mut self, id: HandoffId, session: SessionId, tokens: u64) {
        if !self.waiting.iter().any(|w| w.0 == id) {
            self.waiting.push_back((id, session, tokens));
        }
    }

    /// Takes `id` out of the waiting queue; whether it was there.
    pub fn unwait(&mut self, id: HandoffId) -> bool {
        let before = self.waiting.len();
        self.waiting.retain(|w| w.0 != id);
        before != self.waiting.len()
    }

    /// Grants the head of the waiting queue if it fits now.
    pub fn pump(&mut self) -> Option<(HandoffId, Vec<SessionId>)> {
        let (id, session, tokens) = *self.waiting.front()?;
        let evicted = self.try_reserve(id, session, tokens)?;
        self.waiting.pop_front();
        Some((id, evicted))
    }

    /// Frees a reservation; whether it existed.
    pub fn cancel_reservation(&mut self, id: HandoffId) -> bool {
        self.reservations.remove(&id).is_some()
    }

    /// The KV arrived: the reservation becomes the session's running slot
    /// holding `valid` tokens. Any older slot of the session is replaced.
    pub fn activate(&mut self, id: HandoffId, valid: u64) -> Option<SessionId> {
        let (session, tokens) = self.reservations.remove(&id)?;
        self.tick += 1;
        self.slots.insert(
            session,
            Slot {
                allocated: tokens,
                committed: valid.min(tokens),
                in_use: true,
                locks: 0,
                last_use: self.tick,
            },
        );
        Some(session)
    }

    /// The running turn finished with `committed` tokens of valid KV
    /// (`cache_finished_req`). `retain: false` frees the slot (naive PD).
    pub fn finish_turn(&mut self, session: SessionId, committed: u64, retain: bool) {
        self.tick += 1;
        let tick = self.tick;
        if !retain {
            self.slots.remove(&session);
            return;
        }
        if let Some(s) = self.slots.get_mut(&session) {
            s.in_use = false;
            s.committed = committed;
            s.allocated = committed;
            s.last_use = tick;
        }
    }

    /// A turn that will not finish here gives its slot back unchanged.
    pub fn abandon_turn(&mut self, session: SessionId) {
        if let Some(s) = self.slots.get_mut(&session) {
            s.in_use = false;
            s.committed = s.committed.min(s.allocated);
            s.allocated = s.committed;
        }
    }

    fn forget(&mut self, session: SessionId) {
        self.last_pushed.remove(&session);
        let before = self.push_queue.len();
        self.push_queue.retain(|j| j.session != session);
        self.pushes_dropped += (before - self.push_queue.len()) as u64;
    }

    /// Drops the session's slot (`release_session`); the slot it had.
    pub fn release(&mut self, session: SessionId) -> Option<Slot> {
        self.forget(session);
        self.slots.remove(&session)
    }

    /// Drops the slot only if it is idle and unlocked (a forced eviction).
    pub fn evict_if_idle(&mut self, session: SessionId) -> bool {
        match self.slots.get(&session) {
            Some(s) if !s.in_use && s.locks == 0 => {
                self.release(session);
                true
            }
            _ => false,
        }
    }

    /// A push locks the session's slot; its committed length.
    pub fn lock(&mut self, session: SessionId) -> Option<u64> {
        let s = self.slots.get_mut(&session)?;
        s.locks += 1;
        Some(s.committed)
    }

    /// Ends a push lock; whether one was held.
    pub fn unlock(&mut self, session: SessionId) -> bool {
        match self.slots.get_mut(&session) {
            Some(s) if s.locks > 0 => {
                s.locks -= 1;
                true
            }
            _ => false,
        }
    }

    /// Slots locked by pushes.
    pub fn locked_slots(&self) -> usize {
        self.slots.values().filter(|s| s.locks > 0).count()
    }

    /// Slots with a running turn.
    pub fn running_slots(&self) -> usize {
        self.slots.values().filter(|s| s.in_use).count()
    }

    /// Reservations held and queued.
    pub fn reservations(&self) -> (usize, usize) {
        (self.reservations.len(), self.waiting.len())
    }

    /// A restart: everything is lost; the next incarnation's ids and
    /// generation. Returns the sessions that were resident.
    pub fn restart(&mut self, now: Instant) -> Vec<SessionId> {
        let lost: Vec<SessionId> = self.slots.keys().copied().collect();
        self.slots.clear();
        self.reservations.clear();
        self.waiting.clear();
        self.pushes_dropped += self.push_queue.len() as u64;
        self.push_queue.clear();
        self.last_pushed.clear();
        self.pushes_in_flight = 0;
        self.decoding = 0;
        self.lane_free_at = now;
        self.generation = self.generation.next();
        self.ids = self.ids.restarted();
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> SessionId {
        SessionId(n)
    }

    fn seeded(w: &mut DecodeWorker, sid: u64, tokens: u64) {
        let id = w.ids.next_id();
        assert!(w.try_reserve(id, s(sid), tokens).is_some());
        w.activate(id, tokens).unwrap();
        w.finish_turn(s(sid), tokens, true);
    }

    #[test]
    fn append_computes_only_new_tokens_and_evicts_lru_idle() {
        let mut w = DecodeWorker::new(WorkerId(1), 100);
        seeded(&mut w, 1, 30);
        seeded(&mut w, 2, 30);
        seeded(&mut w, 3, 30);
        // Session 3 grows by 20 input + 5 output: 15 more than free.
        let a = w.try_append(s(3), 50, 5).unwrap();
        assert_eq!(a.new_tokens, 20);
        assert_eq!(a.evicted, vec![s(1)], "least recently used idle slot goes");
        assert_eq!(w.used(), 85);
        w.finish_turn(s(3), 55, true);
        assert_eq!(w.slot(s(3)).unwrap().committed, 55);
    }

    #[test]
    fn locked_and_running_slots_are_never_evicted() {
        let mut w = DecodeWorker::new(WorkerId(1), 100);
        seeded(&mut w, 1, 40);
        seeded(&mut w, 2, 40);
        assert_eq!(w.lock(s(1)), Some(40));
        let _ = w.try_append(s(2), 45, 5).unwrap();
        // Session 1 locked, 2 running: a 30-token reservation cannot fit.
        let id = w.ids.next_id();
        assert!(w.try_reserve(id, s(3), 30).is_none());
        w.wait(id, s(3), 30);
        assert!(w.pump().is_none());
        assert!(w.unlock(s(1)));
        assert!(!w.unlock(s(1)));
        let (got, evicted) = w.pump().unwrap();
        assert_eq!((got, evicted), (id, vec![s(1)]));
        assert!(w.cancel_reservation(id));
        assert_eq!(w.reservations(), (0, 0));
    }

    #[test]
    fn whole_input_cached_still_computes_one_token() {
        let mut w = DecodeWorker::new(WorkerId(1), 100);
        seeded(&mut w, 1, 40);
        assert_eq!(w.try_append(s(1), 40, 1).unwrap().new_tokens, 1);
        assert!(w.try_append(s(1), 41, 1).is_none(), "one turn at a time");
        let lost = w.restart(Instant::ZERO);
        assert_eq!(lost, vec![s(1)]);
        assert_eq!(w.generation, Generation(1));
        assert_eq!(w.used(), 0);
    }
}
