//! The prefill worker: one compute lane served first come first served, a
//! KV pool shared by in-flight prefills and the radix prefix cache, and the
//! snapshot side table (seed 002 §2, "P worker").
//!
//! A prefill holds its whole prompt's KV from the moment it starts until the
//! handoff's source is released (SGLang `disaggregation/prefill.py`: the
//! sender's KV is freed when the transfer succeeds), then its blocks become
//! prefix cache. The cache gets whatever the held prefills leave of the pool
//! (a prompt's matched prefix is counted twice while it is held, a
//! conservative simplification).

use crate::radix::PrefixCache;
use crate::store::PrefillSnapshotStore;
use handoff_core::{Generation, HandoffId, HandoffIdGen, Request, WorkerId};
use std::collections::{BTreeMap, VecDeque};

/// See the module docs.
#[derive(Clone, Debug)]
pub struct PrefillWorker {
    /// This worker.
    pub id: WorkerId,
    /// Its incarnation; bumped by a restart.
    pub generation: Generation,
    /// Issues this incarnation's P→D handoff ids.
    pub ids: HandoffIdGen,
    pool_tokens: u64,
    held: BTreeMap<HandoffId, u64>,
    queue: VecDeque<(HandoffId, u64)>,
    busy: Option<HandoffId>,
    /// The prefix cache.
    pub cache: PrefixCache,
    /// The D→P snapshot side table.
    pub store: PrefillSnapshotStore,
}

impl PrefillWorker {
    /// An idle worker with a pool of `pool_tokens` and `store`.
    pub fn new(id: WorkerId, pool_tokens: u64, store: PrefillSnapshotStore) -> Self {
        PrefillWorker {
            id,
            generation: Generation(0),
            ids: HandoffIdGen::new(id, Generation(0)),
            pool_tokens,
            held: BTreeMap::new(),
            queue: VecDeque::new(),
            busy: None,
            cache: PrefixCache::new(pool_tokens),
            store,
        }
    }

    /// Pool size in tokens.
    pub fn pool_tokens(&self) -> u64 {
        self.pool_tokens
    }

    fn held_tokens(&self) -> u64 {
        self.held.values().sum()
    }

    /// Queues a prefill of `tokens` prompt tokens (FCFS).
    pub fn enqueue(&mut self, id: HandoffId, tokens: u64) {
        self.queue.push_back((id, tokens));
    }

    /// The queue head, if the lane is idle and the pool can hold it.
    pub fn startable(&self) -> Option<HandoffId> {
        if self.busy.is_some() {
            return None;
        }
        let &(id, tokens) = self.queue.front()?;
        (self.held_tokens() + tokens <= self.pool_tokens).then_some(id)
    }

    /// Starts the queue head: holds its KV, shrinks the cache around it and
    /// returns the tokens to compute after the prefix-cache hit.
    pub fn start(&mut self, id: HandoffId, request: &Request) -> u64 {
        if let Some(pos) = self.queue.iter().position(|q| q.0 == id) {
            self.queue.remove(pos);
        }
        let matched = self.cache.match_and_touch(request);
        self.held.insert(id, u64::from(request.prompt_tokens));
        self.busy = Some(id);
        self.cache
            .set_capacity(self.pool_tokens.saturating_sub(self.held_tokens()));
        u64::from(request.prompt_tokens) - matched
    }

    /// Whether `id` is the prefill computing now.
    pub fn is_computing(&self, id: HandoffId) -> bool {
        self.busy == Some(id)
    }

    /// The compute lane is free again.
    pub fn compute_done(&mut self, id: HandoffId) {
        if self.busy == Some(id) {
            self.busy = None;
        }
    }

    /// Ends `id`'s hold on the pool (source released or cancelled). With
    /// `cache_it`, its prompt becomes prefix cache. Whether it was known.
    pub fn release(&mut self, id: HandoffId, cache_it: Option<&Request>) -> bool {
        let queued = match self.queue.iter().position(|q| q.0 == id) {
            Some(pos) => {
                self.queue.remove(pos);
                true
            }
            None => false,
        };
        self.compute_done(id);
        let held = self.held.remove(&id).is_some();
        self.cache
            .set_capacity(self.pool_tokens.saturating_sub(self.held_tokens()));
        if held {
            if let Some(r) = cache_it {
                self.cache.insert(r);
            }
        }
        queued || held
    }

    /// Queued, computing and held prefills.
    pub fn in_flight(&self) -> (usize, bool, usize) {
        (self.queue.len(), self.busy.is_some(), self.held.len())
    }

    /// A restart: the cache, the queue and held prefills are gone (the
    /// store is cleared by the caller, which logs it); new ids.
    pub fn restart(&mut self) {
        self.held.clear();
        self.queue.clear();
        self.busy = None;
        self.cache.clear();
        self.generation = self.generation.next();
        self.ids = self.ids.restarted();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_core::{Instant, RequestId};

    fn req(prompt: u32) -> Request {
        Request {
            id: RequestId(0),
            prompt_tokens: prompt,
            max_output_tokens: 1,
            prefix_hashes: (0..u64::from(prompt).div_ceil(512)).collect(),
            hash_block_tokens: 512,
            session: None,
            arrival: Instant::ZERO,
        }
    }

    #[test]
    fn fcfs_with_pool_limit_and_cache_reuse() {
        let mut p = PrefillWorker::new(WorkerId(0), 4096, PrefillSnapshotStore::new(4, 0));
        let a = p.ids.next_id();
        let b = p.ids.next_id();
        p.enqueue(a, 3072);
        p.enqueue(b, 3072);
        assert_eq!(p.startable(), Some(a));
        assert_eq!(p.start(a, &req(3072)), 3072);
        assert_eq!(p.startable(), None, "lane busy");
        p.compute_done(a);
        assert_eq!(p.startable(), None, "a's KV still held: b does not fit");
        assert!(p.release(a, Some(&req(3072))));
        assert_eq!(p.startable(), Some(b));
        // Same content: all but one token comes from the cache.
        assert_eq!(p.start(b, &req(3072)), 1);
        assert!(p.release(b, None));
        assert!(!p.release(b, None));
        assert_eq!(p.in_flight(), (0, false, 0));
    }
}
