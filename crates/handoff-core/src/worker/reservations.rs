//! The reservation queue: FIFO with head-of-line blocking, granted by the
//! core either at once or in its own step.

use super::Worker;
use crate::destination::{DestinationEvent, DestinationState};
use crate::scheduler::{CommandOutcome, SchedulerCommand, SchedulerCore, StepOutput};
use crate::time::Instant;

impl<S: SchedulerCore> Worker<S> {
    /// Turns the reservations a step granted or refused ([`StepOutput::reserved`],
    /// [`StepOutput::unavailable`]) into role events at `at`.
    pub(super) fn take_core_reservations(&mut self, out: &StepOutput, at: Instant) {
        for &(id, summary) in &out.reserved {
            let waiting = self
                .dests
                .get_mut(&id)
                .filter(|e| e.in_core && e.role.state() == DestinationState::Reserving);
            match waiting {
                Some(e) => {
                    e.in_core = false;
                    self.dest_event(id, DestinationEvent::Reserved { summary }, at);
                }
                None => {
                    // Nobody waits for it (cannot happen while dequeueing
                    // cancels in the core): end it at once, exactly once.
                    self.stats.stale += 1;
                    self.core
                        .apply(SchedulerCommand::CancelDestination { id }, at);
                }
            }
        }
        for &id in &out.unavailable {
            if self.dests.get(&id).is_some_and(|e| e.in_core) {
                self.dest_event(id, DestinationEvent::Unavailable, at);
            }
        }
    }

    /// Tries the reservation queue in FIFO order, stopping at the first
    /// attempt that does not fit (head-of-line blocking, as SGLang's
    /// `DecodePreallocQueue` and vLLM's waiting queue both do).
    pub(super) fn pump_reservations(&mut self, now: Instant) {
        while let Some(&id) = self.reserve_queue.front() {
            if let Some(p) = self.dests.get(&id).and_then(|e| e.push) {
                let cmd = SchedulerCommand::ReserveSnapshot {
                    id,
                    session: p.session,
                    tokens: p.tokens,
                };
                match self.core.apply(cmd, now) {
                    CommandOutcome::Reserved(summary) => {
                        self.reserve_queue.pop_front();
                        self.dest_event(id, DestinationEvent::Reserved { summary }, now);
                        continue;
                    }
                    CommandOutcome::Unavailable(_) => break,
                    _ => {
                        self.reserve_queue.pop_front();
                        self.dest_event(id, DestinationEvent::Unsupported, now);
                        continue;
                    }
                }
            }
            let Some(request) = self.dests.get_mut(&id).and_then(|e| e.request.take()) else {
                // Its role ended or already reserved: nothing to try.
                self.reserve_queue.pop_front();
                continue;
            };
            match self
                .core
                .apply(SchedulerCommand::ReserveDestination { id, request }, now)
            {
                CommandOutcome::Reserved(summary) => {
                    self.reserve_queue.pop_front();
                    self.dest_event(id, DestinationEvent::Reserved { summary }, now);
                }
                CommandOutcome::Queued => {
                    // The core orders it among its own waiting work and
                    // grants it in a step; nothing blocks behind it here.
                    self.reserve_queue.pop_front();
                    if let Some(e) = self.dests.get_mut(&id) {
                        e.in_core = true;
                    }
                }
                CommandOutcome::Unavailable(back) => {
                    if let Some(e) = self.dests.get_mut(&id) {
                        e.request = back;
                    }
                    self.dest_event(id, DestinationEvent::Unavailable, now);
                    break;
                }
                _ => {
                    self.reserve_queue.pop_front();
                    self.dest_event(id, DestinationEvent::Unsupported, now);
                }
            }
        }
    }
}
