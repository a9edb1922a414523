//! `POST /admin/scale` on the engine thread: a scale operation checked
//! against the fleet's phases, then applied as the engine's own scale
//! event ([`Fault::ScaleUp`], [`Fault::Drain`], [`Fault::Remove`]) at the
//! wall clock's model time, so the lifecycle is the one replay runs
//! (`handoff_engine::scale`: `Absent -> Provisioning -> Ready -> Draining
//! -> Gone`), not a copy of it. Only the checks are here: which worker a
//! scale-up takes, and the typed refusals the endpoint answers with.

use handoff_core::{Instant, WorkerId};
use handoff_engine::fault::Fault;
use handoff_engine::scale::{FleetState, Phase, ScalePool};
use handoff_engine::{Director, Engine, HostPort};

/// What the admin endpoint asks of the fleet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleOp {
    /// Provision the lowest absent (or gone) worker of the pool.
    Up(ScalePool),
    /// Stop routing to a ready worker; it leaves once it holds nothing.
    Drain(WorkerId),
    /// Take a provisioning, ready or draining worker away now, as a kill.
    Remove(WorkerId),
}

impl ScaleOp {
    /// The action's name in the request body.
    pub fn action(self) -> &'static str {
        match self {
            ScaleOp::Up(_) => "up",
            ScaleOp::Drain(_) => "drain",
            ScaleOp::Remove(_) => "remove",
        }
    }
}

/// What the engine did: `worker` went from `from` to `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScaleDone {
    /// The worker the operation moved.
    pub worker: WorkerId,
    /// Its pool.
    pub pool: ScalePool,
    /// Its phase before.
    pub from: Phase,
    /// Its phase after.
    pub to: Phase,
    /// A scale-up: when (model time) it becomes routable.
    pub ready_at: Option<Instant>,
}

/// Why the engine refused a scale operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleRefused {
    /// Every worker of the pool is provisioning, ready or draining: the
    /// pool is at its ceiling (`--max-prefill`/`--max-decode`).
    AtCeiling {
        /// The pool.
        pool: ScalePool,
        /// Its ceiling.
        max: u32,
    },
    /// The pool has no workers at all (`decode` in an aggregated
    /// deployment).
    NoPool(ScalePool),
    /// No such worker in the fleet.
    NoSuchWorker {
        /// The worker named.
        worker: WorkerId,
        /// The fleet's size (workers `0..workers`).
        workers: u32,
    },
    /// The worker is not in a phase the operation applies to.
    WrongPhase {
        /// The worker.
        worker: WorkerId,
        /// Its phase.
        phase: Phase,
        /// The operation.
        op: ScaleOp,
    },
}

impl std::fmt::Display for ScaleRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScaleRefused::AtCeiling { pool, max } => write!(
                f,
                "the {} pool is at its ceiling of {max} workers (--max-{})",
                pool.name(),
                pool.name()
            ),
            ScaleRefused::NoPool(pool) => {
                write!(f, "the deployment has no {} pool", pool.name())
            }
            ScaleRefused::NoSuchWorker { worker, workers } => write!(
                f,
                "no worker {} in the fleet (workers 0..{})",
                worker.0, workers
            ),
            ScaleRefused::WrongPhase { worker, phase, op } => {
                let wants = match op {
                    ScaleOp::Up(_) => "absent or gone",
                    ScaleOp::Drain(_) => "ready",
                    ScaleOp::Remove(_) => "provisioning, ready or draining",
                };
                write!(
                    f,
                    "worker {} is {}; {} needs it {wants}",
                    worker.0,
                    phase.name(),
                    op.action()
                )
            }
        }
    }
}

/// The worker a scale-up of `pool` takes: the lowest absent or gone member
/// (`FleetState::scale_up`'s pick).
fn next_up(fleet: &FleetState, pool: ScalePool) -> Option<WorkerId> {
    let mut free = fleet.in_phase(pool, Phase::Absent);
    free.extend(fleet.in_phase(pool, Phase::Gone));
    free.into_iter().min()
}

/// Checks `op` against the fleet's phases: the worker it moves and its
/// pool, or why it does not apply.
pub fn check(fleet: &FleetState, op: ScaleOp) -> Result<(WorkerId, ScalePool), ScaleRefused> {
    let workers = fleet.fleet().members.len() as u32;
    let member = |w: WorkerId| {
        fleet
            .pool(w)
            .ok_or(ScaleRefused::NoSuchWorker { worker: w, workers })
    };
    match op {
        ScaleOp::Up(pool) => {
            let max = fleet
                .fleet()
                .members
                .iter()
                .filter(|m| m.pool == pool)
                .count() as u32;
            if max == 0 {
                return Err(ScaleRefused::NoPool(pool));
            }
            let w = next_up(fleet, pool).ok_or(ScaleRefused::AtCeiling { pool, max })?;
            Ok((w, pool))
        }
        ScaleOp::Drain(w) => {
            let pool = member(w)?;
            match fleet.phase(w) {
                Phase::Ready => Ok((w, pool)),
                phase => Err(ScaleRefused::WrongPhase {
                    worker: w,
                    phase,
                    op,
                }),
            }
        }
        ScaleOp::Remove(w) => {
            let pool = member(w)?;
            match fleet.phase(w) {
                Phase::Provisioning | Phase::Ready | Phase::Draining => Ok((w, pool)),
                phase => Err(ScaleRefused::WrongPhase {
                    worker: w,
                    phase,
                    op,
                }),
            }
        }
    }
}

/// Applies `op` to `engine` now, as the engine's scale event, once
/// [`check`] accepts it.
pub fn apply<P: HostPort, D: Director>(
    engine: &mut Engine<P, D>,
    op: ScaleOp,
) -> Result<ScaleDone, ScaleRefused> {
    let (worker, pool) = check(engine.fleet(), op)?;
    let from = engine.fleet().phase(worker);
    let fault = match op {
        ScaleOp::Up(pool) => Fault::ScaleUp { pool },
        ScaleOp::Drain(worker) => Fault::Drain { worker },
        ScaleOp::Remove(worker) => Fault::Remove { worker },
    };
    engine.inject_fault(fault);
    let ready_at =
        matches!(op, ScaleOp::Up(_)).then(|| engine.now() + engine.fleet().fleet().startup_delay);
    Ok(ScaleDone {
        worker,
        pool,
        from,
        to: engine.fleet().phase(worker),
        ready_at,
    })
}

/// Worker counts per pool and phase, for the gauges: `[pool][phase]`, pools
/// prefill then decode, phases in [`PHASES`] order.
pub fn counts(fleet: &FleetState) -> [[u32; 5]; 2] {
    let mut c = [[0u32; 5]; 2];
    for m in &fleet.fleet().members {
        let p = match m.pool {
            ScalePool::Prefill => 0,
            ScalePool::Decode => 1,
        };
        let phase = fleet.phase(m.worker);
        if let Some(k) = PHASES.iter().position(|x| *x == phase) {
            c[p][k] += 1;
        }
    }
    c
}

/// Every phase, in the gauges' order.
pub const PHASES: [Phase; 5] = [
    Phase::Absent,
    Phase::Provisioning,
    Phase::Ready,
    Phase::Draining,
    Phase::Gone,
];

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_core::Duration;
    use handoff_engine::scale::Fleet;

    fn fleet() -> FleetState {
        // Prefill 0 up, 1 absent; decode 2 up, 3 absent.
        FleetState::new(Fleet::pools(2, 1, 2, 1, Duration::from_secs(5)))
    }

    #[test]
    fn up_takes_the_lowest_free_worker_and_refuses_at_the_ceiling() {
        let mut f = fleet();
        assert_eq!(
            check(&f, ScaleOp::Up(ScalePool::Decode)),
            Ok((WorkerId(3), ScalePool::Decode))
        );
        f.scale_up(ScalePool::Decode, Instant::ZERO);
        assert_eq!(
            check(&f, ScaleOp::Up(ScalePool::Decode)),
            Err(ScaleRefused::AtCeiling {
                pool: ScalePool::Decode,
                max: 2
            })
        );
        // A removed worker is free again, below a higher absent one.
        f.remove(WorkerId(0), Instant::ZERO);
        assert_eq!(
            check(&f, ScaleOp::Up(ScalePool::Prefill)),
            Ok((WorkerId(0), ScalePool::Prefill))
        );
    }

    #[test]
    fn drain_and_remove_name_the_worker_and_its_phase() {
        let f = fleet();
        assert_eq!(
            check(&f, ScaleOp::Drain(WorkerId(9))),
            Err(ScaleRefused::NoSuchWorker {
                worker: WorkerId(9),
                workers: 4
            })
        );
        let absent = check(&f, ScaleOp::Drain(WorkerId(1)));
        assert_eq!(
            absent,
            Err(ScaleRefused::WrongPhase {
                worker: WorkerId(1),
                phase: Phase::Absent,
                op: ScaleOp::Drain(WorkerId(1))
            })
        );
        assert_eq!(
            absent.unwrap_err().to_string(),
            "worker 1 is absent; drain needs it ready"
        );
        assert!(check(&f, ScaleOp::Remove(WorkerId(1))).is_err());
        assert_eq!(
            check(&f, ScaleOp::Remove(WorkerId(2))),
            Ok((WorkerId(2), ScalePool::Decode))
        );
        let agg = FleetState::new(Fleet::pools(1, 1, 0, 0, Duration::from_secs(0)));
        assert_eq!(
            check(&agg, ScaleOp::Up(ScalePool::Decode)),
            Err(ScaleRefused::NoPool(ScalePool::Decode))
        );
    }

    #[test]
    fn counts_by_pool_and_phase() {
        let mut f = fleet();
        f.drain(WorkerId(2), Instant::ZERO);
        let c = counts(&f);
        // prefill: 1 absent, 1 ready; decode: 1 absent, 1 draining.
        assert_eq!(c, [[1, 0, 1, 0, 0], [1, 0, 0, 1, 0]]);
    }
}
