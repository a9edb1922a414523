//! What a worker reports about its KV memory: a capacity snapshot for load
//! balancers and KV events for prefix-aware routers.

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

/// Physical KV occupancy and admission quantities of one worker.
///
/// The three physical categories are mutually exclusive: a block moves from
/// active to pinned when a prefill completes into a handoff, and from reserved
/// to active when a destination activates; it is never counted twice. Request
/// slots and decode headroom are admission quantities and never physical
/// blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct KvCapacitySnapshot {
    /// All blocks in the pool.
    pub total_blocks: u64,
    /// Blocks referenced by running or waiting-with-KV requests.
    pub active_blocks: u64,
    /// Blocks held by completed prefills waiting for their reader.
    pub pinned_source_blocks: u64,
    /// Blocks allocated for incoming KV that is not yet valid.
    pub reserved_destination_blocks: u64,
    /// Unreferenced blocks that still hold reusable prefix cache (evictable,
    /// therefore free for admission).
    pub cached_blocks: u64,
    /// Request slots in the pool (SGLang's req_to_token pool, vLLM's
    /// `max_num_seqs`).
    pub total_request_slots: u64,
    /// Request slots not taken by a running request or a reservation.
    pub free_request_slots: u64,
    /// Decode headroom promised to reserved and running requests (SGLang's
    /// `num_reserved_decode_tokens`); zero for backends without it.
    pub decode_headroom_tokens: u64,
    /// Requests in the running batch.
    pub running_requests: u64,
    /// Requests queued for admission.
    pub waiting_requests: u64,
}

impl KvCapacitySnapshot {
    /// Physically unavailable blocks, as a router must see them.
    pub fn kv_used_blocks(&self) -> u64 {
        self.active_blocks + self.pinned_source_blocks + self.reserved_destination_blocks
    }

    /// Blocks neither used nor cached.
    pub fn free_blocks(&self) -> u64 {
        self.total_blocks
            .saturating_sub(self.kv_used_blocks())
            .saturating_sub(self.cached_blocks)
    }

    /// `kv_used_blocks / total_blocks`, zero for an empty pool.
    pub fn usage(&self) -> f64 {
        if self.total_blocks == 0 {
            0.0
        } else {
            self.kv_used_blocks() as f64 / self.total_blocks as f64
        }
    }
}

/// A KV cache event, shaped like Dynamo's `KvCacheEvent`: a monotonic id and
/// its data. Block hashes are the engine's chained block hashes, so a router
/// can rebuild the prefix tree from a stream of these.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct KvEvent {
    /// Strictly increasing per worker.
    pub event_id: u64,
    /// What happened.
    pub data: KvEventData,
}

/// The body of a [`KvEvent`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub enum KvEventData {
    /// Blocks became valid, reusable cache, chained after `parent_hash`.
    Stored {
        /// The block these extend, `None` at the root.
        parent_hash: Option<u64>,
        /// Chained hashes, in prefix order.
        #[cfg_attr(
            feature = "serde",
            serde(deserialize_with = "crate::serde_vec::deserialize")
        )]
        block_hashes: Vec<u64>,
    },
    /// Cached blocks were evicted.
    Removed {
        /// Hashes no longer cached.
        #[cfg_attr(
            feature = "serde",
            serde(deserialize_with = "crate::serde_vec::deserialize")
        )]
        block_hashes: Vec<u64>,
    },
    /// The whole cache was dropped (restart).
    Cleared,
}

/// Hands out monotonic KV event ids; one per worker.
#[derive(Clone, Debug, Default)]
pub(crate) struct KvEventIds(u64);

impl KvEventIds {
    /// The next id.
    pub fn next_id(&mut self) -> u64 {
        let id = self.0;
        self.0 += 1;
        id
    }
}

/// A worker's pending KV events with monotonic ids, shared by the backend
/// cores.
///
/// Evictions can be reported in batches ([`KvEventQueue::removed`]) or one
/// block at a time ([`KvEventQueue::removed_one`]); single evictions fold
/// into the trailing `Removed` event until [`KvEventQueue::seal`] marks the
/// end of an allocation, so the stream never depends on how often the caller
/// drains it.
#[derive(Clone, Debug, Default)]
pub struct KvEventQueue {
    ids: KvEventIds,
    pending: Vec<KvEvent>,
    /// The trailing pending `Removed` must not grow any more.
    sealed: bool,
    /// Evictions the current allocation may cause (see [`Self::seal_for`]).
    expected_removals: usize,
    spares: SpareHashes,
}

/// Emptied hash buffers of consumed events ([`KvEventQueue::give_back`]),
/// for the next events: a decode that fills a block every few passes
/// publishes an event per fill, and each would otherwise allocate its
/// buffer and the consumer free it. Only capacity: two queues that differ in
/// their spares are the same queue, so `Debug` shows none of it (test
/// fingerprints compare cores reached with and without recycling).
#[derive(Clone, Default)]
struct SpareHashes(Vec<Vec<u64>>);

impl std::fmt::Debug for SpareHashes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SpareHashes")
    }
}

/// Spare buffers a queue keeps: events are consumed soon after they are
/// made, so a few cover the ones in flight.
const SPARE_HASH_BUFFERS: usize = 16;

impl KvEventQueue {
    /// A buffer for an event's hashes with room for `cap`: a spare if one
    /// is kept, else a new one.
    pub fn buffer(&mut self, cap: usize) -> Vec<u64> {
        match self.spares.0.pop() {
            Some(mut v) => {
                v.reserve(cap);
                v
            }
            None => Vec::with_capacity(cap),
        }
    }

    /// Takes back the hash buffer of a consumed event (its contents are
    /// dropped), for [`Self::buffer`] to hand out again.
    pub fn give_back(&mut self, hashes: Vec<u64>) {
        crate::spares::keep_spare(hashes, &mut self.spares.0, SPARE_HASH_BUFFERS);
    }

    /// Blocks became valid cache after `parent_hash`; nothing for an empty run.
    pub fn stored(&mut self, parent_hash: Option<u64>, block_hashes: Vec<u64>) {
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

    /// Cached blocks were evicted, as one event of their own.
    pub fn removed(&mut self, block_hashes: Vec<u64>) {
        if block_hashes.is_empty() {
            return;
        }
        let event_id = self.ids.next_id();
        self.pending.push(KvEvent {
            event_id,
            data: KvEventData::Removed { block_hashes },
        });
        self.sealed = true;
    }

    /// One cached block was evicted: folded into the trailing `Removed` of
    /// the same allocation, else a new event.
    pub fn removed_one(&mut self, hash: u64) {
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
        // Evictions come a block at a time but many per allocation: size
        // the event once.
        let mut block_hashes = self.buffer(self.expected_removals.max(1));
        block_hashes.push(hash);
        self.pending.push(KvEvent {
            event_id,
            data: KvEventData::Removed { block_hashes },
        });
    }

    /// [`Self::removed_one`] of each of `hashes` in order, in one step: the
    /// same event (folded into the allocation's trailing `Removed`, else a
    /// new one), grown once.
    pub fn removed_run(&mut self, hashes: &[u64]) {
        let Some((&first, rest)) = hashes.split_first() else {
            return;
        };
        self.removed_one(first);
        if let Some(KvEvent {
            data: KvEventData::Removed { block_hashes },
            ..
        }) = self.pending.last_mut()
        {
            block_hashes.extend_from_slice(rest);
        }
    }

    /// Ends the current allocation: later single evictions start a new event.
    pub fn seal(&mut self) {
        self.sealed = true;
        self.expected_removals = 0;
    }

    /// [`Self::seal`], then starts an allocation of up to `blocks` blocks, so
    /// its `Removed` event is allocated once at that size.
    pub fn seal_for(&mut self, blocks: usize) {
        self.seal();
        self.expected_removals = blocks;
    }

    /// Moves the pending events into `out`.
    pub fn drain_into(&mut self, out: &mut Vec<KvEvent>) {
        out.append(&mut self.pending);
    }

    /// The pending events.
    pub fn pending(&self) -> &[KvEvent] {
        &self.pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_removals_is_the_same_as_one_at_a_time() {
        let script: &[&[u64]] = &[&[], &[1, 2], &[3], &[], &[4, 5, 6]];
        for seal_between in [false, true] {
            let (mut one, mut run) = (KvEventQueue::default(), KvEventQueue::default());
            for (i, hashes) in script.iter().enumerate() {
                if seal_between && i % 2 == 1 {
                    one.seal_for(3);
                    run.seal_for(3);
                }
                if i == 3 {
                    one.stored(None, vec![9]);
                    run.stored(None, vec![9]);
                }
                for &h in *hashes {
                    one.removed_one(h);
                }
                run.removed_run(hashes);
            }
            assert_eq!(one.pending(), run.pending(), "seal between: {seal_between}");
        }
    }

    #[test]
    fn given_back_buffers_come_back_empty_and_few_are_kept() {
        let mut q = KvEventQueue::default();
        for _ in 0..SPARE_HASH_BUFFERS + 4 {
            q.give_back(vec![7, 8, 9]);
        }
        q.give_back(Vec::new());
        assert_eq!(
            q.spares.0.len(),
            SPARE_HASH_BUFFERS,
            "bounded, no empty ones"
        );
        let b = q.buffer(10);
        assert!(b.is_empty() && b.capacity() >= 10);
        q.removed_one(5);
        let mut out = Vec::new();
        q.drain_into(&mut out);
        assert_eq!(
            out[0].data,
            KvEventData::Removed {
                block_hashes: vec![5]
            }
        );
    }

    #[test]
    fn single_removals_fold_within_one_allocation_only() {
        let mut q = KvEventQueue::default();
        q.removed_one(1);
        q.removed_one(2);
        q.stored(None, vec![3]);
        q.stored(None, Vec::new());
        q.removed_one(4);
        q.seal();
        q.removed_one(6);
        let mut out = Vec::new();
        q.drain_into(&mut out);
        q.removed_one(5);
        q.removed(vec![]);
        q.removed(vec![7]);
        q.drain_into(&mut out);
        let ids: Vec<u64> = out.iter().map(|e| e.event_id).collect();
        assert_eq!(ids, vec![0, 1, 2, 3, 4, 5]);
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
        assert_eq!(
            out[5].data,
            KvEventData::Removed {
                block_hashes: vec![7]
            }
        );
    }

    #[test]
    fn used_is_sum_of_exclusive_categories() {
        let s = KvCapacitySnapshot {
            total_blocks: 100,
            active_blocks: 10,
            pinned_source_blocks: 5,
            reserved_destination_blocks: 7,
            cached_blocks: 3,
            decode_headroom_tokens: 512,
            ..Default::default()
        };
        assert_eq!(s.kv_used_blocks(), 22);
        assert_eq!(s.free_blocks(), 75);
    }
}
