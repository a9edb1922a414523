//! The token ids behind each block hash a worker may publish: a prompt's
//! own, kept while a flow holds it and then per worker that stored it
//! (`BlockStored.token_ids` and Dynamo's `tokens_hash` come from them).

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dynamo_hash::generated_tokens;
    use crate::prompt::chained_block_hashes;

    /// A block's token ids come from the prompt that holds it, then from
    /// the worker that stored it; a block no prompt has is a generated one,
    /// whose stand-ins are a function of its hash alone.
    #[test]
    fn prompt_blocks_keep_their_ids_and_generated_blocks_get_stand_ins() {
        let bs = 16u32;
        let prompt: Vec<u32> = (0..32).collect();
        let hashes = chained_block_hashes(&prompt, bs);
        let mut b = BlockTokens {
            pending: FastMap::default(),
            stored: vec![FastMap::default()],
        };
        for (h, t) in hashes.iter().zip(prompt.chunks_exact(16)) {
            b.pending.insert(*h, (Arc::from(t), 1));
        }
        assert_eq!(b.lookup(hashes[1]).as_deref(), Some(&prompt[16..]));
        b.stored[0].insert(hashes[0], Arc::from(&prompt[..16]));
        b.release(&hashes);
        assert!(b.pending.is_empty());
        assert_eq!(b.lookup(hashes[0]).as_deref(), Some(&prompt[..16]));
        assert_eq!(b.lookup(hashes[1]), None);
        let g = 0xdead_beef_u64 << 5;
        assert_eq!(generated_tokens(g, bs), generated_tokens(g, bs));
        assert_eq!(generated_tokens(g, bs).len(), 16);
    }
}
