//! The one request path: every entry point (the OpenAI routes of the front
//! port, a worker's own listener, SGLang's PD legs and its native
//! `/generate`) reads and checks its body, then hands [`submit`] an
//! [`Order`]: the engine command to build and what wraps the answers;
//! [`submit`] sends it, holds the request by a [`CancelGuard`] and lets the
//! entry's answer shape (OpenAI's [`crate::http::respond`], SGLang's
//! native one) respond from the engine's messages.

use crate::director::driver::Cmd;
use crate::director::StreamMsg;
use crate::http::client_faults::{ClientFault, REASON};
use crate::http::error::{error, failure};
use crate::http::state::{AppState, CancelGuard};
use crate::sglang::abort::{RidTable, Scope};
use axum::response::Response;
use handoff_core::RequestId;
use std::future::Future;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// One request as an entry point hands it to [`submit`].
pub(crate) struct Order<'a, B> {
    /// Its id (a decode runs under its prefill's).
    pub(crate) id: RequestId,
    /// The engine command, given the channel its messages come back on.
    pub(crate) cmd: B,
    /// The client's fault headers (`--client-faults`), which cut or hold
    /// the messages as the client sees them.
    pub(crate) fault: Option<ClientFault>,
    /// The rid it named, for SGLang's `/abort_request` on the listener of
    /// that scope (registered once the request is sent).
    pub(crate) rid: Option<(&'a str, Scope)>,
}

/// Sends `order` to the engine of `app` and answers it by `respond`, from
/// its messages and its cancel guard. A request the engine cannot take
/// is a 503; one whose client goes away is cancelled by the guard.
pub(crate) async fn submit<B, R, F>(app: &AppState, order: Order<'_, B>, respond: R) -> Response
where
    B: FnOnce(UnboundedSender<StreamMsg>) -> Cmd,
    R: FnOnce((UnboundedReceiver<StreamMsg>, CancelGuard)) -> F,
    F: Future<Output = Response>,
{
    let Order {
        id,
        cmd,
        fault,
        rid,
    } = order;
    // Draining after SIGTERM: refused, as vLLM's and SGLang's servers do.
    let Some(open) = app.drain.enter() else {
        return error(&crate::http::drain::refusal());
    };
    let (tx, rx) = unbounded_channel();
    let rx = match fault {
        Some(fault) => {
            let metrics = app.metrics.clone();
            fault.wrap(rx, id, app.tx.clone(), move || {
                metrics.request_failed_as(REASON)
            })
        }
        None => rx,
    };
    if app.tx.send(cmd(tx)).is_err() {
        return error(&failure("the engine is not running"));
    }
    // SGLang's `/abort_request` finds it by the rid it named, on the
    // listener it was sent to.
    let rid = rid.and_then(|(r, scope)| RidTable::register(&app.rids, r, id, scope));
    let guard = CancelGuard {
        id,
        tx: app.tx.clone(),
        armed: true,
        rid,
        _open: Some(open),
    };
    respond((rx, guard)).await
}
