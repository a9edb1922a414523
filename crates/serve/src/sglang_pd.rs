//! SGLang's PD legs on a worker's listener, as `sglang-router` in PD mode
//! sends them (`sgl-router`'s `src/routers/http/pd_router.rs`,
//! `execute_dual_dispatch_internal`): the same body, with
//! `bootstrap_host`, `bootstrap_port` and `bootstrap_room`, to a prefill
//! and a decode worker at once. The legs meet in their room
//! ([`crate::bootstrap`]); the pair is one destination-first engine
//! request, so the decode reserves before the prefill runs.
//!
//! - The decode leg streams the client's tokens (or answers whole), with
//!   usage, as any request on the frontend.
//! - The prefill leg answers when its KV was sent, with the one token the
//!   prefill sampled (SGLang sets a prefill's `max_new_tokens` to 1 in its
//!   bootstrap queue, `disaggregation/prefill.py`), streamed if asked. The
//!   router reads it whole before it streams the decode's answer and keeps
//!   nothing of it but its status (and, non-streamed, its logprobs).
//! - A leg whose partner never comes fails after the bootstrap timeout
//!   with a 500, as SGLang's aborted prefill does; a streamed leg waits for
//!   its pair before answering, so the error is the response's status.

use crate::bootstrap::{BootstrapError, RoomKey, Side};
use crate::director::StreamMsg;
use crate::driver::Cmd;
use crate::http::{error, failure, stream, unix_secs, whole, CancelGuard};
use crate::openai::{Endpoint, GenRequest, Meta};
use crate::worker_http::WorkerState;
use axum::response::{IntoResponse, Response};
use handoff_core::{HandoffPolicy, RequestId};
use handoff_router::Pool;
use std::sync::atomic::Ordering;
use tokio::sync::mpsc::unbounded_channel;

/// The side of a leg sent to `s`'s listener, or why it cannot take one.
fn side(s: &WorkerState) -> Result<Side, BootstrapError> {
    match (s.policy, s.pool) {
        (HandoffPolicy::DestinationFirst, Pool::Prefill) => Ok(Side::Prefill),
        (HandoffPolicy::DestinationFirst, Pool::Decode) => Ok(Side::Decode),
        _ => Err(BootstrapError::NotDestinationFirst),
    }
}

/// What a request without a room gets from `s`'s listener, if it is a
/// worker of an SGLang PD deployment (which serves only legs).
pub(crate) fn needs_room(s: &WorkerState) -> Option<BootstrapError> {
    side(s).ok().map(|side| BootstrapError::Missing { side })
}

/// Serves one leg of room `key`, parsed as `req`, on `s`'s listener.
pub(crate) async fn leg(
    s: &WorkerState,
    endpoint: Endpoint,
    mut req: GenRequest,
    key: RoomKey,
) -> Response {
    let side = match side(s) {
        Ok(side) => side,
        Err(e) => return error(&e.api()),
    };
    let id = RequestId(s.app.next_id.fetch_add(1, Ordering::Relaxed));
    let (tx, mut rx) = unbounded_channel();
    let cmd = Cmd::Leg {
        worker: s.worker,
        side,
        key,
        id,
        tokens: req.prompt.clone(),
        output_tokens: req.output_tokens(),
        tx,
    };
    if s.app.tx.send(cmd).is_err() {
        return error(&failure("the engine is not running"));
    }
    let mut guard = CancelGuard {
        id,
        tx: s.app.tx.clone(),
        armed: true,
    };
    if side == Side::Prefill {
        req.max_tokens = 1;
    }
    let prefix = match endpoint {
        Endpoint::Completions => "cmpl",
        Endpoint::Chat => "chatcmpl",
    };
    let meta = Meta {
        id: format!("{prefix}-{}", id.0),
        created: unix_secs(),
        model: s.app.limits.model.clone(),
        endpoint,
    };
    if !req.stream {
        return whole(meta, req, rx, guard, id.0, None).await;
    }
    // Streamed: the status waits for the pair, so a refusal or a timeout
    // is the response's status rather than an error inside a 200 stream.
    let first = match rx.recv().await {
        Some(StreamMsg::Bootstrap(e)) => {
            guard.disarm();
            return error(&e.api());
        }
        Some(StreamMsg::Failed(why)) => {
            guard.disarm();
            return error(&failure(why.name()));
        }
        Some(m) => m,
        None => {
            guard.disarm();
            return error(&failure("the engine stopped"));
        }
    };
    stream(meta, req, rx, guard, id.0, Some(first)).into_response()
}
