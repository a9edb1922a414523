//! Routing policies: the rule a [`crate::Router`] applies to choose a
//! worker, behind one trait.
//!
//! A [`Router`](crate::Router) keeps the pool's state (workers, bookings,
//! published KV, capacity reports, the seeded generator) and asks its policy
//! for a worker on every [`Router::select`](crate::Router::select); it then
//! books the request on the chosen worker. The six built-in modes of
//! [`RouterMode`](crate::RouterMode) are policies of this module
//! ([`KvAware`], [`KvLegacy`], [`RoundRobin`], [`Random`], [`LeastLoaded`],
//! [`PowerOfTwo`]), dispatched statically; a downstream crate plugs its own
//! in with [`CustomPolicy`] and
//! [`RouterMode::Custom`](crate::RouterMode::Custom), which every driver
//! (replay, virtual-clock live, wall-clock live, serve) passes to the
//! frontend from its configuration.
//!
//! This module knows nothing of the configuration: the router
//! ([`crate::router`]) builds a pool's policy from its mode, and a policy
//! sees the pool only through [`RouterView`].
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
//!     lora: None,
//! };
//! assert_eq!(r.select(&req, Instant::ZERO).unwrap().worker, WorkerId(2));
//! assert_eq!(RouterMode::Custom(last).name(), "last");
//! ```

use crate::role::PoolRole;
use handoff_core::{Instant, Request, WorkerId};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

pub use crate::view::RouterView;

/// A worker chosen by a [`RoutingPolicy`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RoutingChoice {
    /// The worker; it must be one of [`RouterView::workers`].
    pub worker: WorkerId,
    /// A data-parallel rank inside `worker`, for a policy whose workers
    /// hide their ranks. This mocker's ranks are workers of their own in
    /// the view (`--dp-size`: each rank is a scheduler with its own id,
    /// `handoff_core::DpLayout` maps it to its worker and rank), so the
    /// built-in policies answer `None`; the router only carries it to
    /// [`crate::Selection::dp_rank`].
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
///   reports ([`WorkerLoad`](crate::WorkerLoad)), the request's
///   published-prefix overlap per worker ([`RouterView::overlap_blocks`],
///   hashing the prompt lazily, at most once per selection), the pool's
///   role, block size and overlap weight. The policy changes nothing but its
///   own state and the generator.
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

/// The answer naming the worker in slot `i` of `view`.
fn choice(view: &RouterView<'_>, i: usize) -> RoutingChoice {
    RoutingChoice::worker(view.id_at(i))
}

/// [`RouterMode::KvAware`](crate::RouterMode::KvAware): Dynamo 1.6.1's KV
/// router. Each selectable worker costs, in blocks,
///
/// `prefill_load_scale * max(0, (booked_prefill_tokens + prompt_tokens) /
/// block_size - overlap_score_credit * overlap) + active_blocks +
/// decode_active_request_weight * booked_requests`
///
/// (`DefaultScorer::score_worker`, `dynamo-custom-policy-builtin`
/// `default/scorer.rs`), where `overlap` is the worker's published prefix of
/// the prompt in blocks and the terms a pool uses are those of Dynamo's
/// disaggregated replay: a prefill pool tracks no active blocks, a decode
/// pool no prefill tokens and no overlap, an aggregated pool all three
/// (details at [`crate::RouterConfig::aggregated`] and the cost's source).
/// Booking follows Dynamo's `ActiveSequences`: prefill tokens are the
/// prompt minus the chosen worker's overlap, dropped at
/// [`crate::Router::prefill_completed`]. The lowest cost wins, a tie to
/// each tied worker with equal probability from the seeded generator; with
/// `router_temperature > 0` the worker is a softmax sample over the costs
/// (`DefaultPicker::pick`, `default/picker.rs`). Knobs:
/// [`crate::RouterConfig::kv`].
#[derive(Clone, Copy, Debug, Default)]
pub struct KvAware;

impl RoutingPolicy for KvAware {
    fn select(
        &mut self,
        _: &Request,
        view: &mut RouterView<'_>,
        _: Instant,
    ) -> Option<RoutingChoice> {
        let (i, overlap) = view.pick_kv_dynamo()?;
        if view.cost.dynamo_reads_overlap() {
            view.known_overlap = Some((i, overlap));
        }
        Some(choice(view, i))
    }
}

/// [`RouterMode::KvLegacy`](crate::RouterMode::KvLegacy): this project's
/// earlier kv-aware cost (booked load minus weighted published overlap;
/// see [`crate::Router::select`]), ties to the lowest id. Large pools with a
/// power-of-two block size answer from the router's pool-wide index instead
/// of scoring every worker; both choose the same worker.
#[derive(Clone, Copy, Debug, Default)]
pub struct KvLegacy;

impl RoutingPolicy for KvLegacy {
    fn select(
        &mut self,
        _: &Request,
        view: &mut RouterView<'_>,
        _: Instant,
    ) -> Option<RoutingChoice> {
        if let Some(sc) = view.scoring {
            let (i, overlap) = view.pick_kv_indexed(sc)?;
            view.known_overlap = Some((i, overlap));
            return Some(choice(view, i));
        }
        let i = view.pick_kv_scan()?;
        Some(choice(view, i))
    }
}

/// [`RouterMode::RoundRobin`](crate::RouterMode::RoundRobin): the next
/// selectable worker in id order, cycling (the count survives workers
/// leaving and joining).
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
        view.nth_available(k).map(|i| choice(view, i))
    }
}

/// [`RouterMode::Random`](crate::RouterMode::Random): a uniformly random
/// selectable worker, one draw of the router's seeded generator.
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
        view.nth_available(k).map(|i| choice(view, i))
    }
}

/// [`RouterMode::LeastLoaded`](crate::RouterMode::LeastLoaded): least
/// booked blocks plus last reported `kv_used_blocks`, ties to the lowest id.
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
        best.map(|(i, _)| choice(view, i))
    }
}

/// [`RouterMode::PowerOfTwo`](crate::RouterMode::PowerOfTwo): two distinct
/// random selectable workers (two draws of the seeded generator; none with a
/// single worker), the less loaded of them as in [`LeastLoaded`], ties to
/// the lower id.
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
            return view.nth_available(0).map(|i| choice(view, i));
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
            Some(choice(view, hi))
        } else {
            Some(choice(view, lo))
        }
    }
}

type MakePolicy = dyn Fn(PoolRole) -> Box<dyn RoutingPolicy> + Send + Sync;

struct Factory {
    name: &'static str,
    make: Arc<MakePolicy>,
}

/// A downstream routing policy, as a
/// [`RouterMode::Custom`](crate::RouterMode::Custom): a name for reports and
/// a factory the router calls once per pool with the pool's [`PoolRole`].
///
/// It is a copyable handle, like the built-in modes, so that it travels in
/// every configuration that names a mode (`RouterConfig`,
/// `FrontendConfig`, handoff-serving's `DeploymentConfig`) and so reaches
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
/// path), a custom one boxed. The router builds it from its mode
/// (`Router::new`), so that this module need not know the configuration.
#[derive(Debug)]
pub(crate) enum Policy {
    KvAware(KvAware),
    KvLegacy(KvLegacy),
    RoundRobin(RoundRobin),
    Random(Random),
    LeastLoaded(LeastLoaded),
    PowerOfTwo(PowerOfTwo),
    Custom(Box<dyn RoutingPolicy>),
}

impl Policy {
    /// The policy's answer, as [`RoutingPolicy::select`].
    pub(crate) fn select(
        &mut self,
        request: &Request,
        view: &mut RouterView<'_>,
        now: Instant,
    ) -> Option<RoutingChoice> {
        match self {
            Policy::KvAware(p) => p.select(request, view, now),
            Policy::KvLegacy(p) => p.select(request, view, now),
            Policy::RoundRobin(p) => p.select(request, view, now),
            Policy::Random(p) => p.select(request, view, now),
            Policy::LeastLoaded(p) => p.select(request, view, now),
            Policy::PowerOfTwo(p) => p.select(request, view, now),
            Policy::Custom(p) => p.select(request, view, now),
        }
    }
}
