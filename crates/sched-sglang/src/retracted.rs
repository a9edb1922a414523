//! The decode server's retracted queue: retraction with host offload, and
//! resumption without recompute.
//!
//! After SGLang `srt/managers/schedule_batch.py` `ScheduleBatch.release_req`
//! (on a decode server a retracted request's KV is offloaded to host memory
//! with `offload_kv_cache` before its device pages are freed) and
//! `srt/disaggregation/decode.py` (`update_running_batch` hands decode-side
//! victims to `DecodePreallocQueue.add(req, is_retracted=True)`;
//! `resume_retracted_reqs` and `SchedulerDisaggregationDecodeMixin.
//! process_decode_queue`):
//!
//! - a retracted decode-side request gives back its pages and request slot
//!   and keeps `prompt + emitted - 1` tokens of KV on the host
//!   (`_pre_alloc_fill_len`);
//! - at the start of every scheduler iteration the queue is resumed in
//!   order while a slot is free and `offloaded + num_reserved_decode_tokens`
//!   fits in the allocatable tokens not counting the queue itself
//!   (`_allocatable_token_budgets(count_retracted=False)`); a resumed request
//!   preallocates its offloaded length, reloads it (`load_kv_cache`) and joins
//!   the batch as a prebuilt request, with no prefill pass;
//! - while the queue is not empty no new preallocation is made
//!   (`process_decode_queue` returns before `pop_preallocated`), and every
//!   preallocation budget counts what the queue needs back
//!   (`count_retracted=True`).
//!
//! One departure: SGLang resumes nothing that its headroom rule refuses,
//! even with an empty batch. Here the head of the queue also resumes when
//! nothing else runs, waits to run or is reserved and its KV fits the pool,
//! so a request whose `offloaded + num_reserved_decode_tokens` exceeds the
//! whole pool cannot wedge the worker.
//!
//! Ordinary (aggregated) requests are still retracted to the waiting queue
//! and recomputed, as SGLang does outside decode mode.

use crate::core::SglangCore;
use crate::radix::{Owner, NIL};
use crate::seq::Phase;
use handoff_core::StepOutput;
use handoff_perf::PerfModel;

impl<P: PerfModel> SglangCore<P> {
    /// Offloads a retracted decode-side request: its pages and slot are
    /// freed (the prefix, if the decode radix cache is on, is unlocked and
    /// stays cached) and it waits in the retracted queue.
    pub(crate) fn offload_retracted(&mut self, idx: u32, out: &mut StepOutput) {
        let fill = self.seqs.get(idx).map_or(0, |s| s.computed);
        self.release_kv(idx, false);
        let reserved = u64::from(self.cfg.num_reserved_decode_tokens);
        if let Some(s) = self.seqs.get_mut(idx) {
            s.phase = Phase::Retracted;
            s.offloaded = fill;
            self.retracted_required += fill + reserved;
            out.preempted.push(s.id);
        }
        self.retracted.push_back(idx);
    }

    /// `resume_retracted_reqs`: see the module docs.
    pub(crate) fn resume_retracted(&mut self) {
        if self.retracted.is_empty() {
            return;
        }
        let reserved = u64::from(self.cfg.num_reserved_decode_tokens);
        let (mut budget, _) = self.allocatable_tokens_with(0, false);
        while let Some(&idx) = self.retracted.front() {
            if self.free_slots == 0 {
                break;
            }
            let fill = self.seqs.get(idx).map_or(0, |s| s.offloaded);
            let pages = self.pages_for(fill);
            let required = i128::from(fill + reserved);
            let alone = self.running.is_empty()
                && self.prebuilt.is_empty()
                && self.reservations.is_empty()
                && self.waiting.is_empty()
                && self.chunked.is_none();
            let fits = required <= budget
                || (alone && pages <= self.free_pages() + self.radix.evictable_pages());
            if !fits || !self.ensure_free(pages, false) {
                break;
            }
            self.retracted.pop_front();
            self.retracted_required -= fill + reserved;
            budget -= required;
            self.free_slots -= 1;
            self.alloc_private(idx, pages);
            if let Some(s) = self.seqs.get_mut(idx) {
                debug_assert!(s.node == NIL && s.owner == Owner::Active);
                s.has_slot = true;
                s.computed = fill;
                s.offloaded = 0;
                s.phase = Phase::Prebuilt;
            }
            self.prebuilt.push_back(idx);
        }
    }

    /// Drops a retracted request from the queue (an abort); it holds no KV.
    pub(crate) fn forget_retracted(&mut self, idx: u32) {
        let reserved = u64::from(self.cfg.num_reserved_decode_tokens);
        if let Some(s) = self.seqs.get(idx) {
            self.retracted_required = self
                .retracted_required
                .saturating_sub(s.offloaded + reserved);
        }
        self.retracted.retain(|&i| i != idx);
    }
}
