//! Per-request state (SGLang's `Req`) and the slab that holds it, so queues
//! and the running batch move small indices instead of requests.

use crate::radix::{Owner, NIL};
use handoff_core::{HandoffId, Instant, RequestId, SessionId};

/// Why the request is on this worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A client request: prefill, then decode here.
    Ordinary,
    /// A handoff prefill (source): prefill only, then held for its reader.
    Source(HandoffId),
    /// A destination whose KV comes from a peer; after activation it decodes
    /// like an ordinary request.
    Destination(HandoffId),
}

/// Where the request is in the scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// In the waiting queue, holding no KV and no slot.
    Waiting,
    /// Partly prefilled: SGLang's `chunked_req`.
    Chunked,
    /// In the decode batch.
    Running,
    /// Activated destination waiting to join the batch (prebuilt extend).
    Prebuilt,
    /// Completed handoff prefill in the inflight queue.
    Held,
    /// Preallocated destination awaiting its KV.
    Reserved,
    /// A retracted decode-side request whose KV was offloaded to host
    /// memory: holds no pages and no slot, and resumes without recompute.
    Retracted,
    /// A finished turn whose KV its session slot keeps for the next turn.
    SessionIdle,
}

/// One request's scheduler state. KV is described by counts only: the radix
/// path it locks (`node`, `tree_blocks`) and its private pages.
///
/// Layout: the decode fields come first (`repr(C)`) and the record starts
/// on a cache line (`align(64)`), so they share one line. While the
/// request runs they live in its batch entry (`Decoding`, in `batch.rs`);
/// joining and leaving the batch loads and stores them as that one line,
/// and the paths that read them outside the batch (admission, sessions,
/// retraction) read one line rather than the three a 192-byte record with
/// compiler-ordered fields could touch.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub(crate) struct Seq {
    // ---- decode fields (held by the batch entry while running) ----
    /// Tokens whose KV exists (or, for a reservation, is allocated).
    pub(crate) computed: u64,
    /// Output tokens emitted so far.
    pub(crate) emitted: u64,
    /// Output tokens to emit (at least 1).
    pub(crate) max_output: u64,
    /// Pages allocated outside the radix tree.
    pub(crate) private_pages: u64,
    /// The step call whose output already has an emission for this request.
    pub(crate) emit_call: u64,
    /// Index of that emission in `StepOutput::tokens`.
    pub(crate) emit_idx: usize,
    pub(crate) id: RequestId,
    /// Prompt tokens (at least 1).
    pub(crate) prompt: u64,
    // ---- cold ----
    pub(crate) kind: Kind,
    pub(crate) phase: Phase,
    /// Chained hashes of the prompt's full event blocks.
    pub(crate) hashes: Vec<u64>,
    /// Event blocks of the locked radix path.
    pub(crate) tree_blocks: u64,
    /// Deepest locked radix node, [`NIL`] for none.
    pub(crate) node: u32,
    /// Which category its pages count in.
    pub(crate) owner: Owner,
    /// Whether it holds a req-to-token slot.
    pub(crate) has_slot: bool,
    /// Tokens it must recompute after a retraction (0 if never retracted or
    /// already re-admitted); counted against preallocation like SGLang's
    /// `retracted_queue`.
    pub(crate) retracted_fill: u64,
    /// Tokens whose KV a decode-side retraction offloaded to host memory
    /// (`prompt + emitted - 1`, SGLang's `_pre_alloc_fill_len`); 0 otherwise.
    pub(crate) offloaded: u64,
    /// The session it is a turn of, when sessions are on (`None` otherwise,
    /// even if the request names one).
    pub(crate) session: Option<SessionId>,
    /// Whether the prefill bypass was already tried for it (hit or miss),
    /// so a request held at the queue head is checked and logged once.
    pub(crate) bypass_checked: bool,
    /// Its KV came from a snapshot entry (a bypassing reseed): when it
    /// ends, the KV goes back to the snapshot store instead of being freed.
    /// Holds the entry's ingest time.
    pub(crate) lent_snapshot: Option<Instant>,
    /// Its LoRA adapter's `lora_int_id`, 0 for the base model (SGLang's
    /// `lora_id` `None`).
    pub(crate) lora: u32,
}

impl Seq {
    /// A request with no KV yet.
    pub(crate) fn new(
        id: RequestId,
        kind: Kind,
        phase: Phase,
        prompt: u64,
        max_output: u64,
        hashes: Vec<u64>,
    ) -> Self {
        Seq {
            id,
            kind,
            phase,
            prompt: prompt.max(1),
            max_output: max_output.max(1),
            emitted: 0,
            hashes,
            computed: 0,
            tree_blocks: 0,
            node: NIL,
            owner: Owner::Active,
            private_pages: 0,
            has_slot: false,
            retracted_fill: 0,
            offloaded: 0,
            emit_call: 0,
            emit_idx: 0,
            session: None,
            lora: 0,
            bypass_checked: false,
            lent_snapshot: None,
        }
    }

    /// Tokens a (re)prefill must cover: SGLang's `fill_ids` =
    /// `origin_input_ids + output_ids`.
    pub(crate) fn fill_len(&self) -> u64 {
        self.prompt + self.emitted
    }

    /// Output tokens still to emit.
    pub(crate) fn remaining_output(&self) -> u64 {
        self.max_output.saturating_sub(self.emitted)
    }
}

/// A slab of requests with stable indices.
///
/// Occupancy is kept apart from the records (`live`), not as
/// `Option<Seq>`: an `Option`'s niche lies in a cold field past the first
/// cache line, so every lookup would read a second line just to learn the
/// slot is occupied. A vacant slot holds an empty placeholder (no heap
/// memory).
#[derive(Debug, Default)]
pub(crate) struct Slab {
    entries: Vec<Seq>,
    live: Vec<bool>,
    vacant: Vec<u32>,
}

impl Slab {
    /// Stores `seq` and returns its index.
    pub(crate) fn insert(&mut self, seq: Seq) -> u32 {
        match self.vacant.pop() {
            Some(i) => {
                self.entries[i as usize] = seq;
                self.live[i as usize] = true;
                i
            }
            None => {
                self.entries.push(seq);
                self.live.push(true);
                (self.entries.len() - 1) as u32
            }
        }
    }

    /// Removes and returns the request at `idx`.
    pub(crate) fn remove(&mut self, idx: u32) -> Option<Seq> {
        let live = self.live.get_mut(idx as usize).filter(|l| **l)?;
        *live = false;
        self.vacant.push(idx);
        let placeholder = Seq::new(
            RequestId(0),
            Kind::Ordinary,
            Phase::Waiting,
            0,
            0,
            Vec::new(),
        );
        Some(std::mem::replace(
            &mut self.entries[idx as usize],
            placeholder,
        ))
    }

    /// The request at `idx`.
    pub(crate) fn get(&self, idx: u32) -> Option<&Seq> {
        if *self.live.get(idx as usize)? {
            self.entries.get(idx as usize)
        } else {
            None
        }
    }

    /// The request at `idx`, mutably.
    pub(crate) fn get_mut(&mut self, idx: u32) -> Option<&mut Seq> {
        if *self.live.get(idx as usize)? {
            self.entries.get_mut(idx as usize)
        } else {
            None
        }
    }

    /// Live requests.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len() - self.vacant.len()
    }

    /// Every live request with its index; for tests.
    #[cfg(test)]
    pub(crate) fn iter_indexed(&self) -> impl Iterator<Item = (u32, &Seq)> {
        self.entries
            .iter()
            .zip(&self.live)
            .enumerate()
            .filter_map(|(i, (s, &live))| live.then_some((i as u32, s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_fields_share_the_first_cache_line() {
        use std::mem::{align_of, offset_of, size_of};
        // Slab entries are `Seq`s, so each starts on a line.
        assert_eq!(align_of::<Seq>(), 64);
        for end in [
            offset_of!(Seq, computed) + 8,
            offset_of!(Seq, emitted) + 8,
            offset_of!(Seq, max_output) + 8,
            offset_of!(Seq, private_pages) + 8,
            offset_of!(Seq, emit_call) + 8,
            offset_of!(Seq, emit_idx) + size_of::<usize>(),
            offset_of!(Seq, id) + size_of::<RequestId>(),
            offset_of!(Seq, prompt) + 8,
        ] {
            assert!(end <= 64, "a decode field ends at byte {end}");
        }
    }

    #[test]
    fn slab_reuses_indices() {
        let mut s = Slab::default();
        let mk = |i| Seq::new(RequestId(i), Kind::Ordinary, Phase::Waiting, 0, 0, vec![]);
        let a = s.insert(mk(1));
        let b = s.insert(mk(2));
        assert_eq!(s.get(a).map(|x| x.prompt), Some(1));
        assert_eq!(s.get(a).map(|x| x.max_output), Some(1));
        assert!(s.remove(a).is_some());
        assert!(s.remove(a).is_none());
        assert!(s.get(a).is_none());
        let c = s.insert(mk(3));
        assert_eq!(c, a);
        assert_eq!(s.len(), 2);
        assert_eq!(s.get(b).map(|x| x.id), Some(RequestId(2)));
    }
}
