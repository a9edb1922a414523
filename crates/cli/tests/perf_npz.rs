//! `--perf npz:FILE` end to end: a Dynamo profiler archive, written here in
//! `np.savez`'s layout, times a replay.

use handoff_perf::GridArrays;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_handoff-mocker");

/// Prefill 100 ms at any length, decode 7 ms at any (active KV tokens,
/// context length): flat grids, so every ITL is the table's.
fn flat(itl_ms: f64) -> GridArrays {
    GridArrays {
        prefill_isl: vec![1.0, 1e6],
        prefill_ttft_ms: vec![100.0, 100.0],
        decode_active_kv_tokens: vec![0.0, 1e7],
        decode_context_length: vec![1.0, 1e6],
        decode_itl: vec![itl_ms; 4],
        decode_itl_shape: (2, 2),
    }
}

fn write(name: &str, arrays: &GridArrays) -> std::path::PathBuf {
    let path = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let bytes = handoff_profiles::npz_file::to_npz_bytes(arrays).expect("npz bytes");
    std::fs::write(&path, bytes).expect("write npz");
    path
}

#[test]
fn replay_is_timed_by_a_dynamo_npz_profile() {
    for itl in [7.0, 12.5] {
        let path = write(&format!("flat-{itl}.npz"), &flat(itl));
        // No decode computes a short uncached tail itself (vLLM's
        // `kv_recompute_threshold`), so every decode pass is decode only.
        let out = Command::new(BIN)
            .args([
                "replay",
                "--json",
                "--kv-recompute-threshold",
                "0",
                "--perf",
            ])
            .arg(format!("npz:{}", path.display()))
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(
            v["config"]["engines"][0]["perf"],
            format!("npz:flat-{itl}.npz")
        );
        // Every decode pass costs the table's ITL; every prefill pass 100 ms.
        for k in ["min_itl_ms", "mean_itl_ms", "max_itl_ms"] {
            assert_eq!(v[k].as_f64(), Some(itl), "{k}");
        }
        assert!(v["min_ttft_ms"].as_f64().expect("ttft") >= 100.0);
    }
}

#[test]
fn a_bad_npz_profile_fails_naming_the_array() {
    let mut bad = flat(7.0);
    bad.decode_context_length = vec![5.0, 5.0];
    let path = write("unsorted.npz", &bad);
    let out = Command::new(BIN)
        .args(["replay", "--json", "--perf"])
        .arg(format!("npz:{}", path.display()))
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "no partial report");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--perf: ")
            && err.contains("unsorted.npz: decode_context_length: [1] is not above"),
        "{err}"
    );
}

/// Why the shipped `.npz` and the profile it was converted from disagree on
/// long prompts (profiles/README.md, "The 4B pair"): the conversion is
/// exact where Dynamo's format can say anything (prefill with no cached
/// prefix), and Dynamo's format has no cached-prefix axis, so a chunk that
/// attends over earlier chunks of its prompt (or a prefix-cache hit) costs
/// its new tokens alone under the `.npz`.
#[test]
fn the_shipped_npz_is_its_profile_without_attention_over_a_cached_prefix() {
    use handoff_deployment::PerfChoice;
    use handoff_perf::{Pass, PerfModel};
    use std::sync::Arc;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../profiles");
    let json = handoff_profiles::profile_file::load(&dir.join("qwen3-4b-a100-sglang.json"))
        .expect("profile");
    let npz = handoff_profiles::npz_file::load(&dir.join("qwen3-4b-a100-sglang-dynamo.npz"))
        .expect("npz");
    let (json, npz) = (
        PerfChoice::Profile(Arc::new(json)).model(1.0),
        PerfChoice::Npz(Arc::new(npz)).model(1.0),
    );
    let ms = |m: &handoff_perf::StepModel, new: u64, cached: u64| {
        m.pass(&Pass::prefill(new, cached)).as_nanos() as f64 / 1e6
    };
    // No cached prefix: the same time at every point of the profile's axis.
    for new in [128, 1024, 4096, 8192, 16384, 131072] {
        let (j, n) = (ms(&json, new, 0), ms(&npz, new, 0));
        assert!((j - n).abs() < 1e-3, "{new} new tokens: {j} ms / {n} ms");
    }
    // The eighth 8192-token chunk of a 64K-token prompt: the profile adds
    // its attention over the 57344 tokens before it (about 1.2 s at the
    // fitted 2.54e-6 ms per new x cached token), the .npz nothing.
    let (j, n) = (ms(&json, 8192, 57344), ms(&npz, 8192, 57344));
    assert_eq!(n, ms(&npz, 8192, 0));
    assert!(j > 4.0 * n, "profile {j} ms, npz {n} ms");
    let attention = j - ms(&json, 8192, 0);
    assert!((1100.0..1300.0).contains(&attention), "{attention} ms");
}
