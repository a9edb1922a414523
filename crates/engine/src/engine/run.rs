//! Running the loop: the clock, the event queue, and what the outside may
//! inject between events.

use super::{Director, Engine, Ev, HostPort, Scheduled, Unit};
use crate::fault::{Fault, TimedFault};
use crate::transfer::Completion;
use handoff_core::host::HostInput;
use handoff_core::ids::WorkerId;
use handoff_core::time::Instant;

impl<P: HostPort, D: Director> Engine<P, D> {
    /// Hands worker `w` an input now, outside the event queue (a harness
    /// re-delivering old facts, or cancelling at a phase it reached).
    pub fn inject(&mut self, w: WorkerId, input: HostInput) {
        if self.is_up(w) {
            self.deliver(w.0, input);
        }
    }

    /// Applies `fault` now, as if the plan had it at this instant. A
    /// `Partition` cuts the link from now until its `until`.
    pub fn inject_fault(&mut self, fault: Fault) {
        if let Fault::Partition { a, b, until } = fault {
            self.faults.cut(a, b, self.now, until);
        }
        self.apply(TimedFault {
            at: self.now,
            fault,
        });
    }

    /// Asks the director again for its next arrival. The engine asks only
    /// when it is built and after each arrival it handles, so a harness that
    /// gives its director a request after the director had run out (the
    /// scenario lab, arriving the next request at a phase it reached) calls
    /// this to have it scheduled. Does nothing while an arrival is already
    /// scheduled: handling that one asks again.
    pub fn arrivals_changed(&mut self) {
        if !self.arrival_pending {
            self.schedule_arrival();
        }
    }

    /// Runs instant by instant until `stop` holds after one (true), or
    /// nothing is left (false). Call [`Engine::run`] afterwards to finish.
    pub fn run_until(&mut self, mut stop: impl FnMut(&Self) -> bool) -> bool {
        while self.run_one() {
            if stop(self) {
                return true;
            }
        }
        stop(self)
    }

    /// The model time reached.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// When the next scheduled event is due, if any: what a wall-clock
    /// driver sleeps until (it may wake earlier for an input it injects).
    pub fn next_event_at(&self) -> Option<Instant> {
        self.queue.peek().map(Scheduled::at)
    }

    /// Runs every instant due at or before `limit`, in the same order as
    /// [`Engine::run_one`], then moves the clock to `limit` without
    /// handling anything later. A wall-clock driver calls it with the wall
    /// clock's model time, so arrivals it injects afterwards (at `limit`)
    /// are never in the engine's past. Nothing is torn down: the run goes on.
    pub fn advance_to(&mut self, limit: Instant) {
        loop {
            match self.unit_until(limit) {
                Unit::Handled | Unit::Stepped => {}
                Unit::Moved(true) => {}
                Unit::Moved(false) => break,
            }
        }
        self.now = self.now.max(limit);
    }

    /// [`Engine::unit`], except that the clock does not move past `limit`
    /// (`Moved(false)`: nothing more is due by then).
    fn unit_until(&mut self, limit: Instant) -> Unit {
        let due = matches!(self.queue.peek(), Some(e) if e.at() <= self.now);
        if due {
            if let Some(e) = self.pop() {
                self.handle(e.ev);
            }
            Unit::Handled
        } else if self.step_hosts() {
            Unit::Stepped
        } else if self.retire_drained() {
            Unit::Handled
        } else {
            match self.next_event_at() {
                Some(t) if t <= limit => {
                    self.now = self.now.max(t);
                    Unit::Moved(true)
                }
                _ => Unit::Moved(false),
            }
        }
    }

    pub(super) fn at(&mut self, t: Instant, ev: Ev) {
        self.seq += 1;
        let e = Scheduled::new(t.max(self.now), self.seq, ev);
        if !matches!(ev, Ev::Wake(_)) {
            self.others.push(std::cmp::Reverse(e.key));
        }
        self.queue.push(e);
    }

    /// The next event, off the queue (and off `others` if it is one).
    pub(super) fn pop(&mut self) -> Option<Scheduled> {
        let e = self.queue.pop()?;
        if !matches!(e.ev, Ev::Wake(_)) {
            let first = self.others.pop();
            debug_assert_eq!(first, Some(std::cmp::Reverse(e.key)));
        }
        Some(e)
    }

    pub(super) fn at_transfer(&mut self, c: Completion) {
        let at = c.at;
        let slot = self.completions.put(c);
        self.at(at, Ev::TransferDone(slot));
    }

    pub(super) fn schedule_arrival(&mut self) {
        self.arrival_pending = false;
        if let Some(t) = self.director.next_arrival() {
            self.arrival_pending = true;
            self.at(t, Ev::Arrival);
        }
    }

    /// Runs until nothing is left to happen, then tears down whatever is
    /// still held, hands the director the final states and returns it with
    /// the port.
    pub fn run(mut self) -> (D, P) {
        while self.run_one() {}
        self.finish();
        (self.director, self.port)
    }

    /// Handles the next instant's worth of work, or returns `false` when
    /// nothing is left. Tests use it to stop at a phase.
    pub fn run_one(&mut self) -> bool {
        loop {
            if let Unit::Moved(more) = self.unit() {
                return more;
            }
        }
    }

    /// Does the next single unit of work: handles one event due now, or,
    /// with none due, steps every host that wants to, or, with none wanting
    /// to, moves the clock to the next instant. Returns `false` when nothing
    /// is left. [`Engine::run_one`] is this repeated until the clock moves,
    /// so the order of operations is the same; a harness calling this can
    /// stop between two events of one instant (after a fact is sent and
    /// before it is delivered, or after a request arrives and before its
    /// worker steps).
    pub fn run_event(&mut self) -> bool {
        match self.unit() {
            Unit::Moved(more) => more,
            Unit::Handled | Unit::Stepped => true,
        }
    }

    fn unit(&mut self) -> Unit {
        let due = matches!(self.queue.peek(), Some(e) if e.at() <= self.now);
        if due {
            if let Some(e) = self.pop() {
                self.handle(e.ev);
            }
            Unit::Handled
        } else if self.step_hosts() {
            Unit::Stepped
        } else if self.retire_drained() {
            Unit::Handled
        } else {
            Unit::Moved(self.next_instant())
        }
    }

    /// Moves the clock to the next event, skipping wake-ups that can no
    /// longer matter (lazily cancelled timers once all work is done).
    fn next_instant(&mut self) -> bool {
        while let Some(e) = self.queue.peek().copied() {
            let (t, ev) = (e.at(), e.ev);
            if let Ev::Wake(w) = ev {
                if !self.arrival_pending
                    && self.faults.next_timed().is_none()
                    && self.undrained == 0
                {
                    self.queue.pop();
                    self.forget_wake(w, t);
                    continue;
                }
            }
            self.now = self.now.max(t);
            return true;
        }
        false
    }
}
