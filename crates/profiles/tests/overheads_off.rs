//! Every shipped profile has its step-time terms off, and then a model of
//! it times every pass exactly as the tables do (the path from before the
//! terms: same bits); a calibrated copy written with `with_overheads`
//! reads back with its terms on.

use handoff_core::Duration;
use handoff_perf::{CudaGraph, Overheads, Pass, PerfModel, ProfilePerf};
use handoff_profiles::profile_file::{load_file, parse_file, with_overheads};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn shipped() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../profiles");
    let mut files = vec![root.join("qwen3-4b-a100-sglang.json")];
    let mut aic: Vec<PathBuf> = std::fs::read_dir(root.join("aic"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    aic.sort();
    assert!(!aic.is_empty());
    files.extend(aic);
    files
}

/// The table path's time, as `ProfilePerf` computed it before the terms:
/// the lookup in ms, rounded to whole ns, at least 1 µs.
fn table_time(p: &handoff_perf::PerfProfile, pass: &Pass) -> Duration {
    let ms = p.pass_ms(pass);
    Duration::from_nanos((ms * 1e6).round().max(0.0) as u64).max(Duration::from_micros(1))
}

fn grid() -> Vec<Pass> {
    let mut v = Vec::new();
    for new in [1u64, 17, 512, 3000, 8192, 40_000] {
        for cached in [0u64, 100, 9000, 70_000] {
            v.push(Pass::prefill(new, cached));
            let mut mixed = Pass::prefill(new, cached);
            for i in 0..7 {
                mixed.add_decode(500 + 300 * i);
            }
            v.push(mixed);
        }
    }
    for batch in [1u64, 3, 7, 8, 9, 31, 64, 100, 129, 256, 511, 1024, 3000] {
        for per_seq in [1u64, 200, 1500, 9000, 40_000, 200_000] {
            v.push(Pass::decode(batch, batch * per_seq, 1 << 24));
        }
    }
    v
}

#[test]
fn shipped_profiles_time_passes_as_their_tables_bit_for_bit() {
    for path in shipped() {
        let f = load_file(&path).unwrap();
        assert!(f.overheads.is_none(), "{}", path.display());
        assert!(f.profile.overheads().is_off());
        let m = ProfilePerf::new(Arc::new(f.profile.clone()), 1.0);
        assert!(!m.has_terms(), "{}", path.display());
        let engine = ProfilePerf::for_engine(Arc::new(f.profile.clone()), 1.0, 256, 8192);
        assert!(!engine.has_terms());
        for pass in grid() {
            let want = table_time(&f.profile, &pass);
            assert_eq!(m.pass(&pass), want, "{} {pass:?}", path.display());
            assert_eq!(engine.pass_uncounted(&pass), want);
        }
        // The decode fast path is untouched: the same times pass by pass.
        let mut run = Vec::new();
        m.decode_run(48, 48 * 700, 1 << 24, 40, &mut |d| {
            run.push(d);
            true
        });
        for (k, d) in run.iter().enumerate() {
            let pass = Pass::decode(48, 48 * 700 + 48 * k as u64, 1 << 24);
            assert_eq!(*d, table_time(&f.profile, &pass));
        }
    }
}

#[test]
fn a_calibrated_copy_of_a_shipped_profile_reads_back_with_its_terms() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../profiles/aic/qwen3-32b-h100-tp2-vllm.json");
    let path = if path.exists() {
        path
    } else {
        shipped().pop().unwrap()
    };
    let text = std::fs::read_to_string(&path).unwrap();
    let o = Overheads {
        step_ms: 4.0,
        cuda_graph: CudaGraph::Vllm,
        allreduce_us: 6.0,
        ..Overheads::default()
    };
    let written = with_overheads(&text, &o, "calibrated.json").unwrap();
    let f = parse_file(&written, "calibrated.json").unwrap();
    assert_eq!(f.overheads.as_ref(), Some(&o));
    let base = load_file(&path).unwrap();
    let on = ProfilePerf::for_engine(Arc::new(f.profile), 1.0, 256, 8192);
    let off = ProfilePerf::new(Arc::new(base.profile), 1.0);
    let pass = Pass::decode(100, 100 * 2000, 1 << 24);
    // 4 ms per pass at least, and the pass is padded to 104.
    assert!(on.pass(&pass) >= off.pass(&pass) + Duration::from_millis(4));
}
