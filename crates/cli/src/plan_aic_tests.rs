//! Tests of `plan --check-aic`'s reading of AIConfigurator's CSV.

use super::*;

fn sample(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/aic")
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
    assert!(rows[1].unsupported().unwrap().contains("differ"));
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
    let why: Vec<Option<String>> = f.rows.iter().map(AicRow::unsimulable).collect();
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
