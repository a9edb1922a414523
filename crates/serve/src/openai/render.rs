//! vLLM's render endpoints: a request's token ids without running it, as
//! the ones the engine would compute on.
//!
//! vLLM's API server answers `POST /v1/completions/render` with a list of
//! `GenerateRequest`s (one per prompt) and `POST
//! /v1/chat/completions/render` with one (`vllm/entrypoints/serve/render/`,
//! `OpenAIServingRender.render_completion_request` and
//! `render_chat_request`; the `GenerateRequest` model of
//! `vllm/entrypoints/serve/disagg/protocol.py`). A router that hashes
//! prompts itself asks these before routing: vllm-router 0.1.17 posts the
//! client's body unchanged to every candidate worker's render path and
//! reads `token_ids` of each item (`src/backend/preprocess.rs`,
//! `prepare_http_token_inputs` and `http_rendered_tokens`); a 404 there
//! makes it try `/tokenize`, then route without tokens.
//!
//! Here the body is checked as the generating endpoint checks it
//! ([`crate::openai::parse`]: model, sampling fields, context length), so
//! a request render accepts is one generation accepts, and `token_ids` is
//! exactly the prompt the engine is given for it: the same tokenizer
//! (`--tokenizer` or the stand-in), the same chat template, token-id
//! prompts as sent. Nothing is queued and no id is used up.

use crate::http::error::{body_error_response, error, MAX_BODY_BYTES};
use crate::http::state::AppState;
use crate::openai::{parse, ApiError, Endpoint, GenRequest};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use std::sync::Arc;

/// The two render routes over `app`, to merge into a listener's router
/// (the front port's or a worker's: every vLLM API server has them).
pub fn routes(app: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/completions/render", post(completions))
        .route("/v1/chat/completions/render", post(chat))
        // vLLM's tokenizer endpoints ride with render: every API server
        // has both ([`crate::openai::tokenize`]).
        .route("/tokenize", post(crate::openai::tokenize::tokenize_route))
        .route(
            "/detokenize",
            post(crate::openai::tokenize::detokenize_route),
        )
        .method_not_allowed_fallback(|| async { error(&ApiError::method_not_allowed()) })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(app)
}

async fn completions(
    State(app): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    answer(&app, Endpoint::Completions, body).await
}

async fn chat(State(app): State<Arc<AppState>>, body: Result<Bytes, BytesRejection>) -> Response {
    answer(&app, Endpoint::Chat, body).await
}

async fn answer(
    app: &AppState,
    endpoint: Endpoint,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(r) => return body_error_response(&r),
    };
    let limits = app.limits.clone();
    match crate::http::offload::off_thread(move || render(endpoint, &body, &limits)).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => error(&e),
    }
}

/// The render answer to `body` sent to `endpoint`'s render path: a list of
/// one `GenerateRequest` for completions, the `GenerateRequest` itself for
/// chat; or the error generation would have answered.
pub fn render(
    endpoint: Endpoint,
    body: &[u8],
    limits: &crate::openai::Limits,
) -> Result<Value, ApiError> {
    let req = parse(endpoint, body, limits)?;
    // `parse` read the body as a JSON object already.
    let v: Value = serde_json::from_slice(body).unwrap_or_default();
    let item = generate_request(endpoint, &req, &limits.model, &v);
    Ok(match endpoint {
        Endpoint::Completions => Value::Array(vec![item]),
        Endpoint::Chat => item,
    })
}

/// vLLM's `GenerateRequest` for `req`: its token ids and the sampling
/// fields this mock honours. `request_id` is derived from the token ids
/// (vLLM draws a UUID), so equal bodies render equal bytes.
fn generate_request(endpoint: Endpoint, req: &GenRequest, model: &str, body: &Value) -> Value {
    let prefix = match endpoint {
        Endpoint::Completions => "cmpl",
        Endpoint::Chat => "chatcmpl",
    };
    json!({
        "request_id": format!("{prefix}-render-{:016x}", crate::openai::prompt::block_content_hash(&req.prompt)),
        "token_ids": req.prompt,
        "features": null,
        "sampling_params": {
            "max_tokens": req.max_tokens,
            "min_tokens": req.min_tokens,
            "ignore_eos": req.ignore_eos,
        },
        "model": model,
        "stream": req.stream,
        "cache_salt": null,
        "priority": 0,
        "kv_transfer_params": body.get("kv_transfer_params").cloned().unwrap_or(Value::Null),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::tokenizer::Tokenizer;
    use crate::openai::Limits;

    fn limits() -> Limits {
        Limits {
            model: "m".into(),
            max_model_len: 4096,
            tokenizer: Tokenizer::default(),
            loras: Default::default(),
        }
    }

    fn body(v: Value) -> Vec<u8> {
        serde_json::to_vec(&v).expect("json")
    }

    #[test]
    fn completions_render_is_a_list_with_the_engines_tokens() {
        let l = limits();
        let b = body(json!({"model": "m", "prompt": "the quick brown fox", "max_tokens": 3}));
        let got = render(Endpoint::Completions, &b, &l).expect("accepted");
        let want = parse(Endpoint::Completions, &b, &l)
            .expect("accepted")
            .prompt;
        let items = got.as_array().expect("a list of GenerateRequest");
        assert_eq!(items.len(), 1);
        let ids: Vec<u32> = serde_json::from_value(items[0]["token_ids"].clone()).expect("ids");
        assert_eq!(ids, want);
        assert!(!ids.is_empty());
        assert_eq!(items[0]["sampling_params"]["max_tokens"], 3);
        assert_eq!(items[0]["model"], "m");
        assert!(items[0]["features"].is_null());
        // Deterministic: the same body renders the same bytes.
        assert_eq!(render(Endpoint::Completions, &b, &l).expect("again"), got);
    }

    #[test]
    fn chat_render_is_one_request_with_the_templated_tokens() {
        let l = limits();
        let b = body(json!({"model": "m", "messages": [{"role": "user", "content": "hi there"}]}));
        let got = render(Endpoint::Chat, &b, &l).expect("accepted");
        let want = parse(Endpoint::Chat, &b, &l).expect("accepted").prompt;
        let ids: Vec<u32> = serde_json::from_value(got["token_ids"].clone()).expect("ids");
        assert_eq!(ids, want);
        assert!(got["request_id"]
            .as_str()
            .is_some_and(|s| s.starts_with("chatcmpl-")));
    }

    #[test]
    fn token_prompts_render_as_sent_and_bad_bodies_are_refused() {
        let l = limits();
        let b = body(json!({"model": "m", "prompt": [5, 6, 7]}));
        let got = render(Endpoint::Completions, &b, &l).expect("accepted");
        assert_eq!(got[0]["token_ids"], json!([5, 6, 7]));
        let wrong_model = body(json!({"model": "x", "prompt": "a"}));
        assert_eq!(
            render(Endpoint::Completions, &wrong_model, &l).map_err(|e| e.status),
            Err(404)
        );
        let not_json = b"{".to_vec();
        assert_eq!(
            render(Endpoint::Completions, &not_json, &l).map_err(|e| e.status),
            Err(400)
        );
    }
}
