//! What every handler shares: the server's [`AppState`] and the
//! [`CancelGuard`] each request in the engine is held by. It imports no
//! handler, so every route (OpenAI, the worker listeners, SGLang's native
//! API and PD legs, the endpoints routers poll) builds on it.

use crate::director::driver::{Cmd, EngineView};
use crate::metrics::Metrics;
use crate::openai::Limits;
use crate::sglang::abort::{RidEntry, RidTable};
use handoff_core::RequestId;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

/// What every handler shares.
pub struct AppState {
    /// Commands to the engine thread.
    pub tx: crossbeam_channel::Sender<Cmd>,
    /// The next request id.
    pub next_id: AtomicU64,
    /// What requests are checked against.
    pub limits: Limits,
    /// Prometheus families.
    pub metrics: Arc<Metrics>,
    /// The engine thread's view of the workers.
    pub view: Arc<Mutex<EngineView>>,
    /// When the server started (Unix seconds), for `/v1/models`.
    pub created: u64,
    /// The rids of native requests in flight, for SGLang's
    /// `/abort_request` ([`crate::sglang::abort`]).
    pub rids: Arc<RidTable>,
    /// Whether requests' fault headers are obeyed
    /// ([`crate::http::client_faults`], `serve --client-faults`).
    pub client_faults: bool,
    /// An engine process's drain after SIGTERM ([`crate::http::drain`]);
    /// never started in one process.
    pub drain: Arc<crate::http::drain::Drain>,
}

pub(crate) fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Cancels its request in the engine when dropped before it ended.
pub struct CancelGuard {
    pub(crate) id: RequestId,
    pub(crate) tx: crossbeam_channel::Sender<Cmd>,
    pub(crate) armed: bool,
    /// Its SGLang rid while it runs, if it named one.
    pub(crate) rid: Option<RidEntry>,
    /// Its response, counted open until it ends (`None` in unit tests).
    pub(crate) _open: Option<crate::http::drain::Open>,
}

impl CancelGuard {
    /// `/abort_request` named it.
    pub(crate) fn aborted(&self) -> bool {
        self.rid.as_ref().is_some_and(|r| r.aborted())
    }

    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.tx.send(Cmd::Cancel(self.id));
        }
    }
}
