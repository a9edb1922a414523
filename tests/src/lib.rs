//! Cross-crate test support: the parity harness (replay against virtual- and
//! wall-clock live, `cargo xtask parity`, `tests/parity.rs`) and seeded
//! generation of whole runs for property tests (`tests/parity_props.rs`), and
//! deterministic simulation testing on the real cores (`dst`, `cargo xtask
//! dst`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod dst;
pub mod gen;
pub mod parity;
