//! The step-time models as the cores use them: the shipped measured
//! profile (`profiles/qwen3-4b-a100-sglang.json`) against Dynamo's legacy
//! polynomial, on the faults issue 14 lists.

use handoff_core::{Backend, Duration, Instant, Request, RequestId, SchedulerCommand, StepOutput};

use handoff_perf::Pass;

use handoff_perf::PerfModel;

use handoff_perf::PolynomialPerf;

use handoff_perf::ProfilePerf;

use handoff_perf::StepModel;
use handoff_profiles::profile_file;
use handoff_replay::{make_core, DeploymentConfig, EngineSpec, PerfChoice, Replay};
use handoff_workload::{SyntheticConfig, SyntheticWorkload};
use proptest::prelude::*;
use std::path::Path;
use std::sync::{Arc, OnceLock};

fn shipped() -> Arc<handoff_perf::PerfProfile> {
    static P: OnceLock<Arc<handoff_perf::PerfProfile>> = OnceLock::new();
    P.get_or_init(|| {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../profiles/qwen3-4b-a100-sglang.json");
        Arc::new(profile_file::load(&path).unwrap_or_else(|e| panic!("{e}")))
    })
    .clone()
}

fn profile() -> ProfilePerf {
    ProfilePerf::new(shipped(), 1.0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Four 8K chunks of one prompt, each attending over the chunks before it.
fn chunked(m: &impl PerfModel, prompt: u64, chunk: u64) -> Duration {
    (0..prompt / chunk)
        .map(|i| m.pass(&Pass::prefill(chunk, i * chunk)))
        .fold(Duration::ZERO, |a, b| a + b)
}

#[test]
fn the_shipped_profile_loads_and_names_itself() {
    let p = shipped();
    assert_eq!(p.name(), "qwen3-4b-a100-sglang");
    assert!(p.source().contains("A100"), "{}", p.source());
    assert_eq!(
        PerfChoice::Profile(p).label(),
        "profile:qwen3-4b-a100-sglang"
    );
    assert_eq!(PerfChoice::DynamoPolynomial.label(), "dynamo-polynomial");
}

#[test]
fn chunking_a_long_prompt_no_longer_makes_attention_free() {
    let poly = PolynomialPerf::default();
    // The legacy fit: 966 ms in one pass, 677 ms as four 8K chunks.
    let (one, four) = (poly.prefill(32_768), chunked(&poly, 32_768, 8192));
    assert!((ms(one) - 966.0).abs() < 1.0 && (ms(four) - 677.0).abs() < 1.0);
    // Measured: the chunks' attention reads their cached prefix, so four
    // chunks cost at least one pass (the same attention plus three more
    // per-pass overheads), and not more than that plus three passes' worth
    // of fixed cost and interpolation slack.
    let m = profile();
    let (one, four) = (m.prefill(32_768), chunked(&m, 32_768, 8192));
    assert!(four >= one, "{four:?} < {one:?}");
    assert!(ms(four) - ms(one) < 0.05 * ms(one), "{four:?} vs {one:?}");
    // A cached prefix costs attention: 8K new tokens after 24K cached cost
    // more than 8K alone, less than 32K computed.
    let (alone, after) = (m.prefill(8192), m.pass(&Pass::prefill(8192, 24_576)));
    assert!(
        after > alone * 2 && after < one,
        "{alone:?} {after:?} {one:?}"
    );
}

#[test]
fn decode_depends_on_context_tokens_not_the_pool_fraction() {
    let m = profile();
    let poly = PolynomialPerf::default();
    let at = |pool: u64| Pass::decode(64, 64 * 2048, pool);
    let pools = [1u64 << 18, 1 << 19, 1 << 20];
    // The legacy fit: the same batch is 26.0 / 17.4 / 11.9 ms on a 256K /
    // 512K / 1M pool.
    let legacy: Vec<f64> = pools.iter().map(|&p| ms(poly.pass(&at(p)))).collect();
    assert!(legacy[0] > legacy[1] && legacy[1] > legacy[2], "{legacy:?}");
    let measured: Vec<Duration> = pools.iter().map(|&p| m.pass(&at(p))).collect();
    assert!(measured.iter().all(|d| *d == measured[0]), "{measured:?}");
    // ...and grows with the context the batch reads.
    assert!(m.pass(&Pass::decode(64, 64 * 4096, 1 << 18)) > measured[0]);
}

#[test]
fn a_mixed_pass_pays_the_fixed_cost_once() {
    let m = profile();
    let mut mixed = Pass::on_pool(1 << 20);
    mixed.add_prefill(2048, 0);
    for _ in 0..32 {
        mixed.add_decode(1024);
    }
    let p = m.prefill(2048);
    let d = m.pass(&Pass::decode(32, 32 * 1024, 1 << 20));
    let overhead = Duration::from_secs_f64(shipped().pass_overhead_ms() / 1e3);
    let got = m.pass(&mixed);
    assert!(got >= p.max(d) && got < p + d, "{got:?} vs {p:?} + {d:?}");
    assert!(ms(p + d - overhead).round() == ms(got).round());
}

proptest! {
    #[test]
    fn the_shipped_profile_is_monotone(
        n in 1u64..200_000, c in 0u64..2_000_000, b in 1u64..1024, ctx in 0u64..4_000_000,
        dn in 0u64..50_000, dc in 0u64..500_000, db in 0u64..64, dctx in 0u64..500_000,
    ) {
        let m = profile();
        let pre = |n, c| m.pass(&Pass::prefill(n, c));
        prop_assert!(pre(n + dn, c) >= pre(n, c));
        prop_assert!(pre(n, c + dc) >= pre(n, c));
        let dec = |b, ctx| m.pass(&Pass::decode(b, ctx, 1 << 20));
        prop_assert!(dec(b + db, ctx) >= dec(b, ctx));
        prop_assert!(dec(b, ctx + dctx) >= dec(b, ctx));
    }
}

/// The prefill passes a core runs for one `prompt`-token request, one pass
/// per `step` (the horizon is `now`), until its prompt is computed.
fn prefill_passes(backend: Backend, perf: PerfChoice, prompt: u32) -> Vec<(u64, Duration)> {
    let spec = EngineSpec {
        backend,
        kv_tokens: 1 << 18,
        block_size: if backend == Backend::Sglang { 1 } else { 16 },
        max_batched_tokens: 8192,
        perf,
        ..EngineSpec::default()
    };
    let mut core = make_core(&spec).expect("core");
    let r = Request {
        id: RequestId(1),
        prompt_tokens: prompt,
        max_output_tokens: 4,
        prefix_hashes: Vec::new(),
        hash_block_tokens: 16,
        session: None,
        arrival: Instant::ZERO,
        lora: None,
    };
    core.apply(SchedulerCommand::Submit(r), Instant::ZERO);
    let (mut now, mut out, mut passes, mut done) =
        (Instant::ZERO, StepOutput::default(), vec![], 0);
    while done < u64::from(prompt) {
        core.step(now, now, &mut out);
        assert!(out.steps > 0, "{backend:?} stalled after {passes:?}");
        if out.prefill_tokens > 0 {
            passes.push((out.prefill_tokens, out.duration));
            done += out.prefill_tokens;
        }
        now = now + out.duration;
    }
    passes
}

#[test]
fn both_cores_time_each_chunk_with_its_cached_prefix() {
    let m = profile();
    for backend in [Backend::Vllm, Backend::Sglang] {
        let got = prefill_passes(backend, PerfChoice::Profile(shipped()), 32_768);
        let mut before = 0;
        let want: Vec<(u64, Duration)> = got
            .iter()
            .map(|&(n, _)| {
                let d = m.pass(&Pass::prefill(n, before));
                before += n;
                (n, d)
            })
            .collect();
        assert_eq!(got, want, "{backend:?}");
        assert_eq!(got.len(), 4, "{backend:?}: {got:?}");
        // The polynomial sees four equal chunks.
        let poly = prefill_passes(backend, PerfChoice::DynamoPolynomial, 32_768);
        assert!(poly.iter().all(|p| *p == poly[0]), "{backend:?}: {poly:?}");
    }
}

#[test]
fn the_report_names_the_model_and_replays_identically() {
    let run = |perf: PerfChoice| {
        let spec = EngineSpec {
            perf,
            ..EngineSpec::default()
        };
        let cfg = DeploymentConfig {
            engines: vec![spec.clone(); 4],
            ..DeploymentConfig::default()
        };
        let items = SyntheticWorkload::new(SyntheticConfig {
            requests: 40,
            ..SyntheticConfig::default()
        });
        let (report, _) = Replay::new(cfg, items, |_, _| make_core(&spec).unwrap())
            .expect("the cores publish at the deployment's block size")
            .run();
        serde_json::to_string(&report).unwrap()
    };
    let a = run(PerfChoice::Profile(shipped()));
    assert_eq!(a, run(PerfChoice::Profile(shipped())));
    assert!(
        a.contains(r#""perf":"profile:qwen3-4b-a100-sglang""#),
        "{a}"
    );
    let poly = run(PerfChoice::DynamoPolynomial);
    assert!(poly.contains(r#""perf":"dynamo-polynomial""#));
    assert_ne!(
        a.replace("profile:qwen3-4b-a100-sglang", "dynamo-polynomial"),
        poly
    );
    // The run-time choice is the same model as the concrete one.
    let direct = StepModel::Polynomial(PolynomialPerf::default());
    assert_eq!(PerfChoice::DynamoPolynomial.model(1.0), direct);
}
