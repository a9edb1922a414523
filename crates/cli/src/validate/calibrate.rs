//! `calibrate`: fits the step-time model's overhead terms
//! (docs/step-time-terms.md) to one real run and writes the calibrated
//! profile: the profile the deployment is timed by, with the fitted terms
//! in its `overheads` section, which `--perf profile:` (and `--overheads
//! FILE`, applied to another profile) accepts.
//!
//! The objective is the sum of the per-request median absolute percentage
//! errors of TTFT, TPOT and E2E; the search ([`super::fit`]) is
//! deterministic and bounded, and every evaluation is a whole replay of the
//! run (a few tens of milliseconds for 300 requests). Terms fitted to one
//! run are only known to hold for it: the output says so and names the
//! command that checks them on another.

use super::accuracy::Latency;
use super::fit::{minimise, Param};
use super::{compare, table, Compared, RealArgs};
use crate::args::DeployArgs;
use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// A term `calibrate` may fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Term {
    /// `step_ms`: per pass, work the kernels leave out and the engine does
    /// not hide.
    #[value(name = "step_ms")]
    StepMs,
    /// `per_seq_ms`: per sequence in a pass.
    #[value(name = "per_seq_ms")]
    PerSeqMs,
    /// `kernel_scale`: a factor on the kernel tables.
    #[value(name = "kernel_scale")]
    KernelScale,
    /// `allreduce_us_per_mib`: extra all-reduce time per MiB (TP > 1).
    #[value(name = "allreduce_us_per_mib")]
    AllreduceUsPerMib,
}

impl Term {
    /// The search's bounds and start for the term.
    fn param(self) -> Param {
        let (name, lo, hi, start) = match self {
            Term::StepMs => ("step_ms", 0.0, 20.0, 0.0),
            Term::PerSeqMs => ("per_seq_ms", 0.0, 0.2, 0.0),
            Term::KernelScale => ("kernel_scale", 0.5, 2.0, 1.0),
            Term::AllreduceUsPerMib => ("allreduce_us_per_mib", 0.0, 500.0, 0.0),
        };
        Param {
            name,
            lo,
            hi,
            start,
        }
    }
}

/// Options of `calibrate`.
#[derive(Args, Debug)]
pub struct CalibrateArgs {
    #[command(flatten)]
    deploy: DeployArgs,
    #[command(flatten)]
    real: RealArgs,
    /// Terms to fit, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "step_ms,per_seq_ms"
    )]
    fit: Vec<Term>,
    /// Sweeps of the search over the terms (1..=10).
    #[arg(long, default_value_t = 4, value_name = "N")]
    rounds: usize,
    /// Where to write the calibrated profile.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
}

/// The objective: the sum of the median APEs of TTFT, TPOT and E2E (a
/// latency with no pair counts 0; a failed replay request counts as a
/// 100% error on each, so a fit never trades completions for accuracy).
/// The not-queued TTFT is reported, not fitted: a few requests' prefill
/// would otherwise outweigh every request's decode.
fn objective(c: &Compared) -> f64 {
    let n = c.pairs.first().map_or(0, |(_, p)| p.len()) + c.failed;
    let failed = if n == 0 {
        0.0
    } else {
        300.0 * c.failed as f64 / n as f64
    };
    [Latency::Ttft, Latency::Tpot, Latency::E2e]
        .iter()
        .filter_map(|l| c.error(*l))
        .map(|e| e.median_ape)
        .sum::<f64>()
        + failed
}

/// `deploy` with the terms set to `values` (on top of what its flags
/// already set).
fn with_terms(deploy: &DeployArgs, params: &[Param], values: &[f64]) -> DeployArgs {
    let mut d = deploy.clone();
    for (p, v) in params.iter().zip(values) {
        d.overhead.push(format!("{}={v}", p.name));
    }
    d
}

/// `calibrate`.
pub fn run(a: CalibrateArgs) -> Result<(), String> {
    if !(1..=10).contains(&a.rounds) {
        return Err(format!("--rounds {}: must be 1 to 10", a.rounds));
    }
    let mut fit: Vec<Term> = Vec::new();
    for t in &a.fit {
        if !fit.contains(t) {
            fit.push(*t);
        }
    }
    let params: Vec<Param> = fit.iter().map(|t| t.param()).collect();
    let source = crate::validate::profile_source(&a.deploy)?;
    let run = a.real.read()?;
    let before = compare(&a.deploy, &run)?;
    let found = minimise(&params, a.rounds, |values| {
        compare(&with_terms(&a.deploy, &params, values), &run).map(|c| objective(&c))
    })?;
    let tuned = with_terms(&a.deploy, &params, &found.values);
    let after = compare(&tuned, &run)?;
    let terms: Vec<(String, f64)> = params
        .iter()
        .zip(&found.values)
        .map(|(p, v)| (p.name.to_string(), *v))
        .collect();
    let text = crate::validate::calibrated_profile(&source, &tuned, &a.real.real)?;
    std::fs::write(&a.out, text).map_err(|e| format!("--out {}: {e}", a.out.display()))?;
    out!(
        "calibrate: {} ({} requests), {} replays",
        a.real.real.display(),
        run.requests.len(),
        found.evaluations + 2
    );
    out!("before:\n{}", table(&before));
    let fitted: Vec<String> = terms.iter().map(|(n, v)| format!("{n} = {v:.4}")).collect();
    out!("fitted: {}", fitted.join(", "));
    out!("after:\n{}", table(&after));
    out!(
        "wrote {}: {} with these terms in its `overheads` section (--perf profile:{}).",
        a.out.display(),
        source.origin,
        a.out.display()
    );
    out!(
        "These terms are fitted to this one run. Check them on runs they were not fitted to \
         (another load, another model on the same GPU): `validate --perf profile:{} --real OTHER` \
         with that run's deployment, or `--overheads {}` on another model's profile.",
        a.out.display(),
        a.out.display()
    );
    if after.failed > 0 {
        return Err(format!(
            "{} requests did not complete in the calibrated replay",
            after.failed
        ));
    }
    Ok(())
}
