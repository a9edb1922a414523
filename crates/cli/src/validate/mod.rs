//! `validate` and `calibrate`: the mocker's clock against a real engine's.
//!
//! `validate` reads a real run's per-request record
//! ([`handoff_workload::observed`]: `vllm bench serve --save-detailed`
//! JSON, SGLang's `bench_serving` output, or the plain JSONL/CSV), replays
//! the same requests (arrivals, lengths, prefix blocks) on the deployment
//! its flags state, and prints how far each latency is from the real one
//! ([`accuracy`]). `calibrate` ([`calibrate`]) fits the step-time model's
//! overhead terms to one run and writes the calibrated profile.

pub mod accuracy;
pub mod calibrate;
pub mod fit;
pub mod html;

use crate::args::{DeployArgs, Workload};
use crate::replay_cmd::{simulate_workload, RunOptions};
use accuracy::{Error, Latency, Pair};
use clap::{Args, ValueEnum};
use handoff_workload::observed::{read_observed, ObservedFormat, ObservedRun};
use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;

/// `--real-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RealFormat {
    /// By content.
    Auto,
    /// `vllm bench serve --save-result --save-detailed` JSON.
    Vllm,
    /// SGLang `bench_serving --output-file F --output-details`.
    Sglang,
    /// The plain per-request JSONL or CSV (docs/accuracy.md).
    Plain,
}

impl RealFormat {
    fn observed(self) -> ObservedFormat {
        match self {
            RealFormat::Auto => ObservedFormat::Auto,
            RealFormat::Vllm => ObservedFormat::VllmBench,
            RealFormat::Sglang => ObservedFormat::SglangBench,
            RealFormat::Plain => ObservedFormat::Plain,
        }
    }
}

/// The real run to compare with.
#[derive(Args, Debug, Clone)]
pub struct RealArgs {
    /// The real run's per-request record.
    #[arg(long, value_name = "FILE")]
    pub real: PathBuf,
    /// Its format.
    #[arg(long, value_enum, default_value = "auto", value_name = "FORMAT")]
    pub real_format: RealFormat,
    /// Prompt tokens per prefix block of the file's hashes or token ids
    /// (vLLM's default block size).
    #[arg(long, default_value_t = 16, value_name = "TOKENS")]
    pub real_block_size: u32,
}

impl RealArgs {
    /// Reads the run.
    pub fn read(&self) -> Result<ObservedRun, String> {
        if self.real_block_size == 0 {
            return Err("--real-block-size 0: must be at least 1".into());
        }
        read_observed(
            &self.real,
            self.real_format.observed(),
            self.real_block_size,
        )
        .map_err(|e| e.to_string())
    }
}

/// Options of `validate`.
#[derive(Args, Debug)]
pub struct ValidateArgs {
    #[command(flatten)]
    deploy: DeployArgs,
    #[command(flatten)]
    real: RealArgs,
    /// Print the comparison as JSON.
    #[arg(long)]
    json: bool,
    /// Write the comparison as a self-contained HTML page (the error table
    /// and, per latency, every request simulated against real) to FILE.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
}

/// A real run against its replay.
#[derive(Debug)]
pub struct Compared {
    /// Per latency, the run's error.
    pub errors: Vec<Error>,
    /// Per latency, every request's pair.
    pub pairs: Vec<(Latency, Vec<Pair>)>,
    /// Requests the replay did not complete.
    pub failed: usize,
}

impl Compared {
    /// The error of `latency`, if any pair had one.
    pub fn error(&self, latency: Latency) -> Option<&Error> {
        self.errors.iter().find(|e| e.latency == latency)
    }
}

/// A replayed request's latencies, ms.
#[derive(Clone, Copy, Debug, Default)]
struct Simulated {
    ttft: Option<f64>,
    tpot: Option<f64>,
    e2e: Option<f64>,
}

/// Replays `run` on `deploy` and pairs every request with its replay.
pub fn compare(deploy: &DeployArgs, run: &ObservedRun) -> Result<Compared, String> {
    let n = run.requests.len();
    let got = Rc::new(RefCell::new(vec![None::<Simulated>; n]));
    let sink_got = got.clone();
    let sink: handoff_serving::report::RequestSink =
        Box::new(move |r: &handoff_serving::RequestRecord| {
            if r.outcome != "completed" {
                return;
            }
            if let Ok(i) = usize::try_from(r.id) {
                if let Some(s) = sink_got.borrow_mut().get_mut(i) {
                    *s = Some(Simulated {
                        ttft: r.ttft_ms,
                        tpot: r.tpot_ms,
                        e2e: r.e2e_ms,
                    });
                }
            }
        });
    let opts = RunOptions {
        multi_step: true,
        ..RunOptions::default()
    };
    let items = run.trace_items();
    let note = format!("{n} real requests");
    let open = move || Ok(Workload::from_items(items, note));
    simulate_workload(deploy, &opts, open, false, Some(sink))?;
    let got = got.borrow();
    let failed = got.iter().filter(|s| s.is_none()).count();
    let mut pairs: Vec<(Latency, Vec<Pair>)> =
        Latency::ALL.iter().map(|l| (*l, Vec::new())).collect();
    for (req, sim) in run.requests.iter().zip(got.iter()) {
        let Some(sim) = sim else { continue };
        let unqueued = req.queue_ms.is_some_and(|q| q < accuracy::UNQUEUED_MS);
        let real = [
            Some(req.ttft_ms),
            req.tpot_ms(),
            Some(req.e2e_ms),
            unqueued.then_some(req.ttft_ms),
        ];
        let simulated = [sim.ttft, sim.tpot, sim.e2e, sim.ttft];
        for (k, (r, s)) in real.iter().zip(simulated).enumerate() {
            if let (Some(real), Some(sim)) = (*r, s) {
                pairs[k].1.push(Pair { real, sim });
            }
        }
    }
    let errors = pairs.iter().filter_map(|(l, p)| Error::of(*l, p)).collect();
    Ok(Compared {
        errors,
        pairs,
        failed,
    })
}

/// The comparison as text: one line per latency.
pub fn table(c: &Compared) -> String {
    let mut s = format!(
        "{:<17}{:>9}{:>8}{:>12}   {:<30}{:<30}{:<30}\n",
        "", "requests", "MAPE", "median APE", "mean real -> sim (ms)", "median", "p90"
    );
    let cell = |x: &accuracy::Signed| format!("{:.1} -> {:.1} ({:+.1}%)", x.real, x.sim, x.error);
    for e in &c.errors {
        s.push_str(&format!(
            "{:<17}{:>9}{:>7.1}%{:>11.1}%   {:<30}{:<30}{:<30}\n",
            e.latency.label(),
            e.n,
            e.mape,
            e.median_ape,
            cell(&e.mean),
            cell(&e.median),
            cell(&e.p90)
        ));
    }
    s
}

/// What was compared with what, in one line.
fn title(a: &RealArgs, run: &ObservedRun, deploy: &DeployArgs) -> Result<String, String> {
    let (cfg, specs) = deploy.deployment(true)?;
    let perf = specs.first().map(|s| s.perf.label()).unwrap_or_default();
    Ok(format!(
        "{} ({:?}, {} requests{}) replayed on {} prefill + {} decode {} workers timed by {}",
        a.real.display(),
        run.format,
        run.requests.len(),
        if run.skipped_failed > 0 {
            format!(", {} failed in the real run left out", run.skipped_failed)
        } else {
            String::new()
        },
        cfg.prefill_workers,
        cfg.decode_workers,
        format!("{:?}", deploy.backend).to_lowercase(),
        perf
    ))
}

/// `validate`.
pub fn run(a: ValidateArgs) -> Result<(), String> {
    let run = a.real.read()?;
    let title = title(&a.real, &run, &a.deploy)?;
    let c = compare(&a.deploy, &run)?;
    if let Some(p) = &a.html {
        let page = html::render(&title, &c.errors, &c.pairs)?;
        std::fs::write(p, page).map_err(|e| format!("--html {}: {e}", p.display()))?;
    }
    if a.json {
        let v = serde_json::json!({
            "real": a.real.real.display().to_string(),
            "requests": run.requests.len(),
            "real_failed_left_out": run.skipped_failed,
            "replay_failed": c.failed,
            "compared": title,
            "errors": c.errors,
        });
        out!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
        );
    } else {
        out!("validate: {title}");
        out!("{}", table(&c));
    }
    if c.failed > 0 {
        return Err(format!(
            "{} of {} requests did not complete in the replay (their KV did not fit, or a \
             fault failed them): the deployment stated is not the one that ran",
            c.failed,
            run.requests.len()
        ));
    }
    Ok(())
}

/// The profile a deployment is timed by, as text, and where it is from.
#[derive(Clone, Debug)]
pub struct ProfileSource {
    /// The profile file's text.
    pub text: String,
    /// `--perf profile:FILE`'s path, or the built-in profile's name.
    pub origin: String,
}

/// The profile `deploy` is timed by: `--perf profile:FILE`, or the one
/// `--model`/`--gpu` pick. Any other step-time model has no overhead terms
/// to calibrate.
pub fn profile_source(deploy: &DeployArgs) -> Result<ProfileSource, String> {
    if let Some(path) = deploy
        .perf
        .as_deref()
        .and_then(|p| p.strip_prefix("profile:"))
    {
        let text = handoff_workload::file::read_to_string(
            "--perf",
            path.as_ref(),
            handoff_workload::file::FileKind::Profile,
        )
        .map_err(|e| e.to_string())?;
        return Ok(ProfileSource {
            text,
            origin: path.to_string(),
        });
    }
    if deploy.perf.is_some() {
        return Err(format!(
            "--perf {}: calibrate fits a profile's overhead terms; time the deployment by a \
             profile (--perf profile:FILE, or --model and --gpu)",
            deploy.perf.as_deref().unwrap_or_default()
        ));
    }
    let Some(sel) = deploy.hardware()? else {
        return Err("calibrate: no profile times this deployment".into());
    };
    let text = match crate::hardware_args::built_in_text(&sel.origin) {
        Some(t) => t.to_string(),
        None => handoff_workload::file::read_to_string(
            "--profiles-dir",
            sel.origin.as_ref(),
            handoff_workload::file::FileKind::Profile,
        )
        .map_err(|e| e.to_string())?,
    };
    Ok(ProfileSource {
        text,
        origin: sel.origin,
    })
}

/// `source` with the step-time terms `tuned` resolves to in its
/// `overheads` section, named `NAME-calibrated` and saying in its
/// `derivation` which run the terms were fitted to; read back before it is
/// returned.
pub fn calibrated_profile(
    source: &ProfileSource,
    tuned: &DeployArgs,
    real: &std::path::Path,
) -> Result<String, String> {
    let handoff_deployment::PerfChoice::Profile(p) = tuned.perf()? else {
        return Err("calibrate: the deployment is not timed by a profile".into());
    };
    let text =
        handoff_profiles::profile_file::with_overheads(&source.text, p.overheads(), &source.origin)
            .map_err(|e| e.to_string())?;
    let mut doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    if let Some(map) = doc.as_object_mut() {
        let name = map
            .get("name")
            .and_then(|v| v.as_str())
            .unwrap_or("profile");
        let name = format!("{}-calibrated", name.trim_end_matches("-calibrated"));
        map.insert("name".into(), name.into());
        let was = map.get("derivation").and_then(|v| v.as_str()).unwrap_or("");
        let note = format!(
            "overheads fitted by `handoff-mocker calibrate` to the real run {} (file name); \
             tables as in {}",
            real.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            source.origin
        );
        let derivation = if was.is_empty() {
            note
        } else {
            format!("{was}; {note}")
        };
        map.insert("derivation".into(), derivation.into());
    }
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())? + "\n";
    handoff_profiles::profile_file::parse_file(&text, &source.origin).map_err(|e| e.to_string())?;
    Ok(text)
}
