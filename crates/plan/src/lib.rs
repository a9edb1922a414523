//! # handoff-plan
//!
//! The sizing question answered by simulation, as a library: every
//! aggregated layout and xPyD split within a GPU budget, each pool at its
//! own TP, with attention DP and expert parallelism ([`layout`]), run
//! by the caller, ranked by goodput per GPU among those that hold the SLO
//! with the Pareto frontier of tokens/s/GPU against tokens/s/user
//! ([`rank`], [`outputs`], the page in [`html`]); the highest arrival
//! rate at which the SLO holds ([`rate`]); AIConfigurator's saved picks
//! read and set beside their simulation ([`aic`]); and the generated
//! workloads both replay ([`workload`]).
//!
//! Running one configuration is the caller's: a [`Runner`] turns a job (a
//! [`Layout`], an [`aic::AicRun`]) into its configuration, then runs a
//! batch of them and returns one summary row each (the JSON object a
//! sweep writes: `index`, `config`, `report`, `error`, then report
//! figures such as [`PLAN_METRICS`] and `sizing.*`). The library reads
//! those rows; it neither parses flags nor depends on a driver.
#![forbid(unsafe_code)]

pub mod aic;
pub mod chart;
mod error;
pub mod html;
pub mod layout;
pub mod outputs;
pub mod rank;
pub mod rate;
mod runner;
pub mod workload;

pub use error::PlanError;
pub use layout::{
    enumerate, enumerate_space, expert_parallel_fits, run_plan, Axes, Axis, Budget, Experts, Kinds,
    Layout, Plan, PoolTps, Space, MAX_GPUS, MAX_LAYOUTS, PLAN_METRICS,
};
pub use rank::{rank, Point, Ranked};
pub use runner::Runner;
