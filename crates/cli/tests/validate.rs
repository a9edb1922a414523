//! `validate` and `calibrate` end to end, on the committed real run (a
//! vLLM Llama-3.1-8B run on one RTX PRO 6000, 300 requests) and on the
//! readers' samples: the error table and its JSON, the HTML page, every
//! refusal (exit non-zero, nothing on stdout, the cause named), the
//! uncalibrated baseline pinned, and a calibration that is deterministic,
//! writes a profile `validate --perf profile:` reads back to the same
//! figures, and brings TPOT within a few percent.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_handoff-mocker");

/// The committed real run, relative to the repository root.
const LLAMA: &str = "tests/data/real/llmservingsim/llama-3.1-8b-rtxpro6000-tp1.jsonl";

/// The deployment the Llama run ran on, the profile picked by model and GPU.
const LLAMA_DEPLOY: &[&str] = &[
    "--model",
    "llama-3.1-8b",
    "--gpu",
    "rtxpro6000",
    "--prefill",
    "1",
    "--decode",
    "0",
    "--max-running",
    "128",
    "--max-batched-tokens",
    "2048",
];

/// The same deployment without the profile choice (`--perf` gives it).
const LLAMA_FLAGS: &[&str] = &[
    "--prefill",
    "1",
    "--decode",
    "0",
    "--max-running",
    "128",
    "--max-batched-tokens",
    "2048",
];

const OBSERVED: &str = "crates/workload/tests/data/observed";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A fresh folder under the test target dir.
fn tmp(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("validate-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmp dir");
    d
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Runs the binary in the repository root.
fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .current_dir(root())
        .args(args)
        .env_remove("HANDOFF_PROFILES_DIR")
        .output()
        .expect("run")
}

/// `args` followed by `more`.
fn with(args: &[&str], more: &[&str]) -> Vec<String> {
    args.iter().chain(more).map(|a| a.to_string()).collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The stdout of a run that must succeed.
fn stdout_ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

/// `validate --json` with `args`.
fn validate_json(args: &[&str]) -> Value {
    let mut a = vec!["validate", "--json"];
    a.extend_from_slice(args);
    serde_json::from_str(&stdout_ok(&a)).expect("json report")
}

/// The error message of a refused run; it must print nothing on stdout.
fn refusal(args: &[&str]) -> String {
    let out = run(args);
    assert!(!out.status.success(), "{args:?} ran");
    assert!(
        out.stdout.is_empty(),
        "{args:?} printed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The refusal of `validate --real FILE` on one aggregated worker.
fn refuse_small(file: &str) -> String {
    refusal(&[
        "validate",
        "--real",
        file,
        "--prefill",
        "1",
        "--decode",
        "0",
    ])
}

/// The report's error entry for `latency`.
fn error<'a>(report: &'a Value, latency: &str) -> &'a Value {
    report["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .find(|e| e["latency"] == latency)
        .unwrap_or_else(|| panic!("no {latency} in {report}"))
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The table's row for `label` (`TPOT`, `TTFT, not queued`, ...) in
/// `text`, from the first line that is that row.
fn row<'a>(text: &'a str, label: &str) -> &'a str {
    text.lines()
        .find(|l| {
            l.strip_prefix(label)
                .is_some_and(|rest| rest.starts_with("  "))
        })
        .unwrap_or_else(|| panic!("no {label} row in:\n{text}"))
}

#[test]
fn validate_prints_a_row_per_latency() {
    let text = stdout_ok(&strs(&with(&["validate", "--real", LLAMA], LLAMA_DEPLOY)));
    assert!(text.starts_with("validate: "), "{text}");
    assert!(
        text.contains("300 requests")
            && text.contains("timed by profile:llama-3.1-8b-rtxpro6000-tp1-vllm"),
        "{text}"
    );
    for label in ["TTFT", "TPOT", "E2E", "TTFT, not queued"] {
        let r = row(&text, label);
        assert!(r.contains('%') && r.contains("->"), "{label}: {r}");
    }
    // `TTFT` and `TTFT, not queued` are two rows, not one found twice.
    assert_ne!(row(&text, "TTFT"), row(&text, "TTFT, not queued"));
}

/// The uncalibrated profile runs fast on this run: the measured baseline
/// the calibration starts from.
#[test]
fn validate_json_pins_the_uncalibrated_baseline() {
    let r = validate_json(&strs(&with(&["--real", LLAMA], LLAMA_DEPLOY)));
    assert_eq!(r["requests"], 300, "{r}");
    assert_eq!(r["real_failed_left_out"], 0, "{r}");
    assert_eq!(r["replay_failed"], 0, "{r}");
    assert_eq!(r["errors"].as_array().expect("errors").len(), 4, "{r}");
    for latency in ["ttft", "tpot", "e2e", "ttft_unqueued"] {
        let n = error(&r, latency)["n"].as_u64().expect("n");
        assert!(n > 0, "{latency}: n {n}");
    }
    assert_eq!(error(&r, "ttft")["n"], 300);
    let unqueued = error(&r, "ttft_unqueued")["n"].as_u64().expect("n");
    assert!(unqueued < 300, "every request counted as not queued");
    let tpot = num(&error(&r, "tpot")["mean"]["error"]);
    assert!(
        (-13.0..=-10.0).contains(&tpot),
        "TPOT mean error {tpot}% moved off the measured baseline (-11.9%)"
    );
}

#[test]
fn validate_html_draws_a_scatter_per_latency() {
    let dir = tmp("html");
    let page = dir.join("v.html");
    let args = with(
        &["validate", "--real", LLAMA, "--html", s(&page)],
        LLAMA_DEPLOY,
    );
    stdout_ok(&strs(&args));
    let html = std::fs::read_to_string(&page).expect("page written");
    assert!(html.starts_with("<!DOCTYPE html>"), "not a page");
    assert_eq!(html.matches("data-chart=\"scatter\"").count(), 4);
}

/// The vLLM bench sample: its successful requests are compared, its failed
/// one is left out and counted.
#[test]
fn validate_reads_vllm_bench_output() {
    let file = format!("{OBSERVED}/vllm_bench.json");
    let raw: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join(&file)).expect("sample"))
            .expect("sample json");
    let errors = raw["errors"].as_array().expect("errors");
    let ok = errors.iter().filter(|e| *e == "").count();
    assert_eq!((ok, errors.len()), (4, 5), "the sample changed");
    let r = validate_json(&["--real", &file, "--prefill", "1", "--decode", "0"]);
    assert_eq!(r["requests"], ok, "{r}");
    assert_eq!(r["real_failed_left_out"], errors.len() - ok, "{r}");
    assert_eq!(r["replay_failed"], 0, "{r}");
    assert_eq!(error(&r, "ttft")["n"], 4);
    assert_eq!(error(&r, "e2e")["n"], 4);
    // One successful request has a single output token: no TPOT.
    assert_eq!(error(&r, "tpot")["n"], 3);
    assert!(
        r["compared"]
            .as_str()
            .expect("compared")
            .contains("VllmBench"),
        "{r}"
    );
}

#[test]
fn validate_refuses_sglang_output_without_send_times() {
    let file = format!("{OBSERVED}/sglang_bench.jsonl");
    let e = refuse_small(&file);
    assert!(e.contains("start_times") && e.contains("arrival"), "{e}");
}

#[test]
fn validate_refuses_a_malformed_plain_file_naming_the_line() {
    let dir = tmp("malformed");
    let jsonl = dir.join("bad.jsonl");
    std::fs::write(
        &jsonl,
        "{\"id\": \"r0\", \"arrival\": 0.0, \"first_token\": 0.25, \"last_token\": 1.25, \
         \"input_tokens\": 5, \"output_tokens\": 11}\n\
         {\"id\": \"r1\", \"arrival\": 0.5, \"first_token\": 0.75, \
         \"input_tokens\": 5, \"output_tokens\": 11}\n",
    )
    .expect("write");
    let e = refuse_small(s(&jsonl));
    assert!(e.contains("line 2") && e.contains("last_token"), "{e}");

    let csv = dir.join("bad.csv");
    std::fs::write(
        &csv,
        "id,arrival,first_token,last_token,input_tokens,output_tokens\n\
         a,0,0.1,0.5,10,3\n\
         b,0.2,0.3,,10,3\n",
    )
    .expect("write");
    let e = refuse_small(s(&csv));
    assert!(e.contains("line 3") && e.contains("last_token"), "{e}");
}

#[test]
fn validate_refuses_a_missing_file() {
    let dir = tmp("missing");
    let gone = dir.join("no-such-run.jsonl");
    let e = refuse_small(s(&gone));
    assert!(
        e.contains("--real") && e.contains("no-such-run.jsonl"),
        "{e}"
    );
}

/// A pool smaller than the run's first request: refused up front, not
/// replayed into a table of failures.
#[test]
fn validate_refuses_a_deployment_too_small_for_the_run() {
    let args = with(
        &["validate", "--real", LLAMA],
        &[LLAMA_DEPLOY, &["--prefill-kv-tokens", "1000"]].concat(),
    );
    let e = refusal(&strs(&args));
    assert!(
        e.contains("--prefill-kv-tokens 1000") && e.contains("cannot hold"),
        "{e}"
    );
}

/// `calibrate` on the Llama run into `out`, `rounds` sweeps: its stdout.
fn calibrate(out: &Path, rounds: &str) -> String {
    let args = with(
        &[
            "calibrate",
            "--real",
            LLAMA,
            "--rounds",
            rounds,
            "--out",
            s(out),
        ],
        LLAMA_DEPLOY,
    );
    stdout_ok(&strs(&args))
}

/// The part of calibrate's stdout after the line `marker`, up to the next
/// blank line.
fn section<'a>(text: &'a str, marker: &str) -> &'a str {
    let start = text
        .find(&format!("\n{marker}\n"))
        .unwrap_or_else(|| panic!("no {marker} in:\n{text}"))
        + marker.len()
        + 2;
    let rest = &text[start..];
    &rest[..rest.find("\n\n").unwrap_or(rest.len())]
}

#[test]
fn calibrate_is_deterministic() {
    let dir = tmp("calibrate-det");
    let out = dir.join("cal.json");
    let first = calibrate(&out, "1");
    let profile = std::fs::read(&out).expect("profile written");
    std::fs::remove_file(&out).expect("rm");
    let second = calibrate(&out, "1");
    assert_eq!(first, second, "stdout differs between two calibrations");
    assert!(
        std::fs::read(&out).expect("profile written") == profile,
        "profiles differ"
    );
}

/// The written profile is the fit: `validate --perf profile:OUT` reads it
/// back to calibrate's "after" figures, and they are close to the run.
#[test]
fn calibrate_writes_a_profile_validate_reads_back() {
    let dir = tmp("calibrate-rt");
    let out = dir.join("cal.json");
    let text = calibrate(&out, "2");

    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("profile")).expect("json");
    let name = doc["name"].as_str().expect("name");
    assert!(name.ends_with("-calibrated"), "{name}");
    let step_ms = num(&doc["overheads"]["step_ms"]);
    assert!(step_ms > 0.0, "step_ms {step_ms}");
    let fitted = text
        .lines()
        .find(|l| l.starts_with("fitted: "))
        .expect("fitted line");
    assert!(
        fitted.contains(&format!("step_ms = {step_ms:.4}")),
        "{fitted} vs the profile's step_ms {step_ms}"
    );

    // Before: the uncalibrated validate's rows.
    let plain = stdout_ok(&strs(&with(&["validate", "--real", LLAMA], LLAMA_DEPLOY)));
    let before = section(&text, "before:");
    for label in ["TTFT", "TPOT", "E2E", "TTFT, not queued"] {
        assert_eq!(row(before, label), row(&plain, label), "before {label}");
    }

    let perf = format!("profile:{}", s(&out));
    let again = with(
        &[
            "validate",
            "--real",
            LLAMA,
            "--perf",
            &perf,
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "rtxpro6000",
        ],
        LLAMA_FLAGS,
    );
    let back = stdout_ok(&strs(&again));
    assert!(back.contains("-calibrated"), "{back}");
    let after = section(&text, "after:");
    for label in ["TTFT", "TPOT", "E2E", "TTFT, not queued"] {
        assert_eq!(row(after, label), row(&back, label), "after {label}");
    }
    assert_ne!(
        row(after, "TPOT"),
        row(before, "TPOT"),
        "the fit changed nothing"
    );

    let r = validate_json(&strs(&again[1..]));
    assert_eq!(r["replay_failed"], 0, "{r}");
    let ape = num(&error(&r, "tpot")["median_ape"]);
    assert!(ape < 3.0, "calibrated TPOT median APE {ape}%");
}

#[test]
fn calibrate_refuses_bad_options_and_writes_nothing() {
    let dir = tmp("calibrate-refusals");
    let out = dir.join("cal.json");
    let cases: &[(&[&str], &[&str])] = &[
        (&["--fit", "nonsense"], &["nonsense", "step_ms"]),
        (&["--rounds", "0"], &["--rounds 0"]),
        (&["--rounds", "11"], &["--rounds 11"]),
        (
            &["--perf", "dynamo-polynomial"],
            &["--perf dynamo-polynomial", "profile"],
        ),
    ];
    for (flags, needles) in cases {
        let args = with(
            &["calibrate", "--real", LLAMA, "--out", s(&out)],
            &[LLAMA_DEPLOY, flags].concat(),
        );
        let e = refusal(&strs(&args));
        for n in *needles {
            assert!(e.contains(n), "{flags:?}: {e}");
        }
        assert!(!out.exists(), "{flags:?} wrote {}", out.display());
    }
}

/// A term named twice in `--fit` is fitted once: the same answer as naming
/// it once.
#[test]
fn calibrate_fits_a_repeated_term_once() {
    let dir = tmp("calibrate-dup");
    let fitted = |fit: &str, name: &str| {
        let out = dir.join(name);
        let args = with(
            &[
                "calibrate",
                "--real",
                LLAMA,
                "--rounds",
                "1",
                "--fit",
                fit,
                "--out",
                s(&out),
            ],
            LLAMA_DEPLOY,
        );
        let text = stdout_ok(&strs(&args));
        text.lines()
            .find(|l| l.starts_with("fitted:"))
            .unwrap_or_else(|| panic!("no fitted line in:\n{text}"))
            .to_string()
    };
    assert_eq!(
        fitted("step_ms,per_seq_ms,step_ms", "a.json"),
        fitted("step_ms,per_seq_ms", "b.json")
    );
}

#[test]
fn validate_refuses_a_zero_block_size() {
    let args = with(
        &["validate", "--real", LLAMA, "--real-block-size", "0"],
        LLAMA_DEPLOY,
    );
    let e = refusal(&strs(&args));
    assert!(e.contains("--real-block-size 0"), "{e}");
}
