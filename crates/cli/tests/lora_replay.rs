//! LoRA in replay: a trace names an adapter per request (`lora_name`);
//! `--max-loras` bounds the distinct adapters one vLLM batch schedules
//! (`vllm/v1/core/sched/scheduler.py`, `Scheduler.schedule`, the
//! `scheduled_loras` check in the waiting loop).

use serde_json::Value;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_handoff-mocker");

/// Eight requests at once on four adapters, aggregated on one worker.
fn trace() -> std::path::PathBuf {
    // One file per call: the tests run in parallel in one process.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let p = std::env::temp_dir().join(format!("hm-lora-{}-{n}.jsonl", std::process::id()));
    let mut s = String::new();
    for i in 0..8 {
        s.push_str(&format!(
            "{{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 200, \"hash_ids\": [{a}, {b}], \"lora_name\": \"adapter-{l}\"}}\n",
            a = 10 * i,
            b = 10 * i + 1,
            l = i % 4
        ));
    }
    std::fs::write(&p, s).expect("write trace");
    p
}

fn replay(extra: &[&str]) -> Value {
    let t = trace();
    let mut args = vec![
        "replay",
        "--trace",
        t.to_str().expect("utf-8"),
        "--prefill",
        "1",
        "--decode",
        "0",
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = Command::new(BIN).args(&args).output().expect("run");
    let _ = std::fs::remove_file(&t);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json report")
}

#[test]
fn max_loras_serialises_adapters_in_the_batch() {
    let free = replay(&[]);
    let one = replay(&["--max-loras", "1"]);
    assert_eq!(free["completed_requests"], 8);
    assert_eq!(one["completed_requests"], 8);
    // Without a limit the eight run together; with one adapter per batch
    // the other adapters' requests wait their turn.
    let dur = |r: &Value| r["duration_s"].as_f64().expect("duration");
    assert!(
        dur(&one) > 1.5 * dur(&free),
        "--max-loras 1 took {} s, no limit {} s",
        dur(&one),
        dur(&free)
    );
}

#[test]
fn max_loras_zero_is_refused() {
    let out = Command::new(BIN)
        .args(["replay", "--requests", "1", "--max-loras", "0"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--max-loras"), "{err}");
}

/// SGLang's limit under SGLang's flag name (`--max-loras-per-batch`,
/// `srt/managers/scheduler.py` `get_new_batch_prefill`, the
/// `can_run_lora_batch` check): one adapter per batch serialises them too.
#[test]
fn sglang_max_loras_per_batch_serialises_adapters_in_the_batch() {
    let free = replay(&["--backend", "sglang"]);
    let one = replay(&["--backend", "sglang", "--max-loras-per-batch", "1"]);
    assert_eq!(free["completed_requests"], 8);
    assert_eq!(one["completed_requests"], 8);
    let dur = |r: &Value| r["duration_s"].as_f64().expect("duration");
    assert!(
        dur(&one) > 1.5 * dur(&free),
        "--max-loras-per-batch 1 took {} s, no limit {} s",
        dur(&one),
        dur(&free)
    );
}
