//! The worker's pending KV events, after vLLM's `BlockPool.kv_event_queue`
//! (`vllm/v1/core/block_pool.py`), drained by `take_events`.
//!
//! vLLM emits one `BlockRemoved` per evicted block. The evictions of one
//! allocation (one request growing by one or more blocks) are folded into one
//! `Removed` event instead: a router reads the same hashes, and a large
//! admission allocates one event rather than one per block. Folding never
//! crosses an allocation, so the stream does not depend on how often the
//! caller drains it or on how many passes one `step` call covered.

//! The queue itself is the shared [`handoff_core::KvEventQueue`]; the pool
//! reports each eviction with `removed_one` and seals after every allocation.

pub(crate) use handoff_core::KvEventQueue as EventQueue;
