//! One due event handled, faults applied, and the end of a run.

use super::{Director, Engine, Ev, HostOp, HostPort, Undeliverable};
use crate::fault::{Fault, TimedFault};
use handoff_core::host::HostInput;
use handoff_core::ids::WorkerId;

impl<P: HostPort, D: Director> Engine<P, D> {
    pub(super) fn handle(&mut self, ev: Ev) {
        let now = self.now;
        match ev {
            Ev::Arrival => {
                let mut routes = std::mem::take(&mut self.routes);
                self.director.arrive(now, &mut routes);
                self.route(&mut routes);
                self.routes = routes;
                self.schedule_arrival();
            }
            Ev::Submit { to, slot } => {
                let Some((req, generation)) = self.submits.take(slot) else {
                    return;
                };
                let why = match self.hosts.get(to as usize) {
                    Some(h) if h.up && h.generation == generation => {
                        self.deliver(to, HostInput::Request(req));
                        return;
                    }
                    Some(h) if h.up => Undeliverable::WorkerRestarted,
                    _ => Undeliverable::WorkerDown,
                };
                let mut routes = std::mem::take(&mut self.routes);
                self.director
                    .on_undeliverable(WorkerId(to), &req, why, now, &mut routes);
                self.route(&mut routes);
                self.routes = routes;
            }
            Ev::Deliver { to, from, slot } => {
                let Some((msg, _sent)) = self.msgs.take(slot) else {
                    return;
                };
                // A fact in flight is lost with its sender (a dead process's
                // connection is gone) and with a link cut while it travels;
                // transports never deliver after reporting the peer lost.
                let sender_up = self.hosts.get(from as usize).is_some_and(|h| h.up);
                let cut = self
                    .faults
                    .is_partitioned(WorkerId(from), WorkerId(to), now);
                if sender_up && !cut && self.hosts.get(to as usize).is_some_and(|h| h.up) {
                    self.deliver(
                        to,
                        HostInput::Message {
                            from: WorkerId(from),
                            msg,
                        },
                    );
                }
            }
            Ev::TransferDone(slot) => {
                let Some(c) = self.completions.take(slot) else {
                    return;
                };
                if !self.transfers.is_current(&c) {
                    return;
                }
                if c.drain {
                    for n in self.transfers.reflow(now) {
                        self.at_transfer(n);
                    }
                    return;
                }
                for n in self.transfers.finish(c.id, now) {
                    self.at_transfer(n);
                }
                let moved = self.faults.transfer_ok();
                let result = self.reads.judge(c.id, moved);
                self.director.on_transfer_done(c.id, result.ok(), now);
                let w = c.owner.0;
                if self.hosts.get(w as usize).is_some_and(|h| h.up) {
                    self.deliver(w, HostInput::TransferDone { id: c.id, result });
                }
            }
            Ev::Wake(w) => {
                self.forget_wake(w, now);
                if self.hosts[w as usize].up {
                    self.call(w, HostOp::Advance { now });
                }
            }
            Ev::Fault => {
                while let Some(f) = self.faults.pop_due(now) {
                    self.apply(f);
                }
                if let Some(t) = self.faults.next_timed() {
                    self.at(t, Ev::Fault);
                }
            }
            Ev::PeerNotice => {
                while let Some(n) = self.notices.pop_due(now) {
                    let (w, l) = (n.watcher.0 as usize, n.lost.0 as usize);
                    let still_dead = self
                        .hosts
                        .get(l)
                        .is_some_and(|h| !h.up && h.generation == n.generation);
                    if still_dead && self.hosts.get(w).is_some_and(|h| h.up) {
                        self.deliver(n.watcher.0, HostInput::PeerLost(n.lost));
                    }
                }
            }
        }
    }

    pub(super) fn apply(&mut self, f: TimedFault) {
        let now = self.now;
        match f.fault {
            Fault::Kill { worker } => self.kill(worker.0),
            Fault::Restart { worker } => {
                let w = worker.0;
                if w as usize >= self.hosts.len() {
                    return;
                }
                // Restarting a worker that is up is a kill, then the restart.
                self.kill(w);
                let mut outs = std::mem::take(&mut self.outs);
                let status = self.port.call(worker, HostOp::Restart { now }, &mut outs);
                // A restarted worker's teardown is local: its peers learn
                // of the new generation, not of its old roles.
                self.absorb(w, &mut outs, false);
                self.outs = outs;
                let h = &mut self.hosts[w as usize];
                h.up = true;
                h.generation = h.generation.next();
                let generation = h.generation;
                self.update(w, status);
                let mut routes = std::mem::take(&mut self.routes);
                self.director
                    .on_worker_back(worker, generation, now, &mut routes);
                self.route(&mut routes);
                self.routes = routes;
                for p in 0..self.hosts.len() as u32 {
                    if p != w && self.hosts[p as usize].up {
                        self.deliver(
                            p,
                            HostInput::PeerGeneration {
                                peer: worker,
                                generation,
                            },
                        );
                    }
                }
            }
            Fault::ScaleUp { .. }
            | Fault::Ready { .. }
            | Fault::Drain { .. }
            | Fault::Remove { .. } => self.apply_scale(f.fault),
            Fault::Partition { .. } => {
                // Applied by the injector to each fact sent while it lasts.
            }
            Fault::Cancel { request } => {
                for (w, id) in self.director.cancel(request, now) {
                    if self.hosts.get(w.0 as usize).is_some_and(|h| h.up) {
                        self.deliver(
                            w.0,
                            HostInput::Cancel {
                                id,
                                reason: handoff_core::transition::CancelReason::Client,
                            },
                        );
                    }
                }
            }
        }
    }

    fn kill(&mut self, w: u32) {
        let now = self.now;
        if !self.hosts.get(w as usize).is_some_and(|h| h.up) {
            return;
        }
        self.hosts[w as usize].up = false;
        // The director hears first that the worker is down, so that
        // whatever it routes again avoids it; then what the worker had done
        // by now and its torn-down roles; then that it is lost.
        self.director.on_worker_down(WorkerId(w), now);
        let mut outs = std::mem::take(&mut self.outs);
        let status = self
            .port
            .call(WorkerId(w), HostOp::Teardown { now }, &mut outs);
        // A dead process sends nothing; its roles are recorded as torn down.
        self.absorb(w, &mut outs, false);
        self.outs = outs;
        self.update(w, status);
        let mut routes = std::mem::take(&mut self.routes);
        self.director.on_worker_lost(WorkerId(w), now, &mut routes);
        self.route(&mut routes);
        self.routes = routes;
        let generation = self.hosts[w as usize].generation;
        for p in 0..self.hosts.len() as u32 {
            if p != w && self.hosts[p as usize].up {
                let delay = self.cfg.peer_loss.delay_for(WorkerId(p));
                if delay.is_zero() {
                    self.deliver(p, HostInput::PeerLost(WorkerId(w)));
                } else {
                    // A heartbeating watcher (SGLang's decode) takes the
                    // peer for dead only after its missed probes.
                    let at = now + delay;
                    self.notices.push(crate::fault::LossNotice {
                        at,
                        watcher: WorkerId(p),
                        lost: WorkerId(w),
                        generation,
                    });
                    self.at(at, Ev::PeerNotice);
                }
            }
        }
    }

    pub(super) fn finish(&mut self) {
        let now = self.now;
        let mut torn_down = 0;
        let finals = self.port.finals();
        for f in &finals {
            let w = f.worker.0;
            if !f.drained && self.hosts.get(w as usize).is_some() {
                torn_down += f.live_handoffs;
                let mut outs = std::mem::take(&mut self.outs);
                let _ = self
                    .port
                    .call(f.worker, HostOp::Teardown { now }, &mut outs);
                self.absorb(w, &mut outs, false);
                self.outs = outs;
            }
        }
        let finals = if torn_down > 0 || finals.iter().any(|f| !f.drained) {
            self.port.finals()
        } else {
            finals
        };
        let counts = self.faults.injected();
        self.report_fleet();
        self.director.finish(now, &finals, torn_down, counts);
    }
}
