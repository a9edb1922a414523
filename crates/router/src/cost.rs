//! What a request costs a worker of a pool: the blocks its booking holds,
//! the prefix a worker has already published, and the kv-aware cost that
//! trades one against the other. Shared by the router (booking) and the
//! policy view (choosing), so both count the same way.

use crate::published::Published;
use crate::role::PoolRole;
use crate::state::WorkerState;
use handoff_core::Request;

/// The parts of a router's configuration its costs read (copied from
/// [`RouterConfig`](crate::RouterConfig) by `RouterConfig::cost_params`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct CostParams {
    /// The pool served.
    pub(crate) role: PoolRole,
    /// The engines' KV block size in tokens.
    pub(crate) block_size: u32,
    /// Blocks of cost one overlapping block saves, as configured (possibly
    /// not finite or not positive; [`CostParams::weight`] is the one in use).
    pub(crate) overlap_score_weight: f64,
    /// `KvAware`'s knobs.
    pub(crate) kv: KvKnobs,
    /// The pool is an aggregated frontend's (see `RouterConfig::aggregated`).
    pub(crate) aggregated: bool,
}

/// The knobs of Dynamo 1.6.1's default worker scorer, with its names and
/// defaults (`dynamo-kv-router` `scheduling/config.rs`, `KvRouterConfig`
/// and its `Default`). A value that is not finite and non-negative counts
/// as 0 (as [`KvKnobs::sanitized`] says); the command line rejects it
/// before that.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KvKnobs {
    /// Blocks of prompt load one overlapping (published) block takes off
    /// (`overlap_score_credit`, default 1.0; 0 ignores prefix overlap).
    pub overlap_score_credit: f64,
    /// Multiplies the prompt-side load after the overlap credit
    /// (`prefill_load_scale`, default 1.0).
    pub prefill_load_scale: f64,
    /// Blocks of cost per request live on a worker
    /// (`decode_active_request_weight`, default 0.0).
    pub decode_active_request_weight: f64,
    /// Softmax temperature over the costs; 0 takes the lowest
    /// (`router_temperature`, default 0.0).
    pub router_temperature: f64,
}

impl Default for KvKnobs {
    fn default() -> Self {
        KvKnobs {
            overlap_score_credit: 1.0,
            prefill_load_scale: 1.0,
            decode_active_request_weight: 0.0,
            router_temperature: 0.0,
        }
    }
}

/// `x` if finite and non-negative, else 0.
fn non_negative(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 {
        x
    } else {
        0.0
    }
}

impl KvKnobs {
    /// The knobs in use: each one finite and non-negative, else 0.
    pub fn sanitized(self) -> Self {
        KvKnobs {
            overlap_score_credit: non_negative(self.overlap_score_credit),
            prefill_load_scale: non_negative(self.prefill_load_scale),
            decode_active_request_weight: non_negative(self.decode_active_request_weight),
            router_temperature: non_negative(self.router_temperature),
        }
    }
}

impl CostParams {
    /// Blocks a booking of `request` holds in this pool: prompt blocks in a
    /// prefill pool, prompt + output blocks in a decode pool.
    pub(crate) fn request_blocks(&self, request: &Request) -> u64 {
        let bs = self.block_size;
        match self.role {
            PoolRole::Prefill => Request::blocks_for(u64::from(request.prompt_tokens), bs),
            PoolRole::Decode => Request::blocks_for(
                u64::from(request.prompt_tokens) + u64::from(request.max_output_tokens),
                bs,
            ),
        }
    }

    /// Blocks Dynamo's router tracks as a request's active footprint:
    /// its full prompt blocks (the replay router hashes
    /// `input_length / block_size` blocks, `KvRouterPlacement` in
    /// `dynamo-mocker` `replay/offline/extensions/kv_router/mod.rs`).
    pub(crate) fn prompt_full_blocks(&self, request: &Request) -> u64 {
        u64::from(request.prompt_tokens) / u64::from(self.block_size.max(1))
    }

    /// Whether `KvAware`'s cost reads the request's overlap on each worker:
    /// not in a disaggregated decode pool (Dynamo's replay forces its
    /// credit to 0) nor with a zero credit.
    pub(crate) fn dynamo_reads_overlap(&self) -> bool {
        (self.role == PoolRole::Prefill || self.aggregated)
            && self.kv.sanitized().overlap_score_credit > 0.0
    }

    /// Whether `KvAware` books the request's uncached prompt tokens as
    /// prefill load: in a prefill pool, and in an aggregated one (Dynamo's
    /// aggregated router tracks prefill tokens until the first token).
    pub(crate) fn dynamo_books_prefill(&self) -> bool {
        self.role == PoolRole::Prefill || self.aggregated
    }

    /// Dynamo 1.6.1's cost of placing `request` on `w` (lower wins), in
    /// blocks, after `DefaultScorer::score_worker`
    /// (`dynamo-custom-policy-builtin` `default/scorer.rs`; the reference
    /// is `DefaultWorkerScorer::worker_logit` in `dynamo-kv-router`
    /// `scheduling/selector/reference.rs`):
    ///
    /// `prefill_load_scale * max(0, (booked_prefill_tokens + prompt_tokens)
    /// / block_size - overlap_score_credit * overlap) + active_blocks +
    /// decode_active_request_weight * booked_requests`
    ///
    /// with the pool's terms as Dynamo's disaggregated replay configures
    /// them (`derive_prefill_router_config` and
    /// `derive_decode_router_config`, `dynamo-mocker`
    /// `replay/offline/extensions/kv_router/composition.rs`):
    ///
    /// - prefill pool: active blocks are not tracked (0);
    /// - disaggregated decode pool: no prefill tokens and no overlap credit,
    ///   so the first term is 0; active blocks are the full prompt blocks of
    ///   its live requests plus this request's;
    /// - aggregated pool: every term. Dynamo counts a block shared by two
    ///   live requests on a worker once; here each request's blocks count.
    pub(crate) fn dynamo_cost(&self, w: &WorkerState, request: &Request, overlap: u32) -> f64 {
        let k = self.kv.sanitized();
        let bs = f64::from(self.block_size.max(1));
        let requests = k.decode_active_request_weight * w.booked_requests as f64;
        let prefill = if self.dynamo_books_prefill() {
            let tokens = w
                .booked_prefill_tokens
                .saturating_add(u64::from(request.prompt_tokens));
            let credit = k.overlap_score_credit * f64::from(overlap);
            k.prefill_load_scale * (tokens as f64 / bs - credit).max(0.0)
        } else {
            0.0
        };
        let active = if self.role == PoolRole::Decode {
            w.booked_prompt_blocks
                .saturating_add(self.prompt_full_blocks(request)) as f64
        } else {
            0.0
        };
        prefill + active + requests
    }

    /// The overlap weight in use: finite and positive, else 0.
    pub(crate) fn weight(&self) -> f64 {
        let w = self.overlap_score_weight;
        if w.is_finite() && w > 0.0 {
            w
        } else {
            0.0
        }
    }

    /// `KvLegacy` cost of placing `request` on `w`, in blocks (lower wins).
    ///
    /// Prefill pool, after Dynamo's prefill formula:
    /// `max(0, (booked_prefill_tokens + prompt_tokens) / block_size
    ///  - weight * overlap) + booked_blocks + request_blocks`.
    ///
    /// Decode pool, after Dynamo's decode formula with a positive overlap
    /// credit: `max(0, booked_blocks + request_blocks - weight * overlap)`.
    pub(crate) fn kv_cost(
        &self,
        w: &WorkerState,
        request: &Request,
        request_blocks: u64,
        overlap: u32,
    ) -> f64 {
        let credit = self.weight() * f64::from(overlap);
        let decode_blocks = w.booked_blocks.saturating_add(request_blocks) as f64;
        match self.role {
            PoolRole::Prefill => {
                let tokens = w
                    .booked_prefill_tokens
                    .saturating_add(u64::from(request.prompt_tokens));
                let raw = tokens as f64 / f64::from(self.block_size.max(1));
                (raw - credit).max(0.0) + decode_blocks
            }
            PoolRole::Decode => (decode_blocks - credit).max(0.0),
        }
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
