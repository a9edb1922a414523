//! `replay`'s deployment and workload flags as a library: the entry other
//! tools (`cargo xtask parity`) build a run from, so the same flags give
//! the same deployment, engines and requests as the command line does.

use crate::args::{DeployArgs, WorkloadArgs};
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_workload::TraceItem;
use std::fmt;

/// What the flags describe: a deployment, each scheduler's engine (by
/// worker id) and the workload's requests, in arrival order.
#[derive(Debug)]
pub struct FlagRun {
    /// The deployment.
    pub cfg: DeploymentConfig,
    /// Every scheduler's engine, by worker id.
    pub specs: Vec<EngineSpec>,
    /// The workload, read whole.
    pub items: Vec<TraceItem>,
}

/// Why flags describe no run; each variant is the stage that refused them,
/// with the command line's own message.
#[derive(Debug)]
pub enum FlagError {
    /// The arguments do not parse (an unknown flag, a malformed value).
    Parse(clap::Error),
    /// A deployment flag is out of range or contradicts another.
    Deployment(String),
    /// The workload cannot be opened (a missing file, a bad flag).
    Workload(String),
    /// A request cannot fit an engine's KV pool.
    Fit(String),
    /// The trace has an error at a line (the run would stop there).
    Trace(handoff_workload::TraceError),
}

impl fmt::Display for FlagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlagError::Parse(e) => write!(f, "{e}"),
            FlagError::Deployment(m) => write!(f, "deployment flags: {m}"),
            FlagError::Workload(m) => write!(f, "workload flags: {m}"),
            FlagError::Fit(m) => write!(f, "workload does not fit: {m}"),
            FlagError::Trace(e) => write!(f, "trace: {e}"),
        }
    }
}

impl std::error::Error for FlagError {}

/// The deployment and workload flags together, as `replay` takes them.
#[derive(clap::Parser)]
#[command(no_binary_name = true)]
struct Flags {
    #[command(flatten)]
    deploy: DeployArgs,
    #[command(flatten)]
    workload: WorkloadArgs,
}

/// The run `args` (without a program name) describe; with `transcript`
/// the deployment records one.
pub fn run_from_flags<I, S>(args: I, transcript: bool) -> Result<FlagRun, FlagError>
where
    I: IntoIterator<Item = S>,
    S: Into<std::ffi::OsString> + Clone,
{
    use clap::Parser;
    let f = Flags::try_parse_from(args).map_err(FlagError::Parse)?;
    let (mut cfg, specs) = f.deploy.deployment(true).map_err(FlagError::Deployment)?;
    cfg.transcript = transcript;
    let mut wl = f
        .workload
        .open(f.deploy.seed)
        .map_err(FlagError::Workload)?;
    let decode_schedulers = cfg.decode_workers as usize * usize::from(cfg.dp.dp_size());
    wl.check_fits(&specs, decode_schedulers)
        .map_err(FlagError::Fit)?;
    let items: Vec<TraceItem> = wl.take_items().collect();
    if let Some(e) = wl.error.borrow_mut().take() {
        return Err(FlagError::Trace(e));
    }
    Ok(FlagRun { cfg, specs, items })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_stage_refuses_with_its_own_variant() {
        let e = run_from_flags(["--no-such-flag"], false).unwrap_err();
        assert!(matches!(e, FlagError::Parse(_)), "{e}");
        let e = run_from_flags(["--prefill", "0", "--decode", "0"], false).unwrap_err();
        assert!(matches!(e, FlagError::Deployment(_)), "{e}");
        let e = run_from_flags(["--trace", "/nonexistent/trace.jsonl"], false).unwrap_err();
        assert!(matches!(e, FlagError::Workload(_)), "{e}");
    }

    /// `--kv-transfer-mode push` is vLLM's `NixlPushConnector`
    /// (`vllm/distributed/kv_transfer/kv_connector/v1/nixl/push_connector.py`):
    /// the push ordering, whose decode drops an unfulfilled registration
    /// after `push_registration_timeout` (480 s, `push_scheduler.py`);
    /// refused for the other engines and next to `--policy`.
    #[test]
    fn push_mode_is_vllms_own_ordering() {
        let r = run_from_flags(["--requests", "2", "--kv-transfer-mode", "push"], false).unwrap();
        assert_eq!(r.cfg.policy, handoff_core::HandoffPolicy::Push);
        assert_eq!(
            r.cfg.handoff.reservation_ttl,
            handoff_core::Duration::from_secs(480)
        );
        assert!(r.cfg.handoff.heartbeat.is_some());
        let r = run_from_flags(["--requests", "2"], false).unwrap();
        assert_eq!(r.cfg.policy, handoff_core::HandoffPolicy::SourceFirst);
        assert!(!r.cfg.handoff.reservation_expires());
        for bad in [
            &["--kv-transfer-mode", "push", "--backend", "sglang"][..],
            &["--kv-transfer-mode", "push", "--policy", "source-first"][..],
        ] {
            let e = run_from_flags(bad.iter().copied(), false).unwrap_err();
            assert!(matches!(e, FlagError::Deployment(_)), "{e}");
        }
    }

    #[test]
    fn the_default_run_reads_whole() {
        let r = run_from_flags(["--requests", "5"], true).unwrap();
        assert_eq!(r.items.len(), 5);
        assert!(r.cfg.transcript);
        assert_eq!(
            r.specs.len(),
            (r.cfg.prefill_workers + r.cfg.decode_workers) as usize
        );
    }
}
