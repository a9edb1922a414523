//! Elastic fleets in the replay: workers that join after provisioning,
//! drain gracefully or are removed at once, and a planner that follows a
//! rate curve.

use handoff_core::{Backend, Duration, WorkerId};
use handoff_engine::FaultPlan;
use handoff_replay::planner::{ThroughputConfig, ThroughputPlanner};
use handoff_replay::{
    make_core, DeploymentConfig, EngineSpec, Pool, Replay, ReplayOutcome, RequestRecord,
    ScaleEvent, TransferModel,
};
use handoff_router::RouterMode;
use handoff_workload::{LengthDist, RateCurve, SyntheticConfig, SyntheticWorkload};
use std::cell::RefCell;
use std::rc::Rc;

fn workload(requests: u64, rate: f64) -> SyntheticWorkload {
    SyntheticWorkload::new(SyntheticConfig {
        seed: 7,
        requests,
        rate_per_sec: rate,
        input_tokens: LengthDist::Uniform {
            min: 1024,
            max: 4096,
        },
        output_tokens: LengthDist::Uniform { min: 32, max: 128 },
        ..SyntheticConfig::default()
    })
}

fn config(backend: Backend, prefill: u32, decode: u32, faults: &str) -> DeploymentConfig {
    let spec = EngineSpec {
        backend,
        block_size: 16,
        ..EngineSpec::default()
    };
    DeploymentConfig {
        backend,
        policy: backend.native_policy(),
        prefill_workers: prefill,
        decode_workers: decode,
        router: RouterMode::KvAware,
        block_size: spec.event_block_tokens(),
        transfer: TransferModel::Fixed(Duration::from_millis(5)),
        faults: FaultPlan::parse(faults).expect("plan"),
        ..DeploymentConfig::default()
    }
}

/// Runs `cfg` over `items`, keeping every request's record.
fn run(
    cfg: DeploymentConfig,
    items: impl Iterator<Item = handoff_workload::TraceItem>,
    planner: Option<ThroughputPlanner>,
) -> (ReplayOutcome, Vec<RequestRecord>) {
    let backend = cfg.backend;
    let make = move |_w: WorkerId, _pool: Pool| {
        make_core(&EngineSpec {
            backend,
            block_size: 16,
            kv_tokens: 1 << 18,
            ..EngineSpec::default()
        })
        .expect("core")
    };
    let records = Rc::new(RefCell::new(Vec::new()));
    let keep = records.clone();
    let mut r = Replay::new(cfg, items, make)
        .expect("replay")
        .with_request_sink(Box::new(move |r: &RequestRecord| {
            keep.borrow_mut().push(r.clone())
        }));
    if let Some(p) = planner {
        let interval = p.config().interval;
        r = r.with_planner(Box::new(p), interval);
    }
    let out = r.run_all();
    let recs = records.borrow().clone();
    (out, recs)
}

fn events(out: &ReplayOutcome) -> Vec<(f64, ScaleEvent)> {
    out.fleet
        .as_ref()
        .expect("an elastic run")
        .events
        .iter()
        .map(|r| (r.at.0 as f64 / 1e9, r.event))
        .collect()
}

const FLEET_2X2: &str = "fleet 0 prefill; fleet 1 prefill absent; \
                         fleet 2 decode; fleet 3 decode absent; startup-delay 5s";

#[test]
fn a_scaled_up_worker_gets_nothing_before_it_is_ready() {
    for backend in [Backend::Vllm, Backend::Sglang] {
        let plan = format!("{FLEET_2X2}; scale-up prefill at 1s; scale-up decode at 1s");
        let (out, recs) = run(config(backend, 2, 2, &plan), workload(200, 20.0), None);
        let r = &out.report;
        assert_eq!(r.completed_requests, 200, "{}", backend.name());
        let on = |w: u32| recs.iter().filter(move |x| x.prefill_worker == Some(w));
        // Ready at 6 s: nothing that arrived earlier was prefilled there.
        assert!(
            on(1).count() > 5,
            "worker 1 served after it joined: {} {:?}",
            on(1).count(),
            events(&out)
        );
        assert!(on(1).all(|x| x.arrival_ms >= 6000.0), "{}", backend.name());
        let decoded = recs.iter().filter(|x| x.decode_worker == Some(3));
        assert!(decoded.clone().count() > 5);
        assert!(decoded.clone().all(|x| x.end_ms > 6000.0));
        let ev = events(&out);
        assert!(matches!(ev[0], (1.0, ScaleEvent::Provision { .. })));
        let ready = ScaleEvent::Ready {
            worker: WorkerId(1),
        };
        assert!(ev.contains(&(6.0, ready)), "{ev:?}");
        let s = r.scaling.as_ref().expect("the scaling section");
        assert_eq!(s.provisioning_s, 10.0);
        let last = s.workers_over_time.last().expect("points");
        assert_eq!((last.prefill, last.decode), (2, 2));
    }
}

#[test]
fn a_draining_decode_finishes_its_requests_and_takes_no_new_ones() {
    for backend in [Backend::Vllm, Backend::Sglang] {
        let plan = "fleet 0 prefill; fleet 1 prefill; fleet 2 decode; fleet 3 decode; \
                    drain 3 at 3s";
        let (out, recs) = run(config(backend, 2, 2, plan), workload(200, 20.0), None);
        assert_eq!(out.report.completed_requests, 200, "{}", backend.name());
        assert_eq!(out.report.failed_requests, 0);
        let on3: Vec<&RequestRecord> = recs.iter().filter(|x| x.decode_worker == Some(3)).collect();
        assert!(on3.len() > 10, "it served before the drain");
        // Booked before the drain: prefilled (so arrived) before 3 s.
        assert!(
            on3.iter().all(|x| x.arrival_ms < 3000.0),
            "{}",
            backend.name()
        );
        let ev = events(&out);
        let gone = ev
            .iter()
            .find(|e| {
                e.1 == ScaleEvent::Drained {
                    worker: WorkerId(3),
                }
            })
            .expect("it leaves once drained");
        // It held requests when the drain began, so it left later, once the
        // last of them ended.
        let last_end = on3.iter().map(|x| x.end_ms).fold(0.0, f64::max);
        assert!(
            gone.0 > 3.0 && gone.0 * 1e3 >= last_end - 0.01,
            "{gone:?} {last_end}"
        );
        assert!(out.report.scaling.as_ref().unwrap().draining_s > 0.0);
    }
}

#[test]
fn a_draining_prefill_keeps_its_pinned_sources_until_read() {
    // vLLM source-first: a prefill pins its KV until the decode reads it.
    let plan = "fleet 0 prefill; fleet 1 prefill; fleet 2 decode; fleet 3 decode; \
                drain 0 at 2s";
    let (out, recs) = run(config(Backend::Vllm, 2, 2, plan), workload(200, 20.0), None);
    let r = &out.report;
    assert_eq!(r.completed_requests, 200);
    assert_eq!(r.failed_requests, 0);
    assert_eq!(r.lifecycle.handoffs_pinned, r.lifecycle.handoffs_activated);
    let on0: Vec<&RequestRecord> = recs
        .iter()
        .filter(|x| x.prefill_worker == Some(0))
        .collect();
    assert!(on0
        .iter()
        .all(|x| x.arrival_ms < 2000.0 && x.outcome == "completed"));
    let ev = events(&out);
    assert!(
        ev.iter().any(|e| e.1
            == ScaleEvent::Drained {
                worker: WorkerId(0)
            }
            && e.0 > 2.0),
        "{ev:?} {}",
        on0.len()
    );
}

#[test]
fn an_abrupt_remove_unwinds_as_a_kill_does() {
    for backend in [Backend::Vllm, Backend::Sglang] {
        let fleet = "fleet 0 prefill; fleet 1 prefill; fleet 2 decode; fleet 3 decode";
        let (removed, _) = run(
            config(backend, 2, 2, &format!("{fleet}; remove 2 at 2s")),
            workload(150, 30.0),
            None,
        );
        let (killed, _) = run(
            config(backend, 2, 2, &format!("{fleet}; kill 2 at 2s")),
            workload(150, 30.0),
            None,
        );
        let strip = |o: &ReplayOutcome| {
            let mut v = serde_json::to_value(&o.report).expect("json");
            v["scaling"] = serde_json::Value::Null;
            // The kill counts as a fault; the removal as a scale event.
            v["lifecycle"]["faults"] = serde_json::Value::Null;
            v["config"]["faults"] = serde_json::Value::Null;
            v.to_string()
        };
        assert_eq!(strip(&removed), strip(&killed), "{}", backend.name());
        let life = &removed.report.lifecycle;
        assert!(
            life.migrated_requests + removed.report.failed_requests > 0,
            "the removal hit requests in flight"
        );
        assert_eq!(removed.report.scaling.as_ref().unwrap().removals, 1);
    }
}

#[test]
fn a_fixed_fleet_report_has_no_scaling_section() {
    let (out, _) = run(config(Backend::Vllm, 2, 2, ""), workload(20, 20.0), None);
    assert!(out.report.scaling.is_none() && out.fleet.is_none());
    let json = serde_json::to_string(&out.report).unwrap();
    assert!(!json.contains("scaling"));
}

/// The step-curve run: 2/s for 40 s, 16/s for 40 s, 2/s after, ~2.5K-token
/// prompts (~5K then ~40K prompt tokens/s against 10K per prefill worker),
/// sized by the throughput planner within 5P+3D.
fn step_curve_run() -> ReplayOutcome {
    let items = SyntheticWorkload::new(SyntheticConfig {
        seed: 3,
        requests: 900,
        rate_curve: Some(RateCurve::parse("step:0=2,40=16,80=2").unwrap()),
        input_tokens: LengthDist::Uniform {
            min: 1024,
            max: 4096,
        },
        output_tokens: LengthDist::Uniform { min: 32, max: 128 },
        ..SyntheticConfig::default()
    });
    let fleet = "fleet 0 prefill; fleet 1 prefill absent; fleet 2 prefill absent; \
                 fleet 3 prefill absent; fleet 4 prefill absent; \
                 fleet 5 decode; fleet 6 decode absent; fleet 7 decode absent; \
                 startup-delay 5s";
    let planner = ThroughputPlanner::new(ThroughputConfig {
        prefill_tokens_per_s: 10_000.0,
        decode_tokens_per_s: 600.0,
        interval: Duration::from_secs(10),
        ..ThroughputConfig::default()
    });
    run(config(Backend::Vllm, 5, 3, fleet), items, Some(planner)).0
}

#[test]
fn the_throughput_planner_follows_a_step_curve_up_and_down() {
    let out = step_curve_run();
    assert_eq!(out.report.completed_requests, 900);
    let s = out.report.scaling.as_ref().expect("scaling");
    assert_eq!(s.planner.as_deref(), Some("throughput"));
    let at = |t: f64| {
        s.workers_over_time
            .iter()
            .rev()
            .find(|p| p.t_s <= t)
            .map(|p| (p.prefill, p.decode))
            .expect("a point")
    };
    let before = at(39.0);
    let peak = at(79.0);
    assert!(before.0 <= 1, "{:?}", s.workers_over_time);
    assert!(peak.0 >= 3 && peak.1 >= 2, "{:?}", s.workers_over_time);
    let last = s.workers_over_time.last().unwrap();
    assert!(
        last.prefill <= 1 && last.t_s > 80.0,
        "{:?}",
        s.workers_over_time
    );
    assert!(s.events.iter().any(|e| e.event == "drained"));
    // The same run twice is the same report.
    let again = step_curve_run();
    assert_eq!(
        serde_json::to_string(&out.report).unwrap(),
        serde_json::to_string(&again.report).unwrap()
    );
}

const FLEET_2P2D: &str = "fleet 0 prefill; fleet 1 prefill; fleet 2 decode; fleet 3 decode";

#[test]
fn a_draining_prefill_strands_its_pinned_sources_and_a_scale_up_strands_nothing() {
    // vLLM source-first: what prefill 0 pinned before its drain waits there
    // for its readers while it drains.
    let plan = format!("{FLEET_2P2D}; drain 0 at 2s");
    let (out, _) = run(
        config(Backend::Vllm, 2, 2, &plan),
        workload(200, 20.0),
        None,
    );
    let s = out.report.scaling.as_ref().expect("scaling");
    assert!(
        s.stranded_kv.pinned_source_block_s > 0.0,
        "{:?}",
        s.stranded_kv
    );
    assert_eq!(
        s.stranded_kv.reserved_destination_block_s, 0.0,
        "a prefill reserves nothing"
    );
    assert!(s.unwound_by_removal.is_empty(), "a drain unwinds nothing");
    // A decode draining under load holds reservations for KV on its way
    // (slow transfers, so reservations last).
    let plan = format!("{FLEET_2P2D}; drain 3 at 3s");
    let mut cfg = config(Backend::Vllm, 2, 2, &plan);
    cfg.transfer = TransferModel::Fixed(Duration::from_millis(400));
    let (out, _) = run(cfg, workload(200, 40.0), None);
    let s = out.report.scaling.as_ref().expect("scaling");
    assert_eq!(s.stranded_kv.pinned_source_block_s, 0.0);
    assert!(
        s.stranded_kv.reserved_destination_block_s > 0.0,
        "{:?}",
        s.stranded_kv
    );
    // Without a drain nothing is stranded, however much is pinned.
    let plan = format!("{FLEET_2X2}; scale-up prefill at 1s");
    let (out, _) = run(
        config(Backend::Vllm, 2, 2, &plan),
        workload(100, 20.0),
        None,
    );
    let s = out.report.scaling.as_ref().expect("scaling");
    assert_eq!(s.stranded_kv.total_block_s, 0.0);
    assert!(out
        .report
        .workers
        .iter()
        .any(|w| w.pinned_block_seconds > 0.0));
}

#[test]
fn a_removal_unwinds_by_reason_every_early_end_it_causes() {
    for backend in [Backend::Vllm, Backend::Sglang] {
        for victim in [1, 2] {
            let plan = format!("{FLEET_2P2D}; remove {victim} at 2s");
            let (out, _) = run(config(backend, 2, 2, &plan), workload(150, 30.0), None);
            let s = out.report.scaling.as_ref().expect("scaling");
            // No other fault, lease or reservation runs out here: every role
            // that ended early did so because of the removal.
            let early = &out.report.lifecycle.early_ends;
            assert_eq!(&s.unwound_by_removal, early, "{} {victim}", backend.name());
            // The decode worker held roles when it went.
            if victim == 2 {
                assert!(s.unwound_by_removal.contains_key("teardown"), "{early:?}");
            }
        }
    }
    // The same kill as a fault is not a removal: no scaling section at all.
    let (killed, _) = run(
        config(Backend::Vllm, 2, 2, "kill 2 at 2s"),
        workload(150, 30.0),
        None,
    );
    assert!(killed.report.scaling.is_none());
}

#[test]
fn slo_windows_add_up_to_the_runs_slo() {
    let plan = format!("{FLEET_2X2}; scale-up decode at 2s; drain 3 at 9s");
    let mut cfg = config(Backend::Vllm, 2, 2, &plan);
    cfg.sizing = Some(handoff_deployment::ReportSizing {
        slo: Some("ttft:p90=300ms,tpot:p90=40ms".parse().expect("slo")),
        gpus_per_rank: 1,
        decode_gpus_per_rank: None,
        gpu_hour_usd: None,
    });
    let backend = cfg.backend;
    let make = move |_w: WorkerId, _pool: Pool| {
        make_core(&EngineSpec {
            backend,
            block_size: 16,
            kv_tokens: 1 << 18,
            ..EngineSpec::default()
        })
        .expect("core")
    };
    let out = Replay::new(cfg, workload(300, 25.0), make)
        .expect("replay")
        .with_slo_window(Duration::from_secs(4))
        .run_all();
    let r = &out.report;
    let slo = r.slo.as_ref().expect("slo");
    let s = r.scaling.as_ref().expect("scaling");
    assert_eq!(s.slo_window_s, Some(4.0));
    let w = s.slo_windows.as_ref().expect("windows");
    // 300 requests at 25/s: 12 s of arrivals, 3 windows of 4 s.
    assert!((3..=4).contains(&w.len()), "{w:?}");
    assert_eq!(w.iter().map(|x| x.arrived).sum::<u64>(), r.num_requests);
    assert_eq!(
        w.iter().map(|x| x.met_all).sum::<u64>(),
        slo.met_all_requests
    );
    assert!(w.iter().all(|x| x.attainment <= 1.0));
    assert_eq!(w[1].start_s, 4.0);
    // Without --slo the section has no windows.
    let (plain, _) = run(config(Backend::Vllm, 2, 2, &plan), workload(50, 25.0), None);
    let s = plain.report.scaling.as_ref().expect("scaling");
    assert!(s.slo_windows.is_none() && s.slo_window_s.is_none());
}
