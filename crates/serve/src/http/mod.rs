//! The HTTP routes (axum on tokio): the OpenAI-compatible endpoints, health,
//! readiness, Prometheus metrics, a debug view of the workers and the P/D
//! conformance report (`/debug/conformance`).
//!
//! Every error is an OpenAI-style JSON body with a 4xx status (5xx only
//! when the engine itself failed a request or is gone). A client that goes
//! away, mid-stream or while waiting for a whole response, drops its
//! response future; its [`state::CancelGuard`] then cancels the request in
//! the engine. Every request goes to the engine through [`submit::submit`].

pub(crate) mod accept;
pub(crate) mod admin;
pub(crate) mod client_faults;
pub mod drain;
pub(crate) mod error;
pub(crate) mod listener;
pub(crate) mod offload;
pub(crate) mod respond;
pub(crate) mod state;
pub(crate) mod submit;
pub(crate) mod worker;

use crate::director::driver::Cmd;
use crate::http::client_faults::ClientFault;
pub use crate::http::error::MAX_BODY_BYTES;
use crate::http::error::{body_error_response, error};
use crate::http::respond::{answer, answer_model, meta, First};
pub use crate::http::state::AppState;
use crate::http::submit::{submit, Order};
use crate::openai::{ApiError, Endpoint};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use handoff_core::RequestId;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The router over `state` (`/v1/models` and the other endpoints routers
/// poll are `metrics::info`'s, merged in by the server).
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat))
        .route("/health", get(|| async { StatusCode::OK }))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/workers/{id}/metrics", get(worker_metrics))
        .route("/debug/workers", get(debug_workers))
        .route("/debug/conformance", get(debug_conformance))
        .fallback(|| async { error(&ApiError::not_found(None, "no such route")) })
        .method_not_allowed_fallback(|| async { error(&ApiError::method_not_allowed()) })
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// What an engine process of its own (`serve --engine`) serves besides
/// its worker listener's routes (`/metrics` among them): readiness and
/// the debug views.
pub(crate) fn pod_routes(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/ready", get(ready))
        .route("/debug/workers", get(debug_workers))
        .route("/debug/conformance", get(debug_conformance))
        .with_state(state)
}

async fn completions(
    State(s): State<Arc<AppState>>,
    headers: axum::http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    generate(s, Endpoint::Completions, &headers, body).await
}

async fn chat(
    State(s): State<Arc<AppState>>,
    headers: axum::http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    generate(s, Endpoint::Chat, &headers, body).await
}

async fn ready(State(s): State<Arc<AppState>>) -> Response {
    if s.drain.is_draining() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "draining"})),
        )
            .into_response();
    }
    let up = !s.view.lock().map(|v| v.workers.is_empty()).unwrap_or(true);
    if up {
        Json(json!({"status": "ready"})).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "starting"})),
        )
            .into_response()
    }
}

fn openmetrics(text: String) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn metrics(State(s): State<Arc<AppState>>) -> Response {
    openmetrics(s.metrics.render(None))
}

async fn worker_metrics(State(s): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    let n = s.view.lock().map(|v| v.workers.len()).unwrap_or(0);
    match id.parse::<usize>() {
        Ok(w) if w < n => openmetrics(s.metrics.render(Some(w))),
        _ => error(&ApiError::not_found(None, format!("no worker {id}"))),
    }
}

async fn debug_workers(State(s): State<Arc<AppState>>) -> Response {
    match s.view.lock() {
        Ok(v) => Json(&*v).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// The P/D conformance report ([`crate::conformance`]): per kind its count
/// and last examples.
async fn debug_conformance(State(s): State<Arc<AppState>>) -> Response {
    Json(s.metrics.conformance().json()).into_response()
}

async fn generate(
    s: Arc<AppState>,
    endpoint: Endpoint,
    headers: &axum::http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(r) => return body_error_response(&r),
    };
    let fault = if s.client_faults {
        match ClientFault::from_headers(headers) {
            Ok(f) => f,
            Err(e) => return error(&e),
        }
    } else {
        ClientFault::default()
    };
    let req = match crate::http::offload::parse_off(endpoint, &body, &s.limits).await {
        Ok(r) => r,
        Err(e) => return error(&e),
    };
    if let Some(e) = fault.refusal() {
        s.metrics.request_failed_as(client_faults::REASON);
        return error(&e);
    }
    if let Some(d) = fault.prefill_delay {
        tokio::time::sleep(d).await;
    }
    let id = RequestId(s.next_id.fetch_add(1, Ordering::Relaxed));
    let meta = meta(
        endpoint,
        id,
        answer_model(&s.limits.model, req.lora.as_ref()),
    );
    let (tokens, output_tokens, lora) = (req.prompt.clone(), req.output_tokens(), req.lora.clone());
    let order = Order {
        id,
        cmd: |tx| Cmd::Submit {
            id,
            tokens,
            output_tokens,
            lora,
            tx,
        },
        fault: Some(fault),
        rid: None,
    };
    submit(&s, order, |sent| {
        answer(meta, req, sent, id.0, None, First::No)
    })
    .await
}
