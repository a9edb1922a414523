//! Tests of [`super`]: each term changes a pass's time as stated; off is the
//! table path.
use super::*;
use crate::{DecodeAxis, PerfProfile, PerfTable, TableKind};
use std::sync::Arc;

/// Linear tables (non-decreasing, straight edges): prefill ms = 5 + new/100
/// + cached/1000; decode ms = 4 + batch/16 + context/10000.
fn profile(axis: DecodeAxis) -> PerfProfile {
    let (pn, pc) = (vec![1.0, 1000.0, 10_000.0], vec![0.0, 10_000.0]);
    let rows: Vec<Vec<f64>> = pn
        .iter()
        .map(|n| pc.iter().map(|c| 5.0 + n / 100.0 + c / 1000.0).collect())
        .collect();
    let prefill = PerfTable::new(
        TableKind::Prefill,
        ("new_tokens", "cached_tokens"),
        pn,
        pc,
        &rows,
    )
    .unwrap();
    let (db, dc) = (vec![1.0, 8.0, 64.0, 512.0], vec![0.0, 100_000.0]);
    let rows: Vec<Vec<f64>> = db
        .iter()
        .map(|b| dc.iter().map(|c| 4.0 + b / 16.0 + c / 10_000.0).collect())
        .collect();
    let decode = PerfTable::new(TableKind::Decode, ("batch", axis.name()), db, dc, &rows).unwrap();
    PerfProfile::new("t".into(), "s".into(), prefill, decode, 4.0)
        .unwrap()
        .with_decode_axis(axis)
}

const SHAPE: DeploymentShape = DeploymentShape {
    tp: 2,
    layers: 32,
    hidden_size: 4096,
    gpu_memory_bytes: 80 << 30,
};

fn with(o: Overheads, shape: Option<DeploymentShape>) -> ProfilePerf {
    let mut p = profile(DecodeAxis::TotalContext);
    if let Some(s) = shape {
        p = p.with_shape(s);
    }
    ProfilePerf::new(Arc::new(p.with_overheads(o).unwrap()), 1.0)
}

fn ms(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

fn mixed() -> Pass {
    let mut p = Pass::on_pool(1 << 20);
    p.add_prefill(700, 300);
    p.add_prefill(200, 0);
    for _ in 0..3 {
        p.add_decode(2000);
    }
    p
}

fn passes() -> Vec<Pass> {
    let mut v = vec![mixed(), Pass::prefill(4096, 2048), Pass::prefill(1, 0)];
    for b in [1u64, 3, 5, 8, 9, 17, 64, 200, 600] {
        v.push(Pass::decode(b, b * 1500, 1 << 20));
    }
    v
}

#[test]
fn off_is_the_table_path_bit_for_bit() {
    let table = ProfilePerf::new(Arc::new(profile(DecodeAxis::TotalContext)), 1.3);
    assert!(!table.has_terms());
    // Terms that change no time build no terms: async with no scheduling
    // cost, all-reduce on one GPU.
    let neutral = Overheads {
        async_scheduling: true,
        allreduce_us: 20.0,
        ..Overheads::default()
    };
    let one_gpu = DeploymentShape { tp: 1, ..SHAPE };
    let p = profile(DecodeAxis::TotalContext)
        .with_shape(one_gpu)
        .with_overheads(neutral)
        .unwrap();
    let neutral = ProfilePerf::new(Arc::new(p), 1.3);
    assert!(!neutral.has_terms());
    for pass in passes() {
        let want = scaled_ms(table.profile().pass_ms(&pass), 1.3).max(Duration::from_micros(1));
        assert_eq!(table.pass(&pass), want, "{pass:?}");
        assert_eq!(neutral.pass(&pass), want, "{pass:?}");
    }
}

#[test]
fn kernel_scale_multiplies_the_table_time() {
    let m = with(
        Overheads {
            kernel_scale: 1.5,
            ..Overheads::default()
        },
        None,
    );
    for pass in passes() {
        let table = m.profile().pass_ms(&pass);
        assert_eq!(m.pass(&pass), scaled_ms(1.5 * table, 1.0), "{pass:?}");
    }
}

#[test]
fn step_ms_adds_to_every_pass() {
    let m = with(
        Overheads {
            step_ms: 4.0,
            ..Overheads::default()
        },
        None,
    );
    for pass in passes() {
        let d = ms(m.pass(&pass)) - m.profile().pass_ms(&pass);
        assert!((d - 4.0).abs() < 2e-6, "{pass:?}: {d}");
    }
    // An empty pass stays free.
    assert_eq!(m.pass(&Pass::on_pool(10)), Duration::ZERO);
}

#[test]
fn per_seq_ms_counts_decodes_and_prefill_chunks() {
    let m = with(
        Overheads {
            per_seq_ms: 0.5,
            ..Overheads::default()
        },
        None,
    );
    let p = mixed();
    assert_eq!((p.prefill_seqs, p.decode_batch), (2, 3));
    let d = ms(m.pass(&p)) - m.profile().pass_ms(&p);
    assert!((d - 2.5).abs() < 2e-6, "{d}");
    let d = ms(m.pass(&Pass::decode(40, 9000, 1 << 20))) - 4.0 - 40.0 / 16.0 - 0.9;
    assert!((d - 20.0).abs() < 2e-6, "{d}");
    // A pass whose builder left the chunk count at zero still has one.
    let literal = Pass {
        prefill_seqs: 0,
        ..Pass::prefill(100, 0)
    };
    let d = ms(m.pass(&literal)) - m.profile().pass_ms(&literal);
    assert!((d - 0.5).abs() < 2e-6, "{d}");
}

#[test]
fn async_scheduling_takes_the_max_and_sync_the_sum() {
    let time = |async_scheduling, sched_ms| {
        let m = with(
            Overheads {
                sched_ms,
                async_scheduling,
                ..Overheads::default()
            },
            None,
        );
        // gpu = 4 + 1/16 + 0 ms.
        ms(m.pass(&Pass::decode(1, 0, 100)))
    };
    let gpu = 4.0 + 1.0 / 16.0;
    assert!((time(false, 10.0) - (gpu + 10.0)).abs() < 2e-6);
    assert!((time(true, 10.0) - 10.0).abs() < 2e-6);
    assert!((time(true, 2.0) - gpu).abs() < 2e-6);
    assert!((time(false, 2.0) - (gpu + 2.0)).abs() < 2e-6);
}

#[test]
fn padding_times_a_decode_at_the_next_captured_size() {
    let sizes = CudaGraph::Sizes(vec![1, 2, 4, 8, 16]);
    for axis in [DecodeAxis::TotalContext, DecodeAxis::ContextPerSequence] {
        let p = profile(axis)
            .with_overheads(Overheads {
                cuda_graph: sizes.clone(),
                ..Overheads::default()
            })
            .unwrap();
        let m = ProfilePerf::new(Arc::new(p), 1.0);
        let table = |b, ctx| scaled_ms(m.profile().pass_ms(&Pass::decode(b, ctx, 1 << 20)), 1.0);
        // 5 runs as 8, with the same total context (per sequence: / 8).
        assert_eq!(m.pass(&Pass::decode(5, 5000, 1 << 20)), table(8, 5000));
        assert_eq!(m.pass(&Pass::decode(16, 500, 1 << 20)), table(16, 500));
        // Past the largest size: eager, unpadded.
        assert_eq!(m.pass(&Pass::decode(17, 500, 1 << 20)), table(17, 500));
        // A pass with prefill is not padded.
        let mut p = Pass::prefill(64, 0);
        p.add_decode(100);
        p.add_decode(100);
        p.add_decode(100);
        assert_eq!(m.pass(&p), scaled_ms(m.profile().pass_ms(&p), 1.0));
    }
    let off = with(Overheads::default(), None);
    assert!(
        with(
            Overheads {
                cuda_graph: sizes,
                ..Overheads::default()
            },
            None
        )
        .pass(&Pass::decode(5, 5000, 1 << 20))
            > off.pass(&Pass::decode(5, 5000, 1 << 20))
    );
}

#[test]
fn vllm_default_capture_list_follows_max_num_seqs() {
    let sizes = |g: CudaGraph| match g {
        CudaGraph::Sizes(s) => s,
        other => panic!("{other:?}"),
    };
    let big = sizes(CudaGraph::vllm_default(1024));
    let mut want = vec![1, 2, 4];
    want.extend((8..256).step_by(8));
    want.extend((256..=512).step_by(16));
    assert_eq!(big, want);
    assert_eq!(sizes(CudaGraph::vllm_default(3)), vec![1, 2, 4]);
    assert_eq!(sizes(CudaGraph::vllm_default(1)), vec![1, 2]);
    let s = sizes(CudaGraph::vllm_default(64));
    assert_eq!(*s.last().unwrap(), 128);
    assert_eq!(s.len(), 3 + 16);
    let s = sizes(CudaGraph::vllm_with_token_budget(1024, 100));
    assert_eq!(*s.last().unwrap(), 96);
    assert_eq!(
        CudaGraph::Vllm.resolve(Some(64), Some(8192), None),
        sizes(CudaGraph::vllm_default(64))
    );
}

#[test]
fn sglang_default_capture_list_follows_memory_tp_and_pool() {
    let sizes = |g: CudaGraph| match g {
        CudaGraph::Sizes(s) => s,
        other => panic!("{other:?}"),
    };
    // An 80 GiB GPU at TP1: cuda_graph_max_bs 256.
    let h100 = sizes(CudaGraph::sglang_default(4096, 80.0, 1));
    let mut want = vec![1, 2, 4, 8, 12];
    want.extend((16..=256).step_by(8));
    assert_eq!(h100, want);
    // TP4: 512, through the 16 and 32 steps.
    let tp4 = sizes(CudaGraph::sglang_default(4096, 80.0, 4));
    assert_eq!(&tp4[tp4.len() - 3..], &[480, 496, 512]);
    assert_eq!(
        *sizes(CudaGraph::sglang_default(4096, 192.0, 1))
            .last()
            .unwrap(),
        512
    );
    assert_eq!(
        *sizes(CudaGraph::sglang_default(4096, 16.0, 8))
            .last()
            .unwrap(),
        8
    );
    assert_eq!(
        *sizes(CudaGraph::sglang_default(4096, 24.0, 1))
            .last()
            .unwrap(),
        24
    );
    assert_eq!(
        *sizes(CudaGraph::sglang_default(4096, 48.0, 2))
            .last()
            .unwrap(),
        32
    );
    assert_eq!(
        *sizes(CudaGraph::sglang_default(4096, 0.0, 1))
            .last()
            .unwrap(),
        160
    );
    // A pool of 100 requests: 100 added, larger sizes dropped.
    let s = sizes(CudaGraph::sglang_default(100, 80.0, 1));
    assert_eq!(&s[s.len() - 2..], &[96, 100]);
    assert_eq!(
        CudaGraph::Sglang
            .resolve(Some(100), None, Some(&SHAPE))
            .last(),
        Some(&100)
    );
}

#[test]
fn allreduce_counts_only_at_tp_above_one() {
    let o = Overheads {
        allreduce_us: 10.0,
        allreduce_us_per_mib: 50.0,
        ..Overheads::default()
    };
    let tp2 = with(o.clone(), Some(SHAPE));
    let tp1 = with(o, Some(DeploymentShape { tp: 1, ..SHAPE }));
    let pass = Pass::prefill(2048, 0);
    let table = tp1.profile().pass_ms(&pass);
    assert_eq!(tp1.pass(&pass), scaled_ms(table, 1.0));
    // 2 × 32 layers × (10 µs + 2048 tokens × 4096 × 2 B = 16 MiB × 50 µs).
    let want = 2.0 * 32.0 * (10.0 + 16.0 * 50.0) / 1000.0;
    let d = ms(tp2.pass(&pass)) - table;
    assert!((d - want).abs() < 2e-6, "{d} vs {want}");
}

#[test]
fn decode_runs_and_floors_agree_with_pass_by_pass_times() {
    let o = Overheads {
        kernel_scale: 1.1,
        step_ms: 3.0,
        per_seq_ms: 0.05,
        sched_ms: 2.0,
        cuda_graph: CudaGraph::Vllm,
        allreduce_us: 8.0,
        allreduce_us_per_mib: 30.0,
        ..Overheads::default()
    };
    for axis in [DecodeAxis::TotalContext, DecodeAxis::ContextPerSequence] {
        let p = profile(axis)
            .with_shape(SHAPE)
            .with_overheads(o.clone())
            .unwrap();
        let m = ProfilePerf::for_engine(Arc::new(p), 1.0, 256, 8192);
        for (batch, first) in [
            (1u64, 10u64),
            (5, 900),
            (37, 40_000),
            (300, 600_000),
            (600, 5),
        ] {
            let mut got = Vec::new();
            let n = m.decode_run(batch, first, 1 << 22, 50, &mut |d| {
                got.push(d);
                true
            });
            assert_eq!(n, 50);
            let mut sum = Duration::ZERO;
            for (k, d) in got.iter().enumerate() {
                let pass = Pass::decode(batch, first + batch * k as u64, 1 << 22);
                assert_eq!(*d, m.pass_uncounted(&pass), "{batch} {k}");
                sum += *d;
            }
            assert!(m.stable_decode_floor(batch, first, 50, 1 << 22) <= sum);
        }
    }
}

#[test]
fn passes_never_shrink_as_work_is_added_with_every_term_on() {
    let m = with(
        Overheads {
            kernel_scale: 0.9,
            step_ms: 1.0,
            per_seq_ms: 0.02,
            sched_ms: 6.0,
            async_scheduling: true,
            cuda_graph: CudaGraph::Sizes(vec![1, 2, 4, 8, 16, 32]),
            allreduce_us: 5.0,
            allreduce_us_per_mib: 20.0,
        },
        Some(SHAPE),
    );
    let mut prev = Duration::ZERO;
    for b in 1..100u64 {
        let d = m.pass(&Pass::decode(b, b * 1000, 1 << 22));
        assert!(d >= prev, "batch {b}");
        prev = d;
        let mut more = Pass::decode(b, b * 1000, 1 << 22);
        more.add_prefill(10, 0);
        assert!(m.pass(&more) >= m.pass(&Pass::prefill(10, 0)), "batch {b}");
    }
}

#[test]
fn terms_are_checked_by_name() {
    let err =
        |o: Overheads, shape: Option<&DeploymentShape>| o.check(shape).unwrap_err().to_string();
    let e = err(
        Overheads {
            step_ms: 101.0,
            ..Overheads::default()
        },
        None,
    );
    assert_eq!(e, "step_ms: 101 is not in [0, 100]");
    let e = err(
        Overheads {
            kernel_scale: f64::NAN,
            ..Overheads::default()
        },
        None,
    );
    assert!(e.starts_with("kernel_scale: NaN"), "{e}");
    let e = err(
        Overheads {
            cuda_graph: CudaGraph::Sizes(vec![1, 4, 4]),
            ..Overheads::default()
        },
        None,
    );
    assert!(e.starts_with("cuda_graph:") && e.contains("entry 2"), "{e}");
    let e = err(
        Overheads {
            allreduce_us: 1.0,
            ..Overheads::default()
        },
        None,
    );
    assert!(
        e.contains("allreduce_us: needs the profile's deployment"),
        "{e}"
    );
    assert!(Overheads {
        allreduce_us: 1.0,
        ..Overheads::default()
    }
    .check(Some(&SHAPE))
    .is_ok());
    // A refused profile keeps nothing.
    assert!(profile(DecodeAxis::TotalContext)
        .with_overheads(Overheads {
            per_seq_ms: -1.0,
            ..Overheads::default()
        })
        .is_err());
}

#[test]
fn assignments_parse_every_term() {
    let mut o = Overheads::default();
    for a in [
        "step_ms=4",
        "kernel_scale=1.25",
        "per_seq_ms=0.01",
        "sched_ms=3",
        "async_scheduling=true",
        "cuda_graph=1,2, 8",
        "allreduce_us=7",
        "allreduce_us_per_mib=40",
    ] {
        o.assign(a).unwrap();
    }
    assert_eq!(
        o,
        Overheads {
            kernel_scale: 1.25,
            step_ms: 4.0,
            per_seq_ms: 0.01,
            sched_ms: 3.0,
            async_scheduling: true,
            cuda_graph: CudaGraph::Sizes(vec![1, 2, 8]),
            allreduce_us: 7.0,
            allreduce_us_per_mib: 40.0,
        }
    );
    o.assign("cuda_graph=vllm").unwrap();
    assert_eq!(o.cuda_graph, CudaGraph::Vllm);
    o.assign("cuda_graph=sglang").unwrap();
    o.assign("cuda_graph=off").unwrap();
    assert_eq!(o.cuda_graph, CudaGraph::Off);
    let e = o.assign("step=4").unwrap_err().to_string();
    assert!(e.starts_with("`step`: no such term"), "{e}");
    let e = o.assign("step_ms=fast").unwrap_err().to_string();
    assert_eq!(e, "step_ms: expected a number");
    let e = o.assign("async_scheduling=2").unwrap_err().to_string();
    assert_eq!(e, "async_scheduling: expected true or false");
    assert!(o.assign("cuda_graph=1,x").is_err());
    assert!(o.assign("cuda_graph=").is_err());
}
