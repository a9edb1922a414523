//! The decode batch's per-request decode fields, held densely.
//!
//! A decode pass reads and writes the same few fields of every running
//! request (KV length, emitted tokens, private pages, this call's emission).
//! Read through the slab that is one cache line per request at a scattered
//! address, and with 128 workers interleaving their passes every line is
//! cold again by the worker's next pass. [`Decoding`] holds those fields for
//! the requests of the batch in one vector, parallel to
//! `SglangCore::running` and in its order, so a pass walks memory
//! sequentially.
//!
//! Ownership rule: while a request is in the batch its `Decoding` entry is
//! authoritative for these fields and the slab's copy is stale. The entry is
//! loaded from the slab when the request joins the batch
//! (`SglangCore::join_running`) and stored back before anything else reads
//! the request: when it leaves (finish, retraction, cancel) and, for the
//! whole batch, before a retraction sorts it (`SglangCore::store_running`).
//! Walks of the batch that only read these fields (the pages a pass needs,
//! the prefill budget's future decode tokens, the multi-pass horizon) read
//! the entries.

use crate::seq::Seq;
use handoff_core::{RequestId, StepOutput, TokenEmission};

/// One running request's decode fields; see the module docs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Decoding {
    /// Tokens whose KV exists (`Seq::computed`).
    pub(crate) computed: u64,
    /// Output tokens emitted so far (`Seq::emitted`).
    pub(crate) emitted: u64,
    /// Output tokens to emit (`Seq::max_output`, never changes).
    pub(crate) max_output: u64,
    /// Pages allocated outside the radix tree (`Seq::private_pages`).
    pub(crate) private_pages: u64,
    /// The step call whose output has an emission for it (`Seq::emit_call`).
    pub(crate) emit_call: u64,
    /// That emission's index in `StepOutput::tokens` (`Seq::emit_idx`).
    pub(crate) emit_idx: usize,
    /// The request (`Seq::id`, never changes).
    pub(crate) id: RequestId,
}

impl Decoding {
    /// The fields as `seq` holds them (on joining the batch).
    pub(crate) fn load(seq: &Seq) -> Self {
        Decoding {
            computed: seq.computed,
            emitted: seq.emitted,
            max_output: seq.max_output,
            private_pages: seq.private_pages,
            emit_call: seq.emit_call,
            emit_idx: seq.emit_idx,
            id: seq.id,
        }
    }

    /// Writes the mutable fields back to `seq`.
    pub(crate) fn store(&self, seq: &mut Seq) {
        debug_assert_eq!(seq.id, self.id, "a batch entry stored to another request");
        seq.computed = self.computed;
        seq.emitted = self.emitted;
        seq.private_pages = self.private_pages;
        seq.emit_call = self.emit_call;
        seq.emit_idx = self.emit_idx;
    }

    /// Output tokens still to emit (`Seq::remaining_output`).
    pub(crate) fn remaining_output(&self) -> u64 {
        self.max_output.saturating_sub(self.emitted)
    }
}

/// Adds `n` tokens to a request's emission of step call `call`: merged into
/// the emission it already has in `out` from this call, else a new one. The
/// one emission rule for the slab's records and the batch's entries.
#[inline]
pub(crate) fn emit_tokens(
    (emitted, emit_call, emit_idx): (&mut u64, &mut u64, &mut usize),
    id: RequestId,
    call: u64,
    n: u64,
    out: &mut StepOutput,
) {
    let first = *emitted == 0;
    *emitted += n;
    let n32 = u32::try_from(n).unwrap_or(u32::MAX);
    if *emit_call == call {
        if let Some(e) = out.tokens.get_mut(*emit_idx) {
            e.tokens = e.tokens.saturating_add(n32);
            return;
        }
    }
    *emit_call = call;
    *emit_idx = out.tokens.len();
    out.tokens.push(TokenEmission {
        request: id,
        tokens: n32,
        first,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seq::{Kind, Phase};

    #[test]
    fn store_after_load_round_trips_and_emissions_merge_within_a_call() {
        let mut seq = Seq::new(RequestId(7), Kind::Ordinary, Phase::Running, 10, 5, vec![]);
        seq.computed = 10;
        seq.private_pages = 3;
        let mut d = Decoding::load(&seq);
        let mut out = StepOutput::default();
        emit_tokens(
            (&mut d.emitted, &mut d.emit_call, &mut d.emit_idx),
            d.id,
            1,
            1,
            &mut out,
        );
        emit_tokens(
            (&mut d.emitted, &mut d.emit_call, &mut d.emit_idx),
            d.id,
            1,
            2,
            &mut out,
        );
        assert_eq!(out.tokens.len(), 1, "one emission per call");
        assert_eq!((out.tokens[0].tokens, out.tokens[0].first), (3, true));
        emit_tokens(
            (&mut d.emitted, &mut d.emit_call, &mut d.emit_idx),
            d.id,
            2,
            1,
            &mut out,
        );
        assert_eq!(out.tokens.len(), 2, "a new call, a new emission");
        assert!(!out.tokens[1].first);
        d.computed += 4;
        d.private_pages += 4;
        d.store(&mut seq);
        assert_eq!(
            (
                seq.computed,
                seq.emitted,
                seq.private_pages,
                seq.emit_call,
                seq.emit_idx
            ),
            (14, 4, 7, 2, 1)
        );
        assert_eq!(d.remaining_output(), 1);
    }
}
