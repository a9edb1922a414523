//! `cargo xtask bench`: the crates' release-mode micro-benchmarks, then the
//! replay workloads that say whether replay cost follows events:
//!
//! - `cluster`: `replay --requests 200000 --rate 512 --prefill 64 --decode
//!   64` (the 1 M-request 64P+64D shape, a fifth of it; `--cluster-requests
//!   N` for more);
//! - `conversation`: the conversation trace, 4 prefill + 4 decode;
//! - `x2`: the conversation trace and the same trace with every
//!   `output_length` and `timestamp` doubled (written to a temporary file),
//!   so twice the tokens at the same load; prints the ratio of the two;
//! - `poly`: the conversation trace at 4P+4D with `--perf
//!   dynamo-polynomial`; prints the default (measured profile) run's cost
//!   over it;
//! - `overlay`: four copies of the conversation trace at the same
//!   timestamps, sharing no hash id (`overlay.rs`), at 16P+16D: the same
//!   load per engine on four times the cluster; prints its cost over the
//!   conversation run's;
//! - `workers`: ten requests on 4096 prefill and 4096 decode workers (what
//!   idle workers cost: time and peak memory);
//!
//! each on vLLM and SGLang. The three ratios are taken round by round (a
//! round runs every workload once) and their median and range printed, so
//! that the machine's drift between rounds does not enter them. Every
//! figure is the median of `--runs`
//! interleaved runs (all workloads once, then again, ...), as CPU time
//! (user + system, what the machine's other users disturb least), wall time
//! and peak RSS (when `/usr/bin/time` is there). With `--baseline REV` the
//! binary of REV is built in a temporary worktree and run interleaved with
//! this one, and each figure gets its ratio to REV's (`--baseline-bin FILE`:
//! a baseline binary already built).
//!
//! `--paired` runs the two binaries of each run at the same time instead,
//! one per core, and also reports the median and range of the per-pair CPU
//! ratios. This machine's speed drifts by up to 1.8x over minutes (other
//! tenants share its last-level cache), so runs taken one after another
//! compare different machines; a pair shares whatever state the machine is
//! in. On the memory-bound 64P+64D replay (100,000 requests) a binary
//! paired with itself gave ratios of 0.91 to 1.03; a change that
//! interleaved medians of 3 had called 0.77x read 0.86x to 0.99x paired
//! (median 0.90x), and one that cut simulated cache misses by a quarter
//! read 1.05x to 1.12x, slower in all five pairs. Both runs contend for the
//! shared cache, so paired times are each slower than a lone run's: quote
//! their ratios, not their times.
//!
//! `--dynamo TRACE` runs none of that: it times Dynamo's mocker 1.6.1
//! against this one on TRACE with matched settings, `--runs` alternating
//! runs each, disaggregated 4P+4D and aggregated 8 (`checks/dynamo-mocker/
//! run.sh`, which builds both; Dynamo's tree takes minutes the first time),
//! then the overlay rows: TRACE overlaid 4 and 8 times at 16P+16D and
//! 32P+32D beside TRACE at 4P+4D, on both mockers (`bench/dynamo.rs`).
//!
//! The trace is the repository's `tests/data/conversation_trace.jsonl`
//! (Mooncake's conversation trace, see `tests/data/NOTICE.md`), or
//! `--trace FILE`. A trace that is not there is an error, and so is a run
//! left with no workload to time: a bench never ends with a header and no
//! rows.

mod dynamo;

use crate::{cargo, root, run};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The trace of the `conversation` and `x2` workloads, from the root.
const DEFAULT_TRACE: &str = "tests/data/conversation_trace.jsonl";

/// Every workload, the default set.
const WORKLOADS: [&str; 6] = [
    "cluster",
    "conversation",
    "x2",
    "poly",
    "overlay",
    "workers",
];

/// Ratios printed after the table: (what, numerator job, denominator job),
/// the jobs named for `{b}`, the backend.
const RATIOS: [(&str, &str, &str); 3] = [
    (
        "x2 output at constant load",
        "conversation x2 output 4P+4D {b}",
        "conversation 4P+4D {b}",
    ),
    (
        "measured profile over polynomial",
        "conversation 4P+4D {b}",
        "conversation polynomial 4P+4D {b}",
    ),
    (
        "4x overlaid at 16P+16D over 4P+4D",
        "conversation x4 overlaid 16P+16D {b}",
        "conversation 4P+4D {b}",
    ),
];

struct Opts {
    runs: usize,
    trace: Option<PathBuf>,
    baseline: Option<String>,
    baseline_bin: Option<PathBuf>,
    workloads: Vec<String>,
    cluster_requests: u64,
    micro: bool,
    paired: bool,
    dynamo: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        runs: 3,
        trace: None,
        baseline: None,
        baseline_bin: None,
        workloads: WORKLOADS.iter().map(|w| w.to_string()).collect(),
        cluster_requests: 200_000,
        micro: true,
        paired: false,
        dynamo: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name}: missing value"))
        };
        match a.as_str() {
            "--runs" => {
                o.runs = val("--runs")?
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or("--runs: a positive count")?
            }
            "--trace" => o.trace = Some(PathBuf::from(val("--trace")?)),
            "--baseline" => o.baseline = Some(val("--baseline")?),
            "--baseline-bin" => o.baseline_bin = Some(PathBuf::from(val("--baseline-bin")?)),
            "--workloads" => {
                o.workloads = val("--workloads")?.split(',').map(str::to_string).collect();
                for w in &o.workloads {
                    if !WORKLOADS.contains(&w.as_str()) {
                        return Err(format!(
                            "--workloads: unknown {w} ({})",
                            WORKLOADS.join(", ")
                        ));
                    }
                }
            }
            "--cluster-requests" => {
                o.cluster_requests = val("--cluster-requests")?
                    .parse()
                    .map_err(|_| "--cluster-requests: a count")?
            }
            "--no-micro" => o.micro = false,
            "--paired" => o.paired = true,
            "--dynamo" => o.dynamo = Some(PathBuf::from(val("--dynamo")?)),
            other => return Err(format!("bench: unknown option {other}")),
        }
    }
    if o.paired && o.baseline.is_none() && o.baseline_bin.is_none() {
        return Err("--paired: needs --baseline REV or --baseline-bin FILE".into());
    }
    Ok(o)
}

/// `--dynamo TRACE`: `checks/dynamo-mocker/run.sh TRACE RUNS`, this
/// workspace's release build against Dynamo's mocker.
fn against_dynamo(trace: &Path, runs: usize) -> bool {
    if !trace.is_file() {
        eprintln!("--dynamo: no such trace {}", trace.display());
        return false;
    }
    let script = root().join("checks/dynamo-mocker/run.sh");
    let matched = run(Command::new("bash")
        .arg(script)
        .arg(trace)
        .arg(runs.to_string())
        .current_dir(root()));
    // The overlay rows run even when the script could not build or run
    // Dynamo's mocker: this mocker's side is then printed alone.
    dynamo::overlay_rows(trace, runs) && matched
}

/// One measured run.
#[derive(Clone, Copy, Debug)]
struct Sample {
    cpu_s: f64,
    wall_s: f64,
    rss_mib: Option<f64>,
}

/// A replay to time: a name and its flags.
struct Job {
    name: String,
    args: Vec<String>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

/// A replay started by [`start`], to be timed by [`Running::finish`].
struct Running {
    child: std::process::Child,
    started: std::time::Instant,
    /// `/usr/bin/time`'s figures, when it is there.
    stats: PathBuf,
    stderr: PathBuf,
    what: String,
}

/// Starts `bin replay ARGS --json`; `slot` keeps the files of runs that
/// overlap apart. The report goes nowhere and stderr to a file, so neither
/// run of a pair waits on a pipe the other's collection has not drained.
fn start(bin: &Path, args: &[String], slot: usize) -> Result<Running, String> {
    let mut full = vec!["replay".to_string()];
    full.extend(args.iter().cloned());
    full.push("--json".into());
    start_program(bin, &full, slot)
}

/// Starts `program ARGS` as [`start`] does (timed, stdout discarded).
fn start_program(program: &Path, args: &[String], slot: usize) -> Result<Running, String> {
    let bin = program;
    let gnu_time = Path::new("/usr/bin/time");
    let file = |ext: &str| {
        std::env::temp_dir().join(format!("xtask-bench-{}-{slot}.{ext}", std::process::id()))
    };
    let (stats, stderr) = (file("time"), file("err"));
    let _ = std::fs::remove_file(&stats);
    let mut cmd = if gnu_time.exists() {
        let mut c = Command::new(gnu_time);
        c.arg("-o").arg(&stats).args(["-f", "%U %S %M"]).arg(bin);
        c
    } else {
        Command::new(bin)
    };
    let what = format!("{} {}", bin.display(), args.join(" "));
    let err = std::fs::File::create(&stderr).map_err(|e| format!("{}: {e}", stderr.display()))?;
    cmd.args(args)
        .stdout(std::process::Stdio::null())
        .stderr(err);
    let started = std::time::Instant::now();
    let child = cmd.spawn().map_err(|e| format!("{what}: {e}"))?;
    Ok(Running {
        child,
        started,
        stats,
        stderr,
        what,
    })
}

/// Runs `bin replay ARGS --json` once; CPU, wall, peak RSS.
fn time_once(bin: &Path, args: &[String]) -> Result<Sample, String> {
    start(bin, args, 0)?.finish()
}

impl Running {
    /// Waits for the run; its CPU, wall time and peak RSS.
    fn finish(mut self) -> Result<Sample, String> {
        let status = self
            .child
            .wait()
            .map_err(|e| format!("{}: {e}", self.what))?;
        let wall_s = self.started.elapsed().as_secs_f64();
        let err = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let _ = std::fs::remove_file(&self.stderr);
        if !status.success() {
            // `/usr/bin/time` writes a failed command's status to its file.
            let time = std::fs::read_to_string(&self.stats).unwrap_or_default();
            let _ = std::fs::remove_file(&self.stats);
            return Err(format!(
                "{}: {status}: {}{err}",
                self.what,
                time.trim_start()
            ));
        }
        Ok(read_stats(&self.stats, wall_s))
    }
}

/// `/usr/bin/time`'s user, system and peak RSS from `stats`, or the wall
/// time as CPU time when there are none.
fn read_stats(stats: &Path, wall_s: f64) -> Sample {
    let (mut cpu_s, mut rss_mib) = (wall_s, None);
    if let Ok(text) = std::fs::read_to_string(stats) {
        let f: Vec<f64> = text
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if let [u, s, kib] = f[..] {
            cpu_s = u + s;
            rss_mib = Some(kib / 1024.0);
        }
        let _ = std::fs::remove_file(stats);
    }
    Sample {
        cpu_s,
        wall_s,
        rss_mib,
    }
}

/// The median, least and greatest of `this[i] / base[i]` (CPU), pair by
/// pair.
fn pair_ratios(this: &[Sample], base: &[Sample]) -> (f64, f64, f64) {
    let r: Vec<f64> = this
        .iter()
        .zip(base)
        .map(|(t, b)| t.cpu_s / b.cpu_s)
        .collect();
    let lo = r.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = r.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (median(r), lo, hi)
}

/// The conversation trace with every `output_length` and `timestamp`
/// doubled: twice the output tokens at the same offered load.
fn doubled_trace(trace: &Path) -> Result<PathBuf, String> {
    let text = std::fs::read_to_string(trace).map_err(|e| format!("{}: {e}", trace.display()))?;
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| format!("{}:{}: {e}", trace.display(), n + 1))?;
        for key in ["output_length", "timestamp"] {
            let x = v
                .get(key)
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(|| format!("{}:{}: {key}: not an integer", trace.display(), n + 1))?;
            v[key] = serde_json::json!(x * 2);
        }
        out.push_str(&v.to_string());
        out.push('\n');
    }
    let p = std::env::temp_dir().join(format!("xtask-bench-x2-{}.jsonl", std::process::id()));
    std::fs::write(&p, out).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(p)
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// Builds REV's release binary in a temporary worktree and copies it out;
/// the worktree is removed. It builds into `TARGET/bench-baseline`, kept
/// between runs, so this checkout's `release/handoff-mocker` is never
/// overwritten and a second run of the same REV only relinks.
fn build_baseline(rev: &str) -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("xtask-bench-baseline-{}", std::process::id()));
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(root())
            .args(args)
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    let d = dir.to_string_lossy().to_string();
    if !git(&["worktree", "add", "--detach", &d, rev]) {
        return Err(format!("--baseline {rev}: git worktree add failed"));
    }
    let target = target_dir().join("bench-baseline");
    let built = run(cargo()
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", &target)
        .args(["build", "--release", "-q", "-p", "handoff-mocker"]));
    let bin = std::env::temp_dir().join(format!("handoff-mocker-baseline-{}", std::process::id()));
    let copied = built && std::fs::copy(target.join("release/handoff-mocker"), &bin).is_ok();
    git(&["worktree", "remove", "--force", &d]);
    if !copied {
        return Err(format!("--baseline {rev}: build failed"));
    }
    Ok(bin)
}

/// The trace the trace workloads replay: `--trace FILE` or the
/// repository's, which must be there; `None` when no workload needs one.
fn workload_trace(o: &Opts) -> Result<Option<PathBuf>, String> {
    if !o.workloads.iter().any(|w| w == "conversation" || w == "x2") {
        return Ok(None);
    }
    let trace = o
        .trace
        .clone()
        .unwrap_or_else(|| root().join(DEFAULT_TRACE));
    if trace.is_file() {
        Ok(Some(trace))
    } else {
        Err(format!(
            "{}: no such trace (give --trace FILE)",
            trace.display()
        ))
    }
}

pub fn bench(args: &[String]) -> bool {
    if let Ok(Opts {
        dynamo: Some(trace),
        runs,
        ..
    }) = parse(args)
    {
        return against_dynamo(&trace, runs);
    }
    let (o, trace) = match parse(args).and_then(|o| workload_trace(&o).map(|t| (o, t))) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("{e}");
            return false;
        }
    };
    let mut ok = true;
    if o.micro {
        for (pkg, bench) in [
            ("handoff-core", "transitions"),
            ("handoff-sched-vllm", "decode_step"),
            ("handoff-sched-sglang", "decode_step"),
            ("handoff-sched-sglang", "prefill_churn"),
            ("handoff-router", "select"),
        ] {
            ok &= run(cargo().args(["bench", "-q", "-p", pkg, "--bench", bench]));
        }
    }
    let built = o.baseline.as_deref().map(build_baseline).transpose();
    let baseline = match built.map(|b| b.or(o.baseline_bin.clone())) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{e}");
            return false;
        }
    };
    if !run(cargo().args(["build", "--release", "-q", "-p", "handoff-mocker"])) {
        return false;
    }
    let bin = target_dir().join("release/handoff-mocker");
    let mut temps = Vec::new();
    let jobs = replay_jobs(&o, trace.as_deref(), &mut temps);
    let measured = jobs.and_then(|jobs| {
        if jobs.is_empty() {
            return Err("bench: no replay workload to run".to_string());
        }
        let bins: Vec<(&str, PathBuf)> = match &baseline {
            Some(b) => vec![("this", bin.clone()), ("baseline", b.clone())],
            None => vec![("this", bin.clone())],
        };
        let paired = o.paired && bins.len() == 2;
        let samples = measure(&jobs, &bins, o.runs, paired)?;
        report(&jobs, &bins, &samples, o.runs, paired);
        Ok(())
    });
    for p in temps {
        let _ = std::fs::remove_file(p);
    }
    if let (Some(b), Some(_)) = (baseline, &o.baseline) {
        // Only a binary this run built; never a --baseline-bin.
        let _ = std::fs::remove_file(b);
    }
    match measured {
        Ok(()) => ok,
        Err(e) => {
            eprintln!("{e}");
            false
        }
    }
}

/// The replays `o` asks for, on both backends; the traces they write
/// (the doubled and the overlaid copies) are added to `temps`.
fn replay_jobs(
    o: &Opts,
    trace: Option<&Path>,
    temps: &mut Vec<PathBuf>,
) -> Result<Vec<Job>, String> {
    let wants = |w: &str| o.workloads.iter().any(|x| x == w);
    let mut jobs = Vec::new();
    let mut written = |wanted: &str, write: &dyn Fn(&Path) -> Result<PathBuf, String>| match trace
        .filter(|_| wants(wanted))
    {
        Some(t) => {
            let p = write(t)?;
            temps.push(p.clone());
            Ok::<_, String>(Some(p.to_string_lossy().to_string()))
        }
        None => Ok(None),
    };
    let x2 = written("x2", &doubled_trace)?;
    let overlay = written("overlay", &|t| crate::overlay::overlaid_trace(t, 4))?;
    for backend in ["vllm", "sglang"] {
        let mut job = |name: String, v: &[&str]| {
            let mut args: Vec<String> = vec!["--backend".into(), backend.into()];
            args.extend(v.iter().map(|s| s.to_string()));
            jobs.push(Job {
                name: format!("{name} {backend}"),
                args,
            });
        };
        if wants("cluster") {
            let n = o.cluster_requests.to_string();
            job(
                format!("cluster {n} requests 64P+64D"),
                &[
                    "--requests",
                    &n,
                    "--rate",
                    "512",
                    "--prefill",
                    "64",
                    "--decode",
                    "64",
                ],
            );
        }
        if wants("workers") {
            job(
                "workers 4096P+4096D 10 requests".into(),
                &["--requests", "10", "--prefill", "4096", "--decode", "4096"],
            );
        }
        let Some(t) = trace.map(|t| t.to_string_lossy().to_string()) else {
            continue;
        };
        let pd = |n: &'static str| ["--prefill", n, "--decode", n];
        if wants("poly") {
            let mut a = vec!["--trace", &t];
            a.extend(pd("4"));
            a.extend(["--perf", "dynamo-polynomial"]);
            job("conversation polynomial 4P+4D".into(), &a);
        }
        if let Some(p) = &overlay {
            let mut a = vec!["--trace", p];
            a.extend(pd("16"));
            job("conversation x4 overlaid 16P+16D".into(), &a);
        }
        if ["conversation", "x2", "poly", "overlay"]
            .iter()
            .any(|w| wants(w))
        {
            let mut a = vec!["--trace", &t];
            a.extend(pd("4"));
            job("conversation 4P+4D".into(), &a);
        }
        if let Some(p) = &x2 {
            let mut a = vec!["--trace", p];
            a.extend(pd("4"));
            job("conversation x2 output 4P+4D".into(), &a);
        }
    }
    Ok(jobs)
}

/// `runs` rounds of every job on every binary (at once when `paired`):
/// `samples[job][bin]`, a sample per round.
fn measure(
    jobs: &[Job],
    bins: &[(&str, PathBuf)],
    runs: usize,
    paired: bool,
) -> Result<Vec<Vec<Vec<Sample>>>, String> {
    let mut samples: Vec<Vec<Vec<Sample>>> = vec![vec![Vec::new(); bins.len()]; jobs.len()];
    for r in 0..runs {
        for (j, job) in jobs.iter().enumerate() {
            let measured: Vec<Result<Sample, String>> = if paired {
                // Both started before either is waited for.
                let running: Vec<_> = bins
                    .iter()
                    .enumerate()
                    .map(|(k, (_, b))| start(b, &job.args, k))
                    .collect();
                running.into_iter().map(|s| s?.finish()).collect()
            } else {
                bins.iter().map(|(_, b)| time_once(b, &job.args)).collect()
            };
            for (k, ((label, _), m)) in bins.iter().zip(measured).enumerate() {
                let s = m?;
                eprintln!(
                    "run {}/{runs}: {} ({label}): cpu {:.3} s, wall {:.3} s",
                    r + 1,
                    job.name,
                    s.cpu_s,
                    s.wall_s
                );
                samples[j][k].push(s);
            }
        }
    }
    Ok(samples)
}

/// Medians of a job's samples: CPU, wall, the largest peak RSS.
fn medians(s: &[Sample]) -> (f64, f64, Option<f64>) {
    (
        median(s.iter().map(|x| x.cpu_s).collect()),
        median(s.iter().map(|x| x.wall_s).collect()),
        s.iter()
            .filter_map(|x| x.rss_mib)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x)))),
    )
}

/// The table: each job's medians, against the baseline's when there is one.
fn report(
    jobs: &[Job],
    bins: &[(&str, PathBuf)],
    samples: &[Vec<Vec<Sample>>],
    runs: usize,
    paired: bool,
) {
    println!(
        "replay workloads: medians of {runs} {} runs (cpu = user + system)",
        if paired {
            "paired (this and baseline at once)"
        } else {
            "interleaved"
        }
    );
    for (j, job) in jobs.iter().enumerate() {
        let (cpu, wall, rss) = medians(&samples[j][0]);
        let rss = rss.map_or("n/a".into(), |r| format!("{r:.0} MiB"));
        let mut line = format!(
            "{:<44} cpu {cpu:>8.3} s  wall {wall:>8.3} s  peak rss {rss}",
            job.name
        );
        if bins.len() > 1 {
            let (bcpu, bwall, _) = medians(&samples[j][1]);
            line.push_str(&format!(
                "  | baseline cpu {bcpu:.3} s wall {bwall:.3} s: this/baseline cpu {:.3} wall {:.3}",
                cpu / bcpu,
                wall / bwall
            ));
            if paired {
                let (m, lo, hi) = pair_ratios(&samples[j][0], &samples[j][1]);
                line.push_str(&format!(
                    "; per pair cpu median {m:.3} (range {lo:.3}-{hi:.3})"
                ));
            }
        }
        println!("{line}");
    }
    report_ratios(jobs, bins, samples);
}

/// Each of [`RATIOS`], per backend and binary: the median of the ratios
/// taken round by round (the two runs of a round ran minutes apart at
/// most, on the same machine state), with their range.
fn report_ratios(jobs: &[Job], bins: &[(&str, PathBuf)], samples: &[Vec<Vec<Sample>>]) {
    for backend in ["vllm", "sglang"] {
        let find = |n: &str| {
            jobs.iter()
                .position(|j| j.name == n.replace("{b}", backend))
        };
        for (what, num, den) in RATIOS {
            let (Some(a), Some(b)) = (find(num), find(den)) else {
                continue;
            };
            for (k, (label, _)) in bins.iter().enumerate() {
                let (m, lo, hi) = pair_ratios(&samples[a][k], &samples[b][k]);
                let wall: Vec<f64> = samples[a][k]
                    .iter()
                    .zip(&samples[b][k])
                    .map(|(x, y)| x.wall_s / y.wall_s)
                    .collect();
                println!(
                    "{what}, {backend} ({label}): cpu {m:.3}x (rounds {lo:.3}-{hi:.3}), wall {:.3}x",
                    median(wall)
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_doubled_trace_doubles_output_and_time_only() {
        let dir = std::env::temp_dir().join(format!("xtask-x2-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let t = dir.join("t.jsonl");
        std::fs::write(
            &t,
            "{\"timestamp\": 3, \"input_length\": 100, \"output_length\": 5, \"hash_ids\": [1]}\n",
        )
        .unwrap();
        let p = doubled_trace(&t).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(std::fs::read_to_string(&p).unwrap().trim()).unwrap();
        assert_eq!(v["timestamp"], 6);
        assert_eq!(v["output_length"], 10);
        assert_eq!(v["input_length"], 100);
        std::fs::write(&t, "{\"timestamp\": -1}\n").unwrap();
        assert!(doubled_trace(&t)
            .unwrap_err()
            .contains("t.jsonl:1: output_length"));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn options_are_checked() {
        let a = |v: &[&str]| parse(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert!(a(&["--workloads", "cluster,bogus"]).is_err());
        assert!(a(&["--runs", "0"]).is_err());
        let o = a(&["--runs", "5", "--baseline", "HEAD~1", "--no-micro"]).unwrap();
        assert_eq!(
            (o.runs, o.baseline.as_deref(), o.micro, o.paired),
            (5, Some("HEAD~1"), false, false)
        );
        assert!(a(&["--paired"]).is_err_and(|e| e.contains("--baseline")));
        assert!(a(&["--paired", "--baseline-bin", "/bin/true"]).is_ok_and(|o| o.paired));
        let o = a(&["--dynamo", "t.jsonl", "--runs", "2"]).unwrap();
        assert_eq!((o.dynamo, o.runs), (Some(PathBuf::from("t.jsonl")), 2));
        assert!(a(&["--dynamo"]).is_err());
        assert!(!against_dynamo(Path::new("/nonexistent/t.jsonl"), 1));
    }

    #[test]
    fn the_trace_is_the_repositorys_and_a_missing_one_is_an_error() {
        let a = |v: &[&str]| parse(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let t = workload_trace(&a(&["--workloads", "conversation"]).unwrap()).unwrap();
        assert_eq!(t, Some(root().join(DEFAULT_TRACE)));
        assert!(t.is_some_and(|t| t.is_file()));
        let o = a(&["--workloads", "x2", "--trace", "/nonexistent/trace.jsonl"]).unwrap();
        assert!(workload_trace(&o).is_err_and(|e| e.contains("no such trace")));
        let o = a(&[
            "--workloads",
            "cluster",
            "--trace",
            "/nonexistent/trace.jsonl",
        ])
        .unwrap();
        assert_eq!(workload_trace(&o), Ok(None));
    }

    #[test]
    fn pair_ratios_are_taken_pair_by_pair() {
        let s = |cpu_s| Sample {
            cpu_s,
            wall_s: cpu_s,
            rss_mib: None,
        };
        // Medians of each side would give 2/2 = 1; the pairs say 0.5-2.
        let this = [s(1.0), s(2.0), s(6.0)];
        let base = [s(2.0), s(2.0), s(3.0)];
        assert_eq!(pair_ratios(&this, &base), (1.0, 0.5, 2.0));
        let (m, lo, hi) = pair_ratios(&[s(1.0), s(3.0)], &[s(2.0), s(2.0)]);
        assert_eq!((m, lo, hi), (1.5, 0.5, 1.5));
    }

    #[test]
    fn a_pair_runs_both_at_once_and_reports_failures() {
        // Shell scripts stand in for the mocker (they ignore `replay ARGS
        // --json`).
        let dir = std::env::temp_dir().join(format!("xtask-pair-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bin = |name: &str, body: &str| {
            let p = dir.join(name);
            std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            p
        };
        // Each side announces itself, then waits (up to 10 s) for the other:
        // run one after the other, the first gives up and the pair fails.
        let meet = |me: &str, other: &str| {
            let d = dir.display();
            format!(
                "touch {d}/{me}; n=0; while [ ! -e {d}/{other} ]; do \
                 sleep 0.01; n=$((n+1)); [ $n -gt 1000 ] && exit 9; done; exit 0"
            )
        };
        let left = bin("left", &meet("l", "r"));
        let right = bin("right", &meet("r", "l"));
        let a = start(&left, &[], 0).unwrap();
        let b = start(&right, &[], 1).unwrap();
        let (a, b) = (a.finish(), b.finish());
        assert!(a.is_ok() && b.is_ok(), "{a:?} {b:?}");
        let fails = bin("fails", "echo broken >&2; exit 3");
        let e = time_once(&fails, &["--x".into()]).unwrap_err();
        assert!(
            e.contains("broken") && e.contains("replay --x --json"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
