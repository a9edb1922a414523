//! The replay: the one [`Engine`] on a virtual clock with N prefill and M
//! decode worker hosts in this thread. Everything about a handoff's
//! lifecycle comes from the workers' role machines; this file only builds
//! the deployment (the live modes build the same one from the same
//! functions).

use handoff_core::host::WorkerHost;
use handoff_core::{Generation, Instant, Transcript, Worker, WorkerId};
use handoff_deployment::{
    check_core, deployment, engine_config, worker_policy, DeploymentConfig, DeploymentError,
    SessionServing,
};
use handoff_engine::{run_closed_loop, Engine, LocalHosts};
use handoff_router::Pool;
use handoff_serving::report::{Details, Report, RequestSink};
use handoff_serving::{serving, Serving};
use handoff_workload::TraceItem;

use crate::elastic::{self, Counted, Traffic};
use handoff_core::Duration;
use handoff_engine::scale::FleetSummary;
use handoff_planner::Planner;
use handoff_serving::report::RequestRecord;
use std::cell::RefCell;
use std::rc::Rc;

use handoff_core::CoreBox;

/// A replay run: the one [`Engine`] with every host in this thread and the
/// [`Serving`] director.
pub struct Replay<'a, I: Iterator<Item = TraceItem>> {
    engine: Engine<LocalHosts<'a, CoreBox>, Serving<Counted<I>>>,
    /// Hand the recorder every host's capacity after each instant.
    sample: bool,
    /// Closed loop: re-ask the director for arrivals after every unit of
    /// work (a completion frees a slot).
    closed_loop: bool,
    /// The planner of an elastic run and its default interval.
    planner: Option<(Box<dyn Planner + 'a>, Duration)>,
    /// What the planner's window saw.
    traffic: Rc<RefCell<Traffic>>,
    /// The caller's per-request sink, installed when the run starts.
    sink: Option<RequestSink>,
}

/// What a finished replay produced.
pub struct ReplayOutcome {
    /// The report.
    pub report: Report,
    /// The lifecycle transcript, when `cfg.transcript` asked for one.
    pub transcript: Option<Transcript>,
    /// The fleet's history, when the run was elastic (also in the
    /// report's `scaling` section).
    pub fleet: Option<FleetSummary>,
    /// What the HTML report draws, when [`Replay::keep_details`] asked.
    pub details: Option<Details>,
    /// Router bookings still held at the end, both pools (0 when every
    /// request's load was released).
    pub live_bookings: usize,
    /// The seed's §6 session log, JSONL (session runs only).
    pub session_log: Vec<String>,
    /// Step calls the workers made, all together (with multi-step, fewer
    /// than the passes the report counts; not in the report, which is the
    /// same either way).
    pub step_calls: u64,
}

impl<'a, I: Iterator<Item = TraceItem>> Replay<'a, I> {
    /// A replay of `workload` with cores made by `make_core(worker, pool)`
    /// (called again for a worker a fault plan restarts); refused when a
    /// core's KV event blocks are not `cfg.block_size` tokens.
    pub fn new(
        cfg: DeploymentConfig,
        workload: I,
        make_core: impl FnMut(WorkerId, Pool) -> CoreBox + 'a,
    ) -> Result<Self, DeploymentError> {
        Self::build(cfg, workload, make_core, None)
    }

    fn build(
        cfg: DeploymentConfig,
        workload: I,
        mut make_core: impl FnMut(WorkerId, Pool) -> CoreBox + 'a,
        concurrency: Option<usize>,
    ) -> Result<Self, DeploymentError> {
        let workers = deployment(&cfg);
        let policy = worker_policy(&cfg);
        let hosts = workers
            .iter()
            .map(|&(id, pool)| {
                let core = make_core(id, pool);
                check_core(&cfg, id, core.as_ref())?;
                Ok(WorkerHost::new(Worker::new(
                    id,
                    Generation(0),
                    policy,
                    cfg.handoff,
                    core,
                )))
            })
            .collect::<Result<_, DeploymentError>>()?;
        let pools: Vec<Pool> = workers.iter().map(|(_, p)| *p).collect();
        let port = LocalHosts::new(hosts, move |w: WorkerId| {
            let pool = pools.get(w.0 as usize).copied().unwrap_or(Pool::Decode);
            make_core(w, pool)
        });
        let traffic = Rc::new(RefCell::new(Traffic::default()));
        let workload = Counted {
            inner: workload,
            traffic: traffic.clone(),
        };
        let mut director = serving(&cfg, workload);
        if let Some(n) = concurrency {
            director.set_concurrency(n);
        }
        Ok(Replay {
            engine: Engine::new(engine_config(&cfg), port, director),
            sample: false,
            closed_loop: concurrency.is_some(),
            planner: None,
            traffic,
            sink: None,
        })
    }

    /// A closed-loop replay: at most `concurrency` requests in flight; the
    /// workload's first `concurrency` requests arrive at time zero and each
    /// later one when a request before it completes or fails (its trace
    /// timestamp is ignored). Deterministic like the open loop.
    pub fn closed_loop(
        cfg: DeploymentConfig,
        workload: I,
        concurrency: usize,
        make_core: impl FnMut(WorkerId, Pool) -> CoreBox + 'a,
    ) -> Result<Self, DeploymentError> {
        Self::build(cfg, workload, make_core, Some(concurrency.max(1)))
    }

    /// A closed-loop session replay (seed 002's serving): session-affine
    /// routing, each turn its think time after the previous one ended, the
    /// session closed `close_delay` after its last turn (see
    /// [`Serving::set_sessions`]). The cores must keep session slots (an
    /// SGLang core with sessions on) for turns to append.
    pub fn sessions(
        cfg: DeploymentConfig,
        workload: I,
        sessions: SessionServing,
        make_core: impl FnMut(WorkerId, Pool) -> CoreBox + 'a,
    ) -> Result<Self, DeploymentError> {
        let mut r = Self::build(cfg, workload, make_core, None)?;
        r.engine.director_mut().set_sessions(
            sessions.routing,
            sessions.close_delay,
            sessions.evict_after_turn,
        );
        r.engine
            .director_mut()
            .set_session_overheads(sessions.overheads);
        r.closed_loop = true;
        Ok(r)
    }

    /// Hands every finished request's record to `sink` (`--per-request-jsonl`).
    pub fn with_request_sink(mut self, sink: RequestSink) -> Self {
        self.sink = Some(sink);
        self
    }

    /// Calls `planner` on the virtual clock (every `interval` unless it
    /// asks otherwise) and applies its decisions as scale events to the
    /// fleet of `cfg.faults` (see [`crate::elastic`]). Open loop only: a
    /// closed-loop or session replay runs without it.
    pub fn with_planner(mut self, planner: Box<dyn Planner + 'a>, interval: Duration) -> Self {
        self.planner = Some((planner, interval));
        self
    }

    /// GPUs per prefill and per decode worker (the scaling section's
    /// GPU-hours); 1 each unless given.
    pub fn with_gpus_per_worker(mut self, prefill: u32, decode: u32) -> Self {
        self.engine.director_mut().set_fleet_gpus(prefill, decode);
        self
    }

    /// The window of the scaling section's per-window SLO attainment (an
    /// elastic run with `--slo`; 60 s unless given).
    pub fn with_slo_window(mut self, window: Duration) -> Self {
        self.engine.director_mut().set_slo_window(window);
        self
    }

    /// Hands every KV event the workers report to `sink` (`--kv-events-out`).
    pub fn with_kv_sink(mut self, sink: handoff_serving::serving::KvSink) -> Self {
        self.engine.director_mut().set_kv_sink(sink);
        self
    }

    /// Keeps what the HTML report draws: CDFs, and every worker's KV and
    /// queue timeline, read from the hosts after each instant, at most
    /// `points` per worker.
    pub fn keep_details(mut self, points: usize) -> Self {
        self.engine.director_mut().keep_details(points);
        self.sample = true;
        self
    }

    /// Runs to completion and returns the report (and the transcript when
    /// `cfg.transcript` asked for one).
    pub fn run(self) -> (Report, Option<Transcript>) {
        let o = self.run_all();
        (o.report, o.transcript)
    }

    /// Runs to completion and returns everything it produced.
    pub fn run_all(mut self) -> ReplayOutcome {
        let sample = self.sample;
        let planner = if self.closed_loop {
            None
        } else {
            self.planner.take()
        };
        self.traffic.borrow_mut().keep = planner.is_some();
        let user = self.sink.take();
        if planner.is_some() {
            let traffic = self.traffic.clone();
            let mut user = user;
            self.engine
                .director_mut()
                .set_request_sink(Box::new(move |r: &RequestRecord| {
                    traffic.borrow_mut().finish(r);
                    if let Some(u) = user.as_mut() {
                        u(r);
                    }
                }));
        } else if let Some(u) = user {
            self.engine.director_mut().set_request_sink(u);
        }
        let planner_name = planner.as_ref().map(|(p, _)| p.name().to_string());
        if let Some((mut p, interval)) = planner {
            elastic::run(&mut self.engine, p.as_mut(), interval, &self.traffic);
        } else if self.closed_loop {
            run_closed_loop(&mut self.engine, |engine, at| {
                if sample {
                    sample_hosts(engine, at);
                }
            });
        } else if sample {
            loop {
                let at = self.engine.now();
                let more = self.engine.run_one();
                sample_hosts(&mut self.engine, at);
                if !more {
                    break;
                }
            }
        }
        while self.engine.run_one() {}
        let fleet = self
            .engine
            .fleet()
            .is_elastic()
            .then(|| self.engine.fleet_summary());
        let (mut director, mut port) = self.engine.run();
        let step_calls = handoff_engine::HostPort::finals(&mut port)
            .iter()
            .map(|f| f.steps)
            .sum();
        let live_bookings = director.router_bookings();
        let session_log = director.take_session_lines();
        let (report, transcript, details) = director.into_parts();
        let mut report = report.expect("the engine finishes its director");
        if let Some(s) = report.scaling.as_mut() {
            s.planner = planner_name;
        }
        ReplayOutcome {
            report,
            transcript,
            fleet,
            details,
            live_bookings,
            session_log,
            step_calls,
        }
    }
}

/// Hands the recorder every host's capacity as of instant `at`.
fn sample_hosts<I: Iterator<Item = TraceItem>>(
    engine: &mut Engine<LocalHosts<'_, CoreBox>, Serving<Counted<I>>>,
    at: Instant,
) {
    let n = engine.port().hosts().len();
    for w in 0..n {
        let cap = engine.port().hosts()[w].worker().capacity();
        engine.director_mut().capacity(WorkerId(w as u32), at, &cap);
    }
}
