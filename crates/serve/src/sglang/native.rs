//! SGLang's native `POST /generate` (`sglang/srt/entrypoints/http_server.py`,
//! `generate_request`; the body is `GenerateReqInput` in
//! `sglang/srt/managers/io_struct.py`), served through the same engine path
//! as the OpenAI routes.
//!
//! Honoured: `text` (a string, or a one-element list of one) or `input_ids`
//! (token ids, or a one-element list of them), exactly one of the two;
//! `sampling_params.max_new_tokens` (SGLang's default 128, clamped to the
//! context as SGLang's scheduler clamps it), `.min_new_tokens`,
//! `.ignore_eos`; `stream`; `rid` (the response's `meta_info.id`). Other
//! sampling parameters are accepted and ignored, as on the OpenAI routes.
//! Batches (several texts) are a 400.
//!
//! Answers: whole, one JSON object `{text, meta_info}`; streamed, SGLang's
//! `data: {text, meta_info}` chunks, where `text` is the whole output so
//! far (SGLang's default, non-incremental streaming), then `data: [DONE]`.
//! `meta_info` carries `id`, `finish_reason` (`null` until the end, then
//! `{"type": "length", "length": N}` or `{"type": "stop", "matched": null}`:
//! the stand-in model has no EOS token id), `prompt_tokens`,
//! `completion_tokens` and `cached_tokens`. The end of a stream is one more
//! chunk with the same text and the finish reason (the engine reports the
//! end after the last tokens).

use crate::director::StreamMsg;
use crate::http::{error, failure, CancelGuard};
use crate::openai::tokenizer::{synthetic_piece, PromptKind};
use crate::openai::{encode, parse, ApiError, Endpoint, GenRequest, Limits};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::convert::Infallible;
use tokio::sync::mpsc::UnboundedReceiver;

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
fn prompt(v: &Value, limits: &Limits) -> Result<Vec<u32>, ApiError> {
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
            // Checked against the vocabulary by `openai::parse`; here only
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
pub fn parse_native(body: &[u8], limits: &Limits) -> Result<NativeRequest, ApiError> {
    let v = crate::openai::json_object(body)?;
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

/// What one native response knows while it is produced.
struct Progress {
    id: String,
    seed: u64,
    prompt: u32,
    cached: u32,
    completion: u32,
    max_new: u32,
    text: String,
}

impl Progress {
    fn new(id: String, seed: u64, req: &GenRequest) -> Self {
        Progress {
            id,
            seed,
            prompt: req.prompt.len() as u32,
            cached: 0,
            completion: 0,
            max_new: req.max_tokens,
            text: String::new(),
        }
    }

    fn tokens(&mut self, n: u32) {
        for i in 0..n {
            self.text
                .push_str(synthetic_piece(self.seed, self.completion + i));
        }
        self.completion += n;
    }

    /// SGLang's `finish_reason` (`FINISH_LENGTH` / `FINISH_MATCHED_TOKEN`
    /// `.to_json()`), `null` while running.
    fn finish(&self, done: bool) -> Value {
        match (done, self.completion >= self.max_new) {
            (false, _) => Value::Null,
            (true, true) => json!({"type": "length", "length": self.completion}),
            (true, false) => json!({"type": "stop", "matched": null}),
        }
    }

    /// The body of a request `/abort_request` ended: what it produced, with
    /// SGLang's `FINISH_ABORT` as the finish reason.
    fn aborted(&self) -> Value {
        let mut v = self.body(false);
        v["meta_info"]["finish_reason"] =
            json!({"type": "abort", "message": "Aborted by /abort_request."});
        v
    }

    fn body(&self, done: bool) -> Value {
        json!({
            "text": self.text,
            "meta_info": {
                "id": self.id,
                "finish_reason": self.finish(done),
                "prompt_tokens": self.prompt,
                "completion_tokens": self.completion,
                "cached_tokens": self.cached,
                "weight_version": "default",
            },
        })
    }
}

/// The response id: the client's `rid`, else the server's request number
/// in hex (SGLang uses a uuid4 hex).
pub fn response_id(rid: Option<String>, id: u64) -> String {
    rid.unwrap_or_else(|| format!("{id:032x}"))
}

/// Answers a submitted request whole.
pub async fn whole(
    id: String,
    req: GenRequest,
    mut rx: UnboundedReceiver<StreamMsg>,
    mut guard: CancelGuard,
    seed: u64,
) -> Response {
    let mut p = Progress::new(id, seed, &req);
    while let Some(m) = rx.recv().await {
        match m {
            StreamMsg::Started { cached_tokens } => p.cached = cached_tokens,
            StreamMsg::Tokens(n) => p.tokens(n),
            StreamMsg::Finished => {
                guard.disarm();
                return Json(p.body(true)).into_response();
            }
            StreamMsg::Failed(_) if guard.aborted() => {
                guard.disarm();
                return Json(p.aborted()).into_response();
            }
            StreamMsg::Failed(reason) => {
                guard.disarm();
                return error(&failure(reason.name()));
            }
            StreamMsg::Refused(e) => {
                guard.disarm();
                return error(&e.api());
            }
            StreamMsg::Bootstrap(e) => {
                guard.disarm();
                return error(&e.api());
            }
            // Only a `do_remote_decode` prefill pins, and `/generate` never
            // asks for one.
            StreamMsg::Prefilled(_) => {
                guard.disarm();
                return error(&failure("a /generate request cannot be a proxy prefill"));
            }
        }
    }
    guard.disarm();
    if guard.aborted() {
        return Json(p.aborted()).into_response();
    }
    error(&failure("the engine stopped"))
}

struct Streaming {
    rx: UnboundedReceiver<StreamMsg>,
    guard: CancelGuard,
    p: Progress,
    pending: VecDeque<Event>,
    done: bool,
}

impl Streaming {
    fn on(&mut self, m: StreamMsg) {
        match m {
            StreamMsg::Started { cached_tokens } => self.p.cached = cached_tokens,
            StreamMsg::Tokens(n) => {
                self.p.tokens(n);
                self.push(false);
            }
            StreamMsg::Finished => {
                self.guard.disarm();
                self.push(true);
                self.close();
            }
            StreamMsg::Failed(reason) => self.fail(&failure(reason.name())),
            StreamMsg::Refused(e) => self.fail(&e.api()),
            StreamMsg::Bootstrap(e) => self.fail(&e.api()),
            StreamMsg::Prefilled(_) => {
                self.fail(&failure("a /generate request cannot be a proxy prefill"))
            }
        }
    }

    fn push(&mut self, done: bool) {
        let chunk = self.p.body(done);
        self.pending
            .push_back(Event::default().data(chunk.to_string()));
    }

    fn close(&mut self) {
        self.pending.push_back(Event::default().data("[DONE]"));
        self.done = true;
    }

    /// SGLang streams an error as `data: {"error": {"message": ...}}`.
    fn fail(&mut self, e: &ApiError) {
        self.guard.disarm();
        let body = json!({"error": {"message": e.message, "code": e.status}});
        self.pending
            .push_back(Event::default().data(body.to_string()));
        self.close();
    }
}

/// Streams a submitted request as SGLang does.
pub fn stream(
    id: String,
    req: GenRequest,
    rx: UnboundedReceiver<StreamMsg>,
    guard: CancelGuard,
    seed: u64,
) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>> {
    let st = Streaming {
        rx,
        guard,
        p: Progress::new(id, seed, &req),
        pending: VecDeque::new(),
        done: false,
    };
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
                None => st.fail(&failure("the engine stopped")),
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::tokenizer::tokenize;

    fn limits() -> Limits {
        Limits {
            model: "m".into(),
            max_model_len: 100,
            tokenizer: crate::openai::tokenizer::Tokenizer::Builtin,
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

    #[test]
    fn bodies_have_sglang_shape() {
        let req = p(r#"{"text":"a b","sampling_params":{"max_new_tokens":2}}"#)
            .unwrap()
            .gen;
        let mut pr = Progress::new(response_id(None, 10), 10, &req);
        assert_eq!(pr.id, format!("{:032x}", 10));
        pr.cached = 16;
        pr.tokens(1);
        let mid = pr.body(false);
        assert!(mid["meta_info"]["finish_reason"].is_null());
        pr.tokens(1);
        let end = pr.body(true);
        assert_eq!(
            end["meta_info"]["finish_reason"],
            json!({"type": "length", "length": 2})
        );
        assert_eq!(end["meta_info"]["completion_tokens"], 2);
        assert_eq!(end["meta_info"]["prompt_tokens"], req.prompt.len());
        assert_eq!(end["meta_info"]["cached_tokens"], 16);
        assert!(end["text"]
            .as_str()
            .unwrap()
            .starts_with(mid["text"].as_str().unwrap()));
        let mut short = Progress::new("r".into(), 1, &req);
        short.tokens(1);
        assert_eq!(
            short.body(true)["meta_info"]["finish_reason"]["type"],
            "stop"
        );
    }
}
