//! Per-worker HTTP: every worker's own OpenAI listener, for a
//! disaggregation proxy that picks the workers itself (vLLM's
//! `toy_proxy_server.py`, llm-d's routing sidecar) and speaks vLLM's
//! `kv_transfer_params` ([`crate::vllm::kv_transfer`]).
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
//! On a vLLM deployment's worker, an `X-data-parallel-rank` header pins
//! the request to that rank of W ([`dp_rank_header`]); without it the rank
//! is the engine's own choice ([`crate::director::dp_lb`]).
//!
//! A worker of an SGLang deployment speaks SGLang's PD flow instead: each
//! request is one leg of a pair sent by `sglang-router`, with its
//! bootstrap room ([`crate::sglang::pd`]).
//!
//! Everything still runs through the one engine and the shared serving
//! director ([`crate::director::HttpDirector`]), so the report counts these
//! requests as any other.

use crate::director::driver::{Cmd, Placement};
use crate::director::StreamMsg;
use crate::http::client_faults::{ClientFault, Leg, REASON};
use crate::http::error::{body_error_response, error, MAX_BODY_BYTES};
pub use crate::http::listener::WorkerState;
use crate::http::respond::{answer, answer_model, meta, First};
use crate::http::submit::{submit, Order};
use crate::openai::ApiError;
use crate::openai::{parse, Endpoint};
use crate::vllm::kv_transfer::{self, KvTransfer, ProxyError};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use handoff_core::{Backend, DpLayout, DpRank, KvTransferMode, RequestId};
use handoff_router::Pool;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The routes of one worker's listener.
pub fn worker_router(state: Arc<WorkerState>) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat))
        .route("/generate", post(crate::sglang::pd::generate))
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
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    generate(s, Endpoint::Completions, &headers, body).await
}

async fn chat(
    State(s): State<Arc<WorkerState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    generate(s, Endpoint::Chat, &headers, body).await
}

/// What `headers` ask of this leg ([`crate::http::client_faults`], with
/// `--client-faults`): a failure at once is answered (and counted) here,
/// a delay is waited out here, the rest is returned.
async fn leg_fault(s: &WorkerState, headers: &HeaderMap) -> Result<ClientFault, ApiError> {
    if !s.app.client_faults {
        return Ok(ClientFault::default());
    }
    let role = match s.pool {
        Pool::Prefill => Some(Leg::Prefill),
        Pool::Decode => Some(Leg::Decode),
        Pool::Aggregated => None,
    };
    let f = ClientFault::for_worker(headers, role)?;
    if let Some(e) = f.refusal() {
        s.app.metrics.request_failed_as(REASON);
        return Err(e);
    }
    if let Some(d) = f.prefill_delay {
        tokio::time::sleep(d).await;
    }
    Ok(f)
}

/// vLLM's data-parallel rank header.
pub const DP_RANK_HEADER: &str = "X-data-parallel-rank";

/// The rank a vLLM request's `X-data-parallel-rank` header names, if any,
/// checked against the worker's `dp` ranks.
///
/// vLLM reads the header in `OpenAIServing._get_data_parallel_rank`
/// (`vllm/entrypoints/openai/serving_engine.py`) into the request's
/// `data_parallel_rank`; the engine's input processor
/// (`InputProcessor.process_inputs`, `vllm/v1/engine/input_processor.py`;
/// `Processor.process_inputs` in `processor.py` before) refuses a
/// rank outside `[0, data_parallel_size)` with a `ValueError` the server
/// answers as a 400, worded `data_parallel_rank R is out of range [0, N).`,
/// which this answer copies (`param` names the header); and
/// `DPLBAsyncMPClient.get_core_engine_for_request`
/// (`vllm/v1/engine/core_client.py`) sends the request to that rank's
/// engine ([`crate::director::dp_lb::RankRule::Pinned`]).
///
/// One difference, on purpose: vLLM's `_get_data_parallel_rank` drops a
/// value `int()` cannot parse and load-balances the request; here such a
/// value is a 400 instead (worded as SGLang's
/// `OpenAIServingBase.extract_routed_dp_rank_from_header`,
/// `python/sglang/srt/entrypoints/openai/serving_base.py`, answers it), so
/// a client's typo shows.
///
/// The front port does not read the header: its router places a request
/// on a (worker, rank) pair, and a bare rank number names one rank on
/// every worker.
///
/// SGLang backends: SGLang has an equivalent (that header on its OpenAI
/// routes, `routed_dp_rank` / the deprecated `data_parallel_rank` in the
/// body of `/generate`), which is not modelled yet: on an SGLang
/// deployment the header is ignored and the rank stays SGLang's own
/// choice (`bootstrap_room % N` for a PD leg, round robin otherwise).
pub fn dp_rank_header(
    headers: &HeaderMap,
    backend: Backend,
    dp: DpLayout,
) -> Result<Option<DpRank>, ApiError> {
    if backend != Backend::Vllm {
        return Ok(None);
    }
    let Some(raw) = headers.get(DP_RANK_HEADER) else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(raw.as_bytes());
    let t = text.trim();
    let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ApiError::invalid(
            Some(DP_RANK_HEADER),
            format!("Invalid {DP_RANK_HEADER} header: must be an integer, got '{text}'"),
        ));
    }
    let n = dp.dp_size();
    match t.parse::<i64>() {
        Ok(r) if (0..i64::from(n)).contains(&r) => Ok(Some(DpRank(r as u16))),
        _ => Err(ApiError::invalid(
            Some(DP_RANK_HEADER),
            format!("data_parallel_rank {t} is out of range [0, {n})."),
        )),
    }
}

/// What the listener does with a vLLM-flow request, or why not.
fn decide(s: &WorkerState, kv: KvTransfer, streamed: bool) -> Result<KvTransfer, ProxyError> {
    if s.pool != Pool::Aggregated && !s.policy.prefill_at_arrival() {
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
        (KvTransfer::RemotePrefill(r), Pool::Decode) => {
            crate::vllm::kv_fields::check_mode(&r.layout, KvTransferMode::of(s.policy))?;
            Ok(kv)
        }
        (KvTransfer::RemotePrefill(_), pool) => Err(ProxyError::WrongPool {
            pool,
            asked: "do_remote_prefill (a decode of a remote prefill)",
        }),
    }
}

/// The engine command for a request on this worker, given the channel of
/// its answers: the decode of a remote prefill, or a submission here
/// (served whole by a worker of a disaggregated pool when the request
/// carries no `kv_transfer_params`).
fn engine_cmd(
    s: &WorkerState,
    kv: KvTransfer,
    req: &crate::openai::GenRequest,
    rank: Option<DpRank>,
    id: RequestId,
) -> impl FnOnce(tokio::sync::mpsc::UnboundedSender<StreamMsg>) -> Cmd {
    let (worker, pool) = (s.worker, s.pool);
    let (tokens, output_tokens, lora) = (req.prompt.clone(), req.output_tokens(), req.lora.clone());
    move |tx| match kv {
        KvTransfer::RemotePrefill(remote) => Cmd::Decode {
            worker,
            rank,
            remote,
            tokens,
            output_tokens,
            tx,
        },
        KvTransfer::Plain | KvTransfer::RemoteDecode => {
            let placement = match (&kv, pool) {
                (KvTransfer::Plain, Pool::Prefill | Pool::Decode) => Placement::Local,
                _ => Placement::Proxy,
            };
            Cmd::SubmitAt {
                worker,
                placement,
                rank,
                id,
                tokens,
                output_tokens,
                lora,
                tx,
            }
        }
    }
}

async fn generate(
    s: Arc<WorkerState>,
    endpoint: Endpoint,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(r) => return body_error_response(&r),
    };
    // `parse` reads the body as a JSON object, then it is read again for
    // the PD fields: both off the worker threads.
    let parsed = {
        let (body, limits) = (body.clone(), s.app.limits.clone());
        crate::http::offload::off_thread(move || {
            let req = parse(endpoint, &body, &limits)?;
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            Ok((req, v))
        })
        .await
    };
    let (req, v) = match parsed {
        Ok(r) => r,
        Err(e) => return error(&e),
    };
    let fault = match leg_fault(&s, headers).await {
        Ok(f) => f,
        Err(e) => return error(&e),
    };
    match crate::sglang::bootstrap::parse(&v) {
        Err(e) => return error(&e.api()),
        Ok(Some(room)) => return crate::sglang::pd::leg(&s, endpoint, req, room).await,
        Ok(None) => {
            if let Some(e) = crate::sglang::pd::needs_room(&s) {
                return error(&e.api());
            }
        }
    }
    let kv = match kv_transfer::parse(&body).and_then(|kv| decide(&s, kv, req.stream)) {
        Ok(kv) => kv,
        Err(e) => return error(&e.api()),
    };
    let rank = match dp_rank_header(headers, s.backend, s.dp) {
        Ok(r) => r,
        Err(e) => return error(&e),
    };
    // A decode runs under its prefill's request id.
    let id = match &kv {
        KvTransfer::RemotePrefill(remote) => remote.request,
        _ => RequestId(s.app.next_id.fetch_add(1, Ordering::Relaxed)),
    };
    let first = match kv {
        KvTransfer::RemotePrefill(_) => First::Decode,
        KvTransfer::Plain | KvTransfer::RemoteDecode => First::No,
    };
    let cmd = engine_cmd(&s, kv, &req, rank, id);
    let meta = meta(
        endpoint,
        id,
        answer_model(&s.app.limits.model, req.lora.as_ref()),
    );
    let origin = (s.host.as_str(), s.port, KvTransferMode::of(s.policy));
    let order = Order {
        id,
        cmd,
        fault: Some(fault),
        rid: None,
    };
    let respond = |sent| answer(meta, req, sent, id.0, Some(origin), first);
    submit(&s.app, order, respond).await
}
