//! Tests of the reading of AIConfigurator's CSV and of the check.

use super::check::aic_meets;
use super::read::cells;
use super::*;
use crate::runner::Runner;
use handoff_deployment::SloSpec;
use serde_json::{json, Value};
use std::path::Path;

const ONE: Parallel = Parallel {
    tp: 1,
    pp: 1,
    dp: 1,
    moe_tp: 1,
    moe_ep: 1,
    cp: 1,
};

/// Profiles of Qwen3-8B (TP1 and TP4 on H100 under vLLM, TP1 under SGLang),
/// Qwen3-32B (TP2, TP4 on H100 under vLLM) and Qwen3-30B-A3B (H100 vLLM:
/// TP1, TP1 DP2 with MoE TP2, TP1 DP2 EP2, TP2 EP2).
fn catalogue() -> Vec<ProfileEntry> {
    let e = |model: &str, hf: &str, tp, backend| ProfileEntry {
        model: model.into(),
        hf_id: hf.into(),
        gpu: "h100".into(),
        tp,
        dp: 1,
        ep: 1,
        backend,
    };
    let moe = |tp, dp, ep| ProfileEntry {
        dp,
        ep,
        ..e("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", tp, AicBackend::Vllm)
    };
    vec![
        moe(1, 1, 1),
        moe(1, 2, 1),
        moe(1, 2, 2),
        moe(2, 1, 2),
        e("qwen3-8b", "Qwen/Qwen3-8B", 1, AicBackend::Vllm),
        e("qwen3-8b", "Qwen/Qwen3-8B", 4, AicBackend::Vllm),
        e("qwen3-8b", "Qwen/Qwen3-8B", 1, AicBackend::Sglang),
        e("qwen3-32b", "Qwen/Qwen3-32B", 2, AicBackend::Vllm),
        e("qwen3-32b", "Qwen/Qwen3-32B", 4, AicBackend::Vllm),
    ]
}

/// No flag overrides; the defaults are Qwen3-8B on H100 under vLLM.
fn choice() -> Choice {
    Choice {
        model: None,
        gpu: None,
        backend: None,
        fallback: Engine {
            model: "qwen3-8b".into(),
            gpu: "h100".into(),
            backend: AicBackend::Vllm,
        },
    }
}

fn resolved(prefill_tp: u32, decode_tp: u32) -> Resolved {
    Resolved {
        engine: choice().fallback,
        prefill_tp,
        decode_tp,
        dp: 1,
        prefill_ep: false,
        decode_ep: false,
    }
}

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
    assert_eq!((r.p_par, r.d_par), (ONE, ONE));
    assert_eq!(r.model.as_deref(), Some("Qwen/Qwen3-8B"));
    assert_eq!(r.system, [Some("h100_sxm".into()), Some("h100_sxm".into())]);
    assert_eq!(r.backend, [Some(AicBackend::Vllm); 2]);
    assert_eq!((r.ttft_ms, r.tpot_ms), (177.988, 19.604));
    assert_eq!((r.tok_s_gpu, r.tok_s_user), (1645.938, 51.01));
    assert_eq!(r.layout(), "3P+5D tp1");
    assert_eq!(r.line, 2);
    assert_eq!(choice().resolve(r, &catalogue()).unwrap(), resolved(1, 1));
    // 4P at TP1 with 1D at TP4: each pool at its own TP.
    assert_eq!(rows[1].d_par, Parallel { tp: 4, ..ONE });
    assert_eq!(rows[1].layout(), "4P+1D tp1/4");
    assert_eq!(
        choice().resolve(&rows[1], &catalogue()).unwrap(),
        resolved(1, 4)
    );
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
        (Parallel { tp: 2, ..ONE }, 64, 2)
    );
    assert_eq!(
        rows[0].system,
        [Some("h100_sxm".into()), Some("h100_sxm".into())]
    );
    assert_eq!(rows[1].layout(), "1x agg tp1");
    let ep = one_row(&[("(d)moe_ep", "4")]);
    assert!(ep.layout().ends_with(" ep1/4"), "{}", ep.layout());
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
    fn prepare(&self, index: usize, run: &AicRun) -> Result<usize, String> {
        assert_eq!(index, run.row.line);
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
    // Jobs are numbered by their CSV line: the runner refuses line 7.
    let c = check(
        &file,
        &slo,
        &choice(),
        &catalogue(),
        &out,
        &Fake { refuse: 7 },
    );
    let _ = std::fs::remove_dir_all(&out);
    let lines: Vec<u64> = c.rows.iter().map(|r| r["line"].as_u64().unwrap()).collect();
    assert_eq!(lines, [2, 3, 4, 5, 6, 7]);
    assert_eq!(c.rows[0]["simulated"]["ttft_ms"]["p90"], 150.0);
    assert!(c.rows[1]["refused"].as_str().unwrap().contains("osl 0"));
    assert!(c.rows[2]["skipped"]
        .as_str()
        .unwrap()
        .starts_with("no profile of qwen3-8b on h100 at TP2 for vllm"));
    assert_eq!(
        c.rows[3]["skipped"],
        "aggregated PP2: pipeline parallelism is not modelled"
    );
    assert!(c.rows[4]["refused"]
        .as_str()
        .unwrap()
        .contains("`concurrency`"));
    assert_eq!(c.rows[5]["refused"], "a flag the runner refused");
    assert_eq!((c.refused, c.lines), (3, 6));
    let s = c.summary("f.csv", &slo, &[]);
    assert_eq!(s["refused_rows"], 3);
    assert_eq!(
        s["skipped_rows"],
        json!({"no profile": 1, "pipeline parallelism": 1})
    );
    assert!(s.get("overrides").is_none());
    assert_eq!(
        c.skipped_line().unwrap(),
        "skipped 2 of 6 rows: 1 no profile, 1 pipeline parallelism"
    );
    let t = c.table();
    assert_eq!(t.len(), 7);
    assert!(t[3].contains("skipped: no profile of qwen3-8b"), "{}", t[3]);
    assert!(t[5].contains("   6 | refused: line 6"), "{}", t[5]);
}

/// A disaggregated header with every column the reader reads, and a row
/// of it: `set` replaces cells by column name.
const DISAGG_HEAD: &str = "model,isl,osl,prefix,concurrency,(p)workers,(d)workers,ttft,tpot,\
    tokens/s/gpu,tokens/s/user,num_total_gpus,(p)tp,(p)pp,(p)dp,(p)moe_tp,(p)moe_ep,(p)cp,\
    (p)backend,(p)system,(d)tp,(d)pp,(d)dp,(d)moe_tp,(d)moe_ep,(d)backend,(d)system";

fn disagg_row(set: &[(&str, &str)]) -> String {
    let head: Vec<&str> = DISAGG_HEAD.split(',').collect();
    let base = "Qwen/Qwen3-8B,4000,500,0,64,2,1,100,10,1000,100,6,1,1,1,1,1,1,vllm,h100_sxm,\
                4,1,1,1,1,vllm,h100_sxm";
    let mut cells: Vec<String> = base.split(',').map(String::from).collect();
    for (k, v) in set {
        let at = head.iter().position(|h| h == k).unwrap();
        cells[at] = (*v).to_string();
    }
    cells.join(",")
}

fn one_row(set: &[(&str, &str)]) -> AicRow {
    let f = parse(&format!("{DISAGG_HEAD}\n{}\n", disagg_row(set))).unwrap();
    assert!(f.bad.is_empty(), "{:?}", f.bad);
    f.rows[0].clone()
}

#[test]
fn every_parallelism_column_is_read_and_a_bad_one_located() {
    let r = one_row(&[
        ("(p)tp", "2"),
        ("(p)pp", "3"),
        ("(p)dp", "4"),
        ("(p)moe_tp", "5"),
        ("(p)moe_ep", "6"),
        ("(p)cp", "7"),
        ("(d)tp", "8"),
        ("(d)pp", "9"),
        ("(d)dp", "10"),
        ("(d)moe_tp", "11"),
        ("(d)moe_ep", "12"),
    ]);
    let p = |tp, pp, dp, moe_tp, moe_ep, cp| Parallel {
        tp,
        pp,
        dp,
        moe_tp,
        moe_ep,
        cp,
    };
    assert_eq!(r.p_par, p(2, 3, 4, 5, 6, 7));
    // No `(d)cp` column: 1.
    assert_eq!(r.d_par, p(8, 9, 10, 11, 12, 1));
    for col in DISAGG_HEAD.split(',').filter(|c| {
        c.contains("tp")
            || c.contains("pp")
            || c.contains("dp")
            || c.contains("moe")
            || c.contains("cp")
    }) {
        let text = format!(
            "{DISAGG_HEAD}\n{}\n{}\n",
            disagg_row(&[]),
            disagg_row(&[(col, "-1")])
        );
        let f = parse(&text).unwrap();
        assert_eq!(f.rows.len(), 1, "{col}");
        assert_eq!(
            f.bad,
            [AicError::Cell {
                line: 3,
                column: DISAGG_HEAD.split(',').find(|c| *c == col).unwrap(),
                value: "-1".into()
            }],
            "{col}"
        );
    }
    // The aggregated file's columns, unprefixed.
    let head = "isl,osl,concurrency,ttft,tpot,tokens/s/gpu,tokens/s/user,num_total_gpus,\
                tp,pp,dp,moe_tp,moe_ep,cp,backend,system,model";
    let f = parse(&format!(
        "{head}\n1,1,1,1,1,1,1,8,2,1,4,8,1,1,sglang,b200_sxm,Qwen/Qwen3-30B-A3B\n\
         1,1,1,1,1,1,1,8,2,1,4,8,1,x,sglang,b200_sxm,m\n1,1,1,1,1,1,1,8,2,1,4,8,1,1,tgi,b200_sxm,m\n"
    ))
    .unwrap();
    let r = &f.rows[0];
    assert_eq!(
        (r.p_par, r.d_par),
        (p(2, 1, 4, 8, 1, 1), p(2, 1, 4, 8, 1, 1))
    );
    assert_eq!(r.backend, [Some(AicBackend::Sglang); 2]);
    assert_eq!(r.system[0].as_deref(), Some("b200_sxm"));
    assert_eq!(
        f.bad[0].to_string(),
        "line 3, column `cp`: `x` is not a number in range"
    );
    assert_eq!(
        f.bad[1].to_string(),
        "line 4, column `backend`: `tgi` is not vllm, sglang or trtllm"
    );
}

#[test]
fn each_layout_the_mocker_cannot_model_is_skipped_with_its_reason() {
    let why = |set: &[(&str, &str)]| -> String {
        let e = choice().resolve(&one_row(set), &catalogue()).unwrap_err();
        format!("{}: {e}", e.kind())
    };
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("(d)moe_ep", "2"), ("(d)moe_tp", "2")],
            "expert parallelism: decode tp4pp1dp1etp2ep2cp1: expert parallelism with \
             MoE TP2 and EP2 is not modelled (only EP = TP × DP, vLLM's \
             --enable-expert-parallel)",
        ),
        (
            &[("(d)moe_ep", "4")],
            "no profile: no profile of qwen3-8b on h100 at TP4 EP4 for vllm; `cargo xtask \
             profiles build --model qwen3-8b --system h100_sxm --backend vllm --tp 4 \
             --expert-parallel` and --profiles-dir target/profiles would add it",
        ),
        (
            &[("(p)cp", "2")],
            "context parallelism: prefill CP2: context parallelism is not modelled",
        ),
        (
            &[("(p)pp", "2")],
            "pipeline parallelism: prefill PP2: pipeline parallelism is not modelled",
        ),
        (
            &[
                ("(d)tp", "1"),
                ("(d)dp", "4"),
                ("(d)moe_tp", "2"),
                ("(p)dp", "4"),
            ],
            "MoE TP across attention DP: decode tp1pp1dp4etp2ep1cp1: MoE TP2 is neither the \
             attention TP1 nor TP × DP 4 (no engine flag gives it)",
        ),
        (
            &[("(d)dp", "2")],
            "prefill and decode DP differ: prefill DP1 and decode DP2 differ (one --dp-size here)",
        ),
        (
            &[("(d)system", "h200_sxm")],
            "prefill and decode systems differ: prefill on h100_sxm and decode on h200_sxm \
             (one --gpu here)",
        ),
        (
            &[("(d)backend", "sglang")],
            "prefill and decode backends differ: prefill under vllm and decode under sglang \
             (one --backend here)",
        ),
        (
            &[("(p)backend", "trtllm"), ("(d)backend", "trtllm")],
            "backend not modelled: backend trtllm is not modelled",
        ),
        (
            &[("prefix", "500")],
            "cached prefix: a cached prefix of 500 tokens",
        ),
        (
            &[("(d)tp", "2"), ("num_total_gpus", "4")],
            "no profile: no profile of qwen3-8b on h100 at TP2 for vllm; `cargo xtask profiles \
             build --model qwen3-8b --system h100_sxm --backend vllm --tp 2` and --profiles-dir \
             target/profiles would add it",
        ),
        (
            &[("model", "Qwen/Qwen3-235B-A22B")],
            "no profile: no profile of Qwen/Qwen3-235B-A22B (on h100 at TP1 for vllm); `cargo \
             xtask profiles build --model Qwen/Qwen3-235B-A22B --system h100_sxm --backend vllm \
             --tp 1` and --profiles-dir target/profiles would add it",
        ),
        (
            &[("num_total_gpus", "5")],
            "GPU count: the row names 5 GPUs, its layout here is 6 (workers × TP × DP)",
        ),
    ];
    for (set, want) in cases {
        assert_eq!(why(set), *want, "{set:?}");
    }
    // MoE TP equal to the attention TP is the profile's own TP: it runs.
    let r = one_row(&[("(d)moe_tp", "4")]);
    assert_eq!(choice().resolve(&r, &catalogue()).unwrap(), resolved(1, 4));
}

#[test]
fn model_system_and_backend_come_from_the_file_unless_a_flag_overrides() {
    // Qwen3-32B at TP2 prefill and TP4 decode, by its Hugging Face id.
    let r = one_row(&[
        ("model", "Qwen/Qwen3-32B"),
        ("(p)tp", "2"),
        ("num_total_gpus", "8"),
    ]);
    let got = choice().resolve(&r, &catalogue()).unwrap();
    assert_eq!(got.engine.model, "qwen3-32b");
    assert_eq!((got.prefill_tp, got.decode_tp, got.dp), (2, 4, 1));
    // `--model qwen3-8b` after `--` wins over the column.
    let over = Choice {
        model: Some("qwen3-8b".into()),
        ..choice()
    };
    let r = one_row(&[("model", "Qwen/Qwen3-32B")]);
    assert_eq!(over.resolve(&r, &catalogue()).unwrap(), resolved(1, 4));
    // SGLang from the file: Qwen3-8B has no SGLang profile at TP4.
    let r = one_row(&[("(p)backend", "sglang"), ("(d)backend", "sglang")]);
    let e = choice().resolve(&r, &catalogue()).unwrap_err();
    assert!(e.to_string().contains("at TP4 for sglang"), "{e}");
    // `--backend vllm` overrides it back.
    let over = Choice {
        backend: Some(AicBackend::Vllm),
        ..choice()
    };
    assert_eq!(over.resolve(&r, &catalogue()).unwrap(), resolved(1, 4));
    // A file without those columns takes the fallback.
    let head = "isl,osl,concurrency,ttft,tpot,tokens/s/gpu,tokens/s/user,num_total_gpus,tp";
    let f = parse(&format!("{head}\n9,5,8,1,1,1,1,1,1\n")).unwrap();
    assert_eq!(
        choice().resolve(&f.rows[0], &catalogue()).unwrap(),
        resolved(1, 1)
    );
}

#[test]
fn aic_systems_become_gpu_slugs() {
    for (system, slug) in [
        ("h100_sxm", "h100"),
        ("b200_sxm", "b200"),
        ("rtx_pro_6000_server", "rtxpro6000"),
        ("l40s", "l40s"),
        ("gb200", "gb200"),
    ] {
        assert_eq!(gpu_slug(system), slug);
    }
}

/// The check of one file with the fake runner, its output removed.
fn check_text(text: &str) -> AicCheck {
    let file = parse(text).unwrap();
    assert!(file.bad.is_empty(), "{:?}", file.bad);
    let out = std::env::temp_dir().join(format!(
        "handoff-plan-aic-{}-{}",
        std::process::id(),
        text.len()
    ));
    let slo: SloSpec = "ttft:p90=600ms".parse().unwrap();
    let c = check(
        &file,
        &slo,
        &choice(),
        &catalogue(),
        &out,
        &Fake { refuse: 0 },
    );
    let _ = std::fs::remove_dir_all(&out);
    c
}

#[test]
fn a_context_parallel_row_is_never_run_on_fewer_gpus() {
    let skip = |r: &AicRow| choice().resolve(r, &catalogue()).unwrap_err();
    // (p)cp 2 at the GPU count TP × DP alone gives (2 + 4): were CP
    // ignored, this row would run and count its GPUs as matching.
    let cp_short = one_row(&[("(p)cp", "2")]);
    assert_eq!(skip(&cp_short), Skip::ContextParallel(Side::Prefill, 2));
    // At the count with CP (2 × 2 + 4), also refused, not run on 6.
    let cp_full = one_row(&[("(p)cp", "2"), ("num_total_gpus", "8")]);
    assert_eq!(skip(&cp_full), Skip::ContextParallel(Side::Prefill, 2));
    // CP is named before a missing profile: the reason is the layout.
    let cp_unknown = one_row(&[("(p)cp", "4"), ("model", "org/none")]);
    assert_eq!(skip(&cp_unknown), Skip::ContextParallel(Side::Prefill, 4));
    // A file with a `(d)cp` column: the decode pool's.
    let head = format!("{DISAGG_HEAD},(d)cp");
    let f = parse(&format!("{head}\n{},2\n", disagg_row(&[]))).unwrap();
    assert_eq!(skip(&f.rows[0]), Skip::ContextParallel(Side::Decode, 2));
    // An aggregated replica's `cp`.
    let agg = "isl,osl,concurrency,ttft,tpot,tokens/s/gpu,tokens/s/user,num_total_gpus,tp,cp";
    let f = parse(&format!("{agg}\n100,10,4,1,1,1,1,1,1,2\n")).unwrap();
    assert_eq!(skip(&f.rows[0]), Skip::ContextParallel(Side::Aggregated, 2));
    // Through the check: the row says why, is not simulated, and the
    // summary counts it by reason.
    let c = check_text(&format!(
        "{DISAGG_HEAD}\n{}\n{}\n",
        disagg_row(&[("(p)cp", "2")]),
        disagg_row(&[])
    ));
    assert_eq!(
        c.rows[0]["skipped"],
        "prefill CP2: context parallelism is not modelled"
    );
    assert!(c.rows[0]["simulated"].is_null());
    assert!(c.rows[1]["simulated"].is_object());
    let s = c.summary("f.csv", &"ttft:p90=600ms".parse().unwrap(), &[]);
    assert_eq!(s["skipped_rows"], json!({"context parallelism": 1}));
    assert_eq!(
        c.skipped_line().unwrap(),
        "skipped 1 of 2 rows: 1 context parallelism"
    );
    assert!(c.table()[1].ends_with("| skipped: prefill CP2: context parallelism is not modelled"));
}

#[test]
fn each_parallelism_column_of_each_pool_names_its_own_reason() {
    let kind = |set: &[(&str, &str)]| {
        let e = choice().resolve(&one_row(set), &catalogue()).unwrap_err();
        (e.kind(), e)
    };
    let cases: &[(&[(&str, &str)], Skip)] = &[
        (
            &[("(p)moe_ep", "2")],
            Skip::ExpertParallel(Side::Prefill, Parallel { moe_ep: 2, ..ONE }),
        ),
        (
            &[("(d)moe_ep", "8")],
            Skip::ExpertParallel(
                Side::Decode,
                Parallel {
                    tp: 4,
                    moe_ep: 8,
                    ..ONE
                },
            ),
        ),
        (&[("(p)cp", "2")], Skip::ContextParallel(Side::Prefill, 2)),
        (&[("(p)pp", "2")], Skip::Pipeline(Side::Prefill, 2)),
        (&[("(d)pp", "4")], Skip::Pipeline(Side::Decode, 4)),
        (
            &[("(p)dp", "2"), ("(d)dp", "2"), ("(p)moe_tp", "4")],
            Skip::MoeTpAcrossDp {
                side: Side::Prefill,
                par: Parallel {
                    dp: 2,
                    moe_tp: 4,
                    ..ONE
                },
            },
        ),
        (
            &[("(p)dp", "2")],
            Skip::DpDiffers {
                prefill: 2,
                decode: 1,
            },
        ),
        (
            &[("(p)system", "b200_sxm")],
            Skip::SystemsDiffer("b200_sxm".into(), "h100_sxm".into()),
        ),
        (
            &[("(p)backend", "sglang")],
            Skip::BackendsDiffer(AicBackend::Sglang, AicBackend::Vllm),
        ),
    ];
    for (set, want) in cases {
        let (k, got) = kind(set);
        assert_eq!(&got, want, "{set:?}");
        assert_eq!(k, want.kind());
    }
    assert!(matches!(
        kind(&[("(p)tp", "8"), ("num_total_gpus", "20")]).1,
        Skip::NoProfile {
            layout: PoolProfile { tp: 8, .. },
            ..
        }
    ));
    // Expert parallelism is decided in one place.
    assert_eq!(expert_parallel_skip(Side::Decode, &ONE), None);
    let ep = Parallel { moe_ep: 4, ..ONE };
    assert_eq!(
        expert_parallel_skip(Side::Decode, &ep),
        Some(Skip::ExpertParallel(Side::Decode, ep))
    );
    // vLLM's --enable-expert-parallel: EP over every GPU of the ranks.
    let vllm = Parallel {
        dp: 4,
        moe_ep: 4,
        ..ONE
    };
    assert_eq!(expert_parallel_skip(Side::Decode, &vllm), None);
    let hybrid = Parallel {
        tp: 2,
        dp: 2,
        moe_tp: 2,
        moe_ep: 2,
        ..ONE
    };
    assert!(expert_parallel_skip(Side::Decode, &hybrid).is_some());
}

#[test]
fn expert_parallel_rows_run_with_their_layout_profiles() {
    let moe = |set: &[(&str, &str)]| {
        let mut all = vec![("model", "Qwen/Qwen3-30B-A3B")];
        all.extend_from_slice(set);
        choice().resolve(&one_row(&all), &catalogue())
    };
    // Both pools TP1 DP2: prefill's MoE TP spans the ranks, decode EP2.
    let r = moe(&[
        ("(d)tp", "1"),
        ("(p)dp", "2"),
        ("(d)dp", "2"),
        ("(p)moe_tp", "2"),
        ("(d)moe_ep", "2"),
        ("num_total_gpus", "6"),
    ])
    .unwrap();
    assert_eq!((r.prefill_tp, r.decode_tp, r.dp), (1, 1, 2));
    assert_eq!((r.prefill_ep, r.decode_ep), (false, true));
    assert_eq!(r.engine.model, "qwen3-30b-a3b");
    // TP2 EP2 on one rank.
    let r = moe(&[
        ("(p)tp", "2"),
        ("(d)tp", "2"),
        ("(p)moe_ep", "2"),
        ("(d)moe_ep", "2"),
        ("num_total_gpus", "6"),
    ])
    .unwrap();
    assert_eq!((r.prefill_ep, r.decode_ep, r.dp), (true, true, 1));
    // No DP4 EP4 profile: skipped naming the layout and how to build it.
    let e = moe(&[
        ("(d)tp", "1"),
        ("(p)dp", "4"),
        ("(d)dp", "4"),
        ("(p)moe_ep", "4"),
        ("(d)moe_ep", "4"),
        ("num_total_gpus", "12"),
    ])
    .unwrap_err();
    let text = e.to_string();
    assert!(text.contains("at TP1 DP4 EP4"), "{text}");
    assert!(
        text.contains("--attention-dp 4 --expert-parallel"),
        "{text}"
    );
}

#[test]
fn a_row_whose_pools_differ_in_tp_runs() {
    // Qwen3-32B: 2 prefill workers at TP2 and one decode worker at TP4,
    // 2 × 2 + 4 GPUs.
    let set = [
        ("model", "Qwen/Qwen3-32B"),
        ("(p)tp", "2"),
        ("(d)tp", "4"),
        ("num_total_gpus", "8"),
    ];
    let r = one_row(&set);
    assert_eq!(r.layout(), "2P+1D tp2/4");
    let d = choice().resolve(&r, &catalogue()).unwrap();
    assert_eq!((d.prefill_tp, d.decode_tp, d.dp), (2, 4, 1));
    let c = check_text(&format!("{DISAGG_HEAD}\n{}\n", disagg_row(&set)));
    assert!(c.rows[0]["skipped"].is_null(), "{}", c.rows[0]);
    assert_eq!(c.rows[0]["simulated"]["tpot_ms"]["p50"], 10.0);
    assert!(c.skipped_line().is_none());
}
