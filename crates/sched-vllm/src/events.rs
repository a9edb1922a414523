//! The worker's pending KV events, after vLLM's `BlockPool.kv_event_queue`
//! (`vllm/v1/core/block_pool.py`), drained by `take_events`.
//!
//! vLLM emits one `BlockRemoved` per evicted block. The evictions of one
//! allocation (one request growing by one or more blocks) are folded into one
//! `Removed` event instead: a router reads the same hashes, and a large
//! admission allocates one event rather than one per block. Folding never
//! crosses an allocation, so the stream does not depend on how often the
//! caller drains it or on how many passes one `step` call covered.

use handoff_core::{KvEvent, KvEventData, KvEventIds};

/// See the module docs.
#[derive(Clone, Debug, Default)]
pub(crate) struct EventQueue {
    ids: KvEventIds,
    pending: Vec<KvEvent>,
    /// The last pending `Removed` belongs to an earlier allocation.
    sealed: bool,
}

impl EventQueue {
    /// Queues `hashes` (a chained run) as newly valid cache after `parent`.
    pub(crate) fn stored(&mut self, parent: Option<u64>, hashes: Vec<u64>) {
        if hashes.is_empty() {
            return;
        }
        let event_id = self.ids.next_id();
        self.pending.push(KvEvent {
            event_id,
            data: KvEventData::Stored {
                parent_hash: parent,
                block_hashes: hashes,
            },
        });
    }

    /// Starts a new allocation: later evictions get their own event.
    pub(crate) fn seal(&mut self) {
        self.sealed = true;
    }

    /// Queues the eviction of `hash`.
    pub(crate) fn removed(&mut self, hash: u64) {
        if !self.sealed {
            if let Some(KvEvent {
                data: KvEventData::Removed { block_hashes },
                ..
            }) = self.pending.last_mut()
            {
                block_hashes.push(hash);
                return;
            }
        }
        self.sealed = false;
        let event_id = self.ids.next_id();
        self.pending.push(KvEvent {
            event_id,
            data: KvEventData::Removed {
                block_hashes: vec![hash],
            },
        });
    }

    /// Moves every pending event into `out`.
    pub(crate) fn drain_into(&mut self, out: &mut Vec<KvEvent>) {
        out.append(&mut self.pending);
    }

    /// Events not yet drained (snapshots and tests).
    #[cfg(test)]
    pub(crate) fn pending(&self) -> &[KvEvent] {
        &self.pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removals_fold_within_one_allocation_only() {
        let mut q = EventQueue::default();
        q.removed(1);
        q.removed(2);
        q.stored(None, vec![3]);
        q.stored(None, Vec::new());
        q.removed(4);
        q.seal();
        q.removed(6);
        let mut out = Vec::new();
        q.drain_into(&mut out);
        q.removed(5);
        q.drain_into(&mut out);
        let ids: Vec<u64> = out.iter().map(|e| e.event_id).collect();
        assert_eq!(ids, vec![0, 1, 2, 3, 4]);
        assert_eq!(
            out[0].data,
            KvEventData::Removed {
                block_hashes: vec![1, 2]
            }
        );
        assert_eq!(
            out[3].data,
            KvEventData::Removed {
                block_hashes: vec![6]
            }
        );
        assert_eq!(
            out[4].data,
            KvEventData::Removed {
                block_hashes: vec![5]
            }
        );
    }
}
