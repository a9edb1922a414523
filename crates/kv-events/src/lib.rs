//! # handoff-kv-events
//!
//! What an outside KV indexer needs from the engines' KV events, with no
//! server attached, so replay's `--kv-events-out` and `serve`'s channels
//! write the same bytes:
//!
//! - [`dynamo_events`]: Dynamo's `RouterEvent` JSONL ([`RouterEventWriter`]).
//! - [`dynamo_hash`]: Dynamo's `tokens_hash` (XXH3-64 of a block's token
//!   ids) and the token stand-ins of a trace's hash ids or a generated
//!   block ([`TraceBlocks`]).
//! - [`vllm_hash`]: vLLM's `sha256_cbor` chain of block hashes
//!   (`--block-hash vllm`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod dynamo_events;
pub mod dynamo_hash;
pub mod vllm_hash;

pub use dynamo_events::RouterEventWriter;
pub use dynamo_hash::TraceBlocks;
pub use vllm_hash::BlockHashMode;
