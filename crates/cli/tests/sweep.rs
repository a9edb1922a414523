//! `handoff-mocker sweep`: byte-identical summaries whatever the thread
//! count, shards that merge into the full grid's summary, each report equal
//! to `replay --output` of its configuration, located errors for bad grids.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_handoff-mocker");

fn tmp(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmp dir");
    d
}

fn trace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/conversation_2000.jsonl")
}

/// A small grid over the committed trace slice: 2 backends x 2 routers x
/// 2 decode counts = 8 configurations, 300 requests each.
fn grid_file(dir: &Path) -> PathBuf {
    let p = dir.join("grid.toml");
    std::fs::write(
        &p,
        format!(
            "[base]\ntrace = {:?}\nlimit = 300\nprefill = 2\n\n[grid]\nbackend = [\"vllm\", \"sglang\"]\nrouter = [\"kv\", \"round-robin\"]\ndecode = [1, 2]\n",
            trace().display().to_string()
        ),
    )
    .expect("write grid");
    p
}

fn sweep(args: &[&str], threads: &str) -> Output {
    let out = Command::new(BIN)
        .arg("sweep")
        .args(args)
        .env("RAYON_NUM_THREADS", threads)
        .output()
        .expect("run sweep");
    assert!(
        out.status.success(),
        "sweep {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn summaries_are_byte_identical_on_one_and_two_threads_and_shards_merge_into_them() {
    let dir = tmp("sweep_determinism");
    let grid = grid_file(&dir);
    let g = grid.to_str().unwrap();
    let (one, two) = (dir.join("one"), dir.join("two"));
    sweep(&["--grid", g, "--out", one.to_str().unwrap()], "1");
    sweep(&["--grid", g, "--out", two.to_str().unwrap()], "2");
    for f in ["summary.json", "summary.csv"] {
        assert_eq!(read(&one.join(f)), read(&two.join(f)), "{f}");
    }
    let summary: serde_json::Value =
        serde_json::from_slice(&read(&one.join("summary.json"))).unwrap();
    let rows = summary["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 8);
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r["index"], i);
        assert!(r["error"].is_null(), "{r}");
        assert_eq!(r["num_requests"], 300);
        let name = r["report"].as_str().unwrap();
        assert_eq!(read(&one.join(name)), read(&two.join(name)), "{name}");
    }
    // The last axis (sorted keys: backend, decode, router) varies fastest.
    assert_eq!(rows[1]["config"]["router"], "round-robin");
    assert_eq!(rows[2]["config"]["decode"], "2");
    assert_eq!(rows[4]["config"]["backend"], "sglang");
    // Different configurations give different results (the grid is real).
    assert_ne!(rows[0]["mean_ttft_ms"], rows[4]["mean_ttft_ms"]);
    let csv = String::from_utf8(read(&one.join("summary.csv"))).unwrap();
    assert_eq!(csv.lines().count(), 9);
    assert!(csv.starts_with("index,backend,decode,router,report,error,num_requests,"));

    // Three shards (uneven: 3 + 3 + 2), merged, give the full grid's bytes.
    let shards = dir.join("shards");
    for i in 0..3 {
        let s = format!("{i}/3");
        sweep(
            &[
                "--grid",
                g,
                "--out",
                shards.to_str().unwrap(),
                "--shard",
                &s,
            ],
            "2",
        );
    }
    let merged = dir.join("merged");
    let mut args = vec!["merge".to_string(), "--out".into()];
    args.push(merged.to_str().unwrap().into());
    for i in [2, 0, 1] {
        args.push(
            shards
                .join(format!("summary-shard-{i}-of-3.json"))
                .to_str()
                .unwrap()
                .into(),
        );
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    sweep(&args, "1");
    for f in ["summary.json", "summary.csv"] {
        assert_eq!(read(&one.join(f)), read(&merged.join(f)), "merged {f}");
    }
}

#[test]
fn each_report_is_the_replay_output_of_its_configuration() {
    let dir = tmp("sweep_report");
    let out = dir.join("out");
    let t = trace();
    sweep(
        &[
            "--set",
            "seed=3",
            "--set",
            "decode=1,2",
            "--out",
            out.to_str().unwrap(),
            "--",
            "--trace",
            t.to_str().unwrap(),
            "--limit",
            "200",
        ],
        "2",
    );
    let single = dir.join("single.json");
    let r = Command::new(BIN)
        .args([
            "replay", "--limit", "200", "--seed", "3", "--decode", "2", "--trace",
        ])
        .arg(&t)
        .arg("--output")
        .arg(&single)
        .output()
        .expect("replay");
    assert!(r.status.success());
    assert_eq!(read(&single), read(&out.join("config-0001.json")));
}

#[test]
fn merging_refuses_incomplete_overlapping_and_foreign_shards() {
    let dir = tmp("sweep_merge_errors");
    let t = trace();
    let t = t.to_str().unwrap();
    let run = |out: &str, set: &str, shard: &str| {
        let out = dir.join(out);
        sweep(
            &[
                "--set",
                set,
                "--shard",
                shard,
                "--out",
                out.to_str().unwrap(),
                "--",
                "--trace",
                t,
                "--limit",
                "50",
            ],
            "1",
        );
        out
    };
    let a = run("a", "decode=1,2,3", "0/2").join("summary-shard-0-of-2.json");
    let b = run("b", "decode=1,2,3", "1/2").join("summary-shard-1-of-2.json");
    let c = run("c", "decode=1,2", "1/2").join("summary-shard-1-of-2.json");
    let merge = |files: &[&PathBuf]| {
        let out = Command::new(BIN)
            .args(["sweep", "merge", "--out"])
            .arg(dir.join("m"))
            .args(files)
            .output()
            .expect("merge");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    assert!(merge(&[&a]).contains("missing from the shards: 1"));
    assert!(merge(&[&a, &b, &b]).contains("more than one shard"));
    assert!(merge(&[&a, &c]).contains("another grid"));
}

#[test]
fn bad_grids_fail_before_running_with_their_location() {
    let dir = tmp("sweep_bad_grid");
    for (name, text, want) in [
        (
            "typo.toml",
            "[grid]\nprefill = [1, 2]\n\nrouterr = [\"kv\"]\n",
            "typo.toml:4: grid.routerr: unknown replay option --routerr (did you mean --router?)",
        ),
        (
            "value.json",
            "{\n  \"grid\": {\n    \"decode\": [1, \"two\"]\n  }\n}\n",
            "value.json:3: grid.decode[1] = two: invalid value 'two' for '--decode <N>'",
        ),
        (
            "syntax.toml",
            "[grid]\nprefill = [1, 2\n",
            "syntax.toml: TOML parse error at line 2",
        ),
        (
            "base.toml",
            "[base]\nbackend = \"vlm\"\n[grid]\nprefill = [1]\n",
            "base.toml:2: base.backend: invalid value 'vlm' for '--backend",
        ),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        let out = Command::new(BIN)
            .args(["sweep", "--grid"])
            .arg(&p)
            .arg("--out")
            .arg(dir.join("out"))
            .output()
            .expect("run");
        assert!(!out.status.success(), "{name}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{name}: {err}");
        assert!(!dir.join("out").exists(), "{name}: nothing runs");
    }
    let out = Command::new(BIN)
        .args(["sweep", "--set", "prefill=1", "--shard", "2/2"])
        .output()
        .expect("run");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--shard 2/2: expected I/N"));
}
