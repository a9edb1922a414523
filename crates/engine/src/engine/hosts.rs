//! The hosts: who steps at an instant and up to which horizon, calls
//! through the port, and what their outputs become.
//!
//! With a lockstep layout ([`handoff_core::DpCoupling::Lockstep`]) the
//! ranks of a worker step as one group: when any of them wants to step and
//! none is in a pass, each rank that wants to runs one pass
//! ([`HostOp::StepPass`]), and every rank up ends the group's pass at its
//! slowest rank's end ([`HostOp::EndPass`]): a rank that ran nothing is
//! busy until then with a dummy batch, and every rank's outputs come then.
//! This is vLLM's `DPEngineCoreProc.run_busy_loop`
//! (`vllm/v1/engine/core.py`: a rank with no local work runs
//! `execute_dummy_batch` while any rank has unfinished requests) with the
//! model runner's padding of every rank's batch to the largest
//! (`coordinate_batch_across_dp`), and SGLang's `prepare_mlp_sync_batch`
//! (an idle rank runs a `ForwardMode.IDLE` batch while another runs). A
//! group whose ranks all found nothing to run does not step, as an idle
//! vLLM wave stops. Coupled ranks never fold passes: a rank's next pass
//! waits for its peers'.

use super::{Director, Engine, Ev, HostOp, HostPort, Route};
use crate::fault::FactFate;
use handoff_core::host::{HostInput, HostOutput, HostStatus};
use handoff_core::ids::{Generation, WorkerId};
use handoff_core::time::Instant;
use handoff_core::worker::WorkerEvent;

impl<P: HostPort, D: Director> Engine<P, D> {
    pub(super) fn forget_wake(&mut self, w: u32, t: Instant) {
        let wakes = &mut self.hosts[w as usize].wakes;
        if let Some(i) = wakes.iter().position(|x| *x == t) {
            wakes.swap_remove(i);
        }
    }

    /// Steps every host that wants to, in id order. Returns whether any
    /// stepped or stalled (something may now be due at this instant).
    pub(super) fn step_hosts(&mut self) -> bool {
        let mut any = false;
        let mut next = self.next_stepper(0);
        while let Some(w) = next {
            if self.cfg.dp.is_lockstep() {
                let group = self.cfg.dp.group(WorkerId(w));
                next = match group.end().checked_add(1) {
                    Some(after) => self.next_stepper(after),
                    None => None,
                };
                any |= self.step_group(group);
                continue;
            }
            // Stepping a host changes only its own status (its effects on
            // others are scheduled events), so who steps after it is known
            // before it steps.
            next = self.next_stepper(w + 1);
            any |= self.step_host(w, next.is_none());
        }
        any
    }

    /// Steps the lockstep group `ranks` (module docs), one of which wants
    /// to. Returns whether any rank stepped or stalled; `false` while the
    /// group is in a pass (a restarted rank waits for its end).
    fn step_group(&mut self, ranks: std::ops::RangeInclusive<u32>) -> bool {
        let n = self.hosts.len() as u32;
        let up: Vec<u32> = ranks
            .filter(|&r| r < n && self.hosts[r as usize].up)
            .collect();
        if up
            .iter()
            .any(|&r| self.hosts[r as usize].status.step_end.is_some())
        {
            return false;
        }
        let now = self.now;
        let mut end: Option<Instant> = None;
        let mut any = false;
        for &r in &up {
            if !self.hosts[r as usize].status.wants_step {
                continue;
            }
            any = true;
            let mut outs = std::mem::take(&mut self.outs);
            let status = self
                .port
                .call(WorkerId(r), HostOp::StepPass { now }, &mut outs);
            self.absorb(r, &mut outs, true);
            self.outs = outs;
            match status.step_end {
                // Its status waits for the group's end (`EndPass`).
                Some(own) => end = end.max(Some(own)),
                None => self.update(r, status),
            }
        }
        if let Some(end) = end {
            for &r in &up {
                self.call(r, HostOp::EndPass { now, end });
            }
        }
        any
    }

    /// The first host from `from` on that wants to step now, dropping from
    /// `may_step` those that no longer do.
    fn next_stepper(&mut self, from: u32) -> Option<u32> {
        let mut word = from as usize / 64;
        let mut bits = self
            .may_step
            .get(word)
            .map_or(0, |b| b & (u64::MAX << (from % 64)));
        loop {
            while bits != 0 {
                let w = (word * 64) as u32 + bits.trailing_zeros();
                bits &= bits - 1;
                let h = &self.hosts[w as usize];
                if h.up && h.status.wants_step {
                    return Some(w);
                }
                self.may_step[word] &= !(1 << (w % 64));
            }
            word += 1;
            bits = *self.may_step.get(word)?;
        }
    }

    /// Steps host `w`, which wants to. Its step may cover several passes
    /// only if nothing it could not overtake happens before they end: it is
    /// the last host stepping at this instant (a later one's step would end
    /// inside the run, releasing outputs a one-pass-per-event run would
    /// have seen after some of this host's passes) and the passes end by
    /// the next event that is not a wake-up and by every host's bound (see
    /// the module docs).
    fn step_host(&mut self, w: u32, last: bool) -> bool {
        let horizon = if self.cfg.multi_step && last {
            self.horizon()
        } else {
            self.now
        };
        let now = self.now;
        self.call(w, HostOp::Step { now, horizon });
        true
    }

    /// How far the last host stepping now may run: to the next event that
    /// is not a wake-up, or to the least host bound before it. The least
    /// bound, while it is a step end not yet asked about, is replaced by
    /// what its host's quiet step end allows (each host is asked at most
    /// once per operation on it: the answer holds until the next).
    fn horizon(&mut self) -> Instant {
        let next = self.others.peek().map_or(u64::MAX, |k| (k.0 >> 64) as u64);
        loop {
            // Mostly the next event comes first: then no host is looked at.
            if self.bounds.min() >= next {
                return Instant(next);
            }
            let (least, h) = self.bounds.min_at();
            if !std::mem::take(&mut self.unasked[h]) {
                return Instant(least);
            }
            let Some(quiet) = self.director.quiet_events(WorkerId(h as u32)).kinds() else {
                return Instant(least);
            };
            // Up to, not including, the instant it could release anything
            // else; a bound that moves no later ends the search here.
            match self.port.quiet_until(WorkerId(h as u32), quiet) {
                Some(q) if q.0.saturating_sub(1) > least => {
                    self.bounds.set(h, q.0.saturating_sub(1));
                }
                _ => return Instant(least),
            }
        }
    }

    /// One operation on one host, then its outputs moved on.
    pub(super) fn call(&mut self, w: u32, op: HostOp) {
        let mut outs = std::mem::take(&mut self.outs);
        let status = self.port.call(WorkerId(w), op, &mut outs);
        self.absorb(w, &mut outs, true);
        self.outs = outs;
        self.update(w, status);
    }

    pub(super) fn update(&mut self, w: u32, status: HostStatus) {
        // A host bounds runs at its next wake-up, until a horizon that
        // could use more asks whether its step end is quiet
        // (`Engine::horizon`).
        let up = self.hosts[w as usize].up;
        let bound = match status.deadline {
            Some(d) if up => d.0,
            _ => u64::MAX,
        };
        self.bounds.set(w as usize, bound);
        self.unasked[w as usize] = up && status.step_end.is_some();
        let h = &mut self.hosts[w as usize];
        if h.status.drained != status.drained {
            if status.drained {
                self.undrained -= 1;
            } else {
                self.undrained += 1;
            }
        }
        if status.wants_step {
            self.may_step[w as usize / 64] |= 1 << (w % 64);
        }
        h.status = status;
        if let Some(d) = status.deadline {
            if !h.wakes.contains(&d) {
                h.wakes.push(d);
                self.at(d, Ev::Wake(w));
            }
        }
    }

    pub(super) fn absorb(&mut self, w: u32, outs: &mut Vec<HostOutput>, transmit: bool) {
        let now = self.now;
        let mut routes = std::mem::take(&mut self.routes);
        for o in outs.drain(..) {
            match o {
                HostOutput::Transmit(t) => {
                    if !transmit {
                        continue;
                    }
                    self.director.on_transmit(WorkerId(w), t.to, &t.msg, now);
                    let sent = t.at.max(now);
                    let base = sent + self.cfg.message_latency;
                    match self.faults.fact(WorkerId(w), t.to, sent) {
                        FactFate::Deliver { extra_delay } => {
                            let slot = self.msgs.put((t.msg, sent));
                            self.at(
                                base + extra_delay,
                                Ev::Deliver {
                                    to: t.to.0,
                                    from: w,
                                    slot,
                                },
                            );
                        }
                        FactFate::Drop => {}
                        FactFate::Duplicate {
                            first_extra,
                            second_extra,
                        } => {
                            for extra in [first_extra, second_extra] {
                                let slot = self.msgs.put((t.msg, sent));
                                self.at(
                                    base + extra,
                                    Ev::Deliver {
                                        to: t.to.0,
                                        from: w,
                                        slot,
                                    },
                                );
                            }
                        }
                    }
                }
                HostOutput::Refused(e) => self.director.on_refused(WorkerId(w), e, now),
                HostOutput::Event(e) => {
                    self.reads.observe(WorkerId(w), &e);
                    let changed = match e {
                        WorkerEvent::StartTransfer {
                            id,
                            source,
                            destination,
                            tokens,
                            at,
                            ..
                        } => self
                            .transfers
                            .start(id, WorkerId(w), source, destination, tokens, at),
                        WorkerEvent::KvChunkReady {
                            id,
                            source,
                            destination,
                            tokens,
                            at,
                            ..
                        } => {
                            self.transfers
                                .stream(id, WorkerId(w), source, destination, tokens, at)
                        }
                        WorkerEvent::RoleEnded {
                            id,
                            role: handoff_core::msg::Role::Source,
                            at,
                            ..
                        } => self.transfers.abandon(id, at),
                        _ => Vec::new(),
                    };
                    for c in changed {
                        self.at_transfer(c);
                    }
                    self.director.on_event(WorkerId(w), &e, now, &mut routes);
                    // The events whose buffers `Worker::recycle` takes back;
                    // the rest would only be moved there to be dropped.
                    if matches!(
                        e,
                        WorkerEvent::Step { .. }
                            | WorkerEvent::Tokens { .. }
                            | WorkerEvent::Kv { .. }
                    ) {
                        self.port.recycle(WorkerId(w), e);
                    }
                }
            }
        }
        self.route(&mut routes);
        self.routes = routes;
    }

    pub(super) fn route(&mut self, routes: &mut Vec<Route>) {
        if routes.is_empty() {
            return;
        }
        for r in routes.drain(..) {
            let generation = self
                .hosts
                .get(r.to.0 as usize)
                .map_or(Generation(0), |h| h.generation);
            let slot = self.submits.put((r.request, generation));
            let t = self.now + r.delay;
            self.at(t, Ev::Submit { to: r.to.0, slot });
        }
    }

    pub(super) fn deliver(&mut self, w: u32, input: HostInput) {
        let now = self.now;
        self.call(w, HostOp::Deliver { input, now });
    }
}
