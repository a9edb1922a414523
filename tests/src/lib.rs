//! Cross-crate test support: the canonical parity traces and the harness
//! that runs one trace through replay and through live and compares their
//! lifecycle transcripts (`cargo xtask parity`, `tests/parity.rs`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod parity;
