//! The waiting half of a pass, after vLLM `vllm/v1/core/sched/scheduler.py`
//! `Scheduler.schedule` (its WAITING loop) and
//! `vllm/v1/core/kv_cache_manager.py` `KVCacheManager.allocate_slots`.
//!
//! Two queues, as upstream keeps them:
//! - `waiting` (`Scheduler.waiting`): new requests and destinations at the
//!   back, preempted requests at the front (`_preempt_request`).
//! - `skipped` (`Scheduler.skipped_waiting`): destinations whose blocks were
//!   granted (`WAITING_FOR_REMOTE_KVS`, a blocked status), staying there
//!   after their KV arrives until admitted. FCFS scans it first
//!   (`_select_waiting_queue_for_scheduling` returns `skipped_waiting or
//!   waiting`): an entry still waiting for its KV is passed over
//!   (`_try_promote_blocked_waiting_request` fails, it goes to
//!   `step_skipped_waiting`), and one whose KV arrived is admitted ahead of
//!   every request in `waiting`, preempted ones included, or stops the loop
//!   if it does not fit. A grant moves a destination from `waiting` to the
//!   back of `skipped` (`step_skipped_waiting`, put back at the front of
//!   `skipped_waiting` in scan order, behind the entries already there).
//!
//! LoRA (`VllmConfig::max_loras`): at most that many distinct adapters among
//! the requests one pass schedules. As `Scheduler.schedule` builds
//! `scheduled_loras` from the running requests it scheduled (ids above 0)
//! and then, in the waiting loop, pops a request whose adapter is new while
//! the set is full from the queue it scans into `step_skipped_waiting`
//! and `continue`s ("Scheduling would exceed max_loras, skip"), such a
//! request is passed over and the loop goes on to the requests behind it;
//! an admitted request adds its adapter. Passed over in `waiting`, it moves
//! to the back of `skipped`, as the step's skipped requests are put back
//! ahead of the older ones in scan order (`skipped_waiting.prepend_requests
//! (step_skipped_waiting)`, `FCFSRequestQueue.prepend_requests` in
//! `vllm/v1/core/sched/request_queue.py`, undoing `prepend_request`'s
//! reversal) and every older one was scanned before `waiting` was: so the
//! next pass tries it before anything in `waiting`, preempted requests
//! included. Passed over in `skipped`, it keeps its place there. The check
//! comes before the prefix lookup and before a destination's grant, as
//! upstream checks it before `get_computed_blocks` and `load_kv_async`, so
//! a destination can reach `skipped` ungranted: the scan of `skipped`
//! grants it there.
//!
//! A grant (an async KV load) must fit the free blocks less what the
//! in-flight prefills still need (`Scheduler._inflight_prefill_reserved_blocks`
//! passed as `allocate_slots(reserved_blocks=...)`); ordinary admissions do
//! not subtract it.

use crate::core::VllmCore;
use crate::sequence::Phase;
use handoff_core::StepOutput;
use handoff_perf::PerfModel;

impl<P: PerfModel> VllmCore<P> {
    /// Waiting entries a pass could run: everything but destinations still
    /// waiting for their KV.
    pub(crate) fn runnable_waiting(&self) -> usize {
        self.waiting.len() + self.skipped.len() - self.awaiting_kv
    }

    /// The waiting half of `Scheduler.schedule`, while a running slot and
    /// token budget remain: `skipped` first, then `waiting` (module docs),
    /// stopping at the first request that does not fit. A queued destination
    /// is granted its blocks here (`load_kv_async`: it takes no budget and
    /// no slot, and moves to `skipped`), or stops the loop like any request
    /// that does not fit. One liveness exception, which upstream does not
    /// have: while nothing is running, a request or destination that does
    /// not fit is passed over, so work behind it (destinations holding
    /// their blocks) can run and free them. vLLM's waiting loop `break`s at
    /// the first request that does not fit whatever runs
    /// (`vllm/v1/core/sched/scheduler.py`, `Scheduler.schedule`, the
    /// `new_blocks is None` branch); ARCHITECTURE.md lists it among the
    /// known modelling gaps.
    pub(crate) fn admit_waiting(&mut self, mut budget: u64, out: &mut StepOutput) {
        if self.runnable_waiting() == 0 {
            // Every entry waits for its KV and would be passed over: nothing
            // to read (each would cost a cold record).
            return;
        }
        let mut hits = std::mem::take(&mut self.hits);
        // Running requests before this loop's admissions: the in-flight
        // prefills among them are counted against grants.
        let earlier = self.running.len();
        let mut loras = self.scheduled_loras();
        let mut stopped = false;
        let mut idx = 0;
        while budget > 0 && self.slot_free() {
            let Some(&s) = self.skipped.get(idx) else {
                break;
            };
            let phase = self.seqs.get(s).phase;
            if phase == Phase::Reserved || !loras.admits(self.seqs.get(s).lora) {
                idx += 1;
                continue;
            }
            if phase == Phase::Queued {
                // A destination passed over for max_loras before its grant.
                let reserved = self.inflight_reserved_blocks(earlier);
                if self.grant(s, reserved, &mut hits, out) || self.running.is_empty() {
                    idx += 1;
                    continue;
                }
                stopped = true;
                break;
            }
            match self.plan_admission(s, budget, &mut hits) {
                Some(new) => {
                    self.skipped.remove(idx);
                    loras.add(self.seqs.get(s).lora);
                    budget -= self.admit(s, new, &hits);
                }
                None if self.running.is_empty() => idx += 1,
                None => {
                    stopped = true;
                    break;
                }
            }
        }
        let mut idx = 0;
        while !stopped && budget > 0 && self.slot_free() {
            let Some(&s) = self.waiting.get(idx) else {
                break;
            };
            if !loras.admits(self.seqs.get(s).lora) {
                self.waiting.remove(idx);
                self.skipped.push_back(s);
                continue;
            }
            if self.seqs.get(s).phase == Phase::Queued {
                let reserved = self.inflight_reserved_blocks(earlier);
                if self.grant(s, reserved, &mut hits, out) {
                    self.waiting.remove(idx);
                    self.skipped.push_back(s);
                    continue;
                }
                if self.running.is_empty() {
                    idx += 1;
                    continue;
                }
                break;
            }
            let Some(new) = self.plan_admission(s, budget, &mut hits) else {
                if self.running.is_empty() {
                    idx += 1;
                    continue;
                }
                break;
            };
            self.waiting.remove(idx);
            loras.add(self.seqs.get(s).lora);
            budget -= self.admit(s, new, &hits);
        }
        self.hits = hits;
    }

    /// The adapters of the running requests this pass has scheduled so far
    /// (`scheduled_loras` before the waiting loop); empty and never filled
    /// without a LoRA limit.
    fn scheduled_loras(&self) -> LoraSet {
        let mut set = LoraSet {
            max: self.cfg.max_loras.map(|m| m.max(1) as usize),
            ids: Vec::new(),
        };
        if set.max.is_some() {
            for &(s, _) in &self.sched {
                set.add(self.seqs.get(s).lora);
            }
        }
        set
    }

    /// Whether the running batch has a free slot (`max_num_seqs`).
    fn slot_free(&self) -> bool {
        (self.running.len() as u64) < u64::from(self.cfg.max_num_seqs)
    }

    /// Moves waiting request `s` (already out of its queue) into the running
    /// batch computing `new` tokens, taking its prefix `hits` unless it is an
    /// activated destination (whose prompt is in place); returns `new`.
    fn admit(&mut self, s: u32, new: u64, hits: &[u32]) -> u64 {
        let table_cap = {
            let seq = self.seqs.get(s);
            self.blocks_for(seq.num_tokens() + u64::from(seq.max_out.saturating_sub(seq.outputs)))
                .min(self.pool.total())
        };
        let bs = self.bs();
        let seq = self.seqs.get_mut(s);
        seq.blocks.reserve(table_cap as usize);
        if !seq.prebuilt {
            for &b in hits {
                self.pool.touch(b, seq.owner);
            }
            seq.blocks.extend_from_slice(hits);
            seq.computed = hits.len() as u64 * bs;
            seq.published = hits.len() as u32;
        }
        seq.phase = Phase::Running;
        let end = seq.computed + new;
        self.grow(s, end);
        self.commit(s, end);
        self.running.push(s);
        self.sched.push((s, new));
        new
    }

    /// Blocks the in-flight prefills still need to hold their whole
    /// sequence (vLLM `Scheduler._inflight_prefill_reserved_blocks`: the sum
    /// of `_request_remaining_blocks`, a full-attention manager's
    /// `cdiv(num_tokens, block_size)` less the blocks held, over
    /// `_inflight_prefills`). Members, as upstream adds and discards them:
    /// a request running from an earlier pass (the first `earlier` of the
    /// batch) whose prefill was not complete when this pass began (the pass
    /// that schedules its last chunk discards it, in `_update_after_schedule`,
    /// only at its end), and one admitted in this pass whose chunk leaves
    /// its prefill incomplete. Granted destinations are members too, but
    /// hold their whole prompt already: they need nothing more.
    pub(crate) fn inflight_reserved_blocks(&self, earlier: usize) -> u64 {
        let admitted = self.running.len().saturating_sub(earlier);
        let fresh = &self.sched[self.sched.len().saturating_sub(admitted)..];
        let mut reserved = 0;
        for (i, &s) in self.running.iter().enumerate() {
            let seq = self.seqs.get(s);
            if seq.decoding {
                continue;
            }
            let tokens = seq.num_tokens();
            let prefilling = match i.checked_sub(earlier) {
                None => seq.computed < tokens,
                Some(j) => fresh
                    .get(j)
                    .is_some_and(|&(_, new)| seq.computed + new < tokens),
            };
            if prefilling {
                reserved += self
                    .blocks_for(tokens)
                    .saturating_sub(seq.blocks.len() as u64);
            }
        }
        reserved
    }

    /// Whether waiting request `s` would be admitted now with `budget`
    /// tokens left, and how many tokens it would compute; fills `hits` with
    /// its prefix-cache hits. Changes nothing. The whole sequence must fit,
    /// plus the watermark while anything runs (`allocate_slots` with
    /// `full_sequence_must_fit`, `reserved_blocks=0`).
    pub(crate) fn plan_admission(&self, s: u32, budget: u64, hits: &mut Vec<u32>) -> Option<u64> {
        let seq = self.seqs.get(s);
        let free = self.pool.free_len();
        let watermark = self.watermark_now();
        let num_tokens = seq.num_tokens();
        if seq.prebuilt {
            hits.clear();
            let new = num_tokens.saturating_sub(seq.computed).min(budget);
            let full_need = self
                .blocks_for(num_tokens)
                .saturating_sub(seq.blocks.len() as u64);
            return (new > 0 && full_need + watermark <= free).then_some(new);
        }
        let max_hit = num_tokens.saturating_sub(1) / self.bs();
        let need = self.blocks_for(num_tokens);
        let room = free.checked_sub(watermark);
        self.fit_hits(&seq.hashes, max_hit, need, room, hits)?;
        let matched = hits.len() as u64;
        let new = (num_tokens - matched * self.bs()).min(budget);
        (new > 0).then_some(new)
    }
}

/// The distinct adapters (`lora_int_id` above 0) one pass schedules, under
/// vLLM's `max_loras` (module docs).
pub(crate) struct LoraSet {
    /// The limit; `None` admits everything and records nothing.
    max: Option<usize>,
    ids: Vec<u32>,
}

impl LoraSet {
    /// Whether a request on adapter `lora` (0: the base model) may join the
    /// pass: upstream skips it when the set is full and lacks its adapter.
    pub(crate) fn admits(&self, lora: u32) -> bool {
        match self.max {
            Some(max) if lora != 0 => self.ids.len() < max || self.ids.contains(&lora),
            _ => true,
        }
    }

    pub(crate) fn add(&mut self, lora: u32) {
        if self.max.is_some() && lora != 0 && !self.ids.contains(&lora) {
            self.ids.push(lora);
        }
    }
}

impl<P: PerfModel> VllmCore<P> {
    /// Whether a waiting request (either queue) runs on an adapter.
    pub(crate) fn lora_waiting(&self) -> bool {
        self.skipped
            .iter()
            .chain(self.waiting.iter())
            .any(|&s| self.seqs.get(s).lora != 0)
    }
}
