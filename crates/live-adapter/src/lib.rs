//! # live-adapter
//!
//! The same handoff-core [`handoff_core::Worker`]s replay drives, run live:
//! one worker per thread (or per process over TCP), wall-clock timers, facts
//! over a [`transport::Transport`]. There is no second lifecycle here: a
//! node only feeds inputs to its worker and carries its outputs, so the
//! transcript of a live run equals replay's for the same trace and policy.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod clock;
pub mod frontend;
pub mod inproc;
pub mod node;
pub mod remote;
pub mod virtual_run;

pub use clock::WallClock;
pub use frontend::{FrontendNode, LiveOutcome};
pub use inproc::{run_in_process, LiveConfig};
pub use node::{NodeConfig, NodeStats, WorkerNode};
pub use remote::{serve_virtual, RemoteError, RemotePort};
pub use virtual_run::{run_virtual_threads, VirtualOutcome};
