//! Lockstep ranks ([`DpCoupling::Lockstep`], what `--enable-expert-parallel`
//! implies): replay, virtual-clock live over channels and virtual-clock
//! live over TCP run the two-phase group step through the same engine and
//! stay byte-identical (report, transcript, final states); the coupling
//! changes the run; and the wall-clock node drivers refuse it by name.

use handoff_core::{Backend, DpCoupling, DpLayout, Generation, Transcript};
use handoff_deployment::{
    deployment, make_core, worker_policy, DeploymentConfig, DeploymentError, EngineSpec, WallDriver,
};
use handoff_live_adapter::{
    connect_workers, run_in_process, run_tcp_virtual, run_virtual_threads, serve_worker_virtual,
    RemoteError, WorkerSetup,
};
use handoff_replay::Replay;
use handoff_router::FRONTEND_ID;
use handoff_serving::Report;
use handoff_transport::{PeerRole, TcpEndpoint};
use handoff_workload::{SyntheticConfig, SyntheticWorkload, TraceItem};

fn items() -> Vec<TraceItem> {
    SyntheticWorkload::new(SyntheticConfig {
        requests: 60,
        seed: 11,
        ..SyntheticConfig::default()
    })
    .collect()
}

fn cfg(backend: Backend, decode: u32, coupling: DpCoupling) -> (DeploymentConfig, Vec<EngineSpec>) {
    let block_size = if backend == Backend::Sglang { 1 } else { 16 };
    let spec = EngineSpec {
        backend,
        kv_tokens: 4096 * 16,
        block_size,
        ..EngineSpec::default()
    };
    let mut c = DeploymentConfig {
        backend,
        policy: backend.native_policy(),
        prefill_workers: 1,
        decode_workers: decode,
        dp: DpLayout::new(2).expect("in range"),
        block_size: spec.event_block_tokens(),
        transcript: true,
        ..DeploymentConfig::default()
    };
    c.set_dp_coupling(coupling);
    let specs = vec![spec; deployment(&c).len()];
    c.engines = specs.clone();
    (c, specs)
}

fn replay(c: &DeploymentConfig, specs: &[EngineSpec]) -> (Report, Transcript) {
    let specs = specs.to_vec();
    let o = Replay::new(c.clone(), items().into_iter(), move |w, _| {
        make_core(&specs[w.0 as usize]).unwrap()
    })
    .expect("the cores publish at the deployment's block size")
    .run_all();
    (o.report, o.transcript.unwrap())
}

/// Virtual-clock live over TCP on loopback: one endpoint per rank, each
/// served on its own thread.
fn tcp(c: &DeploymentConfig, specs: &[EngineSpec]) -> (Report, Transcript) {
    let policy = worker_policy(c);
    let mut addrs = Vec::new();
    let mut threads = Vec::new();
    for ((id, pool), spec) in deployment(c).into_iter().zip(specs) {
        let role = handoff_live_adapter::tcp::peer_role(pool);
        let ep = TcpEndpoint::bind_as(id, Generation(0), role, "127.0.0.1:0").unwrap();
        addrs.push(ep.local_addr().to_string());
        let w = WorkerSetup {
            id,
            generation: Generation(0),
            policy,
            handoff: c.handoff,
            spec: spec.clone(),
        };
        threads.push(std::thread::spawn(move || serve_worker_virtual(&w, &ep, 1)));
    }
    let ep = TcpEndpoint::bind_as(
        FRONTEND_ID,
        Generation(0),
        PeerRole::Frontend,
        "127.0.0.1:0",
    )
    .unwrap();
    connect_workers(&ep, c, &addrs).unwrap();
    let o = run_tcp_virtual(c, ep, addrs.len() as u32, items().into_iter()).unwrap();
    for t in threads {
        t.join().unwrap().unwrap();
    }
    (o.report, o.transcript.unwrap())
}

fn same(what: &str, a: &(Report, Transcript), b: &(Report, Transcript)) {
    assert_eq!(a.1.first_divergence(&b.1), None, "{what}: transcripts");
    assert_eq!(a.1.render(), b.1.render(), "{what}: rendered transcripts");
    assert_eq!(
        serde_json::to_string(&a.0).unwrap(),
        serde_json::to_string(&b.0).unwrap(),
        "{what}: reports"
    );
}

#[test]
fn replay_equals_virtual_threads_equals_tcp_with_lockstep_ranks() {
    for (backend, decode) in [(Backend::Vllm, 1), (Backend::Sglang, 1), (Backend::Vllm, 0)] {
        let what = format!("{backend:?} decode {decode}");
        let (c, specs) = cfg(backend, decode, DpCoupling::Lockstep);
        let r = replay(&c, &specs);
        assert_eq!(
            r.0.completed_requests, 60,
            "{what}: every request completed"
        );
        assert!(r.0.workers.iter().all(|w| w.drained), "{what}: drained");
        if decode > 0 {
            assert!(r.1.handoffs() > 0, "{what}: handoffs ran");
        }
        let v = run_virtual_threads(&c, &specs, items().into_iter()).expect("runs");
        same(
            &format!("{what}, threads"),
            &r,
            &(v.report, v.transcript.unwrap()),
        );
        same(&format!("{what}, TCP"), &r, &tcp(&c, &specs));
        // The coupling is what ran: independent ranks give another run.
        let (ic, ispecs) = cfg(backend, decode, DpCoupling::Independent);
        let i = replay(&ic, &ispecs);
        assert_ne!(
            serde_json::to_string(&i.0).unwrap(),
            serde_json::to_string(&r.0).unwrap(),
            "{what}: lockstep changes the run"
        );
    }
}

#[test]
fn wall_clock_threads_refuse_lockstep_ranks_by_name() {
    let (c, specs) = cfg(Backend::Vllm, 1, DpCoupling::Lockstep);
    let e = run_in_process(&c, &specs, 10.0, items().into_iter()).err();
    assert_eq!(
        e,
        Some(RemoteError::Deployment(DeploymentError::Lockstep {
            driver: WallDriver::LiveWallThreads
        }))
    );
    assert!(e.unwrap().to_string().contains("live --clock wall"));
}
