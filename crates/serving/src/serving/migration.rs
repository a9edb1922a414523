//! Migration switches and what a checker asks about attempts.

use super::*;

impl<I> Serving<I> {
    /// Turns migration off: a request whose worker is lost fails at once
    /// (the behaviour before migration, which the DST checker's booking
    /// model follows exactly).
    pub fn set_migration(&mut self, on: bool) {
        self.migration = on;
    }

    /// The current handoff attempt of request `r`, if it is in flight and
    /// handed off.
    pub fn attempt_of(&self, r: RequestId) -> Option<HandoffId> {
        self.flights.get(&r).and_then(|f| f.attempt)
    }

    /// Whether request `r` was ever migrated as a new attempt.
    pub fn was_migrated(&self, r: RequestId) -> bool {
        self.rerouted.contains(&r)
    }

    /// Whether `id` is an attempt a migration voided.
    pub fn is_voided(&self, id: HandoffId) -> bool {
        self.voided.contains(&id)
    }
}
