//! Picking a profile end to end: every GPU a profile exists for, built in
//! or in a folder (`--profiles-dir`, else `HANDOFF_PROFILES_DIR`; the flag
//! wins), and `--model`/`--tp` beside `--perf profile:FILE` (the file times
//! the passes, the model sizes KV; a contradiction is an error naming both).

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_handoff-mocker");
const ENV: &str = "HANDOFF_PROFILES_DIR";

fn aic(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../profiles/aic")
        .join(name)
}

/// A short replay with `flags`, `env_dir` as `HANDOFF_PROFILES_DIR` (unset
/// otherwise, whatever the caller's environment says).
fn replay(flags: &[&str], env_dir: Option<&Path>) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(["replay", "--json", "--requests", "4", "--seed", "1"])
        .args(flags)
        .env_remove(ENV);
    if let Some(d) = env_dir {
        cmd.env(ENV, d);
    }
    cmd.output().expect("run")
}

fn report(flags: &[&str], env_dir: Option<&Path>) -> Value {
    let out = replay(flags, env_dir);
    assert!(
        out.status.success(),
        "{flags:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

/// The one line a refused run prints; it must print no report.
fn refusal(flags: &[&str], env_dir: Option<&Path>) -> String {
    let out = replay(flags, env_dir);
    assert!(!out.status.success(), "{flags:?} ran");
    assert!(out.stdout.is_empty(), "no partial report");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn perf(r: &Value) -> &str {
    r["config"]["engines"][0]["perf"].as_str().expect("perf")
}

fn kv_tokens(r: &Value) -> u64 {
    r["config"]["engines"][0]["kv_tokens"]
        .as_u64()
        .expect("kv_tokens")
}

fn bytes_per_token(r: &Value) -> u64 {
    r["config"]["transfer"]["bytes_per_token"]
        .as_u64()
        .expect("bytes_per_token")
}

/// A fresh folder under the test target dir.
fn temp_dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("mkdir");
    d
}

/// `qwen3-8b-h100-tp1-vllm.json` into `dir` as GPU `gpu` with `mem` bytes
/// of memory: the file a user's export of another system would be.
fn copy_as_gpu(dir: &Path, gpu: &str, mem: u64) {
    let text = std::fs::read_to_string(aic("qwen3-8b-h100-tp1-vllm.json")).expect("read");
    let text = text
        .replace(
            "\"name\": \"qwen3-8b-h100-tp1-vllm\"",
            &format!("\"name\": \"qwen3-8b-{gpu}-tp1-vllm\""),
        )
        .replace("\"gpu\": \"h100\"", &format!("\"gpu\": \"{gpu}\""))
        .replace(
            "\"gpu_memory_bytes\": 85899345920",
            &format!("\"gpu_memory_bytes\": {mem}"),
        );
    assert!(text.contains(&format!("\"gpu_memory_bytes\": {mem}")));
    std::fs::write(dir.join(format!("qwen3-8b-{gpu}-tp1-vllm.json")), text).expect("write");
}

#[test]
fn an_rtx_pro_6000_profile_is_built_in_and_selected() {
    for backend in ["vllm", "sglang"] {
        let r = report(
            &[
                "--backend",
                backend,
                "--model",
                "llama-3.1-8b",
                "--gpu",
                "rtxpro6000",
            ],
            None,
        );
        assert_eq!(
            perf(&r),
            format!("profile:llama-3.1-8b-rtxpro6000-tp1-{backend}")
        );
        assert_eq!(r["config"]["model"]["gpu"], "rtxpro6000");
    }
    let r = report(
        &["--model", "qwen3-32b", "--gpu", "h100", "--tp", "8"],
        None,
    );
    assert_eq!(perf(&r), "profile:qwen3-32b-h100-tp8-vllm");
}

#[test]
fn a_folder_adds_gpus_and_the_flag_wins_over_the_environment() {
    let env_dir = temp_dir("profiles-env");
    let flag_dir = temp_dir("profiles-flag");
    copy_as_gpu(&env_dir, "shared", 90 << 30);
    copy_as_gpu(&env_dir, "envonly", 90 << 30);
    copy_as_gpu(&flag_dir, "shared", 100 << 30);
    let flag = flag_dir.to_str().expect("utf-8 path");
    let shared = ["--model", "qwen3-8b", "--gpu", "shared"];

    // Neither: the GPU is unknown, and the miss lists the model's profiles.
    let e = refusal(&shared, None);
    assert!(
        e.contains("no profile in the profiles built in")
            && e.contains("for qwen3-8b there are: ")
            && e.contains("--model qwen3-8b --gpu h100 --tp 1 --backend vllm")
            && !e.contains("llama"),
        "{e}"
    );
    // The environment's folder.
    let from_env = report(&shared, Some(&env_dir));
    assert_eq!(perf(&from_env), "profile:qwen3-8b-shared-tp1-vllm");
    let envonly = report(&["--model", "qwen3-8b", "--gpu", "envonly"], Some(&env_dir));
    assert_eq!(kv_tokens(&envonly), kv_tokens(&from_env));
    // The flag's folder, with or without the environment's: more memory,
    // a larger pool; and the built-in profiles stay selectable beside it.
    let from_flag = report(&[&shared[..], &["--profiles-dir", flag]].concat(), None);
    assert!(kv_tokens(&from_flag) > kv_tokens(&from_env));
    let both = report(
        &[&shared[..], &["--profiles-dir", flag]].concat(),
        Some(&env_dir),
    );
    assert_eq!(kv_tokens(&both), kv_tokens(&from_flag));
    let e = refusal(
        &[
            "--model",
            "qwen3-8b",
            "--gpu",
            "envonly",
            "--profiles-dir",
            flag,
        ],
        Some(&env_dir),
    );
    assert!(
        e.contains(&format!("--profiles-dir {flag} or the profiles built in")),
        "{e}"
    );
    let h100 = report(
        &[
            "--model",
            "qwen3-8b",
            "--gpu",
            "h100",
            "--profiles-dir",
            flag,
        ],
        None,
    );
    assert_eq!(perf(&h100), "profile:qwen3-8b-h100-tp1-vllm");
    // A missing folder named by the environment is named as such.
    let e = refusal(&shared, Some(Path::new("/nonexistent/profiles")));
    assert!(
        e.contains("HANDOFF_PROFILES_DIR /nonexistent/profiles"),
        "{e}"
    );
}

#[test]
fn model_with_a_perf_file_sizes_kv_from_the_model() {
    // The file anywhere, under any name: its deployment is the model's.
    let dir = temp_dir("profiles-perf");
    let file = dir.join("mine.json");
    std::fs::copy(aic("qwen3-32b-rtxpro6000-tp2-vllm.json"), &file).expect("copy");
    let perf_flag = format!("profile:{}", file.display());
    let r = report(&["--model", "qwen3-32b", "--perf", &perf_flag], None);
    assert_eq!(perf(&r), "profile:qwen3-32b-rtxpro6000-tp2-vllm");
    // 2 × 64 layers × 8 KV heads × 128 × 2 bytes, and the pool of Qwen3-32B
    // at TP 2 on an RTX PRO 6000, as --gpu would size it.
    assert_eq!(bytes_per_token(&r), 262_144);
    let by_gpu = report(&["--model", "qwen3-32b", "--gpu", "rtxpro6000"], None);
    assert_eq!(kv_tokens(&r), kv_tokens(&by_gpu));
    assert_ne!(kv_tokens(&r), 262_144, "not the model-free pool");
    assert_eq!(r["config"]["model"]["tp"], 2);
    // --tp alone with the file: checked, and the file's model sizes KV.
    let tp = report(&["--tp", "2", "--perf", &perf_flag], None);
    assert_eq!(kv_tokens(&tp), kv_tokens(&r));
    // --perf alone stays model-free.
    let alone = report(&["--perf", &perf_flag], None);
    assert_eq!(kv_tokens(&alone), 262_144);
    assert_eq!(bytes_per_token(&alone), 131_072);
}

#[test]
fn a_perf_file_that_contradicts_the_flags_is_refused_naming_both() {
    let tp1 = aic("qwen3-8b-h100-tp1-vllm.json");
    let perf_flag = format!("profile:{}", tp1.display());
    let e = refusal(&["--tp", "2", "--perf", &perf_flag], None);
    assert!(
        e.contains("--tp 2 but the file is for TP 1") && e.contains("qwen3-8b-h100-tp1-vllm.json"),
        "{e}"
    );
    let e = refusal(&["--model", "llama-3.1-8b", "--perf", &perf_flag], None);
    assert!(
        e.contains("--model llama-3.1-8b but the file is for model qwen3-8b"),
        "{e}"
    );
    let e = refusal(
        &[
            "--backend",
            "sglang",
            "--model",
            "qwen3-8b",
            "--perf",
            &perf_flag,
        ],
        None,
    );
    assert!(
        e.contains("--backend sglang but the file times vllm"),
        "{e}"
    );
    let e = refusal(&["--tp", "2", "--perf", "dynamo-polynomial"], None);
    assert!(e.contains("--tp 2: needs --model"), "{e}");
}
