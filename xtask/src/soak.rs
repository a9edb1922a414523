//! `cargo xtask soak`: a bounded soak over TCP. A wall-clock frontend and
//! 2 prefill + 2 decode worker processes on loopback serve a synthetic
//! workload while, every few seconds, one worker is killed by signal and
//! restarted as its next generation (it dials the frontend and its peers
//! back). At the end every request must be terminal, every worker (the
//! survivors and the restarted incarnations) drained with no block in use,
//! the report must say what failed and why, and every kill must be one of
//! the frontend's losses (same worker, same generation) and every loss a
//! kill: a kill the frontend did not count, or a live worker it took for
//! lost, breaks the soak. Kills stop once the frontend says its run is
//! over; a kill less than [`END_RACE`] before that may have raced the
//! run's last event and is reported apart.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A kill this close to the frontend's end of run may land after its last
/// look at its connections (a process death is seen in microseconds, but
/// the run may end in between).
const END_RACE: Duration = Duration::from_secs(1);

/// One kill: which incarnation, when.
struct Kill {
    id: u32,
    generation: u32,
    at: Instant,
}

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
    let (mut fe, err, fe_addr) = spawn_frontend(bin, o, &workers, &common)?;
    // When the frontend said its run is over (no kill after that counts).
    let over: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let over_w = Arc::clone(&over);
    let errors = std::thread::spawn(move || {
        let mut rest = String::new();
        for l in err.lines().map_while(Result::ok) {
            if l.starts_with("frontend: run over") {
                if let Ok(mut o) = over_w.lock() {
                    *o = Some(Instant::now());
                }
            }
            rest.push_str(&l);
            rest.push('\n');
        }
        rest
    });
    let run_over = || over.lock().ok().and_then(|o| *o);
    let mut stdout = fe.stdout.take().ok_or("no stdout")?;
    let report = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let mut kills: Vec<Kill> = Vec::new();
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
        if Instant::now() >= next_kill && run_over().is_none() {
            let i = kills.len() % workers.len();
            kills.push(restart(bin, &mut workers, i, &fe_addr, &common)?);
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
    let over_at = run_over();
    let (line, bad) = judge(&json, o, workers.len(), &kills, over_at, wall)?;
    println!("{line}");
    for b in &bad {
        println!("soak: BROKEN: {b}");
    }
    Ok(bad.is_empty())
}

/// Starts the frontend of `workers`; returns it, its stderr past the first
/// line, and the address that line announced.
fn spawn_frontend(
    bin: &Path,
    o: &Soak,
    workers: &[Worker],
    common: &[String],
) -> Result<(Child, BufReader<ChildStderr>, String), String> {
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
    .args(common);
    for w in workers {
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
    Ok((fe, err, fe_addr))
}

/// Kills worker `i` and restarts it at the next generation, connected to
/// the frontend at `fe_addr` and to every worker of the other role.
fn restart(
    bin: &Path,
    workers: &mut [Worker],
    i: usize,
    fe_addr: &str,
    common: &[String],
) -> Result<Kill, String> {
    let w = &mut workers[i];
    let _ = w.child.kill();
    let _ = w.child.wait();
    let kill = Kill {
        id: w.id,
        generation: w.generation,
        at: Instant::now(),
    };
    let generation = w.generation + 1;
    let (id, role, addr) = (w.id, w.role, w.addr.clone());
    let mut connect = vec![fe_addr.to_string()];
    connect.extend(
        workers
            .iter()
            .filter(|p| p.id != id && p.role != role)
            .map(|p| p.addr.clone()),
    );
    workers[i] = spawn_worker(bin, id, role, &addr, generation, &connect, common)?;
    eprintln!("soak: killed worker {id} ({role}) and restarted it as generation {generation}");
    Ok(kill)
}

/// Reads the frontend's report against what the soak did: its summary line
/// and what broke.
fn judge(
    json: &str,
    o: &Soak,
    workers: usize,
    kills: &[Kill],
    over_at: Option<Instant>,
    wall: f64,
) -> Result<(String, Vec<String>), String> {
    let v: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| format!("the frontend's report is not JSON ({e}): {json}"))?;
    let field = |key: &str| v[key].as_u64().unwrap_or(0);
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
    let table = v["workers"].as_array().cloned().unwrap_or_default();
    let drained = table
        .iter()
        .filter(|w| w["drained"] == true && w["final_kv_used_blocks"] == 0)
        .count();
    if table.len() + 1 < workers || drained != table.len() {
        bad.push(format!(
            "{drained} of {} workers up at the end drained with no block in use",
            table.len()
        ));
    }
    if v["live"]["stalled"] == true {
        bad.push("the frontend stalled".into());
    }
    let mut losses: Vec<(u64, u64)> = v["live"]["losses"]
        .as_array()
        .map(|ls| {
            ls.iter()
                .map(|l| {
                    (
                        l["worker"].as_u64().unwrap_or(u64::MAX),
                        l["generation"].as_u64().unwrap_or(u64::MAX),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let seen = losses.len();
    let (matched, raced) = match_kills(kills, &mut losses, over_at, &mut bad);
    // Absent when nothing failed.
    let reasons = match &v["lifecycle"]["failure_reasons"] {
        serde_json::Value::Null => "{}".to_string(),
        r => r.to_string(),
    };
    let line = format!(
        "soak: {num} requests, {done} completed, {failed} failed (by reason {reasons}), migrated {}; \
         {} kills and restarts, {matched} counted by the frontend as losses of that incarnation, \
         {raced} at the run's end; {seen} losses seen; {drained} of {} workers up at the end drained; \
         {wall:.1} s wall",
        v["lifecycle"]["migrated_requests"].as_u64().unwrap_or(0),
        kills.len(),
        table.len(),
    );
    Ok((line, bad))
}

/// Pairs each kill with the frontend's loss of that incarnation, taking the
/// matched losses out of `losses` (what is left was never killed). Returns
/// how many matched and how many raced the run's end; a kill neither
/// matched nor racing is broken, as is a soak with no kill at all.
fn match_kills(
    kills: &[Kill],
    losses: &mut Vec<(u64, u64)>,
    over_at: Option<Instant>,
    bad: &mut Vec<String>,
) -> (usize, usize) {
    let (mut matched, mut raced) = (0usize, 0usize);
    for k in kills {
        let key = (u64::from(k.id), u64::from(k.generation));
        if let Some(i) = losses.iter().position(|l| *l == key) {
            losses.swap_remove(i);
            matched += 1;
        } else if over_at.is_some_and(|t| t.saturating_duration_since(k.at) < END_RACE) {
            raced += 1;
        } else {
            bad.push(format!(
                "worker {} generation {} was killed and the frontend did not count it",
                k.id, k.generation
            ));
        }
    }
    if kills.is_empty() {
        bad.push(
            "no kill landed while the run went on (a longer workload or --kill-every-s)".into(),
        );
    }
    for (w, g) in losses.iter() {
        bad.push(format!(
            "the frontend took worker {w} generation {g} for lost, and it was not killed"
        ));
    }
    (matched, raced)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kill(id: u32, generation: u32, at: Instant) -> Kill {
        Kill { id, generation, at }
    }

    #[test]
    fn every_kill_must_be_a_loss_and_every_loss_a_kill() {
        let t = Instant::now();
        let end = t + Duration::from_secs(10);
        let kills = [
            kill(0, 0, t),
            kill(2, 0, t),
            kill(0, 1, end - Duration::from_millis(100)),
        ];
        // All counted.
        let mut bad = Vec::new();
        let mut losses = vec![(2, 0), (0, 0), (0, 1)];
        assert_eq!(
            match_kills(&kills, &mut losses, Some(end), &mut bad),
            (3, 0)
        );
        assert!(bad.is_empty(), "{bad:?}");
        // The last kill raced the end; the second was missed; worker 3 was
        // taken for lost without a kill.
        let mut losses = vec![(0, 0), (3, 0)];
        assert_eq!(
            match_kills(&kills, &mut losses, Some(end), &mut bad),
            (1, 1)
        );
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(
            bad[0].contains("worker 2 generation 0 was killed"),
            "{bad:?}"
        );
        assert!(bad[1].contains("worker 3 generation 0 for lost"), "{bad:?}");
        // No kill at all proves nothing.
        let mut bad = Vec::new();
        match_kills(&[], &mut Vec::new(), None, &mut bad);
        assert_eq!(bad.len(), 1);
    }
}
