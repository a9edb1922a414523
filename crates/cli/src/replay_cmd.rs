//! `handoff-mocker replay`.

use crate::args::{DeployArgs, WorkloadArgs};
use crate::report_out::{check_failures, print_report, write_output, write_transcript};
use clap::Args;
use replay::{make_core, Replay};
use std::io::IsTerminal;
use std::path::PathBuf;

/// Options of `replay`.
#[derive(Args, Debug)]
pub struct ReplayArgs {
    #[command(flatten)]
    deploy: DeployArgs,
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Step one forward pass per event (slower; same report).
    #[arg(long)]
    no_multi_step: bool,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Write the report alone, as JSON, to FILE.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Write the lifecycle transcript (every handoff's transitions and the
    /// workers' final states) to FILE.
    #[arg(long, value_name = "FILE")]
    transcript: Option<PathBuf>,
    /// Exit 0 even when requests failed.
    #[arg(long)]
    allow_failures: bool,
}

pub fn run(a: ReplayArgs) -> Result<(), String> {
    let (mut cfg, specs) = a.deploy.deployment(!a.no_multi_step)?;
    cfg.transcript = a.transcript.is_some();
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
    let mut wl = a.workload.open(a.deploy.seed)?;
    wl.check_fits(&specs, cfg.decode_workers as usize)?;
    let progress = std::io::stderr().is_terminal() && !a.json;
    let items = Progress::new(wl.take_items(), progress);
    let started = std::time::Instant::now();
    let (report, transcript) = Replay::new(cfg, items, make).run();
    if progress {
        eprintln!();
    }
    if let Some(e) = wl.error.borrow_mut().take() {
        // Nothing is written on a bad trace: the report would be partial.
        return Err(e.to_string());
    }
    let wall = started.elapsed();
    if let Some(p) = &a.transcript {
        write_transcript(p, transcript.as_ref())?;
    }
    if let Some(p) = &a.output {
        write_output(p, &report)?;
    }
    print_report(
        &report,
        a.json,
        &wl,
        serde_json::Map::new(),
        &[format!("wall time {:.3} s", wall.as_secs_f64())],
    )?;
    check_failures(&report, a.allow_failures)
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
