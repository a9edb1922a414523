//! `handoff-mocker plan` and the `--slo` report sections: byte-identical
//! plans whatever the thread count, shards that merge into the whole
//! plan's outputs, AIConfigurator's saved picks simulated from the
//! committed sample, and reports without `--slo` that carry none of it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_handoff-mocker");

fn tmp(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmp dir");
    d
}

fn run(dir: &Path, args: &[&str], threads: &str) -> Output {
    let out = Command::new(BIN)
        .current_dir(dir)
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

fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A 3-GPU plan of a small generated workload: 3 aggregated layouts and
/// 3 splits at TP1.
const PLAN: &[&str] = &[
    "plan",
    "--gpus",
    "3",
    "--slo",
    "ttft:p90=800ms,tpot:p90=25ms",
    "--gpu-hour-usd",
    "2",
    "--isl",
    "2000",
    "--osl",
    "60",
    "--requests",
    "120",
    "--rate",
    "6",
    "--out",
    "out",
];

#[test]
fn plans_are_byte_identical_on_one_and_two_threads_and_shards_merge_into_them() {
    let base = tmp("plan_determinism");
    let (one, two, shards) = (base.join("one"), base.join("two"), base.join("shards"));
    for d in [&one, &two, &shards] {
        std::fs::create_dir_all(d).unwrap();
    }
    let table = run(&one, PLAN, "1").stdout;
    assert_eq!(run(&two, PLAN, "2").stdout, table);
    for i in ["0/2", "1/2"] {
        let mut args = PLAN.to_vec();
        args.extend(["--shard", i]);
        let out = run(&shards, &args, "2");
        assert!(out.stdout.is_empty(), "a shard ranks nothing");
    }
    let merged = run(
        &shards,
        &[
            "plan",
            "--merge",
            "out/summary-shard-0-of-2.json",
            "out/summary-shard-1-of-2.json",
            "--out",
            "merged",
        ],
        "1",
    );
    assert_eq!(merged.stdout, table);
    for f in [
        "summary.json",
        "summary.csv",
        "best.csv",
        "pareto.csv",
        "pareto.json",
        "plan.html",
    ] {
        let a = read(&one.join("out").join(f));
        assert_eq!(a, read(&two.join("out").join(f)), "{f} across threads");
        assert_eq!(a, read(&shards.join("merged").join(f)), "{f} from shards");
    }
    let summary: serde_json::Value =
        serde_json::from_slice(&read(&one.join("out/summary.json"))).unwrap();
    let rows = summary["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 6);
    for r in rows {
        assert!(r["error"].is_null(), "{r}");
        assert_eq!(r["num_requests"], 120);
        let gpus = ["prefill", "decode"]
            .iter()
            .map(|k| r["config"][k].as_str().unwrap().parse::<u64>().unwrap())
            .sum::<u64>();
        assert_eq!(r["sizing.gpus"], gpus, "{r}");
        assert!(r["slo.attainment_all"].as_f64().is_some());
    }
    let text = String::from_utf8(table).unwrap();
    assert!(
        text.contains("layouts hold the SLO") || text.contains("no layout of 6"),
        "{text}"
    );
    let page = String::from_utf8(read(&one.join("out/plan.html"))).unwrap();
    assert!(page.contains("data-chart=\"pareto\"") && page.contains("<svg"));
}

#[test]
fn aiconfigurator_picks_are_simulated_beside_its_estimates() {
    let dir = tmp("plan_check_aic");
    let sample =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/aic/disagg/best_config_topn.csv");
    let out = run(
        &dir,
        &[
            "plan",
            "--check-aic",
            sample.to_str().unwrap(),
            "--slo",
            "ttft:p90=600ms,tpot:p90=20ms",
            "--out",
            "out",
        ],
        "2",
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("3P+5D tp1"), "{text}");
    // 4P TP1 + 1D TP4 and 2P TP1 + 1D TP2: each pool at its own TP, but
    // Qwen3-8B has no built-in TP4 or TP2 profile.
    assert_eq!(
        text.matches("skipped: no profile of qwen3-8b on h100 at TP")
            .count(),
        2,
        "{text}"
    );
    assert!(text.contains("4P+1D tp1/4"), "{text}");
    assert!(text.contains("skipped 2 of 3 rows: 2 no profile"), "{text}");
    // Reports are named by CSV line.
    assert!(dir.join("out/config-0002.json").exists());
    let v: serde_json::Value =
        serde_json::from_slice(&read(&dir.join("out/aic-check.json"))).unwrap();
    let row = &v["rows"][0];
    assert_eq!(row["aic"]["ttft_ms"], 177.988);
    assert_eq!(row["concurrency"], 280);
    let sim = &row["simulated"];
    for m in ["mean", "p50", "p90", "p99"] {
        assert!(sim["ttft_ms"][m].as_f64().unwrap() > 0.0, "{sim}");
        assert!(sim["tpot_ms"][m].as_f64().unwrap() > 0.0, "{sim}");
    }
    assert!(sim["slo_holds"].is_boolean());
    assert_eq!(sim["report"], "config-0002.json");
    assert!(v["rows"][1]["simulated"].is_null());
    assert_eq!(v["skipped_rows"], serde_json::json!({"no profile": 2}));
}

/// `layouts.csv`: AIConfigurator's disaggregated columns with the sample's
/// estimates, laid out as five layouts (line 2: Qwen3-32B 1P TP2 + 1D TP4
/// on H100 under vLLM; 3: Qwen3-30B-A3B decode DP4 EP4; 4: Qwen3-235B-A22B,
/// no profile; 5: prefill CP2; 6: Qwen3-8B on B200 under SGLang).
fn layouts_csv() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/aic/disagg/layouts.csv")
}

fn report(dir: &Path, name: &str) -> serde_json::Value {
    serde_json::from_slice(&read(&dir.join("out").join(name))).unwrap()
}

#[test]
fn aic_rows_run_as_their_columns_name_them_or_are_skipped_with_why() {
    let dir = tmp("plan_check_aic_layouts");
    let csv = layouts_csv();
    let out = run(
        &dir,
        &[
            "plan",
            "--check-aic",
            csv.to_str().unwrap(),
            "--slo",
            "ttft:p90=2s",
            "--out",
            "out",
        ],
        "2",
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let line = |n: &str| {
        text.lines()
            .find(|l| l.starts_with(n))
            .unwrap_or_else(|| panic!("{n}: {text}"))
            .to_string()
    };
    assert!(!line("   2 1P+1D tp2/4").contains("skipped"), "{text}");
    assert!(
        line("   3 ").ends_with("skipped: prefill DP1 and decode DP4 differ (one --dp-size here)"),
        "{text}"
    );
    assert!(
        line("   4 ").contains("skipped: no profile of qwen3-235b-a22b on h200 at TP8 for vllm; `cargo xtask profiles build --model qwen3-235b-a22b --system h200_sxm"),
        "{text}"
    );
    assert!(
        line("   5 ").ends_with("skipped: prefill CP2: context parallelism is not modelled"),
        "{text}"
    );
    assert!(!line("   6 ").contains("skipped"), "{text}");
    assert!(
        text.contains(
            "skipped 3 of 5 rows: 1 prefill and decode DP differ, 1 no profile, 1 context \
             parallelism"
        ),
        "{text}"
    );
    assert!(!text.contains("overrides"), "{text}");
    // Line 2: the model from the file, each pool its own TP and profile,
    // six GPUs as the row names; its report is numbered by its line.
    let r = report(&dir, "config-0002.json");
    let flags = r["config"]["flags"].to_string();
    for f in [
        "\"--prefill-tp\",\"2\",\"--decode-tp\",\"4\"",
        "\"--model\",\"qwen3-32b\"",
    ] {
        assert!(flags.contains(f), "{f}: {flags}");
    }
    let perf: Vec<&str> = r["config"]["engines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["perf"].as_str().unwrap())
        .collect();
    assert_eq!(
        perf,
        [
            "profile:qwen3-32b-h100-tp2-vllm",
            "profile:qwen3-32b-h100-tp4-vllm"
        ]
    );
    assert_eq!(r["sizing"]["gpus"], 6);
    // Line 6: the system and backend from the file.
    let r = report(&dir, "config-0006.json");
    assert_eq!(
        r["config"]["engines"][0]["perf"],
        "profile:qwen3-8b-b200-tp1-sglang"
    );
    let v: serde_json::Value =
        serde_json::from_slice(&read(&dir.join("out/aic-check.json"))).unwrap();
    let lines: Vec<u64> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, [2, 3, 4, 5, 6]);
    assert_eq!(v["rows"][4]["simulated"]["report"], "config-0006.json");
    assert_eq!(
        v["skipped_rows"],
        serde_json::json!({
            "prefill and decode DP differ": 1,
            "no profile": 1,
            "context parallelism": 1
        })
    );
}

#[test]
fn a_flag_after_the_separator_overrides_the_file_and_says_so() {
    let dir = tmp("plan_check_aic_override");
    let csv = layouts_csv();
    let out = run(
        &dir,
        &[
            "plan",
            "--check-aic",
            csv.to_str().unwrap(),
            "--slo",
            "ttft:p90=2s",
            "--out",
            "out",
            "--",
            "--backend",
            "vllm",
        ],
        "1",
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let note = "--backend vllm (after `--`) overrides the file's `backend` column";
    assert_eq!(text.matches(note).count(), 1, "{text}");
    assert!(text.starts_with(note), "{text}");
    // Line 6 now runs Qwen3-8B on B200 under vLLM.
    let r = report(&dir, "config-0006.json");
    assert_eq!(
        r["config"]["engines"][0]["perf"],
        "profile:qwen3-8b-b200-tp1-vllm"
    );
    let v: serde_json::Value =
        serde_json::from_slice(&read(&dir.join("out/aic-check.json"))).unwrap();
    assert_eq!(v["overrides"], serde_json::json!([note]));
    // A flag each row sets from its columns is refused.
    let bad = Command::new(BIN)
        .current_dir(&dir)
        .args([
            "plan",
            "--check-aic",
            csv.to_str().unwrap(),
            "--slo",
            "ttft:p90=2s",
        ])
        .args(["--out", "out2", "--", "--tp", "2"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("--tp after `--`"), "{err}");
}

#[test]
fn reports_carry_slo_and_sizing_only_when_asked() {
    let dir = tmp("plan_report_sections");
    let plain = run(
        &dir,
        &[
            "replay",
            "--requests",
            "60",
            "--json",
            "--per-request-jsonl",
            "a.jsonl",
        ],
        "1",
    );
    let v: serde_json::Value = serde_json::from_slice(&plain.stdout).unwrap();
    assert!(v.get("slo").is_none() && v.get("sizing").is_none());
    assert!(!String::from_utf8(read(&dir.join("a.jsonl")))
        .unwrap()
        .contains("\"slo\""));
    let asked = run(
        &dir,
        &[
            "replay",
            "--requests",
            "60",
            "--json",
            "--per-request-jsonl",
            "b.jsonl",
            "--slo",
            "ttft:p50=10s,e2e:p99=1ms",
            "--gpu-hour-usd",
            "3",
        ],
        "1",
    );
    let v: serde_json::Value = serde_json::from_slice(&asked.stdout).unwrap();
    // Everything meets a 10 s TTFT; nothing finishes in 1 ms.
    assert_eq!(
        v["slo"]["targets"][0]["met_requests"],
        v["completed_requests"]
    );
    assert_eq!(v["slo"]["targets"][1]["met_requests"], 0);
    assert_eq!(v["slo"]["holds"], false);
    assert_eq!(v["slo"]["goodput_rps"], 0.0);
    assert_eq!(v["sizing"]["gpus"], 4);
    assert!(
        v["sizing"]["usd_per_million_output_tokens"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    let first = String::from_utf8(read(&dir.join("b.jsonl"))).unwrap();
    assert!(
        first
            .lines()
            .next()
            .unwrap()
            .contains(r#""slo":{"ttft:p50":true,"e2e:p99":false,"all":false}"#),
        "{first}"
    );
    // The text summary says the same.
    let text = run(
        &dir,
        &["replay", "--requests", "60", "--slo", "ttft:p50=10s"],
        "1",
    );
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("slo ttft:p50<=10000ms 100.0% held"), "{text}");
    assert!(text.contains("goodput "), "{text}");
    // A bad target names its part.
    let bad = Command::new(BIN)
        .current_dir(&dir)
        .args(["replay", "--slo", "ttft:p90=600ms,tpot:p200=1s"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("tpot:p200=1s"));
}

#[test]
fn max_rate_is_searched_per_layout_the_same_on_any_thread_count() {
    let base = tmp("plan_max_rate");
    let args = [
        "plan",
        "--gpus",
        "2",
        "--slo",
        "ttft:p90=600ms,tpot:p90=20ms",
        "--isl",
        "2000",
        "--osl",
        "60",
        "--requests",
        "80",
        "--rate",
        "4",
        "--max-rate",
        "40",
        "--rate-tolerance",
        "0.1",
        "--out",
        "out",
    ];
    let (one, two) = (base.join("one"), base.join("two"));
    for d in [&one, &two] {
        std::fs::create_dir_all(d).unwrap();
    }
    let table = run(&one, &args, "1").stdout;
    assert_eq!(run(&two, &args, "2").stdout, table);
    let a = read(&one.join("out/summary.json"));
    assert_eq!(a, read(&two.join("out/summary.json")));
    let summary: serde_json::Value = serde_json::from_slice(&a).unwrap();
    for r in summary["rows"].as_array().unwrap() {
        assert!(r["error"].is_null(), "{r}");
        let rate = r["max_rate_rps"].as_f64();
        assert!(rate.is_none_or(|x| x > 0.0 && x <= 40.0), "{r}");
    }
    let csv = String::from_utf8(read(&one.join("out/summary.csv"))).unwrap();
    assert!(csv.lines().next().unwrap().ends_with(",max_rate_rps"));
    assert!(String::from_utf8(table).unwrap().contains("max req/s"));
}

#[test]
fn dp_choices_multiply_the_gpus_within_the_budget() {
    let base = tmp("plan_dp");
    let args = [
        "plan",
        "--gpus",
        "3",
        "--dp",
        "1,2",
        "--slo",
        "ttft:p90=800ms,tpot:p90=25ms",
        "--isl",
        "2000",
        "--osl",
        "40",
        "--requests",
        "60",
        "--rate",
        "4",
        "--out",
        "out",
    ];
    let text = String::from_utf8(run(&base, &args, "2").stdout).unwrap();
    let summary: serde_json::Value =
        serde_json::from_slice(&read(&base.join("out/summary.json"))).unwrap();
    let rows = summary["rows"].as_array().unwrap();
    // DP1: 3 aggregated + 3 splits; DP2 (2 GPUs a worker): 1x agg only.
    assert_eq!(rows.len(), 7);
    let n =
        |r: &serde_json::Value, k: &str| r["config"][k].as_str().unwrap().parse::<u64>().unwrap();
    for r in rows {
        assert!(r["error"].is_null(), "{r}");
        let gpus = (n(r, "prefill") + n(r, "decode")) * n(r, "tp") * n(r, "dp");
        assert_eq!(r["sizing.gpus"], gpus, "{r}");
        assert!(gpus <= 3, "{r}");
    }
    let last = &rows[6];
    assert_eq!(
        (n(last, "dp"), n(last, "prefill"), n(last, "decode")),
        (2, 1, 0)
    );
    assert!(
        last["args"].as_str().unwrap().contains("--dp-size 2"),
        "{last}"
    );
    assert!(text.contains("1x agg tp1 dp2"), "{text}");
    let best = String::from_utf8(read(&base.join("out/best.csv"))).unwrap();
    assert!(best.lines().next().unwrap().contains(",dp,"), "{best}");
    let dps = &summary["grid"]["axes"][1];
    assert_eq!(dps["key"], "dp");
    assert_eq!(dps["values"], serde_json::json!(["1", "2"]));
}

/// A run whose arrivals span less than 3 median request lifetimes is
/// warned of (report JSON `warnings`, the text report, and plan's summary
/// rows and stderr); a steady one carries nothing.
#[test]
fn runs_dominated_by_warm_up_and_drain_are_warned_of() {
    let dir = tmp("plan_not_steady");
    let short = run(&dir, &["replay", "--requests", "20", "--json"], "1").stdout;
    let v: serde_json::Value = serde_json::from_slice(&short).unwrap();
    let w = &v["warnings"][0];
    assert_eq!(w["kind"], "not_steady", "{v}");
    assert!(w["arrival_span_ms"].as_f64().unwrap() < 3.0 * w["median_e2e_ms"].as_f64().unwrap());
    let text = String::from_utf8(run(&dir, &["replay", "--requests", "20"], "1").stdout).unwrap();
    assert!(text.contains("warning: not in steady state"), "{text}");
    let steady = run(&dir, &["replay", "--requests", "200", "--json"], "1").stdout;
    let v: serde_json::Value = serde_json::from_slice(&steady).unwrap();
    assert!(v.get("warnings").is_none(), "{v}");
    let text = String::from_utf8(run(&dir, &["replay", "--requests", "200"], "1").stdout).unwrap();
    assert!(!text.contains("warning"), "{text}");
    let plan = run(
        &dir,
        &[
            "plan",
            "--gpus",
            "1",
            "--slo",
            "ttft:p90=800ms",
            "--isl",
            "2000",
            "--osl",
            "60",
            "--requests",
            "10",
            "--rate",
            "100",
            "--out",
            "out",
        ],
        "1",
    );
    let err = String::from_utf8(plan.stderr).unwrap();
    assert!(
        err.contains("1 of 1 layouts did not reach steady state"),
        "{err}"
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&read(&dir.join("out/summary.json"))).unwrap();
    assert_eq!(summary["rows"][0]["warnings"][0]["kind"], "not_steady");
}
