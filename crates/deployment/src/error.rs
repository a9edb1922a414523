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
