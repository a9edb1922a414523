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
//! - `remote_engine_id`: the prefill worker's id, as a string, with
//!   `_dp{rank}` after it when the worker runs several data-parallel
//!   ranks ([`EngineId`]);
//! - `remote_block_ids`: **stand-ins**, `0..blocks` for the pinned blocks
//!   (the worker cores do not expose physical block ids), written as one
//!   list per KV cache group (one group) and read flat or nested
//!   ([`super::kv_fields::block_ids`]); only their count is checked on the
//!   decode call;
//! - `remote_host`, `remote_port`: where the prefill's KV is read from. In
//!   one `serve` process, the prefill worker's HTTP listener (nothing
//!   connects to it: the decode finds the pin in the same engine); for an
//!   engine of its own (`serve --engine`, `pod/`), the pinning
//!   rank's side channel, which the decode engine dials (vLLM's
//!   `VLLM_NIXL_SIDE_CHANNEL_HOST`/`_PORT`);
//! - `remote_num_tokens`, `tp_size`, `dcp_size`, `pp_size`,
//!   `remote_blocks_expiry_time`, `transfer_mode`: as vLLM sends them
//!   ([`response_params`]), read and bounded ([`super::kv_fields`]); a
//!   decode refuses a `transfer_mode` not its engine's;
//! - `remote_request_id`: the prefill's request id, and `handoff_id`: the
//!   handoff, both decimal strings, which tie the decode to the pin.
//!
//! A worker of an SGLang deployment speaks SGLang's bootstrap-room flow
//! instead (`sglang::pd`); one of a deployment with neither
//! ordering answers a typed 400 ([`ProxyError::Ordering`]).

use super::kv_fields::{self, RemoteLayout};
use handoff_core::{DpRank, HandoffId, KvTransferMode, RequestId, WorkerId, WorkerWithDpRank};
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
    pub engine: EngineId,
    /// `remote_block_ids`' length.
    pub blocks: u64,
    /// `remote_host` and `remote_port`: where the prefill engine's side
    /// channel listens (a decode engine of `serve --engine decode` connects
    /// there; the one-process `serve` finds its prefill in its own engine).
    pub side_channel: Option<(String, u16)>,
    /// `remote_num_tokens`: the tokens the prefill computed and holds.
    pub tokens: Option<u64>,
    /// `dcp_size`, `pp_size`, `remote_blocks_expiry_time`, `transfer_mode`.
    pub layout: RemoteLayout,
}

/// What the prefill answers for the decode to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pinned {
    /// The request.
    pub request: RequestId,
    /// Its handoff.
    pub handoff: HandoffId,
    /// The prefill worker's rank that pinned it.
    pub engine: EngineId,
    /// Blocks pinned.
    pub blocks: u64,
    /// Tokens pinned.
    pub tokens: u64,
    /// The pinning rank's own side-channel port (`serve --engine`: the
    /// base port plus the rank, as vLLM offsets `VLLM_NIXL_SIDE_CHANNEL_PORT`
    /// by the data-parallel rank); `None`: the listener's port.
    pub side_port: Option<u16>,
}

/// vLLM's `engine_id` of one scheduler: the worker's id, and when the
/// worker runs several data-parallel ranks `_dp{rank}` after it, as vLLM
/// makes each rank's KV-transfer identity unique (`run_engine_core` in
/// `vllm/v1/engine/core.py`: `engine_id = f"{engine_id}_dp{local_dp_rank}"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineId {
    /// The worker and rank.
    pub at: WorkerWithDpRank,
    /// Whether the id names the rank (`_dp{rank}`); a bare id is rank 0.
    pub ranked: bool,
}

impl EngineId {
    /// The id of a one-rank worker `w`.
    pub fn worker(w: WorkerId) -> Self {
        EngineId {
            at: WorkerWithDpRank {
                worker: w,
                dp_rank: DpRank(0),
            },
            ranked: false,
        }
    }

    /// `N` or `N_dpR`, or `None`.
    pub fn parse(s: &str) -> Option<Self> {
        let (w, r) = match s.split_once("_dp") {
            Some((w, r)) => (w, Some(r)),
            None => (s, None),
        };
        let digits = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
        if !digits(w) || r.is_some_and(|r| !digits(r)) {
            return None;
        }
        Some(EngineId {
            at: WorkerWithDpRank {
                worker: WorkerId(w.parse().ok()?),
                dp_rank: DpRank(r.map_or(Ok(0), str::parse).ok()?),
            },
            ranked: r.is_some(),
        })
    }
}

impl std::fmt::Display for EngineId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.at.worker.0)?;
        if self.ranked {
            write!(f, "_dp{}", self.at.dp_rank.0)?;
        }
        Ok(())
    }
}

pub use super::proxy_error::ProxyError;

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

/// `remote_engine_id`: an [`EngineId`] as a string, or a worker id as a
/// non-negative integer.
fn engine_field(o: &serde_json::Map<String, Value>) -> Result<EngineId, ProxyError> {
    let field = "remote_engine_id";
    let bad = |why: &str| ProxyError::BadParam {
        field,
        why: why.into(),
    };
    match o.get(field) {
        None | Some(Value::Null) => Err(bad("is required with do_remote_prefill")),
        Some(Value::String(s)) => EngineId::parse(s)
            .ok_or_else(|| bad("must be an engine id as the prefill returned it (N or N_dpR)")),
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(|n| EngineId::worker(WorkerId(n)))
            .ok_or_else(|| bad("is out of range")),
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
            let engine = engine_field(o)?;
            let blocks = kv_fields::block_ids(o)?;
            Ok(KvTransfer::RemotePrefill(RemotePrefill {
                request: RequestId(request),
                handoff,
                engine,
                blocks,
                side_channel: side_channel(o)?,
                tokens: count_field(o, "remote_num_tokens")?,
                layout: kv_fields::layout(o)?,
            }))
        }
    }
}

/// A non-negative integer field, absent or null for `None`.
fn count_field(
    o: &serde_json::Map<String, Value>,
    field: &'static str,
) -> Result<Option<u64>, ProxyError> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or(ProxyError::BadParam {
            field,
            why: "must be a non-negative integer".into(),
        }),
    }
}

/// `remote_host` and `remote_port`, when both are given (a port in range).
fn side_channel(o: &serde_json::Map<String, Value>) -> Result<Option<(String, u16)>, ProxyError> {
    let host = match o.get("remote_host") {
        Some(Value::String(h)) if crate::pod::peers::valid_host(h) => h.clone(),
        None | Some(Value::Null) => return Ok(None),
        Some(_) => {
            return Err(ProxyError::BadParam {
                field: "remote_host",
                why: "must be a host name or address (letters, digits, '-', '.', '_'; an \
                      IPv6 address in brackets or bare; at most 253 bytes)"
                    .into(),
            })
        }
    };
    match count_field(o, "remote_port")?.map(u16::try_from) {
        None => Ok(None),
        Some(Ok(port)) => Ok(Some((host, port))),
        Some(Err(_)) => Err(ProxyError::BadParam {
            field: "remote_port",
            why: "is not a port (0..=65535)".into(),
        }),
    }
}

/// The `kv_transfer_params` a prefill answers with: every field vLLM's
/// NIXL connector returns from `request_finished`
/// (`vllm/distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py`,
/// `NixlPullConnectorScheduler.request_finished`: `do_remote_prefill`,
/// `do_remote_decode`, `remote_block_ids` one list per KV cache group,
/// `remote_engine_id`, `remote_request_id`, `remote_host`, `remote_port`,
/// `tp_size`, `dcp_size`, `pp_size`, `remote_num_tokens` the request's
/// computed tokens, `remote_blocks_expiry_time` (`null` on a prefill),
/// `transfer_mode` `"pull"`, the decode engine reads; in push mode those of
/// `NixlPushConnectorScheduler.request_finished` in `nixl/push_scheduler.py`:
/// no `dcp_size` or expiry, `transfer_mode` `"push"`, the decode engine
/// registers its blocks and this engine writes) and the mock's own
/// `handoff_id`. The sizes are 1: a mocked engine's KV moves as one
/// tensor-parallel rank's of one pipeline stage. See the module docs for
/// the rest.
pub fn response_params(p: &Pinned, host: &str, port: u16, mode: KvTransferMode) -> Value {
    let ids: Vec<u64> = (0..p.blocks).collect();
    let mut v = json!({
        "do_remote_prefill": true,
        "do_remote_decode": false,
        "remote_engine_id": p.engine.to_string(),
        "remote_block_ids": [ids],
        "remote_host": host,
        "remote_port": p.side_port.unwrap_or(port),
        "remote_request_id": p.request.0.to_string(),
        "tp_size": 1,
        "remote_num_tokens": p.tokens,
        "transfer_mode": mode.name(),
        "handoff_id": p.handoff.0.to_string(),
    });
    if let Value::Object(o) = &mut v {
        kv_fields::write_layout(o, mode);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vllm::proxy_error::MAX_BLOCK_IDS;

    #[test]
    fn round_trip() {
        let p = Pinned {
            request: RequestId(7),
            handoff: HandoffId(u128::MAX - 3),
            engine: EngineId::worker(WorkerId(1)),
            blocks: 3,
            tokens: 40,
            side_port: None,
        };
        let params = response_params(&p, "127.0.0.1", 9001, KvTransferMode::Pull);
        for field in [
            "tp_size",
            "remote_num_tokens",
            "transfer_mode",
            "remote_request_id",
        ] {
            assert!(
                params.get(field).is_some(),
                "{field} is one of vLLM's fields"
            );
        }
        assert_eq!(params["remote_num_tokens"], 40);
        assert_eq!(
            params["remote_block_ids"],
            json!([[0, 1, 2]]),
            "one list per KV group"
        );
        assert_eq!(params["dcp_size"], 1);
        assert_eq!(params["pp_size"], 1);
        assert_eq!(params["remote_blocks_expiry_time"], Value::Null);
        assert!(params.get("remote_blocks_expiry_time").is_some());
        let push = response_params(&p, "h", 1, KvTransferMode::Push);
        assert_eq!(push["transfer_mode"], "push");
        assert_eq!(push["pp_size"], 1);
        for absent in ["dcp_size", "remote_blocks_expiry_time"] {
            assert!(push.get(absent).is_none(), "push writes no {absent}");
        }
        assert_eq!(params["remote_port"], 9001);
        let ranked = response_params(
            &Pinned {
                side_port: Some(5601),
                ..p
            },
            "h",
            9001,
            KvTransferMode::Pull,
        );
        assert_eq!(ranked["remote_port"], 5601, "a rank's own side channel");
        let body = json!({"prompt": "x", "kv_transfer_params": params}).to_string();
        assert_eq!(
            parse(body.as_bytes()).unwrap(),
            KvTransfer::RemotePrefill(RemotePrefill {
                request: RequestId(7),
                handoff: HandoffId(u128::MAX - 3),
                engine: EngineId::worker(WorkerId(1)),
                blocks: 3,
                side_channel: Some(("127.0.0.1".into(), 9001)),
                tokens: Some(40),
                layout: RemoteLayout {
                    transfer_mode: Some(KvTransferMode::Pull),
                    ..RemoteLayout::default()
                },
            })
        );
    }

    #[test]
    fn a_ranked_engine_id_is_vllms_dp_suffix_and_round_trips() {
        let at = WorkerWithDpRank {
            worker: WorkerId(3),
            dp_rank: DpRank(1),
        };
        let id = EngineId { at, ranked: true };
        assert_eq!(id.to_string(), "3_dp1");
        assert_eq!(EngineId::parse("3_dp1"), Some(id));
        assert_eq!(EngineId::parse("3"), Some(EngineId::worker(WorkerId(3))));
        for bad in [
            "",
            "_dp1",
            "3_dp",
            "3_dpx",
            "x",
            "3_dp1_dp2",
            "-1",
            "99999999999",
            "3_dp70000",
        ] {
            assert_eq!(EngineId::parse(bad), None, "{bad}");
        }
        let p = Pinned {
            request: RequestId(1),
            handoff: HandoffId(2),
            engine: id,
            blocks: 0,
            tokens: 1,
            side_port: None,
        };
        let body = json!({"kv_transfer_params": response_params(&p, "h", 1, KvTransferMode::Pull)})
            .to_string();
        match parse(body.as_bytes()) {
            Ok(KvTransfer::RemotePrefill(r)) => assert_eq!(r.engine, id),
            other => panic!("{other:?}"),
        }
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
            r#"{"kv_transfer_params":{"do_remote_prefill":true,"remote_request_id":"1",
                "handoff_id":"2","remote_engine_id":"0","remote_block_ids":[],
                "remote_host":"h","remote_port":70000}}"#,
            r#"{"kv_transfer_params":{"do_remote_prefill":true,"remote_request_id":"1",
                "handoff_id":"2","remote_engine_id":"0","remote_block_ids":[],
                "remote_host":5,"remote_port":1}}"#,
            r#"{"kv_transfer_params":{"do_remote_prefill":true,"remote_request_id":"1",
                "handoff_id":"2","remote_engine_id":"0","remote_block_ids":[],
                "remote_host":"a\nb","remote_port":1}}"#,
            r#"{"kv_transfer_params":{"do_remote_prefill":true,"remote_request_id":"1",
                "handoff_id":"2","remote_engine_id":"0","remote_block_ids":[],
                "remote_num_tokens":-3}}"#,
        ] {
            let e = k(bad).unwrap_err();
            assert_eq!(e.api().status, 400, "{bad}: {e:?}");
        }
        assert_eq!(ProxyError::UnknownHandoff.api().status, 404);
        assert_eq!(ProxyError::AlreadyAttached.api().status, 409);
        let host = "h".to_string();
        assert_eq!(ProxyError::PeerNotAllowed { host }.api().status, 403);
        assert_eq!(
            ProxyError::TooManyBlocks { got: 9, limit: 2 }.api().status,
            400
        );
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
                proptest::collection::vec(proptest::collection::vec(any::<i32>(), 0..3), 0..3)
                    .prop_map(|v| json!(v)),
                any::<f64>().prop_map(|n| json!(n)),
                prop_oneof![Just("pull"), Just("push")].prop_map(|s| json!(s)),
            ]
        }

        proptest! {
            /// Any mix of the known fields with any values parses or is a
            /// 400, never a panic; a decode reference always names its ids.
            #[test]
            fn params_never_panic(
                fields in proptest::collection::vec((0usize..13, leaf()), 0..13)
            ) {
                const NAMES: [&str; 13] = [
                    "do_remote_decode", "do_remote_prefill", "remote_engine_id",
                    "remote_block_ids", "remote_host", "remote_port",
                    "remote_request_id", "handoff_id", "dcp_size", "pp_size",
                    "remote_blocks_expiry_time", "transfer_mode", "remote_num_tokens",
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
