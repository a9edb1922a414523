//! What `--help` says a flag defaults to is what a run without the flag
//! does: each hand-written `[default: ...]` that names a value is read out
//! of `replay --help` and compared with the configuration a run without
//! flags reports, so the text cannot go stale when a default moves.

use serde_json::Value;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_handoff-mocker");

fn run(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().expect("run");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The report of `replay --json` with `flags` on a small synthetic workload.
fn report(flags: &[&str]) -> Value {
    let mut args = vec!["replay", "--json", "--requests", "3"];
    args.extend(flags);
    serde_json::from_str(&run(&args)).expect("report JSON")
}

/// The help of one flag: its line and the description under it.
fn flag_help(help: &str, flag: &str) -> String {
    let mut lines = help.lines().skip_while(|l| {
        let t = l.trim_start();
        !(t.starts_with(&format!("{flag} ")) || t == flag)
    });
    let head = lines
        .next()
        .unwrap_or_else(|| panic!("{flag} is not in the help"));
    let mut text = head.to_string();
    for l in lines {
        let t = l.trim_start();
        let indent = l.len() - t.len();
        if t.starts_with('-') && indent < 10 {
            break;
        }
        text.push(' ');
        text.push_str(t);
    }
    text
}

/// The `[default: ...]` of one flag's help.
fn stated_default(help: &str, flag: &str) -> String {
    let text = flag_help(help, flag);
    let start = text
        .find("[default: ")
        .unwrap_or_else(|| panic!("{flag} states no default: {text}"));
    let rest = &text[start + "[default: ".len()..];
    // Brackets nest in some texts ("[default: vllm 30 (480 ...)]"); the
    // default ends at the bracket that closes it.
    let mut depth = 0usize;
    for (i, c) in rest.char_indices() {
        match c {
            '[' => depth += 1,
            ']' if depth == 0 => return rest[..i].to_string(),
            ']' => depth -= 1,
            _ => {}
        }
    }
    panic!("{flag}: unclosed default: {text}")
}

fn engine(r: &Value, key: &str) -> Value {
    r["config"]["engines"][0][key].clone()
}

fn assert_states(help: &str, flag: &str, want: &str) {
    let d = stated_default(help, flag);
    assert!(
        d.contains(want),
        "{flag}: help says [default: {d}], a run without it gives {want}"
    );
}

#[test]
fn replay_help_states_the_defaults_a_run_without_flags_has() {
    let help = run(&["replay", "--help"]);
    let vllm = report(&[]);
    let sglang = report(&["--backend", "sglang"]);
    let poly = report(&["--perf", "dynamo-polynomial"]);

    // Pools: sized from the default model on the default GPU, per backend;
    // the model-free size under an explicit --perf.
    let kv = |r: &Value| engine(r, "kv_tokens").as_u64().expect("kv_tokens");
    assert_states(
        &help,
        "--prefill-kv-tokens",
        &format!("{} tokens for vllm", kv(&vllm)),
    );
    assert_states(
        &help,
        "--prefill-kv-tokens",
        &format!("{} for sglang", kv(&sglang)),
    );
    assert_states(
        &help,
        "--prefill-kv-tokens",
        &format!("{} with --perf alone", kv(&poly)),
    );
    let decode = |r: &Value| r["config"]["engines"][1]["kv_tokens"].as_u64();
    assert_eq!(decode(&vllm), Some(kv(&vllm)));
    assert_states(&help, "--decode-kv-tokens", "as --prefill-kv-tokens");

    // The step-time model: the default model's profile, not the polynomial.
    let perf = engine(&vllm, "perf");
    assert_states(&help, "--perf", perf.as_str().expect("perf"));
    assert!(perf.as_str().is_some_and(|p| p.starts_with("profile:")));

    // KV bytes per token: the default model's, and the model-free size.
    let bpt = |r: &Value| r["config"]["transfer"]["bytes_per_token"].as_u64();
    let (model_bpt, free_bpt) = (bpt(&vllm).expect("bytes"), bpt(&poly).expect("bytes"));
    assert_states(
        &help,
        "--bytes-per-token",
        &format!("{model_bpt} for the default"),
    );
    assert_states(
        &help,
        "--bytes-per-token",
        &format!("{free_bpt} (a Llama-3-8B-like 128 KiB) with --perf"),
    );
    assert_eq!(free_bpt, 128 * 1024);

    // The running batch: vLLM's fixed limit; SGLang's from its pool.
    let running = |r: &Value| engine(r, "max_running").as_u64().expect("max_running");
    assert_states(
        &help,
        "--max-running",
        &format!("vllm and trtllm {}", running(&vllm)),
    );
    assert_states(
        &help,
        "--max-running",
        &format!("so {} for the default pool", running(&sglang)),
    );

    // Block sizes per backend.
    let block = |r: &Value| engine(r, "block_size").as_u64().expect("block_size");
    assert_states(
        &help,
        "--block-size",
        &format!("{} for vllm and trtllm", block(&vllm)),
    );
    assert_states(
        &help,
        "--block-size",
        &format!("{} for sglang", block(&sglang)),
    );
}

#[test]
fn the_synthetic_workload_is_what_help_says() {
    let help = run(&["replay", "--help"]);
    let r: Value = serde_json::from_str(&run(&["replay", "--json"])).expect("report JSON");
    assert_eq!(
        stated_default(&help, "--requests"),
        r["num_requests"].to_string()
    );
    let w = &r["config"]["workload"];
    assert_eq!(w["requests"], r["num_requests"]);
    let rate = w["rate_per_s"].as_f64().expect("rate");
    assert_eq!(stated_default(&help, "--rate").parse::<f64>(), Ok(rate));
}

#[test]
fn each_experiment_has_its_own_help() {
    let e4 = run(&["experiment", "e4", "--help"]);
    assert!(e4.starts_with("E1, E3, E4 and E4-ablate"), "{e4}");
    assert!(e4.contains("--sessions <SESSIONS>") && e4.contains("--json"));
    assert!(
        !e4.contains("--naive"),
        "run's configuration is not e4's flag"
    );
    let one = run(&["experiment", "run", "--help"]);
    assert!(one.starts_with("One configuration"), "{one}");
    for flag in [
        "--naive",
        "--enable-d-to-p-sync",
        "--disable-prefill-bypass",
        "--sessions",
    ] {
        assert!(one.contains(flag), "{flag}: {one}");
    }
    let all = run(&["experiment", "--help"]);
    assert!(all.contains("\n  e4 ") && all.contains("\n  run "), "{all}");
    // The old spellings still run; e4 refuses run's configuration flags.
    let out = Command::new(BIN)
        .args(["experiment", "e4", "--naive"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--naive"));
}
