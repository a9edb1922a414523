//! # handoff-openai
//!
//! The OpenAI-compatible and SGLang-native request bodies of
//! handoff-mocker's serving edge, without an async runtime or HTTP: the
//! parser with typed errors that name the offending field (never a panic),
//! the sampling fields it checks and ignores ([`sampling`]), prompt token ids
//! and the engine request they become ([`prompt`]), the tokenizer
//! ([`Tokenizer`]: the built-in stand-in or a Hugging Face
//! `tokenizer.json`), SGLang's `/generate` body ([`sglang`]), the API
//! error ([`ApiError`]) and the JSON of responses and stream chunks
//! ([`Meta`], [`Usage`]). `handoff-serve` answers HTTP with them; the fuzzer
//! drives [`parse`] directly.
//!
//! Honoured: `model` (must be the served one or a loaded adapter, else 404
//! as vLLM answers), `prompt` (a string, a one-element list of strings, a
//! list of token ids, or a one-element list of those), `messages` (string
//! content or a list of `{type: "text", text}` parts), `max_tokens` (chat
//! also `max_completion_tokens`; default [`DEFAULT_MAX_TOKENS`]),
//! `min_tokens`, `ignore_eos`, `stream`, `stream_options.include_usage`,
//! `n` (only 1). Other fields are accepted and ignored, as vLLM ignores
//! sampling parameters that do not apply.
//!
//! Output length: with `ignore_eos` the request generates exactly
//! `max_tokens`; without it the synthetic model "emits EOS" at a position
//! drawn from the prompt's hash in `[max(min_tokens, 1), max_tokens]`, so
//! the same prompt always stops at the same place (`finish_reason`
//! `"stop"`, or `"length"` when that position is `max_tokens`).
//!
//! ```
//! use handoff_openai::{parse, Endpoint, Limits, NoAdapters, Tokenizer};
//! use std::sync::Arc;
//!
//! let limits = Limits {
//!     model: "m".into(),
//!     max_model_len: 100,
//!     tokenizer: Tokenizer::Builtin,
//!     loras: Arc::new(NoAdapters),
//! };
//! let req = parse(Endpoint::Completions, br#"{"model": "m", "prompt": "hi", "max_tokens": 4}"#, &limits)?;
//! assert_eq!(req.max_tokens, 4);
//! let e = parse(Endpoint::Completions, br#"{"model": "m", "prompt": "hi", "n": 2}"#, &limits)
//!     .expect_err("only n = 1");
//! assert_eq!((e.status, e.param), (400, Some("n")));
//! # Ok::<(), handoff_openai::ApiError>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
pub mod prompt;
mod response;
pub mod sampling;
pub mod sglang;
pub mod tokenizer;

pub use error::{ApiError, ErrorKind};
pub use response::{Meta, Usage};
pub use tokenizer::{tokenize, EncodeError, PromptKind, Tokenizer, TokenizerFileError};

use handoff_core::LoraAdapter;
use serde_json::Value;
use std::sync::Arc;
use tokenizer::{chat_prompt, fnv1a64, VOCAB};

/// `max_tokens` when the request gives none (OpenAI's completions default).
pub const DEFAULT_MAX_TOKENS: u32 = 16;

/// Which endpoint a body was sent to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /v1/completions`.
    Completions,
    /// `POST /v1/chat/completions`.
    Chat,
}

/// The LoRA adapters a request may name as its `model`: the seam between
/// the parser and whatever table the server keeps (`handoff-serve`'s
/// `LoraRegistry`, after vLLM's `OpenAIServingModels`).
pub trait Adapters {
    /// The adapter `model` names, if one is loaded.
    fn resolve(&self, model: &str) -> Option<LoraAdapter>;
}

/// A server with no adapters: only the base model may be named.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoAdapters;

impl Adapters for NoAdapters {
    fn resolve(&self, _model: &str) -> Option<LoraAdapter> {
        None
    }
}

/// What the server checks requests against.
#[derive(Debug)]
pub struct Limits<A = NoAdapters> {
    /// The served model name.
    pub model: String,
    /// Prompt plus output tokens may not exceed this.
    pub max_model_len: u32,
    /// What text prompts are tokenised with.
    pub tokenizer: Tokenizer,
    /// The LoRA adapters a request may name as `model`.
    pub loras: Arc<A>,
}

// By hand: a derived `Clone` would ask `A: Clone`, and the shared table
// behind the `Arc` is not cloned.
impl<A> Clone for Limits<A> {
    fn clone(&self) -> Self {
        Limits {
            model: self.model.clone(),
            max_model_len: self.max_model_len,
            tokenizer: self.tokenizer.clone(),
            loras: Arc::clone(&self.loras),
        }
    }
}

/// A parsed generation request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenRequest {
    /// Which endpoint.
    pub endpoint: Endpoint,
    /// Prompt token ids (stand-in tokenizer, or as given).
    pub prompt: Vec<u32>,
    /// `max_tokens`.
    pub max_tokens: u32,
    /// `min_tokens`.
    pub min_tokens: u32,
    /// `ignore_eos`.
    pub ignore_eos: bool,
    /// `stream`.
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// The LoRA adapter `model` named; `None` for the base model.
    pub lora: Option<LoraAdapter>,
}

impl GenRequest {
    /// How many tokens it generates (see the module docs).
    pub fn output_tokens(&self) -> u32 {
        if self.ignore_eos {
            return self.max_tokens;
        }
        let lo = self.min_tokens.max(1).min(self.max_tokens);
        let mut bytes = Vec::with_capacity(self.prompt.len() * 4);
        for t in &self.prompt {
            bytes.extend_from_slice(&t.to_le_bytes());
        }
        let span = u64::from(self.max_tokens - lo) + 1;
        lo + (handoff_core::request::mix64(fnv1a64(&bytes)) % span) as u32
    }
}

/// `x` as pydantic's default (lax) `int` reads it: vLLM's request models
/// (`vllm/entrypoints/openai/protocol.py`, `CompletionRequest.max_tokens:
/// int | None`) are pydantic v2 models in lax mode, whose conversion table
/// takes an integer, a float that is an exact integer (`4.0`), or a string
/// of digits (`"4"`); `None` for anything else, or a negative number.
fn lax_uint(x: &Value) -> Option<u64> {
    match x {
        Value::Number(n) => n.as_u64().or_else(|| {
            // Below 2^64, so the conversion is exact.
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(f))
                .map(|f| f as u64)
        }),
        Value::String(s) => {
            let t = s.trim();
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            t.parse().ok()
        }
        _ => None,
    }
}

fn uint(v: &Value, field: &'static str, max: u64) -> Result<Option<u64>, ApiError> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => match lax_uint(x) {
            Some(n) if n <= max => Ok(Some(n)),
            Some(_) => Err(ApiError::invalid(
                Some(field),
                format!("{field} must be at most {max}"),
            )),
            None => Err(ApiError::invalid(
                Some(field),
                format!("{field} must be a non-negative integer"),
            )),
        },
    }
}

fn boolean(v: &Value, field: &'static str) -> Result<bool, ApiError> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::invalid(
            Some(field),
            format!("{field} must be a boolean"),
        )),
    }
}

fn token_ids(a: &[Value]) -> Result<Vec<u32>, ApiError> {
    a.iter()
        .map(|t| match t.as_u64() {
            Some(n) if n < u64::from(VOCAB) => Ok(n as u32),
            _ => Err(ApiError::invalid(
                Some("prompt"),
                format!("token ids must be integers in [0, {VOCAB})"),
            )),
        })
        .collect()
}

/// `text` through `limits`' tokenizer; a refusal names `field`. A prompt
/// leaves room for at least one output token, so one of `max_model_len`
/// tokens or more is refused, by its byte length alone when that makes it
/// certain, else as soon as the tokenizer has cut that many.
pub fn encode<A>(
    limits: &Limits<A>,
    text: &str,
    kind: PromptKind,
    field: &'static str,
) -> Result<Vec<u32>, ApiError> {
    let cap = limits.max_model_len;
    let limit = cap.saturating_sub(1) as usize;
    limits
        .tokenizer
        .encode_at_most(text, kind, limit)
        .map_err(|e| match e {
            EncodeError::Refused(m) => ApiError::invalid(Some(field), m),
            EncodeError::TooMany { at_least } => ApiError::invalid(
                Some(field),
                format!(
                    "This model's maximum context length is {cap} tokens. However, your \
                     request has at least {at_least} input tokens ({} bytes of text). Please \
                     reduce the length of the input.",
                    text.len()
                ),
            ),
        })
}

fn prompt_tokens<A>(v: &Value, limits: &Limits<A>) -> Result<Vec<u32>, ApiError> {
    let bad = || {
        ApiError::invalid(
            Some("prompt"),
            "prompt must be a string, a list of token ids, or a one-element list of either",
        )
    };
    match v.get("prompt") {
        None | Some(Value::Null) => Err(ApiError::invalid(Some("prompt"), "prompt is required")),
        Some(Value::String(s)) => encode(limits, s, PromptKind::Completion, "prompt"),
        Some(Value::Array(a)) => match a.as_slice() {
            [Value::String(s)] => encode(limits, s, PromptKind::Completion, "prompt"),
            [Value::Array(ids)] => token_ids(ids),
            ids if ids.iter().all(Value::is_number) && !ids.is_empty() => token_ids(ids),
            [] => Err(ApiError::invalid(
                Some("prompt"),
                "prompt must not be empty",
            )),
            _ => Err(ApiError::invalid(
                Some("prompt"),
                "batched prompts are not supported: send one prompt per request",
            )),
        },
        Some(_) => Err(bad()),
    }
}

/// `v`'s `messages` rendered ([`chat_text`]) and tokenised as a chat
/// prompt, within `limits`' context length.
pub fn chat_tokens<A>(v: &Value, limits: &Limits<A>) -> Result<Vec<u32>, ApiError> {
    let text = chat_text(v)?;
    encode(limits, &text, PromptKind::Chat, "messages")
}

/// `v`'s `messages` through the chat template ([`chat_prompt`]); the error
/// names the message at fault.
pub fn chat_text(v: &Value) -> Result<String, ApiError> {
    let Some(Value::Array(msgs)) = v.get("messages") else {
        return Err(ApiError::invalid(
            Some("messages"),
            "messages must be a list of messages",
        ));
    };
    if msgs.is_empty() {
        return Err(ApiError::invalid(
            Some("messages"),
            "messages must not be empty",
        ));
    }
    let mut parts: Vec<(String, String)> = Vec::with_capacity(msgs.len());
    for (i, m) in msgs.iter().enumerate() {
        let Some(role) = m.get("role").and_then(Value::as_str) else {
            return Err(ApiError::invalid(
                Some("messages"),
                format!("messages[{i}].role must be a string"),
            ));
        };
        if !sampling::ROLES.contains(&role) {
            return Err(ApiError::invalid(
                Some("messages"),
                format!(
                    "messages[{i}].role {role:?} is not one of {}",
                    sampling::ROLES.join(", ")
                ),
            ));
        }
        let content = match m.get("content") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(ps)) => {
                let mut s = String::new();
                for (j, p) in ps.iter().enumerate() {
                    match (p.get("type").and_then(Value::as_str), p.get("text")) {
                        (Some("text"), Some(Value::String(t))) => s.push_str(t),
                        _ => {
                            return Err(ApiError::invalid(
                                Some("messages"),
                                format!(
                                    "messages[{i}].content[{j}]: only text parts are supported"
                                ),
                            ))
                        }
                    }
                }
                s
            }
            Some(_) => {
                return Err(ApiError::invalid(
                    Some("messages"),
                    format!("messages[{i}].content must be a string or a list of parts"),
                ))
            }
        };
        parts.push((role.to_string(), content));
    }
    Ok(chat_prompt(
        parts.iter().map(|(r, c)| (r.as_str(), c.as_str())),
    ))
}

/// `body` as a JSON object, or the error OpenAI's server gives (located
/// for a syntax error).
pub fn json_object(body: &[u8]) -> Result<Value, ApiError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid(
            None,
            format!(
                "the body is not valid JSON: {e} (line {}, column {})",
                e.line(),
                e.column()
            ),
        )
    })?;
    if !v.is_object() {
        return Err(ApiError::invalid(None, "the body must be a JSON object"));
    }
    Ok(v)
}

/// Parses `body` sent to `endpoint`.
pub fn parse<A: Adapters>(
    endpoint: Endpoint,
    body: &[u8],
    limits: &Limits<A>,
) -> Result<GenRequest, ApiError> {
    let v = json_object(body)?;
    // The base model, or a loaded LoRA adapter (vLLM `OpenAIServing._check_model`
    // and `_maybe_get_adapters`): anything else is a 404.
    let lora = match v.get("model") {
        Some(Value::String(m)) if *m == limits.model => None,
        Some(Value::String(m)) => match limits.loras.resolve(m) {
            Some(l) => Some(l),
            None => {
                return Err(ApiError::not_found(
                    Some("model"),
                    format!("The model `{m}` does not exist."),
                ))
            }
        },
        _ => return Err(ApiError::invalid(Some("model"), "model must be a string")),
    };
    sampling::check(&v, endpoint == Endpoint::Chat)
        .map_err(|(field, message)| ApiError::invalid(Some(field), message))?;
    if let Some(n) = uint(&v, "n", u64::from(u32::MAX))? {
        if n != 1 {
            return Err(ApiError::invalid(Some("n"), "only n = 1 is supported"));
        }
    }
    let prompt = match endpoint {
        Endpoint::Completions => prompt_tokens(&v, limits)?,
        Endpoint::Chat => chat_tokens(&v, limits)?,
    };
    if prompt.is_empty() {
        return Err(ApiError::invalid(
            Some("prompt"),
            "the prompt has no tokens",
        ));
    }
    let cap = u64::from(limits.max_model_len);
    let max_tokens = match (endpoint, uint(&v, "max_completion_tokens", cap)?) {
        (Endpoint::Chat, Some(n)) => Some(n),
        _ => uint(&v, "max_tokens", cap)?,
    }
    .unwrap_or(u64::from(DEFAULT_MAX_TOKENS)) as u32;
    if max_tokens == 0 {
        return Err(ApiError::invalid(
            Some("max_tokens"),
            "max_tokens must be at least 1",
        ));
    }
    let min_tokens = uint(&v, "min_tokens", cap)?.unwrap_or(0) as u32;
    if min_tokens > max_tokens {
        return Err(ApiError::invalid(
            Some("min_tokens"),
            format!("min_tokens ({min_tokens}) must not exceed max_tokens ({max_tokens})"),
        ));
    }
    let total = prompt.len() as u64 + u64::from(max_tokens);
    if total > cap {
        return Err(ApiError::invalid(
            Some("max_tokens"),
            format!(
                "This model's maximum context length is {cap} tokens. However, you requested \
                 {total} tokens ({} in the prompt, {max_tokens} in the completion). Please \
                 reduce the length of the prompt or completion.",
                prompt.len()
            ),
        ));
    }
    let stream = boolean(&v, "stream")?;
    let include_usage = match v.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(o @ Value::Object(_)) => {
            if !stream {
                return Err(ApiError::invalid(
                    Some("stream_options"),
                    "stream_options can only be set when stream is true",
                ));
            }
            boolean(o, "include_usage")?
        }
        Some(_) => {
            return Err(ApiError::invalid(
                Some("stream_options"),
                "stream_options must be an object",
            ))
        }
    };
    Ok(GenRequest {
        endpoint,
        prompt,
        max_tokens,
        min_tokens,
        ignore_eos: boolean(&v, "ignore_eos")?,
        stream,
        include_usage,
        lora,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::tokenize;

    fn limits() -> Limits {
        Limits {
            model: "m".into(),
            max_model_len: 100,
            tokenizer: Tokenizer::Builtin,
            loras: Default::default(),
        }
    }

    fn p(e: Endpoint, body: &str) -> Result<GenRequest, ApiError> {
        parse(e, body.as_bytes(), &limits())
    }

    /// As vLLM's pydantic models read an int: `4.0` and `"4"` are 4,
    /// `4.5`, `-1`, `true` and `"4x"` are refused.
    #[test]
    fn integer_fields_read_as_pydantic_lax_ints() {
        let l = limits();
        for (mt, want) in [("4", 4u32), ("4.0", 4), ("\"4\"", 4), ("5e1", 50)] {
            let b = format!(r#"{{"model": "m", "prompt": "hi", "max_tokens": {mt}}}"#);
            let r = parse(Endpoint::Completions, b.as_bytes(), &l).expect(mt);
            assert_eq!(r.max_tokens, want, "{mt}");
        }
        for mt in ["4.5", "-1", "true", "\"4x\"", "\"\"", "1e300"] {
            let b = format!(r#"{{"model": "m", "prompt": "hi", "max_tokens": {mt}}}"#);
            let e = parse(Endpoint::Completions, b.as_bytes(), &l).expect_err(mt);
            assert_eq!(e.param, Some("max_tokens"), "{mt}");
        }
    }

    #[test]
    fn completion_forms() {
        let a = p(
            Endpoint::Completions,
            r#"{"model":"m","prompt":"hello world"}"#,
        )
        .unwrap();
        assert_eq!(a.prompt, tokenize("hello world"));
        assert_eq!(a.max_tokens, DEFAULT_MAX_TOKENS);
        let b = p(
            Endpoint::Completions,
            r#"{"model":"m","prompt":["hello world"]}"#,
        )
        .unwrap();
        assert_eq!(a.prompt, b.prompt);
        let c = p(
            Endpoint::Completions,
            r#"{"model":"m","prompt":[1,2,3],"max_tokens":5}"#,
        )
        .unwrap();
        assert_eq!(c.prompt, vec![1, 2, 3]);
        let d = p(Endpoint::Completions, r#"{"model":"m","prompt":[[1,2,3]]}"#).unwrap();
        assert_eq!(d.prompt, vec![1, 2, 3]);
    }

    #[test]
    fn chat_forms_and_options() {
        let a = p(
            Endpoint::Chat,
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],
                "max_completion_tokens":7,"stream":true,"stream_options":{"include_usage":true}}"#,
        )
        .unwrap();
        assert_eq!(a.max_tokens, 7);
        assert!(a.stream && a.include_usage);
        let b = p(
            Endpoint::Chat,
            r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}"#,
        )
        .unwrap();
        assert_eq!(b.prompt, tokenize(&chat_prompt([("user", "hi")])));
    }

    #[test]
    fn errors_are_located_4xx() {
        let cases = [
            (r#"{"model":"m","prompt":"x""#, 400, None),
            (r#"[]"#, 400, None),
            (r#"{"model":"other","prompt":"x"}"#, 404, Some("model")),
            (r#"{"prompt":"x"}"#, 400, Some("model")),
            (r#"{"model":"m"}"#, 400, Some("prompt")),
            (r#"{"model":"m","prompt":""}"#, 400, Some("prompt")),
            (r#"{"model":"m","prompt":[]}"#, 400, Some("prompt")),
            (r#"{"model":"m","prompt":["a","b"]}"#, 400, Some("prompt")),
            (r#"{"model":"m","prompt":[-1]}"#, 400, Some("prompt")),
            (
                r#"{"model":"m","prompt":"x","max_tokens":0}"#,
                400,
                Some("max_tokens"),
            ),
            (
                r#"{"model":"m","prompt":"x","max_tokens":-3}"#,
                400,
                Some("max_tokens"),
            ),
            (
                r#"{"model":"m","prompt":"x","max_tokens":1e30}"#,
                400,
                Some("max_tokens"),
            ),
            (
                r#"{"model":"m","prompt":"x","max_tokens":100}"#,
                400,
                Some("max_tokens"),
            ),
            (
                r#"{"model":"m","prompt":"x","max_tokens":4,"min_tokens":5}"#,
                400,
                Some("min_tokens"),
            ),
            (r#"{"model":"m","prompt":"x","n":2}"#, 400, Some("n")),
            (
                r#"{"model":"m","prompt":"x","stream":"yes"}"#,
                400,
                Some("stream"),
            ),
            (
                r#"{"model":"m","prompt":"x","stream_options":{"include_usage":true}}"#,
                400,
                Some("stream_options"),
            ),
        ];
        for (body, status, param) in cases {
            let e = p(Endpoint::Completions, body).expect_err(body);
            assert_eq!((e.status, e.param), (status, param), "{body}");
            assert_eq!(e.body()["error"]["code"], status);
        }
        let e = p(Endpoint::Chat, r#"{"model":"m","messages":[]}"#).unwrap_err();
        assert_eq!(e.param, Some("messages"));
        let e = p(
            Endpoint::Chat,
            r#"{"model":"m","messages":[{"content":"x"}]}"#,
        )
        .unwrap_err();
        assert_eq!(e.param, Some("messages"));
    }

    /// A table of one adapter: `sql`.
    #[derive(Debug)]
    struct OneAdapter;

    impl Adapters for OneAdapter {
        fn resolve(&self, model: &str) -> Option<LoraAdapter> {
            (model == "sql").then(|| LoraAdapter {
                id: 1,
                name: "sql".into(),
            })
        }
    }

    /// `model` is the base model, an adapter the table resolves, or a 404;
    /// with [`NoAdapters`] only the base model.
    #[test]
    fn model_names_the_base_or_an_adapter() {
        let l = Limits {
            model: "m".into(),
            max_model_len: 100,
            tokenizer: Tokenizer::Builtin,
            loras: Arc::new(OneAdapter),
        };
        let body = |m: &str| format!(r#"{{"model":"{m}","prompt":"hi"}}"#);
        let base = parse(Endpoint::Completions, body("m").as_bytes(), &l).expect("base");
        assert_eq!(base.lora, None);
        let sql = parse(Endpoint::Completions, body("sql").as_bytes(), &l).expect("adapter");
        assert_eq!(sql.lora.map(|a| a.id), Some(1));
        let e = parse(Endpoint::Completions, body("other").as_bytes(), &l).expect_err("unknown");
        assert_eq!(
            (e.status, e.kind, e.param),
            (404, ErrorKind::NotFound, Some("model"))
        );
        let e = p(Endpoint::Completions, &body("sql")).expect_err("no adapters");
        assert_eq!(e.status, 404);
    }

    #[test]
    fn output_length_rules() {
        let mut r = p(
            Endpoint::Completions,
            r#"{"model":"m","prompt":"abc","max_tokens":9}"#,
        )
        .unwrap();
        r.ignore_eos = true;
        assert_eq!(r.output_tokens(), 9);
        r.ignore_eos = false;
        for min in 0..=9 {
            r.min_tokens = min;
            let n = r.output_tokens();
            assert!(n >= min.max(1) && n <= 9, "{min} -> {n}");
            assert_eq!(n, r.output_tokens());
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        const SEEDS: [&str; 4] = [
            r#"{"model":"m","prompt":"hello world","max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}"#,
            r#"{"model":"m","prompt":[1,2,3],"min_tokens":2,"ignore_eos":true}"#,
            r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_completion_tokens":3}"#,
            r#"{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}],"n":1}"#,
        ];

        fn check(body: &[u8]) {
            for e in [Endpoint::Completions, Endpoint::Chat] {
                match parse(e, body, &limits()) {
                    Ok(r) => {
                        assert!(r.max_tokens >= 1 && r.min_tokens <= r.max_tokens);
                        assert!(r.prompt.len() as u64 + u64::from(r.max_tokens) <= 100);
                        assert!(!r.prompt.is_empty());
                        let n = r.output_tokens();
                        assert!(n >= 1 && n <= r.max_tokens);
                    }
                    Err(err) => {
                        assert!((400..500).contains(&err.status));
                        assert!(!err.message.is_empty());
                    }
                }
            }
        }

        proptest! {
            #[test]
            fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..256)) {
                check(&body);
            }

            #[test]
            fn mutated_bodies_never_panic(
                seed in 0usize..SEEDS.len(),
                edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..8),
            ) {
                let mut b = SEEDS[seed].as_bytes().to_vec();
                for (at, byte, op) in edits {
                    let i = at % (b.len() + 1);
                    match op {
                        0 => b.insert(i, byte),
                        1 if i < b.len() => { b.remove(i); }
                        _ if i < b.len() => b[i] = byte,
                        _ => b.push(byte),
                    }
                }
                check(&b);
            }
        }
    }
}
