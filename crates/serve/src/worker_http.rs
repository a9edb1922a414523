//! Per-worker HTTP: every worker's own OpenAI listener, for a
//! disaggregation proxy that picks the workers itself (vLLM's
//! `toy_proxy_server.py`, llm-d's routing sidecar) and speaks vLLM's
//! `kv_transfer_params` ([`crate::kv_transfer`]).
//!
//! On worker W's listener:
//!
//! - `do_remote_decode: true` to a prefill worker: the prefill runs on W
//!   (the router bypassed), the source pins (vLLM source-first), and the
//!   whole response (one token) carries the params for the decode;
//! - `do_remote_prefill: true` to a decode worker: the decode of that
//!   pinned handoff attaches to W (it reserves, transfers, activates) and
//!   its tokens stream to this response; an unknown, already decoded or
//!   expired handoff is a 404. A decode never sent leaves the source
//!   pinned until its lease runs out (vLLM's `kv_lease_duration`, 30 s of
//!   model time, which only a decode worker holding the request renews),
//!   which frees the blocks;
//! - no params: served whole on W, whatever its pool, as an ordinary
//!   request (vLLM's NIXL connector loads nothing and pins nothing for a
//!   request without remote params): smg's PD passthrough for vLLM
//!   workers, a plain `max_tokens: 1` prefill on a prefill worker, then
//!   the plain request on a decode worker, which prefills it again.
//!
//! A worker of an SGLang deployment speaks SGLang's PD flow instead: each
//! request is one leg of a pair sent by `sglang-router`, with its
//! bootstrap room ([`crate::sglang_pd`]).
//!
//! Everything still runs through the one engine and the shared serving
//! director ([`crate::director::HttpDirector`]), so the report counts these
//! requests as any other.

use crate::director::StreamMsg;
use crate::driver::{Cmd, Placement};
use crate::http::{body_error_response, error, failure, stream, unix_secs, whole};
use crate::http::{CancelGuard, MAX_BODY_BYTES};
use crate::kv_transfer::{self, KvTransfer, ProxyError};
pub use crate::listener::WorkerState;
use crate::openai::{parse, Endpoint, Meta};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use handoff_core::{HandoffPolicy, RequestId};
use handoff_router::Pool;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::mpsc::unbounded_channel;

/// The routes of one worker's listener.
pub fn worker_router(state: Arc<WorkerState>) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat))
        .route("/generate", post(crate::sglang_pd::generate))
        .route("/health", get(|| async { StatusCode::OK }))
        .with_state(state)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .fallback(|| async { error(&crate::openai::ApiError::not_found(None, "no such route")) })
        .method_not_allowed_fallback(|| async {
            error(&crate::openai::ApiError::method_not_allowed())
        })
}

async fn completions(
    State(s): State<Arc<WorkerState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    generate(s, Endpoint::Completions, body).await
}

async fn chat(State(s): State<Arc<WorkerState>>, body: Result<Bytes, BytesRejection>) -> Response {
    generate(s, Endpoint::Chat, body).await
}

/// What the listener does with a vLLM-flow request, or why not.
fn decide(s: &WorkerState, kv: KvTransfer, streamed: bool) -> Result<KvTransfer, ProxyError> {
    if s.pool != Pool::Aggregated && s.policy != HandoffPolicy::SourceFirst {
        return Err(ProxyError::Ordering);
    }
    match (&kv, s.pool) {
        (KvTransfer::Plain, _) => Ok(kv),
        (KvTransfer::RemoteDecode, Pool::Prefill) if streamed => Err(ProxyError::Streamed),
        (KvTransfer::RemoteDecode, Pool::Prefill) => Ok(kv),
        (KvTransfer::RemoteDecode, pool) => Err(ProxyError::WrongPool {
            pool,
            asked: "do_remote_decode (a prefill for a remote decode)",
        }),
        (KvTransfer::RemotePrefill(_), Pool::Decode) => Ok(kv),
        (KvTransfer::RemotePrefill(_), pool) => Err(ProxyError::WrongPool {
            pool,
            asked: "do_remote_prefill (a decode of a remote prefill)",
        }),
    }
}

async fn generate(
    s: Arc<WorkerState>,
    endpoint: Endpoint,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(r) => return body_error_response(&r),
    };
    let req = match parse(endpoint, &body, &s.app.limits) {
        Ok(r) => r,
        Err(e) => return error(&e),
    };
    // `parse` read the body as a JSON object already.
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    match crate::bootstrap::parse(&v) {
        Err(e) => return error(&e.api()),
        Ok(Some(room)) => return crate::sglang_pd::leg(&s, endpoint, req, room).await,
        Ok(None) => {
            if let Some(e) = crate::sglang_pd::needs_room(&s) {
                return error(&e.api());
            }
        }
    }
    let kv = match kv_transfer::parse(&body).and_then(|kv| decide(&s, kv, req.stream)) {
        Ok(kv) => kv,
        Err(e) => return error(&e.api()),
    };
    let (tx, mut rx) = unbounded_channel();
    let (id, cmd) = match kv {
        KvTransfer::RemotePrefill(remote) => (
            remote.request,
            Cmd::Decode {
                worker: s.worker,
                remote,
                tokens: req.prompt.clone(),
                output_tokens: req.output_tokens(),
                tx,
            },
        ),
        KvTransfer::Plain | KvTransfer::RemoteDecode => {
            let id = RequestId(s.app.next_id.fetch_add(1, Ordering::Relaxed));
            let placement = match (&kv, s.pool) {
                (KvTransfer::Plain, Pool::Prefill | Pool::Decode) => Placement::Local,
                _ => Placement::Proxy,
            };
            let cmd = Cmd::SubmitAt {
                worker: s.worker,
                placement,
                id,
                tokens: req.prompt.clone(),
                output_tokens: req.output_tokens(),
                tx,
            };
            (id, cmd)
        }
    };
    let decode = matches!(cmd, Cmd::Decode { .. });
    if s.app.tx.send(cmd).is_err() {
        return error(&failure("the engine is not running"));
    }
    let mut guard = CancelGuard {
        id,
        tx: s.app.tx.clone(),
        armed: true,
    };
    let prefix = match endpoint {
        Endpoint::Completions => "cmpl",
        Endpoint::Chat => "chatcmpl",
    };
    let meta = Meta {
        id: format!("{prefix}-{}", id.0),
        created: unix_secs(),
        model: s.app.limits.model.clone(),
        endpoint,
    };
    // A decode is checked against the pinned prefills first: a refusal is
    // a 4xx status, not an error inside a 200 stream, and must not cancel
    // the prefill it named.
    let first = if decode && req.stream {
        match rx.recv().await {
            Some(StreamMsg::Refused(e)) => {
                guard.disarm();
                return error(&e.api());
            }
            Some(StreamMsg::Failed(why)) => {
                guard.disarm();
                return error(&failure(why.name()));
            }
            Some(m) => Some(m),
            None => {
                guard.disarm();
                return error(&failure("the engine stopped"));
            }
        }
    } else {
        None
    };
    if req.stream {
        stream(meta, req, rx, guard, id.0, first).into_response()
    } else {
        whole(meta, req, rx, guard, id.0, Some((s.host.as_str(), s.port))).await
    }
}
