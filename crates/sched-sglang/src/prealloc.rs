//! Destination-first preallocation: the decode side of a handoff.
//!
//! After SGLang `srt/disaggregation/decode.py` `DecodePreallocQueue`
//! (`pop_preallocated`, `_allocatable_tokens` /
//! `_allocatable_token_budgets`, `_match_prefix_and_lock`,
//! `_required_alloc_tokens`, `_pre_alloc`), `DecodeTransferQueue` and
//! `get_new_prebuilt_batch`:
//!
//! 1. a free request slot is required first;
//! 2. the prompt is matched against the decode radix cache; the budget is
//!    *allocatable tokens* = free + evictable tokens (after the match's lock
//!    takes its pages out of the evictable pool) − max(
//!    `num_reserved_decode_tokens` × (running + transferring + waiting
//!    requests), the largest single running request's clipped
//!    `max_new_tokens + input` minus everything retractable) − what
//!    retracted requests need back;
//! 3. the request fits when both its page-aligned missing pages plus
//!    `num_reserved_decode_tokens`, and its uncached input plus clipped
//!    `max_new_tokens` minus the retractable tokens, are within budget;
//! 4. then the slot is taken, the matched prefix locked, and only the
//!    page-aligned delta allocated (evicting just the deficit). The decode
//!    headroom is an admission quantity: it is counted in every later
//!    budget while the request is reserved, transferring, waiting or
//!    running, and never as pages.
//!
//! The caller keeps the queue's FIFO order; a refusal holds nothing. When
//! the KV has arrived, activation publishes the delta blocks (Stored, once;
//! the reused prefix is not republished) and the request waits to join the
//! batch as a prebuilt extend, with no recompute.

use crate::core::SglangCore;
use crate::radix::{Owner, NIL};
use crate::seq::{Kind, Phase, Seq};
use handoff_core::{
    CommandOutcome, DestinationReservationId, HandoffId, Request, ReservationSummary,
};
use handoff_perf::PerfModel;

impl<P: PerfModel> SglangCore<P> {
    /// `_allocatable_token_budgets` with `newly_locked` pages about to leave
    /// the evictable pool, counting what the retracted queue needs back when
    /// `count_retracted`; also returns the retractable tokens of the batch.
    pub(crate) fn allocatable_tokens_with(
        &self,
        newly_locked: u64,
        count_retracted: bool,
    ) -> (i128, i128) {
        // Idle session slots and snapshots are evicted like cache.
        let available = i128::from(
            (self.free_pages() + self.radix.evictable_pages() + self.evictable_session_pages())
                .saturating_sub(newly_locked),
        ) * i128::from(self.page);
        // Kept as the batch changes (`BatchSums`), not walked here.
        let retractable = i128::from(self.batch_sums.fill());
        let need_single = self
            .batch_sums
            .largest_need()
            .map_or(0, |l| i128::from(l) - retractable);
        let headroom = i128::from(self.cfg.num_reserved_decode_tokens)
            * i128::from(self.decode_bound_requests());
        let mut allocatable =
            available - headroom.max(need_single) - i128::from(self.retracted_fill);
        if count_retracted {
            allocatable -= i128::from(self.retracted_required);
        }
        (allocatable, retractable)
    }

    /// `ReserveDestination`: all or nothing; see the module docs.
    pub(crate) fn reserve(&mut self, id: HandoffId, request: Request) -> CommandOutcome {
        if self.reservations.contains_key(&id) {
            return CommandOutcome::Noop;
        }
        let prompt = u64::from(request.prompt_tokens.max(1));
        let max_out = u64::from(request.max_output_tokens.max(1));
        let clipped_new = max_out.min(u64::from(self.cfg.max_new_tokens_clip));
        let reserved_decode = u64::from(self.cfg.num_reserved_decode_tokens);
        let whole = self.ceil_paged(prompt) + reserved_decode;
        if whole > self.total_tokens() || !self.fits_empty_pool(prompt, max_out) {
            return CommandOutcome::Unsupported(Some(request));
        }
        // `process_decode_queue`: while retracted requests wait to resume,
        // nothing new is preallocated.
        if (self.free_slots == 0 && !self.can_reclaim_request_slot()) || !self.retracted.is_empty()
        {
            return CommandOutcome::Unavailable(Some(request));
        }
        // A session's KV lives in its slot, outside the shared tree.
        let session = request.session.filter(|_| self.sessions_on());
        // The hashes are only ever read by the decode radix cache (matching
        // here, publishing at activation): a chunk cache, or a session's
        // slot, never needs them.
        self.scratch_hashes.clear();
        if self.cfg.disaggregation_decode_enable_radix_cache && session.is_none() {
            request.block_hashes(self.cfg.event_block_tokens, &mut self.scratch_hashes);
        }
        // A chunk cache matches nothing: the whole prompt is allocated and
        // transferred.
        let (matched, deepest) = if self.cfg.disaggregation_decode_enable_radix_cache {
            self.radix.match_prefix(&self.scratch_hashes)
        } else {
            (0, NIL)
        };
        let prefix_tokens = matched * self.block_tokens;
        let delta_pages = self.pages_for(prompt) - prefix_tokens / self.page;
        let newly_locked = if deepest == NIL {
            0
        } else {
            self.radix.unlocked_pages_on_path(deepest)
        };
        let (allocatable, retractable) = self.allocatable_tokens_with(newly_locked, true);
        let required = i128::from(delta_pages * self.page + reserved_decode);
        let projected = i128::from(prompt - prefix_tokens + clipped_new) - retractable;
        if required.max(projected) > allocatable {
            return CommandOutcome::Unavailable(Some(request));
        }

        // Admitted: now an idle session may give up its request slot.
        self.reclaim_request_slot();
        let hashes = std::mem::take(&mut self.scratch_hashes);
        let mut seq = Seq::new(
            request.id,
            Kind::Destination(id),
            Phase::Reserved,
            prompt,
            max_out,
            hashes,
        );
        seq.owner = Owner::Reserved;
        seq.session = session;
        seq.has_slot = true;
        seq.node = deepest;
        seq.tree_blocks = matched;
        seq.computed = prompt;
        let idx = self.seqs.insert(seq);
        self.free_slots -= 1;
        if deepest != NIL {
            self.radix.lock(deepest, Owner::Reserved);
        }
        let evicted_enough = self.ensure_free(delta_pages, false);
        debug_assert!(evicted_enough, "preallocation budget over-committed");
        if !evicted_enough {
            // Unreachable by the budget above; undo so nothing stays held.
            self.release_kv(idx, false);
            self.seqs.remove(idx);
            return CommandOutcome::Unavailable(Some(request));
        }
        self.alloc_private(idx, delta_pages);
        self.reservations.insert(id, idx);
        let reservation = DestinationReservationId(self.next_reservation);
        self.next_reservation += 1;
        CommandOutcome::Reserved(ReservationSummary {
            reservation: Some(reservation),
            physical_blocks: delta_pages,
            matched_prefix_tokens: prefix_tokens,
            transfer_tokens: prompt - prefix_tokens,
            transfer_blocks: delta_pages,
            request_slot: true,
            decode_headroom_tokens: reserved_decode,
        })
    }

    /// `ActivateDestination`: the KV is valid. The delta becomes active and,
    /// with the decode radix cache on, is published (a chunk cache publishes
    /// nothing); the request queues to join the batch without recompute,
    /// carrying the first token its prefill sampled.
    pub(crate) fn activate(&mut self, id: HandoffId) -> CommandOutcome {
        let Some(idx) = self.reservations.remove(&id) else {
            return CommandOutcome::Noop;
        };
        self.relabel(idx, Owner::Active);
        if self.cfg.disaggregation_decode_enable_radix_cache {
            self.cache_prompt_blocks(idx);
        }
        if let Some(s) = self.seqs.get_mut(idx) {
            s.phase = Phase::Prebuilt;
        }
        self.prebuilt.push_back(idx);
        CommandOutcome::Applied
    }

    /// `CancelDestination`: the unpublished delta is freed without Removed
    /// events, the prefix unlocked (it stays cached) and the slot freed.
    /// After activation the request is aborted wherever it is (prebuilt,
    /// running, or retracted and offloaded), as SGLang's
    /// `abort_request` does: its KV is released into the cache and its slot
    /// freed, and it does not report finishing.
    pub(crate) fn cancel_destination(&mut self, id: HandoffId) -> CommandOutcome {
        if let Some(idx) = self.reservations.remove(&id) {
            self.release_kv(idx, false);
            self.seqs.remove(idx);
            return CommandOutcome::Applied;
        }
        let mine = |i: &u32| {
            self.seqs
                .get(*i)
                .is_some_and(|s| s.kind == Kind::Destination(id))
        };
        let idx = self
            .running
            .iter()
            .find(|i| mine(i))
            .or_else(|| self.prebuilt.iter().find(|i| mine(i)))
            .or_else(|| self.waiting.iter().find(|i| mine(i)))
            .or_else(|| self.chunked.as_ref().filter(|i| mine(i)))
            .or_else(|| self.retracted.iter().find(|i| mine(i)))
            .copied();
        let Some(idx) = idx else {
            return CommandOutcome::Noop;
        };
        let (phase, fill) = match self.seqs.get(idx) {
            Some(s) => (s.phase, s.retracted_fill),
            None => return CommandOutcome::Noop,
        };
        match phase {
            Phase::Running => {
                if let Some(r) = self.running.iter().position(|&i| i == idx) {
                    self.running.remove(r);
                    let d = self.decoding.remove(r);
                    if let Some(s) = self.seqs.get_mut(idx) {
                        d.store(s);
                    }
                }
                self.leave_running_sums(idx);
                self.running_shrank = true;
            }
            Phase::Prebuilt => self.prebuilt.retain(|&i| i != idx),
            Phase::Waiting => self.waiting.retain(|&i| i != idx),
            Phase::Chunked => {
                if self.chunked == Some(idx) {
                    self.chunked = None;
                }
            }
            Phase::Retracted => self.forget_retracted(idx),
            Phase::Held | Phase::Reserved | Phase::SessionIdle => {}
        }
        self.retracted_fill = self.retracted_fill.saturating_sub(fill);
        self.release_kv(idx, true);
        self.seqs.remove(idx);
        CommandOutcome::Applied
    }
}
