//! The router: worker selection plus selection-time booking.
//!
//! The top of the crate's routing modules (only the frontend is above it):
//! it owns the pool's per-worker state (module `state`), builds the pool's
//! policy from its [`RouterMode`] (`policy_for`), shows the state to the
//! policy through a [`RouterView`], and books the answer with the same costs
//! (module `cost`) the view shows.

use crate::config::{RouterConfig, RouterMode};
use crate::cost::overlap_of;
use crate::holders::{bit, MAX_SLOTS};
use crate::load::{Booking, Release, RouterStats, Selection, WorkerLoad};
use crate::policy::{
    KvAware, KvLegacy, LeastLoaded, Policy, PowerOfTwo, Random, RoundRobin, RoutingChoice,
};
use crate::published::Published;
use crate::role::PoolRole;
use crate::state::{Scoring, WorkerState};
use crate::view::RouterView;
use handoff_core::fasthash::ChurnMap;
use handoff_core::{Instant, KvCapacitySnapshot, KvEvent, Request, RequestId, Rng, WorkerId};

#[derive(Clone, Copy, Debug)]
struct Entry {
    booking: Booking,
    /// Prefill compute load still counted (prefill pool, until
    /// `prefill_completed`).
    prefill_open: bool,
    /// Full prompt blocks counted in the worker's `booked_prompt_blocks`.
    prompt_blocks: u64,
}

/// The policy `mode` names, for a pool of `role` (a custom policy's factory
/// is told the role).
fn policy_for(mode: RouterMode, role: PoolRole) -> Policy {
    match mode {
        RouterMode::KvAware => Policy::KvAware(KvAware),
        RouterMode::KvLegacy => Policy::KvLegacy(KvLegacy),
        RouterMode::RoundRobin => Policy::RoundRobin(RoundRobin::default()),
        RouterMode::Random => Policy::Random(Random),
        RouterMode::LeastLoaded => Policy::LeastLoaded(LeastLoaded),
        RouterMode::PowerOfTwo => Policy::PowerOfTwo(PowerOfTwo),
        RouterMode::Custom(c) => Policy::Custom(c.build(role)),
    }
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
    /// Reused by `KvAware`: (slot, cost, overlap) of each selectable worker.
    scores: Vec<(usize, f64, u32)>,
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
            policy: policy_for(config.mode, config.role),
            config,
            workers: Vec::new(),
            bookings: ChurnMap::default(),
            hashes: Vec::new(),
            stats: RouterStats::default(),
            published: Published::default(),
            scoring: None,
            matched: Vec::new(),
            scores: Vec::new(),
            #[cfg(test)]
            force_index: None,
        };
        for w in workers {
            r.add_worker(w);
        }
        r
    }

    /// Whether `KvLegacy` selection can use [`Scoring`] for this pool
    /// (`KvAware` breaks ties at random and scores every worker).
    fn can_index(&self) -> bool {
        #[allow(unused_mut)]
        let mut big_enough = self.workers.len() >= INDEX_MIN_WORKERS;
        #[cfg(test)]
        if let Some(f) = self.force_index {
            big_enough = f;
        }
        big_enough
            && self.config.mode == RouterMode::KvLegacy
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

    /// The integer that orders workers by their `KvLegacy` cost when they hold
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
            cost: self.config.cost_params(),
            workers: &self.workers,
            published: &self.published,
            hashes: &mut self.hashes,
            rng: &mut self.rng,
            request,
            available: n,
            scoring: self.scoring.as_ref(),
            matched: &mut self.matched,
            scores: &mut self.scores,
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
    /// `KvAware` is Dynamo 1.6.1's cost (see [`crate::policy::KvAware`]).
    /// `KvLegacy` cost, per pool (lower wins, ties to the lower id):
    ///
    /// - prefill: `max(0, (booked_prefill_tokens + prompt_tokens) /
    ///   block_size - weight * overlap) + booked_blocks + request_blocks`;
    /// - decode: `max(0, booked_blocks + request_blocks - weight * overlap)`.
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

    /// Whether a booking holds prefill tokens until `prefill_completed`:
    /// in a prefill pool, and in an aggregated pool under `KvAware`
    /// (Dynamo's aggregated router tracks them until the first token).
    fn books_prefill(&self) -> bool {
        match self.config.mode {
            RouterMode::KvAware => self.config.cost_params().dynamo_books_prefill(),
            _ => self.config.role == PoolRole::Prefill,
        }
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
        let params = self.config.cost_params();
        let blocks = params.request_blocks(request);
        let prompt_blocks = params.prompt_full_blocks(request);
        let prefill_open = self.books_prefill();
        let prefill_tokens = if prefill_open {
            u64::from(request.prompt_tokens)
                .saturating_sub(u64::from(overlap) * u64::from(self.config.block_size))
        } else {
            0
        };
        let w = &mut self.workers[i];
        w.booked_blocks = w.booked_blocks.saturating_add(blocks);
        w.booked_prompt_blocks = w.booked_prompt_blocks.saturating_add(prompt_blocks);
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
                prefill_open,
                prompt_blocks,
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
            w.booked_prompt_blocks = w.booked_prompt_blocks.saturating_sub(entry.prompt_blocks);
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
                w.booked_blocks == 0
                    && w.booked_prefill_tokens == 0
                    && w.booked_requests == 0
                    && w.booked_prompt_blocks == 0
            })
    }

    /// Checks that every worker's totals equal the sum of its live
    /// bookings; the first mismatch otherwise. For tests and drain checks;
    /// O(bookings).
    pub fn audit(&self) -> Result<(), AuditError> {
        let mut sums = vec![[0u64; 4]; self.workers.len()];
        for (id, e) in self.bookings.iter() {
            let Some(i) = self.index(e.booking.worker) else {
                return Err(AuditError::UnknownWorker {
                    request: *id,
                    worker: e.booking.worker,
                });
            };
            sums[i][0] += e.booking.blocks;
            sums[i][1] += e.booking.prefill_tokens;
            sums[i][2] += 1;
            sums[i][3] += e.prompt_blocks;
        }
        for (w, bookings) in self.workers.iter().zip(sums) {
            let totals = [
                w.booked_blocks,
                w.booked_prefill_tokens,
                w.booked_requests,
                w.booked_prompt_blocks,
            ];
            if totals != bookings {
                return Err(AuditError::Totals {
                    worker: w.id,
                    totals,
                    bookings,
                });
            }
        }
        Ok(())
    }
}

/// Where [`Router::audit`] found the router's books inconsistent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuditError {
    /// A request is booked on a worker the router does not know.
    UnknownWorker {
        /// The request.
        request: RequestId,
        /// The worker it is booked on.
        worker: WorkerId,
    },
    /// A worker's totals (blocks, prefill tokens, requests, prompt blocks)
    /// differ from the sum of its bookings.
    Totals {
        /// The worker.
        worker: WorkerId,
        /// Its running totals.
        totals: [u64; 4],
        /// What its live bookings sum to.
        bookings: [u64; 4],
    },
}

impl std::fmt::Display for AuditError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AuditError::UnknownWorker { request, worker } => {
                write!(f, "{request} booked on unknown {worker}")
            }
            AuditError::Totals {
                worker,
                totals,
                bookings,
            } => write!(
                f,
                "{worker}: totals (blocks, prefill tokens, requests, prompt blocks) {totals:?} \
                 but bookings sum to {bookings:?}"
            ),
        }
    }
}

impl std::error::Error for AuditError {}

#[cfg(test)]
mod kv_tests;
#[cfg(test)]
mod tests;
