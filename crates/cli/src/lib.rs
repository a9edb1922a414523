//! # handoff-mocker
//!
//! The command line's flags as a library: [`args`] (deployment and
//! workload flags, validated, into `handoff_deployment::DeploymentConfig`
//! and the engines' specs) and [`hardware_args`] (the built-in
//! AIConfigurator profiles a model on a GPU picks) and [`limits`] (the
//! range every numeric flag must fall in). The binary parses
//! flags with these and prints; `cargo xtask parity` builds the same
//! deployments from the same flags and runs the driver libraries itself.
#![forbid(unsafe_code)]

pub mod args;
pub mod hardware_args;
pub mod limits;
