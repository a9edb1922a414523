//! # handoff-live-adapter
//!
//! The same handoff-core [`handoff_core::WorkerHost`]s replay drives, run
//! live: one worker per thread (or per process over TCP), facts over a
//! [`handoff_transport::Transport`]. Two clocks:
//!
//! - **virtual** ([`remote`], [`virtual_run`], over TCP [`tcp`]): the one engine runs on the
//!   coordinator with its hosts on the worker nodes; every operation crosses
//!   the transport with its model time, so transcript and report are
//!   byte-identical to replay's, on any trace.
//! - **wall** ([`node`], [`frontend`], [`inproc`]): each node drives its
//!   host by a [`WallClock`] and the frontend routes with the same
//!   [`handoff_serving::Serving`] director, for real-time use; its report is close to
//!   replay's, not equal.
//!
//! There is no second lifecycle or driver protocol here: nodes only move
//! frames and read clocks.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod clock;
pub mod confirm;
pub mod frontend;
pub mod inproc;
pub mod node;
pub mod reads;
pub mod remote;
pub mod tcp;
pub mod virtual_run;

pub use clock::WallClock;
pub use frontend::{FrontendNode, LiveOutcome, LiveRun, LossKind, WorkerLoss};
pub use inproc::run_in_process;
pub use node::{NodeConfig, NodeStats, WorkerNode};
pub use remote::{serve_virtual, RemoteError, RemotePort, ServeStats};
pub use tcp::{
    connect_retry, connect_workers, run_tcp_virtual, serve_worker_virtual, serve_worker_wall,
    TcpError, WorkerSetup,
};
pub use virtual_run::{
    run_virtual_sessions, run_virtual_sessions_recorded, run_virtual_threads, VirtualOutcome,
};
