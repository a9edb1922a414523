//! [`VllmCore`]: one vLLM worker's batch and KV pool behind
//! [`handoff_core::SchedulerCore`].
//!
//! The pass logic is in `step`, the handoff commands in
//! `handoff`; this module holds the state they share and the block
//! table operations of vLLM's `KVCacheManager`
//! (`vllm/v1/core/kv_cache_manager.py`).

use crate::block_pool::{BlockPool, Owner};
use crate::config::VllmConfig;
use crate::events::EventQueue;
use crate::sequence::{Kind, Phase, Slab};
use handoff_core::fasthash::ChurnMap;
use handoff_core::{
    Backend, Capabilities, CommandOutcome, HandoffId, Instant, KvCapacitySnapshot, KvEvent,
    PrefillPinned, Request, SchedulerCommand, SchedulerCore, SourceLeaseId, StepOutput,
};
use handoff_perf::PerfModel;
use handoff_perf::PolynomialPerf;
use std::collections::VecDeque;

/// Block hashes whose index groups [`VllmCore::commit`] loads together
/// before publishing them: 16 groups of a prompt's consecutive hashes.
const PUBLISH_WARM: usize = 512;

/// A vLLM v1 scheduler core; see the crate docs for what it models.
///
/// `P` predicts pass times; [`VllmCore::new`] uses [`PolynomialPerf`] scaled
/// by [`VllmConfig::speedup_ratio`].
#[derive(Clone, Debug)]
pub struct VllmCore<P: PerfModel = PolynomialPerf> {
    pub(crate) cfg: VllmConfig,
    pub(crate) perf: P,
    pub(crate) pool: BlockPool,
    pub(crate) events: EventQueue,
    pub(crate) seqs: Slab,
    /// Admission order; preemption takes the back (vLLM `self.running`).
    pub(crate) running: Vec<u32>,
    /// vLLM `self.waiting` (FCFS): new requests and destinations queued for
    /// their blocks at the back, preempted requests at the front.
    pub(crate) waiting: VecDeque<u32>,
    /// vLLM `self.skipped_waiting`: granted destinations, waiting for their
    /// KV ([`Phase::Reserved`]) or activated and not yet admitted, and
    /// requests passed over for `max_loras`, in the order the waiting loop
    /// passed them; scanned before `waiting` (module `admit`).
    pub(crate) skipped: VecDeque<u32>,
    /// Entries of `skipped` in [`Phase::Reserved`] (waiting for their KV,
    /// not runnable).
    pub(crate) awaiting_kv: usize,
    /// Entries of `waiting` in [`Phase::Queued`] not yet reported as not
    /// granted.
    pub(crate) unreported: usize,
    /// Handoff prefills, computing or held (lookups and a count only; one
    /// insert and removal per handoff, hence the churn map).
    pub(crate) sources: ChurnMap<HandoffId, u32>,
    /// Destinations not yet activated: queued for their blocks or reserved.
    pub(crate) destinations: ChurnMap<HandoffId, u32>,
    pub(crate) next_lease: u64,
    pub(crate) next_reservation: u64,
    /// Requests scheduled in the current pass and their token counts.
    pub(crate) sched: Vec<(u32, u64)>,
    /// The slots of the first pass's `StepOutput::tokens`, entry for entry
    /// (the planned passes add their tokens to these).
    pub(crate) emitted: Vec<u32>,
    /// Reused buffers: prefix hits and the block-boundary histogram of the
    /// multi-pass planner (one entry per token of a block, sized at the
    /// first plan).
    pub(crate) hits: Vec<u32>,
    pub(crate) room_hist: Vec<u64>,
    /// The running batch's positions sorted (stably) by room, with each room's start
    /// offset and a fill cursor: boundary allocations go pass by pass.
    pub(crate) by_room: Vec<u32>,
    pub(crate) room_start: Vec<usize>,
    pub(crate) room_cursor: Vec<usize>,
}

impl VllmCore<PolynomialPerf> {
    /// A core timed by the default polynomial perf model.
    pub fn new(cfg: VllmConfig) -> Self {
        let perf = PolynomialPerf {
            speedup_ratio: cfg.speedup_ratio,
        };
        VllmCore::with_perf(cfg, perf)
    }
}

impl<P: PerfModel> VllmCore<P> {
    /// A core timed by `perf`.
    ///
    /// Memory follows use: the pool holds nothing for blocks never
    /// allocated, and the per-pass buffers grow with the batch (an idle
    /// worker costs a few hundred bytes whatever `num_blocks` and
    /// `max_num_seqs` are).
    pub fn with_perf(cfg: VllmConfig, perf: P) -> Self {
        VllmCore {
            cfg,
            perf,
            pool: BlockPool::new(cfg.num_blocks),
            events: EventQueue::default(),
            seqs: Slab::default(),
            running: Vec::new(),
            waiting: VecDeque::new(),
            skipped: VecDeque::new(),
            awaiting_kv: 0,
            unreported: 0,
            sources: ChurnMap::default(),
            destinations: ChurnMap::default(),
            next_lease: 0,
            next_reservation: 0,
            emitted: Vec::new(),
            sched: Vec::new(),
            hits: Vec::new(),
            room_hist: Vec::new(),
            by_room: Vec::new(),
            room_start: Vec::new(),
            room_cursor: Vec::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &VllmConfig {
        &self.cfg
    }

    /// The perf model.
    pub fn perf(&self) -> &P {
        &self.perf
    }

    /// Completed handoff prefills currently held for a reader.
    pub fn held_sources(&self) -> usize {
        self.sources
            .values()
            .filter(|&&s| self.seqs.get(s).phase == Phase::Held)
            .count()
    }

    /// Destination reservations granted and not yet activated or cancelled.
    pub fn reservations(&self) -> usize {
        self.awaiting_kv
    }

    /// Destinations queued for a reservation the waiting loop has not
    /// granted yet.
    pub fn queued_reservations(&self) -> usize {
        self.destinations.len() - self.awaiting_kv
    }

    pub(crate) fn bs(&self) -> u64 {
        u64::from(self.cfg.block_tokens())
    }

    pub(crate) fn blocks_for(&self, tokens: u64) -> u64 {
        tokens.div_ceil(self.bs())
    }

    /// Whether a request can ever be served by this pool: the whole sequence
    /// (prompt plus output, prompt only for a handoff prefill) must fit, the
    /// analogue of vLLM rejecting prompts past `max_model_len`. Without this
    /// a lone request could preempt itself forever.
    pub(crate) fn fits_pool(&self, request: &Request, prefill_only: bool) -> bool {
        let out = if prefill_only {
            0
        } else {
            u64::from(request.max_output_tokens.max(1))
        };
        request.prompt_tokens > 0
            && self.blocks_for(u64::from(request.prompt_tokens) + out) <= self.pool.total()
    }

    /// Watermark blocks for an admission now: vLLM applies it only when some
    /// request is already scheduled, so an idle worker can always admit.
    pub(crate) fn watermark_now(&self) -> u64 {
        if self.running.is_empty() {
            0
        } else {
            self.cfg.watermark_blocks()
        }
    }

    /// Whether a sequence needing `need` blocks without prefix hits fits in
    /// `room` free blocks once its hits are taken: the longest run of
    /// published blocks matching `hashes`, at most `max_blocks` long, is
    /// written to `hits`, and a hit saves a block unless it is unreferenced
    /// (taking a cached free block consumes it). Returns the unreferenced
    /// hits when it fits; otherwise `hits` is left part-filled. After vLLM
    /// `KVCacheManager.get_computed_blocks` / `find_longest_cache_hit` and
    /// the free-block test of `allocate_slots`.
    ///
    /// A waiting request that does not fit is tried again every pass, and
    /// its prompt is hundreds of blocks: the walk stops as soon as the
    /// unreferenced hits so far rule a fit out even if every block still
    /// unread were a referenced hit. Whether it fits is exactly what the
    /// whole walk would say.
    pub(crate) fn fit_hits(
        &self,
        hashes: &[u64],
        max_blocks: u64,
        need: u64,
        room: Option<u64>,
        hits: &mut Vec<u32>,
    ) -> Option<u64> {
        hits.clear();
        let room = room?;
        if !self.cfg.enable_prefix_caching {
            return (need <= room).then_some(0);
        }
        let max_n = (max_blocks as usize).min(hashes.len());
        // The least `need` can end up at: every block still unread a
        // referenced hit. Grows by one per unreferenced hit.
        let mut least = need.saturating_sub(max_n as u64);
        if least > room {
            return None;
        }
        let mut evictable = 0;
        let mut near = handoff_hashtable::Near::default();
        for &h in &hashes[..max_n] {
            let Some(b) = self.pool.lookup(h, &mut near) else {
                break;
            };
            if self.pool.is_free(b) {
                evictable += 1;
                least += 1;
                if least > room {
                    return None;
                }
            }
            hits.push(b);
        }
        let need = need - (hits.len() as u64 - evictable);
        (need <= room).then_some(evictable)
    }

    /// Free blocks an admission may take now: the free queue less the
    /// watermark and `reserved` (`None` when those alone do not fit).
    pub(crate) fn admission_room(&self, reserved: u64) -> Option<u64> {
        self.pool
            .free_len()
            .checked_sub(self.watermark_now())?
            .checked_sub(reserved)
    }

    /// Extends `s`'s block table to hold `tokens` tokens. The caller has
    /// checked that enough blocks are free.
    pub(crate) fn grow(&mut self, s: u32, tokens: u64) {
        let bs = self.bs();
        let seq = self.seqs.get_mut(s);
        // Most calls (a decode inside its last block) need nothing: a
        // multiply says so without the division below. Skipping the seal
        // changes no event: every allocation seals first.
        if tokens <= seq.blocks.len() as u64 * bs {
            return;
        }
        let need = tokens.div_ceil(bs);
        let more = (need as usize).saturating_sub(seq.blocks.len());
        self.events.seal_for(more);
        seq.blocks.reserve(more);
        self.pool
            .allocate_into(more, seq.owner, &mut self.events, &mut seq.blocks);
    }

    /// Publishes the full blocks covered by the first `upto` tokens, generated
    /// ones included (vLLM `KVCacheManager.cache_blocks` /
    /// `BlockPool.cache_full_blocks`, which hashes every full block of the
    /// request's token sequence and emits `BlockStored` for it): each newly
    /// valid block becomes the canonical cache of its hash and a `Stored`
    /// event names every contiguous run. A block whose hash another block
    /// already caches is swapped for that canonical block and its own copy
    /// freed, without an event. Blocks past the prompt get stand-in hashes
    /// ([`generated_hash`]), so a preempted request re-admitted later hits
    /// the blocks it had generated.
    pub(crate) fn commit(&mut self, s: u32, upto: u64) {
        if !self.cfg.enable_prefix_caching {
            return;
        }
        let bs = self.bs();
        let seq = self.seqs.get_mut(s);
        // Nothing newly full (most passes): `upto / bs <= published`,
        // tested with a multiply.
        let start = seq.published as usize;
        if upto < (start as u64 + 1) * bs {
            return;
        }
        let full = (upto / bs).min(seq.blocks.len() as u64) as usize;
        if full <= start {
            return;
        }
        while seq.hashes.len() < full {
            let h = generated_hash(seq, seq.hashes.len());
            seq.hashes.push(h);
        }
        let mut run: Vec<u64> = self.events.buffer(full - start);
        let mut run_parent: Option<u64> = None;
        let mut warmed = start;
        let mut i = start;
        while i < full {
            if i >= warmed {
                warmed = full.min(i + PUBLISH_WARM);
                self.pool.warm_publish(&seq.hashes[i..warmed]);
            }
            // The common case in bulk: fresh blocks under uncached hashes.
            let n = self
                .pool
                .publish_run(&seq.blocks[i..warmed], &seq.hashes[i..warmed]);
            if n > 0 {
                if run.is_empty() {
                    run_parent = i.checked_sub(1).map(|p| seq.hashes[p]);
                }
                run.extend_from_slice(&seq.hashes[i..i + n]);
                i += n;
                continue;
            }
            let h = seq.hashes[i];
            let b = seq.blocks[i];
            match self.pool.publish(b, h) {
                Ok(()) => {
                    if run.is_empty() {
                        run_parent = i.checked_sub(1).map(|p| seq.hashes[p]);
                    }
                    run.push(h);
                }
                Err(canonical) => {
                    self.events.stored(run_parent, std::mem::take(&mut run));
                    self.pool.touch(canonical, seq.owner);
                    self.pool.release(b, seq.owner);
                    seq.blocks[i] = canonical;
                }
            }
            i += 1;
        }
        self.events.stored(run_parent, run);
        seq.published = full as u32;
    }

    /// Drops every reference `s` holds, tail first so that the tail is
    /// evicted first (vLLM `KVCacheManager.free`).
    pub(crate) fn release_blocks(&mut self, s: u32) {
        let seq = self.seqs.get_mut(s);
        self.pool.release_all_rev(&seq.blocks, seq.owner);
        seq.blocks.clear();
        seq.published = 0;
    }

    /// Recompute preemption (vLLM `Scheduler._preempt_request`): free the
    /// blocks, forget computed tokens, requeue at the front. The caller has
    /// already taken `s` out of the running batch.
    pub(crate) fn preempt(&mut self, s: u32, out: &mut StepOutput) {
        self.release_blocks(s);
        let seq = self.seqs.get_mut(s);
        seq.computed = 0;
        seq.decoding = false;
        seq.prebuilt = false;
        seq.phase = Phase::Waiting;
        out.preempted.push(seq.id);
        self.waiting.push_front(s);
    }

    /// A request produced its last token: free its blocks (they stay as
    /// evictable cache) and report it.
    pub(crate) fn finish(&mut self, s: u32, out: &mut StepOutput) {
        self.release_blocks(s);
        out.finished.push(self.seqs.get(s).id);
        self.seqs.remove(s);
    }

    /// A handoff prefill computed its last prompt token: instead of the
    /// terminal free its blocks move, in one transition, from active to
    /// pinned (NIXL `request_finished` returning `delay_free_blocks`).
    pub(crate) fn pin(&mut self, s: u32, id: HandoffId, out: &mut StepOutput) {
        self.next_lease += 1;
        let lease = SourceLeaseId(self.next_lease);
        let seq = self.seqs.get_mut(s);
        self.pool
            .retag_all(&seq.blocks, Owner::Active, Owner::Pinned);
        seq.owner = Owner::Pinned;
        seq.phase = Phase::Held;
        seq.lease = lease;
        out.pinned.push(PrefillPinned {
            id,
            request: seq.id,
            lease,
            blocks: seq.blocks.len() as u64,
            tokens: u64::from(seq.prompt),
        });
    }

    /// Fills `s`'s prompt block hashes (none with prefix caching off).
    pub(crate) fn hash_prompt(&mut self, s: u32, request: &Request) {
        let seq = self.seqs.get_mut(s);
        if self.cfg.enable_prefix_caching {
            request.block_hashes(self.cfg.block_tokens(), &mut seq.hashes);
        }
        seq.prompt_hashes = seq.hashes.len() as u32;
        seq.anchor = generated_anchor(&seq.hashes, seq.id);
    }

    /// Queues an ordinary request or a handoff prefill.
    pub(crate) fn submit(&mut self, request: Request, kind: Kind) -> CommandOutcome {
        if !self.fits_pool(&request, matches!(kind, Kind::Source(_))) {
            return CommandOutcome::Unsupported(Some(request));
        }
        let s = self.seqs.insert(&request, kind, Phase::Waiting);
        self.hash_prompt(s, &request);
        if let Kind::Source(id) = kind {
            self.sources.insert(id, s);
        }
        self.waiting.push_back(s);
        CommandOutcome::Submitted
    }
}

impl<P: PerfModel> SchedulerCore for VllmCore<P> {
    fn capabilities(&self) -> Capabilities {
        let refuse = self.cfg.refuse_destination_reservation;
        Capabilities {
            backend: if refuse {
                Backend::TrtLlm
            } else {
                Backend::Vllm
            },
            destination_reservation: !refuse,
            source_lease_ttl: self.cfg.source_lease_ttl,
            block_size: self.cfg.block_tokens(),
            event_block_tokens: self.cfg.block_tokens(),
        }
    }

    fn apply(&mut self, cmd: SchedulerCommand, _now: Instant) -> CommandOutcome {
        match cmd {
            SchedulerCommand::Submit(request) => self.submit(request, Kind::Ordinary),
            SchedulerCommand::SubmitHandoffPrefill { id, request } => {
                if self.sources.contains_key(&id) {
                    // A live attempt id reused: refusing keeps the first
                    // attempt's ownership intact.
                    return CommandOutcome::Unsupported(Some(request));
                }
                self.submit(request, Kind::Source(id))
            }
            SchedulerCommand::ReserveDestination { id, request } => self.reserve(id, request),
            SchedulerCommand::ActivateDestination { id } => self.activate(id),
            SchedulerCommand::ReleaseSource { id } => self.release_source(id),
            SchedulerCommand::CancelSource { id } => self.cancel_source(id),
            SchedulerCommand::CancelDestination { id } => self.cancel_destination(id),
            // vLLM keeps no session slots.
            SchedulerCommand::ReleaseSession { .. }
            | SchedulerCommand::EvictSession { .. }
            | SchedulerCommand::IngestSnapshot { .. }
            | SchedulerCommand::CancelSnapshot { .. }
            | SchedulerCommand::FinishPush { .. } => CommandOutcome::Noop,
            SchedulerCommand::ReserveSnapshot { .. } => CommandOutcome::Unsupported(None),
        }
    }

    fn step(&mut self, now: Instant, horizon: Instant, out: &mut StepOutput) {
        self.run_step(now, horizon, out);
    }

    /// Blocks are counted once, by their strongest owner (active > pinned >
    /// reserved): a prefix block shared by a running request and a held
    /// source is active; a cached prefix locked only by a reservation is
    /// reserved (it is no longer evictable), so `reserved_destination_blocks`
    /// can exceed the sum of the reservations' fresh `physical_blocks`.
    fn capacity(&self) -> KvCapacitySnapshot {
        let running = self.running.len() as u64;
        let slots = u64::from(self.cfg.max_num_seqs);
        KvCapacitySnapshot {
            total_blocks: self.pool.total(),
            active_blocks: self.pool.owned_by(Owner::Active),
            pinned_source_blocks: self.pool.owned_by(Owner::Pinned),
            reserved_destination_blocks: self.pool.owned_by(Owner::Reserved),
            cached_blocks: self.pool.cached(),
            total_request_slots: slots,
            free_request_slots: slots.saturating_sub(running),
            decode_headroom_tokens: 0,
            running_requests: running,
            waiting_requests: (self.waiting.len() + self.skipped.len()) as u64,
        }
    }

    /// The free queue's length (vLLM `get_num_free_blocks`) less its cached
    /// blocks: counted from the queue, not from the owner counters.
    fn free_blocks(&self) -> Option<u64> {
        Some(self.pool.free_len().saturating_sub(self.pool.cached()))
    }

    fn drain_kv_events(&mut self, out: &mut Vec<KvEvent>) {
        self.events.drain_into(out);
    }

    /// Watches a held source's blocks before an early free (module
    /// `block_pool/reuse.rs`); one still computing has no reader yet.
    fn watch_released(&mut self, id: HandoffId) {
        if let Some(&s) = self.sources.get(&id) {
            let seq = self.seqs.get(s);
            if seq.phase == Phase::Held {
                self.pool.reuse.watch(id, &seq.blocks);
            }
        }
    }

    fn drain_reused(&mut self, out: &mut Vec<HandoffId>) {
        self.pool.reuse.drain(out);
    }

    fn recycle_kv_hashes(&mut self, hashes: Vec<u64>) {
        self.events.give_back(hashes);
    }

    /// Reservations waiting for their KV and held sources are not runnable;
    /// a destination queued for its blocks is (a step grants it).
    fn is_empty(&self) -> bool {
        self.running.is_empty() && self.runnable_waiting() == 0
    }

    fn is_drained(&self) -> bool {
        self.is_empty() && self.sources.is_empty() && self.destinations.is_empty()
    }

    fn beyond_grid_passes(&self) -> (u64, u64) {
        self.perf.beyond_grid_passes()
    }

    fn quiet_floor(&mut self) -> handoff_core::QuietFloor {
        VllmCore::quiet_floor(self)
    }
}

/// The stand-in hash of block `i` of `seq`, a block past its prompt's full
/// blocks, filled (partly or wholly) by generated tokens. The mocker has no
/// token ids, so the hash stands for "this request's own tokens": it is
/// chained from the prompt's last full block hash (`seq.anchor`, see
/// [`generated_anchor`]; as vLLM's `hash_block_tokens` chains every block
/// from its parent) and mixed with the request id, so it never matches
/// another request's blocks, and a re-admitted request finds exactly the
/// blocks it generated before. Like prompt hashes (`Request::block_hashes`),
/// consecutive blocks count up from a base aligned to the hash tables'
/// group, so a request's generated blocks share groups.
pub(crate) fn generated_hash(seq: &crate::sequence::Seq, i: usize) -> u64 {
    use handoff_core::request::mix64;
    use handoff_hashtable::GROUP_KEYS;
    let i = i as u64;
    let base = mix64(seq.anchor ^ mix64(seq.id.0 ^ (i / GROUP_KEYS) ^ 0x6e4e_2a7e_d0c5));
    (base & !(GROUP_KEYS - 1)) | (i % GROUP_KEYS)
}

/// What request `id`'s generated blocks are chained from: the last of its
/// `prompt_hashes`, or a value of its own when the prompt has no full block.
pub(crate) fn generated_anchor(prompt_hashes: &[u64], id: handoff_core::RequestId) -> u64 {
    match prompt_hashes.last() {
        Some(&last) => last,
        None => handoff_core::request::mix64(id.0 ^ 0x9e4e_7a7e_d000_0000),
    }
}
