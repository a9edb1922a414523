//! The core's own consistency check, run by the harness after every
//! operation: every derived counter recomputed from the requests, and the
//! page and slot identities.

use crate::core::SglangCore;
use crate::radix::{Owner, OWNERS};
use crate::seq::{Phase, Seq};
use handoff_perf::PerfModel;

impl<P: PerfModel> SglangCore<P> {
    /// Recomputes every derived counter from the requests and checks the
    /// page and slot identities; for tests.
    pub(crate) fn check_consistency(&self) -> Result<(), String> {
        self.radix.check()?;
        let mut private = [0u64; OWNERS];
        private[Owner::Session as usize] += self.store.entry_pages();
        private[Owner::Reserved as usize] += self.store.pending_pages();
        let mut slots = 0u64;
        let mut running_kv = 0u64;
        if self.decoding.len() != self.running.len() {
            return Err("batch entries and running batch differ in length".into());
        }
        // The batch's requests as their entries hold them.
        let mut current: std::collections::HashMap<u32, Seq> = Default::default();
        for (&idx, d) in self.running.iter().zip(&self.decoding) {
            let mut s = self
                .seqs
                .get(idx)
                .ok_or("a running request is not in the slab")?
                .clone();
            if s.id != d.id || s.max_output != d.max_output {
                return Err(format!("batch entry of {:?} belongs to {:?}", s.id, d.id));
            }
            d.store(&mut s);
            current.insert(idx, s);
        }
        for (idx, seq) in self.seqs.iter_indexed() {
            let seq = current.get(&idx).unwrap_or(seq);
            private[seq.owner as usize] += seq.private_pages;
            slots += u64::from(seq.has_slot);
            if seq.phase == Phase::Running {
                running_kv += seq.computed;
            }
            let pages = seq.tree_blocks * self.radix.pages_per_node() + seq.private_pages;
            if seq.has_slot && pages != self.pages_for(seq.computed) {
                return Err(format!(
                    "{:?} holds {pages} pages for {} tokens",
                    seq.id, seq.computed
                ));
            }
        }
        self.check_session_slots()?;
        if private != self.private {
            return Err(format!("private {:?} != {:?}", self.private, private));
        }
        if slots + self.free_slots != self.cfg.total_request_slots() {
            return Err(format!("slots {slots} + free {}", self.free_slots));
        }
        let clip = u64::from(self.cfg.max_new_tokens_clip);
        let batch = self.running.iter().filter_map(|i| current.get(i));
        let fill: u64 = batch.clone().map(|s| s.prompt + s.emitted).sum();
        let largest = batch.map(|s| s.max_output.min(clip) + s.prompt).max();
        if fill != self.batch_sums.fill()
            || largest != self.batch_sums.largest_need()
            || self.batch_sums.len() != self.running.len() as u64
        {
            return Err("batch sums drifted".into());
        }
        if running_kv != self.running_kv_tokens {
            return Err(format!(
                "running kv {running_kv} != {}",
                self.running_kv_tokens
            ));
        }
        let used = self.radix.total_pages() + private.iter().sum::<u64>();
        if used > self.cfg.total_pages {
            return Err(format!("{used} pages used of {}", self.cfg.total_pages));
        }
        let retracted: u64 = self
            .waiting
            .iter()
            .filter_map(|&i| self.seqs.get(i))
            .map(|s| s.retracted_fill)
            .sum();
        if retracted != self.retracted_fill {
            return Err("retracted fill drifted".into());
        }
        let reserved = u64::from(self.cfg.num_reserved_decode_tokens);
        let mut offloaded = 0u64;
        for s in self.retracted.iter().filter_map(|&i| self.seqs.get(i)) {
            if s.phase != Phase::Retracted || s.has_slot || s.private_pages > 0 {
                return Err(format!("{:?} in the retracted queue holds KV", s.id));
            }
            offloaded += s.offloaded + reserved;
        }
        if offloaded != self.retracted_required {
            return Err("retracted queue requirement drifted".into());
        }
        Ok(())
    }

    /// The session slots' identities (each points at its idle or running
    /// request; the evictable set and its pages); for tests.
    fn check_session_slots(&self) -> Result<(), String> {
        let mut idle = 0u64;
        for (sid, slot) in &self.sessions.slots {
            let Some(seq) = self.seqs.get(slot.idx) else {
                return Err(format!("slot of {sid:?} has no request"));
            };
            if seq.session != Some(*sid) {
                return Err(format!("slot of {sid:?} points at another request"));
            }
            let evictable = self.sessions.evictable.contains(&(slot.lru, *sid));
            if evictable != (!slot.running && slot.push.is_none()) {
                return Err(format!("slot of {sid:?}: evictable {evictable}"));
            }
            if !slot.running && (seq.phase != Phase::SessionIdle || seq.owner != Owner::Session) {
                return Err(format!("idle slot of {sid:?} is {:?}", seq.phase));
            }
            if evictable {
                idle += seq.private_pages;
            }
        }
        if idle != self.sessions.evictable_pages
            || self.sessions.evictable.len() > self.sessions.slots.len()
        {
            return Err("evictable session pages drifted".into());
        }
        Ok(())
    }
}
