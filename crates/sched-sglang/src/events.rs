//! The KV event queue a router drains.
//!
//! SGLang publishes `BlockStored` when `RadixCache.insert` creates a node and
//! `BlockRemoved` when `RadixCache.evict` deletes one
//! (`srt/mem_cache/radix_cache.py`, `_record_store_event` /
//! `_record_remove_event`). Here the radix index holds exactly one node per
//! logical hash, so the index itself is the per-hash reference count: Stored
//! is queued only on the 0→1 transition (node created) and Removed only on
//! 1→0 (node evicted). A duplicate computation of a cached hash is freed, not
//! published again.

use handoff_core::{KvEvent, KvEventData, KvEventIds};

/// Pending events with monotonic ids.
#[derive(Debug, Default)]
pub(crate) struct KvEventQueue {
    ids: KvEventIds,
    pending: Vec<KvEvent>,
}

impl KvEventQueue {
    /// Queues a run of newly valid hashes chained after `parent`.
    pub(crate) fn stored(&mut self, parent_hash: Option<u64>, block_hashes: Vec<u64>) {
        if block_hashes.is_empty() {
            return;
        }
        let event_id = self.ids.next_id();
        self.pending.push(KvEvent {
            event_id,
            data: KvEventData::Stored {
                parent_hash,
                block_hashes,
            },
        });
    }

    /// Queues hashes that stopped being cached.
    pub(crate) fn removed(&mut self, block_hashes: Vec<u64>) {
        if block_hashes.is_empty() {
            return;
        }
        let event_id = self.ids.next_id();
        self.pending.push(KvEvent {
            event_id,
            data: KvEventData::Removed { block_hashes },
        });
    }

    /// Moves everything pending into `out`.
    pub(crate) fn drain_into(&mut self, out: &mut Vec<KvEvent>) {
        out.append(&mut self.pending);
    }

    /// Events not yet drained.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> &[KvEvent] {
        &self.pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_monotonic_and_empty_runs_are_dropped() {
        let mut q = KvEventQueue::default();
        q.stored(None, vec![]);
        q.stored(None, vec![1, 2]);
        q.removed(vec![]);
        q.removed(vec![2]);
        let mut out = Vec::new();
        q.drain_into(&mut out);
        assert_eq!(out.len(), 2);
        assert!(out[0].event_id < out[1].event_id);
        assert!(q.pending().is_empty());
    }
}
