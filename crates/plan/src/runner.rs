//! The seam between the library and whatever runs a configuration.

use serde_json::Value;

/// What runs configurations: the caller's simulator. `J` is the job the
/// library hands over ([`crate::Layout`] for a plan, [`crate::aic::AicRun`] for an
/// AIConfigurator row).
pub trait Runner<J>: Sync {
    /// One job made runnable (its flags parsed and checked, say).
    type Config: Sync;

    /// Job number `index`, `job`, as a configuration, or why it cannot run
    /// (a plan refuses itself; an AIConfigurator row is reported refused).
    fn prepare(&self, index: usize, job: &J) -> Result<Self::Config, String>;

    /// Runs every configuration and returns their summary rows, in the
    /// order given, each with its `index` (how and on how many threads is
    /// the runner's choice; the rows may not depend on it).
    fn run_all(&self, configs: &[Self::Config]) -> Vec<Value>;
}
