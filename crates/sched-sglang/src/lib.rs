//! # handoff-sched-sglang
//!
//! An SGLang-faithful scheduler core for handoff-mocker: one worker's paged
//! token-to-KV pool, request-slot pool, radix prefix cache and batch, behind
//! [`handoff_core::SchedulerCore`].
//!
//! What is modelled, and after which upstream code (sgl-project/sglang,
//! `python/sglang/srt/`):
//!
//! - **Memory** — pages counted as numbers, never as objects; request slots
//!   (`DecodeReqToTokenPool`: `max_running_requests` plus a preallocation
//!   margin); a radix cache over chained block hashes with per-node lock
//!   references and LRU eviction of unlocked leaves
//!   (`mem_cache/radix_cache.py`).
//! - **Admission** — FCFS waiting queue through `PrefillAdder`
//!   (`managers/schedule_policy.py`): chunked prefill, `max_prefill_tokens`,
//!   and the new-token-ratio estimate of the running batch's future decode
//!   memory; `batch_is_full` back-off.
//! - **Decode** — one token per running request per pass, LRU eviction and
//!   then retraction when pages run out (`retract_decode`), the ratio's
//!   decay and post-retraction re-estimate (`managers/scheduler.py`).
//! - **Destination-first handoff** — `DecodePreallocQueue.pop_preallocated`
//!   and `_allocatable_tokens` (`disaggregation/decode.py`): slot first,
//!   the whole prompt's pages (SGLang's default decode chunk cache: no
//!   prefix match, no decode KV events) or, with
//!   [`SglangConfig::disaggregation_decode_enable_radix_cache`], a locked
//!   prefix and page-aligned delta pages; `num_reserved_decode_tokens`
//!   headroom as an admission-only quantity; activation (publishing the
//!   delta once, radix mode only) queues a prebuilt request that joins the
//!   batch without recompute, streaming the first token its prefill
//!   sampled (`_commit_transfer_to_req`, `process_batch_result_prebuilt`),
//!   so decode generates the other N−1.
//! - **Decode retraction** — to the retracted queue with the KV offloaded
//!   to host memory, resumed without recompute, new preallocation held
//!   back while it is not empty (`resume_retracted_reqs`,
//!   `process_decode_queue`; the `retracted` module has the details).
//! - **Source** — the prefill server's bootstrap and inflight queues
//!   (`disaggregation/prefill.py`): every finished chunk of a handoff
//!   prefill reports its KV for streaming (`send_kv_chunk`); a completed
//!   handoff prefill keeps its pages, slot and radix lock until
//!   `release_kv_cache`.
//! - **Sessions** (seed 002, off unless [`SessionConfig::enabled`]) —
//!   streaming session slots that keep a turn's KV for the next turn's
//!   append (`managers/session_controller.py`, the session-aware cache),
//!   LRU among idle slots, push locks for the D→P snapshot push, the
//!   prefill worker's [`PrefillSnapshotStore`] in its own pool, and the
//!   prefill bypass at admission; what they do is reported as typed
//!   [`SessionEvent`]s.
//!
//! Timing comes from a [`handoff_perf::PerfModel`] (default
//! [`handoff_perf::PolynomialPerf`]): a pass costs
//! `perf.pass(&Pass)`: the chunks with their cached prefixes, the decode batch
//! with its context tokens, and the pool size (which only the legacy
//! polynomial reads).
//! A `step` call runs one pass, then as many further pure-decode passes as
//! cannot change the batch, in time independent of their number apart from
//! one perf evaluation per pass.
//!
//! Page accounting: every page is free, cached (unlocked in the radix tree,
//! evictable) or owned — active, pinned source or reserved destination. A
//! radix page locked by several owners counts once, for the first of
//! active, pinned, reserved holding it, so the three owned categories are
//! mutually exclusive and `free + cached + active + pinned + reserved ==
//! total`. Request slots and decode headroom are reported beside the pages,
//! never as pages.
//!
//! Known simplifications: prefixes are cached and matched in whole event
//! blocks ([`SglangConfig::event_block_tokens`], default 64 tokens) where
//! SGLang works per page; finished requests cache only their prompt's full
//! event blocks (output tokens are freed, never matched by later prompts in
//! this model anyway); host offload and reload of a retracted decode
//! request take no modelled time; a lone request
//! that cannot get a page is retracted rather than asserting; a request
//! that could not be admitted even by an empty worker is refused as
//! `Unsupported` instead of blocking its queue.
//!
//! # Lifting it into a larger mocker
//!
//! The core is a [`handoff_core::SchedulerCore`] with a pluggable pass-time
//! model: a mocker drives it inside a [`handoff_core::Worker`] with its own
//! clock and loop.
//!
//! ```
//! use handoff_core::{
//!     Generation, HandoffConfig, HandoffPolicy, Instant, Request, RequestId, Worker, WorkerEvent,
//!     WorkerId, WorkerRequest,
//! };
//! use handoff_perf::PolynomialPerf;
//! use handoff_sched_sglang::{SglangConfig, SglangCore};
//!
//! let mut cfg = SglangConfig::with_page_size(1);
//! cfg.total_pages = 16_384;
//! let core = SglangCore::new(cfg, PolynomialPerf { speedup_ratio: 1.0 }).unwrap();
//! let mut w = Worker::new(WorkerId(0), Generation(0), HandoffPolicy::Disabled, HandoffConfig::default(), core);
//! let r = Request {
//!     id: RequestId(1), prompt_tokens: 600, max_output_tokens: 3, prefix_hashes: vec![],
//!     hash_block_tokens: 512, session: None, arrival: Instant::ZERO,
//!     lora: None,
//! };
//! w.handle_request(WorkerRequest::Ordinary(r), Instant::ZERO).unwrap();
//! let (mut now, mut finished) = (Instant::ZERO, false);
//! while let Some(end) = w.step(now, now) {
//!     now = end;
//!     while let Some(e) = w.poll_event() {
//!         finished |= matches!(e, WorkerEvent::RequestFinished { .. });
//!     }
//! }
//! assert!(finished);
//! assert_eq!(w.capacity().kv_used_blocks(), 0);
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod batch;
mod batch_sums;
mod config;
mod core;
mod decode;
mod events;
mod lora;
mod prealloc;
mod prefill;
mod radix;
mod ratio;
mod retracted;
mod seq;
mod session;
mod session_slots;
mod snapshot_store;
mod snapshots;
mod source;

pub use crate::config::{
    default_max_running_requests, default_prealloc_slot_margin, ConfigError, SessionConfig,
    SglangConfig, ASSUMED_CONTEXT_LEN, DEFAULT_EVENT_BLOCK_TOKENS,
};
pub use crate::core::SglangCore;
pub use crate::session_slots::SessionCapacity;
pub use crate::snapshot_store::{
    PrefillSnapshotStore, SnapshotEntry, SnapshotRefusal, SnapshotReservation,
};
pub use handoff_core::session::{
    MissReason, PushFailure, PushResult, SessionEvent, SlotEvictReason, SnapshotEvictReason,
};

#[cfg(test)]
mod tests;
