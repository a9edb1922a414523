//! Turning a tokenised HTTP prompt into the engine's [`Request`], and the
//! block hashes its KV events will carry.
//!
//! A [`Request`] names its prompt's content by `prefix_hashes`, one per
//! `hash_block_tokens`-token chunk. For an HTTP prompt the chunk is one KV
//! block (`block_size` tokens) and its content hash is [`block_content_hash`]
//! of the block's token ids. The core then chains them
//! ([`Request::block_hashes`]): block `i`'s published hash is
//! `mix64(c_i) & !31` with `c_0 = mix64(h_0 ^ 0x5eed)` and
//! `c_i = mix64(c_{i-1} ^ h_i)`, `h_i` the content hash of block `i` and
//! `mix64` splitmix64's finaliser. An external indexer that sees a prompt
//! block's token ids (vLLM's `BlockStored.token_ids`) can therefore
//! recompute its hash; `tests/python/` does. (A generated block keeps the
//! core's own hash and carries stand-in ids derived from it,
//! `handoff_kv_events::dynamo_hash`.) Only full blocks are hashed, as in vLLM.

use handoff_core::request::mix64;
use handoff_core::{Instant, Request, RequestId};

/// The content hash of one block's token ids: FNV-1a 64 over the ids'
/// little-endian `u32` bytes.
pub fn block_content_hash(tokens: &[u32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for t in tokens {
        for b in t.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The chained hash of each full block of `tokens`, as the cores publish
/// them (see the module docs); equal to [`Request::block_hashes`] of the
/// request [`request_for`] builds.
pub fn chained_block_hashes(tokens: &[u32], block_size: u32) -> Vec<u64> {
    chained_block_hashes_salted(tokens, block_size, 0)
}

/// The chained hash of each full block of `tokens` (see the module docs)
/// for a request whose chain starts from
/// `salt` ([`Request::lora_salt`]: its LoRA adapter's, 0 on the base
/// model): `c_0 = mix64(h_0 ^ 0x5eed ^ salt)`.
pub fn chained_block_hashes_salted(tokens: &[u32], block_size: u32, salt: u64) -> Vec<u64> {
    let bs = block_size.max(1) as usize;
    let mut out = Vec::with_capacity(tokens.len() / bs);
    let mut chained = 0u64;
    for (i, block) in tokens.chunks_exact(bs).enumerate() {
        let h = block_content_hash(block);
        chained = if i == 0 {
            mix64(h ^ 0x5eed ^ salt)
        } else {
            mix64(chained ^ h)
        };
        out.push(mix64(chained) & !(handoff_core::request::BLOCK_HASH_GROUP - 1));
    }
    out
}

/// The engine's request for a prompt of `tokens` that will generate
/// `output_tokens`, arriving at `arrival`.
pub fn request_for(
    id: RequestId,
    tokens: &[u32],
    output_tokens: u32,
    block_size: u32,
    arrival: Instant,
) -> Request {
    let bs = block_size.max(1) as usize;
    Request {
        id,
        prompt_tokens: u32::try_from(tokens.len()).unwrap_or(u32::MAX),
        max_output_tokens: output_tokens,
        prefix_hashes: tokens.chunks_exact(bs).map(block_content_hash).collect(),
        hash_block_tokens: block_size.max(1),
        session: None,
        arrival,
        lora: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chained_hashes_are_the_cores() {
        let tokens: Vec<u32> = (0..100).map(|i| 300 + i * 7).collect();
        for bs in [1u32, 16, 32] {
            let r = request_for(RequestId(9), &tokens, 4, bs, Instant::ZERO);
            let mut core = Vec::new();
            r.block_hashes(bs, &mut core);
            assert_eq!(core, chained_block_hashes(&tokens, bs), "block size {bs}");
            assert_eq!(core.len(), 100 / bs as usize);
        }
    }

    /// An adapter's request hashes as the core hashes it, apart from the
    /// base model's.
    #[test]
    fn adapter_chains_are_the_cores_and_apart_from_the_base() {
        let tokens: Vec<u32> = (0..64).collect();
        let mut r = request_for(RequestId(1), &tokens, 4, 16, Instant::ZERO);
        let base = chained_block_hashes(&tokens, 16);
        r.lora = Some(handoff_core::LoraAdapter {
            id: 1,
            name: "sql".into(),
        });
        let mut core = Vec::new();
        r.block_hashes(16, &mut core);
        assert_eq!(
            core,
            chained_block_hashes_salted(&tokens, 16, r.lora_salt())
        );
        assert!(core.iter().all(|h| !base.contains(h)));
    }

    #[test]
    fn shared_prefix_shares_hashes_then_diverges() {
        let a: Vec<u32> = (0..64).collect();
        let mut b = a.clone();
        b[40] = 9999;
        let (ha, hb) = (chained_block_hashes(&a, 16), chained_block_hashes(&b, 16));
        assert_eq!(ha[..2], hb[..2]);
        assert_ne!(ha[2], hb[2]);
        // A divergence changes every later hash (chaining).
        assert_ne!(ha[3], hb[3]);
    }
}
