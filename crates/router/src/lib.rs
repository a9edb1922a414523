//! # handoff-router
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
//! Modes ([`RouterMode`]): KV-aware (Dynamo 1.6.1's cost: prefix overlap
//! from the workers' KV events against booked load, ties broken by the
//! seeded generator), the project's earlier kv-aware cost (`kv-legacy`),
//! round-robin, seeded random, least-loaded and seeded
//! power-of-two-choices. Every decision is deterministic: randomness comes
//! from the router's seeded generator, other ties go to the lowest worker
//! id, and no hash-map iteration order reaches a decision.
//! Each mode is a [`RoutingPolicy`] ([`policy`]); a downstream crate routes
//! with its own through [`RouterMode::Custom`] and [`CustomPolicy`], which
//! reaches every driver (replay, live, serve) through the same configuration
//! field that names a built-in mode.
//!
//! Sans-IO: `now` is an argument; nothing reads a clock.
//!
//! # Lifting it into a larger mocker
//!
//! A mocker with its own workers keeps one [`Router`] per pool, books at
//! selection and releases on its own completion events:
//!
//! ```
//! use handoff_core::{Instant, Request, RequestId, WorkerId};
//! use handoff_router::{PoolRole, Router, RouterConfig, RouterMode};
//!
//! let cfg = RouterConfig::new(PoolRole::Decode, RouterMode::LeastLoaded, 16);
//! let mut r = Router::new(cfg, [WorkerId(0), WorkerId(1)]);
//! let req = |id| Request {
//!     id: RequestId(id), prompt_tokens: 1024, max_output_tokens: 64, prefix_hashes: vec![],
//!     hash_block_tokens: 512, session: None, arrival: Instant::ZERO,
//!     lora: None,
//! };
//! let a = r.select(&req(1), Instant::ZERO).unwrap();
//! let b = r.select(&req(2), Instant::ZERO).unwrap();
//! assert_ne!(a.worker, b.worker, "the second goes to the less booked worker");
//! r.request_released(RequestId(1));
//! r.request_released(RequestId(2));
//! assert!(r.is_drained());
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// Layers, lowest first; a module imports only modules of lower layers, so
// no module imports one that imports it:
// 1. `holders`, `prefix`, `load`, `role` (which pool): leaves.
// 2. `published` (workers' KV events), `state` (the router's per-worker
//    state).
// 3. `cost` (what a request costs a worker), then `view` (what a policy
//    sees).
// 4. `policy` (the policies), then `config` (which names them).
// 5. `router` (builds the policy from the mode and books its answers), then
//    `frontend` (drives the routers).
pub mod config;
mod cost;
pub mod frontend;
pub mod holders;
pub mod load;
pub mod policy;
pub mod prefix;
mod published;
mod role;
pub mod router;
mod state;
mod view;

pub use config::{KvKnobs, PoolRole, RouterConfig, RouterMode};
pub use frontend::{
    is_push, Frontend, FrontendConfig, Pool, ReseedCause, SessionRoute, SessionRouting,
    FRONTEND_ID, PUSH_REQUESTS,
};
pub use load::{Booking, Release, RouterStats, Selection, WorkerLoad};
pub use policy::{CustomPolicy, RouterView, RoutingChoice, RoutingPolicy};
pub use prefix::PrefixIndex;
pub use router::{AuditError, Router};
