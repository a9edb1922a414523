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
//! Destination side: the decode request joins the back of `Scheduler.waiting`
//! like any request and holds nothing. Only `Scheduler.schedule`'s waiting
//! loop allocates for it, once per engine step, in FCFS order with the rest
//! of the queue (so behind preempted requests, which go to the front), not
//! in a step that preempted, and only while a running slot (`max_num_seqs`)
//! and token budget remain: NIXL's `get_num_new_matched_tokens` reports the
//! uncached prompt suffix as loadable asynchronously, `allocate_slots` is
//! called with `delay_cache_blocks=True` (blocks owned, nothing cached) and
//! `reserved_blocks` = what in-flight prefills still need
//! (`_inflight_prefill_reserved_blocks`), the first that does not fit stops
//! the loop, and the request moves to `skipped_waiting` as
//! `WAITING_FOR_REMOTE_KVS`, outside the running batch, passed over by
//! later waiting loops. The core answers `ReserveDestination` with `Queued`
//! and reports the grant in the step's `StepOutput::reserved`. When the
//! transfer completes, `Scheduler._update_waiting_for_remote_kv` caches the
//! blocks, sets `num_computed_tokens` to the prompt length minus one (the
//! last prompt token is recomputed to sample the first output token) and
//! the request becomes runnable in `skipped_waiting`, which the next
//! waiting loop scans first (module `admit`).
//!
//! Recompute instead of pull (vLLM `nixl/pull_scheduler.py`,
//! `NixlPullConnectorScheduler.get_num_new_matched_tokens` with
//! `_should_recompute_remote_kv`): when the tokens to pull past the
//! decode's own prefix hit number fewer than `kv_recompute_threshold`
//! ([`crate::VllmConfig::kv_recompute_threshold`]), upstream answers `(0,
//! False)` and the decode prefills them itself, while
//! `update_state_after_alloc` still registers an empty receive so that the
//! worker notifies the prefill to free its blocks (`_read_blocks` with no
//! local blocks). Here the grant reports a transfer of zero tokens and
//! blocks: the role machines run as for a read, so the source is released
//! by the destination's `ReaderCompleted` after the transfer's fixed
//! latency (the notice), no bytes move, and activation leaves the request
//! with only its prefix hit computed, so its admission prefills the rest
//! locally (and publishes those blocks as it computes them). Upstream the
//! local prefill is scheduled in the step that made the choice; here it
//! waits for that zero-byte notice first.

use crate::block_pool::Owner;
use crate::config::should_recompute_remote_kv;
use crate::core::VllmCore;
use crate::sequence::{Kind, Phase};
use handoff_core::{
    CommandOutcome, DestinationReservationId, HandoffId, Request, ReservationSummary, StepOutput,
};
use handoff_perf::PerfModel;

impl<P: PerfModel> VllmCore<P> {
    /// Takes a destination into the waiting queue, at its back, holding
    /// nothing: its blocks are allocated when the waiting loop reaches it
    /// ([`VllmCore::grant`]). Refuses only what can never be reserved.
    pub(crate) fn reserve(&mut self, id: HandoffId, request: Request) -> CommandOutcome {
        if self.cfg.refuse_destination_reservation
            || self.destinations.contains_key(&id)
            || !self.fits_pool(&request, false)
        {
            return CommandOutcome::Unsupported(Some(request));
        }
        let s = self
            .seqs
            .insert(&request, Kind::Destination(id), Phase::Queued);
        self.hash_prompt(s, &request);
        self.waiting.push_back(s);
        self.destinations.insert(id, s);
        self.unreported += 1;
        CommandOutcome::Queued
    }

    /// Whether queued destination `s` fits now: pins of its cached prefix
    /// (written to `hits`) and fresh blocks for the rest of the prompt, plus
    /// the watermark while anything runs, in the free blocks less the
    /// `reserved` blocks in-flight prefills still need (vLLM
    /// `KVCacheManager.allocate_slots` with `num_external_computed_tokens`
    /// and `reserved_blocks`, never hitting the last prompt token). Returns
    /// the evictable hits on success. Changes nothing.
    pub(crate) fn reservation_fits(
        &self,
        s: u32,
        reserved: u64,
        hits: &mut Vec<u32>,
    ) -> Option<u64> {
        let seq = self.seqs.get(s);
        let prompt = u64::from(seq.prompt);
        let max_hit = (prompt - 1) / self.bs();
        let room = self.admission_room(reserved);
        self.fit_hits(&seq.hashes, max_hit, self.blocks_for(prompt), room, hits)
    }

    /// The waiting loop reached queued destination `s` (vLLM
    /// `Scheduler.schedule`: `get_num_new_matched_tokens` reports the prompt
    /// as loadable asynchronously, `allocate_slots` runs with
    /// `delay_cache_blocks=True` and the request turns
    /// `WAITING_FOR_REMOTE_KVS`; the caller moves it to `skipped`). All or
    /// nothing: on success the cached prefix is pinned, fresh unpublished
    /// blocks hold the rest and the grant is reported in `out.reserved`;
    /// otherwise nothing changed and `false` is returned.
    pub(crate) fn grant(
        &mut self,
        s: u32,
        reserved: u64,
        hits: &mut Vec<u32>,
        out: &mut StepOutput,
    ) -> bool {
        if self.reservation_fits(s, reserved, hits).is_none() {
            return false;
        }
        let bs = self.bs();
        self.next_reservation += 1;
        let reservation = DestinationReservationId(self.next_reservation);
        let (id, prompt, max_out) = {
            let seq = self.seqs.get(s);
            (seq.kind, u64::from(seq.prompt), u64::from(seq.max_out))
        };
        let Kind::Destination(id) = id else {
            return false;
        };
        let matched = hits.len() as u64;
        let fresh = self.blocks_for(prompt) - matched;
        let table_cap = self.blocks_for(prompt + max_out);
        let count = prompt - matched * bs;
        let recompute = should_recompute_remote_kv(self.cfg.kv_recompute_threshold, count);
        {
            let seq = self.seqs.get_mut(s);
            seq.recompute = recompute;
            seq.phase = Phase::Reserved;
            seq.owner = Owner::Reserved;
            seq.reservation = reservation;
            seq.matched = matched as u32;
            seq.published = matched as u32;
            seq.blocks.reserve(table_cap as usize);
            if !seq.reported_unavailable {
                self.unreported -= 1;
            }
            for &b in hits.iter() {
                self.pool.touch(b, Owner::Reserved);
                seq.blocks.push(b);
            }
        }
        self.grow(s, prompt);
        self.awaiting_kv += 1;
        out.reserved.push((
            id,
            ReservationSummary {
                reservation: Some(reservation),
                physical_blocks: fresh,
                matched_prefix_tokens: matched * bs,
                transfer_tokens: if recompute { 0 } else { count },
                transfer_blocks: if recompute { 0 } else { fresh },
                request_slot: false,
                decode_headroom_tokens: 0,
            },
        ));
        true
    }

    /// Reports every queued destination not reported yet as not granted by
    /// this call (once each: the role counts a repeat as a duplicate).
    pub(crate) fn report_ungranted(&mut self, out: &mut StepOutput) {
        if self.unreported == 0 {
            return;
        }
        // A destination passed over for max_loras waits ungranted in
        // `skipped` (module `admit`).
        for &s in self.skipped.iter().chain(&self.waiting) {
            let seq = self.seqs.get_mut(s);
            if seq.phase == Phase::Queued && !seq.reported_unavailable {
                seq.reported_unavailable = true;
                if let Kind::Destination(id) = seq.kind {
                    out.unavailable.push(id);
                }
            }
        }
        self.unreported = 0;
    }

    /// The incoming KV is valid (vLLM `_update_waiting_for_remote_kv`): the
    /// reservation's blocks become active, newly valid prompt blocks are
    /// published once (the reused prefix is not), a suffix block cached
    /// meanwhile by someone else is replaced by the canonical one, and the
    /// request becomes runnable where it stands in `skipped` (promoted by
    /// `_try_promote_blocked_waiting_request` at the next waiting loop),
    /// without recomputing or reallocating its prompt.
    pub(crate) fn activate(&mut self, id: HandoffId) -> CommandOutcome {
        match self.destinations.get(&id) {
            Some(&s) if self.seqs.get(s).phase == Phase::Reserved => {
                self.destinations.remove(&id);
                self.awaiting_kv -= 1;
                {
                    let seq = self.seqs.get_mut(s);
                    self.pool
                        .retag_all(&seq.blocks, Owner::Reserved, Owner::Active);
                    seq.owner = Owner::Active;
                }
                let prompt = u64::from(self.seqs.get(s).prompt);
                if self.seqs.get(s).recompute {
                    // Nothing was read: its blocks are in place but only the
                    // prefix hit is valid; the admission that runs it
                    // computes and publishes the rest as a prefill.
                    let bs = self.bs();
                    let seq = self.seqs.get_mut(s);
                    seq.computed = u64::from(seq.matched) * bs;
                    seq.prebuilt = true;
                    seq.decoding = false;
                    seq.phase = Phase::Waiting;
                    return CommandOutcome::Applied;
                }
                self.commit(s, prompt);
                let seq = self.seqs.get_mut(s);
                seq.computed = prompt.saturating_sub(1);
                seq.prebuilt = true;
                // Its one-token pass samples from KV that is all in place: it
                // is timed as a decode, not as a prefill.
                seq.decoding = true;
                seq.phase = Phase::Waiting;
                CommandOutcome::Applied
            }
            // Not granted yet: there is nothing to activate.
            _ => CommandOutcome::Noop,
        }
    }

    /// Forgets a queued destination, or frees a reservation's fresh blocks
    /// (they were never published, so no `Removed`) and unlocks its reused
    /// prefix; either way it leaves the waiting queue. After activation the
    /// request is aborted wherever it is, running or waiting (vLLM
    /// `Scheduler.finish_requests` with `FINISHED_ABORTED`): its blocks are
    /// freed and stay as evictable cache, and it does not report finishing.
    pub(crate) fn cancel_destination(&mut self, id: HandoffId) -> CommandOutcome {
        if let Some(s) = self.destinations.remove(&id) {
            match self.seqs.get(s).phase {
                Phase::Reserved => self.awaiting_kv -= 1,
                _ if !self.seqs.get(s).reported_unavailable => self.unreported -= 1,
                _ => {}
            }
            if let Some(pos) = self.waiting.iter().position(|&w| w == s) {
                self.waiting.remove(pos);
            } else if let Some(pos) = self.skipped.iter().position(|&w| w == s) {
                self.skipped.remove(pos);
            }
            self.release_blocks(s);
            self.seqs.remove(s);
            return CommandOutcome::Applied;
        }
        let mine = |seqs: &crate::sequence::Slab, s: u32| seqs.get(s).kind == Kind::Destination(id);
        let s = if let Some(pos) = self.running.iter().position(|&s| mine(&self.seqs, s)) {
            self.running.remove(pos)
        } else if let Some(pos) = self.skipped.iter().position(|&s| mine(&self.seqs, s)) {
            match self.skipped.remove(pos) {
                Some(s) => s,
                None => return CommandOutcome::Noop,
            }
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
            Phase::Held | Phase::Queued | Phase::Reserved | Phase::Vacant => {}
        }
        self.release_blocks(s);
        self.seqs.remove(s);
        CommandOutcome::Applied
    }
}
