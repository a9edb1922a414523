//! vLLM's own prefix-cache block hash, for `serve --block-hash vllm`.
//!
//! vLLM v1 names a full block by a chain (`vllm/v1/core/kv_cache_utils.py`,
//! `hash_block_tokens`): block `i`'s hash is
//! `hash_fn((parent, tuple(token_ids), extra_keys))`, `parent` being block
//! `i-1`'s hash, or `NONE_HASH` for the first block. With
//! `--prefix-caching-hash-algo sha256_cbor`, `hash_fn` is `sha256_cbor`
//! (`vllm/utils/hashing.py`): `cbor2.dumps(obj, canonical=True)` then
//! SHA-256, the 32-byte digest being the hash. For a plain text prompt
//! (no LoRA, multimodal input, cache salt or prompt embeddings)
//! `generate_block_hash_extra_keys` gives `None`. `init_none_hash` sets
//! `NONE_HASH = hash_fn(os.environ["PYTHONHASHSEED"])` (the seed a string,
//! so a CBOR text string), or 32 random bytes when the variable is unset:
//! [`VllmHasher::new`] takes that seed, so a router run with the same
//! `PYTHONHASHSEED` computes the same chain.
//!
//! On the wire (`vllm/distributed/kv_events.py`, `BlockStored`) vLLM sends a
//! hash through `maybe_convert_block_hash`: with
//! `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES` (its default) the digest read as a
//! big-endian integer, masked to 64 bits, which is the digest's last eight
//! bytes big-endian ([`external_id`]). The first stored block's
//! `parent_block_hash` is `None`, not `NONE_HASH`.
//!
//! The CBOR written for one block is the array `[bytes(parent),
//! [ids...], null]`, every length and integer in its shortest form, which
//! is what cbor2's canonical mode writes for a tuple of bytes, a tuple of
//! non-negative ints and `None`.

use sha2::{Digest, Sha256};

/// A `PYTHONHASHSEED` a Python interpreter (so vLLM) starts with: `random`
/// or a decimal integer in `0..=4294967295` (CPython's
/// `Python/initconfig.c`, `config_init_hash_seed`, refuses anything else
/// at start-up); the error says so. vLLM's `NONE_HASH` hashes the text
/// as given, so it is kept as given.
pub fn python_hash_seed(seed: &str) -> Result<String, String> {
    let integer = !seed.is_empty()
        && seed.len() <= 10
        && seed.bytes().all(|b| b.is_ascii_digit())
        && seed.parse::<u64>().is_ok_and(|v| v <= u64::from(u32::MAX));
    if seed == "random" || integer {
        Ok(seed.to_string())
    } else {
        Err(format!(
            "{seed:?}: PYTHONHASHSEED must be \"random\" or an integer in 0..=4294967295, as \
             Python requires"
        ))
    }
}

/// A vLLM block hash: the 32-byte SHA-256 digest.
pub type BlockDigest = [u8; 32];

/// The `PYTHONHASHSEED` [`VllmHasher`] uses when none is given.
pub const DEFAULT_SEED: &str = "0";

/// vLLM's `sha256_cbor` block hash chain under one `NONE_HASH`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VllmHasher {
    none_hash: BlockDigest,
    /// The seed `none_hash` came from.
    seed: String,
}

fn sha256(bytes: &[u8]) -> BlockDigest {
    Sha256::digest(bytes).into()
}

impl VllmHasher {
    /// The chain vLLM runs with `PYTHONHASHSEED=seed` and
    /// `--prefix-caching-hash-algo sha256_cbor`: `NONE_HASH` is the
    /// SHA-256 of the seed written as a canonical CBOR text string.
    pub fn new(seed: &str) -> Self {
        let mut buf = Vec::with_capacity(seed.len() + 9);
        // Writing into a Vec cannot fail.
        let _ = minicbor::Encoder::new(&mut buf).str(seed);
        VllmHasher {
            none_hash: sha256(&buf),
            seed: seed.to_string(),
        }
    }

    /// `NONE_HASH`, the parent of every chain's first block.
    pub fn none_hash(&self) -> &BlockDigest {
        &self.none_hash
    }

    /// The `PYTHONHASHSEED` this chain was made from.
    pub fn seed(&self) -> &str {
        &self.seed
    }

    /// `hash_block_tokens(sha256_cbor, parent, tokens, None)`: the hash of
    /// a block of `tokens` after the block hashed `parent` (`None` for the
    /// first block of a sequence).
    pub fn block(&self, parent: Option<&BlockDigest>, tokens: &[u32]) -> BlockDigest {
        self.block_lora(parent, tokens, None)
    }

    /// As [`Self::block`] for a request on LoRA adapter `lora` (its
    /// `lora_name`): vLLM's extra keys are then the tuple `(lora_name,)`
    /// (`generate_block_hash_extra_keys` puts `_gen_lora_extra_hash_keys`
    /// first, and a plain text prompt has no other), written as a
    /// one-element CBOR array of the name; `None` writes `null` as
    /// [`Self::block`].
    pub fn block_lora(
        &self,
        parent: Option<&BlockDigest>,
        tokens: &[u32],
        lora: Option<&str>,
    ) -> BlockDigest {
        let parent = parent.unwrap_or(&self.none_hash);
        let mut buf = Vec::with_capacity(40 + tokens.len() * 5);
        let mut e = minicbor::Encoder::new(&mut buf);
        // Writing into a Vec cannot fail.
        let _ = e.array(3).and_then(|e| e.bytes(parent));
        let _ = e.array(tokens.len() as u64);
        for t in tokens {
            let _ = e.u32(*t);
        }
        let _ = match lora {
            Some(name) => e.array(1).and_then(|e| e.str(name)),
            None => e.null(),
        };
        sha256(&buf)
    }

    /// The hashes of every full `block_size`-token block of `tokens`, in
    /// order (vLLM's `get_request_block_hasher` over a whole prompt).
    pub fn chain(&self, tokens: &[u32], block_size: u32) -> Vec<BlockDigest> {
        self.chain_lora(tokens, block_size, None)
    }

    /// As [`Self::chain`] for a request on LoRA adapter `lora`
    /// ([`Self::block_lora`]).
    pub fn chain_lora(
        &self,
        tokens: &[u32],
        block_size: u32,
        lora: Option<&str>,
    ) -> Vec<BlockDigest> {
        let mut out: Vec<BlockDigest> =
            Vec::with_capacity(tokens.len() / block_size.max(1) as usize);
        for block in tokens.chunks_exact(block_size.max(1) as usize) {
            let h = self.block_lora(out.last(), block, lora);
            out.push(h);
        }
        out
    }
}

/// The hash vLLM puts on the wire for `digest`
/// (`maybe_convert_block_hash` with integer hashes): its last eight bytes,
/// big-endian.
pub fn external_id(digest: &BlockDigest) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&digest[24..]);
    u64::from_be_bytes(b)
}

/// How the published block hashes are made (`serve --block-hash`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum BlockHashMode {
    /// The cores' own chained `u64` ([`crate::prompt`]).
    #[default]
    Mocker,
    /// vLLM's `sha256_cbor` chain, sent as vLLM sends it ([`external_id`]).
    Vllm(VllmHasher),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_seeds_are_what_python_starts_with() {
        for ok in ["0", "42", "4294967295", "random"] {
            assert_eq!(python_hash_seed(ok).as_deref(), Ok(ok));
        }
        for bad in [
            "NaN",
            "",
            "-1",
            "4294967296",
            "1e3",
            " 7",
            "99999999999",
            "Random",
        ] {
            let e = python_hash_seed(bad).expect_err(bad);
            assert!(e.contains("PYTHONHASHSEED"), "{e}");
        }
    }

    /// The bytes hashed are canonical CBOR, written out by hand here from
    /// RFC 8949's encoding rules (an independent check of the encoder).
    #[test]
    fn cbor_bytes_are_canonical() {
        let h = VllmHasher::new("0");
        // "0" as a text string: major type 3, length 1.
        assert_eq!(h.none_hash, sha256(&[0x61, b'0']));
        let tokens = [1u32, 23, 24, 255, 256, 65_535, 65_536, 128_000];
        let mut want = vec![0x83, 0x58, 0x20];
        want.extend_from_slice(&h.none_hash);
        want.push(0x88);
        want.extend_from_slice(&[0x01, 0x17, 0x18, 24, 0x18, 255, 0x19, 1, 0]);
        want.extend_from_slice(&[0x19, 0xff, 0xff, 0x1a, 0, 1, 0, 0, 0x1a, 0, 1, 0xf4, 0]);
        want.push(0xf6);
        assert_eq!(h.block(None, &tokens), sha256(&want));
    }

    /// A LoRA request's extra keys are `(lora_name,)`: the CBOR array of
    /// one text string in place of `null`, so its chain is apart from the
    /// base model's and another adapter's.
    #[test]
    fn lora_blocks_hash_the_name_as_extra_keys() {
        let h = VllmHasher::new("0");
        let mut want = vec![0x83, 0x58, 0x20];
        want.extend_from_slice(&h.none_hash);
        want.extend_from_slice(&[0x81, 0x07, 0x81, 0x63, b's', b'q', b'l']);
        assert_eq!(h.block_lora(None, &[7], Some("sql")), sha256(&want));
        let t: Vec<u32> = (0..32).collect();
        let (base, a, b) = (
            h.chain(&t, 16),
            h.chain_lora(&t, 16, Some("a")),
            h.chain_lora(&t, 16, Some("b")),
        );
        assert!(a.iter().all(|d| !base.contains(d) && !b.contains(d)));
        assert_eq!(h.chain_lora(&t, 16, None), base);
    }

    #[test]
    fn chain_links_parents_and_depends_on_the_seed() {
        let h = VllmHasher::new("0");
        let t: Vec<u32> = (0..40).collect();
        let c = h.chain(&t, 16);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0], h.block(None, &t[..16]));
        assert_eq!(c[1], h.block(Some(&c[0]), &t[16..32]));
        assert_ne!(VllmHasher::new("1").chain(&t, 16)[0], c[0]);
        let d = [0xabu8; 32];
        let mut e = d;
        e[24..].copy_from_slice(&0x0102_0304_0506_0708u64.to_be_bytes());
        assert_eq!(external_id(&e), 0x0102_0304_0506_0708);
    }
}
