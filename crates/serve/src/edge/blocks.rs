//! The token ids behind each block hash a worker may publish: a prompt's
//! own, kept while a flow holds it and then per worker that stored it
//! (`BlockStored.token_ids` and Dynamo's `tokens_hash` come from them), and
//! the identity each block is published under on every channel.
//!
//! A block's published hash is the core's own `u64` by default. Under
//! `--block-hash vllm` ([`handoff_kv_events::vllm_hash`]) it is vLLM's `sha256_cbor`
//! chain hash of the block's token ids after its parent's digest, sent as
//! vLLM sends it: a prompt block's digest comes from its prompt's chain
//! (computed when the request opens); a generated block's from its
//! stand-in ids ([`handoff_kv_events::dynamo_hash::generated_tokens`]) after the digest
//! of the block it was stored after (its event's parent, or the previous
//! block of the same event), or after `NONE_HASH` when that parent is not
//! known. Either way the published hash is what vLLM's
//! `hash_block_tokens` gives for the published `parent_block_hash` chain
//! and `token_ids`, and the ZMQ stream and the JSONL agree on it.
//!
//! A block of a LoRA request carries its adapter: a prompt block from its
//! request, a generated block from the block it was stored after. Its vLLM
//! digest takes the adapter's name as extra keys
//! ([`handoff_kv_events::vllm_hash::VllmHasher::block_lora`]), and its
//! `BlockStored` names the adapter (`lora_id`, `lora_name`) and gives each
//! block its own extra keys, `(lora_name,)` or `None`, as vLLM's
//! `BlockPool.cache_full_blocks` does (`vllm/v1/core/block_pool.py`).

use crate::vllm::wire::WireEvent;
use handoff_core::fasthash::FastMap;
use handoff_core::{KvEvent, KvEventData, LoraAdapter};
use handoff_kv_events::dynamo_hash::{generated_tokens, tokens_hash};
use handoff_kv_events::vllm_hash::{external_id, BlockDigest, BlockHashMode};
use std::sync::Arc;

/// What is known of one block the core names by its own hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Block {
    /// Its token ids.
    pub(crate) tokens: Arc<[u32]>,
    /// Its vLLM digest, under `--block-hash vllm`.
    pub(crate) digest: Option<BlockDigest>,
    /// The LoRA adapter it was computed under (`lora_int_id`, name).
    pub(crate) lora: Option<(u32, Arc<str>)>,
}

impl Block {
    /// The hash channels publish for the block the core calls `h`.
    fn published(&self, h: u64) -> u64 {
        self.digest.as_ref().map_or(h, external_id)
    }
}

/// Token ids of blocks that may be published, by chained hash.
#[derive(Default)]
pub(crate) struct BlockTokens {
    /// Blocks of prompts in flight, with how many flows hold each.
    pub(crate) pending: FastMap<u64, (Block, u32)>,
    /// Blocks each worker has published as stored.
    pub(crate) stored: Vec<FastMap<u64, Block>>,
}

/// One core KV event as the channels publish it.
pub(crate) struct Published {
    /// The event under published hashes (for the JSONL).
    pub(crate) event: KvEvent,
    /// Dynamo's `tokens_hash` of each stored block, by published hash.
    pub(crate) tokens_hashes: FastMap<u64, u64>,
    /// The vLLM wire event.
    pub(crate) wire: WireEvent,
}

impl BlockTokens {
    pub(crate) fn lookup(&self, h: u64) -> Option<Block> {
        if let Some((b, _)) = self.pending.get(&h) {
            return Some(b.clone());
        }
        self.stored.iter().find_map(|m| m.get(&h).cloned())
    }

    /// Holds the blocks of a prompt in flight: `hashes` are the core's,
    /// `tokens` the prompt's ids, in `block_size`-token blocks.
    pub(crate) fn hold(
        &mut self,
        hashes: &[u64],
        tokens: &[u32],
        block_size: u32,
        mode: &BlockHashMode,
        lora: Option<&LoraAdapter>,
    ) {
        let name = lora.map(|l| l.name.as_str());
        let digests = match mode {
            BlockHashMode::Mocker => Vec::new(),
            BlockHashMode::Vllm(v) => v.chain_lora(tokens, block_size, name),
        };
        let lora = lora.map(|l| (l.id, Arc::<str>::from(l.name.as_str())));
        let blocks = tokens.chunks_exact(block_size.max(1) as usize);
        for (i, (h, block)) in hashes.iter().zip(blocks).enumerate() {
            self.pending
                .entry(*h)
                .or_insert_with(|| {
                    let digest = digests.get(i).copied();
                    (
                        Block {
                            tokens: Arc::from(block),
                            digest,
                            lora: lora.clone(),
                        },
                        0,
                    )
                })
                .1 += 1;
        }
    }

    pub(crate) fn release(&mut self, hashes: &[u64]) {
        for h in hashes {
            if let Some(e) = self.pending.get_mut(h) {
                e.1 -= 1;
                if e.1 == 0 {
                    self.pending.remove(h);
                }
            }
        }
    }

    /// Worker `wi`'s event `ev` as every channel publishes it (see the
    /// module docs), recording what `wi` now stores.
    pub(crate) fn publish(
        &mut self,
        wi: usize,
        ev: &KvEvent,
        bs: u32,
        mode: &BlockHashMode,
    ) -> Published {
        let mut tokens_hashes = FastMap::default();
        let (data, wire) = match &ev.data {
            KvEventData::Stored {
                parent_hash,
                block_hashes,
            } => {
                let parent = parent_hash.and_then(|p| {
                    let own = self.stored.get(wi).and_then(|m| m.get(&p)).cloned();
                    own.or_else(|| self.lookup(p))
                });
                let parent_pub = parent_hash.map(|p| parent.as_ref().map_or(p, |b| b.published(p)));
                let mut lora = parent.as_ref().and_then(|b| b.lora.clone());
                let mut prev = parent.and_then(|b| b.digest);
                let mut published = Vec::with_capacity(block_hashes.len());
                let mut token_ids = Vec::with_capacity(block_hashes.len() * bs as usize);
                let mut first_lora = None;
                let mut extra_keys = Vec::with_capacity(block_hashes.len());
                for (i, h) in block_hashes.iter().enumerate() {
                    let mut b = self.lookup(*h).unwrap_or_else(|| Block {
                        tokens: Arc::from(generated_tokens(*h, bs)),
                        digest: None,
                        lora: lora.clone(),
                    });
                    lora.clone_from(&b.lora);
                    if i == 0 {
                        first_lora.clone_from(&b.lora);
                    }
                    if let BlockHashMode::Vllm(v) = mode {
                        let name = b.lora.as_ref().map(|(_, n)| &**n);
                        let d = *b
                            .digest
                            .get_or_insert_with(|| v.block_lora(prev.as_ref(), &b.tokens, name));
                        prev = Some(d);
                    }
                    extra_keys.push(b.lora.as_ref().map(|(_, n)| n.to_string()));
                    let p = b.published(*h);
                    tokens_hashes.insert(p, tokens_hash(&b.tokens));
                    published.push(p);
                    token_ids.extend_from_slice(&b.tokens);
                    if let Some(m) = self.stored.get_mut(wi) {
                        m.insert(*h, b);
                    }
                }
                let wire = WireEvent::BlockStored {
                    block_hashes: published.clone(),
                    parent_block_hash: parent_pub,
                    token_ids,
                    block_size: bs,
                    lora: first_lora.map(|(id, n)| (id, n.to_string())),
                    extra_keys,
                };
                let data = KvEventData::Stored {
                    parent_hash: parent_pub,
                    block_hashes: published,
                };
                (data, wire)
            }
            KvEventData::Removed { block_hashes } => {
                let mut published = Vec::with_capacity(block_hashes.len());
                for h in block_hashes {
                    let b = self.stored.get_mut(wi).and_then(|m| m.remove(h));
                    published.push(b.map_or(*h, |b| b.published(*h)));
                }
                let wire = WireEvent::BlockRemoved {
                    block_hashes: published.clone(),
                };
                (
                    KvEventData::Removed {
                        block_hashes: published,
                    },
                    wire,
                )
            }
            KvEventData::Cleared => {
                if let Some(m) = self.stored.get_mut(wi) {
                    m.clear();
                }
                (KvEventData::Cleared, WireEvent::AllBlocksCleared)
            }
        };
        Published {
            event: KvEvent {
                event_id: ev.event_id,
                data,
            },
            tokens_hashes,
            wire,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::prompt::chained_block_hashes;
    use handoff_kv_events::vllm_hash::VllmHasher;

    fn tokens(n: usize) -> BlockTokens {
        BlockTokens {
            pending: FastMap::default(),
            stored: (0..n).map(|_| FastMap::default()).collect(),
        }
    }

    fn stored(parent: Option<u64>, hashes: &[u64]) -> KvEvent {
        KvEvent {
            event_id: 1,
            data: KvEventData::Stored {
                parent_hash: parent,
                block_hashes: hashes.to_vec(),
            },
        }
    }

    /// A block's token ids come from the prompt that holds it, then from
    /// the worker that stored it; a block no prompt has is a generated one,
    /// whose stand-ins are a function of its hash alone.
    #[test]
    fn prompt_blocks_keep_their_ids_and_generated_blocks_get_stand_ins() {
        let bs = 16u32;
        let prompt: Vec<u32> = (0..32).collect();
        let hashes = chained_block_hashes(&prompt, bs);
        let mut b = tokens(1);
        b.hold(&hashes, &prompt, bs, &BlockHashMode::Mocker, None);
        assert_eq!(
            b.lookup(hashes[1]).map(|b| b.tokens),
            Some(Arc::from(&prompt[16..]))
        );
        let p = b.publish(0, &stored(None, &hashes[..1]), bs, &BlockHashMode::Mocker);
        assert_eq!(p.event, stored(None, &hashes[..1]));
        b.release(&hashes);
        assert!(b.pending.is_empty());
        assert_eq!(
            b.lookup(hashes[0]).map(|b| b.tokens),
            Some(Arc::from(&prompt[..16]))
        );
        assert_eq!(b.lookup(hashes[1]), None);
        let g = 0xdead_beef_u64 << 5;
        let p = b.publish(
            0,
            &stored(Some(hashes[0]), &[g]),
            bs,
            &BlockHashMode::Mocker,
        );
        let WireEvent::BlockStored {
            token_ids,
            block_hashes,
            parent_block_hash,
            ..
        } = p.wire
        else {
            panic!("a stored event publishes BlockStored");
        };
        assert_eq!(token_ids, generated_tokens(g, bs));
        assert_eq!(
            (block_hashes, parent_block_hash),
            (vec![g], Some(hashes[0]))
        );
    }

    /// Each stored block carries its own extra keys: its adapter's name
    /// for a LoRA prompt's blocks and the generated block stored after
    /// them, `None` for the base model's.
    #[test]
    fn stored_blocks_carry_their_adapter_as_extra_keys() {
        let bs = 4u32;
        let sql = LoraAdapter {
            id: 3,
            name: "sql".into(),
        };
        let lora_prompt: Vec<u32> = (100..108).collect();
        let base_prompt: Vec<u32> = (200..208).collect();
        let lh = chained_block_hashes(&lora_prompt, bs);
        let bh = chained_block_hashes(&base_prompt, bs);
        let mut b = tokens(1);
        b.hold(&lh, &lora_prompt, bs, &BlockHashMode::Mocker, Some(&sql));
        b.hold(&bh, &base_prompt, bs, &BlockHashMode::Mocker, None);
        let extra = |p: Published| match p.wire {
            WireEvent::BlockStored {
                extra_keys, lora, ..
            } => (extra_keys, lora),
            other => panic!("a stored event publishes BlockStored, not {other:?}"),
        };
        let sql_keys = Some("sql".to_string());
        let p = b.publish(0, &stored(None, &lh), bs, &BlockHashMode::Mocker);
        assert_eq!(
            extra(p),
            (vec![sql_keys.clone(); 2], Some((3, "sql".to_string())))
        );
        let g = 0xabc_u64 << 5;
        let p = b.publish(0, &stored(Some(lh[1]), &[g]), bs, &BlockHashMode::Mocker);
        assert_eq!(extra(p).0, vec![sql_keys]);
        let p = b.publish(0, &stored(None, &bh), bs, &BlockHashMode::Mocker);
        assert_eq!(extra(p), (vec![None, None], None));
    }

    /// Under vLLM hashing every channel publishes vLLM's chain: prompt
    /// blocks from the prompt's chain, a generated block after its parent,
    /// removals under the same identities.
    #[test]
    fn vllm_mode_publishes_one_identity_per_block() {
        let bs = 4u32;
        let v = VllmHasher::new("0");
        let mode = BlockHashMode::Vllm(v.clone());
        let prompt: Vec<u32> = (100..112).collect();
        let hashes = chained_block_hashes(&prompt, bs);
        let chain = v.chain(&prompt, bs);
        let want: Vec<u64> = chain.iter().map(external_id).collect();
        let mut b = tokens(2);
        b.hold(&hashes, &prompt, bs, &mode, None);
        let p = b.publish(0, &stored(None, &hashes[..2]), bs, &mode);
        assert_eq!(p.event, stored(None, &want[..2]));
        let p = b.publish(0, &stored(Some(hashes[1]), &hashes[2..]), bs, &mode);
        assert_eq!(p.event, stored(Some(want[1]), &want[2..]));
        b.release(&hashes);
        let g = 0xfeed_u64 << 5;
        let p = b.publish(0, &stored(Some(hashes[2]), &[g]), bs, &mode);
        let gd = v.block(Some(&chain[2]), &generated_tokens(g, bs));
        assert_eq!(p.event, stored(Some(want[2]), &[external_id(&gd)]));
        let th = tokens_hash(&generated_tokens(g, bs));
        assert_eq!(p.tokens_hashes.get(&external_id(&gd)), Some(&th));
        // Worker 1 stores the same prompt block: the same identity.
        let p = b.publish(1, &stored(None, &hashes[..1]), bs, &mode);
        assert_eq!(p.event, stored(None, &want[..1]));
        let removed = KvEvent {
            event_id: 2,
            data: KvEventData::Removed {
                block_hashes: vec![hashes[0], g],
            },
        };
        let p = b.publish(0, &removed, bs, &mode);
        assert_eq!(
            p.wire,
            WireEvent::BlockRemoved {
                block_hashes: vec![want[0], external_id(&gd)]
            }
        );
    }
}
