//! # replay
//!
//! A deterministic discrete-event replay of disaggregated (or aggregated)
//! serving on a virtual clock. It drives handoff-core [`handoff_core::Worker`]s
//! of one backend; orchestration comes only from their role machines. Replay
//! owns the event queue, the frontend's routing hop and the transfer-timing
//! adapter. The same inputs give a byte-identical report.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod engines;
pub mod metrics;
pub mod report;
pub mod scenarios;
pub mod serving;
pub mod sim;
pub mod timeline;

pub use engines::{make_core, EngineSpec};
pub use handoff_core::CoreBox;
pub use handoff_core::TransferModel;
pub use report::{Details, Report, RequestRecord};
pub use router::Pool;
pub use serving::Serving;
pub use sim::{
    deployment, engine_config, frontend_config, serving, worker_policy, Replay, ReplayConfig,
    ReplayOutcome,
};
