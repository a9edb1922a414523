//! [`SglangCore`]: one SGLang worker's token pool, request slots, radix cache
//! and batch, behind [`SchedulerCore`].
//!
//! This module holds the state, the page bookkeeping every other module
//! shares, ordinary submission and the trait glue. Admission is in
//! `prefill.rs`, decode and retraction in `decode.rs`, destination
//! preallocation in `prealloc.rs` and the source side in `source.rs`.
//!
//! Page categories. Every page of the pool is in exactly one of: free; in the
//! radix tree and unlocked (cached, evictable); or owned by an [`Owner`] —
//! either as a *private* page (allocated to one request, not in the tree) or
//! as a tree page locked by at least one request. A tree page locked by
//! several requests of different owners counts once, for the first of active,
//! pinned, reserved that holds a lock. So `free + cached + active + pinned +
//! reserved == total` always holds, and a prefix shared between a running
//! request and a held source is reported as active.

use crate::batch::{emit_tokens, Decoding};
use crate::batch_sums::BatchSums;
use crate::config::{ConfigError, SglangConfig};
use crate::events::KvEventQueue;
use crate::radix::{Owner, RadixCache, NIL, OWNERS};
use crate::ratio::NewTokenRatio;
use crate::seq::{Kind, Phase, Seq, Slab};
use handoff_core::fasthash::ChurnMap;
use handoff_core::{
    Backend, Capabilities, CommandOutcome, HandoffId, Instant, KvCapacitySnapshot, KvEvent,
    Request, SchedulerCommand, SchedulerCore, StepOutput,
};
use handoff_perf::Pass;
use handoff_perf::PerfModel;
use handoff_perf::PolynomialPerf;
use std::collections::VecDeque;

/// An SGLang worker's scheduler; see the crate docs.
///
/// `step` runs one pass — a prefill pass when the chunked request or the
/// waiting queue yields work, otherwise a decode pass — and then, while the
/// batch is pure decode that nothing can change, further passes that end
/// by the horizon. Consequently first tokens, pinned prefills,
/// retractions and (except at the call's last pass) finishes only happen in
/// a call's first pass: a first token's time is `now + first_step`, and any
/// finish or pin in the first pass ends the call.
///
/// A call may report `steps == 0` with `preempted` non-empty: the only
/// running request could not get a page because pinned sources or
/// reservations hold the pool, so it was retracted (SGLang would assert);
/// nothing runs until a command frees capacity.
///
/// Commands answer `Noop` for unknown or ended handoff ids, `Unavailable`
/// (handing the request back, holding nothing) when capacity is short now,
/// and `Unsupported` for a request no empty worker could take.
#[derive(Debug)]
pub struct SglangCore<P: PerfModel = PolynomialPerf> {
    pub(crate) cfg: SglangConfig,
    pub(crate) perf: P,
    /// Tokens per page.
    pub(crate) page: u64,
    /// Tokens per event block (radix node).
    pub(crate) block_tokens: u64,
    pub(crate) radix: RadixCache,
    /// Private pages per owner.
    pub(crate) private: [u64; OWNERS],
    pub(crate) free_slots: u64,
    pub(crate) seqs: Slab,
    pub(crate) waiting: VecDeque<u32>,
    /// SGLang's `chunked_req`.
    pub(crate) chunked: Option<u32>,
    /// The decode batch, in admission order.
    pub(crate) running: Vec<u32>,
    /// The batch's decode fields, parallel to `running` and authoritative
    /// over the slab's copies while a request runs ([`crate::batch`]).
    pub(crate) decoding: Vec<Decoding>,
    /// Activated destinations not yet merged into the batch.
    pub(crate) prebuilt: VecDeque<u32>,
    /// Decode-side requests retracted with their KV offloaded to host
    /// memory, in retraction order (`DecodePreallocQueue.retracted_queue`).
    pub(crate) retracted: VecDeque<u32>,
    /// What the retracted queue needs back: the sum of `offloaded +
    /// num_reserved_decode_tokens` over it (`_prealloc_required_tokens`).
    pub(crate) retracted_required: u64,
    /// Handoff prefills, computing or held, by attempt. A `ChurnMap` with
    /// the integer hasher: one insert and removal per request, never
    /// iterated (std's SipHash over 128-bit ids was visible in profiles).
    pub(crate) sources: ChurnMap<HandoffId, u32>,
    /// Destination reservations by attempt; as `sources`.
    pub(crate) reservations: ChurnMap<HandoffId, u32>,
    /// Handoff prefills still waiting or chunked (not decode-bound).
    pub(crate) sources_computing: u64,
    /// Sum of `Seq::retracted_fill` over the waiting queue.
    pub(crate) retracted_fill: u64,
    /// Sum of `computed` over the decode batch.
    pub(crate) running_kv_tokens: u64,
    /// The batch's sums that preallocation budgets read.
    pub(crate) batch_sums: BatchSums,
    pub(crate) ratio: NewTokenRatio,
    /// SGLang's `running_batch.batch_is_full`: admission is skipped until
    /// the batch shrinks.
    pub(crate) batch_is_full: bool,
    /// The batch lost a request since the last pass began.
    pub(crate) running_shrank: bool,
    /// The last pass was a prefill that part of the running batch sat out.
    pub(crate) sat_out: bool,
    /// The last stable decode pass timed (`DecodeMemo`).
    pub(crate) decode_memo: handoff_perf::DecodeMemo,
    pub(crate) events: KvEventQueue,
    pub(crate) next_lease: u64,
    pub(crate) next_reservation: u64,
    /// Counts `step` calls, to merge a request's emissions within one call.
    pub(crate) call: u64,
    pub(crate) scratch_hashes: Vec<u64>,
    pub(crate) scratch_order: Vec<u32>,
    pub(crate) scratch_batch: Vec<(u32, u64)>,
    /// Session slots (decode side of seed 002).
    pub(crate) sessions: crate::session_slots::Sessions,
    /// Snapshot side table (prefill side of seed 002).
    pub(crate) store: crate::snapshot_store::PrefillSnapshotStore,
    /// The time of the last command or step, for snapshot ages.
    pub(crate) now: Instant,
}

impl SglangCore<PolynomialPerf> {
    /// A core timed by the default [`PolynomialPerf`].
    pub fn with_config(config: SglangConfig) -> Result<Self, ConfigError> {
        SglangCore::new(config, PolynomialPerf::default())
    }
}

impl<P: PerfModel> SglangCore<P> {
    /// A worker with an empty pool and cache. The token pool is counts of
    /// pages (SGLang's free list holds page indices, which the mocker never
    /// names), and every table grows with the requests it holds: an idle
    /// worker costs the same whatever `total_pages` and
    /// `max_running_requests` are.
    pub fn new(config: SglangConfig, perf: P) -> Result<Self, ConfigError> {
        config.validate()?;
        let page = u64::from(config.page_size);
        let block_tokens = u64::from(config.event_block_tokens);
        Ok(SglangCore {
            radix: RadixCache::new(block_tokens / page),
            private: [0; OWNERS],
            free_slots: config.total_request_slots(),
            seqs: Slab::default(),
            waiting: VecDeque::new(),
            chunked: None,
            running: Vec::new(),
            // Grown on demand, not pre-sized to `max_running_requests`: that
            // many entries (up to 4,096 of 56 bytes) is a page-aligned mmap,
            // so every worker's batch would start in the same L1 sets as
            // every other page-aligned array's hot head (cachegrind,
            // conversation trace 4P+4D: 20% more L1 data misses in all).
            decoding: Vec::new(),
            prebuilt: VecDeque::new(),
            retracted: VecDeque::new(),
            retracted_required: 0,
            sources: ChurnMap::default(),
            reservations: ChurnMap::default(),
            sources_computing: 0,
            retracted_fill: 0,
            running_kv_tokens: 0,
            batch_sums: BatchSums::default(),
            ratio: NewTokenRatio::new(
                config.init_new_token_ratio,
                config.min_new_token_ratio,
                config.new_token_ratio_decay,
            ),
            batch_is_full: false,
            running_shrank: false,
            sat_out: false,
            decode_memo: Default::default(),
            events: KvEventQueue::default(),
            next_lease: 0,
            next_reservation: 0,
            call: 0,
            scratch_hashes: Vec::new(),
            scratch_order: Vec::new(),
            scratch_batch: Vec::new(),
            sessions: Default::default(),
            store: Default::default(),
            now: Instant::ZERO,
            page,
            block_tokens,
            perf,
            cfg: config,
        })
    }

    /// The configuration this core runs with.
    pub fn config(&self) -> &SglangConfig {
        &self.cfg
    }

    /// Tokens each KV event hash covers (the router must hash prompts at this
    /// granularity to match this worker's events).
    pub fn event_block_tokens(&self) -> u32 {
        self.cfg.event_block_tokens
    }

    /// The current new-token ratio.
    pub fn new_token_ratio(&self) -> f64 {
        self.ratio.current()
    }

    /// Nodes in the radix cache (locked or not).
    pub fn radix_nodes(&self) -> usize {
        self.radix.len()
    }

    // ---- page bookkeeping shared by every module ----

    pub(crate) fn total_tokens(&self) -> u64 {
        self.cfg.total_pages * self.page
    }

    pub(crate) fn pages_for(&self, tokens: u64) -> u64 {
        tokens.div_ceil(self.page)
    }

    /// Rounds up to whole pages, in tokens (`ceil_paged_tokens`).
    pub(crate) fn ceil_paged(&self, tokens: u64) -> u64 {
        self.pages_for(tokens) * self.page
    }

    pub(crate) fn free_pages(&self) -> u64 {
        let used = self.radix.total_pages() + self.private.iter().sum::<u64>();
        debug_assert!(used <= self.cfg.total_pages, "pool overcommitted");
        self.cfg.total_pages.saturating_sub(used)
    }

    /// Makes `pages` free if eviction can. SGLang evicts the whole request
    /// when short on the extend and decode paths (`evict_from_tree_cache`)
    /// and only the deficit on the preallocation path (`_pre_alloc`).
    pub(crate) fn ensure_free(&mut self, pages: u64, evict_whole: bool) -> bool {
        let free = self.free_pages();
        if free < pages {
            let want = if evict_whole { pages } else { pages - free };
            self.radix.evict(want, &mut self.events);
            if self.sessions_on() {
                self.evict_session_held(pages);
            }
        }
        self.free_pages() >= pages
    }

    /// Gives `pages` private pages to `idx`; the caller made them free.
    pub(crate) fn alloc_private(&mut self, idx: u32, pages: u64) {
        if let Some(seq) = self.seqs.get_mut(idx) {
            seq.private_pages += pages;
            self.private[seq.owner as usize] += pages;
        }
    }

    /// SGLang's `cache_unfinished_req`: publishes the request's newly
    /// completed prompt blocks into the radix tree. Its private pages for
    /// those blocks become tree pages, or are freed where the hash was
    /// already cached (the duplicate is dropped, as SGLang frees the
    /// duplicate indices).
    pub(crate) fn cache_prompt_blocks(&mut self, idx: u32) {
        let ppn = self.radix.pages_per_node();
        let bt = self.block_tokens;
        let Some(seq) = self.seqs.get_mut(idx) else {
            return;
        };
        let done = (seq.computed.min(seq.prompt) / bt).min(seq.hashes.len() as u64);
        if done <= seq.tree_blocks {
            return;
        }
        let from = seq.tree_blocks as usize;
        let to = done as usize;
        let (deepest, _created) =
            self.radix
                .insert(seq.node, &seq.hashes[from..to], seq.owner, &mut self.events);
        let moved = (done - seq.tree_blocks) * ppn;
        debug_assert!(seq.private_pages >= moved);
        seq.private_pages = seq.private_pages.saturating_sub(moved);
        let owner = seq.owner as usize;
        self.private[owner] = self.private[owner].saturating_sub(moved);
        seq.node = deepest;
        seq.tree_blocks = done;
    }

    /// Moves a request's pages and locks to another owner category.
    pub(crate) fn relabel(&mut self, idx: u32, to: Owner) {
        let Some(seq) = self.seqs.get_mut(idx) else {
            return;
        };
        let from = seq.owner;
        if from == to {
            return;
        }
        if seq.node != NIL {
            self.radix.relabel(seq.node, from, to);
        }
        self.private[from as usize] = self.private[from as usize].saturating_sub(seq.private_pages);
        self.private[to as usize] += seq.private_pages;
        seq.owner = to;
    }

    /// SGLang's `release_kv_cache`: unlocks the radix path (refreshing it
    /// when the request's tokens are cached, as `cache_finished_req` does),
    /// frees private pages and the request slot. The request keeps its
    /// progress counters; its KV state is reset.
    pub(crate) fn release_kv(&mut self, idx: u32, touch: bool) {
        let Some(seq) = self.seqs.get_mut(idx) else {
            return;
        };
        if seq.node != NIL {
            self.radix.unlock(seq.node, seq.owner, touch);
        }
        let owner = seq.owner as usize;
        self.private[owner] = self.private[owner].saturating_sub(seq.private_pages);
        if seq.has_slot {
            self.free_slots += 1;
        }
        seq.private_pages = 0;
        seq.node = NIL;
        seq.tree_blocks = 0;
        seq.computed = 0;
        seq.has_slot = false;
        seq.owner = Owner::Active;
    }

    /// Whether a request could run to completion alone on an empty worker:
    /// its prompt and all its output tokens fit in the pool with room for
    /// the admission check's strict inequality. One that cannot would block
    /// its queue forever (or, after a retraction, never be re-admitted), so it
    /// is refused up front. SGLang aborts prompts longer than the pool
    /// (`_check_if_req_exceed_kv_capacity`) and would assert when a lone
    /// request outgrows it.
    pub(crate) fn fits_empty_pool(&self, prompt: u64, output: u64) -> bool {
        self.ceil_paged(prompt.saturating_add(output)) < self.total_tokens()
    }

    /// Requests that will decode here: running, prebuilt, reserved and
    /// waiting ones except handoff prefills (SGLang's `_active_req_count`).
    pub(crate) fn decode_bound_requests(&self) -> u64 {
        let queued = self.waiting.len() as u64 + u64::from(self.chunked.is_some());
        self.running.len() as u64
            + self.prebuilt.len() as u64
            + self.reservations.len() as u64
            + queued.saturating_sub(self.sources_computing)
    }

    /// What the request contributes to [`BatchSums`] now: `(prompt +
    /// emitted, min(max_output, clip) + prompt)`.
    fn batch_counts(&self, idx: u32) -> Option<(u64, u64)> {
        let clip = u64::from(self.cfg.max_new_tokens_clip);
        self.seqs
            .get(idx)
            .map(|s| (s.prompt + s.emitted, s.max_output.min(clip) + s.prompt))
    }

    /// `idx` joins the decode batch (its phase is the caller's): from now on
    /// its batch entry holds its decode fields ([`crate::batch`]).
    pub(crate) fn join_running(&mut self, idx: u32) {
        if let Some((fill, need)) = self.batch_counts(idx) {
            self.batch_sums.join(fill, need);
        }
        let Some(s) = self.seqs.get(idx) else {
            return;
        };
        self.running_kv_tokens += s.computed;
        self.decoding.push(Decoding::load(s));
        self.running.push(idx);
    }

    /// Stores every batch entry back to its slab record, so the batch's
    /// requests can be read through the slab (before a retraction).
    pub(crate) fn store_running(&mut self) {
        for (&idx, d) in self.running.iter().zip(&self.decoding) {
            if let Some(s) = self.seqs.get_mut(idx) {
                d.store(s);
            }
        }
    }

    /// `idx`, still in the slab and with its batch entry stored back, is
    /// leaving the decode batch: takes it out of the batch's sums (the
    /// caller removes it from `running` and `decoding`).
    pub(crate) fn leave_running_sums(&mut self, idx: u32) {
        if let Some((fill, need)) = self.batch_counts(idx) {
            self.batch_sums.leave(fill, need);
        }
        let kv = self.seqs.get(idx).map_or(0, |s| s.computed);
        self.running_kv_tokens = self.running_kv_tokens.saturating_sub(kv);
    }

    /// Adds `n` tokens to the request's emission of this call.
    pub(crate) fn emit(&mut self, idx: u32, n: u64, out: &mut StepOutput) {
        let call = self.call;
        if let Some(seq) = self.seqs.get_mut(idx) {
            debug_assert!(
                seq.phase != Phase::Running,
                "a running request's fields are in its batch entry"
            );
            emit_into(seq, call, n, out);
        }
    }

    /// Output complete: cache and free (`cache_finished_req`), report it.
    /// The caller removes it from the batch.
    /// A session's turn keeps its KV in the session slot instead
    /// (`session.rs`).
    pub(crate) fn finish(&mut self, idx: u32, out: &mut StepOutput) {
        let id = self.seqs.get(idx).map(|s| s.id);
        if self.commit_session(idx) {
            out.finished.extend(id);
            return;
        }
        self.release_kv(idx, true);
        if let Some(seq) = self.seqs.remove(idx) {
            out.finished.push(seq.id);
        }
    }

    fn submit(&mut self, request: Request) -> CommandOutcome {
        if let Some(outcome) = self.submit_session(&request) {
            return outcome;
        }
        let prompt = u64::from(request.prompt_tokens.max(1));
        let max_out = u64::from(request.max_output_tokens.max(1));
        if !self.fits_empty_pool(prompt, max_out) {
            return CommandOutcome::Unsupported(Some(request));
        }
        let mut hashes = Vec::new();
        request.block_hashes(self.cfg.event_block_tokens, &mut hashes);
        let mut seq = Seq::new(
            request.id,
            Kind::Ordinary,
            Phase::Waiting,
            prompt,
            max_out,
            hashes,
        );
        seq.lora = request.lora.as_ref().map_or(0, |l| l.id);
        let idx = self.seqs.insert(seq);
        self.waiting.push_back(idx);
        CommandOutcome::Submitted
    }

    /// One forward pass at the current state; `None` if nothing could run.
    fn pass(&mut self, out: &mut StepOutput) -> Option<handoff_core::Duration> {
        // SGLang clears `batch_is_full` when the batch shrinks and every pass
        // on a worker without a decode batch (the disaggregated prefill loop);
        // here it is cleared before the next admission attempt.
        if self.running_shrank || self.running.is_empty() {
            self.batch_is_full = false;
            self.running_shrank = false;
        }
        self.resume_retracted();
        self.merge_prebuilt(out);
        let total = self.total_tokens();
        let running = self.running.len() as u64;
        if let Some(p) = self.prefill_pass(out) {
            out.prefill_tokens += p.tokens;
            // Without a mixed chunk the running batch sits a prefill pass
            // out (`managers/scheduler.py` `get_next_batch_to_run`: a new
            // prefill batch runs alone, the decode batch only when there is
            // none): its tokens start at the next pass.
            self.sat_out = p.mixed_batch < running;
            // The mixed decodes read the running batch's context; the
            // chunks, their cached prefixes.
            let pass = Pass {
                prefill_tokens: p.tokens,
                prefill_seqs: p.chunks,
                prefill_prefix_work: p.prefix_work,
                decode_batch: p.mixed_batch,
                decode_context_tokens: p.kv_tokens,
                kv_tokens: p.kv_tokens,
                pool_tokens: total,
            };
            return Some(self.perf.pass(&pass));
        }
        self.sat_out = false;
        let (batch, kv) = self.decode_pass(out)?;
        let time = self.decode_memo.time(&self.perf, batch, kv, total);
        self.perf.count_pass(&Pass::decode(batch, kv, total));
        Some(time)
    }

    /// `get_new_prebuilt_batch`: activated destinations join the batch as
    /// far as `max_running_requests` allows, without recompute.
    ///
    /// A destination that has not emitted yet carries its first token from
    /// the prefill (`DecodeTransferQueue._commit_transfer_to_req` appends the
    /// metadata buffer's output id): it is streamed now, at the start of the
    /// call, by `process_batch_result_prebuilt`, and a request that asked for
    /// one token ends with it. Decode passes then generate the rest; the
    /// first token's KV is written by the first of them, so `computed`
    /// stays `prompt + emitted - 1`.
    fn merge_prebuilt(&mut self, out: &mut StepOutput) {
        let max = self.cfg.max_running_requests as usize;
        while self.running.len() < max {
            let Some(idx) = self.prebuilt.pop_front() else {
                break;
            };
            let Some(seq) = self.seqs.get_mut(idx) else {
                continue;
            };
            if seq.emitted == 0 {
                seq.emitted = 1;
                out.shipped_first_tokens.push(seq.id);
                if seq.emitted >= seq.max_output {
                    // Merging comes before any pass, so these lead `finished`.
                    self.finish(idx, out);
                    out.finished_at_start = out.finished.len();
                    continue;
                }
            }
            seq.phase = Phase::Running;
            self.join_running(idx);
        }
    }
}

impl<P: PerfModel> SchedulerCore for SglangCore<P> {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            backend: Backend::Sglang,
            destination_reservation: true,
            source_lease_ttl: self.cfg.source_lease_ttl,
            block_size: self.cfg.page_size,
            event_block_tokens: self.cfg.event_block_tokens,
        }
    }

    fn apply(&mut self, cmd: SchedulerCommand, now: Instant) -> CommandOutcome {
        self.now = now;
        match cmd {
            SchedulerCommand::Submit(request) => self.submit(request),
            SchedulerCommand::SubmitHandoffPrefill { id, request } => {
                self.submit_handoff_prefill(id, request)
            }
            SchedulerCommand::ReserveDestination { id, request } => self.reserve(id, request),
            SchedulerCommand::ActivateDestination { id } => self.activate(id),
            SchedulerCommand::CancelDestination { id } => self.cancel_destination(id),
            SchedulerCommand::ReleaseSource { id } => self.release_source(id),
            SchedulerCommand::CancelSource { id } => self.cancel_source(id),
            SchedulerCommand::ReleaseSession { session } => self.release_session(session),
            SchedulerCommand::EvictSession { session } => {
                if self.evict_session(session) {
                    CommandOutcome::Applied
                } else {
                    CommandOutcome::Noop
                }
            }
            SchedulerCommand::ReserveSnapshot {
                id,
                session,
                tokens,
            } => match self.reserve_snapshot(id, session, tokens) {
                Ok(r) => CommandOutcome::Reserved(handoff_core::ReservationSummary {
                    reservation: None,
                    physical_blocks: r.pages,
                    matched_prefix_tokens: 0,
                    transfer_tokens: tokens,
                    transfer_blocks: r.pages,
                    request_slot: false,
                    decode_headroom_tokens: 0,
                }),
                Err(crate::snapshot_store::SnapshotRefusal::Unavailable) => {
                    CommandOutcome::Unavailable(None)
                }
                Err(_) => CommandOutcome::Unsupported(None),
            },
            SchedulerCommand::IngestSnapshot { id } => {
                if self.ingest_snapshot(id, now) {
                    CommandOutcome::Applied
                } else {
                    CommandOutcome::Noop
                }
            }
            SchedulerCommand::CancelSnapshot { id } => {
                if self.cancel_snapshot(id) {
                    CommandOutcome::Applied
                } else {
                    CommandOutcome::Noop
                }
            }
            SchedulerCommand::FinishPush {
                session,
                lock,
                result,
            } => self.finish_push(session, lock, result),
        }
    }

    fn step(&mut self, now: Instant, horizon: Instant, out: &mut StepOutput) {
        out.clear();
        self.call += 1;
        self.now = now;
        let Some(first) = self.pass(out) else {
            // `self_check_during_idle` resets the estimate.
            self.ratio.reset();
            return;
        };
        out.steps = 1;
        out.duration = first;
        out.first_step = first;
        out.last_step = first;
        // Finishes and pins are reported as of the end of the call, so a
        // call that has any in its first pass ends there. A request's
        // tokens in a call are counted from its first pass, so a call whose
        // first pass left part of the batch out ends there too.
        let next = now + first;
        if next < horizon
            && !self.sat_out
            && out.finished.is_empty()
            && out.pinned.is_empty()
            && self.decode_is_stable()
        {
            let more = self.advance_stable_decode(next, horizon, out);
            if more.passes > 0 {
                out.steps += more.passes;
                out.duration += more.duration;
                out.last_step = more.last;
            }
        }
    }

    fn capacity(&self) -> KvCapacitySnapshot {
        let owned = |o: Owner| self.radix.pages(o as usize) + self.private[o as usize];
        KvCapacitySnapshot {
            total_blocks: self.cfg.total_pages,
            // Session-held pages (idle slots, snapshots) are owned, not
            // cache: they count as active; `session_capacity` splits them.
            active_blocks: owned(Owner::Active) + owned(Owner::Session),
            pinned_source_blocks: owned(Owner::Pinned),
            reserved_destination_blocks: owned(Owner::Reserved),
            cached_blocks: self.radix.evictable_pages(),
            total_request_slots: self.cfg.total_request_slots(),
            free_request_slots: self.free_slots,
            decode_headroom_tokens: u64::from(self.cfg.num_reserved_decode_tokens)
                * self.decode_bound_requests(),
            running_requests: self.running.len() as u64,
            waiting_requests: self.waiting.len() as u64
                + self.prebuilt.len() as u64
                + self.retracted.len() as u64
                + u64::from(self.chunked.is_some()),
        }
    }

    /// Pages outside the radix tree and every request's private pages.
    fn free_blocks(&self) -> Option<u64> {
        Some(self.free_pages())
    }

    fn drain_kv_events(&mut self, out: &mut Vec<KvEvent>) {
        self.events.drain_into(out);
    }

    fn recycle_kv_hashes(&mut self, hashes: Vec<u64>) {
        self.events.give_back(hashes);
    }

    fn drain_session_events(&mut self, out: &mut Vec<handoff_core::session::SessionEvent>) {
        SglangCore::drain_session_events(self, out);
    }

    fn is_empty(&self) -> bool {
        self.running.is_empty()
            && self.waiting.is_empty()
            && self.chunked.is_none()
            && self.prebuilt.is_empty()
            && self.retracted.is_empty()
    }

    fn is_drained(&self) -> bool {
        self.is_empty()
            && self.sources.is_empty()
            && self.reservations.is_empty()
            && self.sessions.locks == 0
            && self.store.pending() == 0
    }

    fn beyond_grid_passes(&self) -> (u64, u64) {
        self.perf.beyond_grid_passes()
    }

    fn quiet_floor(&mut self) -> handoff_core::QuietFloor {
        SglangCore::quiet_floor(self)
    }
}

/// Adds `n` tokens to `seq`'s emission of step call `call`: merged into the
/// emission it already has in `out` from this call, else a new one.
fn emit_into(seq: &mut Seq, call: u64, n: u64, out: &mut StepOutput) {
    let id = seq.id;
    emit_tokens(
        (&mut seq.emitted, &mut seq.emit_call, &mut seq.emit_idx),
        id,
        call,
        n,
        out,
    );
}
