//! [`WorkerHost`]: the one driver protocol around a [`Worker`].
//!
//! A worker is sans-IO: it takes inputs with `now` and leaves its outputs in
//! queues. Something has to decide when it steps, hold a running step's
//! outputs until the modelled step ends, fire its timers, and hand its
//! transmits and events on. That is this type, and nothing else does it:
//! the replay engine, the live worker nodes (virtual and wall clock) and the
//! test harnesses all drive a `WorkerHost`.
//!
//! The protocol:
//! - [`WorkerHost::deliver`] hands the worker an input now (a request, a
//!   peer's fact, a finished transfer, a cancel, a peer's loss or restart).
//!   Its outputs are released at once. An input clears the *stalled* state.
//! - [`WorkerHost::wants_step`] says whether the worker should step now: it
//!   is not in a step, it has runnable work, and its last step attempt found
//!   something to run (or an input came since).
//! - [`WorkerHost::step`] runs the core from `now`, possibly several passes
//!   that end by `horizon`. The step's outputs are held back; they
//!   happen when the step ends.
//! - [`WorkerHost::advance`] moves the host to `now`: a step that ended by
//!   then releases its outputs, and timers due by then fire.
//! - [`WorkerHost::next_deadline`] is when `advance` next has something to
//!   do (step end or timer). Timers are lazily cancelled, so a deadline may
//!   find nothing to do.
//!
//! The ranks of a lockstep worker ([`crate::DpCoupling::Lockstep`]) step in
//! two phases instead, so that their driver can end every rank's pass with
//! the slowest one's: [`WorkerHost::step_pass`] runs one pass and reports
//! its own end in [`HostStatus::step_end`]; [`WorkerHost::end_pass`] then
//! ends it at the group's end (holding its outputs until then), or keeps a
//! rank that ran nothing busy until then with a dummy pass. Any other
//! operation on a host whose pass waits for its end ends it first, at its
//! own end.

use crate::ids::{Generation, HandoffId, WorkerId};
use crate::kv::KvCapacitySnapshot;
use crate::msg::HandoffMsg;
use crate::scheduler::SchedulerCore;
use crate::time::Instant;
use crate::transition::{CancelReason, TransferResult};
use crate::worker::{RequestError, Transmit, Worker, WorkerEvent, WorkerRequest, WorkerStats};

/// An input for a worker, from its driver.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum HostInput {
    /// Work from the frontend.
    Request(WorkerRequest),
    /// A handoff fact from peer `from`.
    Message {
        /// The peer that sent it.
        from: WorkerId,
        /// The fact.
        msg: HandoffMsg,
    },
    /// The transfer this worker started for `id` ended.
    TransferDone {
        /// The attempt whose KV moved.
        id: HandoffId,
        /// How it ended.
        result: TransferResult,
    },
    /// Abandon attempt `id` here (client abort, frontend guard).
    Cancel {
        /// The attempt to abandon.
        id: HandoffId,
        /// Why, as the role records it.
        reason: CancelReason,
    },
    /// The connection to `peer` is gone: attempts with it end locally.
    PeerLost(WorkerId),
    /// `peer` announced incarnation `generation`; a newer one voids its
    /// older attempts.
    PeerGeneration {
        /// The peer that (re)appeared.
        peer: WorkerId,
        /// Its incarnation now.
        generation: Generation,
    },
}

/// One output of a worker, in the order the worker produced it.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum HostOutput {
    /// A fact for a peer, stamped with when it left.
    Transmit(Transmit),
    /// A report for the frontend (tokens, transitions, KV events, transfer
    /// requests).
    Event(WorkerEvent),
    /// The worker refused a request; its state was left clean.
    Refused(RequestError),
}

/// Which held outputs, besides a pass's shape and tokens that are no
/// request's first, [`WorkerHost::quiet_until`] takes as quiet: those a
/// driver lets another host's run of passes overtake.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuietKinds {
    /// KV events (`WorkerEvent::Kv`).
    pub kv: bool,
    /// Tokens that include a request's first output token.
    pub first_tokens: bool,
}

/// What a driver needs to know about a host after each operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct HostStatus {
    /// When [`WorkerHost::advance`] next has something to do.
    pub deadline: Option<Instant>,
    /// Whether the host should step now ([`WorkerHost::wants_step`]).
    pub wants_step: bool,
    /// Nothing runnable, retained, in flight or held back.
    pub drained: bool,
    /// When the step in progress ends, if one is.
    pub step_end: Option<Instant>,
}

/// A worker's state at the end of a run, as reports and transcripts need
/// it (they never see the worker itself, which may live in another
/// process).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct HostFinal {
    /// The worker.
    pub worker: WorkerId,
    /// Its incarnation at the end (bumped by restarts).
    pub generation: Generation,
    /// `Worker::is_drained()` and no step or output held back.
    pub drained: bool,
    /// Its KV capacity snapshot.
    pub capacity: KvCapacitySnapshot,
    /// Fact counters.
    pub stats: WorkerStats,
    /// Roles still alive.
    pub live_handoffs: u64,
    /// Steps the host ran.
    pub steps: u64,
    /// Passes its core timed at a clamping profile's edge
    /// ([`SchedulerCore::beyond_grid_passes`]): (prefill, decode).
    pub beyond_grid_passes: (u64, u64),
}

/// See the module docs.
#[derive(Debug)]
pub struct WorkerHost<S: SchedulerCore> {
    worker: Worker<S>,
    /// End of the step in progress.
    step_end: Option<Instant>,
    /// The last step attempt found nothing to run; only an input (or the
    /// end of a step) can change that, so do not try again until then.
    stalled: bool,
    /// Outputs of the step in progress, released when it ends.
    held: Vec<HostOutput>,
    steps: u64,
    /// Dummy passes: a lockstep group's passes this host ran nothing in.
    dummy_passes: u64,
}

impl<S: SchedulerCore> WorkerHost<S> {
    /// A host around `worker`.
    pub fn new(worker: Worker<S>) -> Self {
        WorkerHost {
            worker,
            step_end: None,
            stalled: false,
            held: Vec::new(),
            steps: 0,
            dummy_passes: 0,
        }
    }

    /// The worker, for inspection.
    pub fn worker(&self) -> &Worker<S> {
        &self.worker
    }

    /// When the step in progress ends, if one is. Until then the step's
    /// outputs are held (see [`WorkerHost::held`]): the worker's own state
    /// is ahead of what its driver has seen.
    pub fn step_end(&self) -> Option<Instant> {
        self.step_end
    }

    /// The outputs of the step in progress, in the order the worker produced
    /// them; they are released when the step ends. An input delivered
    /// meanwhile releases its own outputs at once, so a driver sees them
    /// before these although the worker produced these first: a checker
    /// that follows roles in the worker's own order reads them here.
    pub fn held(&self) -> &[HostOutput] {
        &self.held
    }

    /// The worker's id.
    pub fn id(&self) -> WorkerId {
        self.worker.id()
    }

    /// Hands the worker `input` at `now` and releases its outputs into `out`.
    pub fn deliver(&mut self, input: HostInput, now: Instant, out: &mut Vec<HostOutput>) {
        self.settle_pass();
        self.stalled = false;
        match input {
            HostInput::Request(req) => {
                if let Err(e) = self.worker.handle_request(req, now) {
                    out.push(HostOutput::Refused(e));
                }
            }
            HostInput::Message { from, msg } => self.worker.handle_message(from, msg, now),
            HostInput::TransferDone { id, result } => {
                self.worker.handle_transfer_done(id, result, now)
            }
            HostInput::Cancel { id, reason } => self.worker.cancel(id, reason, now),
            HostInput::PeerLost(peer) => self.worker.handle_peer_lost(peer, now),
            HostInput::PeerGeneration { peer, generation } => {
                self.worker.handle_peer_generation(peer, generation, now)
            }
        }
        self.drain(out);
    }

    /// Moves to `now`: a step that has ended releases its outputs, and due
    /// timers fire.
    pub fn advance(&mut self, now: Instant, out: &mut Vec<HostOutput>) {
        self.settle_pass();
        if self.step_end.is_some_and(|end| end <= now) {
            self.step_end = None;
            self.stalled = false;
            if out.is_empty() {
                // The usual case: hand the held buffer over instead of
                // copying its outputs (the empty one comes back as `held`).
                std::mem::swap(out, &mut self.held);
            } else {
                out.append(&mut self.held);
            }
        }
        if self.worker.poll_timeout().is_some_and(|t| t <= now) {
            self.stalled = false;
            self.worker.handle_timeout(now);
            self.drain(out);
        }
    }

    /// Whether the host should step now.
    pub fn wants_step(&self) -> bool {
        self.step_end.is_none() && !self.stalled && !self.worker.is_empty()
    }

    /// Steps the core from `now` (passes that end by `horizon` may be
    /// folded into this step). Returns when the step ends; its outputs are
    /// held until then. With nothing to run the host stalls, and whatever
    /// the attempt produced (reservations it pumped) is released at once.
    pub fn step(
        &mut self,
        now: Instant,
        horizon: Instant,
        out: &mut Vec<HostOutput>,
    ) -> Option<Instant> {
        self.settle_pass();
        if !self.wants_step() {
            return None;
        }
        match self.worker.step(now, horizon) {
            Some(end) => {
                self.steps += 1;
                self.step_end = Some(end);
                let mut held = std::mem::take(&mut self.held);
                self.drain(&mut held);
                self.held = held;
                Some(end)
            }
            None => {
                self.stalled = true;
                self.drain(out);
                None
            }
        }
    }

    /// The first phase of a lockstep rank's step: one pass from `now`,
    /// whose end waits for [`WorkerHost::end_pass`]. Returns the pass's own
    /// end (also [`HostStatus::step_end`] until then), or `None` when the
    /// host did not want to step or found nothing to run (then it stalls
    /// and releases what the attempt produced, as [`WorkerHost::step`]).
    pub fn step_pass(&mut self, now: Instant, out: &mut Vec<HostOutput>) -> Option<Instant> {
        self.settle_pass();
        if !self.wants_step() {
            return None;
        }
        match self.worker.step_pass(now, now) {
            Some(duration) => {
                let end = now + duration;
                self.step_end = Some(end);
                Some(end)
            }
            None => {
                self.stalled = true;
                self.drain(out);
                None
            }
        }
    }

    /// The second phase: the lockstep group's pass started at `now` ends
    /// at `end`. A pass of [`WorkerHost::step_pass`] ends then (or at its
    /// own end, if later), its outputs held until it does; a host with no
    /// step in progress ran a dummy batch and is busy until `end` (it
    /// releases nothing and counts a dummy pass, not a step). A host
    /// already in a step of its own, or an `end` not after `now`, is left
    /// as it is. Returns when the host's step ends.
    pub fn end_pass(&mut self, now: Instant, end: Instant) -> Option<Instant> {
        if self.worker.pass_pending() {
            return self.hold_pass(end);
        }
        if self.step_end.is_none() && end > now {
            self.step_end = Some(end);
            self.dummy_passes += 1;
        }
        self.step_end
    }

    /// Dummy passes run: a lockstep group's passes this host had nothing
    /// in (not counted in [`HostFinal::steps`]).
    pub fn dummy_passes(&self) -> u64 {
        self.dummy_passes
    }

    /// Ends a pass that waits for [`WorkerHost::end_pass`] at its own end.
    fn settle_pass(&mut self) {
        if self.worker.pass_pending() {
            self.hold_pass(self.step_end.unwrap_or(Instant::ZERO));
        }
    }

    /// Ends the waiting pass at `end` (or its own end, if later) and holds
    /// its outputs until then.
    fn hold_pass(&mut self, end: Instant) -> Option<Instant> {
        let end = self.worker.end_pass(end)?;
        self.steps += 1;
        self.step_end = Some(end);
        let mut held = std::mem::take(&mut self.held);
        self.drain(&mut held);
        self.held = held;
        Some(end)
    }

    /// When `advance` next has something to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        match (self.step_end, self.worker.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Nothing runnable, retained, in flight or held back.
    pub fn is_drained(&self) -> bool {
        self.step_end.is_none() && self.held.is_empty() && self.worker.is_drained()
    }

    /// The driver's view after an operation.
    pub fn status(&self) -> HostStatus {
        HostStatus {
            deadline: self.next_deadline(),
            wants_step: self.wants_step(),
            drained: self.is_drained(),
            step_end: self.step_end,
        }
    }

    /// With a step in progress whose held outputs are quiet (only `Step`
    /// and `Tokens` events, with `quiet.first_tokens` also tokens that
    /// include a request's first, and with `quiet.kv` also `Kv` events):
    /// the instant before which, unless an input reaches it, the host
    /// releases nothing but such outputs. That is its step end plus the
    /// worker's [`crate::SchedulerCore::quiet_floor`] (whose passes emit no
    /// first token), or its next timer if that comes first. It depends only
    /// on the state the last operation left, so a driver may ask any time
    /// before the next one.
    pub fn quiet_until(&mut self, quiet: QuietKinds) -> Option<Instant> {
        let end = self.step_end?;
        for o in &self.held {
            match o {
                HostOutput::Event(WorkerEvent::Step { .. }) => {}
                HostOutput::Event(WorkerEvent::Tokens { emissions })
                    if quiet.first_tokens || !emissions.iter().any(|e| e.first) => {}
                HostOutput::Event(WorkerEvent::Kv { .. }) if quiet.kv => {}
                _ => return None,
            }
        }
        let floor = self.worker.quiet_floor();
        let floor = if quiet.kv { floor.kv } else { floor.pass };
        let timer = self.worker.poll_timeout().unwrap_or(Instant::MAX);
        Some((end + floor).min(timer))
    }

    /// Ends every role here and releases all local ownership; a step in
    /// progress is abandoned and its held outputs are released first (they
    /// happened before the end).
    pub fn teardown(&mut self, now: Instant, out: &mut Vec<HostOutput>) {
        self.settle_pass();
        self.step_end = None;
        self.stalled = false;
        out.append(&mut self.held);
        self.worker.teardown(now);
        self.drain(out);
    }

    /// The process died and came back as the next generation with `core`:
    /// everything held is gone (roles end as torn down), nothing in flight
    /// survives.
    pub fn restart(&mut self, core: S, now: Instant, out: &mut Vec<HostOutput>) {
        self.settle_pass();
        self.step_end = None;
        self.stalled = false;
        self.held.clear();
        self.worker.restart(core, now);
        self.drain(out);
    }

    /// The state reports and transcripts record at the end.
    pub fn final_state(&self) -> HostFinal {
        HostFinal {
            worker: self.worker.id(),
            generation: self.worker.generation(),
            drained: self.is_drained(),
            capacity: self.worker.capacity(),
            stats: self.worker.stats(),
            live_handoffs: self.worker.live_handoffs() as u64,
            steps: self.steps,
            beyond_grid_passes: self.worker.core().beyond_grid_passes(),
        }
    }

    /// Hands a consumed event back to the worker ([`Worker::recycle`]).
    pub fn recycle(&mut self, event: WorkerEvent) {
        self.worker.recycle(event);
    }

    fn drain(&mut self, out: &mut Vec<HostOutput>) {
        while let Some(t) = self.worker.poll_transmit() {
            out.push(HostOutput::Transmit(t));
        }
        while let Some(e) = self.worker.poll_event() {
            out.push(HostOutput::Event(e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Backend;
    use crate::policy::{HandoffConfig, HandoffPolicy};
    use crate::testing::FakeCore;

    fn host() -> WorkerHost<FakeCore> {
        host_with(HandoffConfig::default())
    }

    fn host_with(config: HandoffConfig) -> WorkerHost<FakeCore> {
        let core = FakeCore::new(Backend::Vllm, 64, 16);
        WorkerHost::new(Worker::new(
            WorkerId(0),
            Generation(0),
            HandoffPolicy::SourceFirst,
            config,
            core,
        ))
    }

    /// Recycling consumed events changes nothing a driver sees: a host
    /// whose driver hands every `Step` and `Tokens` event back produces the
    /// same outputs, step by step, as one whose driver drops them (the
    /// recycled buffers are only capacity).
    #[test]
    fn recycled_event_buffers_change_no_output() {
        use crate::request::Request;
        use crate::RequestId;
        let run = |recycle: bool| {
            let mut h = host();
            let mut seen = Vec::new();
            let mut out = Vec::new();
            let mut now = Instant::ZERO;
            for i in 0..40u64 {
                if i % 3 == 0 {
                    let request = Request {
                        id: RequestId(i),
                        prompt_tokens: 16 + i as u32,
                        max_output_tokens: 2 + (i % 7) as u32,
                        prefix_hashes: vec![],
                        hash_block_tokens: 16,
                        session: None,
                        arrival: now,
                        lora: None,
                    };
                    h.deliver(
                        HostInput::Request(WorkerRequest::Ordinary(request)),
                        now,
                        &mut out,
                    );
                }
                h.step(now, now, &mut out);
                if let Some(end) = h.status().step_end {
                    now = end;
                }
                h.advance(now, &mut out);
                for o in out.drain(..) {
                    seen.push(format!("{o:?}"));
                    if let HostOutput::Event(e) = o {
                        if recycle {
                            h.recycle(e);
                        }
                    }
                }
            }
            seen
        };
        let plain = run(false);
        assert!(plain.iter().filter(|s| s.contains("Tokens")).count() > 10);
        assert_eq!(plain, run(true));
    }

    /// vLLM has no decode-side reservation deadline: a routed destination
    /// arms no timer (one at `Instant::MAX` would move a driver's clock
    /// there), while the SGLang default still does.
    #[test]
    fn vllm_destinations_arm_no_reservation_timer() {
        use crate::request::Request;
        use crate::worker::WorkerRequest;
        use crate::{HandoffId, RequestId};
        let route = |h: &mut WorkerHost<FakeCore>| {
            let request = Request {
                id: RequestId(1),
                prompt_tokens: 32,
                max_output_tokens: 1,
                prefix_hashes: vec![],
                hash_block_tokens: 16,
                session: None,
                arrival: Instant::ZERO,
                lora: None,
            };
            let req = WorkerRequest::HandoffDestination {
                id: HandoffId(7),
                request,
                source: WorkerId(1),
                ready: None,
            };
            let mut out = Vec::new();
            h.deliver(HostInput::Request(req), Instant::ZERO, &mut out);
            h.next_deadline()
        };
        let vllm = HandoffConfig::for_backend(Backend::Vllm);
        assert!(!vllm.reservation_expires());
        // Its only timer is the first lease heartbeat to its source.
        let hb = vllm.heartbeat.expect("vLLM heartbeats its source's lease");
        assert_eq!(route(&mut host_with(vllm)), Some(Instant::ZERO + hb.every));
        let quiet = HandoffConfig {
            heartbeat: None,
            ..vllm
        };
        assert_eq!(route(&mut host_with(quiet)), None);
        let sglang = HandoffConfig::for_backend(Backend::Sglang);
        assert!(sglang.reservation_expires());
        assert_eq!(
            route(&mut host_with(sglang)),
            Some(Instant::ZERO + sglang.reservation_ttl)
        );
    }

    /// `holds_source` names live source roles only: not a destination,
    /// not an unknown id, not a source after it ended.
    #[test]
    fn holds_source_names_live_source_roles_only() {
        use crate::request::Request;
        use crate::worker::WorkerRequest;
        use crate::{CancelReason, HandoffId, RequestId};
        let mut h = host();
        let request = |id| Request {
            id: RequestId(id),
            prompt_tokens: 32,
            max_output_tokens: 1,
            prefix_hashes: vec![],
            hash_block_tokens: 16,
            session: None,
            arrival: Instant::ZERO,
            lora: None,
        };
        let mut out = Vec::new();
        let src = WorkerRequest::HandoffSource {
            id: HandoffId(1),
            request: request(1),
        };
        h.deliver(HostInput::Request(src), Instant::ZERO, &mut out);
        let dst = WorkerRequest::HandoffDestination {
            id: HandoffId(2),
            request: request(2),
            source: WorkerId(1),
            ready: None,
        };
        h.deliver(HostInput::Request(dst), Instant::ZERO, &mut out);
        assert!(h.worker().holds_source(HandoffId(1)));
        assert!(!h.worker().holds_source(HandoffId(2)));
        assert!(!h.worker().holds_source(HandoffId(3)));
        let cancel = HostInput::Cancel {
            id: HandoffId(1),
            reason: CancelReason::Client,
        };
        h.deliver(cancel, Instant::ZERO, &mut out);
        assert!(!h.worker().holds_source(HandoffId(1)));
    }

    fn ordinary(id: u64, now: Instant) -> HostInput {
        use crate::request::Request;
        HostInput::Request(WorkerRequest::Ordinary(Request {
            id: crate::RequestId(id),
            prompt_tokens: 32,
            max_output_tokens: 3,
            prefix_hashes: vec![],
            hash_block_tokens: 16,
            session: None,
            arrival: now,
            lora: None,
        }))
    }

    /// The step of a host, as a driver sees it: each step's outputs and
    /// when they come, driving with `step` or with the two phases ended at
    /// the pass's own end.
    fn drive(two_phase: bool) -> Vec<String> {
        let mut h = host();
        let (mut out, mut seen) = (Vec::new(), Vec::new());
        let mut now = Instant::ZERO;
        h.deliver(ordinary(1, now), now, &mut out);
        for i in 0..6u64 {
            if i == 1 {
                h.deliver(ordinary(2, now), now, &mut out);
            }
            if two_phase {
                if let Some(own) = h.step_pass(now, &mut out) {
                    assert_eq!(h.status().step_end, Some(own));
                    assert!(!h.wants_step());
                    assert_eq!(h.end_pass(now, own), Some(own));
                }
            } else {
                h.step(now, now, &mut out);
            }
            now = h.status().step_end.unwrap_or(now);
            h.advance(now, &mut out);
            seen.extend(out.drain(..).map(|o| format!("{now:?} {o:?}")));
        }
        seen.push(format!("{:?}", h.final_state()));
        seen
    }

    /// Two phases ended at the pass's own end are the one-phase step.
    #[test]
    fn two_phases_at_the_own_end_are_one_step() {
        let one = drive(false);
        assert!(one.iter().any(|s| s.contains("Tokens")));
        assert_eq!(drive(true), one);
    }

    /// A pass ended later than its own end is stretched: its `Step` event
    /// lasts to the group's end, and its tokens and finishes are released
    /// only then.
    #[test]
    fn a_group_end_stretches_the_pass_and_holds_its_outputs() {
        let mut h = host();
        let mut out = Vec::new();
        let t0 = Instant::ZERO;
        h.deliver(ordinary(1, t0), t0, &mut out);
        let own = h.step_pass(t0, &mut out).expect("a pass runs");
        assert!(out.is_empty(), "a pass's outputs wait for its end");
        let group = own + crate::Duration::from_millis(7);
        assert_eq!(h.end_pass(t0, group), Some(group));
        assert_eq!(h.status().step_end, Some(group));
        h.advance(own, &mut out);
        assert!(out.is_empty(), "nothing is released at the own end");
        h.advance(group, &mut out);
        let step = out.iter().find_map(|o| match o {
            HostOutput::Event(WorkerEvent::Step {
                start,
                duration,
                first_step,
                last_step,
                passes,
                ..
            }) => Some((*start, *duration, *first_step, *last_step, passes.len())),
            _ => None,
        });
        let d = group - t0;
        assert_eq!(step, Some((t0, d, d, d, 0)));
        assert!(out
            .iter()
            .any(|o| matches!(o, HostOutput::Event(WorkerEvent::Tokens { .. }))));
        assert_eq!(h.final_state().steps, 1);
        // An earlier group end never shortens a pass.
        let own2 = h.step_pass(group, &mut out).expect("decode pass");
        assert_eq!(h.end_pass(group, group), Some(own2));
    }

    /// A rank with nothing to run is busy for the group's pass (a dummy
    /// batch): it cannot step before the group's end, releases nothing,
    /// and counts a dummy pass, not a step.
    #[test]
    fn an_idle_rank_runs_a_dummy_pass_until_the_group_end() {
        let mut h = host();
        let mut out = Vec::new();
        let t0 = Instant::ZERO;
        assert_eq!(h.step_pass(t0, &mut out), None);
        let end = Instant::from_millis(5);
        assert_eq!(h.end_pass(t0, end), Some(end));
        assert_eq!(h.dummy_passes(), 1);
        assert_eq!(h.final_state().steps, 0);
        // Work arriving mid-pass waits for the group's end.
        h.deliver(ordinary(1, Instant(10)), Instant(10), &mut out);
        assert!(!h.wants_step());
        assert_eq!(h.step_pass(Instant(10), &mut out), None);
        assert_eq!(h.next_deadline(), Some(end));
        h.advance(end, &mut out);
        assert!(out.is_empty());
        assert!(h.wants_step());
        // A group pass ending no later than it starts makes no dummy.
        let mut idle = host();
        assert_eq!(idle.end_pass(end, end), None);
        assert_eq!(idle.dummy_passes(), 0);
    }

    /// Any other operation on a host whose pass waits for its end ends it
    /// at its own end first: a driver that never ends it loses nothing.
    #[test]
    fn an_unended_pass_ends_at_its_own_end() {
        let mut h = host();
        let mut out = Vec::new();
        let t0 = Instant::ZERO;
        h.deliver(ordinary(1, t0), t0, &mut out);
        let own = h.step_pass(t0, &mut out).expect("a pass runs");
        h.advance(own, &mut out);
        assert!(out
            .iter()
            .any(|o| matches!(o, HostOutput::Event(WorkerEvent::Step { .. }))));
        assert_eq!(h.final_state().steps, 1);
        assert_eq!(h.status().step_end, None);
    }

    #[test]
    fn idle_host_neither_steps_nor_waits() {
        let h = host();
        assert!(!h.wants_step());
        assert_eq!(h.next_deadline(), None);
        assert!(h.is_drained());
    }
}
