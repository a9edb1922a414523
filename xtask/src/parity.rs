//! `cargo xtask parity [--trace FILE]`, through the libraries.
//!
//! Without `--trace` it runs the canonical traces through replay,
//! virtual-clock live and wall-clock live (in process) and compares their
//! lifecycle transcripts. With `--trace FILE`, for each backend, it builds
//! the deployment the command line's flags describe
//! (`handoff_mocker::flags`) and runs the trace through `handoff-replay`'s
//! `Replay`, `handoff-live-adapter`'s virtual clock over channels
//! (`run_virtual_threads`) and over TCP (`run_tcp_virtual` against one
//! loopback `TcpEndpoint` per worker, each served by
//! `serve_worker_virtual` on its own thread), and compares their
//! transcripts (with final worker states) and reports byte for byte; then
//! the wall clock (`run_in_process`), whose invariants it checks (every
//! role ended Released once, every worker drained, every request
//! terminal) and whose distance from replay it prints, without failing on
//! timing noise. It exits non-zero on any difference or broken invariant.

use handoff_core::{Generation, Transcript, WorkerId};
use handoff_deployment::{deployment, make_core, worker_policy, DeploymentConfig, EngineSpec};
use handoff_live_adapter::{
    connect_workers, run_in_process, run_tcp_virtual, run_virtual_threads, serve_worker_virtual,
    WorkerSetup,
};
use handoff_mocker::flags::run_from_flags;
use handoff_replay::Replay;
use handoff_router::FRONTEND_ID;
use handoff_serving::Report;
use handoff_transport::{PeerRole, TcpEndpoint};
use handoff_workload::TraceItem;
use std::path::PathBuf;

pub fn canonical_parity(speed: f64) -> bool {
    use handoff_tests::parity::{cases, check};
    println!(
        "{:<26} {:<8} {:>9} {:>12}  verdict (replay = virtual live = wall-clock live)",
        "trace", "backend", "handoffs", "transitions"
    );
    let mut ok = true;
    for case in &cases() {
        let v = check(case, speed);
        let verdict = match &v.divergence {
            None => "equal".to_string(),
            Some(d) => {
                ok = false;
                format!("DIFFERS: {d}")
            }
        };
        println!(
            "{:<26} {:<8} {:>9} {:>12}  {verdict}",
            v.name, v.backend, v.handoffs, v.transitions
        );
    }
    ok
}

/// Options of `parity --trace`.
pub struct TraceParity {
    pub trace: PathBuf,
    pub backends: Vec<&'static str>,
    pub prefill: u32,
    pub decode: u32,
    pub speed: f64,
    pub tcp: bool,
    pub wall: bool,
    /// Deployment flags, as the command line takes them.
    pub extra: Vec<String>,
}

/// A run's transcript (as `--transcript` writes it) and report (as
/// `--output` writes it).
struct Outputs {
    transcript: String,
    report: String,
}

impl Outputs {
    fn of(report: &Report, transcript: Option<&Transcript>) -> Result<Self, String> {
        Ok(Outputs {
            transcript: transcript.map(Transcript::render).unwrap_or_default(),
            report: serde_json::to_string_pretty(report).map_err(|e| e.to_string())?,
        })
    }

    /// `None` when both are byte-identical, else where they first differ.
    fn divergence(&self, other: &Outputs) -> Option<String> {
        text_divergence("transcript", &self.transcript, &other.transcript)
            .or_else(|| text_divergence("report", &self.report, &other.report))
    }
}

/// `None` when `x == y`, else the first line where they differ.
fn text_divergence(what: &str, x: &str, y: &str) -> Option<String> {
    if x == y {
        return None;
    }
    let (lx, ly): (Vec<&str>, Vec<&str>) = (x.lines().collect(), y.lines().collect());
    for i in 0..lx.len().max(ly.len()) {
        if lx.get(i) != ly.get(i) {
            return Some(format!(
                "{what} line {}: {:?} vs {:?}",
                i + 1,
                lx.get(i).map_or("(end)", |s| s.trim()),
                ly.get(i).map_or("(end)", |s| s.trim())
            ));
        }
    }
    Some(format!("{what}s differ"))
}

/// The wall-clock run's invariants, from its transcript and report: every
/// role of every handoff ended Released (exactly once: a role's lines end at
/// its first Released), every worker drained with no block in use, every
/// request terminal.
fn wall_invariants(transcript: &str, report: &Report) -> Vec<String> {
    let mut bad = Vec::new();
    let mut last: Option<(String, String)> = None;
    let check_role = |who: &Option<(String, String)>, bad: &mut Vec<String>| {
        if let Some((h, line)) = who {
            if !line.contains("-> Released") {
                bad.push(format!("{h}: role did not end Released ({})", line.trim()));
            }
        }
    };
    let mut handoff = String::new();
    let mut role = String::new();
    for l in transcript.lines() {
        if let Some(h) = l.strip_prefix("handoff ") {
            check_role(&last, &mut bad);
            last = None;
            handoff = h.to_string();
            role.clear();
        } else if let Some(rest) = l.strip_prefix("  ") {
            let r = rest.split_whitespace().next().unwrap_or("").to_string();
            if r != role {
                check_role(&last, &mut bad);
                role = r;
            } else if last
                .as_ref()
                .is_some_and(|(_, x)| x.contains("-> Released"))
            {
                bad.push(format!("{handoff}: {role} moved after Released"));
            }
            last = Some((handoff.clone(), rest.to_string()));
        } else if l.starts_with("worker ") {
            check_role(&last, &mut bad);
            last = None;
            if !l.contains("drained=true") || !l.contains("active=0 pinned=0 reserved=0") {
                bad.push(format!("not drained: {l}"));
            }
        }
    }
    check_role(&last, &mut bad);
    let done = report.completed_requests + report.failed_requests;
    if report.num_requests != done {
        bad.push(format!(
            "{} requests arrived, {done} ended",
            report.num_requests
        ));
    }
    bad.truncate(5);
    bad
}

/// The wall-clock run's distance from replay, in percent.
fn distance(live: &Report, replay: &Report) -> String {
    let rel = |a: f64, b: f64| {
        if b.abs() > 1e-12 {
            (a - b) / b * 100.0
        } else if a.abs() > 1e-12 {
            100.0
        } else {
            0.0
        }
    };
    format!(
        "throughput {:+.1}% ttft p50 {:+.1}% p99 {:+.1}% itl p50 {:+.1}% p99 {:+.1}%",
        rel(
            live.output_token_throughput_tps,
            replay.output_token_throughput_tps
        ),
        rel(live.ttft_ms.p50, replay.ttft_ms.p50),
        rel(live.ttft_ms.p99, replay.ttft_ms.p99),
        rel(live.itl_ms.p50, replay.itl_ms.p50),
        rel(live.itl_ms.p99, replay.itl_ms.p99),
    )
}

/// The deployment and the trace's requests for `backend`.
fn setup(
    o: &TraceParity,
    backend: &str,
) -> Result<(DeploymentConfig, Vec<EngineSpec>, Vec<TraceItem>), String> {
    let mut argv: Vec<String> = vec![
        "--trace".into(),
        o.trace.display().to_string(),
        "--backend".into(),
        backend.into(),
        "--prefill".into(),
        o.prefill.to_string(),
        "--decode".into(),
        o.decode.to_string(),
    ];
    argv.extend(o.extra.iter().cloned());
    let run = run_from_flags(argv, true).map_err(|e| e.to_string())?;
    Ok((run.cfg, run.specs, run.items))
}

/// The replay of `items` (`specs` built their cores when the flags were
/// read, so building them again cannot fail).
fn replay(
    cfg: &DeploymentConfig,
    specs: &[EngineSpec],
    items: &[TraceItem],
) -> Result<(Report, Option<Transcript>), String> {
    let r = Replay::new(cfg.clone(), items.iter().cloned(), |w: WorkerId, _| {
        make_core(&specs[w.0 as usize]).unwrap_or_else(|e| unreachable!("built before: {e}"))
    })
    .map_err(|e| e.to_string())?;
    Ok(r.run())
}

/// One loopback TCP endpoint and thread per worker of the deployment, each
/// serving one virtual-clock session, and the frontend over TCP against
/// them.
fn tcp_run(
    cfg: &DeploymentConfig,
    specs: &[EngineSpec],
    items: &[TraceItem],
) -> Result<(Report, Option<Transcript>), String> {
    let policy = worker_policy(cfg);
    let mut addrs = Vec::new();
    let mut threads = Vec::new();
    for ((id, pool), spec) in deployment(cfg).into_iter().zip(specs) {
        let role = handoff_live_adapter::tcp::peer_role(pool);
        let ep = TcpEndpoint::bind_as(id, Generation(0), role, "127.0.0.1:0")
            .map_err(|e| format!("worker {id}: {e}"))?;
        addrs.push(ep.local_addr().to_string());
        let w = WorkerSetup {
            id,
            generation: Generation(0),
            policy,
            handoff: cfg.handoff,
            spec: spec.clone(),
        };
        threads.push(std::thread::spawn(move || serve_worker_virtual(&w, &ep, 1)));
    }
    let ep = TcpEndpoint::bind_as(
        FRONTEND_ID,
        Generation(0),
        PeerRole::Frontend,
        "127.0.0.1:0",
    )
    .map_err(|e| format!("frontend: {e}"))?;
    let result = connect_workers(&ep, cfg, &addrs)
        .map_err(|e| e.to_string())
        .and_then(|()| {
            run_tcp_virtual(cfg, ep, addrs.len() as u32, items.iter().cloned())
                .map_err(|e| e.to_string())
        });
    for t in threads {
        match t.join() {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err("a worker thread panicked".into()),
        }
    }
    result.map(|o| (o.report, o.transcript))
}

/// The verdict of a run that should equal replay's outputs.
fn verdict(replayed: &Outputs, run: Result<(Report, Option<Transcript>), String>) -> String {
    match run.and_then(|(r, t)| Outputs::of(&r, t.as_ref())) {
        Ok(o) => match replayed.divergence(&o) {
            None => "equal".into(),
            Some(d) => format!("DIFFERS: {d}"),
        },
        Err(e) => format!("FAILED: {e}"),
    }
}

/// The wall clock's verdict: invariants, and the distance from replay.
fn wall_verdict(
    cfg: &DeploymentConfig,
    specs: &[EngineSpec],
    items: &[TraceItem],
    speed: f64,
    replayed: &Report,
) -> (bool, String) {
    match run_in_process(cfg, specs, speed, items.iter().cloned()) {
        Ok((o, _)) => {
            let t = o
                .transcript
                .as_ref()
                .map(Transcript::render)
                .unwrap_or_default();
            let mut inv = wall_invariants(&t, &o.report);
            if o.run.stalled {
                inv.push(
                    "the run stalled: nothing moved for the idle limit while work was left".into(),
                );
            }
            let dist = distance(&o.report, replayed);
            if inv.is_empty() {
                (
                    true,
                    format!("invariants hold; distance from replay: {dist}"),
                )
            } else {
                (
                    false,
                    format!("INVARIANTS BROKEN: {}; {dist}", inv.join("; ")),
                )
            }
        }
        Err(e) => (false, format!("FAILED: {e}")),
    }
}

pub fn trace_parity(o: &TraceParity) -> bool {
    let mut ok = true;
    println!(
        "{:<28} {:<7} {:>8} {:>8}  {:<7} {:<7} {:<7}  wall clock",
        "trace", "backend", "handoffs", "replay s", "threads", "tcp", "s"
    );
    let name = o
        .trace
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    for backend in &o.backends {
        let (cfg, specs, items) = match setup(o, backend) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("{backend}: {e}");
                ok = false;
                continue;
            }
        };
        let started = std::time::Instant::now();
        let replayed = match replay(&cfg, &specs, &items) {
            Ok((r, t)) => Outputs::of(&r, t.as_ref()).map(|o| (r, o)),
            Err(e) => Err(e),
        };
        let (replay_report, replayed) = match replayed {
            Ok(x) => x,
            Err(e) => {
                eprintln!("{backend}: replay: {e}");
                ok = false;
                continue;
            }
        };
        let replay_s = started.elapsed().as_secs_f64();
        let handoffs = replayed
            .transcript
            .lines()
            .filter(|l| l.starts_with("handoff "))
            .count();
        let started = std::time::Instant::now();
        let threads = verdict(
            &replayed,
            run_virtual_threads(&cfg, &specs, items.iter().cloned())
                .map(|o| (o.report, o.transcript))
                .map_err(|e| e.to_string()),
        );
        let threads_s = started.elapsed().as_secs_f64();
        let tcp = if o.tcp {
            verdict(&replayed, tcp_run(&cfg, &specs, &items))
        } else {
            "skipped".into()
        };
        let wall = if o.wall {
            let mut quiet = cfg.clone();
            quiet.transcript = true;
            let (fine, text) = wall_verdict(&quiet, &specs, &items, o.speed, &replay_report);
            ok &= fine;
            text
        } else {
            "skipped".into()
        };
        ok &= threads == "equal" && (tcp == "equal" || tcp == "skipped");
        println!(
            "{name:<28} {backend:<7} {handoffs:>8} {replay_s:>8.2}  {threads:<7} {tcp:<7} {threads_s:<7.1}  {wall}"
        );
    }
    ok
}

/// `cargo xtask parity [--trace FILE [--backend vllm|sglang|both]
/// [--prefill N] [--decode N] [--speed X] [--no-tcp] [--no-wall]
/// [-- DEPLOY FLAGS]]`.
pub fn parity(args: &[String]) -> bool {
    let mut speed = 10.0;
    let mut trace: Option<PathBuf> = None;
    let mut backends = vec!["vllm", "sglang"];
    let (mut prefill, mut decode) = (2, 2);
    let (mut tcp, mut wall) = (true, true);
    let mut extra = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--trace" => match it.next() {
                Some(p) => trace = Some(PathBuf::from(p)),
                None => {
                    eprintln!("--trace needs a file");
                    return false;
                }
            },
            "--backend" => match it.next().map(String::as_str) {
                Some("vllm") => backends = vec!["vllm"],
                Some("sglang") => backends = vec!["sglang"],
                Some("both") => backends = vec!["vllm", "sglang"],
                _ => {
                    eprintln!("--backend needs vllm, sglang or both");
                    return false;
                }
            },
            "--prefill" | "--decode" => match it.next().and_then(|s| s.parse::<u32>().ok()) {
                Some(n) if a == "--prefill" => prefill = n,
                Some(n) => decode = n,
                None => {
                    eprintln!("{a} needs a number");
                    return false;
                }
            },
            "--speed" => match it.next().and_then(|s| s.parse::<f64>().ok()) {
                Some(s) if s > 0.0 && s.is_finite() => speed = s,
                _ => {
                    eprintln!("--speed needs a positive number");
                    return false;
                }
            },
            "--no-tcp" => tcp = false,
            "--no-wall" => wall = false,
            "--" => {
                extra.extend(it.by_ref().cloned());
            }
            other => {
                eprintln!("unknown parity option {other}");
                return false;
            }
        }
    }
    match trace {
        None => canonical_parity(speed),
        Some(trace) => {
            if !trace.is_file() {
                eprintln!("{}: no such file", trace.display());
                return false;
            }
            trace_parity(&TraceParity {
                trace,
                backends,
                prefill,
                decode,
                speed: if args.iter().any(|a| a == "--speed") {
                    speed
                } else {
                    100.0
                },
                tcp,
                wall,
                extra,
            })
        }
    }
}
