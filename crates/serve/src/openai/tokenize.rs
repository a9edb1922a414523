//! vLLM's `POST /tokenize` and `POST /detokenize`, on the front port and
//! every worker's listener (as every vLLM API server has them).
//!
//! Shapes (`vllm/entrypoints/openai/protocol.py`, `TokenizeCompletionRequest`,
//! `TokenizeChatRequest`, `TokenizeResponse`, `DetokenizeRequest`,
//! `DetokenizeResponse`; served by
//! `vllm/entrypoints/openai/serving_tokenization.py`,
//! `OpenAIServingTokenization.create_tokenize` and `create_detokenize`):
//!
//! - in: `{model?, prompt, add_special_tokens = true, return_token_strs}`
//!   or `{model?, messages, add_generation_prompt = true,
//!   add_special_tokens = false, return_token_strs}`; out: `{count,
//!   max_model_len, tokens, token_strs}` (`token_strs` null unless asked).
//! - in: `{model?, tokens}`; out: `{prompt}`.
//!
//! A `model` other than the served one is a 404, as vLLM's `_check_model`
//! answers. The ids are exactly those generation computes on: the same
//! tokenizer (`--tokenizer` or the stand-in) and chat template
//! ([`crate::openai::tokenizer::chat_prompt`]; `add_generation_prompt:
//! false` leaves off its closing assistant turn, `continue_final_message`
//! is refused rather than ignored). A chat prompt's `add_special_tokens`
//! (false by default) and a completion prompt's (true) pick how the text
//! is encoded. A prompt of
//! `max_model_len` tokens or more is refused as generation refuses it.
//! With the stand-in tokenizer `token_strs` are the text's pieces, and
//! detokenizing is one-way: ids are hashes of pieces, so `/detokenize`
//! answers one stand-in word per id ([`synthetic_piece`] seeded by the id),
//! the same words for the same ids; a Hugging Face tokenizer decodes them
//! (special tokens kept, as vLLM's `tokenizer.decode` does by default).
//!
//! AIBrix's remote tokenizer (`vllm-project/aibrix`,
//! `pkg/utils/tokenizer/adapter_vllm.go`, `VLLMAdapter`) posts these bodies
//! (`add_special_tokens`, `add_generation_prompt` and `return_token_strs`
//! always set) and reads these fields.

use crate::http::error::{body_error_response, error};
use crate::http::state::AppState;
use crate::openai::tokenizer::{
    pieces, synthetic_piece, PromptKind, Tokenizer, GENERATION_PROMPT, VOCAB,
};
use crate::openai::{chat_text, encode, ApiError, Limits};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::sync::Arc;

/// The most ids `/detokenize` takes (a prompt is shorter than
/// `max_model_len`; this bounds the work whatever that is).
pub const MAX_DETOKENIZE_IDS: usize = 1 << 20;

fn object(body: &[u8], limits: &Limits) -> Result<Value, ApiError> {
    let v = crate::openai::json_object(body)?;
    match v.get("model") {
        None | Some(Value::Null) => {}
        Some(Value::String(m)) if *m == limits.model => {}
        Some(Value::String(m)) => {
            return Err(ApiError::not_found(
                Some("model"),
                format!("The model `{m}` does not exist."),
            ))
        }
        Some(_) => return Err(ApiError::invalid(Some("model"), "model must be a string")),
    }
    Ok(v)
}

fn flag(v: &Value, field: &'static str, default: bool) -> Result<bool, ApiError> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::invalid(
            Some(field),
            format!("{field} must be a boolean"),
        )),
    }
}

/// The `/tokenize` answer to `body`, or the error vLLM would give.
pub fn tokenize(body: &[u8], limits: &Limits) -> Result<Value, ApiError> {
    let v = object(body, limits)?;
    let want_strs = flag(&v, "return_token_strs", false)?;
    let specials = |default| -> Result<PromptKind, ApiError> {
        Ok(if flag(&v, "add_special_tokens", default)? {
            PromptKind::Completion
        } else {
            PromptKind::Chat
        })
    };
    let text = if v.get("messages").is_some() {
        if flag(&v, "continue_final_message", false)? {
            return Err(ApiError::invalid(
                Some("continue_final_message"),
                "continue_final_message is not supported",
            ));
        }
        let mut text = chat_text(&v)?;
        if !flag(&v, "add_generation_prompt", true)? {
            text.truncate(text.len() - GENERATION_PROMPT.len());
        }
        (text, specials(false)?, "messages")
    } else {
        let Some(Value::String(prompt)) = v.get("prompt") else {
            return Err(ApiError::invalid(
                Some("prompt"),
                "prompt must be a string (or send messages)",
            ));
        };
        (prompt.clone(), specials(true)?, "prompt")
    };
    let (text, kind, field) = text;
    let tokens = encode(limits, &text, kind, field)?;
    let strs = want_strs.then(|| token_strs(&limits.tokenizer, &tokens, &text));
    Ok(json!({
        "count": tokens.len(),
        "max_model_len": limits.max_model_len,
        "tokens": tokens,
        "token_strs": strs,
    }))
}

/// Each id's string: the Hugging Face vocabulary's entry, or (stand-in) the
/// piece of `text` (a chat prompt's rendered template) it was cut from.
fn token_strs(t: &Tokenizer, ids: &[u32], text: &str) -> Vec<String> {
    match t {
        Tokenizer::HuggingFace(h) => ids
            .iter()
            .map(|id| h.id_to_token(*id).unwrap_or_default())
            .collect(),
        Tokenizer::Builtin => pieces(text).into_iter().map(str::to_string).collect(),
    }
}

fn stand_in_word(id: u32) -> &'static str {
    synthetic_piece(u64::from(id), 0)
}

/// The `/detokenize` answer to `body`.
pub fn detokenize(body: &[u8], limits: &Limits) -> Result<Value, ApiError> {
    let v = object(body, limits)?;
    let Some(Value::Array(a)) = v.get("tokens") else {
        return Err(ApiError::invalid(
            Some("tokens"),
            "tokens must be a list of token ids",
        ));
    };
    if a.len() > MAX_DETOKENIZE_IDS {
        return Err(ApiError::invalid(
            Some("tokens"),
            format!("at most {MAX_DETOKENIZE_IDS} token ids"),
        ));
    }
    let mut ids = Vec::with_capacity(a.len());
    for (i, t) in a.iter().enumerate() {
        match t.as_u64() {
            Some(n) if n < u64::from(VOCAB) => ids.push(n as u32),
            _ => {
                return Err(ApiError::invalid(
                    Some("tokens"),
                    format!("tokens[{i}] is not a token id in [0, {VOCAB})"),
                ))
            }
        }
    }
    let prompt = match &limits.tokenizer {
        Tokenizer::HuggingFace(h) => h.decode(&ids, false).map_err(|e| {
            ApiError::invalid(
                Some("tokens"),
                format!("the tokenizer could not decode: {e}"),
            )
        })?,
        Tokenizer::Builtin => ids.iter().map(|id| stand_in_word(*id)).collect(),
    };
    Ok(json!({ "prompt": prompt }))
}

async fn answer(
    app: &AppState,
    body: Result<Bytes, BytesRejection>,
    f: fn(&[u8], &Limits) -> Result<Value, ApiError>,
) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(r) => return body_error_response(&r),
    };
    let limits = app.limits.clone();
    match crate::http::offload::off_thread(move || f(&body, &limits)).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => error(&e),
    }
}

/// `POST /tokenize`.
pub async fn tokenize_route(
    State(app): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    answer(&app, body, tokenize).await
}

/// `POST /detokenize`.
pub async fn detokenize_route(
    State(app): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    answer(&app, body, detokenize).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            model: "m".into(),
            max_model_len: 64,
            tokenizer: Tokenizer::default(),
            loras: Default::default(),
        }
    }

    fn b(v: Value) -> Vec<u8> {
        serde_json::to_vec(&v).expect("json")
    }

    #[test]
    fn tokenize_answers_vllms_fields_with_the_engines_ids() {
        let l = limits();
        let got = tokenize(&b(json!({"model": "m", "prompt": "hello there"})), &l).expect("ok");
        let want = crate::openai::tokenizer::tokenize("hello there");
        assert_eq!(got["tokens"], json!(want));
        assert_eq!(got["count"], want.len());
        assert_eq!(got["max_model_len"], 64);
        assert!(got["token_strs"].is_null());
        // No model is fine; the pieces come back when asked.
        let got = tokenize(
            &b(json!({"prompt": "hello there", "return_token_strs": true})),
            &l,
        )
        .expect("ok");
        assert_eq!(got["token_strs"], json!(["hello", " there"]));
        // Chat: the generation template's ids.
        let chat = json!({"messages": [{"role": "user", "content": "hi"}]});
        let got = tokenize(&b(chat.clone()), &l).expect("ok");
        let want = crate::openai::parse(
            crate::openai::Endpoint::Chat,
            &b(json!({"model": "m", "messages": chat["messages"], "max_tokens": 1})),
            &l,
        )
        .expect("ok")
        .prompt;
        assert_eq!(got["tokens"], json!(want));
        // Without the generation prompt: the template's text less its tail.
        let mut open = chat.clone();
        open["add_generation_prompt"] = json!(false);
        let got = tokenize(&b(open), &l).expect("ok");
        let text = crate::openai::tokenizer::chat_prompt([("user", "hi")]);
        let text = text.strip_suffix(GENERATION_PROMPT).expect("the tail");
        assert_eq!(
            got["tokens"],
            json!(crate::openai::tokenizer::tokenize(text))
        );
    }

    #[test]
    fn tokenize_refuses_what_vllm_refuses() {
        let l = limits();
        let status = |v: Value| {
            tokenize(&b(v), &l)
                .map(|_| ())
                .map_err(|e| (e.status, e.param))
        };
        assert_eq!(
            status(json!({"model": "x", "prompt": "a"})),
            Err((404, Some("model")))
        );
        assert_eq!(status(json!({"prompt": 3})), Err((400, Some("prompt"))));
        assert_eq!(
            status(json!({"prompt": "word ".repeat(100)})),
            Err((400, Some("prompt")))
        );
        assert_eq!(
            status(json!({"messages": [{"role": "user", "content": "a"}],
                          "continue_final_message": true})),
            Err((400, Some("continue_final_message")))
        );
        assert_eq!(tokenize(b"[1]", &l).map_err(|e| e.status).err(), Some(400));
    }

    #[test]
    fn detokenize_is_deterministic_and_checks_ids() {
        let l = limits();
        let got = detokenize(&b(json!({"tokens": [300, 301, 300]})), &l).expect("ok");
        let p = got["prompt"].as_str().expect("a string");
        assert!(!p.is_empty());
        assert_eq!(
            detokenize(&b(json!({"model": "m", "tokens": [300, 301, 300]})), &l).expect("ok"),
            got
        );
        let bad = detokenize(&b(json!({"tokens": [1, -1]})), &l).expect_err("refused");
        assert_eq!((bad.status, bad.param), (400, Some("tokens")));
        assert!(bad.message.contains("tokens[1]"));
        let bad = detokenize(&b(json!({"tokens": [u64::from(VOCAB)]})), &l).expect_err("refused");
        assert_eq!(bad.status, 400);
    }
}
