//! # handoff-workload
//!
//! Where requests come from: a streaming reader for Mooncake JSONL traces and
//! Azure LLM inference CSV traces ([`TraceReader`], [`TraceFormat`]), a writer for the same format ([`TraceWriter`]), a seeded
//! synthetic generator with Poisson arrivals (at a constant rate or along a
//! [`RateCurve`]) and shared-prefix groups ([`SyntheticWorkload`]) and a synthetic agentic-session generator
//! ([`generate_sessions`]).
//!
//! Everything yields [`TraceItem`]s: a [`handoff_core::Request`] plus the
//! session turn index and think-time a trace may carry. The reader never loads
//! a whole file, bounds every line before allocating for it, and turns every
//! malformed input into a [`TraceError`] that names file, line and field.
//!
//! Sans-IO in spirit: the trace reader reads from any `BufRead` and the
//! writer writes to any `Write` the caller hands it; nothing reads a clock.
//! The one exception is [`file`], the bounded whole-file reader every edge
//! (the CLI, serve) reads user-named files with: it sits here because both
//! already depend on this crate and this crate only on `handoff-core`.
//!
//! # Lifting it into a larger mocker
//!
//! Any `BufRead` will do; a mocker hands the items' requests to its own
//! router. Both trace formats yield the same [`TraceItem`]s:
//!
//! ```
//! use handoff_workload::{ReaderOptions, TraceFormat, TraceReader};
//!
//! let mooncake = r#"{"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [7, 8]}"#;
//! let azure = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5,1000,10\n2023-11-16 18:15:47,20,5\n";
//! let m: Vec<_> = TraceReader::new(mooncake.as_bytes(), ReaderOptions::new("m.jsonl"))
//!     .collect::<Result<_, _>>()
//!     .unwrap();
//! let opts = ReaderOptions::new("a.csv").with_format(TraceFormat::AzureCsv);
//! let a: Vec<_> = TraceReader::new(azure.as_bytes(), opts).collect::<Result<_, _>>().unwrap();
//! assert_eq!(m[0].request.prompt_tokens, a[0].request.prompt_tokens);
//! // Azure arrivals count from the first row: the second came 0.5 s later.
//! assert_eq!(a[1].request.arrival.0, 500_000_000);
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod azure;
pub mod dist;
pub mod error;
pub mod file;
pub mod item;
mod line;
pub mod lora;
pub mod observed;
pub mod rate_curve;
pub mod reader;
mod record;
pub mod session;
pub mod synthetic;
pub mod writer;

pub use dist::LengthDist;
pub use error::{Problem, TraceError, TraceField};
pub use item::{session_id_from_str, TraceItem};
pub use rate_curve::{RateCurve, RateCurveError, RateCurveProblem};
pub use reader::{ReaderOptions, ReaderStats, TraceFormat, TraceReader};
pub use session::{generate_sessions, SessionConfig};
pub use synthetic::{SyntheticConfig, SyntheticWorkload};
pub use writer::{write_trace, TraceWriter};
