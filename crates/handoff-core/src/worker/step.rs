//! Time: timers firing, the core's steps and what they produce.

use super::{DropReason, TimerKind, Worker, WorkerEvent};
use crate::destination::{DestinationEvent, DestinationState};
use crate::ids::{HandoffId, RequestId};
use crate::scheduler::SchedulerCore;
use crate::source::{SourceEvent, SourceLease};
use crate::spares::take_filled;
use crate::time::Instant;

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
        let mut out = self.step_out.take().unwrap_or_default();
        self.core.step(now, horizon, &mut out);
        for &request in &out.shipped_first_tokens {
            self.events
                .push_back(WorkerEvent::FirstTokenFromPrefill { request, at: now });
        }
        let result = if out.steps == 0 {
            // No pass ran; a shipped first token may still have completed
            // a one-token request, which ends now.
            for &request in &out.finished {
                self.request_finished(request, now);
            }
            None
        } else {
            let end = now + out.duration;
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
            Some(end)
        };
        // Reservations the core granted (or could not grant) in its own
        // scheduling loop happen with the pass that did it: at its end, or
        // at `now` for a call that scheduled no token (it took no time).
        self.take_core_reservations(&out, result.unwrap_or(now));
        self.step_out = Some(out);
        let at = result.unwrap_or(now);
        self.pump_reservations(at);
        self.flush_kv(at);
        result
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
