//! Files a user or a report names, at their worst: every flag that reads a
//! whole file refuses `/dev/zero`, a FIFO and a directory at once with an
//! error naming the flag; a hostile report's `--rerun` writes no file and
//! reads none it names; and `plan --check-aic` reports a row it cannot
//! simulate on its line and runs the others.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_handoff-mocker");

fn tmp(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("hostile-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmp dir");
    d
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Runs the binary in `dir`; kills it and fails if it has not ended
/// within `limit` (a read that blocked or never ended).
fn run_within(dir: &Path, args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(BIN)
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let started = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn mkfifo(p: &Path) {
    let ok = Command::new("mkfifo").arg(p).status().expect("mkfifo");
    assert!(ok.success(), "mkfifo {}", p.display());
}

/// Each whole-file flag, with `{}` where the file goes.
const FILE_FLAGS: &[(&str, &[&str])] = &[
    ("--rerun", &["replay", "--rerun", "{}"]),
    ("plan --merge", &["plan", "--merge", "{}", "--out", "o"]),
    ("sweep merge", &["sweep", "merge", "{}", "--out", "o"]),
    ("--grid", &["sweep", "--grid", "{}", "--out", "o"]),
    (
        "--check-aic",
        &[
            "plan",
            "--check-aic",
            "{}",
            "--slo",
            "ttft:p90=1s",
            "--out",
            "o",
        ],
    ),
    (
        "--perf",
        &["replay", "--requests", "5", "--perf", "profile:{}"],
    ),
    (
        "--tokenizer",
        &["serve", "--http", "127.0.0.1:0", "--tokenizer", "{}"],
    ),
];

#[cfg(target_os = "linux")]
#[test]
fn every_file_flag_refuses_dev_zero_a_fifo_and_a_directory_at_once() {
    let dir = tmp("flags");
    let fifo = dir.join("pipe");
    mkfifo(&fifo);
    let subdir = dir.join("a-directory");
    std::fs::create_dir_all(&subdir).unwrap();
    let cases = [
        ("/dev/zero", "a character device"),
        (s(&fifo), "a FIFO"),
        (s(&subdir), "a directory"),
    ];
    for (flag, args) in FILE_FLAGS {
        for (path, what) in cases {
            let args: Vec<String> = args.iter().map(|a| a.replace("{}", path)).collect();
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = run_within(&dir, &args, Duration::from_secs(20));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{args:?} succeeded");
            assert!(
                err.contains(flag) && err.contains(path) && err.contains(what),
                "{args:?}: {err}"
            );
            assert!(err.contains("not a regular file"), "{args:?}: {err}");
        }
    }
    // A fault plan that names a FIFO is not read as a file (it is not
    // one), so it is parsed as a plan and refused as one.
    let faults = format!("--faults={}", s(&fifo));
    let out = run_within(
        &dir,
        &["replay", "--requests", "5", &faults],
        Duration::from_secs(20),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--faults"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_grid_file_over_its_limit_is_refused_naming_the_limit() {
    let dir = tmp("grid-size");
    let grid = dir.join("grid.toml");
    std::fs::write(&grid, "#".repeat((1 << 20) + 1)).unwrap();
    let out = run_within(
        &dir,
        &["sweep", "--grid", s(&grid), "--out", "o"],
        Duration::from_secs(20),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--grid") && err.contains("1 MiB limit of a grid file"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A real report of a small run, at `dir/r.json`, with `extra` added to
/// its `config.flags`.
fn hostile_report(dir: &Path, extra: &[&str]) -> PathBuf {
    let report = dir.join("r.json");
    let out = run_within(
        dir,
        &["replay", "--requests", "20", "--output", s(&report)],
        Duration::from_secs(120),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut v: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let flags = v["config"]["flags"].as_array_mut().expect("flags");
    flags.extend(extra.iter().map(|f| Value::from(*f)));
    std::fs::write(&report, v.to_string()).unwrap();
    report
}

#[test]
fn a_hostile_reports_output_flags_are_dropped_and_write_nothing() {
    let dir = tmp("rerun-outputs");
    let targets = ["x.json", "x.html", "x-kv.jsonl", "x-req.jsonl", "x.csv"];
    let paths: Vec<String> = targets
        .iter()
        .map(|t| s(&dir.join(t)).to_string())
        .collect();
    let report = hostile_report(
        &dir,
        &[
            "--output",
            &paths[0],
            &format!("--html={}", paths[1]),
            "--kv-events-out",
            &paths[2],
            "--per-request-jsonl",
            &paths[3],
            "--timeline-csv",
            &paths[4],
            "--json",
        ],
    );
    let out = run_within(
        &dir,
        &["replay", "--rerun", s(&report), "--json"],
        Duration::from_secs(120),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let printed: Value = serde_json::from_slice(&out.stdout).expect("the --json report");
    assert_eq!(printed["num_requests"], 20);
    for p in &paths {
        assert!(!Path::new(p).exists(), "{p} was written");
    }
    assert!(err.contains("dropped `--output"), "{err}");
    assert!(err.contains("dropped `--kv-events-out"), "{err}");
    assert!(err.contains("only deployment and workload flags"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_hostile_reports_input_paths_are_not_followed() {
    let dir = tmp("rerun-inputs");
    for extra in [
        &["--trace", "/etc/passwd"][..],
        &["--perf", "profile:/dev/zero"],
        &["--faults", "/etc/hostname"],
    ] {
        let report = hostile_report(&dir, extra);
        let out = run_within(
            &dir,
            &["replay", "--rerun", s(&report), "--output", "out.json"],
            Duration::from_secs(20),
        );
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&extra.join(" ")) && err.contains("a rerun follows no path"),
            "{err}"
        );
        assert!(err.contains(&format!("give {}", extra[0])), "{err}");
        assert!(!dir.join("out.json").exists());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

const AIC_HEAD: &str = "isl,osl,concurrency,ttft,tpot,tokens/s/gpu,tokens/s/user,num_total_gpus,tp";

#[test]
fn a_check_aic_row_that_cannot_run_is_reported_on_its_line_and_the_rest_run() {
    let dir = tmp("aic-rows");
    let csv = dir.join("picks.csv");
    std::fs::write(
        &csv,
        format!(
            "{AIC_HEAD}\n100,10,2,5,5,100,100,1,1\n100,0,2,5,5,100,100,1,1\n\
             100,10,lots,5,5,100,100,1,1\n100,10,2,5,5,100,100,1\n"
        ),
    )
    .unwrap();
    let out = run_within(
        &dir,
        &[
            "plan",
            "--check-aic",
            s(&csv),
            "--slo",
            "ttft:p90=1s",
            "--out",
            "o",
        ],
        Duration::from_secs(300),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let text = String::from_utf8_lossy(&out.stdout);
    let refused: Vec<&str> = text.lines().filter(|l| l.contains("refused")).collect();
    assert_eq!(refused.len(), 3, "{text}");
    assert!(refused[0].trim_start().starts_with('3') && refused[0].contains("osl 0"));
    assert!(refused[1].trim_start().starts_with("4 |") && refused[1].contains("`concurrency`"));
    assert!(refused[2].trim_start().starts_with("5 |") && refused[2].contains("the header has 9"));
    assert!(
        !text.contains("--isl"),
        "no flag the user did not give: {text}"
    );
    assert!(err.contains("3 of 4 rows could not be simulated"), "{err}");
    let v: Value = serde_json::from_slice(&std::fs::read(dir.join("o/aic-check.json")).unwrap())
        .expect("aic-check.json");
    assert_eq!(v["refused_rows"], 3);
    let rows = v["rows"].as_array().unwrap();
    let lines: Vec<u64> = rows.iter().map(|r| r["line"].as_u64().unwrap()).collect();
    assert_eq!(lines, [2, 3, 4, 5]);
    assert!(rows[0]["simulated"]["ttft_ms"]["mean"].as_f64().unwrap() > 0.0);
    assert!(rows[1]["refused"].as_str().unwrap().contains("osl 0"));
    let _ = std::fs::remove_dir_all(&dir);
}
