//! The engine thread: the one [`Engine`], with every worker host in this
//! thread ([`LocalHosts`], as replay has them) and the [`HttpDirector`],
//! paced by a [`WallClock`].
//!
//! There is no loop of its own here besides waiting: the thread runs the
//! engine up to the wall clock's model time ([`Engine::advance_to`]), then
//! sleeps until the engine's next event is due or an HTTP command arrives,
//! whichever is first. A request is pushed into the director's workload at
//! the current model time and the engine is told
//! ([`Engine::arrivals_changed`]); a client that goes away is a client
//! cancel ([`Fault::Cancel`], applied now), which reaches every role of the
//! request's attempt, so its leases and reservations end as any cancelled
//! attempt's do. Passes are stepped one at a time (no multi-step folding),
//! so tokens are reported, and streamed, as model time produces them.
//!
//! SGLang PD legs wait in the director's bootstrap rooms; the thread also
//! wakes when the first of them times out.

use crate::director::dp_lb::{LoadBalanceMethod, RankPicker, RankRule};
use crate::director::{Arrivals, HttpDirector, StreamMsg};
use crate::edge::kv::KvOut;
use crate::edge::view::{worker_row, Row};
pub use crate::edge::view::{EngineView, WorkerView};
use crate::error::ServeError;
use crate::kv_events::zmq::KvPublishers;
use crate::metrics::Metrics;
use crate::openai::prompt::request_for;
use crate::vllm::kv_transfer::RemotePrefill;
use handoff_core::{DpRank, Generation, RequestId, Worker, WorkerHost, WorkerId};
use handoff_deployment::{
    deployment, engine_config, make_core, worker_policy, DeploymentConfig, EngineSpec,
};
use handoff_engine::fault::Fault;
use handoff_engine::{Engine, LocalHosts};
use handoff_kv_events::dynamo_events::RouterEventWriter;
use handoff_live_adapter::WallClock;
use handoff_router::Pool;
use handoff_serving::{serving, Report};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc::UnboundedSender;

/// What a worker's listener asks of the worker a request was sent to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// As the proxy flow places it: whole on an aggregated worker, a
    /// `do_remote_decode` prefill on a prefill worker
    /// ([`crate::director::HttpDirector::submit_at`]).
    Proxy,
    /// Served whole on a disaggregated worker: no `kv_transfer_params`
    /// ([`crate::director::HttpDirector::submit_local`]).
    Local,
}

/// What HTTP asks of the engine thread.
#[derive(Debug)]
pub enum Cmd {
    /// A new request.
    Submit {
        /// Its id (unique per server).
        id: RequestId,
        /// Prompt token ids.
        tokens: Vec<u32>,
        /// Output tokens it will generate.
        output_tokens: u32,
        /// The LoRA adapter it runs on.
        lora: Option<handoff_core::LoraAdapter>,
        /// Where its tokens go.
        tx: UnboundedSender<StreamMsg>,
    },
    /// Per-worker HTTP: a request sent to `worker`'s own listener (whole
    /// on an aggregated worker, a `do_remote_decode` prefill on a prefill
    /// worker).
    SubmitAt {
        /// The worker.
        worker: WorkerId,
        /// What the worker does with it.
        placement: Placement,
        /// The rank the client named (vLLM's `X-data-parallel-rank`);
        /// `None`: the engine's own choice.
        rank: Option<DpRank>,
        /// Its id (unique per server).
        id: RequestId,
        /// Prompt token ids.
        tokens: Vec<u32>,
        /// Output tokens it will generate.
        output_tokens: u32,
        /// The LoRA adapter it runs on.
        lora: Option<handoff_core::LoraAdapter>,
        /// Where its tokens go.
        tx: UnboundedSender<StreamMsg>,
    },
    /// Per-worker HTTP: a `do_remote_prefill` decode sent to decode worker
    /// `worker`'s listener.
    Decode {
        /// The worker.
        worker: WorkerId,
        /// The rank the client named (vLLM's `X-data-parallel-rank`);
        /// `None`: the engine's own choice.
        rank: Option<DpRank>,
        /// The prefill it decodes.
        remote: RemotePrefill,
        /// Prompt token ids (the prefill's).
        tokens: Vec<u32>,
        /// Output tokens it will generate.
        output_tokens: u32,
        /// Where its tokens go (a refusal too).
        tx: UnboundedSender<StreamMsg>,
    },
    /// SGLang PD: one leg of a request sent by the router to `worker`'s
    /// listener with its bootstrap room.
    Leg {
        /// The worker.
        worker: WorkerId,
        /// Which leg (the worker's pool).
        side: crate::sglang::bootstrap::Side,
        /// `bootstrap_host`, `bootstrap_port`, `bootstrap_room`.
        key: crate::sglang::bootstrap::RoomKey,
        /// The leg's id (unique per server; the pair's request takes the
        /// decode leg's).
        id: RequestId,
        /// Prompt token ids.
        tokens: Vec<u32>,
        /// Output tokens it will generate.
        output_tokens: u32,
        /// Where the leg's answer goes.
        tx: UnboundedSender<StreamMsg>,
    },
    /// The client went away: cancel it (a leg still waiting for its
    /// partner just leaves its room).
    Cancel(RequestId),
    /// `POST /admin/scale`: a scale operation on the fleet, applied now;
    /// the answer says what it did or why not.
    Scale {
        /// The operation.
        op: crate::director::fleet::ScaleOp,
        /// Where the answer goes.
        reply: tokio::sync::oneshot::Sender<ScaleAnswer>,
    },
    /// Stop (the report is produced).
    Shutdown,
}

/// What a [`Cmd::Scale`] is answered with.
pub type ScaleAnswer =
    Result<crate::director::fleet::ScaleDone, crate::director::fleet::ScaleRefused>;

/// Everything the engine thread needs.
pub struct DriverConfig {
    /// The deployment.
    pub cfg: DeploymentConfig,
    /// Every worker's engine, by id.
    pub specs: Vec<EngineSpec>,
    /// Model time runs this much faster than wall time.
    pub speed: f64,
    /// Prometheus families.
    pub metrics: Arc<Metrics>,
    /// ZMQ publishers, when asked for.
    pub kv: Option<KvPublishers>,
    /// `--kv-events-out`.
    pub jsonl: Option<RouterEventWriter>,
    /// Shared view for `/debug/workers` and `/ready`.
    pub view: Arc<Mutex<EngineView>>,
    /// How long an SGLang PD leg waits for its partner (model time).
    pub bootstrap_timeout: handoff_core::Duration,
    /// The hashes blocks are published under (`--block-hash`).
    pub hash_mode: handoff_kv_events::vllm_hash::BlockHashMode,
    /// SGLang's `--load-balance-method` for PD legs.
    pub load_balance: LoadBalanceMethod,
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The engine thread's engine: every worker host local, the HTTP director.
type ServeEngine = Engine<LocalHosts<'static, handoff_core::CoreBox>, HttpDirector>;

/// Runs the engine until `Shutdown` or every sender is gone, then finishes
/// the run and returns its report (in replay's shape, model time).
pub fn run(d: DriverConfig, rx: crossbeam_channel::Receiver<Cmd>) -> Result<Report, ServeError> {
    let DriverConfig {
        cfg,
        specs,
        speed,
        metrics,
        kv,
        jsonl,
        view,
        bootstrap_timeout,
        hash_mode,
        load_balance,
    } = d;
    let pools: Vec<Pool> = deployment(&cfg).iter().map(|(_, p)| *p).collect();
    let arrivals = Arrivals::default();
    let mut inner = serving(&cfg, arrivals.clone());
    // A server runs until stopped: per-request latencies go into
    // histograms, so the recorder does not grow with the request count.
    inner.fold_latencies();
    if let Some(sink) = metrics.slo_sink() {
        inner.set_request_sink(sink);
    }
    let kv_out = KvOut::new(pools.len(), cfg.block_size)
        .with_block_hash(hash_mode)
        .with_dp(cfg.dp)
        .with_jsonl(jsonl)
        .with_publishers(kv);
    let director = HttpDirector::new(
        inner,
        arrivals,
        pools.clone(),
        metrics.clone(),
        kv_out,
        bootstrap_timeout,
    );
    let mut state = Driver {
        engine: build_engine(&cfg, &specs, director)?,
        ranks: RankPicker::new(cfg.dp, pools.len()),
        // The rule a request without a room picks a rank by: the engine's own.
        no_room: match (cfg.backend, load_balance) {
            (handoff_core::Backend::Sglang, LoadBalanceMethod::TotalRequests) => {
                RankRule::FewestRequests
            }
            (handoff_core::Backend::Sglang, _) => RankRule::RoundRobin,
            _ => RankRule::LeastLoaded,
        },
        load_balance,
        prefills: crate::sglang::prealloc::PrefillResolver::new(
            if cfg.decode_workers == 0 {
                0
            } else {
                cfg.prefill_workers.max(1)
            },
            cfg.dp,
            load_balance,
        ),
        block_size: cfg.block_size,
        clock: WallClock::start(speed),
    };
    metrics.touch_all();
    loop {
        let now = state.clock.now();
        let engine = &mut state.engine;
        engine.advance_to(now);
        engine.director_mut().expire_legs(now);
        publish(engine, &pools, &metrics, &view, &mut state.ranks);
        let wake = match (engine.next_event_at(), engine.director().leg_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let cmd = match wake {
            Some(t) => rx.recv_deadline(state.clock.real(t)),
            None => rx
                .recv()
                .map_err(|_| crossbeam_channel::RecvTimeoutError::Disconnected),
        };
        match cmd {
            Ok(Cmd::Shutdown) | Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            // Applied, then published before the answer, so a client that
            // reads `/debug/workers` or `/metrics` after it sees the change.
            Ok(Cmd::Scale { op, reply }) => {
                let now = state.clock.now();
                state.engine.advance_to(now);
                let answer = crate::director::fleet::apply(&mut state.engine, op);
                state.engine.advance_to(now);
                publish(&mut state.engine, &pools, &metrics, &view, &mut state.ranks);
                let _ = reply.send(answer);
            }
            Ok(cmd) => state.handle(cmd),
        }
    }
    // Legs still without a pair end now; what is still in flight finishes
    // on model time, as a replay's tail.
    state.engine.director_mut().shutdown_legs();
    let (director, _) = state.engine.run();
    let (report, _) = director.into_serving().into_outcome();
    report.ok_or(ServeError::NoReport)
}

/// One engine over every worker's core, all hosted in this thread; a
/// restarted worker gets a new core from its spec (checked here first).
fn build_engine(
    cfg: &DeploymentConfig,
    specs: &[EngineSpec],
    director: HttpDirector,
) -> Result<ServeEngine, ServeError> {
    let policy = worker_policy(cfg);
    let mut handoff = cfg.handoff;
    if policy == handoff_core::HandoffPolicy::DestinationFirst {
        // A decode leg reserves before its prefill leg comes, and tells the
        // prefill worker at once: SGLang's prefill keeps the decode's
        // metadata for the room (`transfer_infos`) until its own leg's
        // sender takes it, so the fact waits as long as the reservation.
        handoff.early_fact_ttl = handoff.early_fact_ttl.max(
            handoff
                .reservation_ttl
                .min(handoff_core::Duration::from_secs(86_400)),
        );
    }
    let mut hosts = Vec::new();
    for ((id, _), spec) in deployment(cfg).iter().zip(specs) {
        let core = make_core(spec).map_err(ServeError::Engine)?;
        hosts.push(WorkerHost::new(Worker::new(
            *id,
            Generation(0),
            policy,
            handoff,
            core,
        )));
    }
    let restart_specs = specs.to_vec();
    let port = LocalHosts::new(hosts, move |w: WorkerId| {
        let spec = restart_specs.get(w.0 as usize).cloned().unwrap_or_default();
        make_core(&spec).unwrap_or_else(|e| unreachable!("checked at start: {e}"))
    });
    let director = director.with_waiting_timeout(cfg.handoff.reservation_ttl);
    let mut ecfg = engine_config(cfg);
    // One pass per step: a folded step would release many passes' tokens
    // at its end, and streaming would come in bursts.
    ecfg.multi_step = false;
    Ok(Engine::new(ecfg, port, director))
}

/// The engine thread's state between commands.
struct Driver {
    engine: ServeEngine,
    ranks: RankPicker,
    no_room: RankRule,
    /// SGLang's `--load-balance-method`, for PD legs.
    load_balance: LoadBalanceMethod,
    /// The prefill scheduler a decode leg reserves for on arrival.
    prefills: crate::sglang::prealloc::PrefillResolver,
    block_size: u32,
    clock: WallClock,
}

impl Driver {
    /// Applies one HTTP command at the wall clock's model time.
    fn handle(&mut self, cmd: Cmd) {
        let now = self.clock.now();
        let engine = &mut self.engine;
        engine.advance_to(now);
        match cmd {
            Cmd::Submit {
                id,
                tokens,
                output_tokens,
                lora,
                tx,
            } => {
                let mut req = request_for(id, &tokens, output_tokens, self.block_size, now);
                req.lora = lora;
                engine.director_mut().submit(req, &tokens, tx);
                engine.arrivals_changed();
            }
            Cmd::SubmitAt {
                worker,
                placement,
                rank,
                id,
                tokens,
                output_tokens,
                lora,
                tx,
            } => {
                let mut req = request_for(id, &tokens, output_tokens, self.block_size, now);
                req.lora = lora;
                let rule = rank.map_or(self.no_room, RankRule::Pinned);
                let worker = self.ranks.pick(worker, rule).unwrap_or(worker);
                let d = engine.director_mut();
                match placement {
                    Placement::Proxy => d.submit_at(req, &tokens, worker, tx),
                    Placement::Local => d.submit_local(req, &tokens, worker, tx),
                }
                engine.arrivals_changed();
            }
            Cmd::Decode {
                worker,
                rank,
                remote,
                tokens,
                output_tokens,
                tx,
            } => {
                let rule = rank.map_or(self.no_room, RankRule::Pinned);
                let picked = self.ranks.pick(worker, rule);
                let worker = picked.unwrap_or(worker);
                let d = engine.director_mut();
                match d.submit_decode(&remote, worker, &tokens, output_tokens, now, tx.clone()) {
                    Ok(()) => engine.arrivals_changed(),
                    Err(e) => {
                        if let Some(s) = picked {
                            self.ranks.refused(s, rule);
                        }
                        let _ = tx.send(StreamMsg::Refused(e));
                    }
                }
            }
            Cmd::Leg {
                worker,
                side,
                key,
                id,
                tokens,
                output_tokens,
                tx,
            } => {
                let prefill = side == crate::sglang::bootstrap::Side::Prefill;
                let early = if prefill {
                    self.prefills.learn(&key, worker);
                    None
                } else {
                    self.prefills.resolve(&key)
                };
                let rule = self.load_balance.leg_rule(prefill, key.room);
                let worker = self.ranks.pick(worker, rule).unwrap_or(worker);
                let leg = crate::sglang::bootstrap::Leg {
                    id,
                    side,
                    worker,
                    tokens,
                    payload: crate::director::LegOut { output_tokens, tx },
                };
                if engine.director_mut().leg(key, leg, now, early) {
                    engine.arrivals_changed();
                }
            }
            Cmd::Cancel(id) => {
                if let Some(request) = engine.director_mut().leg_gone(id) {
                    engine.inject_fault(Fault::Cancel { request });
                }
            }
            Cmd::Scale { .. } | Cmd::Shutdown => {}
        }
    }
}

/// After every engine instant: the KV events out, and each worker's
/// gauges and `/debug/workers` row from its host's state.
fn publish(
    engine: &mut ServeEngine,
    pools: &[Pool],
    metrics: &Metrics,
    view: &Mutex<EngineView>,
    ranks: &mut RankPicker,
) {
    engine.director_mut().edge_mut().kv_mut().flush(unix_now());
    let dp = engine.director().dp();
    let workers: Vec<WorkerView> = engine
        .port()
        .hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let f = h.final_state();
            let at = dp.address(f.worker);
            let row = Row {
                s: i,
                worker: at.worker.0,
                dp_rank: at.dp_rank.0,
                split: dp.is_split(),
            };
            let pool = pools.get(i).copied().unwrap_or(Pool::Decode);
            worker_row(metrics, ranks, row, pool, &f)
        })
        .collect();
    let fleet = engine.fleet();
    let mut workers = workers;
    if fleet.is_elastic() {
        for w in &mut workers {
            w.phase = Some(fleet.phase(WorkerId(w.worker)).name());
        }
        metrics.fleet_counts(&crate::director::fleet::counts(fleet));
    }
    let d = engine.director();
    let v = EngineView {
        workers,
        in_flight: d.in_flight(),
        open_streams: d.open_streams(),
        held: d.held(),
        model_time_s: engine.now().as_nanos() as f64 / 1e9,
    };
    if let Ok(mut g) = view.lock() {
        *g = v;
    }
}
