//! `handoff-mocker replay`.

use crate::args::{DeployArgs, ScaleArgs, WorkloadArgs};
use crate::report_out::OutputArgs;
use clap::Args;
use handoff_deployment::make_core;
use handoff_replay::Replay;
use std::cell::RefCell;
use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// Options of `replay`.
#[derive(Args, Debug)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub(crate) deploy: DeployArgs,
    #[command(flatten)]
    workload: WorkloadArgs,
    #[command(flatten)]
    scale: ScaleArgs,
    /// Step one forward pass per event (slower; same report).
    #[arg(long)]
    no_multi_step: bool,
    #[command(flatten)]
    out: OutputArgs,
    /// Closed loop: keep N requests in flight; the next request of the
    /// workload arrives when one completes or fails, and trace timestamps
    /// are ignored [default: open loop, at the workload's timestamps].
    #[arg(long, value_name = "N")]
    concurrency: Option<usize>,
    /// Write one JSON object per request to FILE as requests end: id,
    /// arrival, ttft/ttst/tpot/e2e, tokens, workers, outcome and failure
    /// reason, handoff phase times (ms of model time).
    #[arg(long, value_name = "FILE")]
    per_request_jsonl: Option<PathBuf>,
    /// Write a self-contained HTML report to FILE: latency CDFs, handoff
    /// phase durations, per-worker stacked KV blocks and queue lengths
    /// over time, the per-worker table.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Add `wall_time_ms` (how long the replay took, not deterministic) to
    /// the JSON of --json and --output [default: off, so the same inputs
    /// write the same bytes].
    #[arg(long)]
    wall_time: bool,
    /// Write every KV event the workers report as a Dynamo `RouterEvent`
    /// JSON line to FILE (worker_id, event_id, stored/removed/cleared);
    /// `tokens_hash` is Dynamo's hash of each block's stand-in token ids
    /// (README, "Reproducing our hashes").
    #[arg(long, value_name = "FILE")]
    kv_events_out: Option<PathBuf>,
    /// Run again the run a JSON report (of --json or --output) describes:
    /// its `config.flags` (the deployment and workload flags it was given)
    /// are parsed as if typed here, so the report comes out byte for byte;
    /// give only output flags beside it.
    #[arg(long, value_name = "REPORT")]
    rerun: Option<PathBuf>,
}

/// What one replay produced (see [`simulate`]).
pub struct Simulated {
    /// The report.
    pub report: handoff_serving::Report,
    /// The lifecycle transcript, when the configuration asked for it.
    pub transcript: Option<handoff_core::Transcript>,
    /// Capacity timelines, when `--html` asked for them.
    pub details: Option<handoff_serving::Details>,
    /// The workload, for its description and skipped-line count.
    pub workload: crate::args::Workload,
    /// How long the replay itself took.
    pub wall: std::time::Duration,
}

impl ReplayArgs {
    /// The deployment flags.
    pub fn deploy_args(&self) -> &DeployArgs {
        &self.deploy
    }

    /// The report `--rerun` names.
    pub fn rerun(&self) -> Option<&Path> {
        self.rerun.as_deref()
    }

    /// Checks the configuration without running it: the deployment builds,
    /// `--concurrency` is positive, the workload opens.
    pub fn check(&self) -> Result<(), String> {
        self.deploy.deployment(!self.no_multi_step)?;
        if self.concurrency == Some(0) {
            return Err("--concurrency: must be at least 1".into());
        }
        self.workload.open(self.deploy.seed).map(|_| ())
    }

    /// Output flags that make no sense once per configuration of a sweep
    /// (the sweep writes each report itself), as `--flag` names; empty when
    /// none is set.
    pub fn per_run_outputs(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        for (set, name) in [
            (self.out.json, "--json"),
            (self.out.output.is_some(), "--output"),
            (self.out.transcript.is_some(), "--transcript"),
            (self.out.allow_failures, "--allow-failures"),
            (self.per_request_jsonl.is_some(), "--per-request-jsonl"),
            (self.html.is_some(), "--html"),
            (self.wall_time, "--wall-time"),
            (self.kv_events_out.is_some(), "--kv-events-out"),
        ] {
            if set {
                v.push(name);
            }
        }
        v
    }
}

/// The `--kv-events-out` writer at `p` (Dynamo's router events, one JSON
/// line each) and the replay's KV sink that feeds it; the writer is taken
/// out of its cell to be finished after the run.
#[allow(clippy::type_complexity)]
fn kv_events_writer(
    p: &std::path::Path,
    sizes: Vec<u32>,
    index: Rc<RefCell<handoff_kv_events::TraceBlocks>>,
    dp: handoff_core::DpLayout,
) -> Result<
    (
        Rc<RefCell<Option<handoff_kv_events::RouterEventWriter>>>,
        handoff_serving::serving::KvSink,
    ),
    String,
> {
    let f = File::create(p).map_err(|e| format!("--kv-events-out {}: {e}", p.display()))?;
    let w =
        handoff_kv_events::RouterEventWriter::new(Box::new(BufWriter::with_capacity(1 << 20, f)));
    let w = Rc::new(RefCell::new(Some(w)));
    let sink = w.clone();
    let kv_sink: handoff_serving::serving::KvSink = Box::new(move |worker, ev, _at| {
        if let Some(w) = sink.borrow_mut().as_mut() {
            // Dynamo's hash of the block's stand-in token ids.
            let bs = sizes.get(worker.0 as usize).copied().unwrap_or(1);
            let index = index.borrow();
            w.write(dp.address(worker), ev, |h| index.tokens_hash(h, bs));
        }
    });
    Ok((w, kv_sink))
}

/// How a replay runs, beside its deployment and workload.
#[derive(Clone, Debug, Default)]
pub struct RunOptions<'a> {
    /// Step several passes per event (the default; same report).
    pub multi_step: bool,
    /// Closed loop with this many requests in flight.
    pub concurrency: Option<usize>,
    /// Keep the lifecycle transcript.
    pub transcript: bool,
    /// Keep capacity timelines (for `--html`).
    pub details: bool,
    /// `--kv-events-out`.
    pub kv_events_out: Option<&'a Path>,
    /// An elastic fleet (`--max-prefill`, `--scale-plan`, `--planner`, ...).
    pub scale: Option<&'a ScaleArgs>,
}

/// Runs the replay `a` describes and returns its report: the configuration
/// construction `replay` and `sweep` share. `progress` counts requests on
/// stderr; `sink` receives per-request records. A malformed trace is an
/// error (no partial report).
pub fn simulate(
    a: &ReplayArgs,
    progress: bool,
    sink: Option<handoff_serving::report::RequestSink>,
) -> Result<Simulated, String> {
    let opts = RunOptions {
        multi_step: !a.no_multi_step,
        concurrency: a.concurrency,
        transcript: a.out.transcript.is_some(),
        details: a.html.is_some(),
        kv_events_out: a.kv_events_out.as_deref(),
        scale: Some(&a.scale),
    };
    let open = || a.workload.open(a.deploy.seed);
    let sim = simulate_workload(&a.deploy, &opts, open, progress, sink)?;
    if sim.report.num_requests == 0 {
        if let Some(t) = &a.workload.trace {
            let skipped = sim.workload.skipped.borrow().count;
            return Err(format!(
                "--trace {}: no request to replay ({skipped} bad lines skipped)",
                t.display()
            ));
        }
    }
    Ok(sim)
}

/// Replays the workload `open` gives on the deployment `deploy`
/// describes, as `opts` says; the workload opens once the deployment has
/// built, so a bad deployment is the error reported first.
pub fn simulate_workload(
    deploy: &DeployArgs,
    opts: &RunOptions<'_>,
    open: impl FnOnce() -> Result<crate::args::Workload, String>,
    progress: bool,
    sink: Option<handoff_serving::report::RequestSink>,
) -> Result<Simulated, String> {
    let initial = deploy;
    let elastic = opts.scale.filter(|s| s.is_elastic());
    let slo_window = match opts.scale {
        Some(s) => s.slo_window()?,
        None => None,
    };
    let wide;
    let deploy = match elastic {
        Some(s) => {
            wide = s.widen(deploy)?;
            &wide
        }
        None => deploy,
    };
    let (mut cfg, specs) = deploy.deployment(opts.multi_step)?;
    cfg.transcript = opts.transcript;
    let planner = match elastic {
        Some(s) => {
            s.apply(&mut cfg, (initial.prefill, initial.decode))?;
            s.planner()?
        }
        None => None,
    };
    if planner.is_some() && opts.concurrency.is_some() {
        return Err("--planner: runs open loop only (not with --concurrency)".into());
    }
    // Build every core up front so a bad configuration fails before any
    // work; a worker a fault plan restarts gets a fresh core of its spec.
    let mut cores = Vec::new();
    for s in &specs {
        cores.push(Some(make_core(s).map_err(|e| e.to_string())?));
    }
    let make = |w: handoff_core::WorkerId, _| match cores
        .get_mut(w.0 as usize)
        .and_then(Option::take)
    {
        Some(c) => c,
        None => make_core(&specs[w.0 as usize]).unwrap_or_else(|_| unreachable!("spec checked")),
    };
    if opts.concurrency == Some(0) {
        return Err("--concurrency: must be at least 1".into());
    }
    let mut wl = open()?;
    if let Some(n) = opts.concurrency {
        wl.closed_loop(n);
    }
    wl.check_fits(
        &specs,
        cfg.decode_workers as usize * usize::from(cfg.dp.dp_size()),
    )?;
    // `--kv-events-out`: each request's prompt blocks are indexed as the
    // replay pulls it, before any of its blocks can be stored.
    let trace_blocks = opts.kv_events_out.map(|_| {
        let sizes = specs.iter().map(|s| s.event_block_tokens()).collect();
        Rc::new(RefCell::new(handoff_kv_events::TraceBlocks::new(sizes)))
    });
    let index = trace_blocks.clone();
    let items = Progress::new(wl.take_items(), progress).inspect(move |item| {
        if let Some(i) = &index {
            i.borrow_mut().register(&item.request);
        }
    });
    let started = std::time::Instant::now();
    let cfg_dp = cfg.dp;
    let mut replay = match opts.concurrency {
        Some(n) => Replay::closed_loop(cfg, items, n, make),
        None => Replay::new(cfg, items, make),
    }
    .map_err(|e| e.to_string())?;
    if let Some(sink) = sink {
        replay = replay.with_request_sink(sink);
    }
    if let Some((p, interval)) = planner {
        replay = replay.with_planner(p, interval);
    }
    if let Some(w) = slo_window {
        replay = replay.with_slo_window(w);
    }
    let kv_out = match opts.kv_events_out {
        Some(p) => {
            let sizes = specs.iter().map(|s| s.event_block_tokens()).collect();
            let index = trace_blocks.clone().unwrap_or_default();
            let (w, sink) = kv_events_writer(p, sizes, index, cfg_dp)?;
            replay = replay.with_kv_sink(sink);
            Some(w)
        }
        None => None,
    };
    if opts.details {
        replay = replay.keep_details(handoff_serving::timeline::DEFAULT_POINTS);
    }
    let outcome = replay.run_all();
    if progress {
        eprintln!();
    }
    if let Some(e) = wl.error.borrow_mut().take() {
        return Err(e.to_string());
    }
    let wall = started.elapsed();
    if let (Some(w), Some(p)) = (kv_out, opts.kv_events_out) {
        if let Some(w) = w.borrow_mut().take() {
            w.finish()
                .map_err(|e| format!("--kv-events-out {}: {e}", p.display()))?;
        }
    }
    Ok(Simulated {
        report: outcome.report,
        transcript: outcome.transcript,
        details: outcome.details,
        workload: wl,
        wall,
    })
}

pub fn run(a: ReplayArgs) -> Result<(), String> {
    let progress = std::io::stderr().is_terminal() && !a.out.json;
    let jsonl = match &a.per_request_jsonl {
        Some(p) => Some(JsonlSink::create(p)?),
        None => None,
    };
    let sim = match simulate(&a, progress, jsonl.as_ref().map(JsonlSink::sink)) {
        Ok(sim) => sim,
        Err(e) => {
            // Nothing is written on a failed run: the records would be partial.
            if let (Some(sink), Some(p)) = (&jsonl, &a.per_request_jsonl) {
                sink.abandon(p);
            }
            return Err(e);
        }
    };
    let Simulated {
        report,
        transcript,
        details,
        workload: wl,
        wall,
    } = sim;
    if let (Some(sink), Some(p)) = (&jsonl, &a.per_request_jsonl) {
        sink.finish(p)?;
    }
    let wall_ms = (wall.as_secs_f64() * 1e6).round() / 1e3;
    let mut extra = serde_json::Map::new();
    if a.wall_time {
        extra.insert("wall_time_ms".into(), serde_json::json!(wall_ms));
    }
    if let (Some(p), Some(d)) = (&a.html, details.as_ref()) {
        let page = crate::html::render(&report, d, &wl.skipped.borrow().describe(&wl.note))?;
        std::fs::write(p, page).map_err(|e| format!("--html {}: {e}", p.display()))?;
    }
    a.out.finish(
        &report,
        transcript.as_ref(),
        &wl,
        &extra.clone(),
        extra,
        &[format!("wall time {:.3} s", wall.as_secs_f64())],
    )
}

/// `--per-request-jsonl`: records written as requests end, through a
/// buffer; the first write error is kept and reported at the end.
struct JsonlSink {
    out: Rc<RefCell<(BufWriter<File>, Option<std::io::Error>)>>,
}

impl JsonlSink {
    fn create(path: &Path) -> Result<JsonlSink, String> {
        let f = File::create(path)
            .map_err(|e| format!("--per-request-jsonl {}: {e}", path.display()))?;
        Ok(JsonlSink {
            out: Rc::new(RefCell::new((BufWriter::with_capacity(1 << 20, f), None))),
        })
    }

    fn sink(&self) -> handoff_serving::report::RequestSink {
        let out = self.out.clone();
        Box::new(move |r: &handoff_serving::RequestRecord| {
            let mut o = out.borrow_mut();
            if o.1.is_some() {
                return;
            }
            let line = serde_json::to_string(r).unwrap_or_default();
            if let Err(e) = writeln!(o.0, "{line}") {
                o.1 = Some(e);
            }
        })
    }

    fn finish(&self, path: &Path) -> Result<(), String> {
        let mut o = self.out.borrow_mut();
        let flushed = o.0.flush();
        match (o.1.take(), flushed) {
            (Some(e), _) | (None, Err(e)) => {
                Err(format!("--per-request-jsonl {}: {e}", path.display()))
            }
            _ => Ok(()),
        }
    }

    /// A failed run writes no records.
    fn abandon(&self, path: &Path) {
        let _ = std::fs::remove_file(path);
    }
}

/// Counts requests as replay pulls them and, on a terminal, shows the count
/// on stderr every 1000 requests.
struct Progress<I> {
    inner: I,
    n: u64,
    show: bool,
}

impl<I> Progress<I> {
    fn new(inner: I, show: bool) -> Self {
        Progress { inner, n: 0, show }
    }
}

impl<I: Iterator> Iterator for Progress<I> {
    type Item = I::Item;
    fn next(&mut self) -> Option<I::Item> {
        let item = self.inner.next()?;
        self.n += 1;
        if self.show && self.n.is_multiple_of(1000) {
            eprint!("\rreplaying: {} requests", self.n);
        }
        Some(item)
    }
}
