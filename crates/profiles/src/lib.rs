//! # handoff-profiles
//!
//! What a step-time model is read from and what a model on a GPU holds:
//! the measured-profile JSON files ([`profile_file`], the tables
//! `handoff_perf::PerfProfile` interpolates), Dynamo's profiler `.npz`
//! grids ([`npz_file`], for `handoff_perf::DynamoGrid`), and KV bytes per
//! token and pool sizes of a model on a GPU ([`hardware`], after vLLM's and
//! SGLang's own sizing). Files come in here; the step-time models
//! themselves live in `handoff-perf`, which has no dependency.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod hardware;
pub mod npz_file;
pub mod profile_file;

pub use hardware::ModelOnGpu;
