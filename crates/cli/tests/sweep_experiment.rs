//! `sweep --experiment`: a grid of `experiment e4` configurations whose
//! summary and map page are byte-identical on one and two threads and when
//! merged from shards, whose reports are `experiment e4 --json`'s bytes,
//! and whose page draws H4-2 as a heatmap of the summary's verdicts.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_handoff-mocker");

/// A workload small enough for a debug build in seconds that still
/// reseeds: 6 sessions of 6 turns growing to 20K tokens on decode pools of
/// 30K tokens.
const BASE: &[&str] = &[
    "--sessions",
    "6",
    "--session-turns",
    "6",
    "--session-final-tokens",
    "20000",
    "--decode-kv-tokens",
    "30000",
];

/// The store's size against the prefill worker's pool: 2 x 2 points.
const SETS: &[&str] = &[
    "--set",
    "d-to-p-sync-max-sessions=1,6",
    "--set",
    "prefill-kv-tokens=40000,200000",
];

fn tmp(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmp dir");
    d
}

fn run(args: &[&str], threads: &str) -> Output {
    let out = Command::new(BIN)
        .args(args)
        .env("RAYON_NUM_THREADS", threads)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn sweep(out: &Path, extra: &[&str], threads: &str) {
    let out = out.to_str().unwrap();
    let mut args = vec!["sweep", "--experiment", "--out", out];
    args.extend(SETS);
    args.extend(extra);
    args.push("--");
    args.extend(BASE);
    run(&args, threads);
}

fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn the_map_is_byte_identical_across_threads_and_shards_and_draws_the_verdicts() {
    let dir = tmp("sweep_experiment");
    let (one, two) = (dir.join("one"), dir.join("two"));
    let page = |d: &Path| d.join("map.html").to_str().unwrap().to_string();
    let map = "prefill-kv-tokens,d-to-p-sync-max-sessions";
    sweep(&one, &["--html", &page(&one), "--map", map], "1");
    sweep(&two, &["--html", &page(&two), "--map", map], "2");
    for f in ["summary.json", "summary.csv", "map.html"] {
        assert_eq!(read(&one.join(f)), read(&two.join(f)), "{f}");
    }
    let summary: serde_json::Value =
        serde_json::from_slice(&read(&one.join("summary.json"))).unwrap();
    assert_eq!(summary["grid"]["kind"], "experiment");
    let rows = summary["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    for r in rows {
        assert!(r["error"].is_null(), "{r}");
        assert_eq!(r["drained"], true);
        assert!(["holds", "partial", "fails"].contains(&r["h4_2"].as_str().unwrap()));
        // Every E4 reseed looked a snapshot up and was classified.
        assert_eq!(r["reseeds"], r["e4_reseeds"], "{r}");
        let name = r["report"].as_str().unwrap();
        assert_eq!(read(&one.join(name)), read(&two.join(name)), "{name}");
    }
    // The grid is real: a store of 6 snapshots in a 200K pool bypasses
    // more reseeds than a store of 1 in a 40K pool, and pushes either way.
    let hit = |i: usize| rows[i]["e4_bypass_hit_rate"].as_f64().unwrap();
    assert!(rows[0]["e4_reseeds"].as_u64().unwrap() > 0);
    assert!(hit(3) > hit(0), "{} vs {}", hit(3), hit(0));
    assert!(rows[3]["e4_push_gbps"].as_f64().unwrap() > 0.0);
    let csv = String::from_utf8(read(&one.join("summary.csv"))).unwrap();
    assert!(csv.starts_with(
        "index,d-to-p-sync-max-sessions,prefill-kv-tokens,report,error,h4_1,h4_2,h4_3,"
    ));

    // The page: three heatmaps, H4-2's cells the rows' verdicts (X =
    // prefill pool, Y = store size: row-major, as the grid is numbered).
    let html = String::from_utf8(read(&one.join("map.html"))).unwrap();
    assert_eq!(html.matches("<table class=\"heatmap\"").count(), 3);
    let h = &html[html.find("data-measure=\"h4-2\"").unwrap()..];
    let h = &h[..h.find("</table>").unwrap()];
    let cells: Vec<&str> = h
        .split("data-v=\"")
        .skip(1)
        .map(|c| &c[..c.find('"').unwrap()])
        .collect();
    let verdicts: Vec<&str> = rows.iter().map(|r| r["h4_2"].as_str().unwrap()).collect();
    assert_eq!(cells, verdicts);
    assert!(html.contains("Snapshot freshness at E4's reseeds"));

    // Three uneven shards, merged in any order, give the same bytes.
    let shards = dir.join("shards");
    for i in 0..3 {
        sweep(&shards, &["--shard", &format!("{i}/3")], "2");
    }
    let merged = dir.join("merged");
    let mut args = vec![
        "sweep".to_string(),
        "merge".into(),
        "--out".into(),
        merged.to_str().unwrap().into(),
        "--html".into(),
        page(&merged),
        "--map".into(),
        map.into(),
    ];
    for i in [1, 2, 0] {
        let p = shards.join(format!("summary-shard-{i}-of-3.json"));
        args.push(p.to_str().unwrap().into());
    }
    std::fs::create_dir_all(&merged).unwrap();
    run(&args.iter().map(String::as_str).collect::<Vec<_>>(), "1");
    for f in ["summary.json", "summary.csv", "map.html"] {
        assert_eq!(read(&one.join(f)), read(&merged.join(f)), "merged {f}");
    }
}

#[test]
fn each_report_is_experiment_e4_json_of_its_configuration() {
    let dir = tmp("sweep_experiment_report");
    let out = dir.join("out");
    run(
        &[
            "sweep",
            "--experiment",
            "--set",
            "d-to-p-sync-max-sessions=2,6",
            "--out",
            out.to_str().unwrap(),
            "--",
            "--sessions",
            "3",
            "--session-turns",
            "3",
        ],
        "2",
    );
    let single = run(
        &[
            "experiment",
            "e4",
            "--json",
            "--sessions",
            "3",
            "--session-turns",
            "3",
            "--d-to-p-sync-max-sessions",
            "6",
        ],
        "1",
    );
    assert_eq!(single.stdout, read(&out.join("config-0001.json")));
}

#[test]
fn experiment_grids_refuse_what_a_point_cannot_vary() {
    for (args, want) in [
        (
            vec!["--experiment", "--set", "naive=true,false"],
            "--naive cannot be part of a sweep: each configuration runs all four",
        ),
        (
            vec!["--experiment", "--set", "prefil-kv-tokens=1"],
            "unknown experiment option --prefil-kv-tokens (did you mean --prefill-kv-tokens?)",
        ),
        (
            vec!["--experiment", "--set", "sessions=0"],
            "configuration 0 (sessions=0)",
        ),
        (
            vec!["--set", "prefill=1", "--html", "x.html"],
            "--html draws the map of an experiment sweep",
        ),
        (
            vec!["--experiment", "--set", "sessions=1", "--", "--log", "x"],
            "--log after `--` cannot be part of a sweep",
        ),
        (
            vec![
                "--experiment",
                "--set",
                "sessions=1,2",
                "--html",
                "x.html",
                "--map",
                "sessions,decode",
            ],
            "--map: decode is not a swept key (sessions)",
        ),
        (
            vec![
                "--experiment",
                "--set",
                "sessions=1",
                "--html",
                "x.html",
                "--shard",
                "0/2",
            ],
            "give it to `sweep merge`",
        ),
    ] {
        let out = Command::new(BIN)
            .arg("sweep")
            .args(&args)
            .output()
            .expect("run");
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
