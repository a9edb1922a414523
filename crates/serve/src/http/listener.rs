//! [`WorkerState`]: what one worker's own listener knows, shared by the
//! flows it serves (vLLM's `kv_transfer_params` proxy flow in
//! `http::worker`, SGLang's bootstrap-room legs in `sglang::pd`).

use crate::http::state::AppState;
use handoff_core::{Backend, DpLayout, HandoffPolicy, WorkerId};
use handoff_router::Pool;
use std::sync::Arc;

/// What one worker's listener knows.
pub struct WorkerState {
    /// The server's shared state (engine commands, ids, limits).
    pub app: Arc<AppState>,
    /// This worker.
    pub worker: WorkerId,
    /// Its pool.
    pub pool: Pool,
    /// The deployment's handoff ordering.
    pub policy: HandoffPolicy,
    /// The engine it mocks (the `X-data-parallel-rank` header is vLLM's).
    pub backend: Backend,
    /// The worker's data-parallel ranks.
    pub dp: DpLayout,
    /// The host this listener is bound to (`remote_host`).
    pub host: String,
    /// Its port (`remote_port`).
    pub port: u16,
}
