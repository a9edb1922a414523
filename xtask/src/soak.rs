//! `cargo xtask soak`: a bounded soak over TCP. A wall-clock frontend and
//! 2 prefill + 2 decode worker processes on loopback serve a synthetic
//! workload while, every few seconds, one worker is killed by signal and
//! restarted as its next generation (it dials the frontend and its peers
//! back). At the end every request must be terminal, every worker (the
//! survivors and the restarted incarnations) drained with no block in use,
//! and the report must say what failed and why.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Options of `soak`.
pub struct Soak {
    /// Requests in the workload.
    pub requests: u64,
    /// Arrivals per model second.
    pub rate: f64,
    /// Model time per wall time.
    pub speed: f64,
    /// Wall seconds between kills.
    pub kill_every: f64,
    /// Engine imitated.
    pub backend: String,
}

impl Default for Soak {
    fn default() -> Self {
        Soak {
            requests: 20_000,
            rate: 40.0,
            speed: 10.0,
            kill_every: 3.0,
            backend: "vllm".into(),
        }
    }
}

struct Worker {
    id: u32,
    role: &'static str,
    addr: String,
    generation: u32,
    child: Child,
}

/// Starts a worker process and returns it with its address once it prints
/// it; its further output is drained so it never blocks.
fn spawn_worker(
    bin: &Path,
    id: u32,
    role: &'static str,
    listen: &str,
    generation: u32,
    connect: &[String],
    common: &[String],
) -> Result<Worker, String> {
    let mut cmd = Command::new(bin);
    cmd.args(["worker", "--id", &id.to_string(), "--role", role])
        .args(["--listen", listen, "--generation", &generation.to_string()])
        .args(common);
    for c in connect {
        cmd.args(["--connect", c]);
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let out = child.stdout.take().ok_or("no stdout")?;
    let mut r = BufReader::new(out);
    let mut line = String::new();
    r.read_line(&mut line).map_err(|e| e.to_string())?;
    std::thread::spawn(move || for _ in r.lines() {});
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .ok_or_else(|| format!("worker {id} did not start: {line:?}"))?
        .to_string();
    Ok(Worker {
        id,
        role,
        addr,
        generation,
        child,
    })
}

/// Runs the soak; `true` when every check held.
pub fn run(bin: &Path, o: &Soak) -> bool {
    match soak(bin, o) {
        Ok(ok) => ok,
        Err(e) => {
            eprintln!("soak: {e}");
            false
        }
    }
}

fn soak(bin: &Path, o: &Soak) -> Result<bool, String> {
    let speed = o.speed.to_string();
    let common: Vec<String> = ["--backend", &o.backend, "--speed", &speed]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut workers: Vec<Worker> = Vec::new();
    for (id, role) in [(0, "prefill"), (1, "prefill"), (2, "decode"), (3, "decode")] {
        let connect: Vec<String> = if role == "decode" {
            workers.iter().map(|w| w.addr.clone()).collect()
        } else {
            Vec::new()
        };
        workers.push(spawn_worker(
            bin,
            id,
            role,
            "127.0.0.1:0",
            0,
            &connect,
            &common,
        )?);
    }
    let mut fe = Command::new(bin);
    fe.args([
        "frontend",
        "--listen",
        "127.0.0.1:0",
        "--json",
        "--allow-failures",
    ])
    .args([
        "--requests",
        &o.requests.to_string(),
        "--rate",
        &o.rate.to_string(),
    ])
    .args(&common);
    for w in &workers {
        fe.args(["--worker", &format!("{}={}@{}", w.id, w.role, w.addr)]);
    }
    let mut fe = fe
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut err = BufReader::new(fe.stderr.take().ok_or("no stderr")?);
    let mut line = String::new();
    err.read_line(&mut line).map_err(|e| e.to_string())?;
    let fe_addr = line
        .trim()
        .strip_prefix("frontend listening on ")
        .ok_or_else(|| format!("frontend did not start: {line:?}"))?
        .to_string();
    let errors = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = err.read_to_string(&mut rest);
        rest
    });
    let mut stdout = fe.stdout.take().ok_or("no stdout")?;
    let report = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let mut kills = 0u32;
    let mut next_kill = started + Duration::from_secs_f64(o.kill_every);
    let limit = started + Duration::from_secs(900);
    let status = loop {
        if let Some(s) = fe.try_wait().map_err(|e| e.to_string())? {
            break s;
        }
        if Instant::now() > limit {
            let _ = fe.kill();
            return Err("the frontend did not finish in 15 minutes".into());
        }
        if Instant::now() >= next_kill {
            let i = (kills as usize) % workers.len();
            let w = &mut workers[i];
            let _ = w.child.kill();
            let _ = w.child.wait();
            kills += 1;
            let generation = w.generation + 1;
            let (id, role, addr) = (w.id, w.role, w.addr.clone());
            let mut connect = vec![fe_addr.clone()];
            connect.extend(
                workers
                    .iter()
                    .filter(|p| p.id != id && p.role != role)
                    .map(|p| p.addr.clone()),
            );
            workers[i] = spawn_worker(bin, id, role, &addr, generation, &connect, &common)?;
            eprintln!(
                "soak: killed worker {id} ({role}) and restarted it as generation {generation}"
            );
            next_kill += Duration::from_secs_f64(o.kill_every);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let wall = started.elapsed().as_secs_f64();
    for w in &mut workers {
        let _ = w.child.kill();
        let _ = w.child.wait();
    }
    let json = report.join().unwrap_or_default();
    let stderr = errors.join().unwrap_or_default();
    if !status.success() {
        return Err(format!("frontend failed: {stderr}"));
    }
    let field = |key: &str| -> u64 {
        let pat = format!("\"{key}\":");
        json.lines()
            .find_map(|l| l.trim().strip_prefix(&pat))
            .and_then(|v| v.trim().trim_end_matches(',').parse().ok())
            .unwrap_or(0)
    };
    let (num, done, failed) = (
        field("num_requests"),
        field("completed_requests"),
        field("failed_requests"),
    );
    let mut bad = Vec::new();
    if num != o.requests || done + failed != num {
        bad.push(format!(
            "{num} of {} requests arrived, {done} completed and {failed} failed",
            o.requests
        ));
    }
    // Workers up at the end (survivors and restarted incarnations) are in
    // the table; one killed too late to be back is not.
    let listed = json.matches("\"drained\":").count();
    let drained = json.matches("\"drained\": true").count();
    let unused = json.matches("\"final_kv_used_blocks\": 0").count();
    if listed + 1 < workers.len() || drained != listed || unused != listed {
        bad.push(format!(
            "{drained} of {listed} workers up at the end drained, {unused} with no block in use"
        ));
    }
    if json.contains("\"stalled\": true") {
        bad.push("the frontend stalled".into());
    }
    let reasons = json
        .split("\"failure_reasons\":")
        .nth(1)
        .and_then(|r| r.split('}').next())
        .map(|r| r.split_whitespace().collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "{}".into());
    println!(
        "soak: {num} requests, {done} completed, {failed} failed (by reason {reasons} }}), migrated {}, {kills} kills and restarts, workers lost {}, {wall:.1} s wall",
        field("migrated_requests"),
        field("workers_lost"),
    );
    for b in &bad {
        println!("soak: BROKEN: {b}");
    }
    Ok(bad.is_empty())
}
