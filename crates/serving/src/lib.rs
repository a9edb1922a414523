//! # handoff-serving
//!
//! What every driver serves with, so replay, virtual-clock live, wall-clock
//! live and `serve` report alike: the [`Serving`] director (the router
//! frontend's hops, arrivals, the recorder and the transcript), the
//! [`Report`] and per-request [`RequestRecord`]s computed from the workers'
//! event stream, the deployment a configuration describes
//! ([`deployment()`], [`ReplayConfig`]), and the core factory
//! ([`make_core`]: a backend's core with its step-time model).
//!
//! It never runs the engine itself: the drivers (`handoff-replay`,
//! `handoff-live-adapter`) do, each with its own hosts and clock.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod deployment;
pub mod engines;
pub mod hardware;
pub mod kv_order;
pub mod metrics;
pub mod npz_file;
mod per_worker;
pub mod profile_file;
pub mod report;
mod request_table;
pub mod serving;
pub mod session_log;
pub mod timeline;

pub use deployment::{
    deployment, engine_config, frontend_config, run_closed_loop, worker_policy, ReplayConfig,
    SessionOverheads, SessionServing,
};
pub use engines::{make_core, EngineSpec, PerfChoice};
pub use handoff_core::CoreBox;
pub use handoff_engine::TransferModel;
pub use handoff_router::Pool;
pub use kv_order::KvOrder;
pub use report::{Details, Report, RequestRecord};
pub use serving::{serving, Serving};
