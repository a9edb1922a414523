//! # kvc
//!
//! Session-affine serving ("KVC") with D→P snapshot push and prefill
//! bypass, after the design in seed 002 (`shared/seeds/002_853f16a73bae9cfb.txt`,
//! "D→P KV 反向推送设计"), as a deterministic discrete-event model, plus
//! the seed's §9 experiment (E1 / E3 / E4 / E4-ablate, hypotheses
//! H4-1..H4-3).
//!
//! - A session's KV stays in a slot on its decode worker between turns
//!   ([`decode`], after SGLang's `SessionAwareCache`); the next turn appends
//!   there. Otherwise the session is reseeded through the prefill worker
//!   ([`prefill`]) and handed to a decode worker.
//! - With `--enable-d-to-p-sync`, a decode worker pushes the session's KV
//!   back to the prefill worker after a turn commits (§3.1). The push is a
//!   handoff with the roles reversed, run through `handoff-core`'s role
//!   machines; the prefill worker's [`store::PrefillSnapshotStore`] is its
//!   destination scheduler.
//! - A reseed whose session has a fresh enough snapshot skips the
//!   re-prefill (§3.2, §4.4): the P→D' transfer starts at once. Every §7
//!   failure ends in the ordinary re-prefill, never in a wrong result or a
//!   leak; [`sim::RunOutput::check`] proves the latter per run.
//!
//! Sans-IO and deterministic: time is virtual, randomness is seeded, and
//! the same inputs give byte-identical reports and logs ([`log`]).
//!
//! # Lifting it into a larger mocker
//!
//! The model takes a session workload and a configuration and answers with
//! per-request records, a summary and an accounting check:
//!
//! ```
//! use handoff_experiments::{simulate, KvcConfig};
//! use handoff_workload::{generate_sessions, SessionConfig};
//!
//! let items = generate_sessions(&SessionConfig { sessions: 3, ..SessionConfig::default() });
//! let out = simulate(KvcConfig::default(), &items, "doc").unwrap();
//! assert_eq!(out.summary.requests as usize, items.len());
//! assert!(out.check.is_ok(), "every lease and reservation ended exactly once");
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod decode;
pub mod experiment;
pub mod log;
pub mod metrics;
pub mod prefill;
pub mod radix;
pub mod sim;
pub mod store;

#[cfg(test)]
mod tests;

pub use config::{Fault, FaultKind, KvcConfig, Perf, ServingMode, SyncConfig, TimingMode, Timings};
pub use experiment::{
    judge, run_experiment, ExperimentOutput, ExperimentReport, Status, Variant, Verdict,
};
pub use log::EventLog;
pub use metrics::{ExecMode, RequestRecord, RunSummary};
pub use sim::{simulate, RunOutput, Simulation};
pub use store::{EvictReason, MissReason, PrefillSnapshotStore};
