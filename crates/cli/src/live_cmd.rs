//! `handoff-mocker live`, `worker` and `frontend`: the same workers as
//! replay, on threads (one process) or in separate processes over TCP.

use crate::args::{DeployArgs, WorkloadArgs};
use clap::{Args, ValueEnum};
use handoff_core::{CoreBox, Generation, HandoffPolicy, WorkerId};
use live_adapter::{
    run_in_process, FrontendNode, LiveConfig, LiveOutcome, NodeConfig, WallClock, WorkerNode,
};
use replay::{make_core, EngineSpec};
use router::{Frontend, Pool, FRONTEND_ID};
use std::collections::BTreeMap;
use std::io::Write;
use transport::TcpEndpoint;

fn speed_ok(speed: f64) -> Result<f64, String> {
    if speed.is_finite() && speed > 0.0 {
        Ok(speed)
    } else {
        Err("--speed: must be a positive number".into())
    }
}

fn core(spec: &EngineSpec) -> Result<CoreBox, String> {
    make_core(spec).map_err(|e| e.to_string())
}

/// Options of `live`.
#[derive(Args, Debug)]
pub struct LiveArgs {
    #[command(flatten)]
    deploy: DeployArgs,
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Model time runs this many times faster than wall time.
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// Print the outcome as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// Runs every role in this process, one thread per worker.
pub fn run_live(a: LiveArgs) -> Result<(), String> {
    let d = &a.deploy;
    let (p, dspec) = d.engines()?;
    let mut cores = Vec::new();
    let aggregated = d.decode == 0;
    for _ in 0..d.prefill.max(1) {
        cores.push((
            if aggregated {
                Pool::Aggregated
            } else {
                Pool::Prefill
            },
            core(&p)?,
        ));
    }
    for _ in 0..d.decode {
        cores.push((Pool::Decode, core(&dspec)?));
    }
    let cfg = LiveConfig {
        frontend: d.frontend()?,
        handoff: d.handoff(),
        transfer: d.transfer()?,
        speed: speed_ok(a.speed)?,
    };
    let wl = a.workload.open(d.seed)?;
    let (outcome, stats) = run_in_process(cfg, cores, wl.items);
    if let Some(e) = wl.error.borrow_mut().take() {
        return Err(e.to_string());
    }
    let sent: u64 = stats.iter().map(|s| s.frames).sum();
    print_outcome(
        &outcome,
        a.json,
        &wl.skipped.borrow().describe(&wl.note),
        Some(sent),
    );
    Ok(())
}

fn print_outcome(o: &LiveOutcome, json: bool, note: &str, frames: Option<u64>) {
    let workers: Vec<serde_json::Value> = o
        .transcript
        .workers()
        .map(|(w, f)| {
            serde_json::json!({
                "worker": w.0,
                "drained": f.drained,
                "kv_used_blocks": f.capacity.kv_used_blocks(),
                "pinned_source_blocks": f.capacity.pinned_source_blocks,
                "reserved_destination_blocks": f.capacity.reserved_destination_blocks,
            })
        })
        .collect();
    let per_s = if o.wall_seconds > 0.0 {
        o.handoffs as f64 / o.wall_seconds
    } else {
        0.0
    };
    if json {
        let v = serde_json::json!({
            "requests": o.requests,
            "completed": o.completed,
            "failed": o.failed,
            "handoffs": o.handoffs,
            "handoffs_per_wall_second": (per_s * 10.0).round() / 10.0,
            "transitions": o.transcript.transitions(),
            "worker_events": o.events,
            "workers_lost": o.workers_lost,
            "stalled": o.stalled,
            "wall_seconds": (o.wall_seconds * 1000.0).round() / 1000.0,
            "workers": workers,
        });
        out!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        out!("{note}");
        out!(
            "requests {} completed {} failed {}  handoffs {} ({:.1}/s wall)  transitions {}  wall {:.3} s{}",
            o.requests,
            o.completed,
            o.failed,
            o.handoffs,
            per_s,
            o.transcript.transitions(),
            o.wall_seconds,
            if o.stalled { "  (stalled)" } else { "" }
        );
        if let Some(f) = frames {
            out!("frames handled by workers {f}");
        }
        for w in workers {
            out!("{w}");
        }
    }
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
    /// Peers to dial (decode workers dial their prefill workers).
    #[arg(long)]
    connect: Vec<String>,
    /// Incarnation; a restarted worker must use a higher one.
    #[arg(long, default_value_t = 0)]
    generation: u32,
    #[command(flatten)]
    deploy: DeployArgs,
    /// Model time runs this many times faster than wall time.
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
}

/// Runs one worker process until its frontend disconnects.
pub fn run_worker(a: WorkerArgs) -> Result<(), String> {
    if a.id == FRONTEND_ID.0 {
        return Err(format!("--id: {} is reserved for the frontend", a.id));
    }
    let d = &a.deploy;
    let (p, dspec) = d.engines()?;
    let (spec, policy) = match a.role {
        RoleArg::Prefill => (p, d.policy()),
        RoleArg::Decode => (dspec, d.policy()),
        RoleArg::Aggregated => (p, HandoffPolicy::Disabled),
    };
    let me = WorkerId(a.id);
    let generation = Generation(a.generation);
    let ep = TcpEndpoint::bind(me, generation, a.listen.as_str())
        .map_err(|e| format!("--listen {}: {e}", a.listen))?;
    out!("listening on {}", ep.local_addr());
    let _ = std::io::stdout().flush();
    for peer in &a.connect {
        ep.connect(peer.as_str())
            .map_err(|e| format!("--connect {peer}: {e}"))?;
    }
    let cfg = NodeConfig {
        id: me,
        generation,
        policy,
        handoff: d.handoff(),
        frontend: FRONTEND_ID,
        transfer: d.transfer()?,
    };
    let node = WorkerNode::new(cfg, core(&spec)?, ep, WallClock::start(speed_ok(a.speed)?));
    let (stats, worker) = node.run();
    out!(
        "worker {} done: frames {} steps {} transfers {} peers lost {} drained {}",
        a.id,
        stats.frames,
        stats.steps,
        stats.transfers,
        stats.peers_lost,
        worker.is_drained()
    );
    Ok(())
}

/// Options of `frontend`.
#[derive(Args, Debug)]
pub struct FrontendArgs {
    /// A worker to use, as ID=ROLE@ADDR (ROLE: prefill, decode, aggregated). Repeat.
    #[arg(long = "worker", value_name = "ID=ROLE@ADDR", required = true)]
    workers: Vec<String>,
    #[command(flatten)]
    deploy: DeployArgs,
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Model time runs this many times faster than wall time (match the workers).
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// Print the outcome as JSON on stdout.
    #[arg(long)]
    json: bool,
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

/// Drives worker processes with a workload.
pub fn run_frontend(a: FrontendArgs) -> Result<(), String> {
    let d = &a.deploy;
    let ep =
        TcpEndpoint::bind(FRONTEND_ID, Generation(0), "127.0.0.1:0").map_err(|e| e.to_string())?;
    let mut pools = BTreeMap::new();
    for spec in &a.workers {
        let (id, pool, addr) = parse_worker(spec)?;
        let (got, _) = ep
            .connect(addr.as_str())
            .map_err(|e| format!("--worker {spec}: {e}"))?;
        if got != id {
            return Err(format!(
                "--worker {spec}: the worker at {addr} says it is {got}"
            ));
        }
        pools.insert(id, pool);
    }
    let routing: Vec<(WorkerId, Pool)> = pools.iter().map(|(w, p)| (*w, *p)).collect();
    let frontend = Frontend::new(d.frontend()?, &routing);
    let wl = a.workload.open(d.seed)?;
    let clock = WallClock::start(speed_ok(a.speed)?);
    let outcome = FrontendNode::new(frontend, pools, ep, clock, wl.items).run();
    if let Some(e) = wl.error.borrow_mut().take() {
        return Err(e.to_string());
    }
    print_outcome(
        &outcome,
        a.json,
        &wl.skipped.borrow().describe(&wl.note),
        None,
    );
    Ok(())
}
