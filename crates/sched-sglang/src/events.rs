//! The KV event queue a router drains.
//!
//! SGLang publishes `BlockStored` when `RadixCache.insert` creates a node and
//! `BlockRemoved` when `RadixCache.evict` deletes one
//! (`srt/mem_cache/radix_cache.py`, `_record_store_event` /
//! `_record_remove_event`). Here the radix index holds exactly one node per
//! logical hash, so the index itself is the per-hash reference count: Stored
//! is queued only on the 0→1 transition (node created) and Removed only on
//! 1→0 (node evicted). A duplicate computation of a cached hash is freed, not
//! published again.

pub(crate) use handoff_core::KvEventQueue;
