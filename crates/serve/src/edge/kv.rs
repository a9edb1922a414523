//! KV-event publishing, once for both serve modes: each scheduler's
//! events put back in the order it produced them ([`KvOrder`]), each block
//! under one identity on every channel ([`BlockTokens`]: the core's hash,
//! or vLLM's under `--block-hash vllm`, with the stored blocks' token ids
//! from the prompts in flight), as vLLM wire events per scheduler until the
//! next flush and, when asked, as Dynamo `RouterEvent` lines
//! (`--kv-events-out`) at once.
//!
//! A flush publishes scheduler `s`'s events on its own ZMQ PUB socket,
//! stamped with its rank ([`KvPublishers::publish_rank`]); in an engine
//! process each rank's `--kv-events` port is offset by the rank as vLLM
//! offsets a data-parallel rank's `KVEventsConfig.endpoint`
//! (`vllm/distributed/kv_events.py`, `ZmqEventPublisher.offset_endpoint_port`).

use super::blocks::BlockTokens;
use crate::kv_events::zmq::KvPublishers;
use crate::vllm::wire::WireEvent;
use handoff_core::fasthash::FastMap;
use handoff_core::{DpLayout, Instant, KvEvent, LoraAdapter, WorkerId};
use handoff_kv_events::dynamo_events::RouterEventWriter;
use handoff_kv_events::vllm_hash::BlockHashMode;
use handoff_serving::KvOrder;

/// See the module docs.
pub(crate) struct KvOut {
    blocks: BlockTokens,
    order: KvOrder,
    /// Wire events per scheduler since the last flush, with their ids.
    wire: Vec<Vec<(u64, WireEvent)>>,
    jsonl: Option<RouterEventWriter>,
    /// The hashes blocks are published under.
    mode: BlockHashMode,
    /// Maps each scheduler to the (worker, rank) its events are from.
    dp: DpLayout,
    block_size: u32,
    publishers: Option<KvPublishers>,
}

impl KvOut {
    /// Events of `schedulers` schedulers of `block_size`-token blocks, the
    /// core's hashes, one rank per worker, published nowhere.
    pub(crate) fn new(schedulers: usize, block_size: u32) -> Self {
        KvOut {
            blocks: BlockTokens {
                pending: FastMap::default(),
                stored: (0..schedulers).map(|_| FastMap::default()).collect(),
            },
            order: KvOrder::new(),
            wire: vec![Vec::new(); schedulers],
            jsonl: None,
            mode: BlockHashMode::Mocker,
            dp: DpLayout::SINGLE,
            block_size,
            publishers: None,
        }
    }

    /// Publishes blocks under `mode`'s hashes.
    pub(crate) fn with_block_hash(mut self, mode: BlockHashMode) -> Self {
        self.mode = mode;
        self
    }

    /// Attributes each scheduler's events to its (worker, rank) under `dp`.
    pub(crate) fn with_dp(mut self, dp: DpLayout) -> Self {
        self.dp = dp;
        self
    }

    /// Writes Dynamo `RouterEvent` lines to `jsonl`.
    pub(crate) fn with_jsonl(mut self, jsonl: Option<RouterEventWriter>) -> Self {
        self.jsonl = jsonl;
        self
    }

    /// Flushes to `p`, one PUB socket per scheduler.
    pub(crate) fn with_publishers(mut self, p: Option<KvPublishers>) -> Self {
        self.publishers = p;
        self
    }

    /// How schedulers group into workers' ranks.
    pub(crate) fn dp(&self) -> DpLayout {
        self.dp
    }

    /// The block size.
    pub(crate) fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Holds a prompt's blocks (`hashes`, the core's, of `tokens`) until
    /// [`KvOut::release`]: their token ids and identities come from it.
    pub(crate) fn hold(&mut self, hashes: &[u64], tokens: &[u32], lora: Option<&LoraAdapter>) {
        self.blocks
            .hold(hashes, tokens, self.block_size, &self.mode, lora);
    }

    /// Lets go of what [`KvOut::hold`] held.
    pub(crate) fn release(&mut self, hashes: &[u64]) {
        self.blocks.release(hashes);
    }

    /// Prompt blocks held for prompts in flight.
    pub(crate) fn held_blocks(&self) -> usize {
        self.blocks.pending.len()
    }

    /// Tokens of a prompt of `prompt_tokens` tokens and chained `hashes`
    /// cached on scheduler `s` now: its leading blocks that `s` published as
    /// stored, never the whole prompt (the last token is always computed,
    /// as in vLLM).
    pub(crate) fn cached_on(&self, s: WorkerId, hashes: &[u64], prompt_tokens: u32) -> u32 {
        let Some(m) = self.blocks.stored.get(s.0 as usize) else {
            return 0;
        };
        let n = hashes.iter().take_while(|h| m.contains_key(h)).count() as u32;
        let tokens = n * self.block_size;
        if tokens >= prompt_tokens {
            n.saturating_sub(1) * self.block_size
        } else {
            tokens
        }
    }

    /// Scheduler `s`'s event `ev` from `at`, put back in its order first.
    pub(crate) fn event(&mut self, s: WorkerId, ev: KvEvent, at: Instant) {
        let mut ready = Vec::new();
        self.order.push(s, ev, at, &mut ready);
        self.all(ready);
    }

    /// Scheduler `s` went down: its events still waiting for a lower id
    /// go out now, and its next ones come from a new core.
    pub(crate) fn worker_down(&mut self, s: WorkerId) {
        let mut ready = Vec::new();
        self.order.worker_down(s, &mut ready);
        self.all(ready);
    }

    /// The run ends: everything held in the reorder buffer goes out.
    pub(crate) fn finish(&mut self) {
        let mut ready = Vec::new();
        self.order.finish(&mut ready);
        self.all(ready);
    }

    /// Events the reorder buffer let through, to every channel in order.
    fn all(&mut self, ready: Vec<handoff_serving::kv_order::Released>) {
        for (s, e, _) in ready {
            self.one(s, &e);
        }
    }

    /// One event, in its scheduler's order, to every channel. A block has
    /// one identity everywhere: the hash its core published, or under
    /// `--block-hash vllm` vLLM's hash of it ([`super::blocks`] documents
    /// both). Its token ids (vLLM's `BlockStored.token_ids`) are the
    /// prompt's when a prompt in flight or a block stored earlier has them,
    /// else a generated block's stand-ins
    /// ([`handoff_kv_events::dynamo_hash`]); Dynamo's `tokens_hash` is of
    /// those ids.
    fn one(&mut self, s: WorkerId, ev: &KvEvent) {
        let si = s.0 as usize;
        let p = self.blocks.publish(si, ev, self.block_size, &self.mode);
        if let Some(j) = self.jsonl.as_mut() {
            j.write(self.dp.address(s), &p.event, |h| {
                p.tokens_hashes.get(&h).copied().unwrap_or_default()
            });
        }
        if let Some(v) = self.wire.get_mut(si) {
            v.push((ev.event_id, p.wire));
        }
    }

    /// The wire events each scheduler produced since the last call, in id
    /// order.
    fn take_wire(&mut self) -> Vec<(usize, Vec<WireEvent>)> {
        let mut out = Vec::new();
        for (s, v) in self.wire.iter_mut().enumerate() {
            if v.is_empty() {
                continue;
            }
            v.sort_by_key(|(id, _)| *id);
            out.push((s, v.drain(..).map(|(_, e)| e).collect()));
        }
        out
    }

    /// Publishes what each scheduler produced since the last call, stamped
    /// `unix_ts`.
    pub(crate) fn flush(&mut self, unix_ts: f64) {
        let batches = self.take_wire();
        let Some(p) = &self.publishers else {
            return;
        };
        for (s, events) in batches {
            let rank = self.dp.address(WorkerId(s as u32)).dp_rank.0;
            p.publish_rank(s, rank, unix_ts, &events);
        }
    }
}
