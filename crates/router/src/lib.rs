//! # router
//!
//! Picks a worker for a request within one pool (prefill or decode) and books
//! the request's estimated load on it at selection time, as Dynamo's KV
//! router does (ai-dynamo/dynamo `lib/kv-router`: `ActiveSequences` books at
//! `add_request`, `mark_prefill_completed` drops prefill load, `free` drops
//! the rest). This is the DEP's "existing selection-time booking": the only
//! router-side accounting; physical reservations belong to the workers and
//! reach the router only through their [`handoff_core::KvCapacitySnapshot`]s
//! and [`handoff_core::KvEvent`]s.
//!
//! Lifecycle of a booking (DEP "Router And Engine Accounting"):
//!
//! | event | prefill pool | decode pool |
//! | --- | --- | --- |
//! | [`Router::select`] | books prompt blocks + uncached prefill tokens | books prompt + output blocks |
//! | [`Router::prefill_completed`] | drops the prefill tokens | (no prefill tokens) |
//! | [`Router::request_released`] | at source release: drops the blocks | at completion or terminal failure |
//!
//! Releases are idempotent: a second release, or one for an unknown request,
//! changes nothing and is counted in [`RouterStats`].
//!
//! Modes ([`RouterMode`]): KV-aware (prefix overlap from the workers' KV
//! events against booked load), round-robin, seeded random, least-loaded and
//! seeded power-of-two-choices. Every decision is deterministic: ties go to
//! the lowest worker id and no hash-map iteration order reaches a decision.
//!
//! Sans-IO: `now` is an argument; nothing reads a clock.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod frontend;
pub mod load;
pub mod prefix;
pub mod router;

pub use config::{PoolRole, RouterConfig, RouterMode};
pub use frontend::{Frontend, FrontendConfig, Pool, FRONTEND_ID};
pub use load::{Booking, Release, RouterStats, Selection, WorkerLoad};
pub use prefix::PrefixIndex;
pub use router::Router;
