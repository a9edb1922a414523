//! Developer tasks: `cargo xtask bench`, `cargo xtask parity [--trace FILE]`,
//! `cargo xtask dst [--schedules N] [--seed S]`.
//!
//! `dst` builds the `dst` binary of the tests crate in release and runs
//! deterministic-simulation schedules `S..S+N` on the real cores with every
//! lifecycle check after every engine event (see `handoff_tests::dst`). It
//! prints progress every 10% and a summary (wall time, faults by kind,
//! lifecycle paths reached, violations), shrinks failing schedules to a
//! reproduction with a ready-to-paste regression test, and exits non-zero
//! on any violation.
//!
//! `parity` without `--trace` runs the canonical traces through replay,
//! virtual-clock live and wall-clock live (in process) and compares their
//! lifecycle transcripts. With `--trace FILE` it runs the release binary, for
//! each backend: `replay`, `live --clock virtual` (threads over channels) and
//! `frontend --clock virtual` against one `worker --clock virtual` process
//! per worker (TCP), and compares their transcripts (with final worker
//! states) and reports byte for byte; then `live --clock wall`, whose
//! invariants it checks (every role ended Released once, every worker
//! drained, every request terminal) and whose distance from replay it
//! prints, without failing on timing noise. It exits non-zero on any
//! difference or broken invariant.
//!
//! `bench` runs the crates' micro-benchmarks and the replay workloads
//! (cluster-scale 64P+64D, the conversation trace and its x2-output twin),
//! optionally against a baseline revision; see `bench.rs`.

mod bench;
mod overlay;
mod soak;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

fn run(cmd: &mut Command) -> bool {
    eprintln!("$ {cmd:?}");
    cmd.status().map(|s| s.success()).unwrap_or(false)
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// The integer value of top-level field `key` in the report's pretty JSON
/// (0 when absent), without a JSON dependency for two numbers.
fn json_u64(text: &str, key: &str) -> u64 {
    let pat = format!("\"{key}\":");
    text.lines()
        .find_map(|l| l.trim().strip_prefix(&pat))
        .and_then(|v| v.trim().trim_end_matches(',').parse().ok())
        .unwrap_or(0)
}

fn canonical_parity(speed: f64) -> bool {
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
struct TraceParity {
    trace: PathBuf,
    backends: Vec<&'static str>,
    prefill: u32,
    decode: u32,
    speed: f64,
    tcp: bool,
    wall: bool,
    extra: Vec<String>,
}

fn release_bin() -> Option<PathBuf> {
    if !run(cargo().args(["build", "--release", "-q", "-p", "handoff-mocker"])) {
        return None;
    }
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from);
    Some(target.join("release/handoff-mocker"))
}

/// Runs `bin args`, returning whether it succeeded (stderr is shown on
/// failure) and its stdout.
fn run_bin(bin: &Path, args: &[String]) -> (bool, String) {
    match Command::new(bin).args(args).output() {
        Ok(o) => {
            if !o.status.success() {
                eprintln!(
                    "$ {} {}\n{}",
                    bin.display(),
                    args.join(" "),
                    String::from_utf8_lossy(&o.stderr)
                );
            }
            (
                o.status.success(),
                String::from_utf8_lossy(&o.stdout).into_owned(),
            )
        }
        Err(e) => {
            eprintln!("{}: {e}", bin.display());
            (false, String::new())
        }
    }
}

/// `None` when both files hold the same bytes, else where they first differ.
fn file_divergence(a: &Path, b: &Path) -> Option<String> {
    let (x, y) = match (std::fs::read_to_string(a), std::fs::read_to_string(b)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) => return Some(format!("cannot read output: {e}")),
    };
    if x == y {
        return None;
    }
    let (lx, ly): (Vec<&str>, Vec<&str>) = (x.lines().collect(), y.lines().collect());
    for i in 0..lx.len().max(ly.len()) {
        if lx.get(i) != ly.get(i) {
            return Some(format!(
                "{} line {}: {:?} vs {:?}",
                a.file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
                i + 1,
                lx.get(i).map_or("(end)", |s| s.trim()),
                ly.get(i).map_or("(end)", |s| s.trim())
            ));
        }
    }
    Some("files differ".into())
}

/// The wall-clock run's invariants, from its transcript and report: every
/// role of every handoff ended Released (exactly once: a role's lines end at
/// its first Released), every worker drained with no block in use, every
/// request terminal.
fn wall_invariants(transcript: &str, report: &str) -> Vec<String> {
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
    let num = json_u64(report, "num_requests");
    let done = json_u64(report, "completed_requests") + json_u64(report, "failed_requests");
    if num != done {
        bad.push(format!("{num} requests arrived, {done} ended"));
    }
    bad.truncate(5);
    bad
}

/// The value of nested field `key` (first occurrence) in pretty JSON.
fn json_f64(text: &str, key: &str) -> f64 {
    let pat = format!("\"{key}\":");
    text.lines()
        .find_map(|l| l.trim().strip_prefix(&pat))
        .and_then(|v| v.trim().trim_end_matches(',').parse().ok())
        .unwrap_or(f64::NAN)
}

fn trace_parity(o: &TraceParity) -> bool {
    let Some(bin) = release_bin() else {
        return false;
    };
    let dir = std::env::temp_dir().join(format!("handoff-parity-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("{}: {e}", dir.display());
        return false;
    }
    let mut ok = true;
    println!(
        "{:<28} {:<7} {:>8} {:>8}  {:<7} {:<7} {:<7}  wall clock",
        "trace", "backend", "handoffs", "replay s", "threads", "tcp", "s"
    );
    for backend in &o.backends {
        let mut common: Vec<String> = vec![
            "--trace".into(),
            o.trace.display().to_string(),
            "--backend".into(),
            backend.to_string(),
            "--prefill".into(),
            o.prefill.to_string(),
            "--decode".into(),
            o.decode.to_string(),
            "--allow-failures".into(),
        ];
        common.extend(o.extra.iter().cloned());
        let out = |tag: &str| -> (PathBuf, PathBuf) {
            (
                dir.join(format!("{backend}-{tag}.json")),
                dir.join(format!("{backend}-{tag}.txt")),
            )
        };
        let with_out = |cmd: &[&str], tag: &str| -> Vec<String> {
            let (j, t) = out(tag);
            let mut v: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
            v.extend(common.iter().cloned());
            v.extend([
                "--output".into(),
                j.display().to_string(),
                "--transcript".into(),
                t.display().to_string(),
            ]);
            v
        };
        let started = std::time::Instant::now();
        let (r_ok, _) = run_bin(&bin, &with_out(&["replay"], "replay"));
        let replay_s = started.elapsed().as_secs_f64();
        if !r_ok {
            ok = false;
            continue;
        }
        let (rj, rt) = out("replay");
        let transcript = std::fs::read_to_string(&rt).unwrap_or_default();
        let handoffs = transcript
            .lines()
            .filter(|l| l.starts_with("handoff "))
            .count();
        let verdict = |tag: &str| -> String {
            let (j, t) = out(tag);
            match file_divergence(&rt, &t).or_else(|| file_divergence(&rj, &j)) {
                None => "equal".into(),
                Some(d) => format!("DIFFERS: {d}"),
            }
        };
        let started = std::time::Instant::now();
        let threads = if run_bin(&bin, &with_out(&["live", "--clock", "virtual"], "threads")).0 {
            verdict("threads")
        } else {
            "FAILED".into()
        };
        let threads_s = started.elapsed().as_secs_f64();
        let tcp = if o.tcp {
            let args = with_out(&["frontend", "--clock", "virtual"], "tcp");
            tcp_run(&bin, o, &common, args)
                .map(|()| verdict("tcp"))
                .unwrap_or_else(|e| format!("FAILED: {e}"))
        } else {
            "skipped".into()
        };
        let wall = if o.wall {
            let (_, t) = out("wall");
            let mut args: Vec<String> = vec!["live".into(), "--clock".into(), "wall".into()];
            args.extend(common.iter().cloned());
            args.extend([
                "--speed".into(),
                o.speed.to_string(),
                "--json".into(),
                "--transcript".into(),
                t.display().to_string(),
            ]);
            match run_bin(&bin, &args) {
                (true, json) => {
                    let inv =
                        wall_invariants(&std::fs::read_to_string(&t).unwrap_or_default(), &json);
                    let dist = format!(
                        "throughput {:+.1}% ttft p50 {:+.1}% p99 {:+.1}% itl p50 {:+.1}% p99 {:+.1}%",
                        json_f64(&json, "output_token_throughput_pct"),
                        json_f64(&json, "ttft_p50_pct"),
                        json_f64(&json, "ttft_p99_pct"),
                        json_f64(&json, "itl_p50_pct"),
                        json_f64(&json, "itl_p99_pct"),
                    );
                    if inv.is_empty() {
                        format!("invariants hold; distance from replay: {dist}")
                    } else {
                        ok = false;
                        format!("INVARIANTS BROKEN: {}; {dist}", inv.join("; "))
                    }
                }
                _ => {
                    ok = false;
                    "FAILED".into()
                }
            }
        } else {
            "skipped".into()
        };
        ok &= threads == "equal" && (tcp == "equal" || tcp == "skipped");
        let name = o
            .trace
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        println!(
            "{name:<28} {backend:<7} {handoffs:>8} {replay_s:>8.2}  {threads:<7} {tcp:<7} {threads_s:<7.1}  {wall}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    ok
}

/// Starts one virtual-clock worker process per worker of the deployment,
/// runs the frontend over TCP against them, and stops them.
fn tcp_run(
    bin: &Path,
    o: &TraceParity,
    common: &[String],
    mut frontend: Vec<String>,
) -> Result<(), String> {
    use std::io::BufRead;
    let aggregated = o.decode == 0;
    let n = o.prefill.max(1) + o.decode;
    let mut children = Vec::new();
    let result = (|| {
        for i in 0..n {
            let role = if aggregated {
                "aggregated"
            } else if i < o.prefill.max(1) {
                "prefill"
            } else {
                "decode"
            };
            let mut args: Vec<String> = vec![
                "worker".into(),
                "--clock".into(),
                "virtual".into(),
                "--id".into(),
                i.to_string(),
                "--role".into(),
                role.into(),
                "--listen".into(),
                "127.0.0.1:0".into(),
            ];
            // Deployment flags only: the worker has no workload.
            let mut it = common.iter();
            while let Some(a) = it.next() {
                match a.as_str() {
                    "--trace" | "--prefill" | "--decode" => {
                        it.next();
                    }
                    "--allow-failures" => {}
                    _ => args.push(a.clone()),
                }
            }
            let mut child = Command::new(bin)
                .args(&args)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| e.to_string())?;
            let mut line = String::new();
            if let Some(out) = child.stdout.take() {
                let mut r = std::io::BufReader::new(out);
                r.read_line(&mut line).map_err(|e| e.to_string())?;
                // Keep draining so the worker never blocks on a full pipe.
                std::thread::spawn(move || for _ in r.lines() {});
            }
            children.push(child);
            let addr = line
                .trim()
                .strip_prefix("listening on ")
                .ok_or_else(|| format!("worker {i} did not start: {line:?}"))?
                .to_string();
            frontend.push("--worker".into());
            frontend.push(format!("{i}={role}@{addr}"));
        }
        let (ok, _) = run_bin(bin, &frontend);
        if ok {
            Ok(())
        } else {
            Err("frontend failed".into())
        }
    })();
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
    result
}

fn parity(args: &[String]) -> bool {
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
                Some(s) if s > 0.0 => speed = s,
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

fn soak_cmd(args: &[String]) -> bool {
    let mut o = soak::Soak::default();
    let mut bin: Option<PathBuf> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next();
        let num = v.and_then(|s| s.parse::<f64>().ok()).filter(|x| *x > 0.0);
        match (a.as_str(), num) {
            // A binary already built (say a debug one), instead of building
            // the release one.
            ("--bin", _) if v.is_some() => bin = v.map(PathBuf::from),
            ("--requests", Some(n)) => o.requests = n as u64,
            ("--rate", Some(x)) => o.rate = x,
            ("--speed", Some(x)) => o.speed = x,
            ("--kill-every-s", Some(x)) => o.kill_every = x,
            ("--backend", _) if v.is_some_and(|b| b == "vllm" || b == "sglang") => {
                o.backend = v.cloned().unwrap_or_default()
            }
            _ => {
                eprintln!("soak: bad option {a} {}", v.map_or("", String::as_str));
                return false;
            }
        }
    }
    match bin.or_else(release_bin) {
        Some(bin) => soak::run(&bin, &o),
        None => false,
    }
}

/// `cargo xtask dst [--schedules N] [--seed S] [--no-shrink]`: the release
/// `dst` binary with the same arguments.
fn dst(args: &[String]) -> bool {
    run(cargo()
        .args([
            "run",
            "--release",
            "--quiet",
            "-p",
            "handoff-tests",
            "--bin",
            "dst",
            "--",
        ])
        .args(args))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ok = match args.first().map(String::as_str) {
        Some("bench") => bench::bench(&args[1..]),
        Some("parity") => parity(&args[1..]),
        Some("soak") => soak_cmd(&args[1..]),
        Some("dst") => dst(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask bench [--runs N] [--trace FILE] [--baseline REV | --baseline-bin FILE] [--workloads cluster,conversation,x2,poly,overlay,workers] [--cluster-requests N] [--no-micro]\n       cargo xtask soak [--requests N] [--rate R] [--speed X] [--kill-every-s S] [--backend vllm|sglang] [--bin FILE]\n       cargo xtask dst [--schedules N] [--seed S] [--no-shrink]\n       cargo xtask parity [--trace FILE [--backend vllm|sglang|both] [--prefill N] [--decode N] [--speed X] [--no-tcp] [--no-wall] [-- DEPLOY FLAGS]]"
            );
            false
        }
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
