//! SGLang's native `POST /generate` body (`GenerateReqInput` in
//! `sglang/srt/managers/io_struct.py`; the route is `generate_request` in
//! `sglang/srt/entrypoints/http_server.py`), parsed into the same
//! [`GenRequest`] the OpenAI routes make, with errors naming SGLang's
//! fields.
//!
//! Honoured: `text` (a string, or a one-element list of one) or `input_ids`
//! (token ids, or a one-element list of them), exactly one of the two;
//! `sampling_params.max_new_tokens` (SGLang's default 128, clamped to the
//! context as SGLang's scheduler clamps it), `.min_new_tokens`,
//! `.ignore_eos`; `stream`; `rid` (the response's `meta_info.id`). Other
//! sampling parameters are accepted and ignored, as on the OpenAI routes.
//! Batches (several texts) are a 400.

use crate::tokenizer::PromptKind;
use crate::{encode, json_object, parse, Adapters, ApiError, Endpoint, GenRequest, Limits};
use serde_json::{json, Value};

/// SGLang's `SamplingParams.max_new_tokens` default.
pub const DEFAULT_MAX_NEW_TOKENS: u64 = 128;

/// A parsed `/generate` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativeRequest {
    /// The request as the engine path takes it.
    pub gen: GenRequest,
    /// `rid`, if the client named the request.
    pub rid: Option<String>,
    /// `bootstrap_room` was given: the request is half of SGLang's
    /// destination-first PD pair (`mini_lb` sends it to both workers).
    pub bootstrap: bool,
}

fn invalid(field: &'static str, msg: impl Into<String>) -> ApiError {
    ApiError::invalid(Some(field), msg)
}

/// The prompt's token ids from `text` or `input_ids`.
fn prompt<A>(v: &Value, limits: &Limits<A>) -> Result<Vec<u32>, ApiError> {
    let text = v.get("text").filter(|t| !t.is_null());
    let ids = v.get("input_ids").filter(|t| !t.is_null());
    match (text, ids) {
        (Some(_), Some(_)) => Err(invalid("text", "give either text or input_ids, not both")),
        (None, None) => Err(invalid("text", "text or input_ids is required")),
        (Some(Value::String(s)), None) => encode(limits, s, PromptKind::Completion, "text"),
        (Some(Value::Array(a)), None) => match a.as_slice() {
            [Value::String(s)] => encode(limits, s, PromptKind::Completion, "text"),
            _ => Err(invalid(
                "text",
                "text: batched requests are not supported: send one text per request",
            )),
        },
        (Some(_), None) => Err(invalid("text", "text must be a string")),
        (None, Some(Value::Array(a))) => {
            let flat = match a.as_slice() {
                [Value::Array(inner)] => inner,
                _ if a.iter().any(Value::is_array) => return Err(invalid(
                    "input_ids",
                    "input_ids: batched requests are not supported: send one prompt per request",
                )),
                _ => a,
            };
            // Checked against the vocabulary by [`parse`]; here only
            // that they are integers.
            flat.iter()
                .map(|t| {
                    t.as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| {
                            invalid("input_ids", "input_ids must be non-negative integers")
                        })
                })
                .collect()
        }
        (None, Some(_)) => Err(invalid(
            "input_ids",
            "input_ids must be a list of token ids",
        )),
    }
}

/// The OpenAI field a `/generate` field was checked as, and back
/// (`prompt` is `text` or `input_ids`, whichever was sent).
const RENAMES: [(&str, &str); 3] = [
    ("max_tokens", "sampling_params.max_new_tokens"),
    ("min_tokens", "sampling_params.min_new_tokens"),
    ("ignore_eos", "sampling_params.ignore_eos"),
];

/// `e`, from the OpenAI checks, naming the `/generate` field instead.
fn renamed(mut e: ApiError, prompt_field: &'static str) -> ApiError {
    let to = match e.param {
        Some("prompt") => Some(("prompt", prompt_field)),
        Some(p) => RENAMES.iter().find(|(from, _)| *from == p).copied(),
        None => None,
    };
    if let Some((from, to)) = to {
        e.param = Some(to);
        e.message = e.message.replace(from, to);
        if !e.message.contains(to) {
            e.message = format!("{to}: {}", e.message);
        }
    }
    e
}

/// Parses a `/generate` body: SGLang's fields, checked by the OpenAI
/// routes' rules (vocabulary, context length, `min <= max`).
pub fn parse_native<A: Adapters>(
    body: &[u8],
    limits: &Limits<A>,
) -> Result<NativeRequest, ApiError> {
    let v = json_object(body)?;
    let tokens = prompt(&v, limits)?;
    let prompt_field = if v.get("text").is_some_and(|t| !t.is_null()) {
        "text"
    } else {
        "input_ids"
    };
    let sp = match v.get("sampling_params") {
        None | Some(Value::Null) => json!({}),
        Some(o @ Value::Object(_)) => o.clone(),
        Some(_) => {
            return Err(invalid(
                "sampling_params",
                "sampling_params must be an object",
            ))
        }
    };
    let room = u64::from(limits.max_model_len).saturating_sub(tokens.len() as u64);
    let max_new = match sp.get("max_new_tokens") {
        None | Some(Value::Null) => json!(DEFAULT_MAX_NEW_TOKENS.min(room).max(1)),
        // SGLang clamps an integer that does not fit the context.
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n > room) => json!(room.max(1)),
        Some(x) => x.clone(),
    };
    let rid = match v.get("rid") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(invalid("rid", "rid must be a string")),
    };
    let openai = json!({
        "model": limits.model,
        "prompt": tokens,
        "max_tokens": max_new,
        "min_tokens": sp.get("min_new_tokens").cloned().unwrap_or(Value::Null),
        "ignore_eos": sp.get("ignore_eos").cloned().unwrap_or(Value::Null),
        "stream": v.get("stream").cloned().unwrap_or(Value::Null),
    });
    let gen = parse(Endpoint::Completions, openai.to_string().as_bytes(), limits)
        .map_err(|e| renamed(e, prompt_field))?;
    Ok(NativeRequest {
        gen,
        rid,
        bootstrap: v.get("bootstrap_room").is_some_and(|r| !r.is_null()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::{tokenize, Tokenizer};

    fn limits() -> Limits {
        Limits {
            model: "m".into(),
            max_model_len: 100,
            tokenizer: Tokenizer::Builtin,
            loras: Default::default(),
        }
    }

    fn p(body: &str) -> Result<NativeRequest, ApiError> {
        parse_native(body.as_bytes(), &limits())
    }

    #[test]
    fn text_and_ids() {
        let a = p(r#"{"text":"hello world","sampling_params":{"max_new_tokens":5}}"#).unwrap();
        assert_eq!(a.gen.prompt, tokenize("hello world"));
        assert_eq!(a.gen.max_tokens, 5);
        assert!(!a.gen.stream && !a.bootstrap && a.rid.is_none());
        let b = p(r#"{"text":["hello world"],"stream":true,"rid":"r1"}"#).unwrap();
        assert_eq!(b.gen.prompt, a.gen.prompt);
        assert!(b.gen.stream);
        assert_eq!(b.rid.as_deref(), Some("r1"));
        // The default, clamped to the context left after the prompt.
        assert_eq!(b.gen.max_tokens, 100 - b.gen.prompt.len() as u32);
        let c = p(r#"{"input_ids":[[1,2,3]],"sampling_params":{"max_new_tokens":1000,"min_new_tokens":2,"ignore_eos":true},"bootstrap_room":7}"#).unwrap();
        assert_eq!(c.gen.prompt, vec![1, 2, 3]);
        assert_eq!((c.gen.max_tokens, c.gen.min_tokens), (97, 2));
        assert!(c.gen.ignore_eos && c.bootstrap);
    }

    #[test]
    fn errors_name_sglang_fields() {
        let cases = [
            (r#"{}"#, Some("text")),
            (r#"{"text":"a","input_ids":[1]}"#, Some("text")),
            (r#"{"text":["a","b"]}"#, Some("text")),
            (r#"{"text":3}"#, Some("text")),
            (r#"{"input_ids":[[1],[2]]}"#, Some("input_ids")),
            (r#"{"input_ids":[-1]}"#, Some("input_ids")),
            (r#"{"input_ids":[999999999]}"#, Some("input_ids")),
            (
                r#"{"text":"a","sampling_params":3}"#,
                Some("sampling_params"),
            ),
            (
                r#"{"text":"a","sampling_params":{"max_new_tokens":0}}"#,
                Some("sampling_params.max_new_tokens"),
            ),
            (
                r#"{"text":"a","sampling_params":{"max_new_tokens":"x"}}"#,
                Some("sampling_params.max_new_tokens"),
            ),
            (
                r#"{"text":"a","sampling_params":{"max_new_tokens":2,"min_new_tokens":3}}"#,
                Some("sampling_params.min_new_tokens"),
            ),
            (r#"{"text":"a","stream":"yes"}"#, Some("stream")),
            (r#"{"text":"a","rid":5}"#, Some("rid")),
            (r#"[1]"#, None),
            (r#"{"text""#, None),
        ];
        for (body, param) in cases {
            let e = p(body).expect_err(body);
            assert_eq!((e.status, e.param), (400, param), "{body}: {}", e.message);
            if let Some(f) = param {
                assert!(
                    e.message.contains(f.rsplit('.').next().unwrap_or(f)),
                    "{body}: {}",
                    e.message
                );
            }
        }
    }
}
