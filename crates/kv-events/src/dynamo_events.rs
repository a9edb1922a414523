//! KV events as Dynamo's router reads them: one `RouterEvent` JSON object
//! per line (ai-dynamo/dynamo `lib/llm/src/kv_router/protocols.rs`:
//! `RouterEvent { worker_id, event: KvCacheEvent { event_id, data, dp_rank } }`,
//! `KvCacheEventData` externally tagged in snake case: `stored` with
//! `parent_hash` and `blocks` of `{block_hash, tokens_hash}`, `removed`
//! with `block_hashes`, and the unit `cleared`).
//!
//! `block_hash` is the block's one identity, the hash the engine, the
//! router, the ZMQ stream and the transcript use. `tokens_hash` (Dynamo's
//! `LocalBlockHash`, what its radix tree matches prompts by) is Dynamo's
//! own hash of the block's token ids, [`crate::dynamo_hash::tokens_hash`]:
//! of the real ids for an HTTP prompt block, of the stand-in ids
//! [`crate::dynamo_hash`] documents otherwise; the caller supplies it.

use handoff_core::{KvEvent, KvEventData, WorkerWithDpRank};
use serde::Serialize;
use std::io::Write;

#[derive(Serialize)]
struct StoredBlock {
    block_hash: u64,
    tokens_hash: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum Data {
    Stored {
        parent_hash: Option<u64>,
        blocks: Vec<StoredBlock>,
    },
    Removed {
        block_hashes: Vec<u64>,
    },
    Cleared,
}

#[derive(Serialize)]
struct Event {
    event_id: u64,
    data: Data,
    dp_rank: u16,
}

#[derive(Serialize)]
struct RouterEvent {
    worker_id: u64,
    event: Event,
}

/// The `RouterEvent` JSON line (without the newline) of `ev` from rank
/// `at.dp_rank` of worker `at.worker` (each rank numbers its own events,
/// as Dynamo's indexer tracks them per `WorkerWithDpRank`);
/// `tokens_hash(h)` gives the `tokens_hash` of stored block `h`.
pub fn router_event_json(
    at: WorkerWithDpRank,
    ev: &KvEvent,
    mut tokens_hash: impl FnMut(u64) -> u64,
) -> String {
    let data = match &ev.data {
        KvEventData::Stored {
            parent_hash,
            block_hashes,
        } => Data::Stored {
            parent_hash: *parent_hash,
            blocks: block_hashes
                .iter()
                .map(|h| StoredBlock {
                    block_hash: *h,
                    tokens_hash: tokens_hash(*h),
                })
                .collect(),
        },
        KvEventData::Removed { block_hashes } => Data::Removed {
            block_hashes: block_hashes.clone(),
        },
        KvEventData::Cleared => Data::Cleared,
    };
    let e = RouterEvent {
        worker_id: u64::from(at.worker.0),
        event: Event {
            event_id: ev.event_id,
            data,
            dp_rank: at.dp_rank.0,
        },
    };
    // Plain structs of numbers serialise infallibly.
    serde_json::to_string(&e).unwrap_or_default()
}

/// Writes `RouterEvent` lines to a file (`--kv-events-out`); the first
/// write error is kept and stops further writes.
pub struct RouterEventWriter {
    out: Box<dyn Write + Send>,
    error: Option<std::io::Error>,
    /// Lines written.
    pub lines: u64,
}

impl RouterEventWriter {
    /// A writer into `out`.
    pub fn new(out: Box<dyn Write + Send>) -> Self {
        RouterEventWriter {
            out,
            error: None,
            lines: 0,
        }
    }

    /// Writes `ev` of rank `at` as one line.
    pub fn write(
        &mut self,
        at: WorkerWithDpRank,
        ev: &KvEvent,
        tokens_hash: impl FnMut(u64) -> u64,
    ) {
        if self.error.is_some() {
            return;
        }
        let line = router_event_json(at, ev, tokens_hash);
        match writeln!(self.out, "{line}") {
            Ok(()) => self.lines += 1,
            Err(e) => self.error = Some(e),
        }
    }

    /// Flushes, returning the first error met.
    pub fn finish(mut self) -> std::io::Result<u64> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.flush()?;
        Ok(self.lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_dynamos() {
        let stored = KvEvent {
            event_id: 3,
            data: KvEventData::Stored {
                parent_hash: Some(1),
                block_hashes: vec![32, 64],
            },
        };
        let line = router_event_json(at(2, 0), &stored, |h| h + 1);
        let v: serde_json::Value = serde_json::from_str(&line).expect("json");
        assert_eq!(v["worker_id"], 2);
        assert_eq!(v["event"]["event_id"], 3);
        assert_eq!(v["event"]["dp_rank"], 0);
        let s = &v["event"]["data"]["stored"];
        assert_eq!(s["parent_hash"], 1);
        assert_eq!(s["blocks"][0]["block_hash"], 32);
        assert_eq!(s["blocks"][0]["tokens_hash"], 33);
        assert_eq!(s["blocks"][1]["tokens_hash"], 65);
        let removed = KvEvent {
            event_id: 4,
            data: KvEventData::Removed {
                block_hashes: vec![32],
            },
        };
        let v: serde_json::Value =
            serde_json::from_str(&router_event_json(at(0, 0), &removed, |h| h)).expect("json");
        assert_eq!(v["event"]["data"]["removed"]["block_hashes"][0], 32);
        let cleared = KvEvent {
            event_id: 5,
            data: KvEventData::Cleared,
        };
        let v: serde_json::Value =
            serde_json::from_str(&router_event_json(at(0, 0), &cleared, |h| h)).expect("json");
        assert_eq!(v["event"]["data"], "cleared");
    }

    fn at(w: u32, r: u16) -> WorkerWithDpRank {
        WorkerWithDpRank {
            worker: handoff_core::WorkerId(w),
            dp_rank: handoff_core::DpRank(r),
        }
    }

    #[test]
    fn a_rank_is_the_events_dp_rank_and_its_worker_the_worker_id() {
        let cleared = KvEvent {
            event_id: 9,
            data: KvEventData::Cleared,
        };
        let v: serde_json::Value =
            serde_json::from_str(&router_event_json(at(3, 1), &cleared, |h| h)).expect("json");
        assert_eq!(v["worker_id"], 3);
        assert_eq!(v["event"]["dp_rank"], 1);
        assert_eq!(v["event"]["event_id"], 9);
    }
}
