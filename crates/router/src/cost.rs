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

    /// The overlap weight in use: finite and positive, else 0.
    pub(crate) fn weight(&self) -> f64 {
        let w = self.overlap_score_weight;
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
