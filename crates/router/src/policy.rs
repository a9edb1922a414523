//! Routing policies: the rule a [`crate::Router`] applies to choose a
//! worker, behind one trait.
//!
//! A [`Router`](crate::Router) keeps the pool's state (workers, bookings,
//! published KV, capacity reports, the seeded generator) and asks its policy
//! for a worker on every [`Router::select`](crate::Router::select); it then
//! books the request on the chosen worker. The five built-in modes of
//! [`RouterMode`] are policies of this module ([`KvAware`], [`RoundRobin`],
//! [`Random`], [`LeastLoaded`], [`PowerOfTwo`]), dispatched statically; a
//! downstream crate plugs its own in with [`CustomPolicy`] and
//! [`RouterMode::Custom`], which every driver (replay, virtual-clock live,
//! wall-clock live, serve) passes to the frontend from its configuration.
//!
//! ```
//! use handoff_core::{Instant, Request, RequestId, WorkerId};
//! use handoff_router::{
//!     CustomPolicy, PoolRole, Router, RouterConfig, RouterMode, RouterView, RoutingChoice,
//!     RoutingPolicy,
//! };
//!
//! /// The last selectable worker, always.
//! #[derive(Debug)]
//! struct Last;
//!
//! impl RoutingPolicy for Last {
//!     fn select(&mut self, _: &Request, view: &mut RouterView<'_>, _: Instant)
//!         -> Option<RoutingChoice> {
//!         view.workers().last().map(RoutingChoice::worker)
//!     }
//! }
//!
//! let last = CustomPolicy::new("last", |_role: PoolRole| Box::new(Last));
//! let cfg = RouterConfig::new(PoolRole::Decode, RouterMode::Custom(last), 16);
//! let mut r = Router::new(cfg, [WorkerId(0), WorkerId(1), WorkerId(2)]);
//! let req = Request {
//!     id: RequestId(1), prompt_tokens: 1024, max_output_tokens: 64, prefix_hashes: vec![],
//!     hash_block_tokens: 512, session: None, arrival: Instant::ZERO,
//! };
//! assert_eq!(r.select(&req, Instant::ZERO).unwrap().worker, WorkerId(2));
//! assert_eq!(RouterMode::Custom(last).name(), "last");
//! ```

use crate::config::{PoolRole, RouterConfig, RouterMode};
use crate::holders::{bit, Slots};
use crate::load::WorkerLoad;
use crate::published::Published;
use crate::router::{Scoring, WorkerState};
use handoff_core::{Instant, KvCapacitySnapshot, Request, Rng, WorkerId};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// A worker chosen by a [`RoutingPolicy`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RoutingChoice {
    /// The worker; it must be one of [`RouterView::workers`].
    pub worker: WorkerId,
    /// The data-parallel rank within the worker, for engines that expose
    /// several. Reserved: no worker of this mocker has ranks yet, the
    /// built-in policies always answer `None`, and the router only carries
    /// it to [`crate::Selection::dp_rank`].
    pub dp_rank: Option<u32>,
}

impl RoutingChoice {
    /// `worker`, with no DP rank.
    pub fn worker(worker: WorkerId) -> Self {
        RoutingChoice {
            worker,
            dp_rank: None,
        }
    }
}

/// A rule for choosing a worker of one pool for a request.
///
/// The router calls [`RoutingPolicy::select`] once per
/// [`Router::select`](crate::Router::select), after dropping any earlier
/// booking of the same request, and books the request on the answer. What a
/// policy may rely on, and must keep:
///
/// - **Sans-IO and deterministic.** `now` is an argument (virtual time in
///   replay and virtual-clock live, wall time mapped to an [`Instant`] in
///   wall-clock live and serve); a policy reads no clock, does no IO and
///   takes randomness only from [`RouterView::rng`], the router's seeded
///   generator (`RouterConfig::seed`), so a replay is reproducible. Do not
///   let hash-map iteration order reach a decision.
/// - **Read-only view.** [`RouterView`] shows the pool as the router knows
///   it: selectable workers in id order, their bookings and last capacity
///   reports ([`WorkerLoad`]), the request's published-prefix overlap per
///   worker ([`RouterView::overlap_blocks`], hashing the prompt lazily, at
///   most once per selection), the pool's role and block size. The policy
///   changes nothing but its own state and the generator.
/// - **Bookings are the router's.** The chosen worker is booked by the
///   router as for every mode (see [`crate::PoolRole`]); releases and KV
///   events reach the policy only through the view on later selections.
/// - **The answer.** `None`, or a worker that is not selectable, refuses the
///   request: [`Router::select`](crate::Router::select) returns `None` (the
///   frontend then treats the pool as having no worker for it) and counts it
///   in [`crate::RouterStats::no_worker`] (and, for a worker that is not
///   selectable, [`crate::RouterStats::rejected_choices`]). It is called only
///   when at least one worker is selectable.
/// - **One instance per pool.** A disaggregated frontend builds one policy
///   for its prefill router and one for its decode router
///   ([`CustomPolicy::build`] is told the [`PoolRole`]); an aggregated one
///   builds one, for the decode role. Each lives as long as its router.
pub trait RoutingPolicy: Send + fmt::Debug {
    /// The worker for `request`, or `None` to refuse it (see the trait docs).
    fn select(
        &mut self,
        request: &Request,
        view: &mut RouterView<'_>,
        now: Instant,
    ) -> Option<RoutingChoice>;
}

/// What a [`RoutingPolicy`] sees of its pool during one selection.
pub struct RouterView<'a> {
    pub(crate) config: &'a RouterConfig,
    /// Every worker ever served, sorted by id (unavailable ones included).
    pub(crate) workers: &'a [WorkerState],
    pub(crate) published: &'a Published,
    /// The request's block hashes so far (empty at the start of a selection).
    pub(crate) hashes: &'a mut Vec<u64>,
    pub(crate) rng: &'a mut Rng,
    pub(crate) request: &'a Request,
    /// Selectable workers.
    pub(crate) available: u64,
    /// The kv-aware index, when the pool keeps it.
    pub(crate) scoring: Option<&'a Scoring>,
    /// Scratch for the indexed pick.
    pub(crate) matched: &'a mut Vec<(usize, u32)>,
    /// `(slot, overlap)` a pick already computed, so booking need not look
    /// again.
    pub(crate) known_overlap: Option<(usize, u32)>,
}

impl fmt::Debug for RouterView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RouterView")
            .field("role", &self.config.role)
            .field("request", &self.request.id)
            .field("selectable", &self.available)
            .finish_non_exhaustive()
    }
}

/// Blocks a booking of `request` holds in a pool of `config`.
pub(crate) fn request_blocks(config: &RouterConfig, request: &Request) -> u64 {
    let bs = config.block_size;
    match config.role {
        PoolRole::Prefill => Request::blocks_for(u64::from(request.prompt_tokens), bs),
        PoolRole::Decode => Request::blocks_for(
            u64::from(request.prompt_tokens) + u64::from(request.max_output_tokens),
            bs,
        ),
    }
}

/// Leading blocks of `request` slot `i` has published, hashing more of the
/// request into `hashes` as the match needs (a window at a time, so a prompt
/// is hashed only as far as some worker's cached prefix reaches). A worker
/// that published nothing costs nothing.
pub(crate) fn overlap_of(
    published: &Published,
    hashes: &mut Vec<u64>,
    block_size: u32,
    i: usize,
    request: &Request,
) -> u32 {
    if published.len(i) == 0 {
        return 0;
    }
    loop {
        let n = published.overlap(i, hashes);
        if (n as usize) < hashes.len() {
            return n;
        }
        let before = hashes.len();
        let window = before.max(64) * 2;
        request.extend_block_hashes(block_size, hashes, window);
        if hashes.len() == before {
            // Every block of the prompt matched.
            return n;
        }
    }
}

/// The overlap weight in use: finite and positive, else 0.
fn weight(config: &RouterConfig) -> f64 {
    let w = config.overlap_score_weight;
    if w.is_finite() && w > 0.0 {
        w
    } else {
        0.0
    }
}

/// KV-aware cost of placing `request` on `w`, in blocks (lower wins).
///
/// Prefill pool, after Dynamo's prefill formula:
/// `max(0, (booked_prefill_tokens + prompt_tokens) / block_size
///  - weight * overlap) + booked_blocks + request_blocks`.
///
/// Decode pool, after Dynamo's decode formula with a positive overlap
/// credit: `max(0, booked_blocks + request_blocks - weight * overlap)`.
pub(crate) fn kv_cost(
    config: &RouterConfig,
    w: &WorkerState,
    request: &Request,
    request_blocks: u64,
    overlap: u32,
) -> f64 {
    let credit = weight(config) * f64::from(overlap);
    let decode_blocks = w.booked_blocks.saturating_add(request_blocks) as f64;
    match config.role {
        PoolRole::Prefill => {
            let tokens = w
                .booked_prefill_tokens
                .saturating_add(u64::from(request.prompt_tokens));
            let raw = tokens as f64 / f64::from(config.block_size.max(1));
            (raw - credit).max(0.0) + decode_blocks
        }
        PoolRole::Decode => (decode_blocks - credit).max(0.0),
    }
}

impl RouterView<'_> {
    /// The pool served.
    pub fn role(&self) -> PoolRole {
        self.config.role
    }

    /// The router's configuration (block size, overlap weight, seed, mode).
    pub fn config(&self) -> &RouterConfig {
        self.config
    }

    /// The request being routed.
    pub fn request(&self) -> &Request {
        self.request
    }

    /// Selectable workers (at least one during a selection).
    pub fn worker_count(&self) -> u64 {
        self.available
    }

    /// Selectable workers, in id order.
    pub fn workers(&self) -> impl DoubleEndedIterator<Item = WorkerId> + '_ {
        self.workers.iter().filter(|w| w.available).map(|w| w.id)
    }

    /// The `n`-th selectable worker in id order (from 0).
    pub fn nth_worker(&self, n: u64) -> Option<WorkerId> {
        self.nth_available(n).map(|i| self.workers[i].id)
    }

    fn index(&self, worker: WorkerId) -> Option<usize> {
        self.workers.binary_search_by_key(&worker, |w| w.id).ok()
    }

    pub(crate) fn nth_available(&self, n: u64) -> Option<usize> {
        self.workers
            .iter()
            .enumerate()
            .filter(|(_, w)| w.available)
            .nth(usize::try_from(n).ok()?)
            .map(|(i, _)| i)
    }

    fn worker_load(&self, i: usize) -> WorkerLoad {
        self.workers[i].load_view(self.published.len(i) as u64)
    }

    /// `worker`'s bookings, published block count and last capacity
    /// report; `None` for a worker the router never served.
    pub fn load(&self, worker: WorkerId) -> Option<WorkerLoad> {
        self.index(worker).map(|i| self.worker_load(i))
    }

    /// Every selectable worker with its load, in id order.
    pub fn loads(&self) -> impl Iterator<Item = (WorkerId, WorkerLoad)> + '_ {
        (0..self.workers.len())
            .filter(|&i| self.workers[i].available)
            .map(|i| (self.workers[i].id, self.worker_load(i)))
    }

    /// `worker`'s last capacity report, if any.
    pub fn capacity(&self, worker: WorkerId) -> Option<KvCapacitySnapshot> {
        self.index(worker).and_then(|i| self.workers[i].capacity)
    }

    /// Booked blocks plus the last reported `kv_used_blocks` of `worker`:
    /// the load `LeastLoaded` and `PowerOfTwo` compare (0 for a stranger).
    pub fn used_blocks(&self, worker: WorkerId) -> u64 {
        self.index(worker).map_or(0, |i| self.workers[i].load())
    }

    /// Leading blocks of the request that `worker` has published as cache
    /// (from its KV events); 0 for a stranger. The prompt is hashed lazily
    /// and once per selection, however many workers are asked.
    pub fn overlap_blocks(&mut self, worker: WorkerId) -> u32 {
        match self.index(worker) {
            Some(i) => self.overlap_at(i),
            None => 0,
        }
    }

    fn overlap_at(&mut self, i: usize) -> u32 {
        overlap_of(
            self.published,
            self.hashes,
            self.config.block_size,
            i,
            self.request,
        )
    }

    /// Blocks a booking of this request holds here: prompt blocks in a
    /// prefill pool, prompt + output blocks in a decode pool.
    pub fn request_blocks(&self) -> u64 {
        request_blocks(self.config, self.request)
    }

    /// The `KvAware` cost of placing the request on `worker` given its
    /// `overlap` (see [`crate::Router::select`]; lower wins); `None` for a
    /// stranger. For policies that adjust the built-in score.
    pub fn kv_cost(&self, worker: WorkerId, overlap: u32) -> Option<f64> {
        let i = self.index(worker)?;
        Some(kv_cost(
            self.config,
            &self.workers[i],
            self.request,
            self.request_blocks(),
            overlap,
        ))
    }

    /// The router's seeded generator (`RouterConfig::seed`): the only
    /// randomness a policy may use. Draws advance it for every later
    /// selection of this router.
    pub fn rng(&mut self) -> &mut Rng {
        self.rng
    }

    fn choice(&self, i: usize) -> RoutingChoice {
        RoutingChoice::worker(self.workers[i].id)
    }

    /// The kv-aware choice scoring every selectable worker.
    fn pick_kv_scan(&mut self) -> Option<usize> {
        let request_blocks = self.request_blocks();
        let mut best: Option<(usize, f64)> = None;
        for i in 0..self.workers.len() {
            if !self.workers[i].available {
                continue;
            }
            let overlap = self.overlap_at(i);
            let cost = kv_cost(
                self.config,
                &self.workers[i],
                self.request,
                request_blocks,
                overlap,
            );
            // Strictly less: on a tie the earlier (lower) id stays.
            if best.is_none_or(|(_, c)| cost < c) {
                best = Some((i, cost));
            }
        }
        best.map(|(i, _)| i)
    }

    /// The kv-aware choice with its overlap, by [`Scoring`]: one walk down
    /// the prompt's blocks finds every worker that holds a leading block
    /// and how many; those are scored exactly, and the best of the rest is
    /// the first worker in load order that matched nothing.
    fn pick_kv_indexed(&mut self, sc: &Scoring) -> Option<(usize, u32)> {
        let request_blocks = self.request_blocks();
        let published: &Published = self.published;
        let holders = published.holders()?;
        let request: &Request = self.request;
        let config: &RouterConfig = self.config;
        let workers: &[WorkerState] = self.workers;
        let matched = &mut *self.matched;
        matched.clear();
        let bs = config.block_size;
        holders.walk(
            &mut *self.hashes,
            sc.alive,
            |buf| {
                let before = buf.len();
                let window = before.max(64) * 2;
                request.extend_block_hashes(bs, buf, window);
                buf.len() > before
            },
            |slots, depth| {
                let mut s = slots;
                while s != 0 {
                    let i = s.trailing_zeros() as usize;
                    matched.push((i, depth));
                    s &= s - 1;
                }
            },
        );
        let mut matched_slots: Slots = 0;
        let mut best: Option<(f64, usize, u32)> = None;
        let better = |b: Option<(f64, usize, u32)>, c: f64, i: usize| {
            b.is_none_or(|(bc, bi, _)| c < bc || (c == bc && i < bi))
        };
        for &(i, overlap) in matched.iter() {
            matched_slots |= bit(i);
            let cost = kv_cost(config, &workers[i], request, request_blocks, overlap);
            if better(best, cost, i) {
                best = Some((cost, i, overlap));
            }
        }
        if let Some(&(_, i)) = sc
            .by_load
            .iter()
            .find(|(_, i)| matched_slots & bit(*i) == 0)
        {
            let cost = kv_cost(config, &workers[i], request, request_blocks, 0);
            if better(best, cost, i) {
                best = Some((cost, i, 0));
            }
        }
        best.map(|(_, i, overlap)| (i, overlap))
    }
}

/// [`RouterMode::KvAware`]: lowest kv-aware cost (booked load minus
/// weighted published overlap; see [`crate::Router::select`]), ties to the
/// lowest id. Large pools with a power-of-two block size answer from the
/// router's pool-wide index instead of scoring every worker; both choose the
/// same worker.
#[derive(Clone, Copy, Debug, Default)]
pub struct KvAware;

impl RoutingPolicy for KvAware {
    fn select(
        &mut self,
        _: &Request,
        view: &mut RouterView<'_>,
        _: Instant,
    ) -> Option<RoutingChoice> {
        if let Some(sc) = view.scoring {
            let (i, overlap) = view.pick_kv_indexed(sc)?;
            view.known_overlap = Some((i, overlap));
            return Some(view.choice(i));
        }
        let i = view.pick_kv_scan()?;
        Some(view.choice(i))
    }
}

/// [`RouterMode::RoundRobin`]: the next selectable worker in id order,
/// cycling (the count survives workers leaving and joining).
#[derive(Clone, Copy, Debug, Default)]
pub struct RoundRobin {
    next: u64,
}

impl RoutingPolicy for RoundRobin {
    fn select(
        &mut self,
        _: &Request,
        view: &mut RouterView<'_>,
        _: Instant,
    ) -> Option<RoutingChoice> {
        let k = self.next % view.available;
        self.next = self.next.wrapping_add(1);
        view.nth_available(k).map(|i| view.choice(i))
    }
}

/// [`RouterMode::Random`]: a uniformly random selectable worker, one draw
/// of the router's seeded generator.
#[derive(Clone, Copy, Debug, Default)]
pub struct Random;

impl RoutingPolicy for Random {
    fn select(
        &mut self,
        _: &Request,
        view: &mut RouterView<'_>,
        _: Instant,
    ) -> Option<RoutingChoice> {
        let k = view.rng.below(view.available);
        view.nth_available(k).map(|i| view.choice(i))
    }
}

/// [`RouterMode::LeastLoaded`]: least booked blocks plus last reported
/// `kv_used_blocks`, ties to the lowest id.
#[derive(Clone, Copy, Debug, Default)]
pub struct LeastLoaded;

impl RoutingPolicy for LeastLoaded {
    fn select(
        &mut self,
        _: &Request,
        view: &mut RouterView<'_>,
        _: Instant,
    ) -> Option<RoutingChoice> {
        let mut best: Option<(usize, u64)> = None;
        for (i, w) in view.workers.iter().enumerate() {
            if w.available && best.is_none_or(|(_, l)| w.load() < l) {
                best = Some((i, w.load()));
            }
        }
        best.map(|(i, _)| view.choice(i))
    }
}

/// [`RouterMode::PowerOfTwo`]: two distinct random selectable workers (two
/// draws of the seeded generator; none with a single worker), the less
/// loaded of them as in [`LeastLoaded`], ties to the lower id.
#[derive(Clone, Copy, Debug, Default)]
pub struct PowerOfTwo;

impl RoutingPolicy for PowerOfTwo {
    fn select(
        &mut self,
        _: &Request,
        view: &mut RouterView<'_>,
        _: Instant,
    ) -> Option<RoutingChoice> {
        let n = view.available;
        if n == 1 {
            return view.nth_available(0).map(|i| view.choice(i));
        }
        let a = view.rng.below(n);
        let mut b = view.rng.below(n - 1);
        if b >= a {
            b += 1;
        }
        let (lo, hi) = (a.min(b), a.max(b));
        let (lo, hi) = (view.nth_available(lo)?, view.nth_available(hi)?);
        // `lo` has the lower id, so it wins ties.
        if view.workers[hi].load() < view.workers[lo].load() {
            Some(view.choice(hi))
        } else {
            Some(view.choice(lo))
        }
    }
}

type MakePolicy = dyn Fn(PoolRole) -> Box<dyn RoutingPolicy> + Send + Sync;

struct Factory {
    name: &'static str,
    make: Arc<MakePolicy>,
}

/// A downstream routing policy, as a [`RouterMode::Custom`]: a name for
/// reports and a factory the router calls once per pool with the pool's
/// [`PoolRole`].
///
/// It is a copyable handle, like the built-in modes, so that it travels in
/// every configuration that names a mode (`RouterConfig`,
/// `FrontendConfig`, handoff-serving's `ReplayConfig`) and so reaches
/// replay, virtual-clock live, wall-clock live and serve without any of
/// them knowing about it. [`CustomPolicy::new`] therefore keeps its factory
/// for the life of the process (one small allocation): make one per policy
/// (e.g. at start-up or once per experiment), not one per request. Two
/// handles are equal when they come from the same [`CustomPolicy::new`].
#[derive(Clone, Copy)]
pub struct CustomPolicy(&'static Factory);

impl CustomPolicy {
    /// A policy named `name` (what reports show as the router) built by
    /// `make` for each pool.
    pub fn new(
        name: &'static str,
        make: impl Fn(PoolRole) -> Box<dyn RoutingPolicy> + Send + Sync + 'static,
    ) -> Self {
        CustomPolicy(Box::leak(Box::new(Factory {
            name,
            make: Arc::new(make),
        })))
    }

    /// The name given to [`CustomPolicy::new`].
    pub fn name(self) -> &'static str {
        self.0.name
    }

    /// A fresh policy for a pool of `role`.
    pub fn build(self, role: PoolRole) -> Box<dyn RoutingPolicy> {
        (self.0.make)(role)
    }
}

impl fmt::Debug for CustomPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CustomPolicy").field(&self.0.name).finish()
    }
}

impl PartialEq for CustomPolicy {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.0, other.0)
    }
}

impl Eq for CustomPolicy {}

impl Hash for CustomPolicy {
    fn hash<H: Hasher>(&self, state: &mut H) {
        std::ptr::hash(self.0, state);
    }
}

/// A router's policy: the built-ins by value (static dispatch on the hot
/// path), a custom one boxed.
#[derive(Debug)]
pub(crate) enum Policy {
    KvAware(KvAware),
    RoundRobin(RoundRobin),
    Random(Random),
    LeastLoaded(LeastLoaded),
    PowerOfTwo(PowerOfTwo),
    Custom(Box<dyn RoutingPolicy>),
}

impl Policy {
    /// The policy `mode` names, for a pool of `role`.
    pub(crate) fn new(mode: RouterMode, role: PoolRole) -> Self {
        match mode {
            RouterMode::KvAware => Policy::KvAware(KvAware),
            RouterMode::RoundRobin => Policy::RoundRobin(RoundRobin::default()),
            RouterMode::Random => Policy::Random(Random),
            RouterMode::LeastLoaded => Policy::LeastLoaded(LeastLoaded),
            RouterMode::PowerOfTwo => Policy::PowerOfTwo(PowerOfTwo),
            RouterMode::Custom(c) => Policy::Custom(c.build(role)),
        }
    }

    pub(crate) fn select(
        &mut self,
        request: &Request,
        view: &mut RouterView<'_>,
        now: Instant,
    ) -> Option<RoutingChoice> {
        match self {
            Policy::KvAware(p) => p.select(request, view, now),
            Policy::RoundRobin(p) => p.select(request, view, now),
            Policy::Random(p) => p.select(request, view, now),
            Policy::LeastLoaded(p) => p.select(request, view, now),
            Policy::PowerOfTwo(p) => p.select(request, view, now),
            Policy::Custom(p) => p.select(request, view, now),
        }
    }
}
