//! Test doubles for lifecycle tests, shared by this crate's tests and the
//! workspace's cross-crate tests: [`FakeCore`], a scheduler core that panics
//! on any double release, and [`PairSim`], a source and a destination worker
//! run by the one [`crate::engine::Engine`] (local hosts, a small director)
//! over a channel its fault plan makes lossy, drivable event by event so a
//! test can stop at a lifecycle phase and inject a fault there; and
//! [`QuietPromises`], which holds a core's quiet floors to its later steps.

mod fake;
mod pair;
mod quiet;

pub use fake::FakeCore;
pub use pair::{PairConfig, PairSim, DEST, SOURCE};
pub use quiet::QuietPromises;
