//! The decode pass, retraction, and multi-pass advance.
//!
//! After SGLang `srt/managers/scheduler.py` `update_running_batch` and
//! `srt/managers/schedule_batch.py` `ScheduleBatch.check_decode_mem`,
//! `new_page_count_next_decode` and `retract_decode`:
//!
//! - each decode pass writes one token of KV per request; a request needs a
//!   fresh page when its KV length is a whole number of pages;
//! - when the free pages do not cover that, the cache is evicted (LRU
//!   unlocked leaves); if still short, requests are retracted — fewest
//!   output tokens first, longest prompt first among equals — until the
//!   survivors fit, their KV released without caching; ordinary requests go
//!   back to the waiting queue to be recomputed, decode-side ones to the
//!   retracted queue with their KV offloaded ([`crate::retracted`]); the
//!   new-token ratio is re-estimated
//!   from the survivors, otherwise it decays by one step per pass.
//!
//! Multi-pass: while nothing can change the batch — no chunked or admissible
//! waiting request, no prebuilt request that could join, no request finishing
//! before the last pass, and enough *free* pages that no pass would have to
//! evict or retract — `k` passes are applied at once with the same result as
//! `k` single passes. The work is O(batch) plus one perf evaluation per pass
//! for the time line.

use crate::batch::emit_tokens;
use crate::core::SglangCore;
use crate::ratio::ratio_after_retract;
use crate::seq::{Kind, Phase};
use handoff_core::{Duration, Instant, QuietFloor, StepOutput};
use handoff_perf::PerfModel;

/// Passes added after the first one of a `step` call.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct MorePasses {
    pub(crate) passes: u64,
    pub(crate) duration: Duration,
    pub(crate) last: Duration,
}

impl<P: PerfModel> SglangCore<P> {
    /// Fresh pages the next decode pass needs (`new_page_count_next_decode`).
    pub(crate) fn decode_pages_needed(&self) -> u64 {
        // At one token per page every request's KV length is a whole number
        // of pages, so each needs one: no need to read the batch.
        if self.page == 1 {
            return self.running.len() as u64;
        }
        self.decoding
            .iter()
            .filter(|d| d.computed % self.page == 0)
            .count() as u64
    }

    /// One decode pass over the batch: `(batch size, context tokens)` or
    /// `None` when the batch is (or became) empty.
    pub(crate) fn decode_pass(&mut self, out: &mut StepOutput) -> Option<(u64, u64)> {
        if self.running.is_empty() {
            return None;
        }
        let need = self.decode_pages_needed();
        if self.ensure_free(need, true) {
            self.ratio.decay(1);
        } else {
            self.retract(out);
            if self.running.is_empty() {
                return None;
            }
        }
        let bs = self.running.len() as u64;
        let kv = self.running_kv_tokens;
        self.advance_running(1, out);
        Some((bs, kv))
    }

    /// Advances every running request by `k` tokens: allocates the pages the
    /// `k` new KV tokens cross into (the caller checked they are free), emits,
    /// and finishes those that reached their output length.
    pub(crate) fn advance_running(&mut self, k: u64, out: &mut StepOutput) {
        let mut finished = 0usize;
        let mut new_pages = 0u64;
        let (page, call) = (self.page, self.call);
        // The batch's entries, in order: a sequential walk, not a slab
        // lookup per request (`crate::batch`).
        for d in &mut self.decoding {
            let pages = if page == 1 {
                k
            } else {
                (d.computed + k).div_ceil(page) - d.computed.div_ceil(page)
            };
            d.computed += k;
            d.private_pages += pages;
            new_pages += pages;
            emit_tokens(
                (&mut d.emitted, &mut d.emit_call, &mut d.emit_idx),
                d.id,
                call,
                k,
                out,
            );
            if d.emitted >= d.max_output {
                finished += 1;
            }
        }
        self.private[crate::radix::Owner::Active as usize] += new_pages;
        self.running_kv_tokens += k * self.running.len() as u64;
        self.batch_sums.advance(k, self.running.len() as u64);
        if finished == 0 {
            return;
        }
        let mut keep = 0;
        for r in 0..self.running.len() {
            let (idx, d) = (self.running[r], self.decoding[r]);
            if d.emitted >= d.max_output {
                if let Some(s) = self.seqs.get_mut(idx) {
                    d.store(s);
                }
                self.leave_running_sums(idx);
                self.finish(idx, out);
            } else {
                self.running[keep] = idx;
                self.decoding[keep] = d;
                keep += 1;
            }
        }
        self.running.truncate(keep);
        self.decoding.truncate(keep);
        self.running_shrank = true;
    }

    /// `retract_decode`: see the module docs. SGLang asserts that a lone
    /// remaining request has room; here it is retracted too if it has not,
    /// so that pinned or reserved pages can never wedge the batch.
    fn retract(&mut self, out: &mut StepOutput) {
        // Everything below reads the batch through the slab.
        self.store_running();
        let mut order = std::mem::take(&mut self.scratch_order);
        order.clear();
        order.extend_from_slice(&self.running);
        // Stable sort, largest key first; victims are popped from the back.
        order.sort_by(|&a, &b| {
            let key = |i: u32| {
                self.seqs
                    .get(i)
                    .map_or((0, 0), |s| (s.emitted, u64::MAX - s.prompt))
            };
            key(b).cmp(&key(a))
        });
        let mut need = self.decode_pages_needed();
        let mut first = true;
        while !order.is_empty() {
            if (!first || order.len() == 1) && self.ensure_free(need, true) {
                break;
            }
            first = false;
            let Some(victim) = order.pop() else {
                break;
            };
            if self
                .seqs
                .get(victim)
                .is_some_and(|s| s.computed % self.page == 0)
            {
                need -= 1;
            }
            self.retract_one(victim, out);
        }
        let mut keep = 0;
        let (mut decoded, mut max_new) = (0u64, 0u64);
        for r in 0..self.running.len() {
            let idx = self.running[r];
            if let Some(s) = self.seqs.get(idx).filter(|s| s.phase == Phase::Running) {
                decoded += s.emitted;
                max_new += s.max_output;
                self.running[keep] = idx;
                self.decoding[keep] = self.decoding[r];
                keep += 1;
            }
        }
        self.running.truncate(keep);
        self.decoding.truncate(keep);
        self.running_shrank = true;
        self.ratio.set(ratio_after_retract(
            decoded,
            keep as u64,
            max_new,
            u64::from(self.cfg.retract_decode_steps),
        ));
        self.scratch_order = order;
    }

    /// Releases a running request's KV without caching it (`release_req`
    /// with `is_insert=False`). A decode-side (destination) request is
    /// offloaded to the retracted queue and resumes without recompute
    /// (see [`crate::retracted`]); an ordinary one is queued to be
    /// recomputed.
    fn retract_one(&mut self, idx: u32, out: &mut StepOutput) {
        self.leave_running_sums(idx);
        if self
            .seqs
            .get(idx)
            .is_some_and(|s| matches!(s.kind, Kind::Destination(_)))
        {
            self.offload_retracted(idx, out);
            return;
        }
        self.release_kv(idx, false);
        if let Some(s) = self.seqs.get_mut(idx) {
            s.phase = Phase::Waiting;
            s.retracted_fill = s.fill_len();
            self.retracted_fill += s.retracted_fill;
            out.preempted.push(s.id);
        }
        self.waiting.push_back(idx);
    }

    /// Whether the next passes are pure decode of an unchanged batch.
    pub(crate) fn decode_is_stable(&self) -> bool {
        let admission_skipped =
            self.waiting.is_empty() || (self.batch_is_full && !self.running_shrank);
        // A non-empty retracted queue may resume at any pass start.
        !self.running.is_empty()
            && self.chunked.is_none()
            && self.retracted.is_empty()
            && admission_skipped
            && (self.prebuilt.is_empty()
                || self.running.len() >= self.cfg.max_running_requests as usize)
    }

    /// Fresh pages `k` more passes take.
    fn pages_for_passes(&self, k: u64) -> u64 {
        self.decoding
            .iter()
            .map(|d| (d.computed + k).div_ceil(self.page) - d.computed.div_ceil(self.page))
            .sum()
    }

    /// Decode passes until the first request of the batch finishes (that
    /// pass included); `None` while a request is still to emit its first
    /// token: one that joined without a token (a prebuilt extend merged
    /// into a prefill pass) emits it in its first decode pass, which stays
    /// first in its call so that `first_step` times it.
    fn passes_to_first_finish(&self) -> Option<u64> {
        let mut until_finish = u64::MAX;
        for d in &self.decoding {
            if d.emitted == 0 {
                return None;
            }
            until_finish = until_finish.min(d.remaining_output());
        }
        Some(until_finish)
    }

    /// The most passes, up to `upto`, whose fresh pages `free` covers: at
    /// one token per page a closed form, otherwise a search.
    fn passes_fitting(&self, free: u64, upto: u64) -> u64 {
        if self.page == 1 {
            return upto.min(free / (self.running.len() as u64).max(1));
        }
        let (mut lo, mut hi) = (0u64, upto);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if self.pages_for_passes(mid) <= free {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    }

    /// [`handoff_core::SchedulerCore::quiet_floor`]. While the batch is
    /// stable (`decode_is_stable`: nothing can join it or be resumed, and
    /// no request is still to emit its first token) each pass only emits
    /// tokens until the one that finishes a request (the
    /// `until_finish`th), or the one after the free pages stop covering
    /// the passes (it may evict, a KV event, or retract, in no time). A
    /// decode pass caches nothing, so the floor is the same with KV events
    /// counted or not. Those passes take at least the next one's time when
    /// the perf model grows with work (and the next one's time is exact),
    /// and otherwise what [`PerfModel::stable_decode_floor`] bounds them by.
    /// Session bookkeeping is not vouched for: with sessions on, no
    /// promise.
    pub(crate) fn quiet_floor(&mut self) -> QuietFloor {
        if self.sessions_on() || !self.decode_is_stable() {
            return QuietFloor::default();
        }
        let Some(until_finish) = self.passes_to_first_finish() else {
            return QuietFloor::default();
        };
        let passes = self.passes_fitting(self.free_pages(), until_finish);
        let next = self.decode_memo.time(
            &self.perf,
            self.running.len() as u64,
            self.running_kv_tokens,
            self.total_tokens(),
        );
        let floor = match passes {
            0 => Duration::ZERO,
            n if self.perf.grows_with_work() => {
                next.saturating_mul(u32::try_from(n).unwrap_or(u32::MAX))
            }
            n => self
                .perf
                .stable_decode_floor(
                    self.running.len() as u64,
                    self.running_kv_tokens,
                    n,
                    self.total_tokens(),
                )
                .max(next),
        };
        QuietFloor {
            next: if passes == 0 { Duration::ZERO } else { next },
            pass: floor,
            kv: floor,
        }
    }

    /// Runs as many further stable decode passes as end by `horizon`,
    /// stopping at the pass in which the first request finishes and before
    /// any pass that would need more pages than are free.
    pub(crate) fn advance_stable_decode(
        &mut self,
        start: Instant,
        horizon: Instant,
        out: &mut StepOutput,
    ) -> MorePasses {
        let bs = self.running.len() as u64;
        let total = self.total_tokens();
        // Most calls end at the horizon after their first pass (another
        // worker's step ends within every pass): when not even one more pass
        // would end by it the answer is no passes whatever the batch holds,
        // so the batch is not read at all. Reading it (a line per request)
        // was a second walk of the batch per call beside `advance_running`.
        // Passes are timed uncounted while planned, and counted once the
        // ones run are known (below).
        let first_more = self
            .decode_memo
            .time(&self.perf, bs, self.running_kv_tokens, total);
        if start + first_more > horizon {
            return MorePasses::default();
        }
        let Some(until_finish) = self.passes_to_first_finish() else {
            return MorePasses::default();
        };
        // At one token per page memory is a closed form; otherwise it is
        // searched below, within the passes the horizon allows.
        let free = self.free_pages();
        let cap = if self.page == 1 {
            self.passes_fitting(free, until_finish)
        } else {
            until_finish
        };
        // The time line: how many passes end by the horizon. Each pass's
        // duration goes straight into `out.passes` (after the first pass's),
        // so the perf model is evaluated once per pass, not again when the
        // passes are listed.
        let mark = out.passes.len();
        out.passes.push(out.first_step);
        let mut more = MorePasses::default();
        let mut t = start;
        let passes = &mut out.passes;
        let kv = self.running_kv_tokens;
        self.perf.decode_run(bs, kv, total, cap, &mut |d| {
            if t + d > horizon {
                return false;
            }
            t = t + d;
            more.passes += 1;
            more.duration += d;
            more.last = d;
            passes.push(d);
            true
        });
        // Then memory: the largest k with pages_for_passes(k) <= free.
        let fits = if self.page == 1 {
            more.passes
        } else {
            self.passes_fitting(free, more.passes)
        };
        if fits < more.passes {
            // The first `fits` passes of the time line are the same passes.
            out.passes.truncate(mark + 1 + fits as usize);
            more = MorePasses::default();
            for &d in &out.passes[mark + 1..] {
                more.passes += 1;
                more.duration += d;
                more.last = d;
            }
        }
        if more.passes == 0 {
            out.passes.truncate(mark);
            return more;
        }
        self.perf
            .count_decode_run(bs, self.running_kv_tokens, total, more.passes);
        self.ratio.decay(more.passes);
        self.advance_running(more.passes, out);
        more
    }
}
