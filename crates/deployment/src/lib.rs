//! # handoff-deployment
//!
//! The deployment every driver runs, in one [`DeploymentConfig`]: which
//! schedulers exist and in which pool ([`deployment()`]), the handoff
//! policy they run ([`worker_policy`]), the frontend's and the engine's
//! configurations ([`frontend_config`], [`engine_config`]), and each
//! engine's backend-neutral [`EngineSpec`] with the factory that builds
//! its scheduler core ([`make_core`]).
//!
//! The block size lives once, in [`DeploymentConfig::block_size`]: the
//! routers hash with it, and [`check_core`] refuses a core whose KV events
//! cover another number of tokens ([`DeploymentError::BlockSize`]), so a
//! driver built from the configuration cannot score overlap in one unit
//! while its engines publish in another.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod deployment;
mod engines;
mod error;
mod slo;

pub use deployment::{
    deployment, engine_config, frontend_config, peer_loss, rank_fan, worker_policy,
    DeploymentConfig, SessionOverheads, SessionServing,
};
pub use engines::{make_core, EngineError, EngineSpec, PerfChoice};
pub use error::{check_core, check_wall_driver, DeploymentError, WallDriver};
pub use slo::{
    ReportSizing, SloMetric, SloParseError, SloSpec, SloTarget, MAX_BOUND_MS, MAX_TARGETS,
};
