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
        let out = Command::new(BIN)
            .args(["replay", "--json", "--perf"])
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
