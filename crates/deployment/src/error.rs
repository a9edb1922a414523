//! What a deployment refuses to be built from.

use crate::DeploymentConfig;
use handoff_core::{SchedulerCore, WorkerId};

/// A deployment that cannot run as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeploymentError {
    /// A worker's core publishes KV event blocks of another size than the
    /// deployment's [`DeploymentConfig::block_size`], which its routers
    /// hash requests with: their overlap scores would count in the wrong
    /// unit.
    BlockSize {
        /// The scheduler whose core differs.
        worker: WorkerId,
        /// Tokens per KV event block of its core.
        core: u32,
        /// The deployment's block size.
        deployment: u32,
    },
    /// The deployment's ranks step in lockstep
    /// ([`handoff_core::DpCoupling::Lockstep`], what
    /// `--enable-expert-parallel` implies) and this driver steps every rank
    /// on its own wall clock, so it cannot run their passes together.
    Lockstep {
        /// The driver that cannot.
        driver: WallDriver,
    },
}

/// The drivers that step each rank on its own wall clock (a node per rank,
/// not the one engine), and so cannot step a worker's ranks together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WallDriver {
    /// `live --clock wall`: a node thread per rank in one process.
    LiveWallThreads,
    /// `live --clock wall` over TCP: a node process per rank.
    LiveWallTcp,
    /// `serve --engine`: one engine process, a node per rank.
    ServeEngine,
}

impl WallDriver {
    /// How the command line names the mode.
    pub fn name(self) -> &'static str {
        match self {
            WallDriver::LiveWallThreads => "live --clock wall",
            WallDriver::LiveWallTcp => "live --clock wall over TCP",
            WallDriver::ServeEngine => "serve --engine",
        }
    }
}

impl std::fmt::Display for DeploymentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeploymentError::BlockSize {
                worker,
                core,
                deployment,
            } => write!(
                f,
                "worker {}: its core publishes KV blocks of {core} tokens, the deployment's routers hash blocks of {deployment}",
                worker.0
            ),
            DeploymentError::Lockstep { driver } => write!(
                f,
                "{} steps each data-parallel rank on its own, so it cannot run lockstep ranks (expert parallelism); use the virtual clock (replay, live --clock virtual) or serve in one process",
                driver.name()
            ),
        }
    }
}

impl std::error::Error for DeploymentError {}

/// Refuses `core` for scheduler `worker` of `cfg` unless its KV event
/// blocks are the deployment's block size. Every driver checks each core
/// it builds from a configuration with this.
pub fn check_core(
    cfg: &DeploymentConfig,
    worker: WorkerId,
    core: &dyn SchedulerCore,
) -> Result<(), DeploymentError> {
    let caps = core.capabilities();
    if caps.event_block_tokens == cfg.block_size {
        Ok(())
    } else {
        Err(DeploymentError::BlockSize {
            worker,
            core: caps.event_block_tokens,
            deployment: cfg.block_size,
        })
    }
}

/// Refuses `cfg` for `driver` when its ranks step in lockstep
/// ([`handoff_core::DpLayout::is_lockstep`]): that driver would run them
/// independently and report a deployment it did not run.
pub fn check_wall_driver(
    cfg: &DeploymentConfig,
    driver: WallDriver,
) -> Result<(), DeploymentError> {
    if cfg.dp.is_lockstep() {
        Err(DeploymentError::Lockstep { driver })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine_config;
    use handoff_core::{DpCoupling, DpLayout};

    /// The coupling set on a deployment reaches the engine, and only the
    /// wall-clock node drivers refuse it, naming themselves.
    #[test]
    fn lockstep_reaches_the_engine_and_wall_drivers_refuse_it() {
        let mut cfg = DeploymentConfig {
            dp: DpLayout::new(4).unwrap(),
            ..DeploymentConfig::default()
        };
        assert!(
            !engine_config(&cfg).dp.is_lockstep(),
            "independent by default"
        );
        assert_eq!(check_wall_driver(&cfg, WallDriver::ServeEngine), Ok(()));
        cfg.set_dp_coupling(DpCoupling::Lockstep);
        assert!(engine_config(&cfg).dp.is_lockstep());
        assert_eq!(engine_config(&cfg).dp.dp_size(), 4);
        for driver in [
            WallDriver::LiveWallThreads,
            WallDriver::LiveWallTcp,
            WallDriver::ServeEngine,
        ] {
            let e = check_wall_driver(&cfg, driver).unwrap_err();
            assert_eq!(e, DeploymentError::Lockstep { driver });
            assert!(e.to_string().starts_with(driver.name()), "{e}");
        }
        // One rank has nothing to couple.
        cfg.dp = DpLayout::SINGLE;
        cfg.set_dp_coupling(DpCoupling::Lockstep);
        assert_eq!(check_wall_driver(&cfg, WallDriver::LiveWallTcp), Ok(()));
    }
}
