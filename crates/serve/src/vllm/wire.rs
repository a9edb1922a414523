//! vLLM's KV event wire format, as its ZMQ publisher sends it
//! (`vllm/distributed/kv_events.py`: `EventBatch`, `KVEventBatch`,
//! `BlockStored`, `BlockRemoved`, `AllBlocksCleared`; `ZmqEventPublisher`).
//!
//! - A message is three ZMQ frames: the topic, the batch's sequence number
//!   as 8 bytes big-endian, and the msgpack payload.
//! - The payload is a `KVEventBatch`, a msgspec struct with
//!   `array_like=True`: the array `[ts, events, data_parallel_rank]` (`ts`
//!   a float of Unix seconds; the rank is written, as vLLM does when it is
//!   set).
//! - Each event is a msgspec struct with `array_like=True, tag=True,
//!   omit_defaults=True`: an array whose first element is the class name,
//!   then the fields in declaration order, `omit_defaults` dropping the
//!   trailing run of fields that hold their default (only fields declared
//!   with a default are dropped; every default here is `None`):
//!   `["BlockStored", block_hashes, parent_block_hash, token_ids,
//!   block_size, lora_id, medium, lora_name, extra_keys, group_idx,
//!   kv_cache_spec_kind]` (11 elements: `kv_cache_spec_sliding_window`,
//!   last and `None` for full attention, is dropped),
//!   `["BlockRemoved", block_hashes, medium, group_idx]`,
//!   `["AllBlocksCleared"]`. Hashes are unsigned 64-bit ints (vLLM's
//!   `ExternalBlockHash` may be an int).
//! - The KV-group fields are vLLM's (`vllm/distributed/kv_events.py`,
//!   `BlockStored`: `extra_keys`, `group_idx`, `kv_cache_spec_kind`,
//!   `kv_cache_spec_sliding_window`, all defaulting to `None`, after
//!   `lora_name`; `BlockRemoved`: `group_idx` after `medium`). Their
//!   values are what vLLM's scheduler writes for a model with one
//!   full-attention KV cache group, the only kind the mocker models:
//!   `BlockPool.cache_full_blocks` (`vllm/v1/core/block_pool.py`) sets
//!   `group_idx` to the group's id (0) and `extra_keys` to one entry per
//!   stored block, that block's `generate_block_hash_extra_keys`
//!   (`vllm/v1/core/kv_cache_utils.py`): `None`, or the tuple of its keys,
//!   here `(lora_name,)` (`_gen_lora_extra_hash_keys`) for an adapter's
//!   blocks (the mocker has no multimodal inputs, cache salt or prompt
//!   embeddings); `KVCacheManager.take_events`
//!   (`vllm/v1/core/kv_cache_manager.py`) then fills `kv_cache_spec_kind`
//!   (`"full_attention"`) and `kv_cache_spec_sliding_window` (`None`) from
//!   the group's spec; `BlockPool._maybe_evict_cached_block` writes the
//!   removed block's `group_idx` (0).
//! - [`KvEventEncoding::Map`] writes each event as vLLM 0.28 and later
//!   declare `KVCacheEvent` (`tag=True` without `array_like`): a map whose
//!   first key is `"type"` (the class name), then every field in order
//!   except those holding their default (`omit_defaults`; a field without
//!   a default is written even when nil): `{type, block_hashes,
//!   parent_block_hash, token_ids, block_size, lora_id, medium, lora_name,
//!   extra_keys, group_idx, kv_cache_spec_kind}`, `{type, block_hashes,
//!   medium, group_idx}`, `{type}`. The batch stays an array. vllm-router
//!   0.1.17's subscriber (`src/kv_index/decode.rs`, `decode_event`) reads
//!   only this form.
//! - The replay socket is a ROUTER: a client sends `[b"", start_seq (8
//!   bytes big-endian)]`; it is answered, frame for frame, with every
//!   buffered message whose sequence is at least `start_seq` as
//!   `[b"", seq, payload]`, then `[b"", END_SEQ, b""]` with `END_SEQ` = -1
//!   as 8 bytes big-endian two's complement.

use rmpv::Value;

/// The sequence number vLLM's replay socket ends a replay with (-1).
pub const END_SEQ: [u8; 8] = (-1i64).to_be_bytes();

/// The storage medium written in events (vLLM's `"GPU"` for device KV).
pub const MEDIUM: &str = "GPU";

/// The KV cache group every block belongs to: the mocker models one
/// full-attention group, vLLM's group 0 (`BlockStored.group_idx`,
/// `BlockRemoved.group_idx`).
pub const GROUP_IDX: u32 = 0;

/// That group's spec kind as vLLM names it (`KVCacheSpecKind.FULL_ATTENTION`,
/// `vllm/v1/kv_cache_interface.py`; `BlockStored.kv_cache_spec_kind`). Its
/// sliding window is `None`.
pub const KV_CACHE_SPEC_KIND: &str = "full_attention";

/// One KV cache event in vLLM's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireEvent {
    /// `BlockStored`.
    BlockStored {
        /// Chained hashes, in prefix order.
        block_hashes: Vec<u64>,
        /// The block these extend, `None` at the root.
        parent_block_hash: Option<u64>,
        /// The stored blocks' token ids, concatenated (`block_size` each).
        token_ids: Vec<u32>,
        /// Tokens per block.
        block_size: u32,
        /// The LoRA adapter the blocks were computed under (`lora_id`,
        /// `lora_name`: vLLM's `BlockPool.cache_full_blocks` fills both from
        /// the request's `lora_request`); `None` on the base model.
        lora: Option<(u32, String)>,
        /// Each block's adapter name, one entry per `block_hashes` entry:
        /// the block's `extra_keys` entry is `(name,)`, or `None` on the
        /// base model (see the module docs).
        extra_keys: Vec<Option<String>>,
    },
    /// `BlockRemoved`.
    BlockRemoved {
        /// Hashes no longer cached.
        block_hashes: Vec<u64>,
    },
    /// `AllBlocksCleared`.
    AllBlocksCleared,
}

/// How each event is laid out inside a batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvEventEncoding {
    /// msgspec `array_like=True`: `["BlockStored", field, ...]`.
    #[default]
    Array,
    /// msgspec's tagged map: `{"type": "BlockStored", "field": ...}`.
    Map,
}

fn hashes(h: &[u64]) -> Value {
    Value::Array(h.iter().map(|x| Value::from(*x)).collect())
}

/// One struct field as msgspec writes it: its name, its value, and whether
/// it is declared with a default (`None`), so `omit_defaults` may drop it.
struct Field {
    name: &'static str,
    value: Value,
    defaulted: bool,
}

fn field(name: &'static str, value: Value) -> Field {
    Field {
        name,
        value,
        defaulted: false,
    }
}

fn defaulted(name: &'static str, value: Value) -> Field {
    Field {
        name,
        value,
        defaulted: true,
    }
}

impl WireEvent {
    /// The class name (msgspec's tag).
    fn tag(&self) -> &'static str {
        match self {
            WireEvent::BlockStored { .. } => "BlockStored",
            WireEvent::BlockRemoved { .. } => "BlockRemoved",
            WireEvent::AllBlocksCleared => "AllBlocksCleared",
        }
    }

    /// The fields in vLLM's declaration order (see the module docs).
    fn fields(&self) -> Vec<Field> {
        match self {
            WireEvent::BlockStored {
                block_hashes,
                parent_block_hash,
                token_ids,
                block_size,
                lora,
                extra_keys,
            } => {
                // `cache_full_blocks` writes `extra_keys` as `None` only
                // when the event has no blocks.
                let keys = if extra_keys.is_empty() {
                    Value::Nil
                } else {
                    Value::Array(
                        extra_keys
                            .iter()
                            .map(|k| {
                                k.as_deref().map_or(Value::Nil, |name| {
                                    Value::Array(vec![Value::from(name)])
                                })
                            })
                            .collect(),
                    )
                };
                vec![
                    field("block_hashes", hashes(block_hashes)),
                    field(
                        "parent_block_hash",
                        parent_block_hash.map_or(Value::Nil, Value::from),
                    ),
                    field(
                        "token_ids",
                        Value::Array(token_ids.iter().map(|t| Value::from(*t)).collect()),
                    ),
                    field("block_size", Value::from(*block_size)),
                    field(
                        "lora_id",
                        lora.as_ref().map_or(Value::Nil, |(id, _)| Value::from(*id)),
                    ),
                    field("medium", Value::from(MEDIUM)),
                    field(
                        "lora_name",
                        lora.as_ref()
                            .map_or(Value::Nil, |(_, name)| Value::from(name.as_str())),
                    ),
                    defaulted("extra_keys", keys),
                    defaulted("group_idx", Value::from(GROUP_IDX)),
                    defaulted("kv_cache_spec_kind", Value::from(KV_CACHE_SPEC_KIND)),
                    defaulted("kv_cache_spec_sliding_window", Value::Nil),
                ]
            }
            WireEvent::BlockRemoved { block_hashes } => vec![
                field("block_hashes", hashes(block_hashes)),
                field("medium", Value::from(MEDIUM)),
                defaulted("group_idx", Value::from(GROUP_IDX)),
            ],
            WireEvent::AllBlocksCleared => Vec::new(),
        }
    }

    /// The array form: the tag, then the fields up to the last one that is
    /// not a nil default (msgspec's `omit_defaults` on an `array_like`
    /// struct drops only trailing defaults).
    fn to_value(&self) -> Value {
        let mut fields = self.fields();
        while fields
            .last()
            .is_some_and(|f| f.defaulted && f.value.is_nil())
        {
            fields.pop();
        }
        let mut v = Vec::with_capacity(fields.len() + 1);
        v.push(Value::from(self.tag()));
        v.extend(fields.into_iter().map(|f| f.value));
        Value::Array(v)
    }
}

/// The map form of `event` (see the module docs): `type` first, then every
/// field but the nil defaults.
fn to_map_value(event: &WireEvent) -> Value {
    let mut pairs = vec![(Value::from("type"), Value::from(event.tag()))];
    pairs.extend(
        event
            .fields()
            .into_iter()
            .filter(|f| !(f.defaulted && f.value.is_nil()))
            .map(|f| (Value::from(f.name), f.value)),
    );
    Value::Map(pairs)
}

#[cfg(test)]
/// The msgpack payload of a `KVEventBatch` of `events` at `ts` (Unix
/// seconds) from data-parallel rank `dp_rank`, events in the array form.
pub fn encode_batch(ts: f64, events: &[WireEvent], dp_rank: u32) -> Vec<u8> {
    encode_batch_as(ts, events, dp_rank, KvEventEncoding::Array)
}

/// As [`encode_batch`], each event laid out as `encoding` says.
pub fn encode_batch_as(
    ts: f64,
    events: &[WireEvent],
    dp_rank: u32,
    encoding: KvEventEncoding,
) -> Vec<u8> {
    let event = match encoding {
        KvEventEncoding::Array => WireEvent::to_value,
        KvEventEncoding::Map => to_map_value,
    };
    let v = Value::Array(vec![
        Value::F64(ts),
        Value::Array(events.iter().map(event).collect()),
        Value::from(dp_rank),
    ]);
    let mut out = Vec::with_capacity(64);
    // Writing to a Vec cannot fail.
    let _ = rmpv::encode::write_value(&mut out, &v);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &[u8]) -> Value {
        rmpv::decode::read_value(&mut &bytes[..]).expect("valid msgpack")
    }

    fn stored(n: usize, lora: Option<(u32, &str)>) -> WireEvent {
        WireEvent::BlockStored {
            block_hashes: (0..n as u64).map(|i| 5 + i).collect(),
            parent_block_hash: Some(4),
            token_ids: (0..2 * n as u32).collect(),
            block_size: 2,
            lora: lora.map(|(id, n)| (id, n.to_string())),
            extra_keys: vec![lora.map(|(_, n)| n.to_string()); n],
        }
    }

    #[test]
    fn batch_layout_is_vllms() {
        let ev = [
            WireEvent::BlockStored {
                block_hashes: vec![u64::MAX, 32],
                parent_block_hash: None,
                token_ids: vec![1, 2, 3, 4],
                block_size: 2,
                lora: None,
                extra_keys: vec![None, None],
            },
            WireEvent::BlockRemoved {
                block_hashes: vec![7],
            },
            WireEvent::AllBlocksCleared,
        ];
        let v = decode(&encode_batch(1.5, &ev, 0));
        let top = v.as_array().expect("array-like batch");
        assert_eq!(top.len(), 3);
        assert_eq!(top[0].as_f64(), Some(1.5));
        assert_eq!(top[2].as_u64(), Some(0));
        let events = top[1].as_array().expect("events");
        let stored = events[0].as_array().expect("tagged array");
        assert_eq!(stored[0].as_str(), Some("BlockStored"));
        // The sliding window, a trailing nil default, is left out.
        assert_eq!(stored.len(), 11);
        assert_eq!(
            stored[1].as_array().map(|a| a[0].as_u64()),
            Some(Some(u64::MAX))
        );
        assert!(stored[2].is_nil());
        assert_eq!(stored[4].as_u64(), Some(2));
        assert!(stored[5].is_nil());
        assert_eq!(stored[6].as_str(), Some("GPU"));
        // `lora_name` has no default: written, nil, before the group fields.
        assert!(stored[7].is_nil());
        assert_eq!(stored[8], Value::Array(vec![Value::Nil, Value::Nil]));
        assert_eq!(stored[9].as_u64(), Some(0));
        assert_eq!(stored[10].as_str(), Some("full_attention"));
        let removed = events[1].as_array().expect("tagged array");
        assert_eq!(removed[0].as_str(), Some("BlockRemoved"));
        assert_eq!(removed.len(), 4);
        assert_eq!(removed[2].as_str(), Some("GPU"));
        assert_eq!(removed[3].as_u64(), Some(0));
        assert_eq!(events[2].as_array().map(Vec::len), Some(1));
    }

    fn map_keys(v: &Value) -> Vec<&str> {
        v.as_map()
            .expect("tagged map")
            .iter()
            .map(|(k, _)| k.as_str().expect("string key"))
            .collect()
    }

    #[test]
    fn map_layout_is_vllm_0_28s() {
        let ev = [
            stored(2, None),
            WireEvent::BlockRemoved {
                block_hashes: vec![7],
            },
            WireEvent::AllBlocksCleared,
        ];
        let bytes = encode_batch_as(2.5, &ev, 0, KvEventEncoding::Map);
        let v = decode(&bytes);
        let top = v.as_array().expect("the batch stays array-like");
        assert_eq!((top.len(), top[0].as_f64()), (3, Some(2.5)));
        let events = top[1].as_array().expect("events");
        assert_eq!(
            map_keys(&events[0]),
            [
                "type",
                "block_hashes",
                "parent_block_hash",
                "token_ids",
                "block_size",
                "lora_id",
                "medium",
                "lora_name",
                "extra_keys",
                "group_idx",
                "kv_cache_spec_kind",
            ]
        );
        let stored = events[0].as_map().expect("map");
        assert_eq!(stored[0].1.as_str(), Some("BlockStored"));
        assert_eq!(stored[2].1.as_u64(), Some(4));
        assert_eq!(stored[3].1.as_array().map(Vec::len), Some(4));
        assert!(stored[5].1.is_nil() && stored[7].1.is_nil());
        assert_eq!(stored[6].1.as_str(), Some("GPU"));
        assert_eq!(stored[8].1, Value::Array(vec![Value::Nil, Value::Nil]));
        assert_eq!(stored[9].1.as_u64(), Some(0));
        assert_eq!(stored[10].1.as_str(), Some("full_attention"));
        assert_eq!(
            map_keys(&events[1]),
            ["type", "block_hashes", "medium", "group_idx"]
        );
        assert_eq!(events[1].as_map().expect("map")[3].1.as_u64(), Some(0));
        assert_eq!(map_keys(&events[2]), ["type"]);
        // The same events in the default form are unchanged.
        assert_eq!(
            encode_batch(2.5, &ev, 0),
            encode_batch_as(2.5, &ev, 0, KvEventEncoding::Array)
        );
        assert_ne!(encode_batch(2.5, &ev, 0), bytes);
    }

    /// An adapter's blocks carry `lora_id`, `lora_name` and, per block,
    /// the extra keys `(lora_name,)` in both forms.
    #[test]
    fn adapter_blocks_carry_lora_id_name_and_extra_keys() {
        let ev = [stored(2, Some((3, "sql")))];
        let per_block = Value::Array(vec![Value::Array(vec![Value::from("sql")]); 2]);
        let v = decode(&encode_batch(1.0, &ev, 0));
        let s = v[1][0].as_array().expect("tagged array").clone();
        assert_eq!(s.len(), 11);
        assert_eq!(s[5].as_u64(), Some(3));
        assert_eq!(s[7].as_str(), Some("sql"));
        assert_eq!(s[8], per_block);
        let v = decode(&encode_batch_as(1.0, &ev, 0, KvEventEncoding::Map));
        let m = v[1][0].as_map().expect("map").clone();
        assert_eq!(m.len(), 11);
        assert_eq!(
            (m[5].0.as_str(), m[5].1.as_u64()),
            (Some("lora_id"), Some(3))
        );
        assert_eq!(
            (m[7].0.as_str(), m[7].1.as_str()),
            (Some("lora_name"), Some("sql"))
        );
        assert_eq!((m[8].0.as_str(), &m[8].1), (Some("extra_keys"), &per_block));
    }

    /// With no blocks vLLM writes `extra_keys` as `None`: a nil placeholder
    /// in the array form (defaults follow it), left out of the map form.
    #[test]
    fn an_event_without_blocks_has_no_extra_keys() {
        let ev = [stored(0, None)];
        let v = decode(&encode_batch(1.0, &ev, 0));
        let s = v[1][0].as_array().expect("tagged array").clone();
        assert_eq!(s.len(), 11);
        assert!(s[8].is_nil());
        assert_eq!(s[9].as_u64(), Some(0));
        let v = decode(&encode_batch_as(1.0, &ev, 0, KvEventEncoding::Map));
        let keys = map_keys(&v[1][0]);
        assert!(!keys.contains(&"extra_keys"), "{keys:?}");
        assert_eq!(keys.len(), 10);
    }

    #[test]
    fn end_marker_is_minus_one() {
        assert_eq!(END_SEQ, [0xff; 8]);
    }
}
