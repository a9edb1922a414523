//! Dynamo's block token hash and the stand-in token ids of blocks whose
//! real tokens the mocker never sees.
//!
//! Dynamo's router matches a prompt against its radix tree by each block's
//! `tokens_hash` (`LocalBlockHash`): `compute_block_hash_for_seq` in
//! ai-dynamo/dynamo `lib/kv-router/src/protocols.rs` hashes every full
//! `kv_block_size`-token window of the token ids, as little-endian `u32`
//! bytes, with XXH3-64 seeded by `compute_salt_hash(None, None)`
//! (`lib/kv-hashing/src/salt.rs`), which is `CHAIN_XXH3_SEED` = 1337 when
//! there is no LoRA and no cache salt. [`tokens_hash`] is that function for
//! one block.
//!
//! Token ids, where the mocker has none:
//!
//! - a trace prompt (Mooncake `hash_ids`) names its content only by one hash
//!   id per `hash_block_tokens`-token chunk. Token `p` of the prompt is
//!   [`stand_in_token`]`(x, p % hash_block_tokens)` with `x` the content of
//!   chunk `p / hash_block_tokens` ([`Request::chunk_content`]: the trace's
//!   hash id, or `mix64(request_id ^ 0xdead_beef) ^ chunk` past the known
//!   ones). Equal hash ids give equal tokens, so equal prefixes give equal
//!   `tokens_hash` chains, and a router can rebuild any request's tokens
//!   from the trace alone;
//! - a generated block (vLLM caches those too; the output text is
//!   synthetic) published under hash `H` has token `i` =
//!   [`stand_in_token`]`(H, i)`, a function of the block alone, so a
//!   re-publication repeats them.

use handoff_core::request::mix64;
use handoff_core::Request;
use std::collections::BTreeMap;

/// `CHAIN_XXH3_SEED`: the XXH3 seed of Dynamo's block hash without a LoRA
/// name or cache salt.
pub const DYNAMO_XXH3_SEED: u64 = 1337;

/// Dynamo's `tokens_hash` of one block: XXH3-64 with seed 1337 of the token
/// ids' little-endian `u32` bytes.
pub fn tokens_hash(tokens: &[u32]) -> u64 {
    let mut bytes = Vec::with_capacity(tokens.len() * 4);
    for t in tokens {
        bytes.extend_from_slice(&t.to_le_bytes());
    }
    xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, DYNAMO_XXH3_SEED)
}

/// Stand-in token `i` of content `x`: the low 31 bits of
/// `mix64(mix64(x) ^ i)` (`mix64` is splitmix64's finaliser,
/// [`handoff_core::request::mix64`]). 31 bits keep the ids positive in any
/// signed reader; distinct `(x, i)` collide only by chance.
pub fn stand_in_token(x: u64, i: u64) -> u32 {
    (mix64(mix64(x) ^ i) & 0x7fff_ffff) as u32
}

/// The stand-in token ids of a generated block published as `hash`.
pub fn generated_tokens(hash: u64, block_size: u32) -> Vec<u32> {
    (0..u64::from(block_size.max(1)))
        .map(|i| stand_in_token(hash, i))
        .collect()
}

/// The stand-in token ids of prompt positions `from..to` of `r` (see the
/// module docs).
pub fn prompt_tokens(r: &Request, from: u64, to: u64) -> Vec<u32> {
    let hbt = u64::from(r.hash_block_tokens.max(1));
    (from..to)
        .map(|p| stand_in_token(r.chunk_content(p / hbt), p % hbt))
        .collect()
}

/// Consecutive block hashes of one prompt, from `first_pos`.
#[derive(Debug)]
struct Run {
    /// Blocks in the run.
    len: u64,
    /// Token position of the run's first token.
    first_pos: u64,
    block_size: u64,
    hash_block_tokens: u64,
    /// First chunk the run touches.
    lo_chunk: u64,
    /// Content of chunks `lo_chunk..`, as far as the run reaches.
    contents: Box<[u64]>,
}

/// The stand-in tokens of every prompt block a replay may publish, found by
/// block hash: the trace requests' blocks as the cores hash them
/// ([`Request::block_hashes`]), kept as runs of consecutive hash values
/// (a trace chunk's blocks are consecutive), so the index grows with the
/// trace's distinct chunks, not its tokens. A hash no prompt gave is a
/// generated block.
#[derive(Debug, Default)]
pub struct TraceBlocks {
    block_sizes: Vec<u32>,
    runs: BTreeMap<u64, Run>,
    scratch: Vec<u64>,
}

impl TraceBlocks {
    /// An index for workers publishing `block_size`-token blocks (one entry
    /// per distinct size in the deployment).
    pub fn new(mut block_sizes: Vec<u32>) -> Self {
        block_sizes.iter_mut().for_each(|b| *b = (*b).max(1));
        block_sizes.sort_unstable();
        block_sizes.dedup();
        TraceBlocks {
            block_sizes,
            ..TraceBlocks::default()
        }
    }

    /// Adds `r`'s prompt blocks. A run already known is kept, or replaced
    /// by a longer one of the same start (a later request covering more of
    /// the same chunk).
    pub fn register(&mut self, r: &Request) {
        let hbt = u64::from(r.hash_block_tokens.max(1));
        for bs in self.block_sizes.clone() {
            r.block_hashes(bs, &mut self.scratch);
            let bs = u64::from(bs);
            let mut i = 0usize;
            while i < self.scratch.len() {
                let start = self.scratch[i];
                let mut end = i + 1;
                while end < self.scratch.len()
                    && self.scratch[end] == self.scratch[end - 1].wrapping_add(1)
                {
                    end += 1;
                }
                let len = (end - i) as u64;
                if self.runs.get(&start).is_none_or(|run| run.len < len) {
                    let first_pos = i as u64 * bs;
                    let (lo, hi) = (first_pos / hbt, (end as u64 * bs - 1) / hbt);
                    let run = Run {
                        len,
                        first_pos,
                        block_size: bs,
                        hash_block_tokens: hbt,
                        lo_chunk: lo,
                        contents: (lo..=hi).map(|c| r.chunk_content(c)).collect(),
                    };
                    self.runs.insert(start, run);
                }
                i = end;
            }
        }
    }

    /// The stand-in tokens of the prompt block published as `hash`, if a
    /// registered prompt has it.
    pub fn tokens(&self, hash: u64) -> Option<Vec<u32>> {
        let (&start, run) = self.runs.range(..=hash).next_back()?;
        let k = hash - start;
        if k >= run.len {
            return None;
        }
        let from = run.first_pos + k * run.block_size;
        let hbt = run.hash_block_tokens;
        (from..from + run.block_size)
            .map(|p| {
                let x = run.contents.get((p / hbt - run.lo_chunk) as usize)?;
                Some(stand_in_token(*x, p % hbt))
            })
            .collect()
    }

    /// Dynamo's `tokens_hash` of the block published as `hash`: of its
    /// prompt's stand-in tokens, else of a generated block's.
    pub fn tokens_hash(&self, hash: u64, block_size: u32) -> u64 {
        match self.tokens(hash) {
            Some(t) => tokens_hash(&t),
            None => tokens_hash(&generated_tokens(hash, block_size)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_core::{Instant, RequestId};

    fn req(id: u64, prompt: u32, hashes: &[u64]) -> Request {
        Request {
            id: RequestId(id),
            prompt_tokens: prompt,
            max_output_tokens: 1,
            prefix_hashes: hashes.to_vec(),
            hash_block_tokens: 512,
            session: None,
            arrival: Instant::ZERO,
            lora: None,
        }
    }

    /// The hash is XXH3-64 with seed 1337 over the ids' little-endian bytes
    /// (`checks/dynamo-kv` compares it with Dynamo's own function).
    #[test]
    fn tokens_hash_is_xxh3_seed_1337_of_le_bytes() {
        let t = [1u32, 2, 0xdead_beef];
        let mut bytes = Vec::new();
        for x in t {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        assert_eq!(
            tokens_hash(&t),
            xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, 1337)
        );
        assert_ne!(tokens_hash(&t), xxhash_rust::xxh3::xxh3_64(&bytes));
        assert_ne!(tokens_hash(&[1, 2]), tokens_hash(&[2, 1]));
    }

    #[test]
    fn every_prompt_block_maps_to_its_positions_tokens() {
        for bs in [1u32, 16, 24, 512, 700] {
            let a = req(1, 1800, &[7, 8, 9]);
            let b = req(2, 1300, &[7, 8]);
            let mut idx = TraceBlocks::new(vec![bs]);
            idx.register(&b);
            idx.register(&a);
            for r in [&a, &b] {
                let mut h = Vec::new();
                r.block_hashes(bs, &mut h);
                for (i, hash) in h.iter().enumerate() {
                    let from = i as u64 * u64::from(bs);
                    let want = prompt_tokens(r, from, from + u64::from(bs));
                    assert_eq!(idx.tokens(*hash), Some(want), "bs {bs} block {i}");
                }
            }
            assert_eq!(idx.tokens(0x1234_5678_9abc_def0), None);
        }
    }

    #[test]
    fn equal_hash_ids_give_equal_tokens_and_unknown_tails_differ() {
        let (a, b) = (req(1, 1024, &[7, 8]), req(2, 1024, &[9, 8]));
        assert_eq!(prompt_tokens(&a, 512, 1024), prompt_tokens(&b, 512, 1024));
        assert_ne!(prompt_tokens(&a, 0, 512), prompt_tokens(&b, 0, 512));
        let (c, d) = (req(3, 1024, &[7]), req(4, 1024, &[7]));
        assert_eq!(prompt_tokens(&c, 0, 512), prompt_tokens(&d, 0, 512));
        assert_ne!(prompt_tokens(&c, 512, 1024), prompt_tokens(&d, 512, 1024));
    }

    #[test]
    fn generated_blocks_fall_back_to_their_own_stand_ins() {
        let idx = TraceBlocks::new(vec![16]);
        let h = 0xfeed_u64 << 20;
        assert_eq!(
            idx.tokens_hash(h, 16),
            tokens_hash(&generated_tokens(h, 16))
        );
        assert_eq!(generated_tokens(h, 16)[3], stand_in_token(h, 3));
    }
}
