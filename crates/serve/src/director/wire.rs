//! The vLLM wire view of each worker's published blocks: the token ids
//! behind each block hash, and the wire hash chain an external indexer
//! recomputes from `BlockStored.token_ids`.

use handoff_core::fasthash::FastMap;
use std::sync::Arc;

/// Token ids of blocks that may be published, by chained hash.
#[derive(Default)]
pub(super) struct BlockTokens {
    /// Blocks of prompts in flight, with how many flows hold each.
    pub(super) pending: FastMap<u64, (Arc<[u32]>, u32)>,
    /// Blocks each worker has published as stored.
    pub(super) stored: Vec<FastMap<u64, Arc<[u32]>>>,
}

impl BlockTokens {
    pub(super) fn lookup(&self, h: u64) -> Option<Arc<[u32]>> {
        if let Some((t, _)) = self.pending.get(&h) {
            return Some(t.clone());
        }
        self.stored.iter().find_map(|m| m.get(&h).cloned())
    }

    pub(super) fn release(&mut self, hashes: &[u64]) {
        for h in hashes {
            if let Some(e) = self.pending.get_mut(h) {
                e.1 -= 1;
                if e.1 == 0 {
                    self.pending.remove(h);
                }
            }
        }
    }
}

/// Stand-in token ids of a generated block the core published as `hash`
/// (output text is synthetic, so any fixed ids will do; these are a
/// function of the block alone, so a re-publication repeats them).
pub(super) fn generated_token_ids(hash: u64, block_size: u32) -> Arc<[u32]> {
    (0..u64::from(block_size))
        .map(|i| (handoff_core::request::mix64(hash ^ (i + 1)) as u32) & 0x7fff_ffff)
        .collect()
}

/// One worker's published blocks on vLLM's wire: each core hash's wire hash
/// and the chain state it was derived from, so every wire hash is
/// recomputable from `BlockStored.token_ids` by the rule `prompt` documents.
/// A prompt block's wire hash is the core's own (both chain the same token
/// ids); a generated block's is chained from its stand-in ids.
#[derive(Default)]
pub(super) struct WireChain {
    blocks: FastMap<u64, (u64, u64)>,
}

impl WireChain {
    /// The wire hash of core block `h` (itself when it was never stored).
    pub(super) fn wire(&self, h: u64) -> u64 {
        self.blocks.get(&h).map_or(h, |e| e.0)
    }

    /// The chain state after core block `h`, when it is stored.
    pub(super) fn chained(&self, h: u64) -> Option<u64> {
        self.blocks.get(&h).map(|e| e.1)
    }

    /// Records core block `h` of `tokens` after chain state `prev`; returns
    /// its wire hash and chain state.
    pub(super) fn store(&mut self, h: u64, tokens: &[u32], prev: Option<u64>) -> (u64, u64) {
        use handoff_core::request::mix64;
        let c = crate::prompt::block_content_hash(tokens);
        let chained = match prev {
            None => mix64(c ^ 0x5eed),
            Some(p) => mix64(p ^ c),
        };
        let wire = mix64(chained) & !(handoff_core::request::BLOCK_HASH_GROUP - 1);
        self.blocks.insert(h, (wire, chained));
        (wire, chained)
    }

    /// Forgets core block `h`; returns its wire hash.
    pub(super) fn remove(&mut self, h: u64) -> u64 {
        self.blocks.remove(&h).map_or(h, |e| e.0)
    }

    pub(super) fn clear(&mut self) {
        self.blocks.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::chained_block_hashes;

    #[test]
    fn prompt_blocks_keep_their_hash_and_generated_blocks_chain_from_their_ids() {
        let bs = 16u32;
        let prompt: Vec<u32> = (0..32).collect();
        let core = chained_block_hashes(&prompt, bs);
        let mut chain = WireChain::default();
        let (w0, c0) = chain.store(core[0], &prompt[..16], None);
        let (w1, c1) = chain.store(core[1], &prompt[16..], Some(c0));
        assert_eq!(
            (w0, w1),
            (core[0], core[1]),
            "a prompt block's wire hash is the core's"
        );
        // A generated block (the core's own stand-in hash) after the prompt:
        // its wire hash is the prompt's chain continued over its stand-in ids.
        let generated_core = 0xdead_beef_u64 << 5;
        let ids = generated_token_ids(generated_core, bs);
        let (wg, _) = chain.store(generated_core, &ids, Some(c1));
        let mut all = prompt.clone();
        all.extend_from_slice(&ids);
        assert_eq!(wg, chained_block_hashes(&all, bs)[2]);
        assert_eq!(chain.wire(generated_core), wg);
        assert_eq!(
            chain.remove(generated_core),
            wg,
            "Removed carries the wire hash"
        );
        assert_eq!(chain.wire(generated_core), generated_core, "forgotten");
    }
}
