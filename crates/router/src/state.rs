//! What a [`Router`](crate::Router) keeps per worker, and the kv-aware
//! index over those workers. Both are read by the policy view
//! ([`crate::RouterView`]) and written only by the router.

use crate::holders::Slots;
use crate::load::WorkerLoad;
use handoff_core::{KvCapacitySnapshot, WorkerId};
use std::collections::BTreeSet;

/// One worker as its router knows it. Its totals are always the sums of its
/// live bookings (`Router::audit` checks it).
#[derive(Clone, Debug)]
pub(crate) struct WorkerState {
    pub(crate) id: WorkerId,
    pub(crate) available: bool,
    pub(crate) booked_blocks: u64,
    pub(crate) booked_prefill_tokens: u64,
    pub(crate) booked_requests: u64,
    /// Full prompt blocks of the live bookings (Dynamo's active blocks,
    /// read by `KvAware` in a decode pool).
    pub(crate) booked_prompt_blocks: u64,
    pub(crate) selected: u64,
    pub(crate) capacity: Option<KvCapacitySnapshot>,
    pub(crate) last_event_id: Option<u64>,
    /// This worker's entry in [`Scoring::by_load`], when it has one.
    pub(crate) load_key: Option<u128>,
}

impl WorkerState {
    /// A selectable worker with nothing booked, reported or published.
    pub(crate) fn new(id: WorkerId) -> Self {
        WorkerState {
            id,
            available: true,
            booked_blocks: 0,
            booked_prefill_tokens: 0,
            booked_requests: 0,
            booked_prompt_blocks: 0,
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

/// What kv-aware selection keeps up to date as bookings arrive, so that
/// choosing costs O(blocks matched + log workers) rather than O(workers ×
/// blocks): the available workers ordered by their cost when they hold none
/// of the request's prefix. Which workers hold each published block is the
/// pooled layout of [`Published`](crate::published::Published), which a
/// pool with `Scoring` always uses.
///
/// That zero-overlap cost orders workers exactly as the integer
/// `Router::load_key` does (see there), which is why this path is taken
/// only for a power-of-two block size; other pools, pools of more than
/// [`MAX_SLOTS`](crate::holders::MAX_SLOTS) workers and pools of fewer than
/// [`INDEX_MIN_WORKERS`](crate::router::INDEX_MIN_WORKERS) (where upkeep
/// costs more than it saves) score every worker as before. Both paths choose
/// the same worker (`indexed_selection_equals_the_scan` checks it).
#[derive(Clone, Debug, Default)]
pub(crate) struct Scoring {
    /// `(load_key, slot)` of every available worker.
    pub(crate) by_load: BTreeSet<(u128, usize)>,
    /// The slots of `by_load`.
    pub(crate) alive: Slots,
}
