//! The source (prefill) side of a handoff.
//!
//! After SGLang `srt/disaggregation/prefill.py`: a request enters through
//! the bootstrap queue (`PrefillBootstrapQueue`, which caps its
//! `max_new_tokens` at 1), is prefilled like any other request, and after
//! its last chunk moves — pages, request slot and radix lock included — to
//! the inflight queue while its KV is sent. Only when the transfer is done
//! (`process_disagg_prefill_inflight_queue`, poll Success) does
//! `release_kv_cache` cache its blocks, unlock the tree and free the slot.
//!
//! Here the held map keyed by [`HandoffId`] is that inflight queue. The
//! caller decides when the transfer (or the lease, `source_lease_ttl`) ends
//! and sends `ReleaseSource`; `CancelSource` aborts at any phase. Each ends
//! the hold exactly once; later commands for the id answer `Noop`.

use crate::core::SglangCore;
use crate::seq::{Kind, Phase, Seq};
use handoff_core::{CommandOutcome, HandoffId, Request};
use handoff_perf::PerfModel;

impl<P: PerfModel> SglangCore<P> {
    /// Queues a handoff prefill.
    pub(crate) fn submit_handoff_prefill(
        &mut self,
        id: HandoffId,
        request: Request,
    ) -> CommandOutcome {
        if self.sources.contains_key(&id) {
            return CommandOutcome::Noop;
        }
        let prompt = u64::from(request.prompt_tokens.max(1));
        if !self.fits_empty_pool(prompt, 1) {
            return CommandOutcome::Unsupported(Some(request));
        }
        let mut hashes = Vec::new();
        request.block_hashes(self.cfg.event_block_tokens, &mut hashes);
        let mut seq = Seq::new(
            request.id,
            Kind::Source(id),
            Phase::Waiting,
            prompt,
            u64::from(request.max_output_tokens),
            hashes,
        );
        // A reseed may bypass its prefill with the session's snapshot.
        seq.session = request.session.filter(|_| self.sessions_on());
        seq.lora = request.lora.as_ref().map_or(0, |l| l.id);
        let idx = self.seqs.insert(seq);
        self.waiting.push_back(idx);
        self.sources.insert(id, idx);
        self.sources_computing += 1;
        CommandOutcome::Submitted
    }

    /// The reader is done (or the lease expired): `release_kv_cache`.
    /// Only a held source can be released; use `CancelSource` before that.
    pub(crate) fn release_source(&mut self, id: HandoffId) -> CommandOutcome {
        let Some(&idx) = self.sources.get(&id) else {
            return CommandOutcome::Noop;
        };
        if self.seqs.get(idx).map(|s| s.phase) != Some(Phase::Held) {
            return CommandOutcome::Noop;
        }
        self.sources.remove(&id);
        if !self.return_lent_snapshot(idx) {
            self.release_kv(idx, true);
            self.seqs.remove(idx);
        }
        CommandOutcome::Applied
    }

    /// Aborts a handoff prefill wherever it is. Computed blocks stay cached
    /// (an aborted request's KV is released like a finished one's).
    pub(crate) fn cancel_source(&mut self, id: HandoffId) -> CommandOutcome {
        let Some(idx) = self.sources.remove(&id) else {
            return CommandOutcome::Noop;
        };
        match self.seqs.get(idx).map(|s| s.phase) {
            Some(Phase::Waiting) => {
                self.waiting.retain(|&i| i != idx);
                self.sources_computing = self.sources_computing.saturating_sub(1);
            }
            Some(Phase::Chunked) => {
                if self.chunked == Some(idx) {
                    self.chunked = None;
                }
                self.sources_computing = self.sources_computing.saturating_sub(1);
            }
            _ => {}
        }
        if !self.return_lent_snapshot(idx) {
            self.release_kv(idx, true);
            self.seqs.remove(idx);
        }
        CommandOutcome::Applied
    }
}
