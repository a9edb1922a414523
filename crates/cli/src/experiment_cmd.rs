//! `handoff-mocker experiment`: session-affine serving with D→P snapshot
//! push (seed 002) on the one engine and the real SGLang cores.
//! `experiment e4` runs the seed's §9 matrix (E1, E3, E4, E4-ablate) on one
//! session trace and prints the comparison table and the H4-1..H4-3
//! verdicts; `experiment run` runs a single configuration chosen by the
//! flags. Each is a subcommand with its own flags (`experiment e4 --help`).

use clap::{Args, Subcommand, ValueEnum};
use handoff_core::Duration;
use handoff_deployment::{DeploymentConfig, EngineSpec, SessionServing};
use handoff_engine::TransferModel;
use handoff_lab::{
    run_experiment_on, run_variant_on, EngineRun, ExperimentConfig, ExperimentReport, RunOutput,
    SessionOverheads, TimingMode, Variant,
};
use handoff_serving::report::RequestSink;
use handoff_workload::{
    generate_sessions, LengthDist, ReaderOptions, SessionConfig, TraceItem, TraceReader,
};
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

/// `experiment`: which one, each with its own flags.
#[derive(Args, Debug)]
pub struct ExperimentCommand {
    #[command(subcommand)]
    which: Which,
}

#[derive(Subcommand, Debug)]
enum Which {
    /// E1, E3, E4 and E4-ablate on the same trace, with the H4-1..H4-3
    /// verdicts.
    E4(ExperimentArgs),
    /// One configuration, chosen by --naive / --enable-d-to-p-sync /
    /// --disable-prefill-bypass [default: E3, KVC without push].
    Run(RunArgs),
}

/// `experiment run`: the configuration, and the flags every experiment has.
#[derive(Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    choice: RunChoice,
    #[command(flatten)]
    common: ExperimentArgs,
}

/// The configuration `experiment run` runs.
#[derive(Args, Clone, Copy, Debug, Default)]
struct RunChoice {
    /// Naive PD (E1) instead of KVC.
    #[arg(long)]
    naive: bool,
    /// Push session KV back to the prefill worker (E4).
    #[arg(long)]
    enable_d_to_p_sync: bool,
    /// Push, but never bypass the re-prefill (E4-ablate).
    #[arg(long)]
    disable_prefill_bypass: bool,
}

impl RunChoice {
    fn variant(self) -> Variant {
        match (
            self.naive,
            self.enable_d_to_p_sync,
            self.disable_prefill_bypass,
        ) {
            (true, _, _) => Variant::E1,
            (false, false, _) => Variant::E3,
            (false, true, false) => Variant::E4,
            (false, true, true) => Variant::E4Ablate,
        }
    }
}

impl ExperimentCommand {
    /// The experiment's options: `e4`'s, or `run`'s with its configuration.
    fn into_args(self) -> ExperimentArgs {
        match self.which {
            Which::E4(a) => a,
            Which::Run(r) => ExperimentArgs {
                run: Some(r.choice),
                ..r.common
            },
        }
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum TimingsArg {
    /// PolynomialPerf compute (the engines' default).
    Polynomial,
    /// The seed's §3.2 table: ~45 µs/token re-prefill, 20 ms decode
    /// passes, and its frontend overheads (10 ms direct route, 50 ms P open
    /// session, 50 ms D' decode start; each replaced by its flag).
    Seed,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LinkArg {
    /// Every transfer alone on its links (`TransferModel::Bytes`).
    Bytes,
    /// Transfers touching a worker share its link bandwidth
    /// (`TransferModel::Contention`).
    Contention,
}

/// `experiment --clock`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExperimentClock {
    /// In-process replay.
    Replay,
    /// Virtual-clock live, one thread per worker.
    Virtual,
}

/// Runs one variant on virtual-clock live (`--clock virtual`).
fn on_virtual_live(
    cfg: &DeploymentConfig,
    specs: &[EngineSpec],
    items: &[TraceItem],
    serving: SessionServing,
    sink: RequestSink,
) -> Result<EngineRun, handoff_lab::LabError> {
    let out = handoff_live_adapter::run_virtual_sessions_recorded(
        cfg,
        specs,
        items.iter().cloned(),
        serving,
        sink,
    )?;
    Ok(EngineRun {
        report: out.report,
        log: out.session_log,
    })
}

/// Options of every experiment.
#[derive(Args, Debug)]
pub struct ExperimentArgs {
    /// `experiment run`'s configuration; none: `experiment e4`'s four.
    #[arg(skip)]
    run: Option<RunChoice>,
    /// Where the engine's workers run: `replay` (in this thread) or
    /// `virtual` (virtual-clock live: one thread per worker over channels,
    /// the same bytes as replay; polynomial timings only).
    #[arg(long, value_enum, default_value = "replay")]
    clock: ExperimentClock,
    /// Mooncake JSONL trace with session_id/delay; without it, the default
    /// agentic session workload (50 sessions growing to ~50K tokens).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Count and skip malformed trace lines instead of failing.
    #[arg(long)]
    skip_bad_lines: bool,
    /// Stop after this many trace requests.
    #[arg(long)]
    limit: Option<u64>,
    /// Generated workload: number of sessions.
    #[arg(long, default_value_t = 50)]
    sessions: u32,
    /// Generated workload: seed.
    #[arg(long, default_value_t = 7)]
    session_seed: u64,
    /// Generated workload: prompt length a session's last turn grows to,
    /// tokens (the seed's sessions average ~50K).
    #[arg(long, default_value_t = 50_000)]
    session_final_tokens: u32,
    /// Generated workload: turns per session [default: 16 to 24, uniform].
    #[arg(long)]
    session_turns: Option<u32>,
    /// Decode workers.
    #[arg(long, default_value_t = 3)]
    decode: u32,
    /// KV capacity of each decode worker, tokens. Session slots live here;
    /// when the sessions outgrow it, idle ones are evicted and reseed.
    #[arg(long, default_value_t = 384_000)]
    decode_kv_tokens: u64,
    /// KV capacity of the prefill worker (in-flight prefills, its radix
    /// cache and the snapshot store share it), tokens.
    #[arg(long, default_value_t = 384_000)]
    prefill_kv_tokens: u64,
    /// K_DELTA: minimum growth since the last push, tokens.
    #[arg(long, default_value_t = 1024)]
    d_to_p_sync_delta_tokens: u64,
    /// Snapshots the prefill worker keeps (LRU).
    #[arg(long, default_value_t = 4)]
    d_to_p_sync_max_sessions: u32,
    /// K_TAIL_TOLERANCE: a snapshot may lack this many input tokens.
    #[arg(long, default_value_t = 4096)]
    k_tail_tolerance: u64,
    /// Snapshots older than this many seconds are stale.
    #[arg(long)]
    snapshot_max_age_s: Option<f64>,
    /// Timing calibration.
    #[arg(long, value_enum, default_value = "polynomial")]
    timings: TimingsArg,
    /// Override the link model of the calibration.
    #[arg(long, value_enum)]
    link: Option<LinkArg>,
    /// Link bandwidth of every KV transfer (P→D handoffs and D→P pushes),
    /// GB/s.
    #[arg(long, default_value_t = 15.0, value_name = "GBPS")]
    bandwidth_gbps: f64,
    /// A direct-to-D turn's routing latency, ms (seed §3.2) [default: 0,
    /// 10 under --timings seed].
    #[arg(long, value_name = "MS")]
    direct_route_ms: Option<f64>,
    /// A seed or reseed turn's "P open session" latency, ms (seed §3.2)
    /// [default: 0, 50 under --timings seed].
    #[arg(long, value_name = "MS")]
    open_session_ms: Option<f64>,
    /// A seed or reseed turn's "D' decode start" latency, ms (seed §3.2)
    /// [default: 0, 50 under --timings seed].
    #[arg(long, value_name = "MS")]
    decode_start_ms: Option<f64>,
    /// Move a session when its decode worker runs this many more turns than
    /// the least busy one (a reseed for load); 0 disables.
    #[arg(long, default_value_t = 0)]
    rebalance_threshold: u32,
    /// From a session's last turn to the client closing it, ms.
    #[arg(long, default_value_t = 100)]
    session_close_delay_ms: u64,
    /// Router seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Write the structured JSONL log (seed §6 events) here.
    #[arg(long)]
    log: Option<PathBuf>,
    /// Write per-request metrics (JSONL) here.
    #[arg(long)]
    metrics: Option<PathBuf>,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

impl ExperimentArgs {
    /// The configuration is one `experiment` could run (a sweep checks
    /// every one before the first runs).
    pub fn check(&self) -> Result<(), String> {
        config(self).map(|_| ())
    }

    /// Output flags a sweep writes itself, as `--flag` names; empty when
    /// none is set.
    pub fn per_run_outputs(&self) -> Vec<&'static str> {
        [
            (self.json, "--json"),
            (self.log.is_some(), "--log"),
            (self.metrics.is_some(), "--metrics"),
        ]
        .into_iter()
        .filter_map(|(set, name)| set.then_some(name))
        .collect()
    }

    /// Where the experiment runs (`--clock`).
    pub fn runner(&self) -> Option<handoff_lab::EngineRunner<'static>> {
        match self.clock {
            ExperimentClock::Replay => None,
            ExperimentClock::Virtual => Some(&on_virtual_live),
        }
    }
}

/// Every numeric flag in its range (see `limits.rs`); a push every 0
/// tokens would never end.
fn check_ranges(a: &ExperimentArgs) -> Result<(), String> {
    use crate::limits::{int, real, MAX_KV_TOKENS, MAX_SECONDS, MAX_WORKERS};
    int("sessions", u64::from(a.sessions), 1, 1_000_000)?;
    int("decode", u64::from(a.decode), 1, u64::from(MAX_WORKERS))?;
    int("decode-kv-tokens", a.decode_kv_tokens, 1, MAX_KV_TOKENS)?;
    int("prefill-kv-tokens", a.prefill_kv_tokens, 1, MAX_KV_TOKENS)?;
    int(
        "d-to-p-sync-delta-tokens",
        a.d_to_p_sync_delta_tokens,
        1,
        MAX_KV_TOKENS,
    )?;
    int(
        "d-to-p-sync-max-sessions",
        u64::from(a.d_to_p_sync_max_sessions),
        0,
        1 << 16,
    )?;
    int("k-tail-tolerance", a.k_tail_tolerance, 0, MAX_KV_TOKENS)?;
    int(
        "session-final-tokens",
        u64::from(a.session_final_tokens),
        1,
        MAX_KV_TOKENS,
    )?;
    if let Some(t) = a.session_turns {
        int("session-turns", u64::from(t), 1, 10_000)?;
    }
    // Generated sessions are all made before the first runs: their count
    // times their size must fit (a trace is read line by line, bounded).
    if a.trace.is_none() {
        let (turns, flag) = match a.session_turns {
            Some(t) => (t, format!("--session-turns {t}")),
            None => {
                let most = match SessionConfig::default().turns {
                    LengthDist::Fixed(v) => v,
                    LengthDist::Uniform { min, max } | LengthDist::LogNormal { min, max, .. } => {
                        min.max(max)
                    }
                };
                (most, format!("{most} turns (the default's most)"))
            }
        };
        // `e4` keeps its four runs' records.
        let runs = if a.run.is_none() { 4 } else { 1 };
        crate::limits::session_requests(a.sessions, turns, a.session_final_tokens, &flag, runs)?;
    }
    real("bandwidth-gbps", a.bandwidth_gbps, 1e-6, 1e6)?;
    for (name, v) in [
        ("direct-route-ms", a.direct_route_ms),
        ("open-session-ms", a.open_session_ms),
        ("decode-start-ms", a.decode_start_ms),
    ] {
        if let Some(ms) = v {
            real(name, ms, 0.0, MAX_SECONDS * 1000.0)?;
        }
    }
    if let Some(s) = a.snapshot_max_age_s {
        real("snapshot-max-age-s", s, 0.0, MAX_SECONDS)?;
    }
    int(
        "rebalance-threshold",
        u64::from(a.rebalance_threshold),
        0,
        1 << 16,
    )?;
    int(
        "session-close-delay-ms",
        a.session_close_delay_ms,
        0,
        MAX_SECONDS as u64 * 1000,
    )?;
    Ok(())
}

/// The session frontend's overheads: the seed's under its timings, each
/// replaced by its flag when given.
fn overheads(a: &ExperimentArgs) -> SessionOverheads {
    let base = match a.timings {
        TimingsArg::Polynomial => SessionOverheads::default(),
        TimingsArg::Seed => SessionOverheads::SEED,
    };
    // In range (check_ranges): finite, non-negative, at most MAX_SECONDS.
    let ms = |v: Option<f64>, d: Duration| v.map_or(d, |ms| Duration::from_secs_f64(ms / 1e3));
    SessionOverheads {
        direct_route: ms(a.direct_route_ms, base.direct_route),
        open_session: ms(a.open_session_ms, base.open_session),
        decode_start: ms(a.decode_start_ms, base.decode_start),
    }
}

/// The experiment's configuration and, for `run`, its variant.
pub(crate) fn config(a: &ExperimentArgs) -> Result<(ExperimentConfig, Option<Variant>), String> {
    check_ranges(a)?;
    let mut c = ExperimentConfig {
        decode_workers: a.decode,
        decode_kv_tokens: a.decode_kv_tokens,
        prefill_kv_tokens: a.prefill_kv_tokens,
        timing: match a.timings {
            TimingsArg::Polynomial => TimingMode::Polynomial,
            TimingsArg::Seed => TimingMode::Seed,
        },
        rebalance_threshold: a.rebalance_threshold,
        session_close_delay: Duration::from_millis(a.session_close_delay_ms),
        overheads: overheads(a),
        seed: a.seed,
        ..ExperimentConfig::default()
    };
    // The seed's timings move each transfer alone on its link.
    let link = a.link.unwrap_or(match a.timings {
        TimingsArg::Polynomial => LinkArg::Contention,
        TimingsArg::Seed => LinkArg::Bytes,
    });
    let (base, bytes_per_token) = match c.transfer {
        TransferModel::Bytes {
            base,
            bytes_per_token,
            ..
        }
        | TransferModel::Contention {
            base,
            bytes_per_token,
            ..
        } => (base, bytes_per_token),
        TransferModel::Fixed(d) => (d, 0),
    };
    let bandwidth = a.bandwidth_gbps * 1e9;
    c.transfer = match link {
        LinkArg::Bytes => TransferModel::Bytes {
            base,
            bytes_per_token,
            bandwidth,
        },
        LinkArg::Contention => TransferModel::Contention {
            base,
            bytes_per_token,
            bandwidth,
        },
    };
    let s = &mut c.sync;
    s.delta_tokens = a.d_to_p_sync_delta_tokens;
    s.max_sessions = a.d_to_p_sync_max_sessions;
    s.tail_tolerance = a.k_tail_tolerance;
    if let Some(age) = a.snapshot_max_age_s {
        if !(age.is_finite() && age >= 0.0) {
            return Err("--snapshot-max-age-s: must be a non-negative number".into());
        }
        s.max_age = Some(Duration::from_secs_f64(age));
    }
    let variant = a.run.map(RunChoice::variant);
    c.validate().map_err(|e| e.to_string())?;
    Ok((c, variant))
}

/// The experiment's workload: the trace, or the generated sessions.
pub(crate) fn load(a: &ExperimentArgs) -> Result<Vec<TraceItem>, String> {
    match &a.trace {
        Some(path) => {
            let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let mut opts = ReaderOptions::new(path.display().to_string());
            if a.skip_bad_lines {
                opts = opts.skipping_bad_lines();
            }
            let reader = TraceReader::new(BufReader::with_capacity(1 << 20, file), opts);
            let mut items = Vec::new();
            for item in reader {
                if a.limit.is_some_and(|n| items.len() as u64 >= n) {
                    break;
                }
                items.push(item.map_err(|e| e.to_string())?);
            }
            Ok(items)
        }
        None => {
            let d = SessionConfig::default();
            let mut items = generate_sessions(&SessionConfig {
                seed: a.session_seed,
                sessions: a.sessions,
                final_context_tokens: a.session_final_tokens,
                turns: a.session_turns.map_or(d.turns, LengthDist::Fixed),
                ..d
            });
            if let Some(n) = a.limit {
                items.truncate(usize::try_from(n).unwrap_or(usize::MAX));
            }
            Ok(items)
        }
    }
}

fn create(path: &Path) -> Result<BufWriter<File>, String> {
    File::create(path)
        .map(BufWriter::new)
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn write_outputs(a: &ExperimentArgs, outputs: &[RunOutput]) -> Result<(), String> {
    let io = |path: &Path, e: std::io::Error| format!("{}: {e}", path.display());
    if let Some(path) = &a.log {
        let mut w = create(path)?;
        for o in outputs {
            for line in &o.log {
                // Several runs in one file: each line names its run.
                let tagged = match line.strip_suffix('}') {
                    Some(body) => format!("{body},\"run\":\"{}\"}}", o.summary.label),
                    None => line.clone(),
                };
                writeln!(w, "{tagged}").map_err(|e| io(path, e))?;
            }
        }
        w.flush().map_err(|e| io(path, e))?;
    }
    if let Some(path) = &a.metrics {
        let mut w = create(path)?;
        for o in outputs {
            for r in &o.records {
                writeln!(w, "{}", metrics_line(&o.summary.label, r)?).map_err(|e| io(path, e))?;
            }
        }
        w.flush().map_err(|e| io(path, e))?;
    }
    Ok(())
}

fn metrics_line(label: &str, r: &handoff_serving::RequestRecord) -> Result<String, String> {
    let mut v = serde_json::to_value(r).map_err(|e| e.to_string())?;
    if let Some(m) = v.as_object_mut() {
        m.insert("run".into(), serde_json::Value::from(label));
    }
    Ok(v.to_string())
}

fn sessions_of(items: &[TraceItem]) -> u64 {
    let mut s: Vec<u64> = items
        .iter()
        .filter_map(|i| i.request.session.map(|s| s.0))
        .collect();
    s.sort_unstable();
    s.dedup();
    s.len() as u64
}

pub fn run(cmd: ExperimentCommand) -> Result<(), String> {
    let a = cmd.into_args();
    let (cfg, variant) = config(&a)?;
    let items = load(&a)?;
    if items.is_empty() {
        return Err("the trace has no requests".into());
    }
    let started = std::time::Instant::now();
    let runner = a.runner();
    let (report, outputs) = match variant {
        None => {
            let out = run_experiment_on(&cfg, &items, runner).map_err(|e| e.to_string())?;
            (out.report, out.outputs)
        }
        Some(v) => {
            let out = run_variant_on(&cfg, v, &items, runner).map_err(|e| e.to_string())?;
            let report = ExperimentReport {
                requests: items.len() as u64,
                sessions: sessions_of(&items),
                runs: vec![out.summary.clone()],
                verdicts: Vec::new(),
            };
            (report, vec![out])
        }
    };
    let wall = started.elapsed();
    write_outputs(&a, &outputs)?;
    if a.json {
        let s = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        out!("{s}");
    } else {
        print!("{}", report.table());
        out!("wall time {:.3} s", wall.as_secs_f64());
    }
    // A run that leaks a lease or a reservation, or fails a request for any
    // reason but a timeout, is a bug, not a result. Requests that timed out
    // waiting (SGLang's bootstrap timeout expiring on a prefill worker
    // while its decode worker's queue was longer) are what an overloaded
    // deployment does: a result, said so.
    for o in &outputs {
        if o.summary.drained {
            continue;
        }
        match timed_out_only(o) {
            Some(n) => eprintln!(
                "note: {}: {n} requests timed out waiting for a reservation or a lease (their \
                 deadline passed in a queue): this workload overloads the deployment",
                o.summary.label
            ),
            None => return Err(undrained(o)),
        }
    }
    Ok(())
}

/// How many requests of run `o` failed, when every failure is a timeout
/// (`reservation-expired`, `lease-expired`) and no worker held work at the
/// end; `None` otherwise.
pub(crate) fn timed_out_only(o: &RunOutput) -> Option<usize> {
    use handoff_core::{CancelReason, FailureReason};
    if o.report.workers.iter().any(|w| !w.drained) {
        return None;
    }
    let mut n = 0;
    for r in &o.records {
        match r.failure_reason {
            None => {}
            Some(FailureReason::Handoff(
                CancelReason::ReservationExpired | CancelReason::LeaseExpired,
            )) => n += 1,
            Some(_) => return None,
        }
    }
    (n > 0).then_some(n)
}

/// Why run `o` is not a result: its failed requests counted by reason, and
/// the workers that still held work or KV at the end (a request left
/// unfinished means something it waited for never came: a lost wake-up or
/// a reservation nobody ends).
fn undrained(o: &RunOutput) -> String {
    let mut reasons: std::collections::BTreeMap<String, u64> = Default::default();
    for r in &o.records {
        if let Some(f) = r.failure_reason {
            *reasons.entry(f.to_string()).or_default() += 1;
        }
    }
    let reasons: Vec<String> = reasons.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let workers: Vec<String> = o
        .report
        .workers
        .iter()
        .filter(|w| !w.drained)
        .map(|w| format!("{} {}", w.pool, w.worker))
        .collect();
    let mut msg = format!("{}: not drained:", o.summary.label);
    if o.summary.failed > 0 {
        msg += &format!(
            " {} requests failed ({})",
            o.summary.failed,
            reasons.join(", ")
        );
    }
    if !workers.is_empty() {
        msg += &format!(
            "{} workers still holding work or KV at the end ({})",
            if o.summary.failed > 0 { ";" } else { "" },
            workers.join(", ")
        );
    }
    msg + "; a run that leaves work behind is a bug, not a result"
}
