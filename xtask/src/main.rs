//! Developer tasks: `cargo xtask bench`.
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
    let bin = root().join("target/release/handoff-mocker");
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
        for _ in 0..3 {
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
            "replay conversation_trace {backend} 4P+4D: wall {median:.3} s (median of {}), {:.0} simulated requests/s of wall time; {summary}",
            walls.len(),
            12031.0 / median
        );
    }
    ok
}

fn main() -> ExitCode {
    let task = std::env::args().nth(1);
    let ok = match task.as_deref() {
        Some("bench") => bench(),
        _ => {
            eprintln!("usage: cargo xtask bench");
            false
        }
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
