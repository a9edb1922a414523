//! Faults a client asks for, one request at a time, so a gateway's retry
//! and fallback paths can be tested (`serve --client-faults`; without it
//! the headers are ignored). Read on the OpenAI routes of the front port
//! (the whole request: its prefill is before it enters the engine, its
//! decode after its first token) and of every worker's listener (one leg:
//! a role header names the worker's own role, as AIBrix's mock applies a
//! delay to whichever leg receives it, [`ClientFault::for_worker`]):
//!
//! - `x-mock-fail-status: CODE` (400-599): the request fails at once with
//!   that status and an OpenAI error body, before reaching the engine.
//! - `x-mock-fail-after-tokens: N`: the request fails after its first `N`
//!   output tokens reached the client (a 500, or an error event that ends
//!   the stream); the engine cancels it and frees what it holds, as for a
//!   client that went away.
//! - AIBrix's mock (`vllm-project/aibrix`, `test/e2e` PD fail-fast tests:
//!   `x-aibrix-mock-delay-ms`, `x-aibrix-mock-delay-role`, and its prefill
//!   failure header): `x-aibrix-mock-delay-ms: MS` holds the leg named by
//!   `x-aibrix-mock-delay-role` (`prefill`: before the request enters the
//!   engine; `decode`: after its first token; absent: both), at most
//!   [`MAX_DELAY_MS`] (AIBrix's mock caps its delay at 30 s);
//!   `x-aibrix-mock-fail: prefill` fails the request with a 500 before its
//!   prefill, as AIBrix's mock prefill engine answers, and `decode` fails it
//!   after its first token.
//!
//! llm-d-inference-sim injects failures by rate and type for the whole run
//! (`--failure-injection-rate`, `--failure-types`, `pkg/common/config.go`),
//! not per request; its types map to statuses a client can name here
//! (`rate_limit` 429, `invalid_api_key` 401, `context_length` and
//! `invalid_request` 400, `model_not_found` 404, `server_error` 503).
//!
//! Every injected failure counts in `<engine>:handoff_requests_failed_total`
//! with reason `client-injected`. A request failed after tokens is cancelled
//! in the engine, so the run's report counts it as the engine counts a
//! cancelled request; one refused at once never reached the engine.

use crate::director::driver::Cmd;
use crate::director::StreamMsg;
use crate::openai::ApiError;
use axum::http::HeaderMap;
use handoff_core::RequestId;
use std::time::Duration;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// The longest delay a header may ask for.
pub const MAX_DELAY_MS: u64 = 30_000;

/// The failure reason injected failures count under.
pub const REASON: &str = "client-injected";

/// Which leg a delay or failure applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leg {
    /// Before the request enters the engine.
    Prefill,
    /// After its first token.
    Decode,
}

/// What one request's headers ask for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientFault {
    /// Fail at once with this status.
    pub status: Option<u16>,
    /// Fail after this many output tokens.
    pub after_tokens: Option<u32>,
    /// Hold the request before it enters the engine.
    pub prefill_delay: Option<Duration>,
    /// Hold the stream after its first token.
    pub decode_delay: Option<Duration>,
}

fn header<'a>(h: &'a HeaderMap, name: &'static str) -> Result<Option<&'a str>, ApiError> {
    match h.get(name) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .map(|s| Some(s.trim()))
            .map_err(|_| ApiError::invalid(None, format!("header {name} is not text"))),
    }
}

fn number(h: &HeaderMap, name: &'static str, max: u64) -> Result<Option<u64>, ApiError> {
    match header(h, name)? {
        None => Ok(None),
        Some(s) => match s.parse::<u64>() {
            Ok(n) if n <= max => Ok(Some(n)),
            _ => Err(ApiError::invalid(
                None,
                format!("header {name} must be an integer in [0, {max}], got {s:?}"),
            )),
        },
    }
}

fn leg(h: &HeaderMap, name: &'static str) -> Result<Option<Leg>, ApiError> {
    match header(h, name)? {
        None => Ok(None),
        Some("prefill") => Ok(Some(Leg::Prefill)),
        Some("decode") => Ok(Some(Leg::Decode)),
        Some(s) => Err(ApiError::invalid(
            None,
            format!("header {name} must be prefill or decode, got {s:?}"),
        )),
    }
}

/// `x-mock-fail-status`, checked to be an error status.
fn status(h: &HeaderMap) -> Result<Option<u16>, ApiError> {
    match number(h, "x-mock-fail-status", 599)? {
        Some(code) if code < 400 => Err(ApiError::invalid(
            None,
            format!("header x-mock-fail-status must be in [400, 599], got {code}"),
        )),
        code => Ok(code.map(|c| c as u16)),
    }
}

impl ClientFault {
    /// What `h` asks for; a malformed header is a 400 naming it.
    pub fn from_headers(h: &HeaderMap) -> Result<Self, ApiError> {
        let mut f = ClientFault {
            status: status(h)?,
            ..ClientFault::default()
        };
        f.after_tokens =
            number(h, "x-mock-fail-after-tokens", u64::from(u32::MAX))?.map(|n| n as u32);
        match leg(h, "x-aibrix-mock-fail")? {
            Some(Leg::Prefill) => f.status = f.status.or(Some(500)),
            Some(Leg::Decode) => f.after_tokens = f.after_tokens.or(Some(1)),
            None => {}
        }
        if let Some(ms) = number(h, "x-aibrix-mock-delay-ms", MAX_DELAY_MS)? {
            let d = Some(Duration::from_millis(ms));
            match leg(h, "x-aibrix-mock-delay-role")? {
                Some(Leg::Prefill) => f.prefill_delay = d,
                Some(Leg::Decode) => f.decode_delay = d,
                None => (f.prefill_delay, f.decode_delay) = (d, d),
            }
        }
        Ok(f)
    }

    /// What `h` asks of a leg sent to a worker of `role` (`None`: an
    /// aggregated worker, both roles): a failure or delay named for this
    /// role (or for none) happens before the leg enters the engine; a
    /// failure after tokens as on the front port.
    pub fn for_worker(h: &HeaderMap, role: Option<Leg>) -> Result<Self, ApiError> {
        let mine = |l: Option<Leg>| l.is_none() || role.is_none() || l == role;
        let mut f = ClientFault {
            status: status(h)?,
            ..ClientFault::default()
        };
        if let Some(l) = leg(h, "x-aibrix-mock-fail")? {
            if mine(Some(l)) {
                f.status = f.status.or(Some(500));
            }
        }
        f.after_tokens =
            number(h, "x-mock-fail-after-tokens", u64::from(u32::MAX))?.map(|n| n as u32);
        if let Some(ms) = number(h, "x-aibrix-mock-delay-ms", MAX_DELAY_MS)? {
            if mine(leg(h, "x-aibrix-mock-delay-role")?) {
                f.prefill_delay = Some(Duration::from_millis(ms));
            }
        }
        Ok(f)
    }

    /// The error of a request failed at once, if asked.
    pub fn refusal(&self) -> Option<ApiError> {
        let status = self.status?;
        let mut e = ApiError::invalid(
            None,
            format!("injected failure ({REASON}): status {status}"),
        );
        e.status = status;
        if status >= 500 {
            e.kind = crate::openai::ErrorKind::Internal;
        }
        Some(e)
    }

    /// Whether anything happens once the request runs.
    fn acts_on_stream(&self) -> bool {
        self.after_tokens.is_some() || self.decode_delay.is_some()
    }

    /// `rx` as the client sees it: held `decode_delay` after the first
    /// token, cut after `after_tokens` tokens with a failure (and request
    /// `id` cancelled through `tx`). `on_fail` runs once if it is cut.
    pub fn wrap(
        &self,
        mut rx: UnboundedReceiver<StreamMsg>,
        id: RequestId,
        tx: crossbeam_channel::Sender<Cmd>,
        on_fail: impl FnOnce() + Send + 'static,
    ) -> UnboundedReceiver<StreamMsg> {
        if !self.acts_on_stream() {
            return rx;
        }
        let (out, wrapped) = unbounded_channel();
        let (delay, limit) = (self.decode_delay, self.after_tokens);
        tokio::spawn(async move {
            let mut sent = 0u32;
            let mut delayed = false;
            while let Some(m) = rx.recv().await {
                let StreamMsg::Tokens(n) = m else {
                    if out.send(m).is_err() {
                        return;
                    }
                    continue;
                };
                let mut n = n;
                if let Some(limit) = limit {
                    n = n.min(limit.saturating_sub(sent));
                }
                if n > 0 {
                    sent += n;
                    if out.send(StreamMsg::Tokens(n)).is_err() {
                        return;
                    }
                }
                if limit.is_some_and(|l| sent >= l) {
                    let _ = tx.send(Cmd::Cancel(id));
                    on_fail();
                    let _ = out.send(StreamMsg::Failed(handoff_core::FailureReason::Handoff(
                        handoff_core::CancelReason::Client,
                    )));
                    return;
                }
                if let (Some(d), false) = (delay, delayed) {
                    delayed = true;
                    tokio::time::sleep(d).await;
                }
            }
        });
        wrapped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn h(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.insert(*k, HeaderValue::from_str(v).expect("value"));
        }
        m
    }

    #[test]
    fn headers_read_as_documented() {
        assert_eq!(
            ClientFault::from_headers(&h(&[])),
            Ok(ClientFault::default())
        );
        let f = ClientFault::from_headers(&h(&[("x-mock-fail-status", "429")])).expect("ok");
        assert_eq!(f.refusal().map(|e| e.status), Some(429));
        let f = ClientFault::from_headers(&h(&[("x-aibrix-mock-fail", "prefill")])).expect("ok");
        assert_eq!(f.status, Some(500));
        let f = ClientFault::from_headers(&h(&[("x-aibrix-mock-fail", "decode")])).expect("ok");
        assert_eq!(f.after_tokens, Some(1));
        let f = ClientFault::from_headers(&h(&[
            ("x-aibrix-mock-delay-ms", "250"),
            ("x-aibrix-mock-delay-role", "decode"),
        ]))
        .expect("ok");
        assert_eq!(f.decode_delay, Some(Duration::from_millis(250)));
        assert_eq!(f.prefill_delay, None);
        let f = ClientFault::from_headers(&h(&[("x-aibrix-mock-delay-ms", "5")])).expect("ok");
        assert_eq!(f.prefill_delay, f.decode_delay);
        for bad in [
            ("x-mock-fail-status", "200"),
            ("x-mock-fail-status", "abc"),
            ("x-mock-fail-after-tokens", "-1"),
            ("x-aibrix-mock-delay-ms", "30001"),
            ("x-aibrix-mock-fail", "both"),
        ] {
            let e = ClientFault::from_headers(&h(&[bad])).expect_err("refused");
            assert_eq!(e.status, 400);
            assert!(e.message.contains(bad.0), "{}", e.message);
        }
    }

    #[test]
    fn a_worker_obeys_what_names_its_role() {
        let delay = h(&[
            ("x-aibrix-mock-delay-ms", "100"),
            ("x-aibrix-mock-delay-role", "decode"),
            ("x-aibrix-mock-fail", "prefill"),
        ]);
        let p = ClientFault::for_worker(&delay, Some(Leg::Prefill)).expect("ok");
        assert_eq!((p.status, p.prefill_delay), (Some(500), None));
        let d = ClientFault::for_worker(&delay, Some(Leg::Decode)).expect("ok");
        assert_eq!(
            (d.status, d.prefill_delay),
            (None, Some(Duration::from_millis(100)))
        );
        let a = ClientFault::for_worker(&delay, None).expect("ok");
        assert_eq!(a.status, Some(500));
        let code = h(&[("x-mock-fail-status", "503")]);
        let d = ClientFault::for_worker(&code, Some(Leg::Decode)).expect("ok");
        assert_eq!(d.status, Some(503));
    }

    #[tokio::test]
    async fn a_stream_is_cut_after_n_tokens_and_the_request_cancelled() {
        let f = ClientFault {
            after_tokens: Some(3),
            ..ClientFault::default()
        };
        let (tx, rx) = unbounded_channel();
        let (ctx, crx) = crossbeam_channel::unbounded();
        let failed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = failed.clone();
        let mut w = f.wrap(rx, RequestId(7), ctx, move || {
            seen.store(true, std::sync::atomic::Ordering::Relaxed)
        });
        tx.send(StreamMsg::Tokens(2)).expect("send");
        tx.send(StreamMsg::Tokens(2)).expect("send");
        assert!(matches!(w.recv().await, Some(StreamMsg::Tokens(2))));
        assert!(matches!(w.recv().await, Some(StreamMsg::Tokens(1))));
        assert!(matches!(w.recv().await, Some(StreamMsg::Failed(_))));
        assert!(matches!(crx.try_recv(), Ok(Cmd::Cancel(RequestId(7)))));
        assert!(failed.load(std::sync::atomic::Ordering::Relaxed));
    }
}
