//! The handoff commands: destination reservation and activation, source
//! release and cancellation.
//!
//! Source side, after vLLM's NIXL connector
//! (`vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py`): a
//! prefill for a remote decode finishes, `request_finished` returns
//! `delay_free_blocks = True` and the scheduler skips `_free_blocks`
//! (`vllm/v1/core/sched/scheduler.py` `Scheduler._free_request`); the blocks
//! are freed when the reader reports `finished_sending`
//! (`_update_from_kv_xfer_finished`) or when `VLLM_NIXL_ABORT_REQUEST_TIMEOUT`
//! expires. Here the reader's completion and the expiry both arrive as
//! [`SchedulerCommand::ReleaseSource`](handoff_core::SchedulerCommand).
//!
//! Destination side: NIXL's `get_num_new_matched_tokens` reports the
//! uncached prompt suffix as loadable asynchronously, `allocate_slots` is
//! called with `delay_cache_blocks=True` (blocks owned, nothing cached), and
//! the request waits as `WAITING_FOR_REMOTE_KVS` outside the running batch.
//! When the transfer completes, `Scheduler._update_waiting_for_remote_kv`
//! caches the blocks, sets `num_computed_tokens` to the prompt length minus
//! one (the last prompt token is recomputed to sample the first output
//! token) and the request becomes ordinary waiting work.

use crate::block_pool::Owner;
use crate::core::VllmCore;
use crate::sequence::{Kind, Phase};
use handoff_core::{
    CommandOutcome, DestinationReservationId, HandoffId, PerfModel, Request, ReservationSummary,
};

impl<P: PerfModel> VllmCore<P> {
    /// Pins the cached prefix and allocates fresh, unpublished blocks for the
    /// rest of the prompt, all or nothing. On `Unavailable` nothing observable
    /// changed: only scratch buffers were written.
    pub(crate) fn reserve(&mut self, id: HandoffId, request: Request) -> CommandOutcome {
        if self.cfg.refuse_destination_reservation
            || self.destinations.contains_key(&id)
            || !self.fits_pool(&request, false)
        {
            return CommandOutcome::Unsupported(Some(request));
        }
        let bs = self.bs();
        let prompt = u64::from(request.prompt_tokens);
        let mut hashes = std::mem::take(&mut self.scratch_hashes);
        if self.cfg.enable_prefix_caching {
            request.block_hashes(self.cfg.block_tokens(), &mut hashes);
        } else {
            hashes.clear();
        }
        let mut hits = std::mem::take(&mut self.hits);
        // vLLM never hits the whole prompt: the last token is recomputed.
        let evictable = self.find_hits(&hashes, (prompt - 1) / bs, &mut hits);
        let matched = hits.len() as u64;
        let fresh = self.blocks_for(prompt) - matched;
        let required = fresh + evictable + self.watermark_now();
        if required > self.pool.free_len() {
            self.scratch_hashes = hashes;
            self.hits = hits;
            return CommandOutcome::Unavailable(Some(request));
        }

        let table_cap = self.blocks_for(prompt + u64::from(request.max_output_tokens.max(1)));
        let s = self
            .seqs
            .insert(&request, Kind::Destination(id), Phase::Reserved);
        self.next_reservation += 1;
        let reservation = DestinationReservationId(self.next_reservation);
        {
            let seq = self.seqs.get_mut(s);
            std::mem::swap(&mut seq.hashes, &mut hashes);
            seq.owner = Owner::Reserved;
            seq.reservation = reservation;
            seq.matched = matched as u32;
            seq.published = matched as u32;
            seq.blocks.reserve(table_cap as usize);
            for &b in &hits {
                self.pool.touch(b, Owner::Reserved);
                seq.blocks.push(b);
            }
        }
        self.grow(s, prompt);
        self.scratch_hashes = hashes;
        self.hits = hits;
        self.destinations.insert(id, s);
        CommandOutcome::Reserved(ReservationSummary {
            reservation: Some(reservation),
            physical_blocks: fresh,
            matched_prefix_tokens: matched * bs,
            transfer_tokens: prompt - matched * bs,
            transfer_blocks: fresh,
            request_slot: false,
            decode_headroom_tokens: 0,
        })
    }

    /// The incoming KV is valid: the reservation's blocks become active,
    /// newly valid prompt blocks are published once (the reused prefix is
    /// not), a suffix block cached meanwhile by someone else is replaced by
    /// the canonical one, and the request queues to decode without
    /// recomputing or reallocating its prompt.
    pub(crate) fn activate(&mut self, id: HandoffId) -> CommandOutcome {
        let Some(s) = self.destinations.remove(&id) else {
            return CommandOutcome::Noop;
        };
        {
            let seq = self.seqs.get_mut(s);
            for &b in &seq.blocks {
                self.pool.retag(b, Owner::Reserved, Owner::Active);
            }
            seq.owner = Owner::Active;
        }
        let prompt = u64::from(self.seqs.get(s).prompt);
        self.commit_prompt(s, prompt);
        let seq = self.seqs.get_mut(s);
        seq.computed = prompt.saturating_sub(1);
        seq.prebuilt = true;
        // Its one-token pass samples from KV that is all in place: it is
        // timed as a decode, not as a prefill.
        seq.decoding = true;
        seq.phase = Phase::Waiting;
        self.waiting.push_back(s);
        CommandOutcome::Applied
    }

    /// Frees a reservation's fresh blocks (they were never published, so no
    /// `Removed`) and unlocks its reused prefix. After activation the
    /// request is aborted wherever it is, running or waiting (vLLM
    /// `Scheduler.finish_requests` with `FINISHED_ABORTED`): its blocks are
    /// freed and stay as evictable cache, and it does not report finishing.
    pub(crate) fn cancel_destination(&mut self, id: HandoffId) -> CommandOutcome {
        if let Some(s) = self.destinations.remove(&id) {
            self.release_blocks(s);
            self.seqs.remove(s);
            return CommandOutcome::Applied;
        }
        let mine = |seqs: &crate::sequence::Slab, s: u32| seqs.get(s).kind == Kind::Destination(id);
        let s = if let Some(pos) = self.running.iter().position(|&s| mine(&self.seqs, s)) {
            self.running.remove(pos)
        } else if let Some(pos) = self.waiting.iter().position(|&s| mine(&self.seqs, s)) {
            match self.waiting.remove(pos) {
                Some(s) => s,
                None => return CommandOutcome::Noop,
            }
        } else {
            return CommandOutcome::Noop;
        };
        self.release_blocks(s);
        self.seqs.remove(s);
        CommandOutcome::Applied
    }

    /// The deferred free of a held source. Before the prefill completed there
    /// is nothing held yet, so this is a no-op.
    pub(crate) fn release_source(&mut self, id: HandoffId) -> CommandOutcome {
        match self.sources.get(&id) {
            Some(&s) if self.seqs.get(s).phase == Phase::Held => {
                self.sources.remove(&id);
                self.release_blocks(s);
                self.seqs.remove(s);
                CommandOutcome::Applied
            }
            _ => CommandOutcome::Noop,
        }
    }

    /// Abandons a handoff prefill: while computing it is aborted like any
    /// request (vLLM `Scheduler.finish_requests`), while held its blocks are
    /// freed. Either way its computed prompt blocks stay as evictable cache.
    pub(crate) fn cancel_source(&mut self, id: HandoffId) -> CommandOutcome {
        let Some(s) = self.sources.remove(&id) else {
            return CommandOutcome::Noop;
        };
        match self.seqs.get(s).phase {
            Phase::Running => {
                if let Some(pos) = self.running.iter().position(|&r| r == s) {
                    self.running.remove(pos);
                }
            }
            Phase::Waiting => {
                if let Some(pos) = self.waiting.iter().position(|&r| r == s) {
                    self.waiting.remove(pos);
                }
            }
            Phase::Held | Phase::Reserved | Phase::Vacant => {}
        }
        self.release_blocks(s);
        self.seqs.remove(s);
        CommandOutcome::Applied
    }
}
