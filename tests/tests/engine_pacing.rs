//! `Engine::advance_to` (what the wall-clock `serve` driver calls with the
//! wall clock's model time) runs the same instants in the same order as
//! `run`: advancing a replay in arbitrary slices gives a byte-identical
//! report and transcript.

use handoff_core::{Duration, Generation, Instant, Worker, WorkerHost, WorkerId};
use handoff_deployment::{
    deployment, engine_config, make_core, worker_policy, DeploymentConfig, EngineSpec,
};
use handoff_engine::{Engine, LocalHosts};
use handoff_serving::serving;
use handoff_workload::{SyntheticConfig, SyntheticWorkload};

fn run(cfg: &DeploymentConfig, slice: Option<Duration>) -> (String, String) {
    let spec = EngineSpec {
        backend: cfg.backend,
        kv_tokens: 4096 * 16,
        ..EngineSpec::default()
    };
    let hosts = deployment(cfg)
        .iter()
        .map(|(id, _)| {
            let core = make_core(&spec).expect("core");
            WorkerHost::new(Worker::new(
                *id,
                Generation(0),
                worker_policy(cfg),
                cfg.handoff,
                core,
            ))
        })
        .collect();
    let port = LocalHosts::new(hosts, |_: WorkerId| make_core(&spec).expect("core"));
    let items = SyntheticWorkload::new(SyntheticConfig {
        requests: 150,
        seed: 7,
        ..SyntheticConfig::default()
    });
    let mut engine = Engine::new(engine_config(cfg), port, serving(cfg, items));
    if let Some(d) = slice {
        let mut t = Instant::ZERO;
        while engine.next_event_at().is_some() {
            t = t + d;
            engine.advance_to(t);
            assert!(engine.now() >= t, "the clock reaches the limit");
            if let Some(next) = engine.next_event_at() {
                assert!(next > t, "nothing due by the limit is left");
            }
        }
    }
    let (director, _) = engine.run();
    let (report, transcript) = director.into_outcome();
    (
        serde_json::to_string(&report.expect("report")).expect("json"),
        transcript.map(|t| t.render()).unwrap_or_default(),
    )
}

#[test]
fn advancing_in_slices_equals_running() {
    for multi_step in [false, true] {
        let cfg = DeploymentConfig {
            transcript: true,
            multi_step,
            ..DeploymentConfig::default()
        };
        let whole = run(&cfg, None);
        for ms in [1, 7, 250] {
            let sliced = run(&cfg, Some(Duration::from_millis(ms)));
            assert_eq!(
                whole.0, sliced.0,
                "report, {ms} ms slices, multi_step {multi_step}"
            );
            assert_eq!(whole.1, sliced.1, "transcript, {ms} ms slices");
        }
    }
}
