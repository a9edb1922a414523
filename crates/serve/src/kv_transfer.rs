//! vLLM's `kv_transfer_params` for per-worker HTTP behind a
//! disaggregation proxy (vLLM's `toy_proxy_server.py`, llm-d's sidecar).
//!
//! The flow, as vLLM's `NixlConnector` runs it
//! (`vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py`):
//!
//! 1. the proxy sends the prompt to a prefill worker with
//!    `max_tokens: 1` and `kv_transfer_params: {do_remote_decode: true}`;
//!    the worker prefills, keeps the blocks (`request_finished` delays
//!    their free) and answers with `kv_transfer_params: {do_remote_prefill:
//!    true, do_remote_decode: false, remote_engine_id, remote_block_ids,
//!    remote_host, remote_port}`;
//! 2. the proxy sends the same prompt, with those params, to a decode
//!    worker, which pulls the blocks (`get_num_new_matched_tokens`,
//!    `update_state_after_alloc`) and decodes.
//!
//! Here, step 1 pins the source (source-first) and step 2 attaches the
//! decode of that pinned handoff to the decode worker. What the params
//! carry:
//!
//! - `remote_engine_id`: the prefill worker's id, as a string;
//! - `remote_block_ids`: **stand-ins**, `0..blocks` for the pinned blocks
//!   (the worker cores do not expose physical block ids); only their
//!   count is checked on the decode call;
//! - `remote_host`, `remote_port`: the prefill worker's HTTP listener (in
//!   vLLM the NIXL side channel; nothing connects to it here);
//! - `remote_request_id`: the prefill's request id, and `handoff_id`: the
//!   handoff, both decimal strings, which tie the decode to the pin.
//!
//! A worker of an SGLang deployment speaks SGLang's bootstrap-room flow
//! instead ([`crate::sglang_pd`]); one of a deployment with neither
//! ordering answers a typed 400 ([`ProxyError::Ordering`]).

use crate::openai::{ApiError, ErrorKind};
use handoff_core::{HandoffId, RequestId, WorkerId};
use handoff_router::Pool;
use serde_json::{json, Value};

/// What a request's `kv_transfer_params` ask.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvTransfer {
    /// No params (or neither flag set): an ordinary request.
    Plain,
    /// `do_remote_decode: true`: prefill here, keep the KV for a decode
    /// elsewhere.
    RemoteDecode,
    /// `do_remote_prefill: true`: decode here from a pinned prefill.
    RemotePrefill(RemotePrefill),
}

/// The decode call's reference to a pinned prefill.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemotePrefill {
    /// `remote_request_id`.
    pub request: RequestId,
    /// `handoff_id`.
    pub handoff: HandoffId,
    /// `remote_engine_id`.
    pub engine: WorkerId,
    /// `remote_block_ids`' length.
    pub blocks: u64,
}

/// What the prefill answers for the decode to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pinned {
    /// The request.
    pub request: RequestId,
    /// Its handoff.
    pub handoff: HandoffId,
    /// The prefill worker.
    pub engine: WorkerId,
    /// Blocks pinned.
    pub blocks: u64,
    /// Tokens pinned.
    pub tokens: u64,
}

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
        }
    }
}

fn flag(o: &serde_json::Map<String, Value>, field: &'static str) -> Result<bool, ProxyError> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ProxyError::BadParam {
            field,
            why: "must be a boolean".into(),
        }),
    }
}

/// A decimal id, as a string (vLLM sends engine ids as strings) or a
/// non-negative integer.
fn id_field(o: &serde_json::Map<String, Value>, field: &'static str) -> Result<u128, ProxyError> {
    let bad = |why: &str| ProxyError::BadParam {
        field,
        why: why.into(),
    };
    match o.get(field) {
        None | Some(Value::Null) => Err(bad("is required with do_remote_prefill")),
        Some(Value::String(s)) => s
            .parse::<u128>()
            .map_err(|_| bad("must be a decimal id as the prefill returned it")),
        Some(Value::Number(n)) => n
            .as_u64()
            .map(u128::from)
            .ok_or_else(|| bad("must be a non-negative integer")),
        Some(_) => Err(bad("must be a string")),
    }
}

/// Reads `kv_transfer_params` from a request body (already parsed as
/// JSON by [`crate::openai::parse`], so `body` is valid JSON).
pub fn parse(body: &[u8]) -> Result<KvTransfer, ProxyError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| ProxyError::BadParam {
        field: "",
        why: format!("the body is not JSON: {e}"),
    })?;
    let o = match v.get("kv_transfer_params") {
        None | Some(Value::Null) => return Ok(KvTransfer::Plain),
        Some(Value::Object(o)) => o,
        Some(_) => {
            return Err(ProxyError::BadParam {
                field: "",
                why: "must be an object".into(),
            })
        }
    };
    let decode = flag(o, "do_remote_decode")?;
    let prefill = flag(o, "do_remote_prefill")?;
    match (decode, prefill) {
        (true, true) => Err(ProxyError::BothFlags),
        (true, false) => Ok(KvTransfer::RemoteDecode),
        (false, false) => Ok(KvTransfer::Plain),
        (false, true) => {
            let request = id_field(o, "remote_request_id")?;
            let request = u64::try_from(request).map_err(|_| ProxyError::BadParam {
                field: "remote_request_id",
                why: "is out of range".into(),
            })?;
            let handoff = HandoffId(id_field(o, "handoff_id")?);
            let engine = u32::try_from(id_field(o, "remote_engine_id")?).map_err(|_| {
                ProxyError::BadParam {
                    field: "remote_engine_id",
                    why: "is out of range".into(),
                }
            })?;
            let blocks = match o.get("remote_block_ids") {
                Some(Value::Array(a)) if a.len() <= MAX_BLOCK_IDS => {
                    if a.iter().any(|x| x.as_u64().is_none()) {
                        return Err(ProxyError::BadParam {
                            field: "remote_block_ids",
                            why: "must be a list of non-negative integers".into(),
                        });
                    }
                    a.len() as u64
                }
                Some(Value::Array(_)) => {
                    return Err(ProxyError::BadParam {
                        field: "remote_block_ids",
                        why: format!("has more than {MAX_BLOCK_IDS} ids"),
                    })
                }
                _ => {
                    return Err(ProxyError::BadParam {
                        field: "remote_block_ids",
                        why: "is required with do_remote_prefill (a list)".into(),
                    })
                }
            };
            Ok(KvTransfer::RemotePrefill(RemotePrefill {
                request: RequestId(request),
                handoff,
                engine: WorkerId(engine),
                blocks,
            }))
        }
    }
}

/// The `kv_transfer_params` a prefill answers with (see the module docs).
pub fn response_params(p: &Pinned, host: &str, port: u16) -> Value {
    let ids: Vec<u64> = (0..p.blocks).collect();
    json!({
        "do_remote_prefill": true,
        "do_remote_decode": false,
        "remote_engine_id": p.engine.0.to_string(),
        "remote_block_ids": ids,
        "remote_host": host,
        "remote_port": port,
        "remote_request_id": p.request.0.to_string(),
        "handoff_id": p.handoff.0.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let p = Pinned {
            request: RequestId(7),
            handoff: HandoffId(u128::MAX - 3),
            engine: WorkerId(1),
            blocks: 3,
            tokens: 40,
        };
        let params = response_params(&p, "127.0.0.1", 9001);
        let body = json!({"prompt": "x", "kv_transfer_params": params}).to_string();
        assert_eq!(
            parse(body.as_bytes()).unwrap(),
            KvTransfer::RemotePrefill(RemotePrefill {
                request: RequestId(7),
                handoff: HandoffId(u128::MAX - 3),
                engine: WorkerId(1),
                blocks: 3,
            })
        );
    }

    #[test]
    fn flags_and_errors() {
        let k = |s: &str| parse(s.as_bytes());
        assert_eq!(k(r#"{"prompt":"x"}"#).unwrap(), KvTransfer::Plain);
        assert_eq!(
            k(r#"{"kv_transfer_params":{"do_remote_decode":true}}"#).unwrap(),
            KvTransfer::RemoteDecode
        );
        assert_eq!(
            k(r#"{"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":true}}"#),
            Err(ProxyError::BothFlags)
        );
        for bad in [
            r#"{"kv_transfer_params":3}"#,
            r#"{"kv_transfer_params":{"do_remote_decode":"yes"}}"#,
            r#"{"kv_transfer_params":{"do_remote_prefill":true}}"#,
            r#"{"kv_transfer_params":{"do_remote_prefill":true,"remote_request_id":"1",
                "handoff_id":"x","remote_engine_id":"0","remote_block_ids":[]}}"#,
            r#"{"kv_transfer_params":{"do_remote_prefill":true,"remote_request_id":"1",
                "handoff_id":"2","remote_engine_id":"0","remote_block_ids":[-1]}}"#,
            r#"{"kv_transfer_params":{"do_remote_prefill":true,"remote_request_id":"1",
                "handoff_id":"2","remote_engine_id":"99999999999","remote_block_ids":[]}}"#,
        ] {
            let e = k(bad).unwrap_err();
            assert_eq!(e.api().status, 400, "{bad}: {e:?}");
        }
        assert_eq!(ProxyError::UnknownHandoff.api().status, 404);
        assert_eq!(ProxyError::AlreadyAttached.api().status, 409);
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        fn leaf() -> impl Strategy<Value = Value> {
            prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i64>().prop_map(|n| json!(n)),
                any::<u64>().prop_map(|n| json!(n.to_string())),
                "[a-z0-9]{0,6}".prop_map(Value::String),
                proptest::collection::vec(any::<i32>(), 0..4).prop_map(|v| json!(v)),
            ]
        }

        proptest! {
            /// Any mix of the known fields with any values parses or is a
            /// 400, never a panic; a decode reference always names its ids.
            #[test]
            fn params_never_panic(
                fields in proptest::collection::vec((0usize..8, leaf()), 0..8)
            ) {
                const NAMES: [&str; 8] = [
                    "do_remote_decode", "do_remote_prefill", "remote_engine_id",
                    "remote_block_ids", "remote_host", "remote_port",
                    "remote_request_id", "handoff_id",
                ];
                let mut o = serde_json::Map::new();
                for (i, v) in fields {
                    o.insert(NAMES[i].to_string(), v);
                }
                let body = json!({"kv_transfer_params": o}).to_string();
                match parse(body.as_bytes()) {
                    Ok(KvTransfer::RemotePrefill(r)) => {
                        prop_assert!(o.get("do_remote_prefill") == Some(&Value::Bool(true)));
                        prop_assert!(r.blocks <= MAX_BLOCK_IDS as u64);
                    }
                    Ok(_) => {}
                    Err(e) => prop_assert_eq!(e.api().status, 400),
                }
            }
        }
    }
}
