//! # handoff-serve
//!
//! The serving edge of handoff-mocker: what lets real routers, gateways,
//! load generators, metrics scrapers and KV indexers talk to the mocked
//! engines.
//!
//! - **HTTP** ([`http`], [`openai`]): `POST /v1/completions` and
//!   `POST /v1/chat/completions` (streamed as SSE or whole, with `usage`
//!   and `prompt_tokens_details.cached_tokens`), `GET /v1/models`,
//!   `/health`, `/ready`, `/metrics`, `/workers/{id}/metrics`,
//!   `/debug/workers`.
//! - **What routers poll** ([`info`], [`native`]): SGLang's `/server_info`,
//!   `/model_info`, `/get_load`, `/health_generate` and native `/generate`,
//!   vLLM's `/version`, smg's `/v1/loads`, and on each worker's listener
//!   its own `/metrics`, with the deployment's live values.
//! - **The engine** ([`driver`], [`director`]): requests go through the one
//!   [`handoff_engine::Engine`] and the shared
//!   [`handoff_serving::Serving`] director (router frontend, recorder,
//!   handoff lifecycle) to the real worker cores, paced by the wall clock
//!   (`speed` times faster); tokens stream as the workers report them, and
//!   a client that goes away cancels its request.
//! - **Per-worker listeners** ([`worker_http`]): each worker's own OpenAI
//!   routes for a disaggregation proxy, speaking vLLM's
//!   `kv_transfer_params` ([`kv_transfer`]) or, on an SGLang deployment,
//!   SGLang's PD legs with their bootstrap rooms ([`sglang_pd`],
//!   [`bootstrap`]), as `sglang-router` sends them.
//! - **KV events** ([`zmq_pub`], [`vllm_wire`], [`dynamo_events`]): each
//!   worker publishes vLLM-format `KVEventBatch`es on a ZMQ PUB socket,
//!   with vLLM's ROUTER replay socket; Dynamo `RouterEvent` JSONL on
//!   request.
//! - **Metrics** ([`metrics`]): the engines' own Prometheus names.
//! - **Prompts** ([`tokenizer`], [`prompt`], [`vllm_hash`]): a documented
//!   stand-in tokenizer or a Hugging Face `tokenizer.json`, and the block
//!   hashes an external indexer can recompute: the cores' own chain, or
//!   vLLM's `sha256_cbor` chain (`--block-hash vllm`).
//!
//! Only this crate depends on tokio, axum, zmq, rmpv, tokenizers, sha2,
//! minicbor and prometheus-client; `handoff-core` and the backend crates know nothing of
//! it.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod accept;
pub mod bootstrap;
pub mod director;
pub mod dp_lb;
pub mod driver;
pub mod dynamo_events;
pub mod dynamo_hash;
pub mod http;
pub mod http_error;
pub mod info;
pub mod kv_transfer;
mod listener;
pub mod metrics;
pub mod native;
mod offload;
pub mod openai;
pub mod prompt;
pub mod render;
pub mod sampling;
pub mod server;
pub mod sglang_pd;
pub mod tokenizer;
pub mod vllm_hash;
pub mod vllm_wire;
pub mod worker_http;
pub mod zmq_pub;
pub mod zmtp_guard;

pub use dynamo_events::RouterEventWriter;
pub use dynamo_hash::TraceBlocks;
pub use server::{
    parse_worker_http, per_worker, serve, serve_until, serve_workers, serve_workers_until,
    serve_workers_until_forced, worker_http_ports, Listening, ServeConfig,
};
pub use vllm_wire::KvEventEncoding;
pub use zmq_pub::KvEndpoints;
