//! `handoff-fuzz`: a mutation fuzzer for handoff-mocker's decoders that
//! runs on the stable toolchain with no dependency beyond the workspace.
//!
//! ```text
//! handoff-fuzz <trace|frame|body|all> [--iterations N] [--seed S] [--max-len B]
//!              [--crash-dir DIR] [--keep-going] [--progress N]
//! handoff-fuzz <trace|frame|body> --replay FILE
//! ```
//!
//! Targets: `trace` attacks the Mooncake JSONL reader
//! ([`handoff_workload::TraceReader`]), `frame` the transport frame decoder
//! ([`handoff_transport::FrameReader`]) as the TCP transport drives it (the channel
//! transport moves typed values and has no decoder; decoded frames are sent
//! through it too), `body` the OpenAI request body parser
//! ([`handoff_openai::parse`]) that `serve`'s generation endpoints
//! run (HTTP framing itself is hyper's; `serve`'s handling of slow,
//! oversized and malformed requests is tested over TCP in
//! `crates/serve/tests/http_abuse.rs`).
//!
//! Every input runs under `catch_unwind` with a counting global allocator;
//! see [`engine`] for the loop and feedback, [`trace`], [`frame`] and [`body`] for
//! what is checked and the allocation bounds. Failing inputs are hex-dumped,
//! minimised and saved under `--crash-dir` (default `target/fuzz-crashes`),
//! and the exit status is 1.
//!
//! Coverage guidance: built plainly, the corpus grows by new outcome
//! features only; built with `fuzz/coverage.sh` (SanitizerCoverage on
//! stable), by new edge coverage as well. The report says which.

/// Fails the current input when `$cond` is false: panics with a message
/// starting `check failed:`, so a report tells a broken promise (an
/// unlocated error, a bound exceeded) from a panic inside a decoder.
macro_rules! check {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            panic!("check failed: {}", format_args!($($arg)+));
        }
    };
}

mod alloc;
mod body;
mod coverage;
mod engine;
mod frame;
mod frames;
mod mutate;
mod rng;
mod trace;

use engine::{Config, Report, Target};
use std::path::PathBuf;
use std::process::ExitCode;

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

const USAGE: &str =
    "usage: handoff-fuzz <trace|frame|body|all> [--iterations N] [--seed S] [--max-len BYTES] \
[--crash-dir DIR] [--keep-going] [--progress N]\n       handoff-fuzz <trace|frame|body> --replay FILE";

#[derive(Debug)]
struct Args {
    targets: Vec<String>,
    cfg: Config,
    replay: Option<PathBuf>,
}

fn parse(mut argv: impl Iterator<Item = String>) -> Result<Args, String> {
    let which = argv.next().ok_or("no target given")?;
    let targets = match which.as_str() {
        "all" => vec!["trace".to_string(), "frame".to_string(), "body".to_string()],
        "trace" | "frame" | "body" => vec![which],
        other => return Err(format!("unknown target {other:?}")),
    };
    let mut cfg = Config {
        iterations: 100_000,
        seed: 1,
        max_len: 4096,
        crash_dir: PathBuf::from("target/fuzz-crashes"),
        keep_going: false,
        corpus_cap: 8192,
        progress: 0,
    };
    let mut replay = None;
    while let Some(flag) = argv.next() {
        let mut value = || argv.next().ok_or(format!("{flag} needs a value"));
        let number = |v: String| {
            v.replace('_', "")
                .parse::<u64>()
                .map_err(|e| format!("{v}: {e}"))
        };
        match flag.as_str() {
            "--iterations" | "-n" => cfg.iterations = number(value()?)?,
            "--seed" => cfg.seed = number(value()?)?,
            "--max-len" => cfg.max_len = number(value()?)? as usize,
            "--progress" => cfg.progress = number(value()?)?,
            "--crash-dir" => cfg.crash_dir = PathBuf::from(value()?),
            "--replay" => replay = Some(PathBuf::from(value()?)),
            "--keep-going" => cfg.keep_going = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    if replay.is_some() && targets.len() != 1 {
        return Err("--replay needs one target".into());
    }
    Ok(Args {
        targets,
        cfg,
        replay,
    })
}

fn target(name: &str) -> Box<dyn Target> {
    match name {
        "trace" => Box::new(trace::TraceTarget::default()),
        "body" => Box::new(body::BodyTarget::default()),
        _ => Box::new(frame::FrameTarget::default()),
    }
}

fn print(report: &Report, summary: &str) {
    let secs = report.elapsed.as_secs_f64();
    println!(
        "{}: {} inputs ({} generated, the rest seeds or mutants) in {:.2} s = {:.0} inputs/s",
        report.name,
        report.iterations,
        report.generated,
        secs,
        report.iterations as f64 / secs.max(1e-9)
    );
    println!(
        "  feedback: {}; corpus {} inputs, {} distinct outcome features",
        match report.coverage {
            Some((hit, total)) =>
                format!("edge coverage (sancov) + outcome features, {hit} of {total} edges hit"),
            None => "outcome features (uninstrumented build)".to_string(),
        },
        report.corpus,
        report.features
    );
    print!("{summary}");
    println!("  failures: {}", report.failures);
    for p in &report.saved {
        println!("    {}", p.display());
    }
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("handoff-fuzz: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    engine::install_panic_hook();
    if let Some(path) = args.replay {
        let input = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("handoff-fuzz: {}: {e}", path.display());
                return ExitCode::from(2);
            }
        };
        let mut t = target(&args.targets[0]);
        return match engine::run_one(t.as_mut(), &input) {
            Ok(features) => {
                println!(
                    "{}: {} bytes pass every check ({} outcome features)",
                    path.display(),
                    input.len(),
                    features.len()
                );
                print!("{}", t.summary());
                ExitCode::SUCCESS
            }
            Err(msg) => {
                eprintln!(
                    "{}: FAILS\n{msg}\n{}",
                    path.display(),
                    mutate::hex_dump(&input, 4096)
                );
                ExitCode::FAILURE
            }
        };
    }
    let mut failed = false;
    for name in &args.targets {
        let mut t = target(name);
        let report = engine::fuzz(t.as_mut(), &args.cfg);
        print(&report, &t.summary());
        failed |= report.failures > 0;
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Result<Args, String> {
        parse(s.split_whitespace().map(String::from))
    }

    #[test]
    fn parses_the_ci_command() {
        let a = args("all --iterations 20_000 --seed 1").unwrap();
        assert_eq!(a.targets, ["trace", "frame", "body"]);
        assert_eq!((a.cfg.iterations, a.cfg.seed), (20_000, 1));
        assert!(args("http").unwrap_err().contains("unknown target"));
        assert!(args("all --replay x").is_err());
        assert!(args("frame --bogus").is_err());
    }

    #[test]
    fn a_short_run_of_each_target_is_clean() {
        engine::install_panic_hook();
        let cfg = Config {
            iterations: 1500,
            seed: 9,
            max_len: 1024,
            crash_dir: std::env::temp_dir().join("handoff-fuzz-test"),
            keep_going: false,
            corpus_cap: 512,
            progress: 0,
        };
        for name in ["trace", "frame", "body"] {
            let mut t = target(name);
            let r = engine::fuzz(t.as_mut(), &cfg);
            assert_eq!(r.failures, 0, "{}", t.summary());
            assert_eq!(r.iterations, 1500);
            assert!(r.corpus > 10);
        }
    }

    #[test]
    fn a_failing_check_is_caught_and_minimised() {
        struct Picky;
        impl Target for Picky {
            fn name(&self) -> &'static str {
                "picky"
            }
            fn seeds(&mut self) -> Vec<Vec<u8>> {
                vec![]
            }
            fn generate(&mut self, _: &mut rng::Rng) -> Vec<u8> {
                vec![]
            }
            fn mutate(&mut self, _: &mut rng::Rng, _: &mut Vec<u8>, _: &[Vec<u8>], _: usize) {}
            fn run(&mut self, input: &[u8]) -> Vec<u64> {
                check!(!input.contains(&b'!'), "no bangs");
                Vec::new()
            }
            fn summary(&self) -> String {
                String::new()
            }
        }
        engine::install_panic_hook();
        let msg = engine::run_one(&mut Picky, b"abc!def").unwrap_err();
        assert!(msg.contains("check failed: no bangs"), "{msg}");
        assert_eq!(engine::minimize(&mut Picky, b"abc!def", &msg, 1000), b"!");
        assert!(engine::run_one(&mut Picky, b"fine").is_ok());
    }
}
