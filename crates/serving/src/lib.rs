//! # handoff-serving
//!
//! What every driver serves with, so replay, virtual-clock live, wall-clock
//! live and `serve` report alike: the [`Serving`] director (the router
//! frontend's hops, arrivals, the recorder and the transcript), and the
//! [`Report`] and per-request [`RequestRecord`]s computed from the workers'
//! event stream. The deployment it serves is `handoff-deployment`'s.
//!
//! It never runs the engine itself: the drivers (`handoff-replay`,
//! `handoff-live-adapter`, `handoff-serve`) do, each with its own hosts and
//! clock.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod kv_order;
pub mod metrics;
mod per_worker;
pub mod report;
mod request_table;
pub mod serving;
pub mod session_log;
pub mod timeline;

pub use kv_order::KvOrder;
pub use report::{Details, Report, RequestRecord};
pub use serving::{serving, Serving};
