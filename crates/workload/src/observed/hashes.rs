//! Prompt token ids to chained block ids, numbered the way a Mooncake trace
//! numbers its blocks.
//!
//! Mooncake's published traces (kvcache-ai/Mooncake `FAST25-release/traces/`,
//! the `hash_ids` field the crate's [`crate::TraceReader`] reads) give each
//! prompt block an integer id: a block's id stands for the block's tokens
//! *and every token before it* (a prefix hash), and the ids are renumbered
//! densely from 0 in the order blocks are first seen. [`BlockNumbering`]
//! builds exactly that from token ids:
//!
//! - block `i` of a prompt is tokens `[i·B, (i+1)·B)` for the block size
//!   `B`; the last, partial block is numbered too (it then matches only an
//!   equally partial block with the same tokens after the same prefix);
//! - a block's key is (its parent's id, its tokens), so two prompts share
//!   the ids of their equal leading blocks and differ from the first block
//!   whose tokens differ onwards;
//! - keys are compared exactly (no hash can collide), and a new key takes
//!   the next id.
//!
//! Memory is one key per distinct block: bounded by the tokens of the file
//! it numbers.

use std::collections::HashMap;

/// The parent id of a prompt's first block (no block has this id: ids count
/// from 0 and a file of at most `u64::MAX` blocks never reaches it).
const ROOT: u64 = u64::MAX;

/// Numbers the blocks of prompts given as token ids (module docs).
#[derive(Clone, Debug)]
pub struct BlockNumbering {
    block_size: usize,
    /// (parent id as two u32 words, then the block's tokens) -> id.
    known: HashMap<Box<[u32]>, u64>,
    /// The key being looked up, reused across blocks.
    key: Vec<u32>,
}

impl BlockNumbering {
    /// A numbering of blocks of `block_size` tokens (at least 1).
    pub fn new(block_size: u32) -> Self {
        BlockNumbering {
            block_size: block_size.max(1) as usize,
            known: HashMap::new(),
            key: Vec::new(),
        }
    }

    /// Distinct blocks numbered so far (the next id).
    pub fn blocks(&self) -> u64 {
        self.known.len() as u64
    }

    /// The ids of `tokens`' blocks, numbering blocks not seen before.
    pub fn number(&mut self, tokens: &[u32]) -> Vec<u64> {
        let mut ids = Vec::with_capacity(tokens.len().div_ceil(self.block_size));
        let mut parent = ROOT;
        for block in tokens.chunks(self.block_size) {
            self.key.clear();
            // Truncations keep the low and high words of the parent id.
            self.key.push(parent as u32);
            self.key.push((parent >> 32) as u32);
            self.key.extend_from_slice(block);
            let id = match self.known.get(self.key.as_slice()) {
                Some(&id) => id,
                None => {
                    let id = self.known.len() as u64;
                    self.known.insert(self.key.as_slice().into(), id);
                    id
                }
            };
            ids.push(id);
            parent = id;
        }
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_prefixes_share_ids_and_differ_from_the_first_differing_block() {
        let mut n = BlockNumbering::new(2);
        assert_eq!(n.number(&[1, 2, 3, 4, 5]), vec![0, 1, 2]);
        // Same first block, different second: ids differ from there on,
        // even though the third block's tokens are equal.
        assert_eq!(n.number(&[1, 2, 9, 9, 5]), vec![0, 3, 4]);
        // A full third block differs from the partial one.
        assert_eq!(n.number(&[1, 2, 3, 4, 5, 6]), vec![0, 1, 5]);
        // Equal tokens at another position are another block.
        assert_eq!(n.number(&[3, 4]), vec![6]);
        assert_eq!(n.number(&[]), Vec::<u64>::new());
        assert_eq!(n.blocks(), 7);
    }

    #[test]
    fn a_block_size_of_zero_counts_as_one() {
        let mut n = BlockNumbering::new(0);
        assert_eq!(n.number(&[7, 7]), vec![0, 1]);
    }
}
