//! # handoff-planner
//!
//! The seam an autoscaler plugs into: a [`Planner`] is called on the
//! virtual clock with a [`FleetSnapshot`] (every worker's phase, load, queue
//! and KV usage; the traffic of the last window; pending and draining
//! counts) and answers a [`Decision`]: target counts of prefill and decode
//! workers and when to be called next. The driver (the replay) turns a
//! decision into scale events: a pool below its target provisions workers,
//! one above it drains its least-loaded ready workers.
//!
//! Sans-IO: a planner reads no clock and does no I/O; the same snapshots
//! give the same decisions, so an elastic replay stays deterministic.
//!
//! One built-in: [`ThroughputPlanner`], the core of Dynamo's
//! throughput-based SLA planner. [`parse_planner`] builds a built-in from
//! its `--planner` text.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod snapshot;
mod spec;
mod throughput;

pub use snapshot::{
    Decision, FleetSnapshot, PlannerPool, WindowTraffic, WorkerPhase, WorkerSnapshot,
};
pub use spec::{parse_planner, PlannerSpecError, PlannerSpecProblem};
pub use throughput::{ThroughputConfig, ThroughputPlanner};

/// An autoscaler on the virtual clock (see the crate docs).
pub trait Planner {
    /// Decides the fleet's next shape from `snapshot`, taken at
    /// `snapshot.now`. `Decision::next_tick` after `now` is when it is
    /// called again (a driver moves an earlier one to its own interval).
    fn tick(&mut self, snapshot: &FleetSnapshot) -> Decision;

    /// A short name for reports.
    fn name(&self) -> &str;
}
