//! # handoff-serve
//!
//! The serving edge of handoff-mocker: what lets real routers, gateways,
//! load generators, metrics scrapers and KV indexers talk to the mocked
//! engines. Its public surface is [`serve`] and its variants with a
//! [`ServeConfig`], and the OpenAI request parser ([`openai`]); everything
//! else is grouped by concern and private:
//!
//! - `http/`: the HTTP edge. The accept loop with its timeouts, the error
//!   bodies, the front port's routes (`POST /v1/completions`,
//!   `/v1/chat/completions`, `/v1/models`, `/health`, `/ready`,
//!   `/metrics`, `/debug/workers`) and each worker's own listener.
//! - `openai/`: OpenAI request and response bodies, sampling, prompts and
//!   their token ids ([`Tokenizer`]: the built-in stand-in or a Hugging
//!   Face `tokenizer.json`), all `handoff-openai`'s, re-exported; vLLM's
//!   render endpoints.
//! - `vllm/`: vLLM's PD (`kv_transfer_params`) and the wire layout of its
//!   ZMQ KV events ([`KvEventEncoding`]).
//! - `sglang/`: SGLang's PD legs, their bootstrap rooms and its native
//!   `/generate`.
//! - `kv_events/`: the ZMQ PUB and replay sockets ([`KvEndpoints`]).
//!   Dynamo `RouterEvent` JSONL and the block hashes are
//!   `handoff-kv-events`', shared with replay.
//! - `metrics/`: Prometheus with the engines' own names, and what routers
//!   poll (SGLang's `/server_info`, `/get_load`, vLLM's `/version`, smg's
//!   `/v1/loads`).
//! - `pod/`: `serve --engine`, one engine per process: its ranks as
//!   wall-clock worker nodes behind the side channel, the PD handoff with
//!   engines in other processes over the transport ([`pod::serve_pod`]).
//! - `edge/`: what lies between HTTP and the engine in both modes, once:
//!   request streams, the prefix-cache lookup, KV-event publishing, the
//!   worker-event to metric mapping, request-end accounting and the
//!   `/debug/workers` view.
//! - `conformance/`: the P/D conformance report (what the traffic did
//!   that disaggregation did not intend, `/debug/conformance`).
//! - `director/`: the engine thread on the wall clock (`driver.rs`), the
//!   shared `handoff_serving::Serving` director with the edge tapping it,
//!   data parallel rank choice.
//!
//! Only this crate depends on tokio, axum, hyper, zmq (libzmq), rmpv and
//! prometheus-client (tokenizers is `handoff-openai`'s); `handoff-core` and
//! the backend crates know nothing of it.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod conformance;
mod director;
mod edge;
mod error;
mod http;
pub mod kv_events;
mod metrics;
pub mod openai;
pub mod pod;
mod server;
mod sglang;
mod shutdown;
mod vllm;

pub use director::dp_lb::LoadBalanceMethod;
pub use error::ServeError;
pub use http::accept::{HttpTimeouts, DEFAULT_BODY_TIMEOUT_S, DEFAULT_HEADER_TIMEOUT_S};
pub use http::MAX_BODY_BYTES;
pub use kv_events::zmq::KvEndpoints;
pub use openai::Tokenizer;
pub use server::{
    parse_worker_http, per_worker, serve, serve_until, serve_workers, serve_workers_graced,
    serve_workers_until, serve_workers_until_forced, serve_workers_until_graced, worker_http_ports,
    Listening, ServeConfig,
};
pub use sglang::bootstrap::DEFAULT_TIMEOUT_S as DEFAULT_BOOTSTRAP_TIMEOUT_S;
pub use vllm::lora::{
    parse_lora_module, runtime_updating_from as lora_runtime_updating, LoraConfig, LoraModule,
    LoraRegistry, DEFAULT_MAX_LORAS, DEFAULT_MAX_LORA_RANK, RUNTIME_UPDATING_ENV,
};
pub use vllm::wire::{KvEventEncoding, WireEvent, END_SEQ};
