//! `handoff-mocker plan` with each pool at its own TP: every (prefill
//! TP, decode TP) pair within the budget, each layout replayed with
//! `--prefill-tp`/`--decode-tp`, and the summary, table, `best.csv` and
//! page naming both TPs; and the TP flags each refused with their reason.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_handoff-mocker");

fn tmp(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmp dir");
    d
}

fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .current_dir(dir)
        .args(args)
        .env("RAYON_NUM_THREADS", "2")
        .output()
        .expect("run")
}

fn text(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A 6-GPU disaggregated plan of Qwen3-32B on H100, prefill at TP1 or
/// TP2 and decode at TP2, over a small generated workload.
const POOLS: &[&str] = &[
    "plan",
    "--gpus",
    "6",
    "--prefill-tp",
    "1,2",
    "--decode-tp",
    "2",
    "--layouts",
    "disaggregated",
    "--slo",
    "ttft:p90=2s,tpot:p90=60ms",
    "--isl",
    "500",
    "--osl",
    "20",
    "--requests",
    "40",
    "--rate",
    "4",
    "--out",
    "out",
    "--",
    "--model",
    "qwen3-32b",
    "--gpu",
    "h100",
];

#[test]
fn each_pool_runs_at_its_own_tp_and_every_output_names_both() {
    let dir = tmp("plan_pools");
    let out = run(&dir, POOLS);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value =
        serde_json::from_str(&text(&dir.join("out/summary.json"))).unwrap();
    let rows = summary["rows"].as_array().unwrap();
    // (1,2): P + 2D ≤ 6 gives 6 splits; (2,2): 2P + 2D ≤ 6 gives 3.
    assert_eq!(rows.len(), 9);
    let n = |r: &serde_json::Value, k: &str| {
        r["config"][k]
            .as_str()
            .unwrap_or_else(|| panic!("{k} in {r}"))
            .parse::<u64>()
            .unwrap()
    };
    let mut mixed = 0;
    for r in rows {
        assert!(r["error"].is_null(), "{r}");
        assert!(r["config"].get("tp").is_none(), "{r}");
        let (ptp, dtp) = (n(r, "prefill_tp"), n(r, "decode_tp"));
        assert_eq!(dtp, 2);
        // Each pool's workers × its TP (the report's sizing per pool).
        let gpus = n(r, "prefill") * ptp + n(r, "decode") * dtp;
        assert_eq!(r["sizing.gpus"], gpus, "{r}");
        assert!(gpus <= 6);
        let args = r["args"].as_str().unwrap();
        if ptp != dtp {
            mixed += 1;
            assert!(args.contains("--prefill-tp 1 --decode-tp 2"), "{args}");
        } else {
            assert!(
                args.contains("--tp 2") && !args.contains("--prefill-tp"),
                "{args}"
            );
        }
    }
    assert_eq!(mixed, 6);
    let keys: Vec<&str> = summary["grid"]["axes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["prefill_tp", "decode_tp", "dp", "prefill", "decode"]);
    // The table, best.csv and the page name both TPs of a mixed layout.
    assert!(stdout.contains(" tp1/2 "), "{stdout}");
    let best = text(&dir.join("out/best.csv"));
    let head: Vec<&str> = best.lines().next().unwrap().split(',').collect();
    assert!(
        head.contains(&"prefill_tp") && head.contains(&"decode_tp"),
        "{head:?}"
    );
    assert!(!head.contains(&"tp"), "{head:?}");
    assert!(text(&dir.join("out/plan.html")).contains("P+1D tp1/2</td>"));
}

#[test]
fn tp_flags_are_refused_with_their_reason() {
    let dir = tmp("plan_pools_refused");
    let base = [
        "plan",
        "--gpus",
        "4",
        "--slo",
        "ttft:p90=1s",
        "--isl",
        "100",
        "--osl",
        "10",
        "--requests",
        "10",
        "--out",
        "out",
    ];
    let fails = |more: &[&str]| {
        let out = run(&dir, &[&base[..], more].concat());
        assert!(!out.status.success(), "{more:?}");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let e = fails(&["--", "--prefill-tp", "2"]);
    assert!(e.contains("plan: --prefill-tp is set per layout"), "{e}");
    let e = fails(&["--", "--decode-tp=2"]);
    assert!(e.contains("plan: --decode-tp is set per layout"), "{e}");
    // Qwen3-32B on H100 under vLLM has TP 1, 2, 4 and 8.
    let e = fails(&[
        "--decode-tp",
        "1,3",
        "--",
        "--model",
        "qwen3-32b",
        "--gpu",
        "h100",
    ]);
    assert!(
        e.contains("plan --decode-tp 3: no profile of qwen3-32b on h100 for vllm at that TP"),
        "{e}"
    );
    let e = fails(&["--expert-parallel", "maybe"]);
    assert!(e.contains("maybe"), "{e}");
}
