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
//! - Each event is a msgspec struct with `array_like=True, tag=True`: an
//!   array whose first element is the class name, then the fields in
//!   order: `["BlockStored", block_hashes, parent_block_hash, token_ids,
//!   block_size, lora_id, medium]` (then `lora_name` when the blocks are
//!   an adapter's: msgspec's array form drops trailing defaulted fields,
//!   and `lora_name` is the last), `["BlockRemoved", block_hashes,
//!   medium]`, `["AllBlocksCleared"]`. Hashes are unsigned 64-bit ints
//!   (vLLM's `ExternalBlockHash` may be an int).
//! - [`KvEventEncoding::Map`] writes each event as vLLM 0.28 and later
//!   declare `KVCacheEvent` (`tag=True` without `array_like`): a map whose
//!   first key is `"type"` (the class name), then every field without a
//!   default, nil ones included (`omit_defaults` drops only the defaulted
//!   ones): `{type, block_hashes, parent_block_hash, token_ids, block_size,
//!   lora_id, medium, lora_name}`, `{type, block_hashes, medium}`,
//!   `{type}`. The batch stays an array. vllm-router 0.1.17's subscriber
//!   (`src/kv_index/decode.rs`, `decode_event`) reads only this form.
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

impl WireEvent {
    fn to_value(&self) -> Value {
        match self {
            WireEvent::BlockStored {
                block_hashes,
                parent_block_hash,
                token_ids,
                block_size,
                lora,
            } => {
                let mut v = vec![
                    Value::from("BlockStored"),
                    hashes(block_hashes),
                    parent_block_hash.map_or(Value::Nil, Value::from),
                    Value::Array(token_ids.iter().map(|t| Value::from(*t)).collect()),
                    Value::from(*block_size),
                    lora.as_ref().map_or(Value::Nil, |(id, _)| Value::from(*id)),
                    Value::from(MEDIUM),
                ];
                if let Some((_, name)) = lora {
                    v.push(Value::from(name.as_str()));
                }
                Value::Array(v)
            }
            WireEvent::BlockRemoved { block_hashes } => Value::Array(vec![
                Value::from("BlockRemoved"),
                hashes(block_hashes),
                Value::from(MEDIUM),
            ]),
            WireEvent::AllBlocksCleared => Value::Array(vec![Value::from("AllBlocksCleared")]),
        }
    }
}

/// The map form of `event` (see the module docs): the array form's
/// values under vLLM's field names, `type` first.
fn to_map_value(event: &WireEvent) -> Value {
    let names: &[&str] = match event {
        WireEvent::BlockStored { .. } => &[
            "type",
            "block_hashes",
            "parent_block_hash",
            "token_ids",
            "block_size",
            "lora_id",
            "medium",
        ],
        WireEvent::BlockRemoved { .. } => &["type", "block_hashes", "medium"],
        WireEvent::AllBlocksCleared => &["type"],
    };
    let Value::Array(values) = event.to_value() else {
        return Value::Nil;
    };
    let mut pairs: Vec<(Value, Value)> = names
        .iter()
        .map(|n| Value::from(*n))
        .zip(values.iter().cloned())
        .collect();
    // `lora_name` (vLLM 0.9 on) has no default, so it is written, nil on
    // the base model.
    if matches!(event, WireEvent::BlockStored { .. }) {
        let name = values.get(names.len()).cloned().unwrap_or(Value::Nil);
        pairs.push((Value::from("lora_name"), name));
    }
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

    #[test]
    fn batch_layout_is_vllms() {
        let ev = [
            WireEvent::BlockStored {
                block_hashes: vec![u64::MAX, 32],
                parent_block_hash: None,
                token_ids: vec![1, 2, 3, 4],
                block_size: 2,
                lora: None,
            },
            WireEvent::BlockRemoved {
                block_hashes: vec![7],
            },
            WireEvent::AllBlocksCleared,
        ];
        let bytes = encode_batch(1.5, &ev, 0);
        let v = rmpv::decode::read_value(&mut &bytes[..]).expect("valid msgpack");
        let top = v.as_array().expect("array-like batch");
        assert_eq!(top.len(), 3);
        assert_eq!(top[0].as_f64(), Some(1.5));
        assert_eq!(top[2].as_u64(), Some(0));
        let events = top[1].as_array().expect("events");
        let stored = events[0].as_array().expect("tagged array");
        assert_eq!(stored[0].as_str(), Some("BlockStored"));
        assert_eq!(stored.len(), 7);
        assert_eq!(
            stored[1].as_array().map(|a| a[0].as_u64()),
            Some(Some(u64::MAX))
        );
        assert!(stored[2].is_nil());
        assert_eq!(stored[4].as_u64(), Some(2));
        assert!(stored[5].is_nil());
        assert_eq!(stored[6].as_str(), Some("GPU"));
        let removed = events[1].as_array().expect("tagged array");
        assert_eq!(removed[0].as_str(), Some("BlockRemoved"));
        assert_eq!(removed.len(), 3);
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
            WireEvent::BlockStored {
                block_hashes: vec![5, 6],
                parent_block_hash: Some(4),
                token_ids: vec![1, 2, 3, 4],
                block_size: 2,
                lora: None,
            },
            WireEvent::BlockRemoved {
                block_hashes: vec![7],
            },
            WireEvent::AllBlocksCleared,
        ];
        let bytes = encode_batch_as(2.5, &ev, 0, KvEventEncoding::Map);
        let v = rmpv::decode::read_value(&mut &bytes[..]).expect("valid msgpack");
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
                "lora_name"
            ]
        );
        let stored = events[0].as_map().expect("map");
        assert_eq!(stored[0].1.as_str(), Some("BlockStored"));
        assert_eq!(stored[2].1.as_u64(), Some(4));
        assert_eq!(stored[3].1.as_array().map(Vec::len), Some(4));
        assert!(stored[5].1.is_nil() && stored[7].1.is_nil());
        assert_eq!(stored[6].1.as_str(), Some("GPU"));
        assert_eq!(map_keys(&events[1]), ["type", "block_hashes", "medium"]);
        assert_eq!(map_keys(&events[2]), ["type"]);
        // The same events in the default form are unchanged.
        assert_eq!(
            encode_batch(2.5, &ev, 0),
            encode_batch_as(2.5, &ev, 0, KvEventEncoding::Array)
        );
        assert_ne!(encode_batch(2.5, &ev, 0), bytes);
    }

    /// An adapter's blocks carry `lora_id` and `lora_name` in both forms;
    /// the base model's layout is unchanged.
    #[test]
    fn adapter_blocks_carry_lora_id_and_name() {
        let ev = [WireEvent::BlockStored {
            block_hashes: vec![5],
            parent_block_hash: None,
            token_ids: vec![1, 2],
            block_size: 2,
            lora: Some((3, "sql".into())),
        }];
        let top = |b: Vec<u8>| rmpv::decode::read_value(&mut &b[..]).expect("msgpack");
        let v = top(encode_batch(1.0, &ev, 0));
        let stored = v[1][0].as_array().expect("tagged array").clone();
        assert_eq!(stored.len(), 8);
        assert_eq!(stored[5].as_u64(), Some(3));
        assert_eq!(stored[7].as_str(), Some("sql"));
        let v = top(encode_batch_as(1.0, &ev, 0, KvEventEncoding::Map));
        let m = v[1][0].as_map().expect("map").clone();
        assert_eq!(m.len(), 8);
        assert_eq!(
            (m[5].0.as_str(), m[5].1.as_u64()),
            (Some("lora_id"), Some(3))
        );
        assert_eq!(
            (m[7].0.as_str(), m[7].1.as_str()),
            (Some("lora_name"), Some("sql"))
        );
    }

    #[test]
    fn end_marker_is_minus_one() {
        assert_eq!(END_SEQ, [0xff; 8]);
    }
}
