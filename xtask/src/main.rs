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
//! `parity` compares replay with virtual-clock live (threads over
//! channels, and TCP) byte for byte and checks the wall clock's invariants,
//! through the driver libraries; see `parity.rs`.
//!
//! `profiles build|list` exports AIConfigurator profiles on demand through
//! a pinned Python venv; see `profiles.rs`.
//!
//! `bench` runs the crates' micro-benchmarks and the replay workloads
//! (cluster-scale 64P+64D, the conversation trace and its x2-output twin),
//! optionally against a baseline revision; see `bench.rs`.

mod bench;
mod docs;
mod overlay;
mod parity;
mod profiles;
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

fn release_bin() -> Option<PathBuf> {
    if !run(cargo().args(["build", "--release", "-q", "-p", "handoff-mocker"])) {
        return None;
    }
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from);
    Some(target.join("release/handoff-mocker"))
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
        Some("parity") => parity::parity(&args[1..]),
        Some("soak") => soak_cmd(&args[1..]),
        Some("dst") => dst(&args[1..]),
        Some("docs") => docs::docs(&args[1..]),
        Some("profiles") => profiles::profiles(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask bench [--runs N] [--trace FILE] [--baseline REV | --baseline-bin FILE] [--workloads cluster,conversation,x2,poly,overlay,workers] [--cluster-requests N] [--no-micro] [--paired] [--dynamo TRACE]\n       cargo xtask soak [--requests N] [--rate R] [--speed X] [--kill-every-s S] [--backend vllm|sglang] [--bin FILE]\n       cargo xtask dst [--schedules N] [--seed S] [--no-shrink]\n       cargo xtask parity [--trace FILE [--backend vllm|sglang|both] [--prefill N] [--decode N] [--speed X] [--no-tcp] [--no-wall] [-- DEPLOY FLAGS]]\n       cargo xtask docs [--pictures] [PAGE ...]\n       cargo xtask profiles build --model M --system S --backend vllm|sglang|trtllm --tp N [--out DIR]\n       cargo xtask profiles list"
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
