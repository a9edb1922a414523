//! Hosts in this thread, and the one interpretation of a [`HostOp`].

use super::{HostOp, HostPort};
use handoff_core::host::{HostFinal, HostOutput, HostStatus, QuietKinds};
use handoff_core::ids::WorkerId;
use handoff_core::time::Instant;
use handoff_core::worker::WorkerEvent;

/// Hosts in this thread: the replay's port.
pub struct LocalHosts<'a, S: handoff_core::SchedulerCore> {
    hosts: Vec<handoff_core::host::WorkerHost<S>>,
    make_core: Box<dyn FnMut(WorkerId) -> S + 'a>,
}

impl<'a, S: handoff_core::SchedulerCore> LocalHosts<'a, S> {
    /// Hosts `hosts` (ids in order `0..n`); `make_core` builds a fresh core
    /// for a restarted worker.
    pub fn new(
        hosts: Vec<handoff_core::host::WorkerHost<S>>,
        make_core: impl FnMut(WorkerId) -> S + 'a,
    ) -> Self {
        LocalHosts {
            hosts,
            make_core: Box::new(make_core),
        }
    }

    /// The hosts, for inspection.
    pub fn hosts(&self) -> &[handoff_core::host::WorkerHost<S>] {
        &self.hosts
    }
}

impl<S: handoff_core::SchedulerCore> HostPort for LocalHosts<'_, S> {
    fn hosts(&self) -> u32 {
        self.hosts.len() as u32
    }

    fn call(&mut self, w: WorkerId, op: HostOp, out: &mut Vec<HostOutput>) -> HostStatus {
        let Some(h) = self.hosts.get_mut(w.0 as usize) else {
            return HostStatus::default();
        };
        apply_op(h, op, out, &mut self.make_core);
        h.status()
    }

    fn recycle(&mut self, w: WorkerId, event: WorkerEvent) {
        if let Some(h) = self.hosts.get_mut(w.0 as usize) {
            h.recycle(event);
        }
    }

    fn quiet_until(&mut self, w: WorkerId, quiet: QuietKinds) -> Option<Instant> {
        self.hosts.get_mut(w.0 as usize)?.quiet_until(quiet)
    }

    fn finals(&mut self) -> Vec<HostFinal> {
        self.hosts.iter().map(|h| h.final_state()).collect()
    }
}

/// Performs `op` on `host`: the one interpretation of [`HostOp`], shared by
/// every port (in-thread, and the remote worker side of channel and TCP
/// ports).
pub fn apply_op<S: handoff_core::SchedulerCore>(
    host: &mut handoff_core::host::WorkerHost<S>,
    op: HostOp,
    out: &mut Vec<HostOutput>,
    make_core: &mut dyn FnMut(WorkerId) -> S,
) {
    match op {
        HostOp::Deliver { input, now } => host.deliver(input, now, out),
        HostOp::Advance { now } => host.advance(now, out),
        HostOp::Step { now, horizon } => {
            host.step(now, horizon, out);
        }
        HostOp::Teardown { now } => host.teardown(now, out),
        HostOp::Restart { now } => {
            let core = make_core(host.id());
            host.restart(core, now, out);
        }
        HostOp::StepPass { now } => {
            host.step_pass(now, out);
        }
        HostOp::EndPass { now, end } => {
            host.end_pass(now, end);
        }
    }
}
