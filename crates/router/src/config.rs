//! What a router routes and how.
//!
//! Above the policies (a [`RouterMode`] names one) and below the router;
//! [`PoolRole`] lives in a lower module so that the policy view can name a
//! pool's role without knowing the configuration.

use crate::cost::CostParams;
use crate::policy::CustomPolicy;

pub use crate::role::PoolRole;

/// How a router picks a worker: one of the built-in routing policies by
/// name (the command line's `--router`), or a downstream one
/// ([`RouterMode::Custom`]). See [`crate::policy`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RouterMode {
    /// Lowest cost, where cost is booked load in blocks minus the prefix
    /// overlap (from published KV events) weighted by
    /// [`RouterConfig::overlap_score_weight`]; after Dynamo's
    /// `DefaultWorkerScorer::worker_logit`
    /// (`lib/kv-router/src/scheduling/selector/default.rs`). See
    /// [`crate::Router::select`] for the formula per pool.
    KvAware,
    /// The next worker in id order, cycling.
    RoundRobin,
    /// A uniformly random worker from the seeded generator.
    Random,
    /// The worker with the least booked blocks plus last reported
    /// `kv_used_blocks`.
    LeastLoaded,
    /// Two distinct random workers (seeded); the less loaded of them, load
    /// as in `LeastLoaded`.
    PowerOfTwo,
    /// A downstream [`crate::RoutingPolicy`] (see [`CustomPolicy`]); named
    /// in reports by [`CustomPolicy::name`]. Not in [`RouterMode::ALL`] and
    /// not parsed by [`RouterMode::from_name`].
    Custom(CustomPolicy),
}

impl RouterMode {
    /// Stable lower-case name for reports and the command line.
    pub fn name(self) -> &'static str {
        match self {
            RouterMode::KvAware => "kv",
            RouterMode::RoundRobin => "round-robin",
            RouterMode::Random => "random",
            RouterMode::LeastLoaded => "least-loaded",
            RouterMode::PowerOfTwo => "power-of-two",
            RouterMode::Custom(c) => c.name(),
        }
    }

    /// Parses [`RouterMode::name`] (and a few common aliases).
    pub fn from_name(s: &str) -> Option<RouterMode> {
        Some(match s {
            "kv" | "kv-aware" => RouterMode::KvAware,
            "round-robin" | "rr" => RouterMode::RoundRobin,
            "random" => RouterMode::Random,
            "least-loaded" => RouterMode::LeastLoaded,
            "power-of-two" | "p2c" => RouterMode::PowerOfTwo,
            _ => return None,
        })
    }

    /// Every built-in mode, in a fixed order.
    pub const ALL: [RouterMode; 5] = [
        RouterMode::KvAware,
        RouterMode::RoundRobin,
        RouterMode::Random,
        RouterMode::LeastLoaded,
        RouterMode::PowerOfTwo,
    ];
}

/// A router's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RouterConfig {
    /// The pool served.
    pub role: PoolRole,
    /// The selection rule.
    pub mode: RouterMode,
    /// The engines' KV block size in tokens; requests are hashed with it so
    /// their hashes match the workers' KV events.
    pub block_size: u32,
    /// Blocks of cost one overlapping block saves (Dynamo's
    /// `overlap_score_weight`, default 1.0). 0 makes `KvAware` pure load
    /// balancing.
    pub overlap_score_weight: f64,
    /// Seed of `Random` and `PowerOfTwo`.
    pub seed: u64,
}

impl RouterConfig {
    /// A config with overlap weight 1.0 and seed 0.
    pub fn new(role: PoolRole, mode: RouterMode, block_size: u32) -> Self {
        RouterConfig {
            role,
            mode,
            block_size,
            overlap_score_weight: 1.0,
            seed: 0,
        }
    }

    /// The same config with another seed.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The same config with another overlap weight.
    pub fn with_overlap_weight(mut self, weight: f64) -> Self {
        self.overlap_score_weight = weight;
        self
    }

    /// What this pool's costs read: role, block size, overlap weight.
    pub(crate) fn cost_params(&self) -> CostParams {
        CostParams {
            role: self.role,
            block_size: self.block_size,
            overlap_score_weight: self.overlap_score_weight,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in RouterMode::ALL {
            assert_eq!(RouterMode::from_name(m.name()), Some(m));
        }
        assert_eq!(RouterMode::from_name("p2c"), Some(RouterMode::PowerOfTwo));
        assert_eq!(RouterMode::from_name("nope"), None);
    }
}
