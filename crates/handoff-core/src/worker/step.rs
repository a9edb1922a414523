//! Time: timers firing, the core's steps and what they produce.

use super::{DropReason, TimerKind, Worker, WorkerEvent};
use crate::destination::{DestinationEvent, DestinationState};
use crate::ids::{HandoffId, RequestId};
use crate::scheduler::SchedulerCore;
use crate::scheduler::StepOutput;
use crate::source::{SourceEvent, SourceLease};
use crate::spares::take_filled;
use crate::time::{Duration, Instant};

impl<S: SchedulerCore> Worker<S> {
    /// Fires every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        // A heartbeat only sends a fact: it frees nothing, so alone it gives
        // waiting reservations no new chance.
        let mut pump = false;
        while let Some((deadline, id, kind)) = self.timers.peek() {
            if deadline > now {
                break;
            }
            self.timers.pop();
            pump |= kind != TimerKind::Heartbeat;
            match kind {
                TimerKind::Lease => {
                    let due = self
                        .sources
                        .get(&id)
                        .is_some_and(|e| e.role.deadline() <= now);
                    if due {
                        self.source_event(id, SourceEvent::LeaseExpired, now);
                    }
                }
                TimerKind::Reservation => {
                    let due = self
                        .dests
                        .get(&id)
                        .is_some_and(|e| e.role.deadline() <= now);
                    if due {
                        self.dest_event(id, DestinationEvent::ReservationExpired, now);
                    }
                }
                TimerKind::Renewal => {
                    // Still queued for a reservation: keep the source's KV
                    // alive a while longer (the pump below retries too).
                    let waiting = self
                        .dests
                        .get(&id)
                        .is_some_and(|e| e.role.state() == DestinationState::Reserving);
                    if waiting {
                        self.renew_source_lease(id, now);
                    }
                }
                TimerKind::Heartbeat => self.heartbeat(id, now),
                TimerKind::Deferred => self.deliver_deferred(id, now),
                TimerKind::EarlyFacts => {
                    if let Some((exp, facts)) = self.early.remove(&id) {
                        if exp <= now {
                            self.stats.early_dropped += facts.len() as u64;
                            for f in &facts {
                                self.drop_fact(f.from, &f.msg, DropReason::Unknown, now);
                            }
                        } else {
                            self.early.insert(id, (exp, facts));
                        }
                    }
                }
            }
        }
        if pump {
            self.pump_reservations(now);
        }
        self.flush_kv(now);
    }

    /// The earliest pending deadline, if any. Timers are lazily cancelled, so
    /// a deadline may fire and find nothing to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.peek().map(|(t, _, _)| t)
    }

    /// Runs the core from `now`: one pass, plus further passes that end by
    /// `horizon` while nothing can change (see
    /// [`SchedulerCore::step`]). Returns when the step ends, or `None` when
    /// there was nothing to run.
    pub fn step(&mut self, now: Instant, horizon: Instant) -> Option<Instant> {
        let duration = self.step_pass(now, horizon)?;
        self.end_pass(now + duration)
    }

    /// The first half of [`Worker::step`]: runs the core from `now` (passes
    /// that end by `horizon` may be folded in) and returns the passes'
    /// modelled time, keeping their outcome until [`Worker::end_pass`]
    /// says when they end. With nothing to run it does what `step` does
    /// then (a shipped first token may end a one-token request now) and
    /// returns `None`. A pass still waiting for its end is ended first, at
    /// its own time.
    pub fn step_pass(&mut self, now: Instant, horizon: Instant) -> Option<Duration> {
        self.settle_pass();
        let mut out = self.step_out.take().unwrap_or_default();
        self.core.step(now, horizon, &mut out);
        if out.steps == 0 {
            self.finish_step(now, None, out);
            return None;
        }
        let duration = out.duration;
        self.step_out = Some(out);
        self.pass_start = Some(now);
        Some(duration)
    }

    /// The second half of [`Worker::step`]: the passes [`Worker::step_pass`]
    /// ran end at `end`, or at their own end if that is later. A later
    /// `end` stretches the last pass (a lockstep rank waits for its slowest
    /// peer inside the MoE all-to-all, so its tokens come with the group's
    /// pass). Everything the passes produced happens now, stamped as
    /// `step` stamps it. Returns the end, or `None` with no pass waiting.
    pub fn end_pass(&mut self, end: Instant) -> Option<Instant> {
        let start = self.pass_start.take()?;
        let mut out = self.step_out.take().unwrap_or_default();
        stretch_last_pass(&mut out, end.saturating_since(start));
        let end = start + out.duration;
        self.finish_step(start, Some(end), out);
        Some(end)
    }

    /// Whether a pass run by [`Worker::step_pass`] waits for its end.
    pub fn pass_pending(&self) -> bool {
        self.pass_start.is_some()
    }

    /// Ends a pass still waiting for its end at its own time.
    pub(super) fn settle_pass(&mut self) {
        if let Some(start) = self.pass_start {
            let own = self
                .step_out
                .as_ref()
                .map_or(Duration::ZERO, |o| o.duration);
            self.end_pass(start + own);
        }
    }

    /// Turns a step call's outcome into events: `end` is when its passes
    /// end (`None`: it ran none, and what it did happens at `now`).
    fn finish_step(&mut self, now: Instant, end: Option<Instant>, mut out: Box<StepOutput>) {
        for &request in &out.shipped_first_tokens {
            self.events
                .push_back(WorkerEvent::FirstTokenFromPrefill { request, at: now });
        }
        match end {
            None => {
                // No pass ran; a shipped first token may still have
                // completed a one-token request, which ends now.
                for &request in &out.finished {
                    self.request_finished(request, now);
                }
            }
            Some(end) => self.emit_passes(now, end, &mut out),
        }
        // Reservations the core granted (or could not grant) in its own
        // scheduling loop happen with the pass that did it: at its end, or
        // at `now` for a call that scheduled no token (it took no time).
        let at = end.unwrap_or(now);
        self.take_core_reservations(&out, at);
        self.step_out = Some(out);
        self.pump_reservations(at);
        self.flush_kv(at);
    }

    /// The events of passes that ran from `now` to `end`.
    fn emit_passes(&mut self, now: Instant, end: Instant, out: &mut StepOutput) {
        self.events.push_back(WorkerEvent::Step {
            start: now,
            steps: out.steps,
            duration: out.duration,
            first_step: out.first_step,
            last_step: out.last_step,
            passes: take_filled(&mut out.passes, &mut self.spare_passes),
            prefill_tokens: out.prefill_tokens,
        });
        if !out.tokens.is_empty() {
            self.events.push_back(WorkerEvent::Tokens {
                emissions: take_filled(&mut out.tokens, &mut self.spare_emissions),
            });
        }
        for &request in &out.preempted {
            self.events
                .push_back(WorkerEvent::Preempted { request, at: end });
        }
        let chunk_end = now + out.first_step;
        for c in &out.kv_chunks {
            let at = if c.before_pass { now } else { chunk_end };
            self.kv_chunk_ready(c.id, c.ready_tokens, at);
        }
        for p in &out.pinned {
            let lease = SourceLease {
                id: p.lease,
                blocks: p.blocks,
                tokens: p.tokens,
                deadline: end + self.caps.source_lease_ttl,
            };
            self.source_event(p.id, SourceEvent::PrefillPinned { lease }, end);
        }
        for (i, &request) in out.finished.iter().enumerate() {
            let at = if i < out.finished_at_start { now } else { end };
            self.request_finished(request, at);
        }
    }

    /// Streams a finished chunk of source `id` when its destination is
    /// reserved (destination-first; a source-first prefill has nowhere to
    /// send yet), clipped to the reservation's transfer.
    fn kv_chunk_ready(&mut self, id: HandoffId, ready: u64, at: Instant) {
        let Some(e) = self.sources.get(&id) else {
            return;
        };
        let (Some(summary), Some(destination)) = (e.role.reservation(), e.peer) else {
            return;
        };
        let tokens = ready
            .saturating_sub(summary.matched_prefix_tokens)
            .min(summary.transfer_tokens);
        if tokens > 0 {
            self.events.push_back(WorkerEvent::KvChunkReady {
                id,
                request: e.request_id,
                source: self.id,
                destination,
                tokens,
                at,
            });
        }
    }

    /// Reports a finished request and ends its active destination role.
    fn request_finished(&mut self, request: RequestId, at: Instant) {
        self.events
            .push_back(WorkerEvent::RequestFinished { request, at });
        if let Some(id) = self.active_dest.remove(&request) {
            self.dest_event(id, DestinationEvent::Finished, at);
        }
    }

    /// [`SchedulerCore::quiet_floor`], as far as the worker vouches for it
    /// too: a reservation waiting its turn is retried at every step end and
    /// may be granted at any of them (so only the next step's length
    /// stands), and anything not yet polled is not quiet.
    pub fn quiet_floor(&mut self) -> crate::QuietFloor {
        if !self.events.is_empty() || !self.transmits.is_empty() {
            return crate::QuietFloor::default();
        }
        let floor = self.core.quiet_floor();
        if self.reserve_queue.is_empty() {
            floor
        } else {
            crate::QuietFloor::next_only(floor.next)
        }
    }
}

/// Makes `out`'s passes last `total` when that is longer than they do: the
/// last pass takes the difference (with one pass, the first is the last).
fn stretch_last_pass(out: &mut StepOutput, total: Duration) {
    let Some(extra) = total
        .checked_sub(out.duration)
        .filter(|d| *d > Duration::ZERO)
    else {
        return;
    };
    out.duration = total;
    out.last_step = out.last_step.saturating_add(extra);
    if out.steps == 1 {
        out.first_step = out.last_step;
    }
    if let Some(last) = out.passes.last_mut() {
        *last = last.saturating_add(extra);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passes(durations: &[u64]) -> StepOutput {
        let ms = Duration::from_millis;
        let mut out = StepOutput {
            steps: durations.len() as u64,
            duration: ms(durations.iter().sum()),
            first_step: ms(durations[0]),
            last_step: ms(*durations.last().unwrap_or(&0)),
            ..StepOutput::default()
        };
        if durations.len() > 1 {
            out.passes = durations.iter().map(|&d| ms(d)).collect();
        }
        out
    }

    /// A stretch lengthens the last pass only, keeps the total consistent
    /// with the passes, and never shortens anything.
    #[test]
    fn stretching_lengthens_the_last_pass_only() {
        let ms = Duration::from_millis;
        let mut one = passes(&[4]);
        stretch_last_pass(&mut one, ms(9));
        assert_eq!(
            (one.duration, one.first_step, one.last_step),
            (ms(9), ms(9), ms(9))
        );
        assert!(one.passes.is_empty());

        let mut three = passes(&[5, 2, 3]);
        stretch_last_pass(&mut three, ms(14));
        assert_eq!(three.duration, ms(14));
        assert_eq!((three.first_step, three.last_step), (ms(5), ms(7)));
        assert_eq!(three.passes, [ms(5), ms(2), ms(7)]);
        assert_eq!(three.passes.iter().sum::<Duration>(), three.duration);

        let mut short = passes(&[5, 2]);
        stretch_last_pass(&mut short, ms(3));
        assert_eq!((short.duration, short.last_step), (ms(7), ms(2)));

        let mut huge = passes(&[1]);
        stretch_last_pass(&mut huge, Duration::MAX);
        assert_eq!(huge.duration, Duration::MAX);
    }
}
