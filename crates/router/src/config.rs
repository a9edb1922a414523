//! What a router routes and how.
//!
//! Above the policies (a [`RouterMode`] names one) and below the router;
//! [`PoolRole`] lives in a lower module so that the policy view can name a
//! pool's role without knowing the configuration.

use crate::cost::CostParams;
pub use crate::cost::KvKnobs;
use crate::policy::CustomPolicy;

pub use crate::role::PoolRole;

/// How a router picks a worker: one of the built-in routing policies by
/// name (the command line's `--router`), or a downstream one
/// ([`RouterMode::Custom`]). See [`crate::policy`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RouterMode {
    /// Dynamo 1.6.1's KV router: the lowest cost (or a softmax sample at a
    /// positive temperature) with the knobs of [`RouterConfig::kv`]; ties
    /// broken uniformly at random by the seeded generator. See
    /// [`crate::policy::KvAware`] for the formula per pool and the Dynamo
    /// functions each rule follows.
    KvAware,
    /// This project's earlier kv-aware cost: booked blocks plus prompt
    /// load minus the overlap weighted by
    /// [`RouterConfig::overlap_score_weight`], ties to the lowest id (see
    /// [`crate::policy::KvLegacy`]).
    KvLegacy,
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
            RouterMode::KvLegacy => "kv-legacy",
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
            "kv-legacy" => RouterMode::KvLegacy,
            "round-robin" | "rr" => RouterMode::RoundRobin,
            "random" => RouterMode::Random,
            "least-loaded" => RouterMode::LeastLoaded,
            "power-of-two" | "p2c" => RouterMode::PowerOfTwo,
            _ => return None,
        })
    }

    /// Every built-in mode, in a fixed order.
    pub const ALL: [RouterMode; 6] = [
        RouterMode::KvAware,
        RouterMode::KvLegacy,
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
    /// Blocks of cost one overlapping block saves in `KvLegacy` (default
    /// 1.0); 0 makes it pure load balancing. `KvAware` reads [`RouterConfig::kv`].
    pub overlap_score_weight: f64,
    /// `KvAware`'s knobs, Dynamo's names and defaults.
    pub kv: KvKnobs,
    /// The pool is an aggregated frontend's only pool (its role is
    /// [`PoolRole::Decode`]): `KvAware` then scores it as Dynamo's
    /// aggregated router does, prompt load and overlap included, and books
    /// its uncached prompt tokens until the first token.
    pub aggregated: bool,
    /// Seed of `Random` and `PowerOfTwo`.
    pub seed: u64,
}

impl RouterConfig {
    /// A config with overlap weight 1.0, Dynamo's default `KvAware` knobs,
    /// not aggregated, seed 0.
    pub fn new(role: PoolRole, mode: RouterMode, block_size: u32) -> Self {
        RouterConfig {
            role,
            mode,
            block_size,
            overlap_score_weight: 1.0,
            kv: KvKnobs::default(),
            aggregated: false,
            seed: 0,
        }
    }

    /// The same config with other `KvAware` knobs.
    pub fn with_kv(mut self, kv: KvKnobs) -> Self {
        self.kv = kv;
        self
    }

    /// The same config, marked as an aggregated frontend's pool (or not).
    pub fn with_aggregated(mut self, aggregated: bool) -> Self {
        self.aggregated = aggregated;
        self
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

    /// What this pool's costs read: role, block size, weights.
    pub(crate) fn cost_params(&self) -> CostParams {
        CostParams {
            role: self.role,
            block_size: self.block_size,
            overlap_score_weight: self.overlap_score_weight,
            kv: self.kv,
            aggregated: self.aggregated,
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
        assert_eq!(
            RouterMode::from_name("kv-legacy"),
            Some(RouterMode::KvLegacy)
        );
        assert_eq!(RouterMode::from_name("nope"), None);
    }
}
