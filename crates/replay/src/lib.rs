//! # handoff-replay
//!
//! A deterministic discrete-event replay of disaggregated (or aggregated)
//! serving on a virtual clock. It drives handoff-core [`handoff_core::Worker`]s
//! of one backend; orchestration comes only from their role machines. Replay
//! owns the event queue, the frontend's routing hop and the transfer-timing
//! adapter. The same inputs give a byte-identical report.
//!
//! # Lifting it into a larger mocker
//!
//! A mocker that only wants the numbers runs a [`Replay`] over its own
//! workload iterator and cores; everything else (routing, transfers,
//! faults) comes from the [`ReplayConfig`]:
//!
//! ```
//! use handoff_replay::{make_core, EngineSpec, Replay, ReplayConfig};
//! use handoff_workload::{SyntheticConfig, SyntheticWorkload};
//!
//! let cfg = ReplayConfig::default(); // vLLM, 2 prefill + 2 decode, kv router
//! let spec = EngineSpec::default();
//! let items = SyntheticWorkload::new(SyntheticConfig { requests: 20, ..SyntheticConfig::default() });
//! let (report, _) = Replay::new(cfg, items, |_, _| make_core(&spec).unwrap()).run();
//! assert_eq!(report.completed_requests, 20);
//! assert!(report.flat.ttft.p95 >= report.flat.ttft.median);
//! assert_eq!(report.lifecycle.handoffs_activated, 20);
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod engines;
pub mod metrics;
mod per_worker;
pub mod profile_file;
pub mod report;
mod request_table;
pub mod scenarios;
pub mod serving;
pub mod session_log;
pub mod sim;
pub mod timeline;

pub use engines::{make_core, EngineSpec, PerfChoice};
pub use handoff_core::CoreBox;
pub use handoff_engine::TransferModel;
pub use handoff_router::Pool;
pub use report::{Details, Report, RequestRecord};
pub use serving::Serving;
pub use sim::{
    deployment, engine_config, frontend_config, run_closed_loop, serving, worker_policy, Replay,
    ReplayConfig, ReplayOutcome, SessionServing,
};
