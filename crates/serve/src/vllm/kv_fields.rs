//! The `kv_transfer_params` fields beyond the ids: `remote_block_ids` in
//! both of the forms a proxy may hand on, the parallel sizes, the block
//! expiry and the transfer mode, each read into a bounded, typed value or
//! a [`ProxyError::BadParam`] naming the field.
//!
//! What vLLM writes, from the prefill's `request_finished`
//! (`vllm/distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py`,
//! `NixlPullConnectorScheduler.request_finished`; `push_scheduler.py`,
//! `NixlPushConnectorScheduler.request_finished`):
//!
//! - `remote_block_ids`: the request's `BlockIds`, one list per KV cache
//!   group (`vllm/distributed/kv_transfer/kv_connector/utils.py`); a model
//!   with one full-attention group, as every mocked model is, writes one
//!   list inside a list. Older proxies and tests send a flat list: both are
//!   read.
//! - `dcp_size`, `pp_size`: the prefill's decode-context-parallel and
//!   pipeline-parallel sizes (`parallel_config`), read by the decode with a
//!   default of 1 (`NixlConnectorMetadata._add_new_req` in
//!   `nixl/metadata.py`); the push scheduler writes `pp_size` only.
//! - `remote_blocks_expiry_time`: the pull scheduler's deadline of blocks
//!   pinned on a *decode* for a later turn's readback (`decoder_kv_blocks_ttl`);
//!   a prefill writes `null`. The decode carries it in `RemoteMeta`.
//! - `transfer_mode`: `"pull"` or `"push"` (the scheduler's `_TRANSFER_MODE`).
//!   Push and pull connectors never complete a NIXL handshake with each
//!   other: the mode is a factor of the compatibility hash both sides
//!   compare before decoding the peer's metadata
//!   (`compute_nixl_compatibility_hash` and `NixlHandshakePayload` in
//!   `nixl/metadata.py`). A decode engine here refuses params whose mode
//!   is not its own at once ([`check_mode`]), where vLLM's would fail the
//!   handshake and with it the load.

use super::proxy_error::{ProxyError, MAX_BLOCK_IDS};
use handoff_core::KvTransferMode;
use serde_json::{Map, Value};
use std::time::Duration;

/// Most KV cache groups a `remote_block_ids` may list (a hybrid model has
/// a handful; the mocked models have one).
pub const MAX_KV_GROUPS: usize = 64;

/// The KV cache groups a mocked engine's model has (one full-attention
/// group).
pub const KV_GROUPS: usize = 1;

/// The largest `dcp_size` or `pp_size` accepted.
pub const MAX_PARALLEL: u64 = 1024;

/// The latest `remote_blocks_expiry_time` accepted, in seconds of the
/// writer's monotonic clock (about 31 years).
pub const MAX_EXPIRY_S: f64 = 1e9;

/// The parallel layout and expiry a decode reads besides the block ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteLayout {
    /// `dcp_size`, 1 when absent.
    pub dcp_size: u32,
    /// `pp_size`, 1 when absent.
    pub pp_size: u32,
    /// `remote_blocks_expiry_time`, `None` when absent or null.
    pub expiry: Option<Duration>,
    /// `transfer_mode`, `None` when absent (an older proxy's params).
    pub transfer_mode: Option<KvTransferMode>,
}

impl Default for RemoteLayout {
    fn default() -> Self {
        RemoteLayout {
            dcp_size: 1,
            pp_size: 1,
            expiry: None,
            transfer_mode: None,
        }
    }
}

fn bad(field: &'static str, why: impl Into<String>) -> ProxyError {
    ProxyError::BadParam {
        field,
        why: why.into(),
    }
}

/// The number of blocks `remote_block_ids` names: a flat list of ids, or
/// one list per KV cache group (exactly [`KV_GROUPS`] groups). Ids are
/// non-negative integers, at most [`MAX_BLOCK_IDS`] in all.
pub fn block_ids(o: &Map<String, Value>) -> Result<u64, ProxyError> {
    let field = "remote_block_ids";
    let a = match o.get(field) {
        Some(Value::Array(a)) => a,
        _ => return Err(bad(field, "is required with do_remote_prefill (a list)")),
    };
    let ids = |a: &[Value]| -> Result<u64, ProxyError> {
        if a.len() > MAX_BLOCK_IDS {
            return Err(bad(field, format!("has more than {MAX_BLOCK_IDS} ids")));
        }
        if a.iter().any(|x| x.as_u64().is_none()) {
            return Err(bad(
                field,
                "must be a list of non-negative integers, or one such list per KV cache group",
            ));
        }
        Ok(a.len() as u64)
    };
    if !a.first().is_some_and(Value::is_array) {
        return ids(a);
    }
    if a.len() > MAX_KV_GROUPS {
        return Err(bad(
            field,
            format!("has more than {MAX_KV_GROUPS} KV cache groups"),
        ));
    }
    if a.len() != KV_GROUPS {
        return Err(bad(
            field,
            format!(
                "lists {} KV cache groups; this engine's model has {KV_GROUPS}",
                a.len()
            ),
        ));
    }
    let mut total = 0u64;
    for g in a {
        let Value::Array(g) = g else {
            return Err(bad(
                field,
                "mixes ids and lists: send a flat list or one list per KV cache group",
            ));
        };
        total += ids(g)?;
        if total > MAX_BLOCK_IDS as u64 {
            return Err(bad(field, format!("has more than {MAX_BLOCK_IDS} ids")));
        }
    }
    Ok(total)
}

/// A parallel size: absent or null is 1; else an integer in
/// `1..=MAX_PARALLEL`.
fn parallel(o: &Map<String, Value>, field: &'static str) -> Result<u32, ProxyError> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(1),
        Some(v) => match v.as_u64() {
            Some(n) if (1..=MAX_PARALLEL).contains(&n) => Ok(n as u32),
            Some(_) => Err(bad(field, format!("must be in 1..={MAX_PARALLEL}"))),
            None => Err(bad(field, "must be a positive integer")),
        },
    }
}

/// `remote_blocks_expiry_time`: absent or null, or seconds in
/// `0..=MAX_EXPIRY_S`.
fn expiry(o: &Map<String, Value>) -> Result<Option<Duration>, ProxyError> {
    let field = "remote_blocks_expiry_time";
    match o.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(s) if (0.0..=MAX_EXPIRY_S).contains(&s) => Ok(Some(Duration::from_secs_f64(s))),
            _ => Err(bad(
                field,
                format!("must be seconds in 0..={MAX_EXPIRY_S:e}, or null"),
            )),
        },
        Some(_) => Err(bad(field, "must be a number (seconds) or null")),
    }
}

/// `transfer_mode`: absent or null, `"pull"` or `"push"`.
fn transfer_mode(o: &Map<String, Value>) -> Result<Option<KvTransferMode>, ProxyError> {
    let field = "transfer_mode";
    match o.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s == "pull" => Ok(Some(KvTransferMode::Pull)),
        Some(Value::String(s)) if s == "push" => Ok(Some(KvTransferMode::Push)),
        Some(_) => Err(bad(field, "must be \"pull\" or \"push\"")),
    }
}

/// The layout fields of a decode's params.
pub fn layout(o: &Map<String, Value>) -> Result<RemoteLayout, ProxyError> {
    Ok(RemoteLayout {
        dcp_size: parallel(o, "dcp_size")?,
        pp_size: parallel(o, "pp_size")?,
        expiry: expiry(o)?,
        transfer_mode: transfer_mode(o)?,
    })
}

/// Refuses params whose `transfer_mode` is not the decode engine's `own`
/// (see the module docs); params without one are taken as the engine's.
pub fn check_mode(layout: &RemoteLayout, own: KvTransferMode) -> Result<(), ProxyError> {
    match layout.transfer_mode {
        Some(sent) if sent != own => Err(ProxyError::TransferModeMismatch { sent, own }),
        _ => Ok(()),
    }
}

/// The fields [`layout`] reads, as a prefill of `mode` writes them: pull
/// writes `dcp_size`, `pp_size` and a `null` expiry (a prefill's blocks
/// have a lease, not an expiry); push writes `pp_size` only.
pub fn write_layout(out: &mut Map<String, Value>, mode: KvTransferMode) {
    if mode == KvTransferMode::Pull {
        out.insert("dcp_size".into(), Value::from(1));
        out.insert("remote_blocks_expiry_time".into(), Value::Null);
    }
    out.insert("pp_size".into(), Value::from(1));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(o) => o,
            _ => unreachable!("a test object"),
        }
    }

    fn field_of(e: ProxyError) -> &'static str {
        match e {
            ProxyError::BadParam { field, .. } => field,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn both_forms_of_block_ids() {
        let n = |v: Value| block_ids(&obj(json!({ "remote_block_ids": v })));
        assert_eq!(n(json!([0, 1, 2])), Ok(3));
        assert_eq!(n(json!([[0, 1, 2]])), Ok(3), "one group");
        assert_eq!(n(json!([])), Ok(0));
        assert_eq!(n(json!([[]])), Ok(0));
        for bad in [
            json!([[0], [1]]),
            json!([[0], 1]),
            json!([0, [1]]),
            json!([[-1]]),
            json!([[[0]]]),
            json!([["0"]]),
            json!([1.5]),
            json!("0,1"),
            json!(null),
            json!({"0": 1}),
            Value::Array(vec![json!([]); MAX_KV_GROUPS + 1]),
            Value::Array(vec![json!(0); MAX_BLOCK_IDS + 1]),
            json!([vec![0; MAX_BLOCK_IDS + 1]]),
        ] {
            let e = n(bad.clone()).expect_err("refused");
            assert_eq!(e.api().status, 400, "{bad}");
            assert_eq!(field_of(e), "remote_block_ids", "{bad}");
        }
    }

    #[test]
    fn layout_fields_are_typed_and_bounded() {
        let l = |v: Value| layout(&obj(v));
        assert_eq!(l(json!({})), Ok(RemoteLayout::default()));
        assert_eq!(
            l(
                json!({"dcp_size": 2, "pp_size": 4, "remote_blocks_expiry_time": 12.5,
                     "transfer_mode": "push"})
            ),
            Ok(RemoteLayout {
                dcp_size: 2,
                pp_size: 4,
                expiry: Some(Duration::from_millis(12_500)),
                transfer_mode: Some(KvTransferMode::Push),
            })
        );
        for (body, field) in [
            (json!({"dcp_size": 0}), "dcp_size"),
            (json!({"dcp_size": -1}), "dcp_size"),
            (json!({"dcp_size": "1"}), "dcp_size"),
            (json!({"dcp_size": 1.0}), "dcp_size"),
            (json!({"dcp_size": MAX_PARALLEL + 1}), "dcp_size"),
            (json!({"pp_size": u64::MAX}), "pp_size"),
            (json!({"pp_size": [1]}), "pp_size"),
            (
                json!({"remote_blocks_expiry_time": -0.5}),
                "remote_blocks_expiry_time",
            ),
            (
                json!({"remote_blocks_expiry_time": 1e300}),
                "remote_blocks_expiry_time",
            ),
            (
                json!({"remote_blocks_expiry_time": "soon"}),
                "remote_blocks_expiry_time",
            ),
            (json!({"transfer_mode": "PULL"}), "transfer_mode"),
            (json!({"transfer_mode": true}), "transfer_mode"),
        ] {
            let e = l(body.clone()).expect_err("refused");
            assert_eq!(e.api().status, 400, "{body}");
            assert_eq!(field_of(e), field, "{body}");
        }
    }

    #[test]
    fn a_mode_not_the_engines_is_refused_and_a_missing_one_is_taken() {
        let with = |m| RemoteLayout {
            transfer_mode: m,
            ..RemoteLayout::default()
        };
        let (pull, push) = (KvTransferMode::Pull, KvTransferMode::Push);
        assert_eq!(check_mode(&with(None), push), Ok(()));
        assert_eq!(check_mode(&with(Some(push)), push), Ok(()));
        let e = check_mode(&with(Some(push)), pull).expect_err("mismatch");
        assert_eq!(e.api().status, 400);
        assert!(e.api().message.contains("transfer_mode"), "{:?}", e.api());
    }

    #[test]
    fn written_fields_read_back() {
        for mode in [KvTransferMode::Pull, KvTransferMode::Push] {
            let mut o = Map::new();
            write_layout(&mut o, mode);
            o.insert("transfer_mode".into(), Value::from(mode.name()));
            let l = layout(&o).expect("reads back");
            assert_eq!((l.dcp_size, l.pp_size, l.expiry), (1, 1, None));
            assert_eq!(o.contains_key("dcp_size"), mode == KvTransferMode::Pull);
        }
    }
}
