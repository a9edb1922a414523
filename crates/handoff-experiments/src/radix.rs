//! The prefill worker's prefix cache at trace-block granularity.
//!
//! A stand-in for SGLang's `RadixCache` (`python/sglang/srt/mem_cache/
//! radix_cache.py`: `match_prefix`, `insert`, LRU `evict` of unlocked
//! leaves) that counts tokens instead of holding pages. Keys are chained
//! over the trace's 512-token content hashes, so a key names a whole prefix
//! and two prompts share a cached block exactly when they share everything
//! up to it. Only full blocks are cached (a partial block's content changes
//! as the conversation grows). Eviction takes the least recently used block
//! and, among blocks used together, the deepest first, so a cached prefix is
//! never left with a hole.

use handoff_core::fasthash::FastMap;
use handoff_core::request::mix64;
use handoff_core::Request;
use std::cmp::Reverse;
use std::collections::BTreeSet;

/// See the module docs.
#[derive(Clone, Debug)]
pub struct PrefixCache {
    capacity_blocks: u64,
    entries: FastMap<u64, (u64, u32)>,
    order: BTreeSet<(u64, Reverse<u32>, u64)>,
    tick: u64,
    keys: Vec<u64>,
}

/// Tokens of one cache block (the trace's hash block).
pub fn block_tokens(request: &Request) -> u64 {
    u64::from(request.hash_block_tokens.max(1))
}

impl PrefixCache {
    /// An empty cache of `capacity_tokens` (rounded down to 512-token
    /// blocks).
    pub fn new(capacity_tokens: u64) -> Self {
        PrefixCache {
            capacity_blocks: capacity_tokens / 512,
            entries: FastMap::default(),
            order: BTreeSet::new(),
            tick: 0,
            keys: Vec::new(),
        }
    }

    /// Cached tokens.
    pub fn cached_tokens(&self) -> u64 {
        self.entries.len() as u64 * 512
    }

    fn chain(&mut self, request: &Request) {
        self.keys.clear();
        let full = u64::from(request.prompt_tokens) / block_tokens(request);
        let mut key = 0x6b76_6300u64;
        for &h in request.prefix_hashes.iter().take(full as usize) {
            key = mix64(key.rotate_left(17) ^ h);
            self.keys.push(key);
        }
    }

    fn touch(&mut self, key: u64, depth: u32) {
        if let Some(old) = self.entries.insert(key, (self.tick, depth)) {
            self.order.remove(&(old.0, Reverse(old.1), key));
        }
        self.order.insert((self.tick, Reverse(depth), key));
    }

    /// Prompt tokens already cached (a leading run of blocks, capped so at
    /// least one token is computed), refreshing their recency.
    pub fn match_and_touch(&mut self, request: &Request) -> u64 {
        self.chain(request);
        self.tick += 1;
        let mut matched = 0u32;
        for i in 0..self.keys.len() {
            let key = self.keys[i];
            if !self.entries.contains_key(&key) {
                break;
            }
            self.touch(key, i as u32);
            matched += 1;
        }
        let tokens = u64::from(matched) * block_tokens(request);
        tokens.min(u64::from(request.prompt_tokens).saturating_sub(1))
    }

    /// Caches the prompt's full blocks, then evicts down to capacity.
    pub fn insert(&mut self, request: &Request) {
        self.chain(request);
        self.tick += 1;
        for i in 0..self.keys.len() {
            let key = self.keys[i];
            self.touch(key, i as u32);
        }
        self.evict_to(self.capacity_blocks);
    }

    /// Changes the capacity (the prefill worker's pool minus what in-flight
    /// prefills hold) and evicts down to it.
    pub fn set_capacity(&mut self, capacity_tokens: u64) {
        self.capacity_blocks = capacity_tokens / 512;
        self.evict_to(self.capacity_blocks);
    }

    fn evict_to(&mut self, blocks: u64) {
        while self.entries.len() as u64 > blocks {
            let Some(first) = self.order.pop_first() else {
                break;
            };
            self.entries.remove(&first.2);
        }
    }

    /// Drops everything (a restart).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.order.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_core::{Instant, RequestId};

    fn req(prompt: u32, hashes: &[u64]) -> Request {
        Request {
            id: RequestId(0),
            prompt_tokens: prompt,
            max_output_tokens: 1,
            prefix_hashes: hashes.to_vec(),
            hash_block_tokens: 512,
            session: None,
            arrival: Instant::ZERO,
        }
    }

    #[test]
    fn shared_prefix_hits_and_lru_evicts() {
        let mut c = PrefixCache::new(4 * 512);
        let a = req(2048, &[1, 2, 3, 4]);
        assert_eq!(c.match_and_touch(&a), 0);
        c.insert(&a);
        // Same first two blocks, different third: two blocks hit.
        let b = req(2048, &[1, 2, 9, 9]);
        assert_eq!(c.match_and_touch(&b), 1024);
        c.insert(&b);
        // Capacity 4: b's blocks are newer, a's tail went first.
        assert_eq!(c.cached_tokens(), 2048);
        assert_eq!(c.match_and_touch(&a), 1024);
        assert_eq!(c.match_and_touch(&b), 2047, "at least one token computes");
    }

    #[test]
    fn shrinking_evicts_deepest_first() {
        let mut c = PrefixCache::new(8 * 512);
        let a = req(4096, &[1, 2, 3, 4, 5, 6, 7, 8]);
        c.insert(&a);
        c.set_capacity(3 * 512);
        assert_eq!(c.match_and_touch(&a), 3 * 512);
        c.clear();
        assert_eq!(c.match_and_touch(&a), 0);
    }
}
