//! Developer tasks: `cargo xtask bench`, `cargo xtask parity [--trace FILE]`.
//!
//! `parity` runs the canonical traces (or the given Mooncake trace, for both
//! backends) through replay and through the live in-process driver, prints a
//! table (trace, backend, handoffs, transitions, verdict) and exits non-zero
//! on any difference, naming the first handoff that diverges.
//!
//! `bench` runs the release-mode micro-benchmarks of the crates and replays
//! `../shared/traces/conversation_trace.jsonl` (when present) disaggregated,
//! 4 prefill + 4 decode, for each backend, printing wall time and simulated
//! requests per second. Timings are medians of several runs: the machine is
//! shared and noisy.

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

fn bench() -> bool {
    let mut ok = true;
    for (pkg, bench) in [
        ("handoff-core", "transitions"),
        ("sched-vllm", "decode_step"),
        ("sched-sglang", "decode_step"),
    ] {
        ok &= run(cargo().args(["bench", "-q", "-p", pkg, "--bench", bench]));
    }
    ok &= run(cargo().args(["build", "--release", "-q", "-p", "handoff-mocker"]));
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from);
    let bin = target.join("release/handoff-mocker");
    let trace = root().join("../shared/traces/conversation_trace.jsonl");
    if !trace.exists() {
        eprintln!(
            "{} not present: skipping the trace replay benchmark",
            trace.display()
        );
        return ok;
    }
    for backend in ["vllm", "sglang"] {
        let mut walls = Vec::new();
        let mut summary = String::new();
        let mut completed = 0u64;
        let mut tokens = 0u64;
        // Five runs, median and fastest: the machines this runs on are
        // shared and noisy, and the replay itself is deterministic.
        for _ in 0..5 {
            let start = std::time::Instant::now();
            let out = Command::new(&bin)
                .args(["replay", "--trace"])
                .arg(&trace)
                .args([
                    "--backend",
                    backend,
                    "--prefill",
                    "4",
                    "--decode",
                    "4",
                    "--json",
                ])
                .output();
            let wall = start.elapsed().as_secs_f64();
            match out {
                Ok(o) if o.status.success() => {
                    walls.push(wall);
                    let text = String::from_utf8_lossy(&o.stdout);
                    completed = json_u64(&text, "completed_requests");
                    tokens = json_u64(&text, "total_output_tokens");
                    summary = text
                        .lines()
                        .filter(|l| {
                            l.contains("\"completed_requests\"")
                                || l.contains("\"total_output_tokens\"")
                                || l.contains("\"duration_s\"")
                        })
                        .map(str::trim)
                        .collect::<Vec<_>>()
                        .join(" ");
                }
                Ok(o) => {
                    eprintln!("{}", String::from_utf8_lossy(&o.stderr));
                    return false;
                }
                Err(e) => {
                    eprintln!("{e}");
                    return false;
                }
            }
        }
        walls.sort_by(|a, b| a.total_cmp(b));
        let median = walls[walls.len() / 2];
        println!(
            "replay conversation_trace {backend} 4P+4D: wall {median:.3} s (median of {}, fastest {:.3} s), {:.0} simulated requests/s and {:.3} us per output token of wall time; {summary}",
            walls.len(),
            walls[0],
            completed as f64 / median,
            median * 1e6 / (tokens.max(1) as f64)
        );
    }
    ok
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

fn parity(args: &[String]) -> bool {
    use handoff_tests::parity::{cases, check, Case};
    let mut list: Vec<Case> = cases();
    let mut speed = 10.0;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--trace" => {
                let Some(path) = it.next() else {
                    eprintln!("--trace needs a file");
                    return false;
                };
                let file = match std::fs::File::open(path) {
                    Ok(f) => f,
                    Err(e) => {
                        eprintln!("{path}: {e}");
                        return false;
                    }
                };
                let reader = workload::TraceReader::new(
                    std::io::BufReader::new(file),
                    workload::ReaderOptions::new(path.clone()),
                );
                let mut items = Vec::new();
                for r in reader {
                    match r {
                        Ok(i) => items.push(i),
                        Err(e) => {
                            eprintln!("{e}");
                            return false;
                        }
                    }
                }
                let template = cases();
                list = template
                    .into_iter()
                    .filter(|c| c.name.starts_with("prefix-hits"))
                    .map(|c| Case {
                        name: "trace",
                        decode_kv_tokens: 1 << 18,
                        items: items.clone(),
                        ..c
                    })
                    .collect();
            }
            "--speed" => match it.next().and_then(|s| s.parse::<f64>().ok()) {
                Some(s) if s > 0.0 => speed = s,
                _ => {
                    eprintln!("--speed needs a positive number");
                    return false;
                }
            },
            other => {
                eprintln!("unknown parity option {other}");
                return false;
            }
        }
    }
    println!(
        "{:<26} {:<8} {:>9} {:>12}  verdict",
        "trace", "backend", "handoffs", "transitions"
    );
    let mut ok = true;
    for case in &list {
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

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ok = match args.first().map(String::as_str) {
        Some("bench") => bench(),
        Some("parity") => parity(&args[1..]),
        _ => {
            eprintln!("usage: cargo xtask bench | cargo xtask parity [--trace FILE] [--speed X]");
            false
        }
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
