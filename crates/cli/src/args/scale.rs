//! Elastic fleets on the command line: the fleet's ceilings, the startup
//! delay, scale events and a built-in planner (`replay` only).

use super::DeployArgs;
use crate::limits::{int, real};
use clap::Args;
use handoff_core::Duration;
use handoff_deployment::DeploymentConfig;
use handoff_engine::scale::{Fleet, MAX_FLEET_WORKER};
use handoff_engine::{parse_scale_plan, Fault};
use handoff_planner::{parse_planner, Planner};
use handoff_workload::file::FileKind;

/// An elastic fleet: how large each pool may grow and what resizes it.
#[derive(Args, Debug, Clone, Default)]
pub struct ScaleArgs {
    /// Elastic fleet: most prefill workers; those above --prefill start
    /// absent until a scale-up [default: --prefill].
    #[arg(long, value_name = "N")]
    pub max_prefill: Option<u32>,
    /// Elastic fleet: most decode workers; those above --decode start
    /// absent [default: --decode].
    #[arg(long, value_name = "N")]
    pub max_decode: Option<u32>,
    /// Elastic fleet: seconds from a scale-up to the worker being routable
    /// (model load and warm-up) [default: 30].
    #[arg(long, value_name = "SECS")]
    pub startup_delay: Option<f64>,
    /// Elastic fleet: scale events, `t=30s:up:decode,t=60s:drain:3,t=90s:remove:3`
    /// (or a file holding them).
    #[arg(long, value_name = "PLAN")]
    pub scale_plan: Option<String>,
    /// Elastic fleet: a built-in planner sizing the pools on the virtual
    /// clock, `throughput[:prefill-tps=N,decode-tps=N,min=N,expected-ttft-ms=MS]`
    /// (Dynamo's throughput-based SLA planner). Open loop only.
    #[arg(long, value_name = "PLANNER")]
    pub planner: Option<String>,
    /// Seconds between planner ticks [default: 10].
    #[arg(long, value_name = "SECS")]
    pub planner_interval: Option<f64>,
    /// Elastic fleet with --slo: the scaling section reports SLO
    /// attainment and goodput per window of this many seconds of
    /// arrivals [default: 60].
    #[arg(long, value_name = "SECS")]
    pub slo_window: Option<f64>,
}

/// A planner and the interval it is called at.
pub type Timed = (Box<dyn Planner>, Duration);

/// The default startup delay, seconds.
const STARTUP_DELAY_S: f64 = 30.0;
/// The default planner interval, seconds (Dynamo's `adjustment_interval`
/// is of this order).
const PLANNER_INTERVAL_S: f64 = 10.0;

impl ScaleArgs {
    /// Whether any elastic flag was given.
    pub fn is_elastic(&self) -> bool {
        self.max_prefill.is_some()
            || self.max_decode.is_some()
            || self.scale_plan.is_some()
            || self.planner.is_some()
    }

    /// `deploy` with every worker the fleet may have (its ceilings).
    pub fn widen(&self, deploy: &DeployArgs) -> Result<DeployArgs, String> {
        if deploy.dp_size != 1 {
            return Err("--max-prefill/--max-decode/--scale-plan/--planner: \
                        an elastic fleet needs --dp-size 1"
                .into());
        }
        if deploy.decode == 0 && self.max_decode.is_some_and(|m| m > 0) {
            return Err(
                "--max-decode: an aggregated deployment (--decode 0) has no decode \
                        pool to grow"
                    .into(),
            );
        }
        let mut wide = deploy.clone();
        wide.prefill = self.ceiling("max-prefill", self.max_prefill, deploy.prefill)?;
        wide.decode = self.ceiling("max-decode", self.max_decode, deploy.decode)?;
        Ok(wide)
    }

    fn ceiling(&self, flag: &str, max: Option<u32>, initial: u32) -> Result<u32, String> {
        let m = max.unwrap_or(initial);
        int(
            flag,
            u64::from(m),
            u64::from(initial),
            u64::from(MAX_FLEET_WORKER),
        )?;
        Ok(m)
    }

    /// Puts the fleet (`initial` prefill and decode workers up, the rest of
    /// `cfg`'s absent) and the scale plan's events into `cfg`'s fault plan.
    pub fn apply(&self, cfg: &mut DeploymentConfig, initial: (u32, u32)) -> Result<(), String> {
        let delay = self.startup_delay.unwrap_or(STARTUP_DELAY_S);
        real("startup-delay", delay, 0.0, 86_400.0)?;
        cfg.faults.fleet = Fleet::pools(
            cfg.prefill_workers,
            initial.0,
            cfg.decode_workers,
            initial.1,
            Duration::from_nanos((delay * 1e9).round() as u64),
        );
        let Some(spec) = &self.scale_plan else {
            return Ok(());
        };
        let path = std::path::Path::new(spec);
        let text = if path.is_file() {
            handoff_workload::file::read_to_string("--scale-plan", path, FileKind::FaultPlan)
                .map_err(|e| e.to_string())?
        } else {
            spec.clone()
        };
        let workers = cfg.prefill_workers + cfg.decode_workers;
        for t in parse_scale_plan(&text).map_err(|e| format!("--scale-plan: {e}"))? {
            if let Fault::Drain { worker } | Fault::Remove { worker } = t.fault {
                if worker.0 >= workers {
                    return Err(format!(
                        "--scale-plan: worker {worker} does not exist (the fleet has workers 0..{})",
                        workers - 1
                    ));
                }
            }
            cfg.faults.push(t.at, t.fault);
        }
        Ok(())
    }

    /// `--slo-window`, checked (1 ms to a week).
    pub fn slo_window(&self) -> Result<Option<Duration>, String> {
        let Some(secs) = self.slo_window else {
            return Ok(None);
        };
        if !self.is_elastic() {
            return Err("--slo-window: needs an elastic fleet \
                        (--max-prefill, --max-decode, --scale-plan or --planner)"
                .into());
        }
        real("slo-window", secs, 0.001, 7.0 * 86_400.0)?;
        Ok(Some(Duration::from_nanos((secs * 1e9).round() as u64)))
    }

    /// The built-in planner `--planner` names and its interval.
    pub fn planner(&self) -> Result<Option<Timed>, String> {
        let Some(spec) = &self.planner else {
            return Ok(None);
        };
        let secs = self.planner_interval.unwrap_or(PLANNER_INTERVAL_S);
        real("planner-interval", secs, 0.001, 86_400.0)?;
        let interval = Duration::from_nanos((secs * 1e9).round() as u64);
        let p = parse_planner(spec, interval).map_err(|e| format!("--planner: {e}"))?;
        Ok(Some((p, interval)))
    }
}
