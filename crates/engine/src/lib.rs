//! # handoff-engine
//!
//! The one event loop every driver runs: [`Engine`] over worker hosts
//! reached through a [`HostPort`] and a [`Director`] that supplies arrivals
//! and routes. Replay runs it with local hosts, virtual-clock live with
//! remote ones; scenarios, experiments and the lossy-pair harness are
//! configurations of it. Beside the loop: how long a KV transfer takes
//! ([`transfer`]: fixed, bytes over bandwidth, or processor-shared links)
//! and what goes wrong ([`fault`]: fault plans, their text form and parser,
//! and the injector the loop consults).
//!
//! Sans-IO like the core: the loop keeps model time itself and never reads
//! a clock; a wall-clock driver paces it from outside.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod closed_loop;
mod engine;
pub mod fault;
mod min_tree;
pub mod rank_fan;
pub mod scale;
pub mod scale_text;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod transfer;

pub use closed_loop::run_closed_loop;
pub use engine::*;
pub use fault::{
    FactFate, FactFaults, Fault, FaultCounts, FaultInjector, FaultPlan, FaultPlanError,
    FaultPlanErrorKind, TimedFault,
};
pub use rank_fan::{FanIssuer, RankFan};
pub use scale::{Fleet, FleetState, FleetSummary, Phase, ScaleEvent, ScalePool};
pub use scale_text::{parse_scale_plan, ScalePlanError, ScalePlanProblem};
pub use transfer::{Completion, TransferModel, TransferTimer};
