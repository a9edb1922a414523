//! What a [`RoutingPolicy`](crate::RoutingPolicy) sees of its pool during
//! one selection, and the kv-aware picks the built-in `KvAware` policy makes
//! through it.
//!
//! The view borrows the router's state for one selection; it holds the
//! pool's cost parameters ([`CostParams`]) rather than the router's whole
//! configuration, so that it (and the policies above it) need not know the
//! configuration, which names the policies.

use crate::cost::{overlap_of, CostParams};
use crate::holders::{bit, Slots};
use crate::load::WorkerLoad;
use crate::published::Published;
use crate::role::PoolRole;
use crate::state::{Scoring, WorkerState};
use handoff_core::{KvCapacitySnapshot, Request, Rng, WorkerId};
use std::fmt;

/// What a [`RoutingPolicy`](crate::RoutingPolicy) sees of its pool during
/// one selection.
pub struct RouterView<'a> {
    /// The pool's role, block size and overlap weight.
    pub(crate) cost: CostParams,
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
    /// Scratch for `KvAware`: (slot, cost, overlap) per selectable worker.
    pub(crate) scores: &'a mut Vec<(usize, f64, u32)>,
    /// `(slot, overlap)` a pick already computed, so booking need not look
    /// again.
    pub(crate) known_overlap: Option<(usize, u32)>,
}

impl fmt::Debug for RouterView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RouterView")
            .field("role", &self.cost.role)
            .field("request", &self.request.id)
            .field("selectable", &self.available)
            .finish_non_exhaustive()
    }
}

impl RouterView<'_> {
    /// The pool served.
    pub fn role(&self) -> PoolRole {
        self.cost.role
    }

    /// The engines' KV block size in tokens (`RouterConfig::block_size`):
    /// the request is hashed with it for [`RouterView::overlap_blocks`].
    pub fn block_size(&self) -> u32 {
        self.cost.block_size
    }

    /// The configured overlap weight (`RouterConfig::overlap_score_weight`;
    /// [`RouterView::kv_cost`] uses 0 in its place when it is not finite
    /// and positive).
    pub fn overlap_score_weight(&self) -> f64 {
        self.cost.overlap_score_weight
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
            self.cost.block_size,
            i,
            self.request,
        )
    }

    /// Blocks a booking of this request holds here: prompt blocks in a
    /// prefill pool, prompt + output blocks in a decode pool.
    pub fn request_blocks(&self) -> u64 {
        self.cost.request_blocks(self.request)
    }

    /// The `KvAware` (Dynamo 1.6.1) cost of placing the request on
    /// `worker` given its `overlap` (see [`crate::policy::KvAware`]; lower
    /// wins); `None` for a stranger. For policies that adjust the built-in
    /// score.
    pub fn kv_cost(&self, worker: WorkerId, overlap: u32) -> Option<f64> {
        let i = self.index(worker)?;
        Some(
            self.cost
                .dynamo_cost(&self.workers[i], self.request, overlap),
        )
    }

    /// The `KvLegacy` cost of placing the request on `worker` given its
    /// `overlap` (see [`crate::Router::select`]); `None` for a stranger.
    pub fn kv_legacy_cost(&self, worker: WorkerId, overlap: u32) -> Option<f64> {
        let i = self.index(worker)?;
        Some(self.cost.kv_cost(
            &self.workers[i],
            self.request,
            self.request_blocks(),
            overlap,
        ))
    }

    /// `KvAware`'s knobs as configured (`RouterConfig::kv`).
    pub fn kv_knobs(&self) -> crate::KvKnobs {
        self.cost.kv
    }

    /// The `KvAware` choice and its overlap: every selectable worker
    /// scored by [`CostParams::dynamo_cost`] in id order, then picked as
    /// Dynamo's `DefaultPicker::pick` does (`dynamo-custom-policy-builtin`
    /// `default/picker.rs`): at temperature 0 the lowest cost, a tie going
    /// to each tied worker with equal probability (a reservoir over the
    /// ties in id order, one draw of the seeded generator per tie after the
    /// first); above 0 a softmax sample ([`softmax_row`]).
    pub(crate) fn pick_kv_dynamo(&mut self) -> Option<(usize, u32)> {
        let reads_overlap = self.cost.dynamo_reads_overlap();
        let mut scores = std::mem::take(self.scores);
        scores.clear();
        for i in 0..self.workers.len() {
            if !self.workers[i].available {
                continue;
            }
            let overlap = if reads_overlap { self.overlap_at(i) } else { 0 };
            let cost = self
                .cost
                .dynamo_cost(&self.workers[i], self.request, overlap);
            scores.push((i, cost, overlap));
        }
        let temperature = self.cost.kv.sanitized().router_temperature;
        let row = if temperature == 0.0 {
            lowest_row(&scores, self.rng)
        } else {
            softmax_row(&scores, temperature, self.rng.next_f64())
        };
        let pick = row.map(|r| (scores[r].0, scores[r].2));
        *self.scores = scores;
        pick
    }

    /// The router's seeded generator (`RouterConfig::seed`): the only
    /// randomness a policy may use. Draws advance it for every later
    /// selection of this router.
    pub fn rng(&mut self) -> &mut Rng {
        self.rng
    }

    /// The id of the worker in slot `i` (a slot the view gave out).
    pub(crate) fn id_at(&self, i: usize) -> WorkerId {
        self.workers[i].id
    }

    /// The kv-aware choice scoring every selectable worker.
    pub(crate) fn pick_kv_scan(&mut self) -> Option<usize> {
        let request_blocks = self.request_blocks();
        let mut best: Option<(usize, f64)> = None;
        for i in 0..self.workers.len() {
            if !self.workers[i].available {
                continue;
            }
            let overlap = self.overlap_at(i);
            let cost = self
                .cost
                .kv_cost(&self.workers[i], self.request, request_blocks, overlap);
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
    pub(crate) fn pick_kv_indexed(&mut self, sc: &Scoring) -> Option<(usize, u32)> {
        let request_blocks = self.request_blocks();
        let published: &Published = self.published;
        let holders = published.holders()?;
        let request: &Request = self.request;
        let params = self.cost;
        let workers: &[WorkerState] = self.workers;
        let matched = &mut *self.matched;
        matched.clear();
        let bs = params.block_size;
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
            let cost = params.kv_cost(&workers[i], request, request_blocks, overlap);
            if better(best, cost, i) {
                best = Some((cost, i, overlap));
            }
        }
        if let Some(&(_, i)) = sc
            .by_load
            .iter()
            .find(|(_, i)| matched_slots & bit(*i) == 0)
        {
            let cost = params.kv_cost(&workers[i], request, request_blocks, 0);
            if better(best, cost, i) {
                best = Some((cost, i, 0));
            }
        }
        best.map(|(_, i, overlap)| (i, overlap))
    }
}

/// The row of the lowest cost, ties broken uniformly: the `k`-th worker
/// tied at the current best replaces it with probability `1/k` (Dynamo's
/// `DefaultPicker::pick` at temperature 0, with the seeded generator in
/// place of `fastrand`).
pub(crate) fn lowest_row(scores: &[(usize, f64, u32)], rng: &mut Rng) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    let mut ties = 0u64;
    for (row, &(_, cost, _)) in scores.iter().enumerate() {
        match best {
            Some((_, b)) if cost > b => {}
            Some((_, b)) if cost == b => {
                ties += 1;
                if rng.below(ties) == 0 {
                    best = Some((row, b));
                }
            }
            _ => {
                best = Some((row, cost));
                ties = 1;
            }
        }
    }
    best.map(|(row, _)| row)
}

/// A row sampled with probability proportional to `exp(-(cost - min) /
/// ((max - min) * temperature))`, `sample` uniform in `[0, 1)`: the first
/// row whose cumulative probability reaches `sample` (the last if rounding
/// leaves it short). All rows are equally likely when every cost is equal.
/// After `softmax_sample_index` (`dynamo-custom-policy-builtin`
/// `default/picker.rs`), costs normalised by their range so the temperature
/// is scale-free.
pub(crate) fn softmax_row(
    scores: &[(usize, f64, u32)],
    temperature: f64,
    sample: f64,
) -> Option<usize> {
    let (lo, hi) = scores
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), s| {
            (lo.min(s.1), hi.max(s.1))
        });
    if scores.is_empty() {
        return None;
    }
    let weight = |cost: f64| {
        if lo == hi || !(hi - lo).is_finite() {
            1.0
        } else {
            (-(cost - lo) / ((hi - lo) * temperature)).exp()
        }
    };
    let total: f64 = scores.iter().map(|s| weight(s.1)).sum();
    let mut cumulative = 0.0;
    for (row, s) in scores.iter().enumerate() {
        cumulative += weight(s.1) / total;
        if sample <= cumulative {
            return Some(row);
        }
    }
    Some(scores.len() - 1)
}
