//! [`PairSim`]: a source and a destination worker run by the one
//! [`crate::Engine`] (local hosts, a small director) over a channel its
//! fault plan makes lossy, drivable event by event so a test can stop at a
//! lifecycle phase and inject a fault there. Its cores are
//! `handoff_core::testing::FakeCore`s, which panic on any double release.

mod pair;

pub use pair::{DrainError, PairConfig, PairSim, DEST, SOURCE};
