//! The step-time terms beyond a profile's tables, as a replay feels them:
//! `step_ms` lengthens every decode pass, so TPOT, by about itself; terms
//! all off (`--overheads off`, what every shipped profile carries) replay
//! byte for byte as the profile alone; the report names the terms only
//! when one is on; a capture rule reads each engine's own batch limit.

use handoff_perf::{CudaGraph, Overheads, Pass, PerfModel, PerfProfile};
use handoff_profiles::profile_file;
use handoff_replay::{make_core, DeploymentConfig, EngineSpec, PerfChoice, Replay};
use handoff_workload::{LengthDist, SyntheticConfig, SyntheticWorkload};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

fn shipped() -> PerfProfile {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../profiles/aic/qwen3-8b-h100-tp1-vllm.json");
    profile_file::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn with(o: Overheads) -> PerfChoice {
    PerfChoice::Profile(Arc::new(shipped().with_overheads(o).unwrap()))
}

/// A decode-bound replay: 32 short prompts generating 256 tokens each, on
/// one prefill and one decode worker.
fn run(perf: PerfChoice) -> Value {
    let spec = EngineSpec {
        perf,
        kv_tokens: 1 << 20,
        ..EngineSpec::default()
    };
    let cfg = DeploymentConfig {
        engines: vec![spec.clone(); 2],
        ..DeploymentConfig::default()
    };
    let items = SyntheticWorkload::new(SyntheticConfig {
        requests: 32,
        input_tokens: LengthDist::Fixed(256),
        output_tokens: LengthDist::Fixed(256),
        ..SyntheticConfig::default()
    });
    let (report, _) = Replay::new(cfg, items, |_, _| make_core(&spec).unwrap())
        .expect("the cores publish at the deployment's block size")
        .run();
    serde_json::to_value(&report).unwrap()
}

fn mean_tpot(r: &Value) -> f64 {
    r["tpot_ms"]["mean"].as_f64().expect("tpot_ms.mean")
}

#[test]
fn step_ms_lengthens_tpot_by_about_itself() {
    let base = run(PerfChoice::Profile(Arc::new(shipped())));
    let slow = run(with(Overheads {
        step_ms: 4.0,
        ..Overheads::default()
    }));
    let (a, b) = (mean_tpot(&base), mean_tpot(&slow));
    assert!(a > 0.0, "{a}");
    let extra = b - a;
    assert!((3.6..=4.6).contains(&extra), "TPOT {a} -> {b}: +{extra} ms");
    assert_eq!(
        slow["config"]["engines"][0]["perf_overheads"]["step_ms"], 4.0,
        "{}",
        slow["config"]["engines"]
    );
}

#[test]
fn terms_all_off_replay_as_the_profile_alone() {
    let base = run(PerfChoice::Profile(Arc::new(shipped())));
    let off = run(with(Overheads::default()));
    assert_eq!(
        serde_json::to_string(&base).unwrap(),
        serde_json::to_string(&off).unwrap()
    );
    let engines = base["config"]["engines"].as_array().unwrap();
    assert!(engines.iter().all(|e| e.get("perf_overheads").is_none()));
}

#[test]
fn a_capture_rule_reads_each_engines_batch_limit() {
    let choice = with(Overheads {
        cuda_graph: CudaGraph::Vllm,
        ..Overheads::default()
    });
    let table = PerfChoice::Profile(Arc::new(shipped())).model(1.0);
    let pass = |b: u64| Pass::decode(b, b * 1000, 1 << 22);
    // max_num_seqs 2: graphs of 1, 2 and 4; a batch of 3 runs as 4, of 5
    // eagerly.
    let small = choice.model_for(1.0, 2, 8192);
    assert_eq!(small.pass(&pass(5)), table.pass(&pass(5)));
    assert_eq!(
        small.pass(&Pass::decode(3, 3000, 1 << 22)),
        table.pass(&Pass::decode(4, 3000, 1 << 22))
    );
    // max_num_seqs 256: graphs up to 512; a batch of 5 runs as 8.
    let big = choice.model_for(1.0, 256, 8192);
    assert_eq!(
        big.pass(&pass(5)),
        table.pass(&Pass::decode(8, 5000, 1 << 22))
    );
}
