//! SGLang's native `POST /generate` (`sglang/srt/entrypoints/http_server.py`,
//! `generate_request`; the body is `GenerateReqInput` in
//! `sglang/srt/managers/io_struct.py`), served through the same engine path
//! as the OpenAI routes. The body is parsed by
//! [`handoff_openai::sglang::parse_native`] (re-exported here); this module
//! serves it (routed by the frontend, or on an aggregated worker's own
//! listener) and answers it, and serves SGLang's `POST /abort_request`
//! (`abort_request`; the rid table is [`crate::sglang::abort`]'s).
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

use crate::director::driver::{Cmd, Placement};
use crate::director::StreamMsg;
use crate::http::error::{body_error_response, error, failure};
use crate::http::offload::off_thread;
use crate::http::state::{AppState, CancelGuard};
use crate::http::submit::{submit, Order};
use crate::openai::tokenizer::synthetic_piece;
use crate::openai::{ApiError, GenRequest};
use crate::sglang::abort::{AbortBodyError, Scope};
use crate::vllm::kv_transfer::ProxyError;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use handoff_core::{RequestId, WorkerId};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use tokio::sync::mpsc::UnboundedReceiver;

pub use handoff_openai::sglang::{parse_native, NativeRequest};

/// SGLang's native `/generate` routed by the frontend: the body parsed off
/// the worker threads, placed by `place` (`None`: by the router; `Some(w)`:
/// on worker `w`; or why not), then run.
pub(crate) async fn generate(
    app: &AppState,
    body: Result<Bytes, BytesRejection>,
    place: impl FnOnce(&NativeRequest) -> Result<Option<usize>, ProxyError>,
) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(r) => return body_error_response(&r),
    };
    let limits = app.limits.clone();
    let parsed = off_thread(move || parse_native(&body, &limits)).await;
    let req = match parsed {
        Ok(r) => r,
        Err(e) => return error(&e),
    };
    let at = match place(&req) {
        Ok(at) => at,
        Err(e) => return error(&e.api()),
    };
    run_native(app, at, req).await
}

/// `/generate` without a bootstrap room on aggregated worker `w`'s own
/// listener (whose `/generate` route serves SGLang PD legs first): served
/// whole on `w`.
pub(crate) async fn generate_on(app: &AppState, w: WorkerId, body: &Bytes) -> Response {
    let (body, limits) = (body.clone(), app.limits.clone());
    match off_thread(move || parse_native(&body, &limits)).await {
        Ok(req) => run_native(app, Some(w.0 as usize), req).await,
        Err(e) => error(&e),
    }
}

/// Runs a parsed `/generate` routed by the frontend (`at` = `None`) or on
/// worker `at`, and answers it as SGLang does.
async fn run_native(app: &AppState, at: Option<usize>, req: NativeRequest) -> Response {
    let id = RequestId(app.next_id.fetch_add(1, Ordering::Relaxed));
    let (tokens, output_tokens) = (req.gen.prompt.clone(), req.gen.output_tokens());
    let lora = req.gen.lora.clone();
    let cmd = |tx| match at {
        None => Cmd::Submit {
            id,
            tokens,
            output_tokens,
            lora,
            tx,
        },
        Some(w) => Cmd::SubmitAt {
            worker: WorkerId(w as u32),
            placement: Placement::Proxy,
            rank: None,
            id,
            tokens,
            output_tokens,
            lora,
            tx,
        },
    };
    let name = req.rid.clone();
    let order = Order {
        id,
        cmd,
        fault: None,
        rid: name.as_deref().map(|r| (r, at.map(|w| w as u32))),
    };
    let rid = response_id(req.rid, id.0);
    let gen = req.gen;
    submit(app, order, |(rx, guard)| async move {
        if gen.stream {
            stream(rid, gen, rx, guard, id.0).into_response()
        } else {
            whole(rid, gen, rx, guard, id.0).await
        }
    })
    .await
}

/// `POST /abort_request` on the listener of `scope`.
pub async fn abort_request(
    app: &AppState,
    scope: Scope,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(r) => return body_error_response(&r),
    };
    let (rid, all) = match crate::sglang::abort::parse(&body) {
        Ok(x) => x,
        Err(e) => {
            let (field, what) = match e {
                AbortBodyError::NotAnObject => (None, "the body must be a JSON object"),
                AbortBodyError::Rid => (Some("rid"), "rid must be a string"),
                AbortBodyError::AbortAll => (Some("abort_all"), "abort_all must be a boolean"),
            };
            return error(&ApiError::invalid(field, what));
        }
    };
    for id in app.rids.abort(&rid, all, scope) {
        let _ = app.tx.send(Cmd::Cancel(id));
    }
    StatusCode::OK.into_response()
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
    use crate::openai::Limits;

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
