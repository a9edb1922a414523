//! Test doubles for lifecycle tests, shared by this crate's tests and the
//! workspace's cross-crate tests: [`FakeCore`], a scheduler core that panics
//! on any double release, and [`QuietPromises`], which holds a core's quiet
//! floors to its later steps. (The lossy source/destination pair driven by
//! the engine is `handoff_engine::testing::PairSim`.)

mod fake;
mod quiet;

pub use fake::FakeCore;
pub use quiet::QuietPromises;
