//! KV events out of the server: each scheduler's ZMQ PUB socket and vLLM's
//! ROUTER replay socket ([`zmq`]), in the layout of [`crate::vllm::wire`].
//! Dynamo's `RouterEvent` JSONL and the block hashes are
//! `handoff-kv-events`', shared with replay.

pub(crate) mod zmq;
