//! SGLang's LoRA adapter limit (`--max-loras-per-batch`, default 8 in
//! SGLang; here `None`, LoRA off, unless set).
//!
//! After `srt/managers/scheduler.py` `Scheduler.get_new_batch_prefill`: the
//! adapters of the running batch (`lora_set`), of the requests this pass
//! already took (`adder.can_run_list`, the continuing chunked request
//! included) and of the candidate form a set that `tp_worker.can_run_lora_batch`
//! checks (`srt/lora/lora_manager.py` `LoRAManager.validate_lora_batch`:
//! `len(lora_ids) > max_loras_per_batch` fails). The base model (`lora_id`
//! `None`, here 0) counts as one id in that set, as it takes a slot of the
//! LoRA memory pool (`srt/lora/mem_pool.py`, zeroed weights). A candidate on
//! an adapter that would overflow the set is skipped (`continue`): it keeps
//! its place in the waiting queue and the loop goes on behind it; a base
//! request is never skipped for it. So a batch never holds more distinct
//! adapters than the limit, and a request over it waits for a later pass.
//! No pinned adapters are modelled.

use crate::core::SglangCore;
use handoff_perf::PerfModel;

/// The distinct `lora_id`s (0: the base model) one prefill pass holds.
pub(crate) struct LoraBatch {
    /// The limit; `None` admits everything and records nothing.
    max: Option<usize>,
    ids: Vec<u32>,
}

impl LoraBatch {
    /// Whether a request on `lora` may join (`validate_lora_batch` on the
    /// set with it; a base request always may).
    pub(crate) fn admits(&self, lora: u32) -> bool {
        match self.max {
            Some(max) if lora != 0 => {
                self.ids.len() + usize::from(!self.ids.contains(&lora)) <= max
            }
            _ => true,
        }
    }

    /// Records a request on `lora` in the pass.
    pub(crate) fn add(&mut self, lora: u32) {
        if self.max.is_some() && !self.ids.contains(&lora) {
            self.ids.push(lora);
        }
    }
}

impl<P: PerfModel> SglangCore<P> {
    /// The set a pass starts from: the running batch's adapters and those
    /// of `batch` (the continuing chunk); empty and never filled without a
    /// limit.
    pub(crate) fn batch_loras(&self, batch: &[(u32, u64)]) -> LoraBatch {
        let mut set = LoraBatch {
            max: self.cfg.max_loras_per_batch.map(|m| m.max(1) as usize),
            ids: Vec::new(),
        };
        if set.max.is_some() {
            let running = self.running.iter().copied();
            for idx in running.chain(batch.iter().map(|&(i, _)| i)) {
                if let Some(s) = self.seqs.get(idx) {
                    set.add(s.lora);
                }
            }
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_model_takes_a_slot_and_is_never_refused() {
        let mut set = LoraBatch {
            max: Some(2),
            ids: Vec::new(),
        };
        set.add(0);
        assert!(set.admits(1));
        set.add(1);
        assert!(set.admits(1), "an adapter already in the batch");
        assert!(!set.admits(2), "base + 1 + 2 would be 3 ids");
        assert!(set.admits(0), "a base request is never skipped");
        let off = LoraBatch {
            max: None,
            ids: Vec::new(),
        };
        assert!(off.admits(7));
    }
}
