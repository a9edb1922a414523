//! Cross-crate test support: the parity harness (replay against virtual- and
//! wall-clock live, `cargo xtask parity`, `tests/parity.rs`) and seeded
//! generation of whole runs for property tests (`tests/parity_props.rs`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod gen;
pub mod parity;
