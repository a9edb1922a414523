//! Elastic fleets: workers that join and leave a run as lifecycle events.
//!
//! A [`Fleet`] (carried by the [`FaultPlan`](crate::FaultPlan), so every
//! driver of the engine sees the same one) names each worker's pool and
//! whether it starts `Absent`. Scale events are timed faults:
//! [`Fault::ScaleUp`](crate::Fault::ScaleUp) provisions the lowest absent
//! (or gone) worker of a pool, which becomes routable at
//! [`Fault::Ready`](crate::Fault::Ready) a startup delay later (model load
//! and warm-up); [`Fault::Drain`](crate::Fault::Drain) stops routing new
//! work to a worker while what it holds finishes; [`Fault::Remove`](crate::Fault::Remove)
//! takes it away at once, as a kill does.
//!
//! ```text
//! Absent -> Provisioning -> Ready -> Draining -> Gone
//!                             \__________________/  (Remove: at once)
//! ```
//!
//! Graceful drain follows the engines' own shutdown: on SIGTERM vLLM's API
//! server stops admitting new requests (answers 503) and lets the ones in
//! flight finish before the engine core exits (vLLM's graceful-shutdown
//! tests, `tests/entrypoints/.../test_graceful_shutdown.py`); Dynamo's
//! workers invalidate their endpoint first so no router picks them, then
//! wait for in-flight requests (`docs/fault-tolerance/graceful-shutdown.md`,
//! `serve_endpoint(graceful_shutdown=True)`). A Kubernetes scale-down (what
//! Dynamo's planner does through its connector, and an HPA) is SIGTERM to
//! the pod, then SIGKILL when `terminationGracePeriodSeconds` runs out: a
//! `Drain` then a `Remove` at the grace period's end. Here a draining
//! worker keeps serving: a prefill keeps its pinned sources until read or
//! their lease ends, a decode honours its reservations, and it is `Gone`
//! once its host reports `is_drained()`.
//!
//! [`FleetState`] is the sans-IO bookkeeping: transitions take `now` and
//! say what the engine must do; it keeps the worker counts over time and
//! the time spent in each phase for the report.

use handoff_core::ids::WorkerId;
use handoff_core::time::{Duration, Instant};

/// The pool a scale event grows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ScalePool {
    /// Prefill workers (or aggregated ones).
    Prefill,
    /// Decode workers.
    Decode,
}

impl ScalePool {
    /// The name in plan texts and reports.
    pub fn name(self) -> &'static str {
        match self {
            ScalePool::Prefill => "prefill",
            ScalePool::Decode => "decode",
        }
    }

    /// The pool a name means.
    pub fn from_name(s: &str) -> Option<ScalePool> {
        match s {
            "prefill" => Some(ScalePool::Prefill),
            "decode" => Some(ScalePool::Decode),
            _ => None,
        }
    }
}

/// Where a worker is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Phase {
    /// Not started: no process, not routable.
    Absent,
    /// Started, loading the model: not routable yet.
    Provisioning,
    /// Routable.
    Ready,
    /// Not routable; finishing what it holds.
    Draining,
    /// Left the fleet (may be provisioned again).
    Gone,
}

impl Phase {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Absent => "absent",
            Phase::Provisioning => "provisioning",
            Phase::Ready => "ready",
            Phase::Draining => "draining",
            Phase::Gone => "gone",
        }
    }

    /// Whether the worker holds a machine (and so costs GPU time).
    pub fn costs(self) -> bool {
        matches!(self, Phase::Provisioning | Phase::Ready | Phase::Draining)
    }
}

/// One worker of an elastic fleet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct FleetMember {
    /// The worker.
    pub worker: WorkerId,
    /// Its pool.
    pub pool: ScalePool,
    /// Whether it starts `Absent` (above the pool's initial count).
    pub absent: bool,
}

/// Largest worker id a fleet may name (the bound of a plan's text).
pub const MAX_FLEET_WORKER: u32 = 1 << 16;

/// The elastic part of a deployment: every worker's pool and whether it
/// starts absent, and the startup delay. Empty: no scaling (every worker up
/// from the start, as before).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Fleet {
    /// Members in worker order.
    pub members: Vec<FleetMember>,
    /// From `ScaleUp` to `Ready`.
    pub startup_delay: Duration,
}

impl Fleet {
    /// Whether no worker is elastic.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// A fleet of `prefill` then `decode` workers (ids from 0, as the
    /// deployment numbers them) of which the first `initial_*` of each pool
    /// start up.
    pub fn pools(
        prefill: u32,
        initial_prefill: u32,
        decode: u32,
        initial_decode: u32,
        startup_delay: Duration,
    ) -> Fleet {
        let p = (0..prefill).map(|i| FleetMember {
            worker: WorkerId(i),
            pool: ScalePool::Prefill,
            absent: i >= initial_prefill,
        });
        let d = (0..decode).map(|i| FleetMember {
            worker: WorkerId(prefill + i),
            pool: ScalePool::Decode,
            absent: i >= initial_decode,
        });
        Fleet {
            members: p.chain(d).collect(),
            startup_delay,
        }
    }

    /// The member entry of `w`.
    pub fn member(&self, w: WorkerId) -> Option<&FleetMember> {
        self.members.iter().find(|m| m.worker == w)
    }
}

/// What happened to the fleet, for the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ScaleEvent {
    /// A worker of `pool` started provisioning (a `ScaleUp`).
    Provision {
        /// Its pool.
        pool: ScalePool,
        /// The worker chosen.
        worker: WorkerId,
    },
    /// A `ScaleUp` found no absent or gone worker under the pool's ceiling.
    AtCeiling {
        /// The pool.
        pool: ScalePool,
    },
    /// The worker finished provisioning and is routable.
    Ready {
        /// The worker.
        worker: WorkerId,
    },
    /// The worker started draining.
    Drain {
        /// The worker.
        worker: WorkerId,
    },
    /// The worker left after draining: it held nothing.
    Drained {
        /// The worker.
        worker: WorkerId,
    },
    /// The worker was removed at once (its handoffs unwound as on a kill).
    Removed {
        /// The worker.
        worker: WorkerId,
        /// The phase it was in.
        from: Phase,
    },
}

/// A [`ScaleEvent`] and when it happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ScaleRecord {
    /// Model time.
    pub at: Instant,
    /// What happened.
    pub event: ScaleEvent,
}

/// What the engine must do after a fleet transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FleetAction {
    /// Nothing (the transition did not apply in the worker's phase).
    None,
    /// Make the worker routable at `at` (a `Ready` fault then).
    ReadyAt {
        /// The worker.
        worker: WorkerId,
        /// When it is ready.
        at: Instant,
    },
    /// Bring the (down) worker up as its next generation now.
    Start(WorkerId),
    /// Stop routing to the worker; keep it running.
    StopRouting(WorkerId),
    /// Take the worker down as a kill does.
    Kill(WorkerId),
    /// Take the (drained) worker down: nothing to unwind.
    Retire(WorkerId),
}

/// Worker counts per pool after a change: `(at, ready prefill, ready
/// decode, provisioning, draining)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct FleetPoint {
    /// When the counts changed.
    pub at: Instant,
    /// Routable prefill workers.
    pub prefill: u32,
    /// Routable decode workers.
    pub decode: u32,
    /// Workers provisioning, both pools.
    pub provisioning: u32,
    /// Workers draining, both pools.
    pub draining: u32,
}

/// The fleet's bookkeeping (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct FleetState {
    fleet: Fleet,
    /// Per member (fleet order): phase and since when.
    phases: Vec<(Phase, Instant)>,
    /// Per member: nanoseconds spent in each costing phase
    /// (provisioning, ready, draining).
    spent: Vec<[u64; 3]>,
    series: Vec<FleetPoint>,
    events: Vec<ScaleRecord>,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl FleetState {
    /// The fleet at time zero: absent members absent, the rest ready.
    pub fn new(fleet: Fleet) -> FleetState {
        let phases = fleet
            .members
            .iter()
            .map(|m| {
                let p = if m.absent {
                    Phase::Absent
                } else {
                    Phase::Ready
                };
                (p, Instant::ZERO)
            })
            .collect();
        let spent = vec![[0; 3]; fleet.members.len()];
        let mut s = FleetState {
            fleet,
            phases,
            spent,
            series: Vec::new(),
            events: Vec::new(),
        };
        if !s.fleet.is_empty() {
            s.mark(Instant::ZERO);
        }
        s
    }

    /// Whether the run is elastic at all.
    pub fn is_elastic(&self) -> bool {
        !self.fleet.is_empty()
    }

    /// The fleet this tracks.
    pub fn fleet(&self) -> &Fleet {
        &self.fleet
    }

    /// Workers that start absent (down from time zero).
    pub fn initially_absent(&self) -> impl Iterator<Item = WorkerId> + '_ {
        self.fleet
            .members
            .iter()
            .filter(|m| m.absent)
            .map(|m| m.worker)
    }

    fn index(&self, w: WorkerId) -> Option<usize> {
        self.fleet.members.iter().position(|m| m.worker == w)
    }

    /// The phase of `w`; `Ready` for a worker outside the fleet (it never
    /// scales).
    pub fn phase(&self, w: WorkerId) -> Phase {
        self.index(w).map_or(Phase::Ready, |i| self.phases[i].0)
    }

    /// The pool of `w`, if it is a member.
    pub fn pool(&self, w: WorkerId) -> Option<ScalePool> {
        self.fleet.member(w).map(|m| m.pool)
    }

    fn set(&mut self, i: usize, to: Phase, now: Instant) {
        let (from, since) = self.phases[i];
        let slot = match from {
            Phase::Provisioning => Some(0),
            Phase::Ready => Some(1),
            Phase::Draining => Some(2),
            Phase::Absent | Phase::Gone => None,
        };
        if let Some(k) = slot {
            let d = nanos(now.saturating_since(since));
            self.spent[i][k] = self.spent[i][k].saturating_add(d);
        }
        self.phases[i] = (to, now);
        self.mark(now);
    }

    fn record(&mut self, at: Instant, event: ScaleEvent) {
        self.events.push(ScaleRecord { at, event });
    }

    /// Appends the counts now, replacing a point at the same instant.
    fn mark(&mut self, now: Instant) {
        let mut p = FleetPoint {
            at: now,
            prefill: 0,
            decode: 0,
            provisioning: 0,
            draining: 0,
        };
        for (m, (phase, _)) in self.fleet.members.iter().zip(&self.phases) {
            match (phase, m.pool) {
                (Phase::Ready, ScalePool::Prefill) => p.prefill += 1,
                (Phase::Ready, ScalePool::Decode) => p.decode += 1,
                (Phase::Provisioning, _) => p.provisioning += 1,
                (Phase::Draining, _) => p.draining += 1,
                _ => {}
            }
        }
        match self.series.last_mut() {
            Some(last) if last.at == now => *last = p,
            Some(last)
                if (last.prefill, last.decode, last.provisioning, last.draining)
                    == (p.prefill, p.decode, p.provisioning, p.draining) => {}
            _ => self.series.push(p),
        }
    }

    /// `ScaleUp { pool }`: the lowest absent or gone member of `pool`
    /// starts provisioning, ready after the startup delay.
    pub fn scale_up(&mut self, pool: ScalePool, now: Instant) -> FleetAction {
        let pick = self.fleet.members.iter().enumerate().find(|(i, m)| {
            m.pool == pool && matches!(self.phases[*i].0, Phase::Absent | Phase::Gone)
        });
        let Some((i, m)) = pick.map(|(i, m)| (i, *m)) else {
            self.record(now, ScaleEvent::AtCeiling { pool });
            return FleetAction::None;
        };
        self.set(i, Phase::Provisioning, now);
        self.record(
            now,
            ScaleEvent::Provision {
                pool,
                worker: m.worker,
            },
        );
        FleetAction::ReadyAt {
            worker: m.worker,
            at: now + self.fleet.startup_delay,
        }
    }

    /// `Ready { worker }`: a provisioning worker becomes routable (a
    /// worker removed while provisioning stays gone).
    pub fn ready(&mut self, w: WorkerId, now: Instant) -> FleetAction {
        match self.index(w) {
            Some(i) if self.phases[i].0 == Phase::Provisioning => {
                self.set(i, Phase::Ready, now);
                self.record(now, ScaleEvent::Ready { worker: w });
                FleetAction::Start(w)
            }
            _ => FleetAction::None,
        }
    }

    /// `Drain { worker }`: a ready worker stops taking new work.
    pub fn drain(&mut self, w: WorkerId, now: Instant) -> FleetAction {
        match self.index(w) {
            Some(i) if self.phases[i].0 == Phase::Ready => {
                self.set(i, Phase::Draining, now);
                self.record(now, ScaleEvent::Drain { worker: w });
                FleetAction::StopRouting(w)
            }
            _ => FleetAction::None,
        }
    }

    /// `Remove { worker }`: gone now; a worker that was up is killed.
    pub fn remove(&mut self, w: WorkerId, now: Instant) -> FleetAction {
        let Some(i) = self.index(w) else {
            return FleetAction::None;
        };
        let from = self.phases[i].0;
        if matches!(from, Phase::Absent | Phase::Gone) {
            return FleetAction::None;
        }
        self.set(i, Phase::Gone, now);
        self.record(now, ScaleEvent::Removed { worker: w, from });
        if from == Phase::Provisioning {
            // Never started serving: its host is still down.
            FleetAction::None
        } else {
            FleetAction::Kill(w)
        }
    }

    /// A draining worker's host reported drained: it leaves.
    pub fn drained(&mut self, w: WorkerId, now: Instant) -> FleetAction {
        match self.index(w) {
            Some(i) if self.phases[i].0 == Phase::Draining => {
                self.set(i, Phase::Gone, now);
                self.record(now, ScaleEvent::Drained { worker: w });
                FleetAction::Retire(w)
            }
            _ => FleetAction::None,
        }
    }

    /// Every scale event so far, in order.
    pub fn events(&self) -> &[ScaleRecord] {
        &self.events
    }

    /// Workers draining now, in fleet order.
    pub fn draining(&self) -> impl Iterator<Item = WorkerId> + '_ {
        self.fleet
            .members
            .iter()
            .zip(&self.phases)
            .filter(|(_, (p, _))| *p == Phase::Draining)
            .map(|(m, _)| m.worker)
    }

    /// Whether any worker is draining.
    pub fn any_draining(&self) -> bool {
        self.phases.iter().any(|(p, _)| *p == Phase::Draining)
    }

    /// Members of `pool` in `phase`, in fleet order.
    pub fn in_phase(&self, pool: ScalePool, phase: Phase) -> Vec<WorkerId> {
        self.fleet
            .members
            .iter()
            .zip(&self.phases)
            .filter(|(m, (p, _))| m.pool == pool && *p == phase)
            .map(|(m, _)| m.worker)
            .collect()
    }

    /// The summary at `end`: counts over time, time per phase, events.
    pub fn summary(&self, end: Instant) -> FleetSummary {
        let mut per_pool = [[0u64; 3]; 2];
        for (i, m) in self.fleet.members.iter().enumerate() {
            let mut spent = self.spent[i];
            let (phase, since) = self.phases[i];
            let open = nanos(end.saturating_since(since));
            match phase {
                Phase::Provisioning => spent[0] = spent[0].saturating_add(open),
                Phase::Ready => spent[1] = spent[1].saturating_add(open),
                Phase::Draining => spent[2] = spent[2].saturating_add(open),
                Phase::Absent | Phase::Gone => {}
            }
            let k = match m.pool {
                ScalePool::Prefill => 0,
                ScalePool::Decode => 1,
            };
            for (acc, s) in per_pool[k].iter_mut().zip(spent) {
                *acc = acc.saturating_add(s);
            }
        }
        FleetSummary {
            series: self.series.clone(),
            events: self.events.clone(),
            prefill_ns: per_pool[0],
            decode_ns: per_pool[1],
        }
    }
}

/// What a run's scaling cost (see [`FleetState::summary`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FleetSummary {
    /// Worker counts at each change.
    pub series: Vec<FleetPoint>,
    /// Every scale event, in order.
    pub events: Vec<ScaleRecord>,
    /// Prefill pool: nanoseconds provisioning, ready, draining (all workers).
    pub prefill_ns: [u64; 3],
    /// Decode pool: the same.
    pub decode_ns: [u64; 3],
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Instant {
        Instant(s * 1_000_000_000)
    }

    #[test]
    fn a_worker_walks_its_phases_and_costs_only_while_it_holds_a_machine() {
        let mut f = FleetState::new(Fleet::pools(2, 1, 1, 1, Duration::from_secs(30)));
        assert_eq!(f.phase(WorkerId(1)), Phase::Absent);
        assert_eq!(
            f.scale_up(ScalePool::Prefill, secs(10)),
            FleetAction::ReadyAt {
                worker: WorkerId(1),
                at: secs(40)
            }
        );
        // The pool is at its ceiling now.
        assert_eq!(f.scale_up(ScalePool::Prefill, secs(11)), FleetAction::None);
        assert_eq!(
            f.ready(WorkerId(1), secs(40)),
            FleetAction::Start(WorkerId(1))
        );
        assert_eq!(f.ready(WorkerId(1), secs(41)), FleetAction::None);
        assert_eq!(
            f.drain(WorkerId(1), secs(100)),
            FleetAction::StopRouting(WorkerId(1))
        );
        assert_eq!(f.drain(WorkerId(1), secs(101)), FleetAction::None);
        assert_eq!(
            f.drained(WorkerId(1), secs(110)),
            FleetAction::Retire(WorkerId(1))
        );
        assert_eq!(f.phase(WorkerId(1)), Phase::Gone);
        let s = f.summary(secs(200));
        // Worker 0: ready 200 s; worker 1: 30 provisioning, 60 ready, 10 draining.
        assert_eq!(
            s.prefill_ns,
            [30_000_000_000, 260_000_000_000, 10_000_000_000]
        );
        assert_eq!(s.decode_ns, [0, 200_000_000_000, 0]);
        let counts: Vec<(u64, u32, u32, u32)> = s
            .series
            .iter()
            .map(|p| {
                (
                    p.at.0 / 1_000_000_000,
                    p.prefill,
                    p.provisioning,
                    p.draining,
                )
            })
            .collect();
        assert_eq!(
            counts,
            vec![
                (0, 1, 0, 0),
                (10, 1, 1, 0),
                (40, 2, 0, 0),
                (100, 1, 0, 1),
                (110, 1, 0, 0)
            ]
        );
        assert!(matches!(
            s.events[1].event,
            ScaleEvent::AtCeiling {
                pool: ScalePool::Prefill
            }
        ));
    }

    #[test]
    fn remove_kills_what_was_up_and_cancels_what_was_provisioning() {
        let mut f = FleetState::new(Fleet::pools(1, 1, 2, 1, Duration::from_secs(5)));
        assert_eq!(
            f.remove(WorkerId(0), secs(1)),
            FleetAction::Kill(WorkerId(0))
        );
        assert_eq!(f.remove(WorkerId(0), secs(2)), FleetAction::None);
        assert!(matches!(
            f.scale_up(ScalePool::Decode, secs(3)),
            FleetAction::ReadyAt {
                worker: WorkerId(2),
                ..
            }
        ));
        assert_eq!(f.remove(WorkerId(2), secs(4)), FleetAction::None);
        // Its ready time passes with it gone: it stays gone.
        assert_eq!(f.ready(WorkerId(2), secs(8)), FleetAction::None);
        assert_eq!(f.phase(WorkerId(2)), Phase::Gone);
        // A gone worker can be provisioned again.
        assert!(matches!(
            f.scale_up(ScalePool::Prefill, secs(9)),
            FleetAction::ReadyAt {
                worker: WorkerId(0),
                ..
            }
        ));
        // Workers outside the fleet never scale.
        assert_eq!(f.drain(WorkerId(7), secs(9)), FleetAction::None);
        assert_eq!(f.phase(WorkerId(7)), Phase::Ready);
    }
}
