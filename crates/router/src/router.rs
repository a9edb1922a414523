//! The router: worker selection plus selection-time booking.

use crate::config::{PoolRole, RouterConfig, RouterMode};
use crate::holders::{bit, Slots, MAX_SLOTS};
use crate::load::{Booking, Release, RouterStats, Selection, WorkerLoad};
use crate::policy::{overlap_of, request_blocks, Policy, RouterView, RoutingChoice};
use crate::published::Published;
use handoff_core::fasthash::ChurnMap;
use handoff_core::{Instant, KvCapacitySnapshot, KvEvent, Request, RequestId, Rng, WorkerId};
use std::collections::BTreeSet;

#[derive(Clone, Debug)]
pub(crate) struct WorkerState {
    pub(crate) id: WorkerId,
    pub(crate) available: bool,
    pub(crate) booked_blocks: u64,
    pub(crate) booked_prefill_tokens: u64,
    booked_requests: u64,
    selected: u64,
    pub(crate) capacity: Option<KvCapacitySnapshot>,
    last_event_id: Option<u64>,
    /// This worker's entry in [`Scoring::by_load`], when it has one.
    load_key: Option<u128>,
}

impl WorkerState {
    fn new(id: WorkerId) -> Self {
        WorkerState {
            id,
            available: true,
            booked_blocks: 0,
            booked_prefill_tokens: 0,
            booked_requests: 0,
            selected: 0,
            capacity: None,
            last_event_id: None,
            load_key: None,
        }
    }

    /// Booked blocks plus physically used blocks: what `LeastLoaded` and
    /// `PowerOfTwo` compare.
    pub(crate) fn load(&self) -> u64 {
        self.booked_blocks
            .saturating_add(self.capacity.map_or(0, |c| c.kv_used_blocks()))
    }

    /// Its [`WorkerLoad`], given how many blocks it has published.
    pub(crate) fn load_view(&self, published_blocks: u64) -> WorkerLoad {
        WorkerLoad {
            booked_blocks: self.booked_blocks,
            booked_prefill_tokens: self.booked_prefill_tokens,
            booked_requests: self.booked_requests,
            published_blocks,
            capacity: self.capacity,
            selected: self.selected,
            available: self.available,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    booking: Booking,
    /// Prefill compute load still counted (prefill pool, until
    /// `prefill_completed`).
    prefill_open: bool,
}

/// What kv-aware selection keeps up to date as bookings arrive, so that
/// choosing costs O(blocks matched + log workers) rather than O(workers ×
/// blocks): the available workers ordered by their cost when they hold none
/// of the request's prefix. Which workers hold each published block is the
/// pooled layout of [`Published`], which a pool with `Scoring` always uses.
///
/// That zero-overlap cost orders workers exactly as the integer
/// [`Router::load_key`] does (see there), which is why this path is taken
/// only for a power-of-two block size; other pools, pools of more than
/// [`MAX_SLOTS`] workers and pools of fewer than [`INDEX_MIN_WORKERS`]
/// (where upkeep costs more than it saves) score every worker as before. Both paths choose
/// the same worker (`indexed_selection_equals_the_scan` checks it).
#[derive(Clone, Debug, Default)]
pub(crate) struct Scoring {
    /// `(load_key, slot)` of every available worker.
    pub(crate) by_load: BTreeSet<(u128, usize)>,
    /// The slots of `by_load`.
    pub(crate) alive: Slots,
}

/// Selects workers of one pool and books load on them; see the crate docs.
#[derive(Debug)]
pub struct Router {
    config: RouterConfig,
    /// The selection rule `config.mode` names.
    policy: Policy,
    /// Sorted by id; never shrinks, so a booking's worker is always found.
    workers: Vec<WorkerState>,
    /// Lookups only: no decision depends on its iteration order. One
    /// insert and one removal per request, hence a [`ChurnMap`].
    bookings: ChurnMap<RequestId, Entry>,
    rng: Rng,
    /// Reused for each request's block hashes.
    hashes: Vec<u64>,
    stats: RouterStats,
    /// What each worker has published, by slot.
    published: Published,
    /// The kv-aware index, when this pool uses it.
    scoring: Option<Scoring>,
    /// Reused by the indexed pick: (slot, overlap) of workers that match.
    matched: Vec<(usize, u32)>,
    /// Tests force the indexed pick (`Some(true)`) or the scan
    /// (`Some(false)`) whatever the pool's size, to compare them.
    #[cfg(test)]
    force_index: Option<bool>,
}

/// Smallest pool that uses [`Scoring`]. Keeping the pool-wide index costs
/// a probe per published and evicted block; scoring worker by worker costs
/// a prefix lookup per worker per selection. Measured on the conversation
/// trace at 4 workers per pool the index made replay ~25% slower (17 M
/// block events against a few lookups per request); at 64 workers per pool
/// (`--requests 50000 --rate 512 --prefill 64 --decode 64`) it cut the
/// router from 21% of replay time to 9% (selection plus index upkeep).
/// 16 lies between the two measured points.
pub const INDEX_MIN_WORKERS: usize = 16;

impl Router {
    /// A router over `workers` (duplicates ignored).
    pub fn new(config: RouterConfig, workers: impl IntoIterator<Item = WorkerId>) -> Self {
        let mut r = Router {
            rng: Rng::seeded(config.seed),
            policy: Policy::new(config.mode, config.role),
            config,
            workers: Vec::new(),
            bookings: ChurnMap::default(),
            hashes: Vec::new(),
            stats: RouterStats::default(),
            published: Published::default(),
            scoring: None,
            matched: Vec::new(),
            #[cfg(test)]
            force_index: None,
        };
        for w in workers {
            r.add_worker(w);
        }
        r
    }

    /// Whether kv-aware selection can use [`Scoring`] for this pool.
    fn can_index(&self) -> bool {
        #[allow(unused_mut)]
        let mut big_enough = self.workers.len() >= INDEX_MIN_WORKERS;
        #[cfg(test)]
        if let Some(f) = self.force_index {
            big_enough = f;
        }
        big_enough
            && self.config.mode == RouterMode::KvAware
            && self.config.block_size.is_power_of_two()
            && self.workers.len() <= MAX_SLOTS
    }

    /// Rebuilds [`Scoring`] from the workers' own state, with the pooled
    /// layout of [`Published`] (or drops it, going back to one index per
    /// worker, when this pool cannot use it): at construction and when a
    /// new worker shifts the slots, both rare.
    fn rebuild_scoring(&mut self) {
        let index = self.can_index();
        self.published.set_pooled(index);
        if !index {
            self.scoring = None;
            return;
        }
        for w in &mut self.workers {
            w.load_key = None;
        }
        self.scoring = Some(Scoring::default());
        for i in 0..self.workers.len() {
            self.resync(i);
        }
    }

    /// The integer that orders workers by their kv-aware cost when they hold
    /// none of the request's blocks. That cost is, for the prefill pool,
    /// `(booked_prefill_tokens + prompt) / block_size + booked_blocks +
    /// request_blocks`, and for the decode pool `booked_blocks +
    /// request_blocks` (see [`Router::select`]): with the request's terms
    /// common to every worker, `booked_prefill_tokens + booked_blocks ×
    /// block_size` (prefill) and `booked_blocks` (decode) order them the
    /// same way. For a power-of-two block size the floating-point cost is
    /// exact (division by a power of two, integers far below 2^53), so equal
    /// keys mean equal costs and ties fall to the lower slot in both.
    fn load_key(&self, w: &WorkerState) -> u128 {
        match self.config.role {
            PoolRole::Prefill => {
                u128::from(w.booked_prefill_tokens)
                    + u128::from(w.booked_blocks) * u128::from(self.config.block_size)
            }
            PoolRole::Decode => u128::from(w.booked_blocks),
        }
    }

    /// Puts worker `i`'s entry in [`Scoring::by_load`] in step with its
    /// bookings and availability.
    fn resync(&mut self, i: usize) {
        let key = self.workers[i]
            .available
            .then(|| self.load_key(&self.workers[i]));
        let w = &mut self.workers[i];
        if w.load_key == key {
            return;
        }
        let Some(sc) = self.scoring.as_mut() else {
            return;
        };
        if let Some(old) = w.load_key.take() {
            sc.by_load.remove(&(old, i));
            sc.alive &= !bit(i);
        }
        if let Some(k) = key {
            sc.by_load.insert((k, i));
            sc.alive |= bit(i);
        }
        w.load_key = key;
    }

    /// The configuration.
    pub fn config(&self) -> &RouterConfig {
        &self.config
    }

    /// Counters so far.
    pub fn stats(&self) -> RouterStats {
        self.stats
    }

    fn index(&self, worker: WorkerId) -> Option<usize> {
        self.workers.binary_search_by_key(&worker, |w| w.id).ok()
    }

    /// Makes `worker` selectable (again). Returns whether anything changed.
    pub fn add_worker(&mut self, worker: WorkerId) -> bool {
        match self.workers.binary_search_by_key(&worker, |w| w.id) {
            Ok(i) => {
                let was = self.workers[i].available;
                self.workers[i].available = true;
                self.resync(i);
                !was
            }
            Err(i) => {
                self.workers.insert(i, WorkerState::new(worker));
                self.published.insert_slot(i);
                // Slots after `i` moved: rebuild (rare: a new worker).
                self.rebuild_scoring();
                true
            }
        }
    }

    /// Stops selecting `worker` and forgets its published cache and capacity
    /// report (it left or is restarting). Its live bookings stay releasable.
    /// Returns whether it was selectable.
    pub fn remove_worker(&mut self, worker: WorkerId) -> bool {
        match self.index(worker) {
            Some(i) => {
                self.published.clear(i);
                let w = &mut self.workers[i];
                let was = w.available;
                w.available = false;
                w.capacity = None;
                w.last_event_id = None;
                self.resync(i);
                was
            }
            None => false,
        }
    }

    /// Selectable workers, in id order.
    pub fn workers(&self) -> impl Iterator<Item = WorkerId> + '_ {
        self.workers.iter().filter(|w| w.available).map(|w| w.id)
    }

    fn available_count(&self) -> u64 {
        self.workers.iter().filter(|w| w.available).count() as u64
    }

    /// Starts hashing a request into the scratch buffer: blocks are hashed
    /// lazily by [`overlap_of`], a window at a time, so a prompt is hashed
    /// only as far as some worker's cached prefix reaches.
    fn start_hashing(&mut self) {
        self.hashes.clear();
    }

    /// The policy's answer for `request` among `n` selectable workers, and
    /// `(slot, overlap)` of the chosen worker when the pick already knows
    /// it (the indexed kv-aware pick does, so booking need not look again).
    /// Leaves the request's hashes, as far as the policy needed them, in
    /// the scratch buffer.
    fn pick(
        &mut self,
        request: &Request,
        n: u64,
        now: Instant,
    ) -> (Option<RoutingChoice>, Option<(usize, u32)>) {
        self.start_hashing();
        let mut view = RouterView {
            config: &self.config,
            workers: &self.workers,
            published: &self.published,
            hashes: &mut self.hashes,
            rng: &mut self.rng,
            request,
            available: n,
            scoring: self.scoring.as_ref(),
            matched: &mut self.matched,
            known_overlap: None,
        };
        let choice = self.policy.select(request, &mut view, now);
        (choice, view.known_overlap)
    }

    /// Chooses a worker for `request` by the configured mode's
    /// [`crate::RoutingPolicy`] and books the request on it (see
    /// [`PoolRole`] for what a booking holds). A request that is already
    /// booked is moved: its old booking is released first (counted as a
    /// rebooking). `None` when no worker is selectable (any earlier booking
    /// is then left in place) or when the policy refuses the request or
    /// names a worker that is not selectable (the earlier booking is then
    /// gone; both counted in [`RouterStats::no_worker`]).
    ///
    /// `KvAware` cost, per pool (lower wins, ties to the lower id):
    ///
    /// - prefill, after Dynamo's prefill formula:
    ///   `max(0, (booked_prefill_tokens + prompt_tokens) / block_size
    ///   - weight * overlap) + booked_blocks + request_blocks`;
    /// - decode, after Dynamo's decode formula with a positive overlap
    ///   credit: `max(0, booked_blocks + request_blocks - weight * overlap)`.
    ///
    /// Hashes the prompt at most once; allocates only when the booking table
    /// or the hash scratch buffer grows.
    pub fn select(&mut self, request: &Request, now: Instant) -> Option<Selection> {
        let n = self.available_count();
        if n == 0 {
            self.stats.no_worker += 1;
            return None;
        }
        self.drop_existing(request.id);
        let (choice, known) = self.pick(request, n, now);
        let Some(choice) = choice else {
            self.stats.no_worker += 1;
            return None;
        };
        let i = match self.index(choice.worker) {
            Some(i) if self.workers[i].available => i,
            _ => {
                self.stats.rejected_choices += 1;
                self.stats.no_worker += 1;
                return None;
            }
        };
        let overlap = known.and_then(|(k, o)| (k == i).then_some(o));
        let mut s = self.book_at(i, request, true, overlap, now);
        s.dp_rank = choice.dp_rank;
        Some(s)
    }

    /// Books `request` on `worker` without choosing (e.g. a session pinned
    /// to the worker that holds its KV). `None` when `worker` is not
    /// selectable. Rebooking works as in [`Router::select`].
    pub fn book(&mut self, worker: WorkerId, request: &Request, now: Instant) -> Option<Selection> {
        let i = match self.index(worker) {
            Some(i) if self.workers[i].available => i,
            _ => {
                self.stats.no_worker += 1;
                return None;
            }
        };
        self.drop_existing(request.id);
        Some(self.book_at(i, request, false, None, now))
    }

    fn drop_existing(&mut self, id: RequestId) {
        if self.bookings.contains_key(&id) {
            self.stats.rebookings += 1;
            self.release_entry(id);
        }
    }

    /// `hashed`: the scratch buffer already holds a prefix of this
    /// request's hashes (the kv-aware pick leaves it there), reused as far as
    /// it goes; otherwise hashing starts afresh. `overlap`: worker `i`'s, when
    /// the pick already knows it.
    fn book_at(
        &mut self,
        i: usize,
        request: &Request,
        hashed: bool,
        overlap: Option<u32>,
        now: Instant,
    ) -> Selection {
        if !hashed {
            self.start_hashing();
        }
        let overlap = match overlap {
            Some(o) => o,
            None => overlap_of(
                &self.published,
                &mut self.hashes,
                self.config.block_size,
                i,
                request,
            ),
        };
        let blocks = request_blocks(&self.config, request);
        let prefill_tokens = match self.config.role {
            PoolRole::Prefill => u64::from(request.prompt_tokens)
                .saturating_sub(u64::from(overlap) * u64::from(self.config.block_size)),
            PoolRole::Decode => 0,
        };
        let w = &mut self.workers[i];
        w.booked_blocks = w.booked_blocks.saturating_add(blocks);
        w.booked_prefill_tokens = w.booked_prefill_tokens.saturating_add(prefill_tokens);
        w.booked_requests += 1;
        w.selected += 1;
        self.resync(i);
        let w = &self.workers[i];
        let booking = Booking {
            worker: w.id,
            blocks,
            prefill_tokens,
            booked_at: now,
        };
        self.bookings.insert(
            request.id,
            Entry {
                booking,
                prefill_open: self.config.role == PoolRole::Prefill,
            },
        );
        self.stats.selections += 1;
        Selection {
            worker: booking.worker,
            overlap_blocks: overlap,
            blocks,
            prefill_tokens,
            dp_rank: None,
        }
    }

    /// Prefill of `request` finished: its prefill compute load comes off
    /// (Dynamo `mark_prefill_completed`). Its blocks stay booked until
    /// [`Router::request_released`]: a completed prefill still owns its KV
    /// until the source is released. A repeat, an unknown request or a
    /// decode-pool booking is a counted no-op.
    pub fn prefill_completed(&mut self, request: RequestId) -> Release {
        let Some(entry) = self.bookings.get_mut(&request) else {
            self.stats.noop_prefill_completions += 1;
            return Release::Noop;
        };
        if !entry.prefill_open {
            self.stats.noop_prefill_completions += 1;
            return Release::Noop;
        }
        entry.prefill_open = false;
        let tokens = entry.booking.prefill_tokens;
        entry.booking.prefill_tokens = 0;
        let worker = entry.booking.worker;
        if let Some(i) = self.index(worker) {
            let w = &mut self.workers[i];
            w.booked_prefill_tokens = w.booked_prefill_tokens.saturating_sub(tokens);
            self.resync(i);
        }
        Release::Released {
            worker,
            blocks: 0,
            prefill_tokens: tokens,
        }
    }

    /// The request no longer belongs to its worker: prefill pool at source
    /// release, decode pool at completion or terminal failure (Dynamo
    /// `free`). Everything still booked for it comes off. A repeat or an
    /// unknown request is a counted no-op.
    pub fn request_released(&mut self, request: RequestId) -> Release {
        match self.release_entry(request) {
            Some(r) => r,
            None => {
                self.stats.noop_releases += 1;
                Release::Noop
            }
        }
    }

    fn release_entry(&mut self, request: RequestId) -> Option<Release> {
        let entry = self.bookings.remove(&request)?;
        let b = entry.booking;
        if let Some(i) = self.index(b.worker) {
            let w = &mut self.workers[i];
            w.booked_blocks = w.booked_blocks.saturating_sub(b.blocks);
            w.booked_prefill_tokens = w.booked_prefill_tokens.saturating_sub(b.prefill_tokens);
            w.booked_requests = w.booked_requests.saturating_sub(1);
            self.resync(i);
        }
        Some(Release::Released {
            worker: b.worker,
            blocks: b.blocks,
            prefill_tokens: b.prefill_tokens,
        })
    }

    /// Applies a KV event `worker` published. Events of a worker this
    /// router does not serve are ignored and counted; an event id that does
    /// not increase is applied anyway (applying is idempotent) and counted.
    pub fn on_kv_event(&mut self, worker: WorkerId, event: &KvEvent) {
        let Some(i) = self.index(worker).filter(|&i| self.workers[i].available) else {
            self.stats.unknown_worker_events += 1;
            return;
        };
        let w = &mut self.workers[i];
        if w.last_event_id.is_some_and(|last| event.event_id <= last) {
            self.stats.out_of_order_events += 1;
        }
        w.last_event_id = Some(event.event_id);
        let applied = self.published.apply(i, event);
        self.stats.kv_events += 1;
        self.stats.orphan_stores += u64::from(applied.orphan_store);
        self.stats.unknown_removals += applied.unknown_removals;
    }

    /// Records `worker`'s latest capacity report (used by `LeastLoaded` and
    /// `PowerOfTwo`). Reports of unknown workers are ignored and counted.
    pub fn on_capacity(&mut self, worker: WorkerId, snapshot: KvCapacitySnapshot) {
        match self.index(worker).filter(|&i| self.workers[i].available) {
            Some(i) => self.workers[i].capacity = Some(snapshot),
            None => self.stats.unknown_worker_capacities += 1,
        }
    }

    /// Leading blocks of `request` that `worker` has published (0 for an
    /// unknown worker).
    pub fn overlap_blocks(&mut self, worker: WorkerId, request: &Request) -> u32 {
        match self.index(worker) {
            Some(i) => {
                self.start_hashing();
                overlap_of(
                    &self.published,
                    &mut self.hashes,
                    self.config.block_size,
                    i,
                    request,
                )
            }
            None => 0,
        }
    }

    /// `worker`'s load, or `None` if the router never served it.
    pub fn load(&self, worker: WorkerId) -> Option<WorkerLoad> {
        self.index(worker).map(|i| self.worker_load(i))
    }

    fn worker_load(&self, i: usize) -> WorkerLoad {
        self.workers[i].load_view(self.published.len(i) as u64)
    }

    /// Every worker ever served, with its load, in id order.
    pub fn loads(&self) -> impl Iterator<Item = (WorkerId, WorkerLoad)> + '_ {
        (0..self.workers.len()).map(|i| (self.workers[i].id, self.worker_load(i)))
    }

    /// `request`'s live booking.
    pub fn booking(&self, request: RequestId) -> Option<Booking> {
        self.bookings.get(&request).map(|e| e.booking)
    }

    /// Live bookings.
    pub fn live_bookings(&self) -> usize {
        self.bookings.len()
    }

    /// No live booking and no load left on any worker: what a drained run
    /// must end with.
    pub fn is_drained(&self) -> bool {
        self.bookings.is_empty()
            && self.workers.iter().all(|w| {
                w.booked_blocks == 0 && w.booked_prefill_tokens == 0 && w.booked_requests == 0
            })
    }

    /// Checks that every worker's totals equal the sum of its live
    /// bookings; a description of the first mismatch otherwise. For tests
    /// and drain checks; O(bookings).
    pub fn audit(&self) -> Result<(), String> {
        let mut sums = vec![(0u64, 0u64, 0u64); self.workers.len()];
        for (id, e) in self.bookings.iter() {
            let Some(i) = self.index(e.booking.worker) else {
                return Err(format!("{id} booked on unknown {}", e.booking.worker));
            };
            sums[i].0 += e.booking.blocks;
            sums[i].1 += e.booking.prefill_tokens;
            sums[i].2 += 1;
        }
        for (w, s) in self.workers.iter().zip(sums) {
            let have = (w.booked_blocks, w.booked_prefill_tokens, w.booked_requests);
            if have != s {
                return Err(format!(
                    "{}: totals (blocks, prefill tokens, requests) {have:?} but bookings sum to {s:?}",
                    w.id
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_core::KvEventData;

    const BS: u32 = 16;

    fn req(id: u64, prompt: u32, output: u32, prefix: &[u64]) -> Request {
        Request {
            id: RequestId(id),
            prompt_tokens: prompt,
            max_output_tokens: output,
            prefix_hashes: prefix.to_vec(),
            hash_block_tokens: 512,
            session: None,
            arrival: Instant::ZERO,
        }
    }

    fn router(role: PoolRole, mode: RouterMode, n: u32) -> Router {
        Router::new(RouterConfig::new(role, mode, BS), (0..n).map(WorkerId))
    }

    /// Publishes `request`'s first `blocks` block hashes on `worker`.
    fn publish(r: &mut Router, worker: u32, request: &Request, blocks: usize, event_id: u64) {
        let mut h = Vec::new();
        request.block_hashes(BS, &mut h);
        h.truncate(blocks);
        r.on_kv_event(
            WorkerId(worker),
            &KvEvent {
                event_id,
                data: KvEventData::Stored {
                    parent_hash: None,
                    block_hashes: h,
                },
            },
        );
    }

    #[test]
    fn decode_books_prompt_and_output_blocks_until_release() {
        let mut r = router(PoolRole::Decode, RouterMode::RoundRobin, 2);
        let s = r.select(&req(1, 100, 60, &[]), Instant(5)).unwrap();
        assert_eq!(s.worker, WorkerId(0));
        assert_eq!((s.blocks, s.prefill_tokens), (10, 0), "ceil(160 / 16)");
        let l = r.load(WorkerId(0)).unwrap();
        assert_eq!((l.booked_blocks, l.booked_requests), (10, 1));
        assert_eq!(r.booking(RequestId(1)).unwrap().booked_at, Instant(5));
        // A decode booking has no prefill phase to complete.
        assert_eq!(r.prefill_completed(RequestId(1)), Release::Noop);
        assert_eq!(
            r.request_released(RequestId(1)),
            Release::Released {
                worker: WorkerId(0),
                blocks: 10,
                prefill_tokens: 0
            }
        );
        assert!(r.is_drained());
    }

    #[test]
    fn prefill_keeps_blocks_after_prefill_completes() {
        let mut r = router(PoolRole::Prefill, RouterMode::KvAware, 1);
        let s = r.select(&req(1, 100, 60, &[]), Instant::ZERO).unwrap();
        assert_eq!((s.blocks, s.prefill_tokens), (7, 100));
        assert_eq!(
            r.prefill_completed(RequestId(1)),
            Release::Released {
                worker: WorkerId(0),
                blocks: 0,
                prefill_tokens: 100
            }
        );
        let l = r.load(WorkerId(0)).unwrap();
        assert_eq!((l.booked_blocks, l.booked_prefill_tokens), (7, 0));
        assert_eq!(r.prefill_completed(RequestId(1)), Release::Noop);
        assert!(!r.is_drained(), "the source still owns its blocks");
        assert!(matches!(
            r.request_released(RequestId(1)),
            Release::Released {
                blocks: 7,
                prefill_tokens: 0,
                ..
            }
        ));
        assert!(r.is_drained());
        assert_eq!(r.stats().noop_prefill_completions, 1);
    }

    #[test]
    fn release_before_prefill_completion_frees_everything() {
        let mut r = router(PoolRole::Prefill, RouterMode::LeastLoaded, 1);
        r.select(&req(1, 64, 1, &[]), Instant::ZERO).unwrap();
        assert!(matches!(
            r.request_released(RequestId(1)),
            Release::Released {
                blocks: 4,
                prefill_tokens: 64,
                ..
            }
        ));
        assert!(r.is_drained());
        assert_eq!(r.prefill_completed(RequestId(1)), Release::Noop);
    }

    #[test]
    fn double_and_unknown_releases_are_counted_noops() {
        let mut r = router(PoolRole::Decode, RouterMode::LeastLoaded, 2);
        r.select(&req(1, 32, 32, &[]), Instant::ZERO).unwrap();
        assert!(matches!(
            r.request_released(RequestId(1)),
            Release::Released { .. }
        ));
        assert_eq!(r.request_released(RequestId(1)), Release::Noop);
        assert_eq!(r.request_released(RequestId(99)), Release::Noop);
        assert_eq!(r.stats().noop_releases, 2);
        for (_, l) in r.loads() {
            assert_eq!((l.booked_blocks, l.booked_requests), (0, 0));
        }
    }

    #[test]
    fn rebooking_moves_the_load() {
        let mut r = router(PoolRole::Decode, RouterMode::RoundRobin, 2);
        let a = req(1, 32, 32, &[]);
        assert_eq!(r.select(&a, Instant::ZERO).unwrap().worker, WorkerId(0));
        assert_eq!(r.select(&a, Instant::ZERO).unwrap().worker, WorkerId(1));
        assert_eq!(r.load(WorkerId(0)).unwrap().booked_blocks, 0);
        assert_eq!(r.load(WorkerId(1)).unwrap().booked_blocks, 4);
        assert_eq!(r.stats().rebookings, 1);
        assert_eq!(r.live_bookings(), 1);
        r.audit().unwrap();
    }

    #[test]
    fn round_robin_cycles_in_id_order_over_available_workers() {
        let mut r = Router::new(
            RouterConfig::new(PoolRole::Decode, RouterMode::RoundRobin, BS),
            [WorkerId(7), WorkerId(3), WorkerId(5), WorkerId(3)],
        );
        let picks: Vec<u32> = (0..4)
            .map(|i| {
                r.select(&req(i, 16, 1, &[]), Instant::ZERO)
                    .unwrap()
                    .worker
                    .0
            })
            .collect();
        assert_eq!(picks, vec![3, 5, 7, 3]);
        assert!(r.remove_worker(WorkerId(5)));
        let picks: Vec<u32> = (4..8)
            .map(|i| {
                r.select(&req(i, 16, 1, &[]), Instant::ZERO)
                    .unwrap()
                    .worker
                    .0
            })
            .collect();
        assert_eq!(picks, vec![3, 7, 3, 7]);
        // Bookings on a removed worker still release.
        assert!(matches!(
            r.request_released(RequestId(1)),
            Release::Released {
                worker: WorkerId(5),
                ..
            }
        ));
    }

    #[test]
    fn empty_pool_refuses_and_counts() {
        let mut r = router(PoolRole::Decode, RouterMode::KvAware, 0);
        assert_eq!(r.select(&req(1, 16, 1, &[]), Instant::ZERO), None);
        let mut r = router(PoolRole::Decode, RouterMode::Random, 1);
        r.remove_worker(WorkerId(0));
        assert_eq!(r.select(&req(1, 16, 1, &[]), Instant::ZERO), None);
        assert_eq!(
            r.book(WorkerId(9), &req(1, 16, 1, &[]), Instant::ZERO),
            None
        );
        assert_eq!(r.stats().no_worker, 2);
        assert!(r.add_worker(WorkerId(0)));
        assert!(r.select(&req(1, 16, 1, &[]), Instant::ZERO).is_some());
    }

    #[test]
    fn least_loaded_adds_reported_usage_and_breaks_ties_low() {
        let mut r = router(PoolRole::Decode, RouterMode::LeastLoaded, 3);
        assert_eq!(
            r.select(&req(1, 160, 0, &[]), Instant::ZERO)
                .unwrap()
                .worker,
            WorkerId(0)
        );
        // w0 has 10 booked blocks; w1 reports 20 physically used; w2 is idle.
        r.on_capacity(
            WorkerId(1),
            KvCapacitySnapshot {
                total_blocks: 100,
                active_blocks: 12,
                pinned_source_blocks: 5,
                reserved_destination_blocks: 3,
                ..Default::default()
            },
        );
        assert_eq!(
            r.select(&req(2, 160, 0, &[]), Instant::ZERO)
                .unwrap()
                .worker,
            WorkerId(2)
        );
        // Now w0 = 10, w1 = 20, w2 = 10: tie between w0 and w2 goes to w0.
        assert_eq!(
            r.select(&req(3, 16, 0, &[]), Instant::ZERO).unwrap().worker,
            WorkerId(0)
        );
        r.on_capacity(WorkerId(42), KvCapacitySnapshot::default());
        assert_eq!(r.stats().unknown_worker_capacities, 1);
    }

    #[test]
    fn power_of_two_takes_the_less_loaded_of_its_pair() {
        // With two workers the pair is always both, so P2C is least-loaded.
        let mut r = Router::new(
            RouterConfig::new(PoolRole::Decode, RouterMode::PowerOfTwo, BS).with_seed(9),
            [WorkerId(0), WorkerId(1)],
        );
        for i in 0..20 {
            r.select(&req(i, 16, 0, &[]), Instant::ZERO).unwrap();
        }
        assert_eq!(r.load(WorkerId(0)).unwrap().booked_requests, 10);
        assert_eq!(r.load(WorkerId(1)).unwrap().booked_requests, 10);
        // With many workers one heavily loaded worker is never picked: any
        // pair containing it has a lighter partner.
        let mut r = Router::new(
            RouterConfig::new(PoolRole::Decode, RouterMode::PowerOfTwo, BS).with_seed(3),
            (0..4).map(WorkerId),
        );
        r.on_capacity(
            WorkerId(2),
            KvCapacitySnapshot {
                active_blocks: 1_000_000,
                ..Default::default()
            },
        );
        for i in 0..200 {
            let s = r.select(&req(i, 16, 0, &[]), Instant::ZERO).unwrap();
            assert_ne!(s.worker, WorkerId(2));
            r.request_released(RequestId(i));
        }
    }

    fn picks(mode: RouterMode, seed: u64) -> Vec<WorkerId> {
        let mut r = Router::new(
            RouterConfig::new(PoolRole::Decode, mode, BS).with_seed(seed),
            (0..5).map(WorkerId),
        );
        (0..64)
            .map(|i| {
                let s = r.select(&req(i, 16 * (1 + i as u32 % 7), 8, &[]), Instant::ZERO);
                if i % 3 == 0 {
                    r.request_released(RequestId(i / 2));
                }
                s.unwrap().worker
            })
            .collect()
    }

    #[test]
    fn built_in_policies_behind_a_custom_mode_pick_as_their_modes() {
        use crate::policy::{self, CustomPolicy, RoutingPolicy};
        let wrap = |mode: RouterMode| {
            CustomPolicy::new("wrapped", move |_| -> Box<dyn RoutingPolicy> {
                match mode {
                    RouterMode::KvAware => Box::new(policy::KvAware),
                    RouterMode::RoundRobin => Box::<policy::RoundRobin>::default(),
                    RouterMode::Random => Box::new(policy::Random),
                    RouterMode::LeastLoaded => Box::new(policy::LeastLoaded),
                    RouterMode::PowerOfTwo => Box::new(policy::PowerOfTwo),
                    RouterMode::Custom(c) => c.build(PoolRole::Decode),
                }
            })
        };
        for mode in RouterMode::ALL {
            for seed in [1, 2] {
                assert_eq!(
                    picks(RouterMode::Custom(wrap(mode)), seed),
                    picks(mode, seed),
                    "{mode:?}"
                );
            }
        }
    }

    /// The first worker holding any of the request's prefix, else the
    /// least used; counts its calls.
    #[derive(Debug)]
    struct Sticky(std::sync::Arc<std::sync::atomic::AtomicU64>);

    impl crate::RoutingPolicy for Sticky {
        fn select(
            &mut self,
            _: &Request,
            view: &mut crate::RouterView<'_>,
            _: Instant,
        ) -> Option<crate::RoutingChoice> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let ids: Vec<WorkerId> = view.workers().collect();
            let held = ids.iter().copied().find(|&w| view.overlap_blocks(w) > 0);
            let w = held.or_else(|| ids.iter().copied().min_by_key(|&w| view.used_blocks(w)))?;
            Some(crate::RoutingChoice {
                worker: w,
                dp_rank: Some(7),
            })
        }
    }

    #[test]
    fn custom_policies_see_overlap_and_their_choice_is_booked() {
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let c = calls.clone();
        let sticky = crate::CustomPolicy::new("sticky", move |role| {
            assert_eq!(role, PoolRole::Prefill);
            Box::new(Sticky(c.clone()))
        });
        assert_eq!(RouterMode::Custom(sticky).name(), "sticky");
        assert_eq!(RouterMode::Custom(sticky), RouterMode::Custom(sticky));
        let mut r = router(PoolRole::Prefill, RouterMode::Custom(sticky), 3);
        assert!(r.scoring.is_none());
        let a = req(1, 1024, 8, &[10, 11]);
        publish(&mut r, 2, &a, 64, 0);
        let s = r.select(&a, Instant::ZERO).unwrap();
        assert_eq!(
            (s.worker, s.overlap_blocks, s.prefill_tokens, s.dp_rank),
            (WorkerId(2), 64, 0, Some(7))
        );
        let s = r.select(&req(2, 160, 8, &[99]), Instant::ZERO).unwrap();
        assert_eq!((s.worker, s.blocks), (WorkerId(0), 10));
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 2);
        r.request_released(RequestId(1));
        r.request_released(RequestId(2));
        assert!(r.is_drained());
    }

    #[derive(Debug)]
    struct Stranger;

    impl crate::RoutingPolicy for Stranger {
        fn select(
            &mut self,
            _: &Request,
            _: &mut crate::RouterView<'_>,
            _: Instant,
        ) -> Option<crate::RoutingChoice> {
            Some(crate::RoutingChoice::worker(WorkerId(99)))
        }
    }

    #[test]
    fn a_choice_of_an_unselectable_worker_is_refused_and_counted() {
        let p = crate::CustomPolicy::new("stranger", |_| Box::new(Stranger));
        let mut r = router(PoolRole::Decode, RouterMode::Custom(p), 2);
        assert_eq!(r.select(&req(1, 64, 8, &[]), Instant::ZERO), None);
        let st = r.stats();
        assert_eq!(
            (st.rejected_choices, st.no_worker, st.selections),
            (1, 1, 0)
        );
        assert!(r.is_drained());
    }

    #[test]
    fn seeded_modes_are_deterministic_and_seed_sensitive() {
        for mode in [RouterMode::Random, RouterMode::PowerOfTwo] {
            assert_eq!(picks(mode, 1), picks(mode, 1), "{mode:?}");
            assert_ne!(picks(mode, 1), picks(mode, 2), "{mode:?}");
        }
        let random = picks(RouterMode::Random, 1);
        for w in 0..5 {
            assert!(random.contains(&WorkerId(w)), "random never picked w{w}");
        }
        // Unseeded modes ignore the seed entirely.
        for mode in [
            RouterMode::KvAware,
            RouterMode::RoundRobin,
            RouterMode::LeastLoaded,
        ] {
            assert_eq!(picks(mode, 1), picks(mode, 2), "{mode:?}");
        }
    }

    #[test]
    fn kv_aware_prefers_overlap_and_forgets_removed_blocks() {
        let mut r = router(PoolRole::Prefill, RouterMode::KvAware, 3);
        let a = req(1, 1024, 8, &[10, 11]);
        publish(&mut r, 2, &a, 64, 0);
        assert_eq!(r.overlap_blocks(WorkerId(2), &a), 64);
        let s = r.select(&a, Instant::ZERO).unwrap();
        assert_eq!((s.worker, s.overlap_blocks), (WorkerId(2), 64));
        assert_eq!(s.prefill_tokens, 0, "fully cached prompt");
        r.request_released(RequestId(1));

        // Same first chunk: 32 of 64 blocks shared.
        let b = req(2, 1024, 8, &[10, 99]);
        let s = r.select(&b, Instant::ZERO).unwrap();
        assert_eq!(
            (s.worker, s.overlap_blocks, s.prefill_tokens),
            (WorkerId(2), 32, 512)
        );
        r.request_released(RequestId(2));

        // Evicting the first block breaks the whole prefix.
        let mut h = Vec::new();
        a.block_hashes(BS, &mut h);
        r.on_kv_event(
            WorkerId(2),
            &KvEvent {
                event_id: 1,
                data: KvEventData::Removed {
                    block_hashes: vec![h[0]],
                },
            },
        );
        assert_eq!(r.overlap_blocks(WorkerId(2), &a), 0);
        let s = r
            .select(&req(3, 1024, 8, &[10, 11]), Instant::ZERO)
            .unwrap();
        assert_eq!((s.worker, s.overlap_blocks), (WorkerId(0), 0));
    }

    #[test]
    fn kv_aware_trades_overlap_against_load() {
        // Decode pool: cost = max(0, booked + request blocks - weight * overlap).
        let mut r = router(PoolRole::Decode, RouterMode::KvAware, 2);
        let a = req(1, 512, 0, &[5]); // 32 blocks
        publish(&mut r, 1, &a, 32, 0);
        // Load w1 with 40 blocks: cost w1 = 40 + 32 - 32 = 40 > w0 = 32.
        r.book(WorkerId(1), &req(100, 640, 0, &[]), Instant::ZERO)
            .unwrap();
        assert_eq!(r.select(&a, Instant::ZERO).unwrap().worker, WorkerId(0));
        r.request_released(RequestId(1));
        // A heavier overlap weight flips it: w1 = 40 + 32 - 64 = 8 < 32.
        let mut r2 = Router::new(
            RouterConfig::new(PoolRole::Decode, RouterMode::KvAware, BS).with_overlap_weight(2.0),
            [WorkerId(0), WorkerId(1)],
        );
        publish(&mut r2, 1, &a, 32, 0);
        r2.book(WorkerId(1), &req(100, 640, 0, &[]), Instant::ZERO)
            .unwrap();
        assert_eq!(r2.select(&a, Instant::ZERO).unwrap().worker, WorkerId(1));
        // Weight 0 is pure load balancing.
        let mut r3 = Router::new(
            RouterConfig::new(PoolRole::Decode, RouterMode::KvAware, BS).with_overlap_weight(0.0),
            [WorkerId(0), WorkerId(1)],
        );
        publish(&mut r3, 1, &a, 32, 0);
        assert_eq!(r3.select(&a, Instant::ZERO).unwrap().worker, WorkerId(0));
    }

    #[test]
    fn kv_aware_prefill_counts_booked_prefill_tokens() {
        let mut r = router(PoolRole::Prefill, RouterMode::KvAware, 2);
        // w0 prefills 1600 tokens (owning 100 blocks), w1 1200 (75 blocks).
        r.book(WorkerId(0), &req(100, 1600, 1, &[]), Instant::ZERO)
            .unwrap();
        r.book(WorkerId(1), &req(101, 1200, 1, &[]), Instant::ZERO)
            .unwrap();
        // cost(w0) = (1600 + 16) / 16 + 100 + 1 = 202; cost(w1) = 76 + 76 = 152.
        assert_eq!(
            r.select(&req(1, 16, 1, &[]), Instant::ZERO).unwrap().worker,
            WorkerId(1)
        );
        r.request_released(RequestId(1));
        // Once w0's prefill completes its compute load is gone but its owned
        // blocks stay: cost(w0) = 16 / 16 + 100 + 1 = 102 < 152.
        r.prefill_completed(RequestId(100));
        assert_eq!(
            r.select(&req(2, 16, 1, &[]), Instant::ZERO).unwrap().worker,
            WorkerId(0)
        );
        r.audit().unwrap();
    }

    #[test]
    fn unpublished_bookings_never_attract_traffic() {
        // Booking a prefix on w1 (as a destination reservation would) does
        // not make w1 look cached: only Stored events do.
        let mut r = router(PoolRole::Decode, RouterMode::KvAware, 2);
        let a = req(1, 512, 0, &[5]);
        r.book(WorkerId(1), &a, Instant::ZERO).unwrap();
        assert_eq!(r.overlap_blocks(WorkerId(1), &a), 0);
        let twin = req(2, 512, 0, &[5]);
        let s = r.select(&twin, Instant::ZERO).unwrap();
        assert_eq!((s.worker, s.overlap_blocks), (WorkerId(0), 0));
    }

    #[test]
    fn kv_events_for_strangers_and_orphans_are_counted() {
        let mut r = router(PoolRole::Decode, RouterMode::KvAware, 1);
        let ev = |id, data| KvEvent { event_id: id, data };
        r.on_kv_event(WorkerId(5), &ev(0, KvEventData::Cleared));
        r.on_kv_event(
            WorkerId(0),
            &ev(
                3,
                KvEventData::Stored {
                    parent_hash: Some(1),
                    block_hashes: vec![2],
                },
            ),
        );
        r.on_kv_event(
            WorkerId(0),
            &ev(
                2,
                KvEventData::Removed {
                    block_hashes: vec![7],
                },
            ),
        );
        let s = r.stats();
        assert_eq!(
            (
                s.unknown_worker_events,
                s.orphan_stores,
                s.out_of_order_events,
                s.unknown_removals,
                s.kv_events
            ),
            (1, 1, 1, 1, 2)
        );
        assert_eq!(r.load(WorkerId(0)).unwrap().published_blocks, 0);
    }

    #[test]
    fn remove_worker_forgets_its_cache() {
        let mut r = router(PoolRole::Prefill, RouterMode::KvAware, 2);
        let a = req(1, 512, 1, &[5]);
        publish(&mut r, 1, &a, 32, 0);
        r.remove_worker(WorkerId(1));
        r.add_worker(WorkerId(1));
        assert_eq!(r.overlap_blocks(WorkerId(1), &a), 0);
        assert_eq!(r.select(&a, Instant::ZERO).unwrap().worker, WorkerId(0));
    }

    #[test]
    fn other_modes_still_report_overlap_of_the_chosen_worker() {
        let mut r = router(PoolRole::Prefill, RouterMode::RoundRobin, 1);
        let a = req(1, 512, 1, &[5]);
        publish(&mut r, 0, &a, 16, 0);
        let s = r.select(&a, Instant::ZERO).unwrap();
        assert_eq!((s.overlap_blocks, s.prefill_tokens), (16, 256));
    }

    #[test]
    fn only_large_kv_aware_pools_keep_the_index() {
        let big = router(PoolRole::Prefill, RouterMode::KvAware, 64);
        assert!(big.scoring.is_some());
        assert_eq!(big.scoring.as_ref().unwrap().by_load.len(), 64);
        assert!(router(PoolRole::Decode, RouterMode::KvAware, 4)
            .scoring
            .is_none());
        assert!(router(PoolRole::Decode, RouterMode::RoundRobin, 64)
            .scoring
            .is_none());
        let odd = Router::new(
            RouterConfig::new(PoolRole::Decode, RouterMode::KvAware, 10),
            (0..64).map(WorkerId),
        );
        assert!(
            odd.scoring.is_none(),
            "block size 10: float costs are not exact"
        );
    }

    mod indexed {
        use super::*;
        use proptest::prelude::*;

        #[derive(Clone, Debug)]
        enum Op {
            Select {
                root: u64,
                prompt: u32,
                output: u32,
            },
            Publish {
                worker: u32,
                root: u64,
                blocks: usize,
            },
            Remove {
                worker: u32,
                root: u64,
                from: usize,
            },
            Clear {
                worker: u32,
            },
            PrefillDone {
                nth: usize,
            },
            Release {
                nth: usize,
            },
            Leave {
                worker: u32,
            },
            Join {
                worker: u32,
            },
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                4 => (0u64..4, 1u32..3000, 1u32..200)
                    .prop_map(|(root, prompt, output)| Op::Select { root, prompt, output }),
                3 => (0u32..6, 0u64..4, 0usize..200)
                    .prop_map(|(worker, root, blocks)| Op::Publish { worker, root, blocks }),
                1 => (0u32..6, 0u64..4, 0usize..200)
                    .prop_map(|(worker, root, from)| Op::Remove { worker, root, from }),
                1 => (0u32..6).prop_map(|worker| Op::Clear { worker }),
                2 => (0usize..64).prop_map(|nth| Op::PrefillDone { nth }),
                2 => (0usize..64).prop_map(|nth| Op::Release { nth }),
                1 => (0u32..6).prop_map(|worker| Op::Leave { worker }),
                1 => (0u32..8).prop_map(|worker| Op::Join { worker }),
            ]
        }

        /// A prompt under a shared root: requests of one root share their
        /// leading blocks.
        fn prompt(id: u64, root: u64, tokens: u32, output: u32) -> Request {
            let prefix: Vec<u64> = (0..8).map(|k| root * 1000 + k).collect();
            req(id, tokens, output, &prefix)
        }

        fn hashes(root: u64) -> Vec<u64> {
            let mut h = Vec::new();
            prompt(0, root, 4096, 1).block_hashes(BS, &mut h);
            h
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(200))]
            /// The indexed kv-aware pick chooses exactly what scoring every
            /// worker would, with the same overlap and bookings, through
            /// publishes, removals, clears, releases and workers leaving and
            /// joining (a new worker shifts the slots).
            #[test]
            fn indexed_selection_equals_the_scan(
                prefill in any::<bool>(),
                ops in proptest::collection::vec(op(), 1..120),
            ) {
                let role = if prefill { PoolRole::Prefill } else { PoolRole::Decode };
                let cfg = RouterConfig::new(role, RouterMode::KvAware, BS);
                let mut fast = Router::new(cfg, (0..4).map(WorkerId));
                fast.force_index = Some(true);
                fast.rebuild_scoring();
                let mut scan = Router::new(cfg, (0..4).map(WorkerId));
                scan.force_index = Some(false);
                scan.rebuild_scoring();
                prop_assert!(fast.scoring.is_some() && scan.scoring.is_none());
                let mut booked: Vec<RequestId> = Vec::new();
                for (n, op) in ops.into_iter().enumerate() {
                    let n = n as u64;
                    for r in [&mut fast, &mut scan] {
                        match &op {
                            Op::Select { .. } => {}
                            Op::Publish { worker, root, blocks } => {
                                let h = hashes(*root);
                                r.on_kv_event(WorkerId(*worker), &KvEvent {
                                    event_id: n,
                                    data: KvEventData::Stored {
                                        parent_hash: None,
                                        block_hashes: h[..(*blocks).min(h.len())].to_vec(),
                                    },
                                });
                            }
                            Op::Remove { worker, root, from } => {
                                let h = hashes(*root);
                                r.on_kv_event(WorkerId(*worker), &KvEvent {
                                    event_id: n,
                                    data: KvEventData::Removed {
                                        block_hashes: h[(*from).min(h.len())..].to_vec(),
                                    },
                                });
                            }
                            Op::Clear { worker } => r.on_kv_event(WorkerId(*worker), &KvEvent {
                                event_id: n,
                                data: KvEventData::Cleared,
                            }),
                            Op::PrefillDone { nth } => {
                                if let Some(id) = booked.get(*nth) {
                                    r.prefill_completed(*id);
                                }
                            }
                            Op::Release { nth } => {
                                if let Some(id) = booked.get(*nth) {
                                    r.request_released(*id);
                                }
                            }
                            Op::Leave { worker } => {
                                r.remove_worker(WorkerId(*worker));
                            }
                            Op::Join { worker } => {
                                r.add_worker(WorkerId(*worker));
                            }
                        }
                    }
                    if let Op::Select { root, prompt: tokens, output } = op {
                        let q = prompt(n, root, tokens, output);
                        let a = fast.select(&q, Instant::ZERO);
                        let b = scan.select(&q, Instant::ZERO);
                        prop_assert_eq!(a, b, "op {}", n);
                        if a.is_some() {
                            booked.push(q.id);
                        }
                    }
                    prop_assert!(fast.scoring.is_some());
                    let la: Vec<_> = fast.loads().collect();
                    let lb: Vec<_> = scan.loads().collect();
                    prop_assert_eq!(la, lb);
                    prop_assert!(fast.published.holders().is_some());
                    prop_assert!(scan.published.holders().is_none());
                    prop_assert_eq!(fast.stats(), scan.stats());
                    for i in 0..fast.workers.len() {
                        let mut a = fast.published.hashes(i);
                        let mut b = scan.published.hashes(i);
                        a.sort_unstable();
                        b.sort_unstable();
                        prop_assert_eq!(a, b, "worker slot {} holds the same in both layouts", i);
                    }
                }
            }
        }
    }
}
