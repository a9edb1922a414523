//! KV events out of the server: each scheduler's ZMQ PUB socket and vLLM's
//! ROUTER replay socket ([`zmq`], libzmq's), in the layout of
//! [`crate::vllm::wire`], behind a bounded ZMTP filter on the public ports
//! ([`zmtp_guard`]); llm-d's per-engine topics and vLLM's
//! `/kv_event_sources` table ([`sources`]).
//! Dynamo's `RouterEvent` JSONL and the block hashes are
//! `handoff-kv-events`', shared with replay.

pub mod sources;
pub mod zmq;
pub(crate) mod zmtp_guard;
