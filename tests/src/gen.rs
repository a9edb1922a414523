//! Seeded generation of whole runs for property tests: a deployment (backend,
//! pools, capacities small enough that reservations fail and leases expire,
//! timers, transfer model, router), a trace (from idle to overload, shared
//! prefixes, long prompts) and, sometimes, a fault plan.

use handoff_core::{Backend, Duration, HandoffConfig, Instant, Request, RequestId, Rng};
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_engine::fault::FaultPlan;
use handoff_engine::TransferModel;
use handoff_router::RouterMode;
use handoff_workload::TraceItem;

/// One generated run.
#[derive(Clone, Debug)]
pub struct GenRun {
    /// The deployment.
    pub cfg: DeploymentConfig,
    /// Worker `i`'s engine.
    pub specs: Vec<EngineSpec>,
    /// The trace.
    pub items: Vec<TraceItem>,
}

/// The run of `seed`: every choice comes from it.
pub fn run(seed: u64) -> GenRun {
    let mut r = Rng::seeded(seed);
    let backend = if r.below(2) == 0 {
        Backend::Vllm
    } else {
        Backend::Sglang
    };
    let prefill = 1 + r.below(3) as u32;
    let decode = 1 + r.below(3) as u32;
    let block_size = if backend == Backend::Sglang {
        [1, 16][r.below(2) as usize]
    } else {
        16
    };
    // Decode pools from a few requests' worth down to barely one.
    let decode_kv = [3_000, 8_000, 20_000, 65_536, 262_144][r.below(5) as usize];
    let prefill_kv = [20_000, 65_536, 262_144][r.below(3) as usize];
    let lease = Duration::from_millis(300 + r.below(20_000));
    let reservation = Duration::from_millis(300 + r.below(20_000));
    let spec = |kv_tokens: u64| EngineSpec {
        backend,
        kv_tokens,
        block_size,
        max_running: [4, 16, 256][(seed % 3) as usize],
        max_batched_tokens: [512, 2048, 8192][((seed / 3) % 3) as usize],
        source_lease_ttl: Some(lease),
        ..EngineSpec::default()
    };
    let transfer = match r.below(3) {
        0 => TransferModel::Fixed(Duration::from_millis(1 + r.below(30))),
        1 => TransferModel::Bytes {
            base: Duration::from_millis(r.below(5)),
            bytes_per_token: 131_072,
            bandwidth: 5e9,
        },
        _ => TransferModel::Contention {
            base: Duration::from_millis(r.below(5)),
            bytes_per_token: 131_072,
            bandwidth: 5e9,
        },
    };
    let router = [
        RouterMode::KvAware,
        RouterMode::RoundRobin,
        RouterMode::LeastLoaded,
        RouterMode::PowerOfTwo,
        RouterMode::Random,
    ][r.below(5) as usize];
    // Mean gap from overload (1 ms) to idle (3 s).
    let gap_ms = [1, 20, 200, 3_000][r.below(4) as usize];
    let n = 1 + r.below(40);
    let families = 1 + r.below(4);
    let mut items = Vec::new();
    let mut t = 0u64;
    for i in 0..n {
        t += r.below(2 * gap_ms + 1);
        let prompt = if r.below(8) == 0 {
            4_000 + r.below(12_000)
        } else {
            16 + r.below(3_000)
        } as u32;
        let blocks = prompt.div_ceil(512) as usize;
        let family = r.below(families);
        let shared = r.below(blocks as u64 + 1) as usize;
        let hashes = (0..blocks)
            .map(|b| {
                if b < shared {
                    family * 1_000 + b as u64
                } else {
                    1_000_000 + i * 100 + b as u64
                }
            })
            .collect();
        items.push(TraceItem {
            request: Request {
                id: RequestId(i),
                prompt_tokens: prompt,
                max_output_tokens: 1 + r.below(300) as u32,
                prefix_hashes: hashes,
                hash_block_tokens: 512,
                session: None,
                arrival: Instant::from_millis(t),
                lora: None,
            },
            turn: None,
            delay: None,
        });
    }
    let workers = prefill + decode;
    let faults = if r.below(3) == 0 {
        FaultPlan::generate(
            seed,
            workers,
            n,
            Duration::from_millis(t + 5_000),
            r.next_f64(),
        )
    } else {
        FaultPlan::none()
    };
    let cfg = DeploymentConfig {
        backend,
        policy: backend.native_policy(),
        prefill_workers: prefill,
        decode_workers: decode,
        dp: handoff_core::DpLayout::SINGLE,
        router,
        router_kv: handoff_router::KvKnobs::default(),
        block_size: spec(1).event_block_tokens(),
        transfer,
        message_latency: Duration::from_micros(50 + r.below(2_000)),
        handoff: HandoffConfig {
            reservation_ttl: reservation,
            ..HandoffConfig::default()
        },
        seed,
        multi_step: r.below(4) != 0,
        transcript: true,
        faults,
        engines: Vec::new(),
        sizing: None,
        heartbeat: None,
    };
    let specs = (0..workers)
        .map(|w| spec(if w < prefill { prefill_kv } else { decode_kv }))
        .collect();
    GenRun { cfg, specs, items }
}
