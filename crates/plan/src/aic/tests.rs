//! Tests of the reading of AIConfigurator's CSV and of the check.

use super::check::aic_meets;
use super::read::cells;
use super::*;
use crate::runner::Runner;
use handoff_deployment::SloSpec;
use serde_json::{json, Value};
use std::path::Path;

fn sample(name: &str) -> String {
    // The command line's test data: one copy of AIConfigurator's files.
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../cli/tests/data/aic")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The samples are AIConfigurator's own output (`aiconfigurator cli
/// default --model-path Qwen/Qwen3-8B --total-gpus 8 --system h100_sxm
/// --backend vllm --isl 4000 --osl 500 --ttft 600 --tpot 20`, docs/sizing.md).
#[test]
fn reads_the_disaggregated_sample() {
    let file = parse(&sample("disagg/best_config_topn.csv")).unwrap();
    assert!(file.bad.is_empty());
    let rows = file.rows;
    assert_eq!(rows.len(), 3);
    let r = &rows[0];
    assert_eq!((r.isl, r.osl, r.prefix), (4000, 500, 0));
    assert_eq!((r.prefill, r.decode, r.concurrency, r.gpus), (3, 5, 280, 8));
    assert_eq!((r.p_par, r.d_par), ([1, 1, 1], [1, 1, 1]));
    assert_eq!((r.ttft_ms, r.tpot_ms), (177.988, 19.604));
    assert_eq!((r.tok_s_gpu, r.tok_s_user), (1645.938, 51.01));
    assert_eq!(r.layout(), "3P+5D tp1");
    assert_eq!(r.line, 2);
    assert!(r.unsupported().is_none());
    // 4P at TP1 with 1D at TP4: one --tp here.
    assert_eq!(rows[1].d_par, [4, 1, 1]);
    assert_eq!(
        rows[1].unsupported(),
        Some(Skip::PoolsDiffer {
            prefill: (1, 1),
            decode: (4, 1)
        })
    );
    assert!(rows[1]
        .unsupported()
        .unwrap()
        .to_string()
        .contains("differ"));
    let pareto = parse(&sample("disagg/pareto.csv")).unwrap();
    assert_eq!((pareto.rows.len(), pareto.bad.len()), (21, 0));
}

#[test]
fn reads_the_aggregated_sample() {
    let rows = parse(&sample("agg/best_config_topn.csv")).unwrap().rows;
    assert_eq!(rows.len(), 4);
    // One replica per row: TP2 at 64 in flight on 2 GPUs.
    assert_eq!((rows[0].prefill, rows[0].decode), (1, 0));
    assert_eq!(
        (rows[0].p_par, rows[0].concurrency, rows[0].gpus),
        ([2, 1, 1], 64, 2)
    );
    assert_eq!(rows[1].layout(), "1x agg tp1");
    assert_eq!(rows[1].p_par, rows[1].d_par);
}

#[test]
fn errors_name_line_and_column() {
    assert_eq!(parse(""), Err(AicError::Empty));
    assert_eq!(
        parse("isl,osl\n1,2\n"),
        Err(AicError::MissingColumn("concurrency"))
    );
    let head = "isl,osl,concurrency,ttft,tpot,tokens/s/gpu,tokens/s/user,num_total_gpus,tp";
    // A line that is not a row is kept with its line; the rows around
    // it are read.
    let good = "4000,500,8,1,1,1,1,1,1";
    let f = parse(&format!("{head}\n{good}\n4000,500,x,1,1,1,1,1,1\n{good}\n")).unwrap();
    assert_eq!(f.rows.iter().map(|r| r.line).collect::<Vec<_>>(), [2, 4]);
    assert_eq!(
        f.bad,
        [AicError::Cell {
            line: 3,
            column: "concurrency",
            value: "x".into()
        }]
    );
    assert_eq!(f.bad[0].line(), 3);
    let f = parse(&format!("{head}\n4000,500,1,1,1,1,1,1\n")).unwrap();
    assert_eq!(
        f.bad,
        [AicError::Width {
            line: 2,
            cells: 8,
            header: 9
        }]
    );
    let f = parse(&format!("{head}\n4000,500,1,1,1,1,1,1,-2\n")).unwrap();
    assert!(f.bad[0].to_string().contains("`tp`"), "{:?}", f.bad);
    let many = format!("{head}\n{}", "x\n".repeat(MAX_ROWS + 1));
    assert_eq!(parse(&many), Err(AicError::TooMany));
}

#[test]
fn quoted_cells_split_as_pandas_writes_them() {
    assert_eq!(
        cells(r#"a,"b,c","say ""x""",d"#),
        ["a", "b,c", "say \"x\"", "d"]
    );
}

#[test]
fn a_row_of_zero_length_or_parallelism_is_unsimulable() {
    let head = "isl,osl,concurrency,ttft,tpot,tokens/s/gpu,tokens/s/user,num_total_gpus,tp";
    let f = parse(&format!(
        "{head}\n4000,0,8,1,1,1,1,1,1\n0,5,8,1,1,1,1,1,1\n9,5,8,1,1,1,1,1,0\n9,5,8,1,1,1,1,1,1\n"
    ))
    .unwrap();
    let why: Vec<Option<String>> = f
        .rows
        .iter()
        .map(|r| r.unsimulable().map(|u| u.to_string()))
        .collect();
    assert!(why[0].as_deref().unwrap().contains("osl 0"), "{why:?}");
    assert!(why[1].as_deref().unwrap().contains("isl 0"), "{why:?}");
    assert!(
        why[2].as_deref().unwrap().contains("parallelism of 0"),
        "{why:?}"
    );
    assert_eq!(why[3], None);
}

#[test]
fn aic_meets_reads_its_single_estimate() {
    let rows = parse(&sample("disagg/best_config_topn.csv")).unwrap().rows;
    let slo: SloSpec = "ttft:p90=600ms,tpot:p90=20ms".parse().unwrap();
    // 177.988 ms TTFT and 19.604 ms TPOT, and E2E 9960 ms.
    assert!(aic_meets(&rows[0], &"e2e:p90=9961ms".parse().unwrap()));
    assert!(!aic_meets(&rows[0], &"e2e:p90=9959ms".parse().unwrap()));
    assert!(aic_meets(&rows[0], &slo));
    let tight: SloSpec = "tpot:p50=1ms".parse().unwrap();
    assert!(!aic_meets(&rows[0], &tight));
}

/// A runner that answers each row with the figures `compare` reads, and
/// refuses the row numbers it is told to.
struct Fake {
    refuse: usize,
}

impl Runner<AicRun> for Fake {
    type Config = usize;
    fn prepare(&self, index: usize, _: &AicRun) -> Result<usize, String> {
        if index == self.refuse {
            return Err("a flag the runner refused".into());
        }
        Ok(index)
    }
    fn run_all(&self, configs: &[usize]) -> Vec<Value> {
        configs
            .iter()
            .map(|i| {
                json!({"index": i, "error": null, "mean_ttft_ms": 100.0, "median_ttft_ms": 90.0,
                       "p90_ttft_ms": 150.0, "p99_ttft_ms": 200.0, "mean_tpot_ms": 10.0,
                       "median_tpot_ms": 10.0, "p90_tpot_ms": 11.0, "p99_tpot_ms": 12.0,
                       "slo.holds": true})
            })
            .collect()
    }
}

#[test]
fn each_line_is_run_skipped_or_refused_with_its_reason() {
    let head = "isl,osl,concurrency,ttft,tpot,tokens/s/gpu,tokens/s/user,num_total_gpus,tp,pp";
    let text = format!(
        "{head}\n100,10,4,1,1,1,1,1,1,1\n100,0,4,1,1,1,1,1,1,1\n100,10,4,1,1,1,1,2,2,1\n\
         100,10,4,1,1,1,1,2,1,2\n100,10,x,1,1,1,1,1,1,1\n100,10,4,1,1,1,1,1,1,1\n"
    );
    let file = parse(&text).unwrap();
    let out = std::env::temp_dir().join(format!("handoff-plan-aic-{}", std::process::id()));
    let slo: SloSpec = "ttft:p90=600ms".parse().unwrap();
    // Row numbers count rows read: the last line (7) is row 4.
    let c = check(&file, &slo, &[1], &out, &Fake { refuse: 4 });
    let _ = std::fs::remove_dir_all(&out);
    let lines: Vec<u64> = c.rows.iter().map(|r| r["line"].as_u64().unwrap()).collect();
    assert_eq!(lines, [2, 3, 4, 5, 6, 7]);
    assert_eq!(c.rows[0]["simulated"]["ttft_ms"]["p90"], 150.0);
    assert!(c.rows[1]["refused"].as_str().unwrap().contains("osl 0"));
    assert_eq!(c.rows[2]["skipped"], "no profile at TP2");
    assert_eq!(c.rows[3]["skipped"], "pipeline parallelism is not modelled");
    assert!(c.rows[4]["refused"]
        .as_str()
        .unwrap()
        .contains("`concurrency`"));
    assert_eq!(c.rows[5]["refused"], "a flag the runner refused");
    assert_eq!((c.refused, c.lines), (3, 6));
    let s = c.summary("f.csv", &slo);
    assert_eq!(s["refused_rows"], 3);
    let t = c.table();
    assert_eq!(t.len(), 7);
    assert!(t[3].contains("skipped: no profile at TP2"), "{}", t[3]);
    assert!(t[5].contains("   6 | refused: line 6"), "{}", t[5]);
}
