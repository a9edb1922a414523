//! `handoff-mocker live`, `worker` and `frontend`: the same worker hosts as
//! replay, on threads (one process) or in separate processes over TCP, on a
//! virtual clock (byte-identical to replay) or on the wall clock (real
//! time, `--speed` times faster).

use crate::args::{DeployArgs, WorkloadArgs};
use crate::report_out::OutputArgs;
use clap::{Args, ValueEnum};
use handoff_core::{Generation, HandoffPolicy, WorkerId};
use handoff_deployment::{deployment, make_core, DeploymentConfig, EngineSpec};
use handoff_live_adapter::{
    connect_retry, connect_workers, run_in_process, run_tcp_virtual, run_virtual_threads,
    serve_worker_virtual, serve_worker_wall, FrontendNode, LiveOutcome, LiveRun, WallClock,
    WorkerSetup,
};
use handoff_replay::Replay;
use handoff_router::{Pool, FRONTEND_ID};
use handoff_serving::{serving, Report};
use handoff_transport::{PeerRole, TcpEndpoint};
use std::io::Write;

/// Which clock live workers run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ClockArg {
    /// Real time, sped up by `--speed`; reports are close to replay's.
    Wall,
    /// Model time granted by the coordinator; byte-identical to replay.
    Virtual,
}

/// Options of `live`.
#[derive(Args, Debug)]
pub struct LiveArgs {
    #[command(flatten)]
    deploy: DeployArgs,
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Clock of the workers: wall (real time) or virtual (same as replay).
    #[arg(long, value_enum, default_value = "wall")]
    clock: ClockArg,
    /// Wall clock: model time runs this many times faster than wall time.
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    #[command(flatten)]
    out: OutputArgs,
}

/// The distance of a wall-clock run's report from replay's, as printed.
fn distance(live: &Report, replay: &Report) -> (serde_json::Value, String) {
    let rel = |a: f64, b: f64| {
        if b.abs() > 1e-12 {
            ((a - b) / b * 1000.0).round() / 10.0
        } else if a.abs() > 1e-12 {
            100.0
        } else {
            0.0
        }
    };
    let pairs = [
        (
            "output_token_throughput_pct",
            rel(
                live.output_token_throughput_tps,
                replay.output_token_throughput_tps,
            ),
        ),
        ("ttft_p50_pct", rel(live.ttft_ms.p50, replay.ttft_ms.p50)),
        ("ttft_p99_pct", rel(live.ttft_ms.p99, replay.ttft_ms.p99)),
        ("itl_p50_pct", rel(live.itl_ms.p50, replay.itl_ms.p50)),
        ("itl_p99_pct", rel(live.itl_ms.p99, replay.itl_ms.p99)),
    ];
    let mut m = serde_json::Map::new();
    let mut text = String::from("distance from replay:");
    for (k, v) in pairs {
        m.insert(k.into(), serde_json::json!(v));
        text.push_str(&format!(" {k} {v:+.1}"));
    }
    m.insert(
        "completed_requests".into(),
        serde_json::json!([live.completed_requests, replay.completed_requests]),
    );
    (serde_json::Value::Object(m), text)
}

fn live_extra(
    o: &LiveOutcome,
    replay: Option<&Report>,
) -> (serde_json::Map<String, serde_json::Value>, Vec<String>) {
    let mut m = serde_json::Map::new();
    m.insert(
        "live".into(),
        serde_json::json!({
            "clock": "wall",
            "worker_events": o.run.events,
            "workers_lost": o.run.workers_lost,
            "losses": o.losses.iter().map(|l| serde_json::json!({
                "worker": l.worker.0,
                "generation": l.generation.0,
                "at_ms": l.at.0 as f64 / 1e6,
                "how": l.kind.name(),
            })).collect::<Vec<_>>(),
            "stalled": o.run.stalled,
            "wall_seconds": (o.run.wall_seconds * 1000.0).round() / 1000.0,
            "arrival_lag_ms": {"max": o.run.arrival_lag_max_ms, "p99": o.run.arrival_lag_p99_ms},
            "kept_up": o.run.kept_up(),
        }),
    );
    let mut text = vec![format!(
        "wall clock: {:.3} s, worker events {}, workers lost {}{}",
        o.run.wall_seconds,
        o.run.events,
        o.run.workers_lost,
        if o.run.stalled { ", STALLED" } else { "" }
    )];
    for l in &o.losses {
        text.push(format!(
            "worker {} (generation {}) lost at {:.3} s model time ({}): its requests migrated once or failed",
            l.worker,
            l.generation.0,
            l.at.0 as f64 / 1e9,
            l.kind.name()
        ));
    }
    text.push(format!(
        "arrival lag (model ms behind the wall clock): p99 {:.3}, max {:.3}",
        o.run.arrival_lag_p99_ms, o.run.arrival_lag_max_ms
    ));
    if !o.run.kept_up() {
        text.push(format!(
            "warning: model time fell more than {} ms behind the wall clock (p99): this \
             machine did not keep up at this --speed, so latencies include that lag; \
             a lower --speed separates overload from a modelling difference",
            LiveRun::LAG_LIMIT_MS
        ));
    }
    if let Some(r) = replay {
        let (v, t) = distance(&o.report, r);
        m.insert("distance_from_replay".into(), v);
        text.push(t);
    }
    (m, text)
}

/// The same workload through replay, for a wall-clock run's distance.
fn replay_of(
    cfg: &DeploymentConfig,
    specs: &[EngineSpec],
    workload: &WorkloadArgs,
    seed: u64,
) -> Result<Report, String> {
    let mut again = workload.open(seed)?;
    let mut quiet = cfg.clone();
    quiet.transcript = false;
    let (r, _) = Replay::new(quiet, again.take_items(), |w: WorkerId, _| {
        make_core(&specs[w.0 as usize]).unwrap_or_else(|_| unreachable!("spec checked"))
    })
    .map_err(|e| e.to_string())?
    .run();
    Ok(r)
}

/// Runs every role in this process, one thread per worker.
pub fn run_live(a: LiveArgs) -> Result<(), String> {
    let (mut cfg, specs) = a.deploy.deployment(true)?;
    cfg.transcript = a.out.transcript.is_some();
    let mut wl = a.workload.open(a.deploy.seed)?;
    wl.check_fits(
        &specs,
        cfg.decode_workers as usize * usize::from(cfg.dp.dp_size()),
    )?;
    let items = wl.take_items();
    let mut stalled = false;
    let (report, transcript, extra, text) = match a.clock {
        ClockArg::Virtual => {
            let o = run_virtual_threads(&cfg, &specs, items).map_err(|e| e.to_string())?;
            let mut m = serde_json::Map::new();
            m.insert(
                "live".into(),
                serde_json::json!({ "clock": "virtual", "host_operations": o.calls }),
            );
            let text = vec![format!(
                "virtual clock: {} host operations over channels",
                o.calls
            )];
            (o.report, o.transcript, m, text)
        }
        ClockArg::Wall => {
            let speed = a.deploy.check_wall_clock(a.speed, None)?;
            let (o, _) = run_in_process(&cfg, &specs, speed, items).map_err(|e| e.to_string())?;
            let r = replay_of(&cfg, &specs, &a.workload, a.deploy.seed)?;
            let (m, text) = live_extra(&o, Some(&r));
            stalled = o.run.stalled;
            (o.report, o.transcript, m, text)
        }
    };
    if let Some(e) = wl.error.borrow_mut().take() {
        return Err(e.to_string());
    }
    let none = serde_json::Map::new();
    a.out
        .finish(&report, transcript.as_ref(), &wl, &none, extra, &text)?;
    stall_error(stalled)
}

/// `--role` of a worker process.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum RoleArg {
    /// A prefill (source) worker.
    Prefill,
    /// A decode (destination) worker.
    Decode,
    /// Prefill and decode, no handoff.
    Aggregated,
}

/// Options of `worker`.
#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// This worker's id (unique in the deployment).
    #[arg(long)]
    id: u32,
    /// Its pool.
    #[arg(long, value_enum)]
    role: RoleArg,
    /// Address to listen on (port 0 picks one; the chosen address is printed).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// Wall clock: peers to dial (decode workers dial their prefill
    /// workers); retried until they are up.
    #[arg(long)]
    connect: Vec<String>,
    /// Incarnation; a restarted worker must use a higher one.
    #[arg(long, default_value_t = 0)]
    generation: u32,
    #[command(flatten)]
    deploy: DeployArgs,
    /// Clock: wall (real time) or virtual (the frontend grants model time).
    #[arg(long, value_enum, default_value = "wall")]
    clock: ClockArg,
    /// Wall clock: model time runs this many times faster than wall time.
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// Frontend sessions to serve before exiting (0: serve until killed).
    #[arg(long, default_value_t = 1)]
    sessions: u64,
}

/// Runs one worker process until its frontend disconnects.
pub fn run_worker(a: WorkerArgs) -> Result<(), String> {
    if a.id == FRONTEND_ID.0 {
        return Err(format!("--id: {} is reserved for the frontend", a.id));
    }
    let d = &a.deploy;
    d.check_ranges()?;
    let (p, dspec) = d.engines()?;
    let (spec, policy) = match a.role {
        RoleArg::Prefill => (p, d.policy()),
        RoleArg::Decode => (dspec, d.policy()),
        RoleArg::Aggregated => (p, HandoffPolicy::Disabled),
    };
    let setup = WorkerSetup {
        id: WorkerId(a.id),
        generation: Generation(a.generation),
        policy,
        handoff: d.handoff(),
        spec,
    };
    let role = match a.role {
        RoleArg::Prefill => PeerRole::Prefill,
        RoleArg::Decode => PeerRole::Decode,
        RoleArg::Aggregated => PeerRole::Aggregated,
    };
    let ep = TcpEndpoint::bind_as(setup.id, setup.generation, role, a.listen.as_str())
        .map_err(|e| format!("--listen {}: {e}", a.listen))?;
    out!("listening on {}", ep.local_addr());
    let _ = std::io::stdout().flush();
    if a.clock == ClockArg::Virtual {
        let (served, ops) =
            serve_worker_virtual(&setup, &ep, a.sessions).map_err(|e| e.to_string())?;
        out!(
            "worker {} done: {served} session(s), {ops} host operations",
            a.id
        );
        return Ok(());
    }
    // Decode workers dial their prefill workers; a restarted worker dials
    // the frontend (`frontend --listen`) and its peers to rejoin.
    for peer in &a.connect {
        connect_retry(&ep, peer).map_err(|e| format!("--connect {e}"))?;
    }
    let speed = d.check_wall_clock(a.speed, None)?;
    serve_worker_wall(
        &setup,
        d.transfer()?,
        &ep,
        speed,
        a.sessions,
        |n, stats, fin| {
            out!(
            "worker {} session {n} done: frames {} steps {} transfers {} peers lost {} drained {}",
            a.id,
            stats.frames,
            stats.steps,
            stats.transfers,
            stats.peers_lost,
            fin.drained
        );
            let _ = std::io::stdout().flush();
        },
    )
    .map_err(|e| e.to_string())?;
    Ok(())
}

/// Options of `frontend`.
#[derive(Args, Debug)]
pub struct FrontendArgs {
    /// A worker to use, as ID=ROLE@ADDR (ROLE: prefill, decode, aggregated).
    /// Repeat; ids must be 0..n with prefill (or aggregated) workers first.
    #[arg(long = "worker", value_name = "ID=ROLE@ADDR", required = true)]
    workers: Vec<String>,
    #[command(flatten)]
    deploy: DeployArgs,
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Clock of the workers (they must have been started with the same).
    #[arg(long, value_enum, default_value = "wall")]
    clock: ClockArg,
    /// Wall clock: model time runs this many times faster than wall time
    /// (match the workers).
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    #[command(flatten)]
    out: OutputArgs,
    /// Address to listen on, so that a restarted worker can dial back in
    /// (`worker --generation N+1 --connect ADDR`).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
}

fn parse_worker(s: &str) -> Result<(WorkerId, Pool, String), String> {
    let err = || format!("--worker {s}: expected ID=ROLE@ADDR, e.g. 0=prefill@127.0.0.1:7000");
    let (id, rest) = s.split_once('=').ok_or_else(err)?;
    let (role, addr) = rest.split_once('@').ok_or_else(err)?;
    let id: u32 = id.parse().map_err(|_| err())?;
    let pool = match role {
        "prefill" => Pool::Prefill,
        "decode" => Pool::Decode,
        "aggregated" => Pool::Aggregated,
        _ => return Err(err()),
    };
    Ok((WorkerId(id), pool, addr.to_string()))
}

/// The deployment the `--worker` list describes: its pools override
/// `--prefill`/`--decode`, and its ids must be the engine's (0..n, prefill
/// or aggregated first).
fn frontend_deployment(
    a: &FrontendArgs,
) -> Result<(DeploymentConfig, Vec<EngineSpec>, Listed), String> {
    let mut listed = Vec::new();
    for spec in &a.workers {
        listed.push(parse_worker(spec)?);
    }
    listed.sort_by_key(|(w, _, _)| *w);
    let decode = listed.iter().filter(|(_, p, _)| *p == Pool::Decode).count() as u32;
    let prefill = listed.len() as u32 - decode;
    // With `--dp-size N` every rank is its own scheduler, so its own
    // process (as each vLLM DP rank is its own engine core): the list
    // names N ranks per worker.
    let dp = handoff_core::DpLayout::new(a.deploy.dp_size)
        .map_err(|e| format!("--dp-size {}: {e}", a.deploy.dp_size))?;
    let n = u32::from(dp.dp_size());
    if !prefill.is_multiple_of(n) || !decode.is_multiple_of(n) {
        return Err(format!(
            "--worker: with --dp-size {n} each worker's {n} ranks are listed, one process each; \
             {prefill} prefill and {decode} decode processes are not whole workers"
        ));
    }
    let mut d = a.deploy.clone();
    d.prefill = prefill / n;
    d.decode = decode / n;
    // The workers build their own cores; these specs serve the replay the
    // wall-clock run is measured against.
    let (mut cfg, specs) = d.deployment(true)?;
    cfg.transcript = a.out.transcript.is_some();
    let expected = deployment(&cfg);
    if prefill == 0 || expected.len() != listed.len() {
        return Err("--worker: at least one prefill or aggregated worker is needed".into());
    }
    for ((w, pool, _), (ew, epool)) in listed.iter().zip(&expected) {
        if w != ew || pool != epool {
            return Err(format!(
                "--worker: worker {w} is listed as {}, but with {prefill} prefill and {decode} decode workers it must be worker {ew} as {} (ids 0..{}, prefill or aggregated first)",
                pool.name(),
                epool.name(),
                expected.len() - 1
            ));
        }
    }
    Ok((
        cfg,
        specs,
        listed.into_iter().map(|(w, _, addr)| (w, addr)).collect(),
    ))
}

/// The workers of `--worker`, in id order, with their addresses.
type Listed = Vec<(WorkerId, String)>;

/// Drives worker processes with a workload over TCP.
pub fn run_frontend(a: FrontendArgs) -> Result<(), String> {
    let (cfg, specs, listed) = frontend_deployment(&a)?;
    if a.clock == ClockArg::Wall {
        handoff_deployment::check_wall_driver(&cfg, handoff_deployment::WallDriver::LiveWallTcp)
            .map_err(|e| e.to_string())?;
    }
    let ep = TcpEndpoint::bind_as(
        FRONTEND_ID,
        Generation(0),
        PeerRole::Frontend,
        a.listen.as_str(),
    )
    .map_err(|e| format!("--listen {}: {e}", a.listen))?;
    eprintln!("frontend listening on {}", ep.local_addr());
    let addrs: Vec<String> = listed.iter().map(|(_, addr)| addr.clone()).collect();
    connect_workers(&ep, &cfg, &addrs).map_err(|e| format!("--worker {e}"))?;
    let mut wl = a.workload.open(a.deploy.seed)?;
    wl.check_fits(
        &specs,
        cfg.decode_workers as usize * usize::from(cfg.dp.dp_size()),
    )?;
    let items = wl.take_items();
    let mut stalled = false;
    let (report, transcript, extra, text) = match a.clock {
        ClockArg::Virtual => {
            let o =
                run_tcp_virtual(&cfg, ep, listed.len() as u32, items).map_err(|e| e.to_string())?;
            let (report, transcript, calls) = (o.report, o.transcript, o.calls);
            let mut m = serde_json::Map::new();
            m.insert(
                "live".into(),
                serde_json::json!({ "clock": "virtual", "host_operations": calls }),
            );
            let text = vec![format!("virtual clock: {calls} host operations over TCP")];
            (report, transcript, m, text)
        }
        ClockArg::Wall => {
            let clock = WallClock::start(a.deploy.check_wall_clock(a.speed, None)?);
            let workers = listed.iter().map(|(w, _)| *w).collect();
            let o = FrontendNode::new(serving(&cfg, items), workers, ep, clock).run();
            // For whoever drives the processes (`cargo xtask soak`): a worker
            // lost after this line is not this run's.
            eprintln!(
                "frontend: run over, {} worker loss(es) seen",
                o.run.workers_lost
            );
            let r = replay_of(&cfg, &specs, &a.workload, a.deploy.seed)?;
            let (m, text) = live_extra(&o, Some(&r));
            stalled = o.run.stalled;
            (o.report, o.transcript, m, text)
        }
    };
    if let Some(e) = wl.error.borrow_mut().take() {
        return Err(e.to_string());
    }
    let none = serde_json::Map::new();
    a.out
        .finish(&report, transcript.as_ref(), &wl, &none, extra, &text)?;
    stall_error(stalled)
}

/// A wall-clock run that ended because nothing moved for too long did not
/// finish its work, whatever its report says: it fails.
fn stall_error(stalled: bool) -> Result<(), String> {
    if stalled {
        Err(
            "the run stalled: nothing moved for the idle limit while work was left \
             (a worker that never drained, or a request nobody answered)"
                .into(),
        )
    } else {
        Ok(())
    }
}
