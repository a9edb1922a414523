//! `PrefillSnapshotStore`: the prefill worker's side table of session KV
//! snapshots pushed back by decode workers (seed 002 §4.3; kept out of the
//! radix tree on purpose, §1 "Option C").
//!
//! It is the destination "scheduler" of a D→P push: a push reserves room
//! here before its transfer starts (destination-first, like SGLang's
//! `DecodePreallocQueue` in `disaggregation/decode.py`), the reservation
//! becomes the session's entry when the transfer completes (`ingest`), and
//! entries are evicted least-recently-used when a new push needs room or a
//! session slot (`max_sessions`). A bypassing reseed pins the entry it reads
//! until its P→D' transfer is done; pinned entries are never evicted, and an
//! entry replaced or released while pinned is retired and freed at unpin.
//!
//! Two pushes for one session (§7 "双重 push") both reserve; the one that
//! lands last wins (last-write-wins) and the caller logs a warning.

use handoff_core::{Duration, HandoffId, Instant, SessionId, WorkerId};
use std::collections::{BTreeMap, VecDeque};

/// A stored snapshot (the seed's `SnapshotEntry`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotEntry {
    /// Tokens whose KV the snapshot holds (`kv_committed_len`).
    pub kv_committed_len: u64,
    /// When it was ingested (`last_recv_time`).
    pub last_recv: Instant,
    /// The decode worker that pushed it.
    pub source: WorkerId,
    /// Bumped on every replacement; pins name the version they read.
    pub version: u64,
    pins: u32,
    lru: u64,
}

/// Why a reseed could not bypass (the seed's §6 `snapshot_bypass_miss`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MissReason {
    /// No snapshot for the session (never pushed, evicted, or P restarted).
    NoEntry,
    /// The snapshot is older than the tail tolerance allows.
    SeqlenShort,
    /// The snapshot is too old, or longer than the request's input (it
    /// cannot be a prefix of it).
    Stale,
    /// Bypass is switched off (E4-ablate).
    Disabled,
}

impl MissReason {
    /// Stable name for logs and reports.
    pub fn name(self) -> &'static str {
        match self {
            MissReason::NoEntry => "no_entry",
            MissReason::SeqlenShort => "seqlen_short",
            MissReason::Stale => "stale",
            MissReason::Disabled => "bypass_disabled",
        }
    }
}

/// Why an entry left the store (the seed's §6 `snapshot_evicted`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EvictReason {
    /// Least recently used, to make room for a push.
    Lru,
    /// The client closed the session.
    SessionClose,
    /// Found unusable at lookup.
    Stale,
    /// The prefill worker restarted (§7 "P 重启": the store is cleared).
    Restart,
}

impl EvictReason {
    /// Stable name for logs and reports.
    pub fn name(self) -> &'static str {
        match self {
            EvictReason::Lru => "lru",
            EvictReason::SessionClose => "session_close",
            EvictReason::Stale => "stale",
            EvictReason::Restart => "restart",
        }
    }
}

/// The answer to a bypass check (§4.4 `prefill_bypass_check`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Lookup {
    /// The snapshot qualifies; it is now pinned at `version`.
    Hit {
        /// Tokens it holds.
        kv_committed_len: u64,
        /// Time since it was ingested.
        age: Duration,
        /// The pinned version.
        version: u64,
    },
    /// Fall back to re-prefill.
    Miss(MissReason),
}

/// A reservation the store could not grant yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReserveError {
    /// Not now: every evictable entry would not make enough room.
    Unavailable,
    /// Never: the snapshot exceeds the store's whole budget.
    TooLarge,
}

/// What a granted reservation did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reserved {
    /// Another push for the same session is already being written.
    pub double_push: bool,
    /// Entries evicted to make room: session and tokens.
    pub evicted: Vec<(SessionId, u64)>,
}

/// A completed push.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ingested {
    /// The session.
    pub session: SessionId,
    /// Tokens now stored.
    pub kv_committed_len: u64,
    /// Length of the entry it replaced, if any.
    pub replaced: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pending {
    session: SessionId,
    tokens: u64,
    source: WorkerId,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Waiting {
    id: HandoffId,
    session: SessionId,
    tokens: u64,
    source: WorkerId,
}

/// See the module docs.
#[derive(Clone, Debug)]
pub struct PrefillSnapshotStore {
    max_sessions: usize,
    capacity_tokens: u64,
    entries: BTreeMap<SessionId, SnapshotEntry>,
    pending: BTreeMap<HandoffId, Pending>,
    retired: BTreeMap<(SessionId, u64), (u64, u32)>,
    waiting: VecDeque<Waiting>,
    tick: u64,
    version: u64,
}

impl PrefillSnapshotStore {
    /// An empty store holding at most `max_sessions` sessions and
    /// `capacity_tokens` tokens (entries plus reservations).
    pub fn new(max_sessions: usize, capacity_tokens: u64) -> Self {
        PrefillSnapshotStore {
            max_sessions: max_sessions.max(1),
            capacity_tokens,
            entries: BTreeMap::new(),
            pending: BTreeMap::new(),
            retired: BTreeMap::new(),
            waiting: VecDeque::new(),
            tick: 0,
            version: 0,
        }
    }

    /// Tokens held by entries, retired pinned entries and reservations.
    pub fn used_tokens(&self) -> u64 {
        self.entries
            .values()
            .map(|e| e.kv_committed_len)
            .chain(self.pending.values().map(|p| p.tokens))
            .chain(self.retired.values().map(|r| r.0))
            .sum()
    }

    /// Valid entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no valid entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Reservations being written.
    pub fn pending_reservations(&self) -> usize {
        self.pending.len()
    }

    /// Reservations waiting for room.
    pub fn waiting_reservations(&self) -> usize {
        self.waiting.len()
    }

    /// Pins held by in-flight bypass reads, current and retired entries.
    pub fn pins(&self) -> u32 {
        self.entries.values().map(|e| e.pins).sum::<u32>()
            + self.retired.values().map(|r| r.1).sum::<u32>()
    }

    /// The session's entry (the §4.6 status probe).
    pub fn entry(&self, session: SessionId) -> Option<SnapshotEntry> {
        self.entries.get(&session).copied()
    }

    fn sessions_with(&self, extra: SessionId, dropped: &[SessionId]) -> usize {
        let mut n = self.entries.keys().filter(|s| !dropped.contains(s)).count();
        let mut seen: Vec<SessionId> = Vec::new();
        for p in self.pending.values() {
            let counted = self.entries.contains_key(&p.session) && !dropped.contains(&p.session);
            if !counted && !seen.contains(&p.session) {
                seen.push(p.session);
                n += 1;
            }
        }
        let extra_counted = (self.entries.contains_key(&extra) && !dropped.contains(&extra))
            || self.pending.values().any(|p| p.session == extra);
        if !extra_counted {
            n += 1;
        }
        n
    }

    fn lru_candidates(&self) -> Vec<(u64, SessionId)> {
        let mut c: Vec<(u64, SessionId)> = self
            .entries
            .iter()
            .filter(|(_, e)| e.pins == 0)
            .map(|(s, e)| (e.lru, *s))
            .collect();
        c.sort_unstable();
        c
    }

    /// Reserves room for a push of `tokens` for `session`, evicting
    /// least-recently-used unpinned entries if that makes enough room.
    /// Nothing is evicted when even evicting everything would not.
    pub fn try_reserve(
        &mut self,
        id: HandoffId,
        session: SessionId,
        tokens: u64,
        source: WorkerId,
    ) -> Result<Reserved, ReserveError> {
        if tokens > self.capacity_tokens {
            return Err(ReserveError::TooLarge);
        }
        let used = self.used_tokens();
        let candidates = self.lru_candidates();
        // Plan the evictions before doing any of them.
        let mut dropped: Vec<SessionId> = Vec::new();
        let mut freed = 0u64;
        let fits = |dropped: &[SessionId], freed: u64| {
            used.saturating_sub(freed) + tokens <= self.capacity_tokens
                && self.sessions_with(session, dropped) <= self.max_sessions
        };
        let mut i = 0;
        while !fits(&dropped, freed) {
            let Some(&(_, s)) = candidates.get(i) else {
                return Err(ReserveError::Unavailable);
            };
            i += 1;
            freed += self.entries.get(&s).map_or(0, |e| e.kv_committed_len);
            dropped.push(s);
        }
        let double_push = self.pending.values().any(|p| p.session == session);
        let mut evicted = Vec::with_capacity(dropped.len());
        for s in dropped {
            if let Some(e) = self.entries.remove(&s) {
                evicted.push((s, e.kv_committed_len));
            }
        }
        self.pending.insert(
            id,
            Pending {
                session,
                tokens,
                source,
            },
        );
        Ok(Reserved {
            double_push,
            evicted,
        })
    }

    /// Queues a reservation that could not be granted yet (FIFO, head of
    /// line blocking, as SGLang's prealloc queue).
    pub fn wait(&mut self, id: HandoffId, session: SessionId, tokens: u64, source: WorkerId) {
        if !self.waiting.iter().any(|w| w.id == id) {
            self.waiting.push_back(Waiting {
                id,
                session,
                tokens,
                source,
            });
        }
    }

    /// Takes `id` out of the waiting queue; whether it was there.
    pub fn unwait(&mut self, id: HandoffId) -> bool {
        let before = self.waiting.len();
        self.waiting.retain(|w| w.id != id);
        before != self.waiting.len()
    }

    /// Grants the head of the waiting queue if it now fits.
    pub fn pump(&mut self) -> Option<(HandoffId, Reserved)> {
        let w = *self.waiting.front()?;
        match self.try_reserve(w.id, w.session, w.tokens, w.source) {
            Ok(r) => {
                self.waiting.pop_front();
                Some((w.id, r))
            }
            Err(_) => None,
        }
    }

    /// Frees a reservation that will not be written (push failed or
    /// aborted). Whether it existed.
    pub fn cancel(&mut self, id: HandoffId) -> bool {
        self.pending.remove(&id).is_some()
    }

    /// The push completed: the reservation becomes the session's entry,
    /// replacing any older one (last write wins; §4.3 `ingest`).
    pub fn ingest(&mut self, id: HandoffId, now: Instant) -> Option<Ingested> {
        let p = self.pending.remove(&id)?;
        self.tick += 1;
        self.version += 1;
        let replaced = self.entries.insert(
            p.session,
            SnapshotEntry {
                kv_committed_len: p.tokens,
                last_recv: now,
                source: p.source,
                version: self.version,
                pins: 0,
                lru: self.tick,
            },
        );
        if let Some(old) = replaced {
            self.retire(p.session, old);
        }
        Some(Ingested {
            session: p.session,
            kv_committed_len: p.tokens,
            replaced: replaced.map(|e| e.kv_committed_len),
        })
    }

    fn retire(&mut self, session: SessionId, old: SnapshotEntry) {
        if old.pins > 0 {
            self.retired
                .insert((session, old.version), (old.kv_committed_len, old.pins));
        }
    }

    /// The §4.4 bypass check for a reseed of `input_len` tokens. A hit pins
    /// the entry (release it with [`Self::unpin`]); an unusable entry is
    /// evicted as stale and reported through `evicted`.
    pub fn lookup(
        &mut self,
        session: SessionId,
        input_len: u64,
        tail_tolerance: u64,
        max_age: Option<Duration>,
        now: Instant,
        evicted: &mut Option<u64>,
    ) -> Lookup {
        let Some(e) = self.entries.get_mut(&session) else {
            return Lookup::Miss(MissReason::NoEntry);
        };
        let age = now.saturating_since(e.last_recv);
        let too_old = max_age.is_some_and(|m| age > m);
        if too_old || e.kv_committed_len > input_len {
            if e.pins == 0 {
                *evicted = Some(e.kv_committed_len);
                self.entries.remove(&session);
            }
            return Lookup::Miss(MissReason::Stale);
        }
        if e.kv_committed_len + tail_tolerance < input_len {
            return Lookup::Miss(MissReason::SeqlenShort);
        }
        self.tick += 1;
        e.lru = self.tick;
        e.pins += 1;
        Lookup::Hit {
            kv_committed_len: e.kv_committed_len,
            age,
            version: e.version,
        }
    }

    /// Ends a pin taken by [`Self::lookup`]. Whether it was held.
    pub fn unpin(&mut self, session: SessionId, version: u64) -> bool {
        if let Some(e) = self.entries.get_mut(&session) {
            if e.version == version && e.pins > 0 {
                e.pins -= 1;
                return true;
            }
        }
        if let Some(r) = self.retired.get_mut(&(session, version)) {
            r.1 = r.1.saturating_sub(1);
            if r.1 == 0 {
                self.retired.remove(&(session, version));
            }
            return true;
        }
        false
    }

    /// Drops the session's entry (session closed); its length if it had
    /// one. A pinned entry is retired and freed at its last unpin.
    pub fn release(&mut self, session: SessionId) -> Option<u64> {
        let e = self.entries.remove(&session)?;
        self.retire(session, e);
        Some(e.kv_committed_len)
    }

    /// Drops every entry (restart); returns what was dropped. Reservations
    /// and pins are ended by their handoffs being cancelled first.
    pub fn clear(&mut self) -> Vec<(SessionId, u64)> {
        let dropped = self
            .entries
            .iter()
            .map(|(s, e)| (*s, e.kv_committed_len))
            .collect();
        self.entries.clear();
        self.retired.clear();
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: WorkerId = WorkerId(0);
    const D: WorkerId = WorkerId(1);

    fn h(n: u128) -> HandoffId {
        HandoffId(n)
    }

    fn put(s: &mut PrefillSnapshotStore, id: u128, sid: u64, tokens: u64, at: u64) {
        s.try_reserve(h(id), SessionId(sid), tokens, D).unwrap();
        s.ingest(h(id), Instant::from_millis(at)).unwrap();
    }

    #[test]
    fn lru_by_sessions_and_tokens() {
        let mut s = PrefillSnapshotStore::new(2, 100);
        put(&mut s, 1, 1, 30, 0);
        put(&mut s, 2, 2, 30, 1);
        // A third session evicts the least recently used (session 1).
        let r = s.try_reserve(h(3), SessionId(3), 30, D).unwrap();
        assert_eq!(r.evicted, vec![(SessionId(1), 30)]);
        s.ingest(h(3), Instant::from_millis(2)).unwrap();
        // Token pressure: 80 tokens need both remaining entries gone.
        let r = s.try_reserve(h(4), SessionId(4), 80, D).unwrap();
        assert_eq!(r.evicted.len(), 2);
        assert_eq!(s.used_tokens(), 80);
        assert_eq!(
            s.try_reserve(h(5), SessionId(5), 101, D),
            Err(ReserveError::TooLarge)
        );
    }

    #[test]
    fn pinned_entries_survive_and_block() {
        let mut s = PrefillSnapshotStore::new(1, 100);
        put(&mut s, 1, 1, 60, 0);
        let mut ev = None;
        let hit = s.lookup(SessionId(1), 61, 10, None, Instant::from_millis(5), &mut ev);
        let Lookup::Hit { version, age, .. } = hit else {
            panic!("{hit:?}")
        };
        assert_eq!(age, Duration::from_millis(5));
        // The only entry is pinned: a new session cannot get a slot.
        assert_eq!(
            s.try_reserve(h(2), SessionId(2), 10, D),
            Err(ReserveError::Unavailable)
        );
        s.wait(h(2), SessionId(2), 10, D);
        assert!(s.pump().is_none());
        assert!(s.unpin(SessionId(1), version));
        assert!(!s.unpin(SessionId(1), version));
        let (id, r) = s.pump().unwrap();
        assert_eq!(id, h(2));
        assert_eq!(r.evicted, vec![(SessionId(1), 60)]);
        assert_eq!(s.waiting_reservations(), 0);
    }

    #[test]
    fn lookup_reasons() {
        let mut s = PrefillSnapshotStore::new(4, 1000);
        let mut ev = None;
        let now = Instant::from_millis(10_000);
        assert_eq!(
            s.lookup(SessionId(1), 100, 10, None, now, &mut ev),
            Lookup::Miss(MissReason::NoEntry)
        );
        put(&mut s, 1, 1, 100, 0);
        assert_eq!(
            s.lookup(SessionId(1), 200, 10, None, now, &mut ev),
            Lookup::Miss(MissReason::SeqlenShort)
        );
        assert_eq!(ev, None);
        assert_eq!(
            s.lookup(
                SessionId(1),
                105,
                10,
                Some(Duration::from_secs(1)),
                now,
                &mut ev
            ),
            Lookup::Miss(MissReason::Stale)
        );
        assert_eq!(ev, Some(100));
        assert!(s.is_empty());
        put(&mut s, 2, 2, 100, 0);
        let mut ev = None;
        assert_eq!(
            s.lookup(SessionId(2), 50, 10, None, now, &mut ev),
            Lookup::Miss(MissReason::Stale),
            "a snapshot longer than the input is not its prefix"
        );
    }

    #[test]
    fn double_push_last_write_wins_and_pinned_replacement_retires() {
        let mut s = PrefillSnapshotStore::new(4, 1000);
        put(&mut s, 1, 1, 100, 0);
        let mut ev = None;
        let Lookup::Hit { version, .. } =
            s.lookup(SessionId(1), 100, 0, None, Instant::ZERO, &mut ev)
        else {
            panic!()
        };
        assert!(
            !s.try_reserve(h(2), SessionId(1), 300, D)
                .unwrap()
                .double_push
        );
        assert!(
            s.try_reserve(h(3), SessionId(1), 200, P)
                .unwrap()
                .double_push
        );
        // h(3) lands first, h(2) last: h(2) wins even though it is longer.
        let a = s.ingest(h(3), Instant::from_millis(1)).unwrap();
        assert_eq!(a.replaced, Some(100));
        let b = s.ingest(h(2), Instant::from_millis(2)).unwrap();
        assert_eq!(b.replaced, Some(200));
        assert_eq!(s.entry(SessionId(1)).unwrap().kv_committed_len, 300);
        // The pinned original is retired, still counted until unpinned.
        assert_eq!(s.used_tokens(), 400);
        assert!(s.unpin(SessionId(1), version));
        assert_eq!(s.used_tokens(), 300);
        assert_eq!(s.pins(), 0);
        assert_eq!(s.release(SessionId(1)), Some(300));
        assert_eq!(s.used_tokens(), 0);
        assert!(!s.cancel(h(9)));
    }
}
