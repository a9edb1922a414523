//! Prefill admission and the prefill pass.
//!
//! After SGLang `srt/managers/scheduler.py` `Scheduler.get_new_batch_prefill`
//! and `srt/managers/schedule_policy.py` `PrefillAdder` (`add_chunked_req`,
//! `add_one_req`, `_update_prefill_budget`, `budget_state`,
//! `rem_total_tokens`), with the default FCFS policy:
//!
//! - the in-progress chunked request goes first and takes up to
//!   `chunked_prefill_size` tokens;
//! - waiting requests follow in order while the batch has room
//!   (`max_running_requests` minus the decode batch, and free request
//!   slots); each is matched against the radix cache (at least one token is
//!   always computed), then refused with NO_TOKEN when its extend plus
//!   clipped `max_new_tokens` does not fit in free + evictable tokens minus
//!   the running batch's `new_token_ratio`-weighted future decode tokens and
//!   what earlier admissions took, checked again after its prefix is locked;
//! - a request whose extend exceeds the remaining chunk budget is truncated
//!   to whole pages and becomes the next chunked request;
//! - NO_TOKEN sets `batch_is_full`, which skips admission until the decode
//!   batch shrinks;
//! - with `max_loras_per_batch`, a request whose adapter would overflow
//!   the batch's adapter set is passed over, keeping its place (`lora`).
//!
//! The pass then allocates pages (evicting LRU cache when short), computes
//! the extends, caches completed prompt blocks (`cache_unfinished_req`,
//! publishing Stored), and for each request whose fill completed either
//! samples its first token and moves it to the decode batch, or — for a
//! handoff prefill — moves it, pages and radix lock included, into held
//! ownership in the same transition (SGLang's inflight queue).

use crate::core::SglangCore;
use crate::radix::{Owner, NIL};
use crate::seq::{Kind, Phase};
use handoff_core::{KvChunk, PrefillPinned, SourceLeaseId, StepOutput};
use handoff_perf::PerfModel;

/// What a prefill pass computed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PrefillWork {
    /// Prompt tokens computed.
    pub(crate) tokens: u64,
    /// Decode requests mixed into the pass (`--enable-mixed-chunk`).
    pub(crate) mixed_batch: u64,
    /// Context tokens of the decode batch at the start of the pass.
    pub(crate) kv_tokens: u64,
    /// Σ chunk tokens × tokens already cached before the chunk
    /// ([`handoff_perf::Pass::prefill_prefix_work`]).
    pub(crate) prefix_work: u64,
    /// Chunks computed: one per request extended
    /// ([`handoff_perf::Pass::prefill_seqs`]).
    pub(crate) chunks: u64,
}

/// The admission outcome of one request (`AddReqResult`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Add {
    Continue,
    NoToken,
    Other,
}

/// The running budget of one admission round (`PrefillAdder`).
struct Budget {
    rem_input: i64,
    rem_chunk: Option<i64>,
    /// `rem_total_token_offset`, in tokens.
    offset: f64,
}

/// Which waiting entries a pass admitted: the first `n`, or (with requests
/// passed over for the LoRA limit) these ascending positions.
enum Taken {
    Prefix(usize),
    At(Vec<usize>),
}

/// One waiting request's admission as [`SglangCore::plan_admission`] found
/// it fits: its prefix, its extend and the chunk it is truncated to.
struct Admission {
    /// It already holds a request slot.
    has_slot: bool,
    /// KV it brings itself (a session slot or a snapshot), in tokens.
    own: u64,
    /// Blocks of its prefix matched in the radix tree.
    matched_blocks: u64,
    /// The deepest matched node, or `NIL`.
    deepest: u32,
    /// Tokens already computed when the extend starts.
    prefix: u64,
    /// Tokens to compute to complete its fill.
    extend: u64,
    /// The extend in whole pages.
    input_tokens: u64,
    /// The extend truncated to the remaining chunk budget, when it exceeds it.
    chunk: Option<u64>,
}

impl<P: PerfModel> SglangCore<P> {
    /// Clipped new tokens a request still asks for. A handoff prefill counts
    /// one: SGLang's `PrefillBootstrapQueue._process_req` sets its
    /// `max_new_tokens` to 1 so that admission is not over-conservative.
    fn admission_new_tokens(&self, idx: u32) -> u64 {
        let clip = u64::from(self.cfg.max_new_tokens_clip);
        match self.seqs.get(idx) {
            Some(s) if matches!(s.kind, Kind::Source(_)) => 1,
            Some(s) => s.remaining_output().min(clip),
            None => 0,
        }
    }

    /// Free plus evictable tokens (`available_size + evictable_size`).
    /// Idle session slots and snapshot entries are evictable too.
    fn available_tokens(&self) -> u64 {
        (self.free_pages() + self.radix.evictable_pages() + self.evictable_session_pages())
            * self.page
    }

    fn budget_state(&self, b: &Budget) -> Add {
        if self.available_tokens() as f64 - b.offset <= 0.0 {
            return Add::NoToken;
        }
        if b.rem_input <= 0 || b.rem_chunk.is_some_and(|c| c <= 0) {
            return Add::Other;
        }
        Add::Continue
    }

    /// Whether a pass may admit anything: `(running batch size, room)`, or
    /// `None` (with `batch_is_full` set when the batch or the request slots
    /// are full).
    fn prefill_room(&mut self) -> Option<(u64, u64)> {
        if self.chunked.is_none() && (self.waiting.is_empty() || self.batch_is_full) {
            return None;
        }
        let running_bs = self.running.len() as u64;
        let room = u64::from(self.cfg.max_running_requests).saturating_sub(running_bs);
        // An appending session brings its slot; others may free one by
        // evicting an idle session.
        if self.sessions_on() {
            if let Some(&head) = self.waiting.front() {
                self.take_session_slot(head, f64::INFINITY);
            }
        }
        let head_has_slot = self
            .waiting
            .front()
            .and_then(|&i| self.seqs.get(i))
            .is_some_and(|s| s.has_slot);
        if room > 0 && !head_has_slot && self.free_slots == 0 {
            self.reclaim_request_slot();
        }
        if (room == 0 || (self.free_slots == 0 && !head_has_slot)) && self.chunked.is_none() {
            self.batch_is_full = true;
            return None;
        }
        Some((running_bs, room))
    }

    /// The budget a pass starts with, `num_mixed` decode requests mixed in.
    fn prefill_budget(&self, num_mixed: i64) -> Budget {
        let ratio = self.ratio.current();
        let clip = u64::from(self.cfg.max_new_tokens_clip);
        let offset: f64 = self
            .decoding
            .iter()
            .map(|d| d.remaining_output().min(clip) as f64 * ratio)
            .sum();
        Budget {
            rem_input: i64::from(self.cfg.max_prefill_tokens) - num_mixed,
            rem_chunk: (self.cfg.chunked_prefill_size > 0)
                .then(|| i64::from(self.cfg.chunked_prefill_size) - num_mixed),
            offset,
        }
    }

    /// `add_chunked_req`: continue the chunked request `c`. Its memory is not
    /// re-checked by SGLang (an allocation failure there is fatal); here
    /// its chunk is capped by what the pool can still give. Returns `c` when
    /// it stays the chunked request.
    fn continue_chunked(&self, c: u32, b: &mut Budget, batch: &mut Vec<(u32, u64)>) -> Option<u32> {
        let (fill, computed) = match self.seqs.get(c) {
            Some(s) => (s.fill_len(), s.computed),
            None => (0, 0),
        };
        let remaining = fill.saturating_sub(computed);
        let mut extend = remaining;
        if let Some(rc) = b.rem_chunk {
            extend = extend.min(rc.max(0) as u64);
        }
        extend = extend.min(self.available_tokens());
        if extend < remaining {
            extend = extend / self.page * self.page;
        }
        if extend > 0 {
            let truncated = extend < remaining;
            let paged = self.ceil_paged(extend);
            let new_tokens = if truncated {
                0
            } else {
                self.admission_new_tokens(c)
            };
            b.offset += (paged + new_tokens) as f64;
            b.rem_input -= paged as i64;
            if let Some(rc) = b.rem_chunk.as_mut() {
                *rc -= paged as i64;
            }
            batch.push((c, extend));
            truncated.then_some(c)
        } else {
            Some(c)
        }
    }

    /// `add_one_req` over the waiting queue, FCFS; returns which entries
    /// were admitted. The loop stops at the first refusal; only a request
    /// over the LoRA adapter limit is passed over instead (module `lora`),
    /// so without one the admitted entries are a prefix of the queue.
    fn admit_waiting(
        &mut self,
        room: u64,
        b: &mut Budget,
        batch: &mut Vec<(u32, u64)>,
        next_chunked: &mut Option<u32>,
    ) -> Taken {
        let mut loras = self.batch_loras(batch);
        let mut taken = Taken::Prefix(0);
        let mut pos = 0usize;
        while pos < self.waiting.len() {
            let idx = self.waiting[pos];
            let lora = self.seqs.get(idx).map_or(0, |s| s.lora);
            if !loras.admits(lora) {
                if let Taken::Prefix(n) = taken {
                    taken = Taken::At((0..n).collect());
                }
                pos += 1;
                continue;
            }
            let Some(a) = self.plan_admission(idx, room, b, batch) else {
                break;
            };
            self.admit(idx, a, b, batch, next_chunked);
            loras.add(lora);
            match &mut taken {
                Taken::Prefix(n) => *n += 1,
                Taken::At(v) => v.push(pos),
            }
            pos += 1;
            match self.budget_state(b) {
                Add::Continue => {}
                Add::NoToken => {
                    self.batch_is_full = true;
                    break;
                }
                Add::Other => break,
            }
        }
        taken
    }

    /// Whether waiting request `idx` fits this pass, and how; `None` stops
    /// the admission (with `batch_is_full` set on NO_TOKEN or a full batch).
    fn plan_admission(
        &mut self,
        idx: u32,
        room: u64,
        b: &Budget,
        batch: &[(u32, u64)],
    ) -> Option<Admission> {
        // Taking a slot or a snapshot takes pages that earlier
        // admissions of this pass may be counting on as evictable: then
        // the request waits to be first in a later pass.
        let spare = if batch.is_empty() {
            f64::INFINITY
        } else {
            self.available_tokens() as f64 - b.offset
        };
        if self.sessions_on() && !self.take_session_slot(idx, spare) {
            return None;
        }
        let has_slot = self.seqs.get(idx).is_some_and(|s| s.has_slot);
        if batch.len() as u64 >= room || (!has_slot && !self.reclaim_request_slot()) {
            self.batch_is_full = true;
            return None;
        }
        if self.sessions_on() && !self.try_bypass(idx, spare) {
            return None;
        }
        // KV the request brings (a session slot it appends to, or a
        // snapshot it reads) is its prefix; no tree match.
        let own = self.seqs.get(idx).map_or(0, |s| s.computed);
        let (fill, max_blocks) = match self.seqs.get(idx) {
            Some(s) => {
                let fill = s.fill_len();
                let cap = ((fill - 1) / self.block_tokens) as usize;
                (fill, cap.min(s.hashes.len()))
            }
            None => return None,
        };
        let (m, deepest) = match self.seqs.get(idx) {
            Some(s) => self.radix.match_prefix(&s.hashes[..max_blocks]),
            None => return None,
        };
        let prefix = if own > 0 { own } else { m * self.block_tokens };
        let extend = fill - prefix;
        let total = (extend + self.admission_new_tokens(idx)) as f64;
        let avail = self.available_tokens() as f64;
        if total >= avail - b.offset {
            self.batch_is_full = true;
            return None;
        }
        let input_tokens = self.ceil_paged(extend);
        if input_tokens as i64 >= b.rem_input && !batch.is_empty() {
            return None;
        }
        // Locking the prefix may take pages out of the evictable pool.
        let newly_locked = if deepest == NIL {
            0
        } else {
            self.radix.unlocked_pages_on_path(deepest) * self.page
        };
        if total >= avail - newly_locked as f64 - b.offset {
            self.batch_is_full = true;
            return None;
        }
        let chunk = match b.rem_chunk {
            Some(rc) if input_tokens as i64 > rc => {
                let trunc = rc.max(0) as u64 / self.page * self.page;
                if trunc == 0 {
                    return None;
                }
                Some(trunc)
            }
            _ => None,
        };
        Some(Admission {
            has_slot,
            own,
            matched_blocks: m,
            deepest,
            prefix,
            extend,
            input_tokens,
            chunk,
        })
    }

    /// Admits waiting request `idx` as `a` planned: locks its prefix, takes
    /// its request slot, and adds its extend (or its chunk) to the batch and
    /// the budget.
    fn admit(
        &mut self,
        idx: u32,
        a: Admission,
        b: &mut Budget,
        batch: &mut Vec<(u32, u64)>,
        next_chunked: &mut Option<u32>,
    ) {
        let new_tokens = self.admission_new_tokens(idx);
        if a.deepest != NIL {
            self.radix.lock(a.deepest, Owner::Active);
        }
        if a.own == 0 {
            if let Some(s) = self.seqs.get_mut(idx) {
                s.node = a.deepest;
                s.tree_blocks = a.matched_blocks;
                s.computed = a.prefix;
            }
        }
        if !a.has_slot {
            if let Some(s) = self.seqs.get_mut(idx) {
                s.has_slot = true;
            }
            self.free_slots -= 1;
        }
        match a.chunk {
            Some(trunc) => {
                batch.push((idx, trunc));
                *next_chunked = Some(idx);
                b.offset += trunc as f64;
                b.rem_input -= trunc as i64;
                if let Some(rc) = b.rem_chunk.as_mut() {
                    *rc -= trunc as i64;
                }
            }
            None => {
                batch.push((idx, a.extend));
                b.offset += (a.input_tokens + new_tokens) as f64;
                b.rem_input -= a.input_tokens as i64;
                if let Some(rc) = b.rem_chunk.as_mut() {
                    *rc -= a.input_tokens as i64;
                }
            }
        }
    }

    /// `alloc_for_extend`: the admission budget guarantees the pages exist
    /// once unlocked cache is evicted. Then the `admitted` requests leave
    /// the waiting queue. Returns the pages needed; `None`, with the
    /// admissions undone, when the pool could not give them.
    fn alloc_batch(&mut self, batch: &[(u32, u64)], admitted: Taken) -> Option<u64> {
        let need: u64 = batch
            .iter()
            .filter_map(|&(i, e)| self.seqs.get(i).map(|s| (s.computed, e)))
            .map(|(c, e)| self.pages_for(c + e) - self.pages_for(c))
            .sum();
        let allocated = self.ensure_free(need, true);
        debug_assert!(allocated, "prefill admission over-committed the pool");
        if !allocated {
            // Unreachable by the budget above. SGLang would fail the
            // allocation; undo the admissions instead of corrupting the pool.
            for &(idx, _) in batch.iter().rev() {
                if Some(idx) != self.chunked {
                    self.release_kv(idx, false);
                }
            }
            self.batch_is_full = true;
            return None;
        }
        match admitted {
            Taken::Prefix(n) => {
                for _ in 0..n {
                    if let Some(idx) = self.waiting.pop_front() {
                        self.leave_waiting(idx);
                    }
                }
            }
            Taken::At(positions) => {
                // Ascending positions: remove from the back first.
                for &pos in positions.iter().rev() {
                    if let Some(idx) = self.waiting.remove(pos) {
                        self.leave_waiting(idx);
                    }
                }
            }
        }
        Some(need)
    }

    /// Waiting request `idx` was taken into the batch.
    fn leave_waiting(&mut self, idx: u32) {
        if let Some(s) = self.seqs.get_mut(idx) {
            s.phase = Phase::Chunked;
            self.retracted_fill = self.retracted_fill.saturating_sub(s.retracted_fill);
            s.retracted_fill = 0;
        }
    }

    /// Computes the extends of `batch`: allocates their pages, caches their
    /// completed prompt blocks, and completes the prefills whose fill is
    /// done. Returns the tokens computed, their prefix work and the chunks.
    fn run_extends(&mut self, batch: &[(u32, u64)], out: &mut StepOutput) -> (u64, u64, u64) {
        let mut tokens = 0u64;
        let mut prefix_work = 0u64;
        let mut chunks = 0u64;
        for &(idx, extend) in batch {
            let (c, fill) = match self.seqs.get(idx) {
                Some(s) => (s.computed, s.fill_len()),
                None => continue,
            };
            // A continued chunk's prefix went with its previous chunk.
            if self.chunked != Some(idx) {
                self.send_cached_prefix(idx, c, out);
            }
            let pages = self.pages_for(c + extend) - self.pages_for(c);
            self.alloc_private(idx, pages);
            if let Some(s) = self.seqs.get_mut(idx) {
                s.computed += extend;
            }
            tokens += extend;
            chunks += 1;
            prefix_work = prefix_work.saturating_add(extend.saturating_mul(c));
            self.cache_prompt_blocks(idx);
            if c + extend >= fill {
                self.prefill_complete(idx, out);
            } else {
                self.kv_chunk_done(idx, c + extend, out);
            }
        }
        (tokens, prefix_work, chunks)
    }

    /// Builds and runs a prefill pass; `None` when nothing is admitted.
    pub(crate) fn prefill_pass(&mut self, out: &mut StepOutput) -> Option<PrefillWork> {
        let (running_bs, room) = self.prefill_room()?;
        let mixed = self.cfg.enable_mixed_chunk && running_bs > 0;
        let num_mixed = if mixed { running_bs as i64 } else { 0 };
        let mut b = self.prefill_budget(num_mixed);
        let mut batch = std::mem::take(&mut self.scratch_batch);
        batch.clear();
        let mut next_chunked = None;
        if let Some(c) = self.chunked {
            next_chunked = self.continue_chunked(c, &mut b, &mut batch);
        }
        let admitted = self.admit_waiting(room, &mut b, &mut batch, &mut next_chunked);
        if batch.is_empty() {
            self.scratch_batch = batch;
            return None;
        }
        let Some(need) = self.alloc_batch(&batch, admitted) else {
            self.scratch_batch = batch;
            return None;
        };

        let kv_tokens = self.running_kv_tokens;
        let mixed_batch = if mixed {
            self.mixed_decode(need, out)
        } else {
            0
        };
        let (tokens, prefix_work, chunks) = self.run_extends(&batch, out);
        self.chunked = next_chunked;
        if let Some(s) = next_chunked.and_then(|c| self.seqs.get_mut(c)) {
            s.phase = Phase::Chunked;
        }
        self.scratch_batch = batch;
        Some(PrefillWork {
            tokens,
            mixed_batch,
            kv_tokens,
            prefix_work,
            chunks,
        })
    }

    /// Decodes the existing batch inside a prefill pass when memory allows
    /// (SGLang's `mix_with_running`; no ratio decay, as
    /// `update_running_batch` is not called on that path).
    fn mixed_decode(&mut self, prefill_pages: u64, out: &mut StepOutput) -> u64 {
        let need = self.decode_pages_needed();
        if !self.ensure_free(prefill_pages + need, false) {
            return 0;
        }
        let bs = self.running.len() as u64;
        self.advance_running(1, out);
        bs
    }

    /// A handoff prefill finished a chunk but not its prompt: its KV so far,
    /// in whole pages, is sent to the destination now (SGLang
    /// `disaggregation/prefill.py` `send_kv_chunk` with `last_chunk=False`,
    /// which holds back the trailing partial page), overlapping the
    /// transfer with the chunks still to compute.
    fn kv_chunk_done(&mut self, idx: u32, computed: u64, out: &mut StepOutput) {
        if let Some(Kind::Source(id)) = self.seqs.get(idx).map(|s| s.kind) {
            let ready_tokens = computed / self.page * self.page;
            if ready_tokens > 0 {
                out.kv_chunks.push(KvChunk {
                    id,
                    ready_tokens,
                    before_pass: false,
                });
            }
        }
    }

    /// A handoff prefill entering its first pass with `cached` prompt tokens
    /// already computed (its radix-cache hit) sends their KV as the pass
    /// begins, before the forward over the rest (SGLang
    /// `disaggregation/prefill.py` `maybe_send_cached_prefix_chunk`, first
    /// in `run_batch`, under `SGLANG_DISAGG_PREFILL_EARLY_SEND_CACHED_PREFIX`;
    /// whole pages, as that prefix is). The decode side's own reused prefix
    /// is left out by the worker, as `start_send_idx` starts past it.
    fn send_cached_prefix(&mut self, idx: u32, cached: u64, out: &mut StepOutput) {
        if !self.cfg.disagg_prefill_early_send_cached_prefix {
            return;
        }
        if let Some(Kind::Source(id)) = self.seqs.get(idx).map(|s| s.kind) {
            let ready_tokens = cached / self.page * self.page;
            if ready_tokens > 0 {
                out.kv_chunks.push(KvChunk {
                    id,
                    ready_tokens,
                    before_pass: true,
                });
            }
        }
    }

    /// The prompt (or refill) is computed: sample, hold, or finish.
    fn prefill_complete(&mut self, idx: u32, out: &mut StepOutput) {
        let Some(seq) = self.seqs.get(idx) else {
            return;
        };
        match seq.kind {
            Kind::Source(id) => {
                self.sources_computing = self.sources_computing.saturating_sub(1);
                self.relabel(idx, Owner::Pinned);
                let lease = SourceLeaseId(self.next_lease);
                self.next_lease += 1;
                let ppn = self.radix.pages_per_node();
                if let Some(s) = self.seqs.get_mut(idx) {
                    s.phase = Phase::Held;
                    out.pinned.push(PrefillPinned {
                        id,
                        request: s.id,
                        lease,
                        blocks: s.tree_blocks * ppn + s.private_pages,
                        tokens: s.prompt,
                    });
                }
            }
            Kind::Ordinary | Kind::Destination(_) => {
                self.emit(idx, 1, out);
                let done = self
                    .seqs
                    .get(idx)
                    .is_some_and(|s| s.emitted >= s.max_output);
                if done {
                    self.finish(idx, out);
                } else if let Some(s) = self.seqs.get_mut(idx) {
                    s.phase = Phase::Running;
                    self.join_running(idx);
                }
            }
        }
    }
}
