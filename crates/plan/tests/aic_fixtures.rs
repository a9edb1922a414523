//! AIConfigurator 0.12.0's picks for issue 53's three shapes
//! (`tests/data/aic/`, see its NOTICE.md): every committed CSV reads
//! through [`handoff_plan::aic::parse`] with no bad line, as many rows as
//! the file has, the model and backend of its shape, and the parallel
//! layouts AIC chose (attention DP with expert parallelism for the MoE
//! shape).

use handoff_plan::aic::{parse, AicBackend, AicFile, Parallel};
use std::path::{Path, PathBuf};

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/aic")
}

/// (folder, Hugging Face id, backend, rows of agg top, agg pareto, disagg
/// top, disagg pareto).
const SHAPES: [(&str, &str, AicBackend, [usize; 4]); 3] = [
    (
        "llama-3.1-8b-h200-sglang-isl2000-osl1000-16gpu",
        "meta-llama/Meta-Llama-3.1-8B",
        AicBackend::Sglang,
        [5, 55, 4, 23],
    ),
    (
        "qwen3-32b-h100-vllm-isl8000-osl300-16gpu",
        "Qwen/Qwen3-32B",
        AicBackend::Vllm,
        [4, 39, 4, 10],
    ),
    (
        "qwen3-30b-a3b-b200-vllm-isl1000-osl2000-8gpu",
        "Qwen/Qwen3-30B-A3B",
        AicBackend::Vllm,
        [5, 59, 5, 33],
    ),
];

const FILES: [&str; 4] = [
    "agg/best_config_topn.csv",
    "agg/pareto.csv",
    "disagg/best_config_topn.csv",
    "disagg/pareto.csv",
];

fn read(shape: &str, file: &str) -> AicFile {
    let path = data().join(shape).join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    parse(&text).unwrap_or_else(|e| panic!("{path:?}: {e:?}"))
}

#[test]
fn every_fixture_reads_whole_with_its_shape_s_model_and_backend() {
    let (mut top, mut pareto) = (0, 0);
    for (shape, model, backend, counts) in SHAPES {
        for (file, want) in FILES.iter().zip(counts) {
            let f = read(shape, file);
            assert!(f.bad.is_empty(), "{shape}/{file}: {:?}", f.bad);
            assert_eq!(f.rows.len(), want, "{shape}/{file}");
            let aggregated = file.starts_with("agg/");
            for r in &f.rows {
                assert_eq!(r.model.as_deref(), Some(model), "{shape}/{file}:{}", r.line);
                assert_eq!(r.backend[0], Some(backend), "{shape}/{file}:{}", r.line);
                assert_eq!(r.aggregated(), aggregated, "{shape}/{file}:{}", r.line);
                assert_eq!(r.unsimulable(), None, "{shape}/{file}:{}", r.line);
            }
            // Report numbering is the CSV's: the header is line 1.
            assert_eq!(f.rows.first().map(|r| r.line), Some(2), "{shape}/{file}");
            if file.ends_with("pareto.csv") {
                pareto += want;
            } else {
                top += want;
            }
        }
    }
    // Issue 53's count of top rows; its pareto count (211) was another run's.
    assert_eq!((top, pareto), (27, 219));
}

/// The layouts of a file's rows, each as `(prefill or aggregated, decode)`.
fn layouts(shape: &str, file: &str) -> Vec<(Parallel, Parallel)> {
    read(shape, file)
        .rows
        .iter()
        .map(|r| (r.p_par, r.d_par))
        .collect()
}

#[test]
fn the_moe_shape_s_rows_carry_attention_dp_and_expert_parallelism() {
    let shape = SHAPES[2].0;
    let agg = layouts(shape, "agg/best_config_topn.csv");
    // AIC's pick: TP 1 × attention DP 2, experts over EP 2.
    let pick = agg[0].0;
    assert_eq!(
        (pick.tp, pick.dp, pick.moe_tp, pick.moe_ep, pick.cp),
        (1, 2, 1, 2, 1)
    );
    // Every MoE row's experts span its attention width (AIC's rule).
    for file in FILES {
        for (p, d) in layouts(shape, file) {
            for par in [p, d] {
                assert_eq!(par.tp * par.dp, par.moe_tp * par.moe_ep, "{file}: {par}");
            }
        }
    }
    let all: Vec<Parallel> = FILES
        .iter()
        .flat_map(|f| layouts(shape, f))
        .flat_map(|(p, d)| [p, d])
        .collect();
    for ep in [2, 4, 8] {
        assert!(all.iter().any(|p| p.moe_ep == ep && p.dp == ep), "EP {ep}");
    }
}

#[test]
fn the_dense_shapes_use_tp_only_and_one_context_parallel_row() {
    for (shape, ..) in &SHAPES[..2] {
        for file in FILES {
            for (p, d) in layouts(shape, file) {
                for par in [p, d] {
                    assert_eq!(
                        (par.dp, par.moe_tp, par.moe_ep, par.pp),
                        (1, 1, 1, 1),
                        "{shape}/{file}"
                    );
                }
            }
        }
    }
    let llama = layouts(SHAPES[0].0, "agg/best_config_topn.csv");
    let cp: Vec<u32> = llama.iter().map(|(p, _)| p.cp).collect();
    assert_eq!(cp.iter().filter(|c| **c == 2).count(), 1, "{cp:?}");
    let qwen = layouts(SHAPES[1].0, "disagg/best_config_topn.csv");
    assert!(qwen.iter().all(|(p, _)| p.tp == 1));
    assert_eq!(qwen[0].1.tp, 4, "AIC's pick decodes at TP 4");
}
