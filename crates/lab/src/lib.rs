//! # handoff-lab
//!
//! Runs that judge the model against a specification, on the real cores
//! and the one engine: the DEP's test scenarios ([`scenarios`]: each check
//! says what it expected, what it observed, and a verdict), and the
//! experiment layer of seed 002 (`shared/seeds/002_853f16a73bae9cfb.txt`,
//! "D→P KV 反向推送设计"): its §9 matrix — E1 (naive 1P3D PD
//! disaggregation, KV-aware routing), E3 (session-affine serving, a reseed
//! re-prefills), E4 (plus the D→P snapshot push and prefill bypass) and
//! E4-ablate (push on, bypass off) — and the verdicts on its hypotheses
//! H4-1..H4-3.
//!
//! There is no model here: every variant is a configuration of the one
//! engine ([`handoff_engine::Engine`] through
//! [`handoff_replay::Replay::sessions`]) on the real SGLang cores
//! (`handoff-sched-sglang`: session slots, `PrefillSnapshotStore` in the prefill
//! worker's own pool, bypass at prefill admission), routed by the shared
//! frontend's session mode, with the push a handoff through `Worker` with
//! the roles reversed. This crate only chooses the configurations
//! ([`run`]), summarises the engine's report and records ([`metrics`]) and
//! judges them ([`experiment`]).
//!
//! ```
//! use handoff_lab::{run_variant, ExperimentConfig, Variant};
//! use handoff_workload::{generate_sessions, SessionConfig};
//!
//! let items = generate_sessions(&SessionConfig { sessions: 3, ..SessionConfig::default() });
//! let out = run_variant(&ExperimentConfig::default(), Variant::E4, &items).unwrap();
//! assert_eq!(out.summary.completed as usize, items.len());
//! assert!(out.summary.drained, "every lease and reservation ended");
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod experiment;
pub mod map;
pub mod metrics;
pub mod run;
pub mod scenarios;

mod error;
pub use config::{
    ConfigError, ExperimentConfig, SessionOverheads, SyncConfig, TimingMode, Variant,
};
pub use error::{LabError, LogProblem};
pub use experiment::{
    judge, run_experiment, run_experiment_on, ExperimentOutput, ExperimentReport, Status, Verdict,
};
pub use map::{Freshness, PointMeasures};
pub use metrics::RunSummary;
pub use run::{
    engine_specs, replay_config, run_variant, run_variant_on, serving_of, EngineRun, EngineRunner,
    RunOutput,
};
