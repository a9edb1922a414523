//! The router's bookkeeping types: bookings, per-worker load and counters.

use handoff_core::{Instant, KvCapacitySnapshot, WorkerId};

/// One request's selection-time booking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Booking {
    /// The worker chosen.
    pub worker: WorkerId,
    /// Estimated blocks held until [`crate::Router::request_released`].
    pub blocks: u64,
    /// Prefill tokens held until [`crate::Router::prefill_completed`]
    /// (zero once completed, and always zero in a decode pool).
    pub prefill_tokens: u64,
    /// When it was booked.
    pub booked_at: Instant,
}

/// The answer to a selection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Selection {
    /// The worker chosen and booked.
    pub worker: WorkerId,
    /// Leading request blocks the worker had published as cache when it was
    /// chosen (computed in `KvAware` mode only; 0 otherwise).
    pub overlap_blocks: u32,
    /// Blocks booked.
    pub blocks: u64,
    /// Prefill tokens booked.
    pub prefill_tokens: u64,
    /// The DP rank the policy chose ([`crate::RoutingChoice::dp_rank`]);
    /// always `None` with the built-in policies, which route to ranks as
    /// workers of their own.
    pub dp_rank: Option<u32>,
}

/// What a release did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// Load came off `worker`.
    Released {
        /// The worker the booking was on.
        worker: WorkerId,
        /// Blocks released.
        blocks: u64,
        /// Prefill tokens released.
        prefill_tokens: u64,
    },
    /// Nothing was booked (already released or never booked); counted.
    Noop,
}

/// A worker's load as the router sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerLoad {
    /// Sum of live bookings' blocks.
    pub booked_blocks: u64,
    /// Sum of live bookings' outstanding prefill tokens.
    pub booked_prefill_tokens: u64,
    /// Live bookings.
    pub booked_requests: u64,
    /// Blocks the worker has published as reusable cache.
    pub published_blocks: u64,
    /// The worker's last capacity report.
    pub capacity: Option<KvCapacitySnapshot>,
    /// Requests ever booked here.
    pub selected: u64,
    /// Whether the worker is currently eligible for selection.
    pub available: bool,
}

/// Counters for diagnosing a run; none of them affects a decision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouterStats {
    /// Requests booked (by `select` or `book`).
    pub selections: u64,
    /// Selections refused because no worker was available, or because the
    /// routing policy refused the request or chose an unselectable worker.
    pub no_worker: u64,
    /// Choices of a routing policy naming a worker that is not selectable
    /// (also counted in `no_worker`); never made by the built-in policies.
    pub rejected_choices: u64,
    /// Bookings replaced because the request was booked again.
    pub rebookings: u64,
    /// `prefill_completed` for a request with no live booking or already
    /// completed.
    pub noop_prefill_completions: u64,
    /// `request_released` for a request with no live booking.
    pub noop_releases: u64,
    /// KV events applied.
    pub kv_events: u64,
    /// KV events for a worker this router does not serve.
    pub unknown_worker_events: u64,
    /// KV events whose id did not increase (applied anyway; idempotent).
    pub out_of_order_events: u64,
    /// `Stored` events skipped for want of their parent block.
    pub orphan_stores: u64,
    /// Hashes in `Removed` events that were not held.
    pub unknown_removals: u64,
    /// Capacity reports for a worker this router does not serve.
    pub unknown_worker_capacities: u64,
}
