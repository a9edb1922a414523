//! `handoff-mocker replay`.

use crate::args::{DeployArgs, WorkloadArgs};
use clap::Args;
use handoff_core::Duration;
use replay::{make_core, Replay, ReplayConfig, Report};
use std::io::IsTerminal;

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
}

pub fn run(a: ReplayArgs) -> Result<(), String> {
    let d = &a.deploy;
    let (prefill_spec, decode_spec) = d.engines()?;
    let cfg = ReplayConfig {
        backend: d.backend(),
        policy: d.policy(),
        prefill_workers: d.prefill.max(1),
        decode_workers: d.decode,
        router: d.router(),
        block_size: prefill_spec.event_block_tokens(),
        transfer: d.transfer()?,
        message_latency: Duration::from_micros(d.message_latency_us),
        handoff: d.handoff(),
        seed: d.seed,
        multi_step: !a.no_multi_step,
        transcript: false,
        faults: d.faults()?,
    };
    // Build every core up front so a bad configuration fails before any work.
    let total = cfg.prefill_workers + cfg.decode_workers;
    let cfg_prefill = cfg.prefill_workers;
    let mut cores = Vec::new();
    for i in 0..total {
        let s = if i < cfg.prefill_workers {
            &prefill_spec
        } else {
            &decode_spec
        };
        cores.push(Some(make_core(s).map_err(|e| e.to_string())?));
    }
    // A worker a fault plan restarts gets a fresh core of the same spec
    // (already validated above).
    let make = |w: handoff_core::WorkerId, _| {
        let spec = if w.0 < cfg_prefill {
            &prefill_spec
        } else {
            &decode_spec
        };
        match cores.get_mut(w.0 as usize).and_then(Option::take) {
            Some(c) => c,
            None => make_core(spec).unwrap_or_else(|_| unreachable!("spec validated above")),
        }
    };
    let wl = a.workload.open(d.seed)?;
    let progress = std::io::stderr().is_terminal() && !a.json;
    let items = Progress::new(wl.items, progress);
    let started = std::time::Instant::now();
    let (report, _) = Replay::new(cfg, items, make).run();
    if progress {
        eprintln!();
    }
    if let Some(e) = wl.error.borrow_mut().take() {
        // Nothing is written on a bad trace: the report would be partial.
        return Err(e.to_string());
    }
    let wall = started.elapsed();
    if a.json {
        let mut v = serde_json::to_value(&report).map_err(|e| e.to_string())?;
        let sk = wl.skipped.borrow();
        if let Some(obj) = v.as_object_mut() {
            obj.insert(
                "trace_bad_lines_skipped".into(),
                serde_json::json!({ "count": sk.count, "first": sk.first }),
            );
        }
        let s = serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?;
        out!("{s}");
    } else {
        out!("{}", wl.skipped.borrow().describe(&wl.note));
        print_summary(&report);
        out!("wall time {:.3} s", wall.as_secs_f64());
    }
    Ok(())
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

fn print_summary(r: &Report) {
    let c = &r.config;
    out!(
        "backend {}  policy {}  prefill {}  decode {}  router {}",
        c.backend,
        c.policy,
        c.prefill_workers,
        c.decode_workers,
        c.router
    );
    out!(
        "requests {} completed {} failed {}  output tokens {}  simulated {:.1} s",
        r.num_requests,
        r.completed_requests,
        r.failed_requests,
        r.total_output_tokens,
        r.duration_s
    );
    out!(
        "throughput {:.2} req/s  {:.1} tok/s",
        r.request_throughput_rps,
        r.output_token_throughput_tps
    );
    out!(
        "{:<28} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "ms",
        "mean",
        "p50",
        "p90",
        "p99",
        "max"
    );
    let l = &r.lifecycle;
    for (name, s) in [
        ("ttft", r.ttft_ms),
        ("tpot", r.tpot_ms),
        ("itl", r.itl_ms),
        ("e2e", r.e2e_latency_ms),
        ("source pinned (stranded)", l.source_pinned_ms),
        ("reservation wait", l.reservation_wait_ms),
        ("transfer", l.transfer_ms),
        ("reserved -> activated", l.reservation_to_activation_ms),
    ] {
        out!(
            "{name:<28} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
            s.mean,
            s.p50,
            s.p90,
            s.p99,
            s.max
        );
    }
    out!(
        "handoffs pinned {} activated {}  lease expiries {}  reservation expiries {}  preemptions {}",
        l.handoffs_pinned, l.handoffs_activated, l.lease_expiries, l.reservation_expiries, l.preemptions
    );
    out!(
        "{:<8} {:<10} {:>8} {:>12} {:>12} {:>14} {:>14} {:>8}",
        "worker",
        "pool",
        "steps",
        "peak pinned",
        "peak reserv",
        "pinned blk·s",
        "reserv blk·s",
        "drained"
    );
    for w in &r.workers {
        out!(
            "{:<8} {:<10} {:>8} {:>12} {:>12} {:>14.1} {:>14.1} {:>8}",
            w.worker,
            w.pool,
            w.steps,
            w.peak_pinned_blocks,
            w.peak_reserved_blocks,
            w.pinned_block_seconds,
            w.reserved_block_seconds,
            w.drained
        );
    }
}
