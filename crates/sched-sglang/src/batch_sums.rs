//! Sums over the decode batch that preallocation budgets read, kept as the
//! batch changes instead of recomputed by a walk of the batch per budget.
//!
//! SGLang's `DecodePreallocQueue._allocatable_token_budgets`
//! (`disaggregation/decode.py`) reads two quantities of the running batch
//! for every preallocation and every retracted-queue resume: the tokens a
//! retraction would give back (Σ `origin_input_ids + output_ids`) and the
//! largest single request's clipped `max_new_tokens + input`. Walking the
//! batch for them read a cache line per running request per reservation;
//! both change only when a request joins or leaves the batch or a decode
//! pass emits, so they are maintained there. The sums are exact integers, so
//! the budgets are the same numbers as the walk's.

use std::collections::BTreeMap;

/// The running batch's retractable tokens and its requests' single-request
/// needs; see the module docs.
#[derive(Clone, Debug, Default)]
pub(crate) struct BatchSums {
    /// Σ `prompt + emitted` over the batch.
    fill: u64,
    /// Multiset of `min(max_output, clip) + prompt` over the batch.
    needs: BTreeMap<u64, u32>,
}

impl BatchSums {
    /// A request with these counts joined the batch.
    pub(crate) fn join(&mut self, fill: u64, need: u64) {
        self.fill += fill;
        *self.needs.entry(need).or_default() += 1;
    }

    /// A request with these counts (as they are now) left the batch.
    pub(crate) fn leave(&mut self, fill: u64, need: u64) {
        debug_assert!(self.fill >= fill, "batch fill underflow");
        self.fill = self.fill.saturating_sub(fill);
        if let Some(n) = self.needs.get_mut(&need) {
            *n -= 1;
            if *n == 0 {
                self.needs.remove(&need);
            }
        } else {
            debug_assert!(false, "a request left the batch it never joined");
        }
    }

    /// Every one of `batch` requests emitted `k` more tokens.
    pub(crate) fn advance(&mut self, k: u64, batch: u64) {
        self.fill += k * batch;
    }

    /// Σ `prompt + emitted` over the batch.
    pub(crate) fn fill(&self) -> u64 {
        self.fill
    }

    /// The largest single-request need, `None` for an empty batch.
    pub(crate) fn largest_need(&self) -> Option<u64> {
        self.needs.last_key_value().map(|(&k, _)| k)
    }

    /// Requests counted; for consistency checks.
    #[cfg(test)]
    pub(crate) fn len(&self) -> u64 {
        self.needs.values().map(|&n| u64::from(n)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Against the walk it replaces: after any joins, advances and
        /// leaves, the sums equal those recomputed from the batch.
        #[test]
        fn sums_equal_a_walk_of_the_batch(
            ops in proptest::collection::vec((0u8..3, 0u64..50, 0u64..50, 0usize..16), 0..200),
        ) {
            let mut sums = BatchSums::default();
            // (prompt, emitted, need) per running request.
            let mut batch: Vec<(u64, u64, u64)> = Vec::new();
            for (op, a, b, pick) in ops {
                match op {
                    0 => {
                        sums.join(a + b, a + b / 2);
                        batch.push((a, b, a + b / 2));
                    }
                    1 => {
                        let k = b % 4;
                        sums.advance(k, batch.len() as u64);
                        for r in &mut batch {
                            r.1 += k;
                        }
                    }
                    _ if !batch.is_empty() => {
                        let (p, e, n) = batch.remove(pick % batch.len());
                        sums.leave(p + e, n);
                    }
                    _ => {}
                }
                let fill: u64 = batch.iter().map(|r| r.0 + r.1).sum();
                prop_assert_eq!(sums.fill(), fill);
                prop_assert_eq!(sums.largest_need(), batch.iter().map(|r| r.2).max());
                prop_assert_eq!(sums.len(), batch.len() as u64);
            }
        }
    }
}
