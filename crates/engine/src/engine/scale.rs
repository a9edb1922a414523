//! Scale events in the loop: the [`FleetState`] decides, this file does
//! what it says with the engine's own operations (a kill, a restart, the
//! director's routing exclusion), so a removal unwinds exactly as a kill
//! does and a worker that becomes ready joins as a restarted one.

use super::{Director, Engine, Ev, HostOp, HostPort};
use crate::fault::{Fault, TimedFault};
use crate::scale::{FleetAction, FleetState, FleetSummary};
use handoff_core::ids::WorkerId;

impl<P: HostPort, D: Director> Engine<P, D> {
    /// At construction: the fleet's absent workers are down from time zero
    /// and the director routes nothing to them.
    pub(super) fn start_fleet(&mut self) {
        let absent: Vec<WorkerId> = self.fleet.initially_absent().collect();
        for w in absent {
            if let Some(h) = self.hosts.get_mut(w.0 as usize) {
                h.up = false;
                self.director.on_worker_down(w, self.now);
            }
        }
    }

    /// A scale event popped from the plan (or injected).
    pub(super) fn apply_scale(&mut self, fault: Fault) {
        let now = self.now;
        let seen = self.fleet.events().len();
        let action = match fault {
            Fault::ScaleUp { pool } => self.fleet.scale_up(pool, now),
            Fault::Ready { worker } => self.fleet.ready(worker, now),
            Fault::Drain { worker } => self.fleet.drain(worker, now),
            Fault::Remove { worker } => self.fleet.remove(worker, now),
            _ => FleetAction::None,
        };
        self.tell_scale(seen);
        self.act(action);
    }

    fn act(&mut self, action: FleetAction) {
        let now = self.now;
        match action {
            FleetAction::None => {}
            FleetAction::ReadyAt { worker, at } => {
                self.faults.schedule(at, Fault::Ready { worker });
                self.at(at, Ev::Fault);
            }
            // A worker that finished provisioning joins as a restarted one
            // does: a fresh core at its next generation, peers told.
            FleetAction::Start(worker) => self.apply(TimedFault {
                at: now,
                fault: Fault::Restart { worker },
            }),
            // The router drops it (Dynamo's endpoint invalidation); the host
            // keeps running and receives what was already on its way.
            FleetAction::StopRouting(w) => self.director.on_worker_down(w, now),
            FleetAction::Kill(worker) => self.apply(TimedFault {
                at: now,
                fault: Fault::Kill { worker },
            }),
            FleetAction::Retire(w) => {
                // Drained: no role to unwind and nothing on its way, so
                // peers and the director have nothing to hear. A worker a
                // kill took down while it drained is down already.
                if !self.hosts[w.0 as usize].up {
                    return;
                }
                self.hosts[w.0 as usize].up = false;
                let mut outs = std::mem::take(&mut self.outs);
                let status = self.port.call(w, HostOp::Teardown { now }, &mut outs);
                self.absorb(w.0, &mut outs, false);
                self.outs = outs;
                self.update(w.0, status);
            }
        }
    }

    /// Whether anything is still on its way to `w`: a request submitted to
    /// it or a fact sent to it (a reservation the router made before the
    /// drain is honoured).
    fn inbound(&self, w: u32) -> bool {
        self.queue.iter().any(|e| match e.ev {
            Ev::Submit { to, .. } | Ev::Deliver { to, .. } => to == w,
            _ => false,
        })
    }

    /// Draining workers whose hosts report drained, with nothing on its
    /// way to them, leave now. Whether any did (the instant has more work).
    pub(super) fn retire_drained(&mut self) -> bool {
        if !self.fleet.any_draining() {
            return false;
        }
        let done: Vec<WorkerId> = self
            .fleet
            .draining()
            .filter(|w| {
                self.hosts
                    .get(w.0 as usize)
                    .is_some_and(|h| h.status.drained)
                    && !self.inbound(w.0)
            })
            .collect();
        for &w in &done {
            let seen = self.fleet.events().len();
            let a = self.fleet.drained(w, self.now);
            self.tell_scale(seen);
            self.act(a);
        }
        !done.is_empty()
    }

    /// The director hears of the scale events recorded since the first
    /// `seen`, before the engine acts on them.
    fn tell_scale(&mut self, seen: usize) {
        for r in self.fleet.events().get(seen..).unwrap_or(&[]) {
            self.director.on_scale(r);
        }
    }

    /// At the end of an elastic run: the director hears what scaling did.
    pub(super) fn report_fleet(&mut self) {
        if self.fleet.is_elastic() {
            let summary = self.fleet.summary(self.now);
            self.director.on_fleet(&summary);
        }
    }

    /// The fleet's phases and history.
    pub fn fleet(&self) -> &FleetState {
        &self.fleet
    }

    /// What scaling cost up to now (the end of the run, once it is over).
    pub fn fleet_summary(&self) -> FleetSummary {
        self.fleet.summary(self.now)
    }
}
