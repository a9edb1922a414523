//! # handoff-replay
//!
//! A deterministic discrete-event replay of disaggregated (or aggregated)
//! serving on a virtual clock: the one engine (`handoff-engine`) with every
//! worker host in this thread, served by `handoff-serving`'s director, a
//! trace in and a report out. Orchestration comes only from the workers'
//! role machines; the same inputs give a byte-identical report. The types
//! a replay takes and gives back are re-exported from `handoff-deployment`
//! and `handoff-serving`.
//!
//! # Lifting it into a larger mocker
//!
//! A mocker that only wants the numbers runs a [`Replay`] over its own
//! workload iterator and cores; everything else (routing, transfers,
//! faults) comes from the [`DeploymentConfig`]:
//!
//! ```
//! use handoff_replay::{make_core, EngineSpec, Replay, DeploymentConfig};
//! use handoff_workload::{SyntheticConfig, SyntheticWorkload};
//!
//! let cfg = DeploymentConfig::default(); // vLLM, 2 prefill + 2 decode, kv router
//! let spec = EngineSpec::default();
//! let items = SyntheticWorkload::new(SyntheticConfig { requests: 20, ..SyntheticConfig::default() });
//! let replay = Replay::new(cfg, items, |_, _| make_core(&spec).unwrap()).unwrap();
//! let (report, _) = replay.run();
//! assert_eq!(report.completed_requests, 20);
//! assert!(report.flat.ttft.p95 >= report.flat.ttft.median);
//! assert_eq!(report.lifecycle.handoffs_activated, 20);
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod elastic;
pub mod sim;

pub use handoff_core::CoreBox;
pub use handoff_deployment::{
    make_core, DeploymentConfig, DeploymentError, EngineSpec, PerfChoice, SessionServing,
};
pub use handoff_engine::scale::{Fleet, FleetSummary, Phase, ScaleEvent, ScalePool};
pub use handoff_engine::TransferModel;
pub use handoff_planner as planner;
pub use handoff_router::Pool;
pub use handoff_serving::{Details, Report, RequestRecord};
pub use sim::{Replay, ReplayOutcome};
