//! SGLang's PD legs on a worker's listener, as `sglang-router` in PD mode
//! sends them (`sgl-router`'s `src/routers/http/pd_router.rs`,
//! `execute_dual_dispatch_internal`): the same body, with
//! `bootstrap_host`, `bootstrap_port` and `bootstrap_room`, to a prefill
//! and a decode worker at once. The legs meet in their room
//! ([`crate::sglang::bootstrap`]); the pair is one destination-first engine
//! request, so the decode reserves before the prefill runs.
//!
//! - The decode leg streams the client's tokens (or answers whole), with
//!   usage, as any request on the frontend.
//! - The prefill leg answers when its KV was sent, with the one token the
//!   prefill sampled (SGLang sets a prefill's `max_new_tokens` to 1 in its
//!   bootstrap queue, `disaggregation/prefill.py`), streamed if asked. The
//!   router reads it whole before it streams the decode's answer and keeps
//!   nothing of it but its status (and, non-streamed, its logprobs).
//! - Routes: `/v1/completions`, `/v1/chat/completions` and SGLang's native
//!   `/generate` ([`generate`]), which the router uses for native requests.
//! - A leg whose partner never comes fails after the bootstrap timeout
//!   with a 500, as SGLang's aborted prefill does; a streamed leg waits for
//!   its pair before answering, so the error is the response's status.

use crate::director::driver::Cmd;
use crate::director::StreamMsg;
use crate::http::error::{body_error_response, error, failure};
use crate::http::listener::WorkerState;
use crate::http::respond::{answer, first_message, meta, First};
use crate::http::state::CancelGuard;
use crate::http::submit::{submit, Order};
use crate::openai::tokenizer::synthetic_piece;
use crate::openai::{ApiError, Endpoint, GenRequest, Limits, Usage};
use crate::sglang::bootstrap::{BootstrapError, RoomKey, Side};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use handoff_core::{HandoffPolicy, RequestId};
use handoff_router::Pool;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedReceiver;

/// The side of a leg sent to `s`'s listener, or why it cannot take one.
fn side(s: &WorkerState) -> Result<Side, BootstrapError> {
    match (s.policy, s.pool) {
        (HandoffPolicy::DestinationFirst, Pool::Prefill) => Ok(Side::Prefill),
        (HandoffPolicy::DestinationFirst, Pool::Decode) => Ok(Side::Decode),
        _ => Err(BootstrapError::NotDestinationFirst),
    }
}

/// What a request without a room gets from `s`'s listener, if it is a
/// worker of an SGLang PD deployment (which serves only legs); a decode
/// worker's is noted in the conformance report ([`crate::conformance`]).
pub(crate) fn needs_room(s: &WorkerState) -> Option<BootstrapError> {
    let side = side(s).ok()?;
    if side == Side::Decode {
        s.app.metrics.conformance().note(
            crate::conformance::ConformanceKind::DecodeWithoutParams,
            Some(s.worker.0),
            None,
            crate::conformance::Detail::None,
        );
    }
    Some(BootstrapError::Missing { side })
}

/// Sends one leg of room `key` (its prompt and output token counts) to
/// the engine of `s` as
/// [`submit`] does, and answers it by `respond` from its side, id and
/// messages.
async fn send<R, F>(s: &WorkerState, key: RoomKey, leg: (Vec<u32>, u32), respond: R) -> Response
where
    R: FnOnce(Side, RequestId, (UnboundedReceiver<StreamMsg>, CancelGuard)) -> F,
    F: std::future::Future<Output = Response>,
{
    let side = match side(s) {
        Ok(side) => side,
        Err(e) => return error(&e.api()),
    };
    let id = RequestId(s.app.next_id.fetch_add(1, Ordering::Relaxed));
    let (worker, (tokens, output_tokens)) = (s.worker, leg);
    let order = Order {
        id,
        cmd: |tx| Cmd::Leg {
            worker,
            side,
            key,
            id,
            tokens,
            output_tokens,
            tx,
        },
        fault: None,
        rid: None,
    };
    submit(&s.app, order, |sent| respond(side, id, sent)).await
}

/// Serves one leg of room `key`, parsed as `req`, on `s`'s listener.
pub(crate) async fn leg(
    s: &WorkerState,
    endpoint: Endpoint,
    mut req: GenRequest,
    key: RoomKey,
) -> Response {
    let model = s.app.limits.model.clone();
    let leg = (req.prompt.clone(), req.output_tokens());
    let respond = move |side, id: RequestId, sent| {
        if side == Side::Prefill {
            req.max_tokens = 1;
        }
        answer(meta(endpoint, id, model), req, sent, id.0, None, First::Leg)
    };
    send(s, key, leg, respond).await
}

/// SGLang's `max_new_tokens` default (`SamplingParams`).
pub const DEFAULT_MAX_NEW_TOKENS: u64 = 128;

/// Reads a native `/generate` body (SGLang's `GenerateReqInput`): `text`
/// or `input_ids` (one prompt), `sampling_params.max_new_tokens` (default
/// [`DEFAULT_MAX_NEW_TOKENS`]), `min_new_tokens`, `ignore_eos`, `stream`;
/// the rest is accepted and ignored. Checked as the equivalent completion
/// request, with the errors naming the native fields.
pub fn native_request(v: &Value, limits: &Limits) -> Result<GenRequest, ApiError> {
    let present = |o: &Value, f: &str| o.get(f).filter(|x| !x.is_null()).cloned();
    let sp = match v.get("sampling_params") {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(o @ Value::Object(_)) => o.clone(),
        Some(_) => {
            return Err(ApiError::invalid(
                Some("sampling_params"),
                "sampling_params must be an object",
            ))
        }
    };
    let prompt = match (present(v, "text"), present(v, "input_ids")) {
        (Some(t), None) => t,
        (None, Some(ids)) => ids,
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                Some("text"),
                "send text or input_ids, not both",
            ))
        }
        (None, None) => {
            return Err(ApiError::invalid(
                Some("text"),
                "text or input_ids is required",
            ))
        }
    };
    let body = json!({
        "model": limits.model,
        "prompt": prompt,
        "max_tokens": present(&sp, "max_new_tokens").unwrap_or(json!(DEFAULT_MAX_NEW_TOKENS)),
        "min_tokens": present(&sp, "min_new_tokens"),
        "ignore_eos": present(&sp, "ignore_eos"),
        "stream": present(v, "stream"),
    });
    crate::openai::parse(Endpoint::Completions, body.to_string().as_bytes(), limits).map_err(
        |mut e| {
            e.param = e.param.map(|p| match p {
                "prompt" => "text",
                "max_tokens" => "sampling_params.max_new_tokens",
                "min_tokens" => "sampling_params.min_new_tokens",
                "ignore_eos" => "sampling_params.ignore_eos",
                other => other,
            });
            e
        },
    )
}

/// A native response body: the text so far and `meta_info`, whose
/// `finish_reason` is set at the end (`length` at `max_new_tokens`, else
/// `stop` on the stand-in EOS).
fn native_body(id: &str, text: &str, usage: Usage, max: u32, done: bool) -> Value {
    let finish = match (done, usage.completion >= max) {
        (false, _) => Value::Null,
        (true, true) => json!({"type": "length", "length": max}),
        (true, false) => json!({"type": "stop", "matched": null}),
    };
    json!({
        "text": text,
        "meta_info": {
            "id": id,
            "finish_reason": finish,
            "prompt_tokens": usage.prompt,
            "completion_tokens": usage.completion,
            "cached_tokens": usage.cached,
        },
    })
}

/// What a native leg has produced so far.
struct Native {
    id: String,
    seed: u64,
    max: u32,
    usage: Usage,
    text: String,
}

impl Native {
    /// Applies one answer; `Err` ends the leg with that error.
    fn on(&mut self, m: StreamMsg) -> Result<bool, ApiError> {
        match m {
            StreamMsg::Started { cached_tokens } => self.usage.cached = cached_tokens,
            StreamMsg::Tokens(n) => {
                for i in 0..n {
                    self.text
                        .push_str(synthetic_piece(self.seed, self.usage.completion + i));
                }
                self.usage.completion += n;
            }
            StreamMsg::Finished => return Ok(true),
            StreamMsg::Failed(why) => return Err(failure(why.name())),
            StreamMsg::Bootstrap(e) => return Err(e.api()),
            StreamMsg::Refused(e) => return Err(e.api()),
            StreamMsg::Prefilled(_) => return Err(failure("a leg cannot pin")),
        }
        Ok(false)
    }

    fn body(&self, done: bool) -> Value {
        native_body(&self.id, &self.text, self.usage, self.max, done)
    }
}

/// `POST /generate` on a worker's listener: SGLang's native route, which
/// sglang-router uses for native requests, for PD legs (with a bootstrap
/// room). Whole: `{text, meta_info}`; streamed: one event per step with
/// the text so far (SGLang's default, non-incremental streaming), then
/// `[DONE]`.
pub(crate) async fn generate(
    State(s): State<Arc<WorkerState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(r) => return body_error_response(&r),
    };
    let parsed = {
        let (body, limits) = (body.clone(), s.app.limits.clone());
        crate::http::offload::off_thread(move || {
            let v: Value = match serde_json::from_slice(&body) {
                Ok(v @ Value::Object(_)) => v,
                _ => return Err(ApiError::invalid(None, "the body must be a JSON object")),
            };
            let req = native_request(&v, &limits)?;
            Ok((v, req))
        })
        .await
    };
    let (v, req) = match parsed {
        Ok(r) => r,
        Err(e) => return error(&e),
    };
    let key = match crate::sglang::bootstrap::parse(&v) {
        Err(e) => return error(&e.api()),
        Ok(Some(k)) => k,
        Ok(None) if s.pool == handoff_router::Pool::Aggregated => {
            return crate::sglang::native::generate_on(&s.app, s.worker, &body).await;
        }
        // vLLM's PD workers take `kv_transfer_params` on the OpenAI routes.
        Ok(None) if matches!(s.policy, HandoffPolicy::SourceFirst | HandoffPolicy::Push) => {
            return error(
                &crate::vllm::kv_transfer::ProxyError::NeedsParams { pool: s.pool }.api(),
            );
        }
        Ok(None) => {
            let e = needs_room(&s).map(|e| e.api()).unwrap_or_else(|| {
                ApiError::not_found(
                    None,
                    "/generate on a worker's listener serves SGLang PD legs (with a bootstrap_room)",
                )
            });
            return error(&e);
        }
    };
    let leg = (req.prompt.clone(), req.output_tokens());
    send(&s, key, leg, |side, id, sent| {
        native_leg(side, id, req, sent)
    })
    .await
}

/// Answers a native leg `id` on `side`, parsed as `req`, from its
/// messages: whole, `{text, meta_info}`; streamed, one event per step with
/// the text so far (SGLang's default, non-incremental streaming), then
/// `[DONE]`.
async fn native_leg(
    side: Side,
    id: RequestId,
    req: GenRequest,
    (mut rx, mut guard): (UnboundedReceiver<StreamMsg>, CancelGuard),
) -> Response {
    let mut n = Native {
        id: id.0.to_string(),
        seed: id.0,
        max: if side == Side::Prefill {
            1
        } else {
            req.max_tokens
        },
        usage: Usage {
            prompt: req.prompt.len() as u32,
            ..Usage::default()
        },
        text: String::new(),
    };
    if !req.stream {
        while let Some(m) = rx.recv().await {
            match n.on(m) {
                Ok(false) => {}
                Ok(true) => {
                    guard.disarm();
                    return Json(n.body(true)).into_response();
                }
                Err(e) => {
                    guard.disarm();
                    return error(&e);
                }
            }
        }
        guard.disarm();
        return error(&failure("the engine stopped"));
    }
    let next = match first_message(First::Leg, &mut rx, &mut guard).await {
        Ok(m) => m,
        Err(e) => return error(&e),
    };
    let pending: VecDeque<Event> = VecDeque::new();
    let st = ((rx, guard), n, pending, next, false);
    Sse::new(futures_util::stream::unfold(
        st,
        |((mut rx, mut guard), mut n, mut pending, mut next, mut done)| async move {
            loop {
                if let Some(e) = pending.pop_front() {
                    let st = ((rx, guard), n, pending, next, done);
                    return Some((Ok::<_, Infallible>(e), st));
                }
                if done {
                    return None;
                }
                let m = match next.take() {
                    Some(m) => m,
                    None => match rx.recv().await {
                        Some(m) => m,
                        None => StreamMsg::Failed(handoff_core::FailureReason::Shutdown),
                    },
                };
                let was = n.usage.completion;
                match n.on(m) {
                    Ok(false) if n.usage.completion > was => {
                        pending.push_back(Event::default().data(n.body(false).to_string()));
                    }
                    Ok(false) => {}
                    Ok(true) => {
                        guard.disarm();
                        pending.push_back(Event::default().data(n.body(true).to_string()));
                        pending.push_back(Event::default().data("[DONE]"));
                        done = true;
                    }
                    Err(e) => {
                        guard.disarm();
                        pending.push_back(Event::default().data(e.body().to_string()));
                        pending.push_back(Event::default().data("[DONE]"));
                        done = true;
                    }
                }
            }
        },
    ))
    .into_response()
}
