//! Per-request scheduler state, after vLLM `vllm/v1/request.py` `Request`
//! (`num_computed_tokens`, `num_tokens`, `status`) plus the block table the
//! KV cache manager keeps for it.
//!
//! States live in a slab whose slots (and their block-table and hash
//! buffers) are reused, so a request costs allocations when it arrives, not
//! per pass or per token.

use crate::block_pool::Owner;
use handoff_core::{DestinationReservationId, HandoffId, Request, RequestId, SourceLeaseId};

/// Why the request is here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An ordinary request: prefill then decode.
    Ordinary,
    /// A handoff prefill: prefill only, then held for its reader.
    Source(HandoffId),
    /// A request whose prompt KV arrives from a remote prefill.
    Destination(HandoffId),
}

/// Where the request is (vLLM `RequestStatus`, reduced).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// The slot is unused.
    Vacant,
    /// In the waiting queue (`WAITING` / `PREEMPTED`).
    Waiting,
    /// In the running batch (`RUNNING`).
    Running,
    /// A completed handoff prefill whose blocks are held (NIXL delayed free).
    Held,
    /// A destination in the waiting queue that holds nothing yet: its
    /// blocks are allocated when the scheduler's waiting loop reaches it
    /// (vLLM `Scheduler.schedule`, `load_kv_async`).
    Queued,
    /// Destination blocks reserved, KV not yet valid
    /// (`WAITING_FOR_REMOTE_KVS`): in the skipped queue, where the waiting
    /// loop passes over it (keeping its place) until it is activated.
    Reserved,
}

/// One request's state; see the module docs.
///
/// Laid out by hand (`repr(C)`, one cache line aligned): everything a decode
/// pass reads or writes for a running request sits in the first 64 bytes, so
/// an ordinary pass costs one cache line per request. Between two passes of
/// one worker every other worker runs, so these records are cold when a pass
/// starts; the rest (kind, hashes, handoff handles) is read at admission,
/// block boundaries and handoff transitions only.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub(crate) struct Seq {
    // -- Hot: touched by every pass of a running request. --
    /// Tokens whose KV is computed (vLLM `num_computed_tokens`).
    pub(crate) computed: u64,
    pub(crate) id: RequestId,
    /// The block table, in token order.
    pub(crate) blocks: Vec<u32>,
    pub(crate) prompt: u32,
    /// Output tokens sampled so far.
    pub(crate) outputs: u32,
    /// Output tokens to generate, at least one.
    pub(crate) max_out: u32,
    /// Leading blocks that are published cache (hit or committed).
    pub(crate) published: u32,
    pub(crate) phase: Phase,
    /// The owner kind this request's references count under.
    pub(crate) owner: Owner,
    /// Sampled at least once since (re)admission: its passes are decodes.
    pub(crate) decoding: bool,
    /// An activated destination waiting with its whole prompt KV in place.
    pub(crate) prebuilt: bool,
    /// `kind` is [`Kind::Source`]: the request never grows past its prompt.
    /// Kept here so a pass need not read `kind`, a cache line further.
    pub(crate) prefill_only: bool,
    // -- Cold. --
    pub(crate) kind: Kind,
    /// Chained hashes of the full blocks: the prompt's (computed once), then
    /// stand-ins for blocks filled by generated tokens as they are committed.
    pub(crate) hashes: Vec<u64>,
    /// What generated blocks' stand-in hashes are chained from
    /// (`core::generated_anchor`), fixed when the prompt is hashed so that
    /// committing a generated block does not read the prompt's last hash.
    pub(crate) anchor: u64,
    /// The lease handed out when it was pinned.
    pub(crate) lease: SourceLeaseId,
    /// The reservation handle handed out at reservation.
    pub(crate) reservation: DestinationReservationId,
    /// Prefix blocks reused at reservation (not republished on activation).
    pub(crate) matched: u32,
    /// How many of `hashes` belong to the prompt; the rest are stand-ins
    /// for blocks filled by generated tokens.
    pub(crate) prompt_hashes: u32,
    /// A queued destination was already reported as not granted.
    pub(crate) reported_unavailable: bool,
    /// A granted destination whose pull was below `kv_recompute_threshold`:
    /// nothing is read, and on activation it prefills the tokens past its
    /// prefix hit itself (module `handoff`).
    pub(crate) recompute: bool,
    /// Its LoRA adapter's `lora_int_id`, 0 on the base model (vLLM counts
    /// only ids above 0 as adapters).
    pub(crate) lora: u32,
}

// The hot fields must stay within the record's first cache line.
const _: () = assert!(std::mem::offset_of!(Seq, prefill_only) < 64);

impl Seq {
    fn vacant() -> Seq {
        Seq {
            id: RequestId(0),
            prompt: 0,
            max_out: 1,
            kind: Kind::Ordinary,
            phase: Phase::Vacant,
            hashes: Vec::new(),
            anchor: 0,
            blocks: Vec::new(),
            owner: Owner::Active,
            computed: 0,
            outputs: 0,
            published: 0,
            decoding: false,
            prebuilt: false,
            prefill_only: false,
            lease: SourceLeaseId(0),
            reservation: DestinationReservationId(0),
            matched: 0,
            prompt_hashes: 0,
            reported_unavailable: false,
            recompute: false,
            lora: 0,
        }
    }

    /// The sequence the request must have computed before it samples next
    /// (vLLM `Request.num_tokens`): a handoff prefill never grows past its
    /// prompt.
    pub(crate) fn num_tokens(&self) -> u64 {
        if self.prefill_only {
            u64::from(self.prompt)
        } else {
            u64::from(self.prompt) + u64::from(self.outputs)
        }
    }
}

/// Entries of a vacated slot's buffers kept for the next request.
const KEEP_CAPACITY: usize = 1024;

/// Reusable request slots.
#[derive(Clone, Debug, Default)]
pub(crate) struct Slab {
    seqs: Vec<Seq>,
    vacant: Vec<u32>,
}

impl Slab {
    /// Takes a slot for `request` (hashes not yet filled) and returns its
    /// index. A reused slot keeps its buffers' capacity.
    pub(crate) fn insert(&mut self, request: &Request, kind: Kind, phase: Phase) -> u32 {
        let idx = match self.vacant.pop() {
            Some(i) => i,
            None => {
                self.seqs.push(Seq::vacant());
                (self.seqs.len() - 1) as u32
            }
        };
        let s = &mut self.seqs[idx as usize];
        s.id = request.id;
        s.prompt = request.prompt_tokens;
        s.max_out = request.max_output_tokens.max(1);
        s.kind = kind;
        s.prefill_only = matches!(kind, Kind::Source(_));
        s.phase = phase;
        s.hashes.clear();
        s.anchor = 0;
        s.blocks.clear();
        s.owner = Owner::Active;
        s.computed = 0;
        s.outputs = 0;
        s.published = 0;
        s.decoding = false;
        s.prebuilt = false;
        s.lease = SourceLeaseId(0);
        s.reservation = DestinationReservationId(0);
        s.matched = 0;
        s.prompt_hashes = 0;
        s.reported_unavailable = false;
        s.recompute = false;
        s.lora = request.lora.as_ref().map_or(0, |l| l.id);
        idx
    }

    /// Returns a slot; its block table must already be released. Buffers
    /// past [`KEEP_CAPACITY`] are dropped rather than kept for reuse, so the
    /// slab's memory follows the requests in flight, not the longest prompts
    /// ever seen (one allocation per long request is noise next to its
    /// per-block work).
    pub(crate) fn remove(&mut self, idx: u32) {
        if let Some(s) = self.seqs.get_mut(idx as usize) {
            if s.phase != Phase::Vacant {
                s.phase = Phase::Vacant;
                s.blocks.clear();
                if s.blocks.capacity() > KEEP_CAPACITY {
                    s.blocks = Vec::new();
                }
                if s.hashes.capacity() > KEEP_CAPACITY {
                    s.hashes = Vec::new();
                }
                self.vacant.push(idx);
            }
        }
    }

    /// Loads the hot line of every record in `slots` in one tight loop.
    /// Safe Rust has no prefetch instruction; independent loads with nothing
    /// else between them still overlap their cache misses, where the pass
    /// loop, with a request's whole scheduling between two records, pays
    /// them one after another. Changes nothing.
    pub(crate) fn warm(&self, slots: &[u32]) {
        let mut sum = 0u64;
        for &s in slots {
            if let Some(seq) = self.seqs.get(s as usize) {
                sum = sum.wrapping_add(seq.computed);
            }
        }
        std::hint::black_box(sum);
    }

    pub(crate) fn get(&self, idx: u32) -> &Seq {
        &self.seqs[idx as usize]
    }

    pub(crate) fn get_mut(&mut self, idx: u32) -> &mut Seq {
        &mut self.seqs[idx as usize]
    }

    /// Every live slot (invariant checks).
    #[cfg(test)]
    pub(crate) fn live(&self) -> impl Iterator<Item = (u32, &Seq)> {
        self.seqs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.phase != Phase::Vacant)
            .map(|(i, s)| (i as u32, s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_core::Instant;

    #[test]
    fn vacated_slots_keep_small_buffers_and_drop_large_ones() {
        let req = |id: u64, prompt: u32| Request {
            id: RequestId(id),
            prompt_tokens: prompt,
            max_output_tokens: 1,
            prefix_hashes: Vec::new(),
            hash_block_tokens: 512,
            session: None,
            arrival: Instant::ZERO,
            lora: None,
        };
        let mut slab = Slab::default();
        let small = slab.insert(&req(1, 64), Kind::Ordinary, Phase::Waiting);
        slab.get_mut(small).hashes.extend(0..100);
        slab.get_mut(small).blocks.extend(0..100);
        let large = slab.insert(&req(2, 1 << 20), Kind::Ordinary, Phase::Waiting);
        slab.get_mut(large).hashes.extend(0..50_000);
        slab.get_mut(large).blocks.extend(0..50_000);
        slab.remove(small);
        slab.remove(large);
        assert!(
            slab.get(small).hashes.capacity() >= 100,
            "small buffers are reused"
        );
        assert!(slab.get(large).hashes.capacity() <= KEEP_CAPACITY);
        assert!(slab.get(large).blocks.capacity() <= KEEP_CAPACITY);
        // A reused slot starts empty either way.
        let again = slab.insert(&req(3, 64), Kind::Ordinary, Phase::Waiting);
        assert!(slab.get(again).hashes.is_empty() && slab.get(again).blocks.is_empty());
    }
}
