//! The OpenAI-shaped answers (`/v1/completions`, `/v1/chat/completions`)
//! to what the engine tells one request: whole, one JSON body; streamed,
//! server-sent events ending in `[DONE]`. A streamed answer may first wait
//! for a message whose refusal or failure is then the response's status
//! ([`First`]).

use crate::director::StreamMsg;
use crate::http::error::{error, failure};
use crate::http::state::{unix_secs, CancelGuard};
use crate::openai::tokenizer::synthetic_piece;
use crate::openai::{ApiError, Endpoint, GenRequest, Meta, Usage};
use crate::vllm::kv_transfer::response_params;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use handoff_core::{KvTransferMode, RequestId};
use std::collections::VecDeque;
use std::convert::Infallible;
use tokio::sync::mpsc::UnboundedReceiver;

/// Where a prefill worker's listener is (`remote_host`, `remote_port`) and
/// how its pinned KV is fetched, for the `kv_transfer_params` of a
/// `do_remote_decode` answer.
pub(crate) type Origin<'a> = (&'a str, u16, KvTransferMode);

/// The model name an answer carries: the adapter's when the request ran on
/// one, else the served model's, as vLLM's OpenAI server names it
/// (`vllm/entrypoints/openai/serving_engine.py`,
/// `OpenAIServing._get_model_name`: `lora_request.lora_name` if any).
pub(crate) fn answer_model(served: &str, lora: Option<&handoff_core::LoraAdapter>) -> String {
    lora.map_or_else(|| served.to_string(), |a| a.name.clone())
}

/// The metadata of request `id` on `endpoint` (`cmpl-ID`, `chatcmpl-ID`),
/// created now.
pub(crate) fn meta(endpoint: Endpoint, id: RequestId, model: String) -> Meta {
    let prefix = match endpoint {
        Endpoint::Completions => "cmpl",
        Endpoint::Chat => "chatcmpl",
    };
    Meta {
        id: format!("{prefix}-{}", id.0),
        created: unix_secs(),
        model,
        endpoint,
    }
}

/// What a streamed answer waits for before its 200.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum First {
    /// Nothing: the stream starts at once.
    No,
    /// A decode of a remote prefill: checked against the pinned prefills
    /// first, so a refusal is a 4xx status, not an error inside a 200
    /// stream, and does not cancel the prefill it named.
    Decode,
    /// An SGLang PD leg: its pairing, or the refusal, timeout or failure
    /// at its bootstrap room.
    Leg,
}

/// The first message `rx` brings, as `first` waits for it, or the error
/// response that is the answer instead (the request then ended: `guard`
/// is disarmed).
pub(crate) async fn first_message(
    first: First,
    rx: &mut UnboundedReceiver<StreamMsg>,
    guard: &mut CancelGuard,
) -> Result<Option<StreamMsg>, ApiError> {
    if first == First::No {
        return Ok(None);
    }
    let e = match (first, rx.recv().await) {
        (First::Decode, Some(StreamMsg::Refused(e))) => e.api(),
        (First::Leg, Some(StreamMsg::Bootstrap(e))) => e.api(),
        (_, Some(StreamMsg::Failed(why))) => failure(why.name()),
        (_, Some(m)) => return Ok(Some(m)),
        (_, None) => failure("the engine stopped"),
    };
    guard.disarm();
    Err(e)
}

/// Answers request `req` (`meta`'s) from `rx`, whole or streamed as it
/// asked; `seed` draws its text, `origin` is where a pinned prefill is
/// fetched from.
pub(crate) async fn answer(
    meta: Meta,
    req: GenRequest,
    (mut rx, mut guard): (UnboundedReceiver<StreamMsg>, CancelGuard),
    seed: u64,
    origin: Option<Origin<'_>>,
    first: First,
) -> Response {
    if !req.stream {
        return whole(meta, req, rx, guard, seed, origin).await;
    }
    match first_message(first, &mut rx, &mut guard).await {
        Ok(m) => stream(meta, req, rx, guard, seed, m).into_response(),
        Err(e) => error(&e),
    }
}

fn finish_reason(produced: u32, max_tokens: u32) -> &'static str {
    if produced >= max_tokens {
        "length"
    } else {
        "stop"
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::director::driver::Cmd;
    use crate::vllm::kv_transfer::ProxyError;
    use tokio::sync::mpsc::unbounded_channel;

    /// A guard of request 7 and what it sends the engine.
    fn guard() -> (CancelGuard, crossbeam_channel::Receiver<Cmd>) {
        let (tx, rx) = crossbeam_channel::unbounded();
        let g = CancelGuard {
            id: RequestId(7),
            tx,
            armed: true,
            rid: None,
            _open: None,
        };
        (g, rx)
    }

    #[tokio::test]
    async fn no_wait_leaves_the_first_message_to_the_stream() {
        let (tx, mut rx) = unbounded_channel();
        tx.send(StreamMsg::Tokens(2)).unwrap();
        let (mut g, _engine) = guard();
        let m = first_message(First::No, &mut rx, &mut g).await;
        assert!(matches!(m, Ok(None)));
        assert_eq!(rx.recv().await, Some(StreamMsg::Tokens(2)));
        assert!(g.armed);
    }

    #[tokio::test]
    async fn a_refused_decode_is_the_status_and_cancels_nothing() {
        let (tx, mut rx) = unbounded_channel();
        tx.send(StreamMsg::Refused(ProxyError::Ordering)).unwrap();
        let (mut g, engine) = guard();
        let e = first_message(First::Decode, &mut rx, &mut g).await;
        assert_eq!(e.map_err(|e| e.status), Err(400));
        drop(g);
        assert!(engine.try_recv().is_err(), "a refusal cancels no prefill");
    }

    #[tokio::test]
    async fn a_leg_waits_for_its_pairing_only() {
        let (tx, mut rx) = unbounded_channel();
        tx.send(StreamMsg::Refused(ProxyError::Ordering)).unwrap();
        tx.send(StreamMsg::Started { cached_tokens: 0 }).unwrap();
        let (mut g, _engine) = guard();
        let m = first_message(First::Leg, &mut rx, &mut g).await;
        assert!(matches!(m, Ok(Some(StreamMsg::Refused(_)))));
        assert!(g.armed);
    }

    #[tokio::test]
    async fn a_stopped_engine_is_a_503() {
        let (tx, mut rx) = unbounded_channel::<StreamMsg>();
        drop(tx);
        let (mut g, _engine) = guard();
        let e = first_message(First::Leg, &mut rx, &mut g).await;
        assert_eq!(e.map_err(|e| e.status), Err(503));
        assert!(!g.armed);
    }
}
