//! # workload
//!
//! Where requests come from: a streaming reader for Mooncake JSONL traces and
//! Azure LLM inference CSV traces ([`TraceReader`], [`TraceFormat`]), a writer for the same format ([`TraceWriter`]), a seeded
//! synthetic generator with Poisson arrivals and shared-prefix groups
//! ([`SyntheticWorkload`]) and a synthetic agentic-session generator
//! ([`generate_sessions`]).
//!
//! Everything yields [`TraceItem`]s: a [`handoff_core::Request`] plus the
//! session turn index and think-time a trace may carry. The reader never loads
//! a whole file, bounds every line before allocating for it, and turns every
//! malformed input into a [`TraceError`] that names file, line and field.
//!
//! Sans-IO in spirit: the crate reads from any `BufRead` and writes to any
//! `Write` the caller hands it; it never opens files or reads a clock.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod azure;
pub mod dist;
pub mod error;
pub mod item;
mod line;
pub mod reader;
mod record;
pub mod session;
pub mod synthetic;
pub mod writer;

pub use dist::LengthDist;
pub use error::{Problem, TraceError, TraceField};
pub use item::{session_id_from_str, TraceItem};
pub use reader::{ReaderOptions, ReaderStats, TraceFormat, TraceReader};
pub use session::{generate_sessions, SessionConfig};
pub use synthetic::{SyntheticConfig, SyntheticWorkload};
pub use writer::{write_trace, TraceWriter};
