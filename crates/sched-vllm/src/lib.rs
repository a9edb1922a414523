//! # handoff-sched-vllm
//!
//! A scheduler core that behaves like one vLLM v1 worker, for
//! handoff-mocker: it implements [`handoff_core::SchedulerCore`] with the
//! semantics of these upstream pieces (vLLM, as reviewed by the DEP at
//! d1586e1a and on current main):
//!
//! - `vllm/v1/core/block_pool.py` `BlockPool` and
//!   `vllm/v1/core/kv_cache_utils.py` `FreeKVCacheBlockQueue`: fixed-size
//!   blocks with reference counts, an LRU free queue in which cached blocks
//!   stay reusable until evicted from the front, `Stored`/`Removed` KV events
//!   (modules `block_pool`, `free_queue`, `events`).
//! - `vllm/v1/core/kv_cache_manager.py` `KVCacheManager.get_computed_blocks`
//!   and `allocate_slots`: prefix hits by chained block hashes (never the
//!   last prompt token), full-sequence admission
//!   (`scheduler_reserve_full_isl`), the watermark (module `core`).
//! - `vllm/v1/core/sched/scheduler.py` `Scheduler.schedule`,
//!   `update_from_output`, `_preempt_request`, `finish_requests`,
//!   `_free_request`: running first, then FCFS admission within
//!   `max_num_seqs` and `max_num_batched_tokens`, chunked prefill, recompute
//!   preemption of the newest running request (module `step`).
//! - `vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py`
//!   (`request_finished` delaying the free, `get_num_new_matched_tokens`,
//!   `VLLM_NIXL_ABORT_REQUEST_TIMEOUT` = 480 s) and
//!   `Scheduler._update_waiting_for_remote_kv`: a completed handoff prefill
//!   keeps its blocks pinned until released; a destination joins the waiting
//!   queue holding nothing, is allocated blocks for the uncached prompt
//!   suffix only by the waiting loop of a step (`ReserveDestination` answers
//!   `Queued`, the grant comes in `StepOutput::reserved`) if they fit beside
//!   what in-flight prefills still need
//!   (`_inflight_prefill_reserved_blocks`), and waits as
//!   `WAITING_FOR_REMOTE_KVS` in `skipped_waiting`, outside the running
//!   batch, until activated; that queue is scanned before the waiting queue
//!   (`_select_waiting_queue_for_scheduling`), so an activated destination
//!   is admitted ahead of waiting and preempted requests (modules `handoff`,
//!   `admit`).
//! - `vllm/v1/core/block_pool.py` `BlockPool.cache_full_blocks`: every full
//!   block is hashed and published, generated tokens included, with
//!   deterministic stand-in hashes for generated tokens chained from the
//!   prompt's last full block (`core::generated_hash`), so a preempted
//!   request re-admitted later recomputes at most its last partial block.
//! - `vllm/engine/arg_utils.py` `EngineArgs.get_batch_defaults`: the
//!   defaults [`DEFAULT_MAX_NUM_SEQS`] and [`DEFAULT_MAX_NUM_BATCHED_TOKENS`]
//!   are `vllm serve`'s on an H100-class GPU.
//!
//! Deliberate simplifications, each documented where it lives:
//! - One canonical physical block per hash: a second copy of a cached hash
//!   is swapped for the canonical block and freed (the mocker's
//!   `BlockDuplicationPolicy::Reject`; vLLM tolerates duplicates).
//! - No null block: all `num_blocks` are usable.
//! - A reservation is granted at the end of the pass whose waiting loop
//!   granted it (vLLM allocates at the start of the step and starts the NIXL
//!   read during it); a pass that only grants takes no time.
//! - While nothing is running, the waiting loop passes over a request or
//!   destination that does not fit instead of stopping (liveness; upstream
//!   can wedge there), and a queued destination a call could not grant is
//!   reported once as `StepOutput::unavailable` (the role's `Unavailable`).
//! - Generated tokens have no ids, so their blocks' hashes stand for "this
//!   request's own output": they never match another request's blocks.
//! - A handoff prefill samples no token and is always held, even when its
//!   prompt is shorter than a block (NIXL frees those at once).
//! - Sequences longer than the whole pool are refused as `Unsupported`, the
//!   analogue of vLLM's `max_model_len` check.
//!
//! # Lifting it into a larger mocker
//!
//! The core is a [`handoff_core::SchedulerCore`]: a mocker drives it
//! inside a [`handoff_core::Worker`] (which adds the handoff roles) with its
//! own clock and loop. One request, prefilled and decoded, then every block
//! back:
//!
//! ```
//! use handoff_core::{
//!     Generation, HandoffConfig, HandoffPolicy, Instant, Request, RequestId, Worker,
//!     WorkerEvent, WorkerId, WorkerRequest,
//! };
//! use handoff_sched_vllm::{VllmConfig, VllmCore};
//!
//! let core = VllmCore::new(VllmConfig { num_blocks: 1024, block_size: 16, ..VllmConfig::default() });
//! let mut w = Worker::new(WorkerId(0), Generation(0), HandoffPolicy::Disabled, HandoffConfig::default(), core);
//! let r = Request {
//!     id: RequestId(1), prompt_tokens: 600, max_output_tokens: 3, prefix_hashes: vec![],
//!     hash_block_tokens: 512, session: None, arrival: Instant::ZERO,
//!     lora: None,
//! };
//! w.handle_request(WorkerRequest::Ordinary(r), Instant::ZERO).unwrap();
//! let (mut now, mut tokens) = (Instant::ZERO, 0);
//! // One pass per step (horizon = now); the host's loop owns time.
//! while let Some(end) = w.step(now, now) {
//!     now = end;
//!     while let Some(e) = w.poll_event() {
//!         if let WorkerEvent::Tokens { emissions } = e {
//!             tokens += emissions.iter().map(|t| t.tokens).sum::<u32>();
//!         }
//!     }
//! }
//! assert_eq!(tokens, 3);
//! assert_eq!(w.capacity().kv_used_blocks(), 0, "the prompt stays as reusable cache only");
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod admit;
mod block_pool;
mod config;
mod core;
mod events;
mod free_queue;
mod handoff;
mod sequence;
mod step;

#[cfg(test)]
mod tests;

pub use crate::config::{
    should_recompute_remote_kv, VllmConfig, DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS,
    KV_LEASE_DURATION, KV_RECOMPUTE_THRESHOLD, NIXL_ABORT_REQUEST_TIMEOUT,
    PUSH_REGISTRATION_TIMEOUT,
};
pub use crate::core::VllmCore;
