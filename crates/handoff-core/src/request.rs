//! The request a scheduler core admits, and how its prompt maps to KV blocks.

use crate::ids::{RequestId, SessionId};
use crate::time::Instant;

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

/// Tokens covered by one trace hash id (Mooncake traces use 512).
pub const TRACE_HASH_BLOCK_TOKENS: u32 = 512;

/// How many consecutive block hashes [`Request::block_hashes`] aligns a
/// trace chunk's blocks to: the group size of the block-hash tables
/// (`handoff-hashtable`'s `GROUP_KEYS`, which a test there holds equal), so
/// a 32-block chunk fills one group. Changing it changes every hash.
pub const BLOCK_HASH_GROUP: u64 = 32;

/// One inference request as an engine sees it.
///
/// The prompt's content is known only through `prefix_hashes`: one content
/// hash per `hash_block_tokens`-token chunk, where equal leading hashes mean a
/// shared prefix. Engines expand these to their own block size with
/// [`Request::block_hashes`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Deserialize))]
pub struct Request {
    /// Unique id within the run.
    pub id: RequestId,
    /// Prompt length in tokens.
    pub prompt_tokens: u32,
    /// Output tokens to generate (the trace's output length).
    pub max_output_tokens: u32,
    /// Content hash of each `hash_block_tokens`-token prompt chunk.
    #[cfg_attr(
        feature = "serde",
        serde(deserialize_with = "crate::serde_vec::deserialize")
    )]
    pub prefix_hashes: Vec<u64>,
    /// Tokens each entry of `prefix_hashes` covers.
    pub hash_block_tokens: u32,
    /// The session this request is a turn of, if any.
    pub session: Option<SessionId>,
    /// When the client sent it.
    pub arrival: Instant,
    /// The LoRA adapter it runs on; `None` runs on the base model. Its
    /// blocks hash apart from the base model's and other adapters'
    /// ([`Request::extend_block_hashes`]). Absent in serialised form when
    /// `None` (see the `Serialize` impl), so outputs without LoRA keep their
    /// bytes.
    #[cfg_attr(feature = "serde", serde(default))]
    pub lora: Option<LoraAdapter>,
}

/// A LoRA adapter as vLLM's `LoRARequest` names it
/// (`vllm/lora/request.py`): the scheduler counts adapters by `id`
/// (`lora_int_id`), the prefix cache keys blocks by `name` (`lora_name`,
/// `vllm/v1/core/kv_cache_utils.py`, `_gen_lora_extra_hash_keys`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct LoraAdapter {
    /// vLLM's `lora_int_id`: positive and unique among a server's adapters.
    pub id: u32,
    /// vLLM's `lora_name`: what a client names as `model`.
    #[cfg_attr(
        feature = "serde",
        serde(deserialize_with = "crate::serde_vec::deserialize_string")
    )]
    pub name: String,
}

impl LoraAdapter {
    /// What the adapter mixes into the root of its requests' block-hash
    /// chain: splitmix64 over the FNV-1a 64 of the name, so equal names
    /// (not ids) share blocks, as vLLM keys blocks by `lora_name`.
    pub fn hash_salt(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.name.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        mix64(h)
    }
}

/// Self-describing formats (JSON reports, transcripts) leave out an absent
/// `lora`, so existing outputs keep their bytes; positional ones (the
/// transport's bincode frames) always write it, as they cannot tell a
/// skipped field from the next one.
#[cfg(feature = "serde")]
impl Serialize for Request {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let skip = self.lora.is_none() && s.is_human_readable();
        let mut st = s.serialize_struct("Request", if skip { 7 } else { 8 })?;
        st.serialize_field("id", &self.id)?;
        st.serialize_field("prompt_tokens", &self.prompt_tokens)?;
        st.serialize_field("max_output_tokens", &self.max_output_tokens)?;
        st.serialize_field("prefix_hashes", &self.prefix_hashes)?;
        st.serialize_field("hash_block_tokens", &self.hash_block_tokens)?;
        st.serialize_field("session", &self.session)?;
        st.serialize_field("arrival", &self.arrival)?;
        if skip {
            st.skip_field("lora")?;
        } else {
            st.serialize_field("lora", &self.lora)?;
        }
        st.end()
    }
}

/// splitmix64's finaliser: cheap, well mixed, stable across platforms.
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Request {
    /// Number of full `block_size`-token blocks in the prompt.
    pub fn full_blocks(&self, block_size: u32) -> u32 {
        self.prompt_tokens / block_size.max(1)
    }

    /// Blocks needed to hold `tokens` tokens.
    pub fn blocks_for(tokens: u64, block_size: u32) -> u64 {
        tokens.div_ceil(u64::from(block_size.max(1)))
    }

    /// Chained hashes of the prompt's full `block_size`-token blocks, written
    /// into `out` (cleared first). Equal hashes mean equal prefixes, as with
    /// vLLM's chained `hash_block_tokens`: block `i`'s hash is the chained
    /// hash of every trace chunk up to the last one it touches, plus `i`'s
    /// rank among the blocks ending in that chunk. The offset form keeps a
    /// chunk's blocks on consecutive hash values, which the block-hash
    /// tables store together (see `handoff-hashtable`), and costs one add
    /// per block instead of a chain of mixes. Chunks past the trace's known
    /// ones get hashes salted with the request id, so unknown content never
    /// shares. A LoRA request's chain starts from its adapter's
    /// [`LoraAdapter::hash_salt`] (vLLM puts `lora_name` in every block's
    /// extra keys, `generate_block_hash_extra_keys`; one salt at the root of
    /// a chain separates every block after it the same way), so the same
    /// prompt on two adapters, or on an adapter and the base model, shares
    /// no block; a base request hashes as without LoRA.
    pub fn block_hashes(&self, block_size: u32, out: &mut Vec<u64>) {
        out.clear();
        self.extend_block_hashes(block_size, out, usize::MAX);
    }

    /// Appends the hashes of blocks `out.len()..upto` (as
    /// [`Self::block_hashes`] numbers them) to `out`, stopping at the last
    /// full block: lets a caller that may stop at the first cache miss hash
    /// a prompt a window at a time.
    pub fn extend_block_hashes(&self, block_size: u32, out: &mut Vec<u64>, upto: usize) {
        let bs = u64::from(block_size.max(1));
        let hbt = u64::from(self.hash_block_tokens.max(1));
        let from = out.len() as u64;
        let to = u64::from(self.full_blocks(block_size)).min(upto as u64);
        if to <= from {
            return;
        }
        out.reserve((to - from) as usize);
        let last_chunk = |i: u64| ((i + 1) * bs - 1) / hbt;
        // The first block whose last chunk is `c`.
        let first_block = |c: u64| (c * hbt + 1).div_ceil(bs).saturating_sub(1);
        // A chunk's blocks count up from a base aligned to the hash tables'
        // group size, so a 32-block chunk fills exactly one group.
        let align = !(BLOCK_HASH_GROUP - 1);
        // Chained hash of chunks `0..=chunk`, advanced as blocks need it.
        let mut chunk = 0u64;
        let mut chained = mix64(self.chunk_content(0) ^ 0x5eed ^ self.lora_salt());
        // One run per chunk: the blocks ending in chunk `c` are those whose
        // last token lies before chunk `c + 1`, so a run costs two divisions
        // and each of its blocks one add (a prompt's hashing was a division
        // per block, 5% of a vLLM replay).
        let mut i = from;
        while i < to {
            let c = last_chunk(i);
            while chunk < c {
                chunk += 1;
                chained = mix64(chained ^ self.chunk_content(chunk));
            }
            let (base, first) = (mix64(chained) & align, first_block(c));
            let end = ((c + 1) * hbt / bs).clamp(i + 1, to);
            out.extend((i..end).map(|j| base.wrapping_add(j - first)));
            i = end;
        }
    }

    /// What this request's block-hash chain starts from besides its first
    /// chunk: its adapter's [`LoraAdapter::hash_salt`], or 0 on the base
    /// model.
    pub fn lora_salt(&self) -> u64 {
        self.lora.as_ref().map_or(0, LoraAdapter::hash_salt)
    }

    /// The content hash of trace chunk `c`: the trace's own
    /// (`prefix_hashes[c]`), or past the known chunks
    /// `mix64(id ^ 0xdead_beef) ^ c`, salted with the request id so unknown
    /// content never shares. Edges that give a chunk stand-in token ids
    /// derive them from this value.
    pub fn chunk_content(&self, c: u64) -> u64 {
        match self.prefix_hashes.get(c as usize) {
            Some(&x) => x,
            None => mix64(self.id.0 ^ 0xdead_beef) ^ c,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn shared_prefix_shares_block_hashes() {
        let a = req(1, 1024, &[7, 8]);
        let b = req(2, 1024, &[7, 9]);
        let (mut ha, mut hb) = (Vec::new(), Vec::new());
        a.block_hashes(16, &mut ha);
        b.block_hashes(16, &mut hb);
        assert_eq!(ha.len(), 64);
        assert_eq!(ha[..32], hb[..32]);
        assert!(ha[32..].iter().zip(&hb[32..]).all(|(x, y)| x != y));
    }

    #[test]
    fn unknown_tail_never_shares() {
        let a = req(1, 1024, &[7]);
        let b = req(2, 1024, &[7]);
        let (mut ha, mut hb) = (Vec::new(), Vec::new());
        a.block_hashes(512, &mut ha);
        b.block_hashes(512, &mut hb);
        assert_eq!(ha[0], hb[0]);
        assert_ne!(ha[1], hb[1]);
    }

    #[test]
    fn blocks_of_one_chunk_are_consecutive_and_chunks_are_not() {
        let a = req(1, 1024, &[7, 8]);
        let mut h = Vec::new();
        a.block_hashes(16, &mut h);
        assert!(h[..32].windows(2).all(|w| w[1] == w[0].wrapping_add(1)));
        assert!(h[32..].windows(2).all(|w| w[1] == w[0].wrapping_add(1)));
        assert_ne!(h[32], h[31].wrapping_add(1));
        // Each 32-block chunk starts a table group.
        assert_eq!((h[0] % 32, h[31] % 32, h[32] % 32), (0, 31, 0));
        // A later chunk's hash covers the earlier ones.
        let b = req(2, 1024, &[9, 8]);
        let mut hb = Vec::new();
        b.block_hashes(16, &mut hb);
        assert!(h.iter().zip(&hb).all(|(x, y)| x != y));
    }

    #[test]
    fn blocks_spanning_chunks_depend_on_both() {
        // 24-token blocks straddle the 512-token chunk boundary at block 21.
        let a = req(1, 1024, &[7, 8]);
        let b = req(2, 1024, &[7, 9]);
        let (mut ha, mut hb) = (Vec::new(), Vec::new());
        a.block_hashes(24, &mut ha);
        b.block_hashes(24, &mut hb);
        assert_eq!(ha[..21], hb[..21]);
        assert_ne!(ha[21], hb[21]);
    }

    #[test]
    fn extending_in_windows_equals_hashing_at_once() {
        let a = req(1, 5000, &[3, 1, 4, 1, 5, 9]);
        for bs in [1, 16, 24, 512, 700] {
            let mut whole = Vec::new();
            a.block_hashes(bs, &mut whole);
            let mut parts = Vec::new();
            let mut upto = 0;
            while parts.len() < whole.len() {
                upto += 7;
                a.extend_block_hashes(bs, &mut parts, upto);
            }
            assert_eq!(parts, whole, "block size {bs}");
            a.extend_block_hashes(bs, &mut parts, usize::MAX);
            assert_eq!(parts, whole);
        }
    }

    /// The per-block definition: block `i` is its last chunk's base plus its
    /// rank among the blocks ending in that chunk.
    fn per_block(r: &Request, bs: u32, from: usize, upto: usize) -> Vec<u64> {
        let (bs64, hbt) = (u64::from(bs.max(1)), u64::from(r.hash_block_tokens.max(1)));
        let last_chunk = |i: u64| ((i + 1) * bs64 - 1) / hbt;
        let to = u64::from(r.full_blocks(bs)).min(upto as u64);
        (from as u64..to)
            .map(|i| {
                let c = last_chunk(i);
                let mut chained = mix64(r.chunk_content(0) ^ 0x5eed ^ r.lora_salt());
                for k in 1..=c {
                    chained = mix64(chained ^ r.chunk_content(k));
                }
                let first = (0..=i).find(|&j| last_chunk(j) == c).unwrap_or(i);
                (mix64(chained) & !(BLOCK_HASH_GROUP - 1)).wrapping_add(i - first)
            })
            .collect()
    }

    proptest::proptest! {
        #[test]
        fn runs_per_chunk_equal_the_per_block_definition(
            prompt in 0u32..3000,
            bs in 1u32..80,
            hbt in 1u32..700,
            chunks in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..8),
            split in 0usize..200,
            upto in 0usize..400,
        ) {
            let mut r = req(9, prompt, &chunks);
            r.hash_block_tokens = hbt;
            let whole = per_block(&r, bs, 0, upto);
            let mut got = Vec::new();
            r.extend_block_hashes(bs, &mut got, split.min(upto));
            r.extend_block_hashes(bs, &mut got, upto);
            proptest::prop_assert_eq!(&got, &whole);
        }
    }

    #[test]
    fn large_blocks_fold_chunks() {
        let a = req(1, 2048, &[1, 2, 3, 4]);
        let mut h = Vec::new();
        a.block_hashes(1024, &mut h);
        assert_eq!(h.len(), 2);
        assert_ne!(h[0], h[1]);
    }
}
