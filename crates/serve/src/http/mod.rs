//! The HTTP routes (axum on tokio): the OpenAI-compatible endpoints, health,
//! readiness, Prometheus metrics and a debug view of the workers.
//!
//! Every error is an OpenAI-style JSON body with a 4xx status (5xx only
//! when the engine itself failed a request or is gone). A client that goes
//! away, mid-stream or while waiting for a whole response, drops its
//! response future; its [`CancelGuard`] then cancels the request in the
//! engine.

pub(crate) mod accept;
pub(crate) mod client_faults;
pub(crate) mod error;
pub(crate) mod listener;
pub(crate) mod offload;
pub(crate) mod worker;

use crate::director::driver::{Cmd, EngineView};
use crate::director::StreamMsg;
pub use crate::http::error::MAX_BODY_BYTES;
pub(crate) use crate::http::error::{body_error_response, error};
use crate::metrics::Metrics;
use crate::openai::tokenizer::synthetic_piece;
use crate::openai::{ApiError, Endpoint, ErrorKind, GenRequest, Limits, Meta, Usage};
use crate::vllm::kv_transfer::response_params;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use handoff_core::{KvTransferMode, RequestId};
use serde_json::json;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// What every handler shares.
pub struct AppState {
    /// Commands to the engine thread.
    pub tx: crossbeam_channel::Sender<Cmd>,
    /// The next request id.
    pub next_id: AtomicU64,
    /// What requests are checked against.
    pub limits: Limits,
    /// Prometheus families.
    pub metrics: Arc<Metrics>,
    /// The engine thread's view of the workers.
    pub view: Arc<Mutex<EngineView>>,
    /// When the server started (Unix seconds), for `/v1/models`.
    pub created: u64,
    /// The rids of native requests in flight, for SGLang's
    /// `/abort_request` ([`crate::sglang::abort`]).
    pub rids: Arc<crate::sglang::abort::RidTable>,
    /// Whether requests' fault headers are obeyed
    /// ([`client_faults`], `serve --client-faults`).
    pub client_faults: bool,
}

pub(crate) fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The router over `state` (`/v1/models` and the other endpoints routers
/// poll are [`crate::metrics::info`]'s, merged in by the server).
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat))
        .route("/health", get(|| async { StatusCode::OK }))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/workers/{id}/metrics", get(worker_metrics))
        .route("/debug/workers", get(debug_workers))
        .fallback(|| async { error(&ApiError::not_found(None, "no such route")) })
        .method_not_allowed_fallback(|| async { error(&ApiError::method_not_allowed()) })
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// What an engine process of its own (`serve --engine`) serves besides
/// its worker listener's routes (`/metrics` among them): readiness and
/// the debug view.
pub(crate) fn pod_routes(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/ready", get(ready))
        .route("/debug/workers", get(debug_workers))
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

/// Cancels its request in the engine when dropped before it ended.
pub struct CancelGuard {
    pub(crate) id: RequestId,
    pub(crate) tx: crossbeam_channel::Sender<Cmd>,
    pub(crate) armed: bool,
    /// Its SGLang rid while it runs, if it named one.
    pub(crate) rid: Option<crate::sglang::abort::RidEntry>,
}

impl CancelGuard {
    /// `/abort_request` named it.
    pub(crate) fn aborted(&self) -> bool {
        self.rid.as_ref().is_some_and(|r| r.aborted())
    }
}

impl CancelGuard {
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.tx.send(Cmd::Cancel(self.id));
        }
    }
}

fn finish_reason(produced: u32, max_tokens: u32) -> &'static str {
    if produced >= max_tokens {
        "length"
    } else {
        "stop"
    }
}

pub(crate) fn failure(reason: &str) -> ApiError {
    ApiError {
        status: 503,
        message: format!("the request failed in the engine: {reason}"),
        kind: ErrorKind::Unavailable,
        param: None,
    }
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
        match client_faults::ClientFault::from_headers(headers) {
            Ok(f) => f,
            Err(e) => return error(&e),
        }
    } else {
        client_faults::ClientFault::default()
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
    let (tx, rx) = unbounded_channel();
    let metrics = s.metrics.clone();
    let rx = fault.wrap(rx, id, s.tx.clone(), move || {
        metrics.request_failed_as(client_faults::REASON)
    });
    let submit = Cmd::Submit {
        id,
        tokens: req.prompt.clone(),
        output_tokens: req.output_tokens(),
        lora: req.lora.clone(),
        tx,
    };
    if s.tx.send(submit).is_err() {
        return error(&failure("the engine is not running"));
    }
    let guard = CancelGuard {
        id,
        tx: s.tx.clone(),
        armed: true,
        rid: None,
    };
    let prefix = match endpoint {
        Endpoint::Completions => "cmpl",
        Endpoint::Chat => "chatcmpl",
    };
    let meta = Meta {
        id: format!("{prefix}-{}", id.0),
        created: unix_secs(),
        model: s.limits.model.clone(),
        endpoint,
    };
    if req.stream {
        stream(meta, req, rx, guard, id.0, None).into_response()
    } else {
        whole(meta, req, rx, guard, id.0, None).await
    }
}

pub(crate) async fn whole(
    meta: Meta,
    req: GenRequest,
    mut rx: UnboundedReceiver<StreamMsg>,
    mut guard: CancelGuard,
    seed: u64,
    origin: Option<(&str, u16, KvTransferMode)>,
) -> Response {
    let mut usage = Usage {
        prompt: req.prompt.len() as u32,
        ..Usage::default()
    };
    let mut text = String::new();
    while let Some(m) = rx.recv().await {
        match m {
            StreamMsg::Started { cached_tokens } => usage.cached = cached_tokens,
            StreamMsg::Tokens(n) => {
                for i in 0..n {
                    text.push_str(synthetic_piece(seed, usage.completion + i));
                }
                usage.completion += n;
            }
            StreamMsg::Finished => {
                guard.disarm();
                let finish = finish_reason(usage.completion, req.max_tokens);
                return Json(meta.response(&text, finish, usage)).into_response();
            }
            StreamMsg::Failed(reason) => {
                guard.disarm();
                return error(&failure(reason.name()));
            }
            StreamMsg::Prefilled(p) => {
                guard.disarm();
                text.push_str(synthetic_piece(seed, usage.completion));
                usage.completion += 1;
                let mut body = meta.response(&text, "length", usage);
                let (host, port, mode) = origin.unwrap_or(("", 0, KvTransferMode::Pull));
                body["kv_transfer_params"] = response_params(&p, host, port, mode);
                return Json(body).into_response();
            }
            StreamMsg::Refused(e) => {
                guard.disarm();
                return error(&e.api());
            }
            StreamMsg::Bootstrap(e) => {
                guard.disarm();
                return error(&e.api());
            }
        }
    }
    guard.disarm();
    error(&failure("the engine stopped"))
}

struct Streaming {
    rx: UnboundedReceiver<StreamMsg>,
    guard: CancelGuard,
    meta: Meta,
    usage: Usage,
    max_tokens: u32,
    include_usage: bool,
    seed: u64,
    first: bool,
    pending: VecDeque<Event>,
    done: bool,
}

fn data(v: &serde_json::Value) -> Event {
    Event::default().data(v.to_string())
}

impl Streaming {
    /// The events one message from the engine makes.
    fn on(&mut self, m: StreamMsg) {
        match m {
            StreamMsg::Started { cached_tokens } => self.usage.cached = cached_tokens,
            StreamMsg::Tokens(n) => {
                let mut text = String::new();
                for i in 0..n {
                    text.push_str(synthetic_piece(self.seed, self.usage.completion + i));
                }
                self.usage.completion += n;
                let c = self.meta.chunk(&text, self.first, None);
                self.first = false;
                self.pending.push_back(data(&c));
            }
            StreamMsg::Finished => {
                self.guard.disarm();
                let finish = finish_reason(self.usage.completion, self.max_tokens);
                let c = self.meta.chunk("", self.first, Some(finish));
                self.pending.push_back(data(&c));
                if self.include_usage {
                    self.pending
                        .push_back(data(&self.meta.usage_chunk(self.usage)));
                }
                self.pending.push_back(Event::default().data("[DONE]"));
                self.done = true;
            }
            StreamMsg::Failed(reason) => self.fail(failure(reason.name())),
            StreamMsg::Refused(e) => self.fail(e.api()),
            StreamMsg::Bootstrap(e) => self.fail(e.api()),
            // A listener answers a prefill whole (`ProxyError::Streamed`).
            StreamMsg::Prefilled(_) => self.fail(failure("a prefill cannot be streamed")),
        }
    }

    fn fail(&mut self, e: ApiError) {
        self.guard.disarm();
        self.pending.push_back(data(&e.body()));
        self.pending.push_back(Event::default().data("[DONE]"));
        self.done = true;
    }
}

pub(crate) fn stream(
    meta: Meta,
    req: GenRequest,
    rx: UnboundedReceiver<StreamMsg>,
    guard: CancelGuard,
    seed: u64,
    first: Option<StreamMsg>,
) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>> {
    let mut st = Streaming {
        rx,
        guard,
        meta,
        usage: Usage {
            prompt: req.prompt.len() as u32,
            ..Usage::default()
        },
        max_tokens: req.max_tokens,
        include_usage: req.include_usage,
        seed,
        first: true,
        pending: VecDeque::new(),
        done: false,
    };
    if let Some(m) = first {
        st.on(m);
    }
    Sse::new(futures_util::stream::unfold(st, |mut st| async move {
        loop {
            if let Some(e) = st.pending.pop_front() {
                return Some((Ok(e), st));
            }
            if st.done {
                return None;
            }
            match st.rx.recv().await {
                Some(m) => st.on(m),
                None => {
                    // The engine is gone without ending the request.
                    st.guard.disarm();
                    st.pending
                        .push_back(data(&failure("the engine stopped").body()));
                    st.pending.push_back(Event::default().data("[DONE]"));
                    st.done = true;
                }
            }
        }
    }))
}
