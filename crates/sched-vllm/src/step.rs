//! Forward passes, after vLLM `vllm/v1/core/sched/scheduler.py`
//! `Scheduler.schedule` and `Scheduler.update_from_output`.
//!
//! One pass:
//! 1. Running requests in admission order each get their pending tokens
//!    (one for a decode, the rest of the prompt chunk for a prefill) within
//!    `max_num_batched_tokens`. A request whose next tokens need a block that
//!    is not free preempts the newest running request by recompute, repeatedly,
//!    possibly itself (`self.running.pop()` + `_preempt_request`).
//! 2. Only if nothing was preempted, waiting requests are admitted FIFO while
//!    a running slot (`max_num_seqs`) and token budget remain, activated
//!    destinations first (module `admit`). Queued destinations are granted
//!    their blocks there (taking no slot or budget; the first that does not
//!    fit stops the loop), and destinations waiting for their KV are passed
//!    over. A prefix-cache
//!    hit skips its full blocks (never the last prompt token); admission needs
//!    the whole sequence to fit, plus the watermark while anything runs
//!    (`allocate_slots(full_sequence_must_fit=scheduler_reserve_full_isl)`);
//!    the first request that does not fit stops admission (while nothing
//!    runs it is passed over instead, for liveness). Chunked prefill
//!    lets a long prompt take what is left of the budget and continue in
//!    later passes.
//! 3. The pass costs `perf.pass(&Pass)`: each prefill chunk with the prefix
//!    already computed before it, each decode with its context after the
//!    pass (what attention reads), so in a pure decode run the context grows
//!    by exactly the batch size per pass.
//! 4. A request whose computed tokens reach its sequence samples one token;
//!    the first is flagged `first`. A handoff prefill instead moves to held
//!    ownership at that point and emits nothing. A request that reached its
//!    output length finishes and frees its blocks.
//!
//! Multi-pass: a first pass that finished, pinned, preempted or granted anything ends
//! the call, so those facts always happen at the call's end, where the
//! caller timestamps them. Tokens flagged `first` can only come from the
//! first pass (the planned passes are pure decodes of requests that already
//! sampled), so a first token is sampled at `now + first_step`. Otherwise,
//! while every running request decodes one token, all fit the token budget,
//! no waiting request could be admitted and no boundary allocation can fail,
//! the following passes are planned at once: `k` is bounded by the nearest
//! finish (the last planned pass may finish requests), by the free blocks the
//! block boundaries within `k` passes need (a histogram of the requests' room
//! in their last block, O(block_size) per probe of a binary search) and by
//! `horizon`, which the last planned pass ends by. Each planned pass costs one perf call; the batch is then
//! advanced by `k` tokens once, and the boundary blocks are taken pass by
//! pass in running order, exactly as `k` single passes would take them, so
//! the state afterwards (down to block ids and KV events) is the same.

use crate::core::VllmCore;
use crate::sequence::{Kind, Phase};
use handoff_core::{Duration, Instant, QuietFloor, StepOutput, TokenEmission};
use handoff_perf::Pass;
use handoff_perf::PerfModel;

/// The most decode passes whose block boundaries `free` blocks cover, for a
/// batch whose requests have `room_hist[r]` free slots `r` in their last
/// block (the histogram's length is the block size). A request with room
/// `r` crosses into a new block at passes `r + 1`, `r + 1 + bs`, ..., so `k
/// = q * bs + j` passes (`j < bs`) take `q` blocks from every request and
/// one more from each whose room is below `j`: the most passes are the
/// whole cycles `free` pays for, then as far into the next as the rest
/// covers.
pub(crate) fn passes_fitting(room_hist: &[u64], free: u64) -> u64 {
    let bs = room_hist.len() as u64;
    let batch: u64 = room_hist.iter().sum();
    if batch == 0 {
        return u64::MAX;
    }
    let cycles = free / batch;
    let mut rest = free - cycles * batch;
    // `j` more passes take one block from each request with room below
    // `j`: the prefix sums of the histogram.
    let mut j = 0u64;
    for &n in &room_hist[..room_hist.len().saturating_sub(1)] {
        if n > rest {
            break;
        }
        rest -= n;
        j += 1;
    }
    cycles.saturating_mul(bs).saturating_add(j)
}

/// What bounds the passes of a stable batch ([`VllmCore::plan_stable`]).
struct StablePlan {
    /// Passes until the first request finishes (that pass included).
    until_finish: u64,
    /// Computed tokens of the whole batch.
    context: u64,
    /// The most passes whose block boundaries the free pool covers.
    k_max: u64,
    /// The least room any request has in its last block.
    min_room: u64,
}

/// What one full pass did.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PassStats {
    pub(crate) duration: Duration,
    pub(crate) prefill_tokens: u64,
    pub(crate) preempted: bool,
}

impl<P: PerfModel> VllmCore<P> {
    /// The `SchedulerCore::step` contract; see the module docs.
    pub(crate) fn run_step(&mut self, now: Instant, horizon: Instant, out: &mut StepOutput) {
        out.clear();
        let first = self.run_pass(out);
        // Whatever this call leaves queued waited a pass without a grant.
        self.report_ungranted(out);
        let Some(first) = first else {
            return;
        };
        out.steps = 1;
        out.duration = first.duration;
        out.first_step = first.duration;
        out.last_step = first.duration;
        out.prefill_tokens = first.prefill_tokens;
        let next_start = now + first.duration;
        // A pass that finished, pinned or preempted something ends the call,
        // so every such fact happens at the call's end, where the caller
        // timestamps it.
        let changed = first.preempted
            || !out.finished.is_empty()
            || !out.pinned.is_empty()
            || !out.reserved.is_empty();
        if next_start >= horizon || changed || !self.batch_is_stable() {
            return;
        }
        self.run_stable(next_start, horizon, out);
    }

    /// The running half of `Scheduler.schedule`: each running request's new
    /// tokens within `budget` (which it lowers), preempting from the back
    /// when blocks run short. The scheduled requests go to `sched`; returns
    /// whether anything was preempted.
    fn schedule_running(&mut self, budget: &mut u64, out: &mut StepOutput) -> bool {
        let mut preempted = false;
        self.seqs.warm(&self.running);
        let bs = self.bs();

        let mut i = 0;
        while i < self.running.len() && *budget > 0 {
            let s = self.running[i];
            let seq = self.seqs.get(s);
            let new = (seq.num_tokens().saturating_sub(seq.computed)).min(*budget);
            if new == 0 {
                i += 1;
                continue;
            }
            let end = seq.computed + new;
            let have = seq.blocks.len() as u64;
            // A decode inside its last block needs nothing (a multiply, not
            // the division).
            let need = if end <= have * bs {
                0
            } else {
                self.blocks_for(end) - have
            };
            // Whether a block becomes full, `commit`'s own first test: most
            // passes neither allocate nor publish, and skip both calls.
            let fills = end >= (u64::from(seq.published) + 1) * bs;
            let mut scheduled = true;
            while need > self.pool.free_len() {
                let Some(victim) = self.running.pop() else {
                    scheduled = false;
                    break;
                };
                self.preempt(victim, out);
                preempted = true;
                if victim == s {
                    scheduled = false;
                    break;
                }
            }
            if !scheduled {
                break;
            }
            if need > 0 {
                self.grow(s, end);
            }
            if fills {
                self.commit(s, end);
            }
            self.sched.push((s, new));
            *budget -= new;
            i += 1;
        }
        preempted
    }

    /// Applies the scheduled tokens and shapes the pass from them.
    fn apply_scheduled(&mut self, out: &mut StepOutput) -> Pass {
        let mut pass = Pass::on_pool(self.pool.total() * self.bs());
        let mut left_batch = false;
        for k in 0..self.sched.len() {
            let (s, new) = self.sched[k];
            let seq = self.seqs.get_mut(s);
            if seq.decoding {
                pass.add_decode(seq.computed + new);
            } else {
                // The chunk's attention reads the prefix already computed
                // (cache hits and earlier chunks).
                pass.add_prefill(new, seq.computed);
            }
            seq.computed += new;
            if seq.computed < seq.num_tokens() {
                continue;
            }
            if seq.prefill_only {
                if let Kind::Source(id) = seq.kind {
                    self.pin(s, id, out);
                    left_batch = true;
                }
            } else {
                seq.outputs += 1;
                seq.decoding = true;
                seq.prebuilt = false;
                self.emitted.push(s);
                out.tokens.push(TokenEmission {
                    request: seq.id,
                    tokens: 1,
                    first: seq.outputs == 1,
                });
                if seq.outputs >= seq.max_out {
                    self.finish(s, out);
                    left_batch = true;
                }
            }
        }
        if left_batch {
            let seqs = &self.seqs;
            self.running
                .retain(|&s| seqs.get(s).phase == Phase::Running);
        }
        pass
    }

    /// One full pass. `None` when it neither scheduled a token nor preempted
    /// anything (no runnable work, or waiting work that does not fit).
    pub(crate) fn run_pass(&mut self, out: &mut StepOutput) -> Option<PassStats> {
        let mut budget = u64::from(self.cfg.max_num_batched_tokens);
        self.sched.clear();
        self.emitted.clear();
        let preempted = self.schedule_running(&mut budget, out);

        if !preempted {
            self.admit_waiting(budget, out);
        }
        if self.sched.is_empty() && !preempted {
            return None;
        }

        // One walk both shapes the pass and applies it: the shape reads
        // each request before its tokens count as computed, and nothing the
        // walk frees (a finish, a pin) is part of the shape.
        let pass = self.apply_scheduled(out);
        let prefill_tokens = pass.prefill_tokens;
        let duration = self.perf.pass(&pass);
        Some(PassStats {
            duration,
            prefill_tokens,
            preempted,
        })
    }

    /// Whether the next pass would be a pure decode of exactly the current
    /// running batch with no admission; see the module docs. Free blocks only
    /// shrink during such passes, which keeps a refused admission refused.
    fn batch_is_stable(&mut self) -> bool {
        if self.running.is_empty()
            || self.running.len() as u64 > u64::from(self.cfg.max_num_batched_tokens)
        {
            return false;
        }
        for &s in &self.running {
            let seq = self.seqs.get(s);
            if !seq.decoding || seq.num_tokens() != seq.computed + 1 {
                return false;
            }
        }
        let slots_left = (self.running.len() as u64) < u64::from(self.cfg.max_num_seqs);
        let budget_left = u64::from(self.cfg.max_num_batched_tokens) - self.running.len() as u64;
        if slots_left && budget_left > 0 && self.runnable_waiting() > 0 {
            if self.cfg.max_loras.is_some() && self.lora_waiting() {
                // The waiting loop may pass over a LoRA request and admit
                // one behind it: the head alone does not decide.
                return false;
            }
            // The first entry the waiting loop would not pass over (the
            // skipped queue first): refused now, it stays refused while free
            // blocks only shrink.
            let head = self
                .skipped
                .iter()
                .chain(self.waiting.iter())
                .copied()
                .find(|&s| self.seqs.get(s).phase != Phase::Reserved);
            if let Some(head) = head {
                let mut hits = std::mem::take(&mut self.hits);
                let admissible = if self.seqs.get(head).phase == Phase::Queued {
                    // Every running request decodes: no in-flight prefill
                    // reserves anything.
                    self.reservation_fits(head, 0, &mut hits).is_some()
                } else {
                    self.plan_admission(head, budget_left, &mut hits).is_some()
                };
                self.hits = hits;
                if admissible {
                    return false;
                }
            }
        }
        true
    }

    /// What bounds a stable batch's further passes: the running batch's
    /// room histogram (`room_hist`) is filled on the way.
    fn plan_stable(&mut self) -> StablePlan {
        let mut until_finish = u64::MAX;
        let mut context = 0u64;
        let mut min_room = u64::MAX;
        self.room_hist.clear();
        self.room_hist.resize(self.bs() as usize, 0);
        for &s in &self.running {
            let seq = self.seqs.get(s);
            until_finish = until_finish.min(u64::from(seq.max_out.saturating_sub(seq.outputs)));
            context += seq.computed;
            let room = self.room(s);
            min_room = min_room.min(room);
            self.room_hist[room as usize] += 1;
        }
        StablePlan {
            until_finish,
            context,
            k_max: passes_fitting(&self.room_hist, self.pool.free_len()).min(until_finish),
            min_room,
        }
    }

    /// [`handoff_core::SchedulerCore::quiet_floor`]. The next step runs a
    /// pass whenever a running request has tokens to compute, and if the
    /// blocks its running requests need fit the free pool, nobody is
    /// preempted: the pass is then at least the running requests' share of
    /// it, which [`Self::next_pass_floor`] times (admissions only add to
    /// it). While the next passes are moreover pure decodes of the running
    /// batch (`batch_is_stable`, and the waiting queue holds only
    /// destinations awaiting their KV, which a pass skips without a word),
    /// the first that can release more than tokens is the one that
    /// finishes a request (the `until_finish`th), with prefix caching the
    /// first that fills or crosses into a block (a KV event: a request
    /// with room `r` fills at pass `r`, or crosses at pass 1 when `r` is
    /// 0), or the one after the boundary blocks stop fitting in the free
    /// pool (it may preempt, in no time); each of those passes takes at
    /// least the next one's time.
    ///
    /// A perf model that may not grow with work (a profile whose table
    /// dips) times the next pass exactly only when nothing can be admitted
    /// into it (no runnable waiting request), and bounds the stable passes
    /// after it by [`PerfModel::stable_decode_floor`] instead.
    pub(crate) fn quiet_floor(&mut self) -> QuietFloor {
        let grows = self.perf.grows_with_work();
        if !grows && self.runnable_waiting() != 0 {
            return QuietFloor::default();
        }
        let next = self.next_pass_floor();
        if next.is_zero() || self.runnable_waiting() != 0 || !self.batch_is_stable() {
            return QuietFloor::next_only(next);
        }
        let plan = self.plan_stable();
        let batch = self.running.len() as u64;
        let pool = self.pool.total() * self.bs();
        let within = |passes: u64| {
            if grows {
                next.saturating_mul(u32::try_from(passes).unwrap_or(u32::MAX))
            } else {
                let first = plan.context + batch;
                self.perf.stable_decode_floor(batch, first, passes, pool)
            }
        };
        let first_kv = if self.cfg.enable_prefix_caching {
            plan.min_room.max(1)
        } else {
            u64::MAX
        };
        let quiet = plan.until_finish.min(plan.k_max);
        let kv = within(quiet).max(next);
        let pass = if first_kv >= quiet {
            kv
        } else {
            within(first_kv).max(next)
        };
        QuietFloor { next, pass, kv }
    }

    /// The running requests' part of the next pass, timed, if the blocks it
    /// needs fit the free pool (so nothing is preempted); zero otherwise or
    /// when it would compute nothing. The same walk as `run_pass`'s.
    fn next_pass_floor(&self) -> Duration {
        let bs = self.bs();
        let mut budget = u64::from(self.cfg.max_num_batched_tokens);
        let mut need = 0u64;
        let mut pass = Pass::on_pool(self.pool.total() * bs);
        let mut any = false;
        for &s in &self.running {
            if budget == 0 {
                break;
            }
            let seq = self.seqs.get(s);
            let new = (seq.num_tokens().saturating_sub(seq.computed)).min(budget);
            if new == 0 {
                continue;
            }
            let end = seq.computed + new;
            let have = seq.blocks.len() as u64;
            if end > have * bs {
                need += self.blocks_for(end) - have;
            }
            if seq.decoding {
                pass.add_decode(end);
            } else {
                pass.add_prefill(new, seq.computed);
            }
            budget -= new;
            any = true;
        }
        if !any || need > self.pool.free_len() {
            return Duration::ZERO;
        }
        self.perf.pass_uncounted(&pass)
    }

    /// Plans and applies the stable passes after the first one.
    fn run_stable(&mut self, start: Instant, horizon: Instant, out: &mut StepOutput) {
        let bs = self.bs();
        let batch = self.running.len() as u64;
        let StablePlan {
            until_finish: _,
            context,
            k_max,
            min_room: _,
        } = self.plan_stable();

        let total_tokens = self.pool.total() * bs;
        let mut t = start;
        out.passes.push(out.first_step);
        // Timed uncounted: a pass past the horizon is not run now.
        let (passes, duration, last) = (&mut out.passes, &mut out.duration, &mut out.last_step);
        let first = context + batch;
        let k = self
            .perf
            .decode_run(batch, first, total_tokens, k_max, &mut |d| {
                if t + d > horizon {
                    return false;
                }
                passes.push(d);
                *duration += d;
                *last = d;
                t = t + d;
                true
            });
        self.perf.count_decode_run(batch, first, total_tokens, k);
        if k == 0 {
            out.passes.clear();
            return;
        }
        out.steps += k;
        self.allocate_boundaries(k);

        let k32 = u32::try_from(k).unwrap_or(u32::MAX);
        let mut finished = false;
        // The first pass's emissions (`emitted`, their slots) are a
        // subsequence of the running batch in its order: nothing left the
        // batch, and the pass scheduled the batch in order, admissions last.
        // A merge walk finds each request's emission.
        let mut e = 0;
        for i in 0..self.running.len() {
            let s = self.running[i];
            let seq = self.seqs.get_mut(s);
            seq.computed += k;
            seq.outputs = seq.outputs.saturating_add(k32);
            finished |= seq.outputs >= seq.max_out;
            if self.emitted.get(e) == Some(&s) {
                out.tokens[e].tokens += k32;
                e += 1;
            } else {
                out.tokens.push(TokenEmission {
                    request: seq.id,
                    tokens: k32,
                    first: false,
                });
            }
        }
        debug_assert_eq!(e, self.emitted.len(), "every first-pass emission merged");
        // The last planned pass allocates before anything in it finishes.
        if finished {
            for i in 0..self.running.len() {
                let s = self.running[i];
                let seq = self.seqs.get(s);
                if seq.outputs >= seq.max_out {
                    self.finish(s, out);
                }
            }
            let seqs = &self.seqs;
            self.running
                .retain(|&s| seqs.get(s).phase == Phase::Running);
        }
    }

    /// Free slots in `s`'s last block: the decode passes it can take before
    /// it needs a new block. Always below the block size, since a running
    /// request holds exactly the blocks its computed tokens need.
    fn room(&self, s: u32) -> u64 {
        let seq = self.seqs.get(s);
        (seq.blocks.len() as u64 * self.bs())
            .saturating_sub(seq.computed)
            .min(self.bs() - 1)
    }

    /// Gives the running batch the blocks `k` decode passes need and
    /// publishes the blocks those passes fill, in the order `k` single passes
    /// would: pass by pass, and within a pass in running order, each request
    /// allocating before it publishes. A request with room `r` crosses a
    /// block boundary at passes `r + 1`, `r + 1 + bs`, ... and fills a block
    /// at passes `r`, `r + bs`, ..., so pass `j` (from 1) allocates for the
    /// requests whose room is `(j - 1) mod bs` and publishes for those whose
    /// room is `j mod bs`; a stable counting sort by room makes each pass
    /// O(its crossings), and merging the two runs by running position keeps
    /// the order of the KV events exactly that of single passes.
    fn allocate_boundaries(&mut self, k: u64) {
        let bs = self.bs() as usize;
        self.room_start.resize(bs + 1, 0);
        self.room_cursor.resize(bs, 0);
        self.room_start[0] = 0;
        for r in 0..bs {
            self.room_start[r + 1] = self.room_start[r] + self.room_hist[r] as usize;
            self.room_cursor[r] = self.room_start[r];
        }
        self.by_room.clear();
        self.by_room.resize(self.running.len(), 0);
        for i in 0..self.running.len() {
            let r = self.room(self.running[i]) as usize;
            self.by_room[self.room_cursor[r]] = i as u32;
            self.room_cursor[r] += 1;
        }
        let publish = self.cfg.enable_prefix_caching;
        for j in 0..k {
            let ra = (j % bs as u64) as usize;
            let rp = ((j + 1) % bs as u64) as usize;
            let (mut a, a_end) = (self.room_start[ra], self.room_start[ra + 1]);
            let (mut p, p_end) = if publish {
                (self.room_start[rp], self.room_start[rp + 1])
            } else {
                (0, 0)
            };
            while a < a_end || p < p_end {
                let next_a = if a < a_end { self.by_room[a] } else { u32::MAX };
                let next_p = if p < p_end { self.by_room[p] } else { u32::MAX };
                if next_a <= next_p {
                    let s = self.running[next_a as usize];
                    let seq = self.seqs.get_mut(s);
                    self.events.seal();
                    if let Some(b) = self.pool.allocate(seq.owner, &mut self.events) {
                        seq.blocks.push(b);
                    }
                    a += 1;
                } else {
                    let s = self.running[next_p as usize];
                    // Its pass `j + 1` computes up to here.
                    let upto = self.seqs.get(s).computed + j + 1;
                    self.commit(s, upto);
                    p += 1;
                }
            }
        }
    }
}
