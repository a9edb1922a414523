//! An engine process's KV events: each rank's, in its own id order
//! ([`KvOrder`]), with the stored blocks' token ids from the prompts in
//! flight ([`BlockTokens`], as `serve`'s director keeps them), published
//! on the rank's own ZMQ PUB socket (and replay socket) at vLLM's per-rank
//! ports: `--kv-events` PORT plus the rank, as vLLM offsets a
//! data-parallel rank's `KVEventsConfig.endpoint`
//! (`vllm/distributed/kv_events.py`, `ZmqEventPublisher.offset_endpoint_port`).

use crate::director::wire::BlockTokens;
use crate::kv_events::zmq::KvPublishers;
use crate::openai::prompt::chained_block_hashes;
use crate::vllm::wire::WireEvent;
use handoff_core::fasthash::FastMap;
use handoff_core::{Instant, KvEvent, RequestId, WorkerId};
use handoff_kv_events::vllm_hash::BlockHashMode;
use handoff_serving::KvOrder;

/// See the module docs.
pub(crate) struct PodKv {
    blocks: BlockTokens,
    order: KvOrder,
    mode: BlockHashMode,
    block_size: u32,
    publishers: Option<KvPublishers>,
    /// Wire events per rank since the last flush, with their ids.
    wire: Vec<Vec<(u64, WireEvent)>>,
    /// The prompt blocks each request in flight holds.
    held: FastMap<RequestId, Vec<u64>>,
}

impl PodKv {
    /// Events of `ranks` ranks, published on `publishers` if any.
    pub fn new(
        ranks: usize,
        block_size: u32,
        mode: BlockHashMode,
        publishers: Option<KvPublishers>,
    ) -> Self {
        PodKv {
            blocks: BlockTokens {
                pending: FastMap::default(),
                stored: (0..ranks).map(|_| FastMap::default()).collect(),
            },
            order: KvOrder::new(),
            mode,
            block_size,
            publishers,
            wire: vec![Vec::new(); ranks],
            held: FastMap::default(),
        }
    }

    /// Holds request `id`'s prompt blocks (their token ids) until
    /// [`PodKv::release`].
    pub fn hold(&mut self, id: RequestId, tokens: &[u32]) {
        let hashes = chained_block_hashes(tokens, self.block_size);
        self.blocks
            .hold(&hashes, tokens, self.block_size, &self.mode, None);
        if let Some(old) = self.held.insert(id, hashes) {
            self.blocks.release(&old);
        }
    }

    /// Lets go of what [`PodKv::hold`] held for `id`.
    pub fn release(&mut self, id: RequestId) {
        if let Some(h) = self.held.remove(&id) {
            self.blocks.release(&h);
        }
    }

    /// Tokens of the prompt `tokens` that rank `r` has published as stored
    /// (its leading blocks, never the whole prompt: the last token is
    /// always computed, as in vLLM).
    pub fn cached_on(&self, r: usize, tokens: &[u32]) -> u32 {
        let Some(m) = self.blocks.stored.get(r) else {
            return 0;
        };
        let hashes = chained_block_hashes(tokens, self.block_size);
        let n = hashes.iter().take_while(|h| m.contains_key(h)).count() as u32;
        let cached = n * self.block_size;
        if cached as usize >= tokens.len() {
            n.saturating_sub(1) * self.block_size
        } else {
            cached
        }
    }

    /// Rank `r`'s event, put back in its order first.
    pub fn event(&mut self, r: usize, ev: KvEvent, at: Instant) {
        let mut ready = Vec::new();
        self.order.push(WorkerId(r as u32), ev, at, &mut ready);
        for (w, e, _) in ready {
            let wi = w.0 as usize;
            let p = self.blocks.publish(wi, &e, self.block_size, &self.mode);
            if let Some(v) = self.wire.get_mut(wi) {
                v.push((e.event_id, p.wire));
            }
        }
    }

    /// Publishes what each rank produced since the last call.
    pub fn flush(&mut self, unix_ts: f64) {
        let Some(p) = &self.publishers else {
            self.wire.iter_mut().for_each(Vec::clear);
            return;
        };
        for (r, v) in self.wire.iter_mut().enumerate() {
            if v.is_empty() {
                continue;
            }
            v.sort_by_key(|(id, _)| *id);
            let events: Vec<WireEvent> = v.drain(..).map(|(_, e)| e).collect();
            p.publish_rank(r, r as u16, unix_ts, &events);
        }
    }
}
