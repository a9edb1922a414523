//! Why a worker's listener refuses a request's `kv_transfer_params`
//! ([`ProxyError`], each a 4xx), and the bound on the block ids a body
//! may carry: what both the params' flow (`kv_transfer.rs`) and their
//! fields (`kv_fields.rs`) answer with.

use crate::openai::{ApiError, ErrorKind};
use handoff_core::KvTransferMode;
use handoff_router::Pool;

/// Most `remote_block_ids` accepted (bounds what a body can make us hold).
pub const MAX_BLOCK_IDS: usize = 1 << 20;

/// Why a worker's listener refused a request (all 4xx).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProxyError {
    /// A `kv_transfer_params` field is malformed.
    BadParam {
        /// The field.
        field: &'static str,
        /// What is wrong.
        why: String,
    },
    /// Both `do_remote_decode` and `do_remote_prefill`.
    BothFlags,
    /// The request asks a worker of the wrong pool.
    WrongPool {
        /// The worker's pool.
        pool: Pool,
        /// What was asked.
        asked: &'static str,
    },
    /// A `/generate` without a bootstrap room to a disaggregated worker of
    /// a vLLM deployment (the OpenAI routes serve plain requests whole).
    NeedsParams {
        /// The worker's pool.
        pool: Pool,
    },
    /// The deployment runs neither vLLM's source-first nor SGLang's
    /// destination-first ordering.
    Ordering,
    /// `do_remote_decode` with `stream: true` (the proxy's prefill is a
    /// whole response).
    Streamed,
    /// No pinned prefill with these ids: never made, already decoded, or
    /// its lease ran out and its blocks were freed.
    UnknownHandoff,
    /// `remote_engine_id` is not the worker that pinned it.
    WrongEngine,
    /// The decode's prompt is not the prefill's.
    PromptMismatch {
        /// The prefill's prompt tokens.
        expected: u32,
        /// The decode's.
        got: u32,
    },
    /// `remote_block_ids` does not match the pinned blocks.
    BlockCount {
        /// Pinned.
        expected: u64,
        /// Sent.
        got: u64,
    },
    /// A decode of this handoff is already attached.
    AlreadyAttached,
    /// `remote_host` is not in the decode engine's `--kv-peer-allow`.
    PeerNotAllowed {
        /// The host, sanitized.
        host: String,
    },
    /// `remote_block_ids` names more blocks than the prompt fills.
    TooManyBlocks {
        /// Sent.
        got: u64,
        /// The prompt's blocks.
        limit: u64,
    },
    /// `transfer_mode` is not the decode engine's: push and pull
    /// connectors never complete a handshake ([`kv_fields::check_mode`]).
    TransferModeMismatch {
        /// The params' mode.
        sent: KvTransferMode,
        /// This engine's.
        own: KvTransferMode,
    },
}

impl ProxyError {
    /// The OpenAI-style error.
    pub fn api(&self) -> ApiError {
        let p = Some("kv_transfer_params");
        match self {
            ProxyError::BadParam { field, why } => {
                ApiError::invalid(p, format!("kv_transfer_params.{field}: {why}"))
            }
            ProxyError::BothFlags => ApiError::invalid(
                p,
                "kv_transfer_params: do_remote_decode and do_remote_prefill cannot both be true",
            ),
            ProxyError::WrongPool { pool, asked } => ApiError::invalid(
                p,
                format!(
                    "this worker is a {} worker: it cannot take {asked}",
                    pool.name()
                ),
            ),
            ProxyError::NeedsParams { pool } => ApiError::invalid(
                p,
                format!(
                    "this worker is a {} worker of a disaggregated vLLM deployment: /generate \
                     here serves SGLang PD legs only; send the request to its /v1 routes (with \
                     kv_transfer_params, or plain to be served whole here), or to the frontend",
                    pool.name()
                ),
            ),
            ProxyError::Ordering => ApiError::invalid(
                p,
                "per-worker HTTP models vLLM's source-first kv_transfer_params flow and \
                 SGLang's destination-first bootstrap_room flow; this deployment runs neither: \
                 use the frontend's /v1 routes",
            ),
            ProxyError::Streamed => ApiError::invalid(
                Some("stream"),
                "a do_remote_decode prefill is answered whole: send it with stream false",
            ),
            ProxyError::UnknownHandoff => ApiError::not_found(
                p,
                "no pinned prefill with this remote_request_id and handoff_id: never made, \
                 already decoded, or its lease expired and its blocks were freed",
            ),
            ProxyError::WrongEngine => ApiError::invalid(
                p,
                "kv_transfer_params.remote_engine_id is not the worker that holds this prefill",
            ),
            ProxyError::PromptMismatch { expected, got } => ApiError::invalid(
                Some("prompt"),
                format!("the prompt has {got} tokens; the prefill it decodes had {expected}"),
            ),
            ProxyError::BlockCount { expected, got } => ApiError::invalid(
                p,
                format!(
                    "kv_transfer_params.remote_block_ids has {got} ids; the prefill pinned \
                     {expected} blocks"
                ),
            ),
            ProxyError::AlreadyAttached => ApiError {
                status: 409,
                message: "a decode of this prefill is already attached".into(),
                kind: ErrorKind::InvalidRequest,
                param: p,
            },
            ProxyError::PeerNotAllowed { host } => ApiError {
                status: 403,
                message: format!(
                    "kv_transfer_params.remote_host: {host} is not a peer this engine may \
                     connect to (--kv-peer-allow)"
                ),
                kind: ErrorKind::InvalidRequest,
                param: p,
            },
            ProxyError::TooManyBlocks { got, limit } => ApiError::invalid(
                p,
                format!(
                    "kv_transfer_params.remote_block_ids has {got} ids; the prompt fills \
                     {limit} blocks"
                ),
            ),
            ProxyError::TransferModeMismatch { sent, own } => ApiError::invalid(
                p,
                format!(
                    "kv_transfer_params.transfer_mode is {:?}; this engine's NIXL connector \
                     runs {:?}, and a push and a pull connector never complete a handshake",
                    sent.name(),
                    own.name()
                ),
            ),
        }
    }
}
