//! `serve --engine`: the process is exactly one engine of one backend,
//! prefill, decode or aggregated, with its `--dp-size` ranks, as a vLLM
//! or SGLang server process is. There is no frontend and no shared map:
//!
//! - its HTTP port is its worker listener ([`crate::http::worker`]: the
//!   OpenAI routes with `kv_transfer_params`, and everything routers poll)
//!   plus `/ready`, `/metrics` and `/debug/workers`;
//! - its ranks are wall-clock worker nodes, the ones `live` runs in its
//!   worker processes ([`ranks`]), each behind its own TCP endpoint on the
//!   side-channel port plus its rank;
//! - the PD handoff runs between processes: a prefill engine answers with
//!   `kv_transfer_params` naming its engine id, host and its rank's
//!   side-channel port, and the decode engine dials there and runs the
//!   destination role against it, with the lifecycle's own facts (reserve,
//!   heartbeats renewing the lease, read completion, release) on the wire
//!   ([`driver`]); a lost or silent peer is seen by the transport's
//!   liveness bound and ends the roles that depended on it.
//!
//! On SIGINT/SIGTERM the engine drains ([`crate::http::drain`]): `/ready`
//! answers 503 and new requests are refused with a 503 while the
//! responses in flight finish and its ranks let go of what they hold (a
//! prefill's pinned KV until its decode has read it); once nothing is
//! open, or the grace period ends (what is left then fails with
//! `shutdown`), it stops accepting connections, tears its ranks down
//! (telling its peers) and returns its [`PodSummary`].

mod driver;
pub mod ids;
pub mod peers;
mod ranks;

pub use driver::PodSummary;

use crate::director::dp_lb::RankRule;
use crate::director::driver::{Cmd, EngineView};
use crate::edge::kv::KvOut;
use crate::error::ServeError;
use crate::http::accept::{self, HttpTimeouts};
use crate::http::worker::{worker_router, WorkerState};
use crate::http::AppState;
use crate::kv_events::zmq::{KvEndpoints, KvPublishers};
use crate::metrics::info::{self, InfoState, Scope};
use crate::metrics::Metrics;
use crate::openai::Limits;
pub use crate::shutdown::FLUSH;
use crate::ServeConfig;
use driver::{DriverSetup, PodDriver};
use handoff_core::{Backend, DpLayout, Generation, WorkerId};
use handoff_deployment::{deployment, worker_policy};
use handoff_live_adapter::WallClock;
use handoff_router::Pool;
use handoff_transport::Liveness;
use ids::{PodIds, MAX_DP};
use ranks::{RankSetup, Ranks};
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

/// vLLM's default side-channel port (`VLLM_NIXL_SIDE_CHANNEL_PORT`).
pub const DEFAULT_SIDE_CHANNEL_PORT: u16 = 5600;

/// How long in-flight responses may take to finish after SIGTERM.
pub const DEFAULT_GRACE_S: f64 = 30.0;

/// What an engine process runs.
pub struct PodConfig {
    /// The deployment its engine is taken from (one prefill and one decode
    /// worker for `prefill`/`decode`, one aggregated worker otherwise),
    /// the engine's HTTP address, model and limits. Its per-worker
    /// listeners are not used.
    pub serve: ServeConfig,
    /// Which engine of it this process is.
    pub role: Pool,
    /// `--engine-id` (default: derived from the advertised host and the
    /// HTTP port, [`ids::default_engine_id`]).
    pub engine_id: Option<String>,
    /// Where the side channel listens: rank `r` on this port plus `r`
    /// (0: any free port per rank).
    pub side_channel_port: u16,
    /// The host other engines reach this one at (`remote_host`); default:
    /// the HTTP address's host, or `localhost` when that is unspecified
    /// (vLLM's `VLLM_NIXL_SIDE_CHANNEL_HOST` default).
    pub side_channel_host: Option<String>,
    /// How long in-flight responses may take after SIGTERM.
    pub grace: std::time::Duration,
    /// Pings and the silence after which a peer engine is taken for lost.
    pub liveness: Liveness,
    /// Where a decode engine may dial (`--kv-peer-allow`) and how long a
    /// dial may take (`--kv-connect-timeout-ms`).
    pub peers: peers::PeerPolicy,
}

/// Where an engine process listens, once it does.
#[derive(Clone, Debug)]
pub struct PodListening {
    /// Its HTTP port.
    pub http: SocketAddr,
    /// Each rank's side-channel port.
    pub side_channel: Vec<u16>,
    /// Its engine id and the number it stands for on the wire.
    pub engine_id: (String, u32),
    /// The host it tells decode engines to dial.
    pub host: String,
}

/// Runs one engine until SIGINT/SIGTERM (a second signal cuts the grace
/// period short).
pub fn serve_pod(
    c: PodConfig,
    on_listen: impl FnOnce(&PodListening),
) -> Result<PodSummary, ServeError> {
    let (stop, force) = crate::shutdown::shutdown_signals();
    crate::server::runtime()?.block_on(run(c, on_listen, stop, force))
}

/// [`serve_pod`] until `stop` completes (tests, embedders).
pub fn serve_pod_until(
    c: PodConfig,
    on_listen: impl FnOnce(&PodListening),
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<PodSummary, ServeError> {
    let force = std::future::pending::<()>();
    crate::server::runtime()?.block_on(run(c, on_listen, stop, force))
}

/// The schedulers of `role` in the deployment, or a flag error.
fn engine_specs(c: &PodConfig) -> Result<Vec<handoff_deployment::EngineSpec>, ServeError> {
    // Each rank is a wall-clock node of its own: lockstep ranks cannot be.
    if handoff_deployment::check_wall_driver(
        &c.serve.cfg,
        handoff_deployment::WallDriver::ServeEngine,
    )
    .is_err()
    {
        return Err(ServeError::Flag {
            flag: "--engine".into(),
            value: c.role.name().into(),
            expected: "independent ranks: serve --engine steps each rank on its own wall clock and cannot run lockstep (expert-parallel) ranks; serve the deployment in one process",
        });
    }
    let specs: Vec<_> = deployment(&c.serve.cfg)
        .iter()
        .zip(&c.serve.specs)
        .filter(|((_, p), _)| *p == c.role)
        .map(|(_, s)| s.clone())
        .collect();
    let per_worker = usize::from(c.serve.cfg.dp.dp_size());
    let bad = |expected| ServeError::Flag {
        flag: "--engine".into(),
        value: c.role.name().into(),
        expected,
    };
    if specs.is_empty() {
        return Err(bad("a role the deployment has"));
    }
    if per_worker > usize::from(MAX_DP) {
        return Err(ServeError::Flag {
            flag: "--dp-size".into(),
            value: per_worker.to_string(),
            expected: "at most 64 ranks per engine process",
        });
    }
    Ok(specs.into_iter().take(per_worker).collect())
}

/// `--kv-events` and its replay socket for this engine's `n` ranks: the
/// first of each list is the flag's address, rank `r` on its port plus `r`.
fn per_rank(ep: &KvEndpoints, n: usize) -> Result<KvEndpoints, ServeError> {
    // vLLM's default endpoint binds every interface with ZMQ's `*`
    // (`KVEventsConfig.endpoint`, `tcp://*:5557`).
    let each = |list: &[String], flag: &str| -> Result<Vec<String>, ServeError> {
        match list.first() {
            Some(base) => {
                let base = match base.strip_prefix("tcp://*:") {
                    Some(port) => format!("tcp://0.0.0.0:{port}"),
                    None => base.clone(),
                };
                crate::per_worker(&base, n, flag)
            }
            None => Ok(Vec::new()),
        }
    };
    Ok(KvEndpoints {
        publish: each(&ep.publish, "--kv-events")?,
        replay: each(&ep.replay, "--kv-replay")?,
        ..ep.clone()
    })
}

/// The host decode engines are told to dial.
fn advertised(c: &PodConfig, http: SocketAddr) -> String {
    match &c.side_channel_host {
        Some(h) => h.clone(),
        None if http.ip().is_unspecified() => "localhost".into(),
        None => http.ip().to_string(),
    }
}

async fn run(
    c: PodConfig,
    on_listen: impl FnOnce(&PodListening),
    stop: impl std::future::Future<Output = ()> + Send + 'static,
    force: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<PodSummary, ServeError> {
    let specs = engine_specs(&c)?;
    let listener = tokio::net::TcpListener::bind(&c.serve.http)
        .await
        .map_err(|e| ServeError::socket("--http", &c.serve.http, e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ServeError::socket("--http", &c.serve.http, e))?;
    let engine = Engine::start(&c, &specs, addr).await?;
    let (timeouts, grace) = (c.serve.http_timeouts, c.grace);
    let routes = engine.routes(c, specs);
    on_listen(&engine.listening);
    let tx = engine.tx.clone();
    let end_engine = move || {
        let _ = tx.send(Cmd::Shutdown);
    };
    let drain = (engine.drain.clone(), engine.view.clone());
    serve_http(
        listener,
        routes,
        timeouts,
        (grace, end_engine, drain),
        stop,
        force,
    )
    .await;
    let _ = engine.tx.send(Cmd::Shutdown);
    let ended = engine.driver.join().map_err(|_| ServeError::EnginePanicked);
    engine.metrics.conformance().print_summary();
    ended
}

/// This engine's identity: the host it advertises, its id and the ids
/// its ranks speak as.
fn identity(c: &PodConfig, addr: SocketAddr, n: usize) -> (String, String, PodIds) {
    let host = advertised(c, addr);
    let engine_id = c
        .engine_id
        .clone()
        .unwrap_or_else(|| ids::default_engine_id(&host, addr.port()));
    let pod_ids = PodIds {
        engine: ids::engine_number(&engine_id),
        dp_size: n as u16,
    };
    (host, engine_id, pod_ids)
}

/// The running engine: its ranks behind the driver's thread.
struct Engine {
    listening: PodListening,
    ids: PodIds,
    tx: crossbeam_channel::Sender<Cmd>,
    driver: std::thread::JoinHandle<PodSummary>,
    metrics: Arc<Metrics>,
    view: Arc<Mutex<EngineView>>,
    /// The KV event sockets as started (topics resolved), if any.
    kv_ep: Option<KvEndpoints>,
    /// `--lora-modules` and the LoRA flags, as the one-process mode serves
    /// them (listed at `/v1/models`, answered as the `model`).
    loras: Arc<crate::vllm::lora::LoraRegistry>,
    /// The drain SIGTERM starts.
    drain: Arc<crate::http::drain::Drain>,
}

impl Engine {
    /// Starts the ranks of `specs` (the HTTP server is at `addr`), the KV
    /// publishers and the driver.
    async fn start(
        c: &PodConfig,
        specs: &[handoff_deployment::EngineSpec],
        addr: SocketAddr,
    ) -> Result<Engine, ServeError> {
        let n = specs.len();
        let (host, engine_id, pod_ids) = identity(c, addr, n);
        let cfg = &c.serve.cfg;
        let dp = DpLayout::new(n as u64).unwrap_or(DpLayout::SINGLE);
        let metrics = Arc::new(Metrics::with_ranks(
            cfg.backend,
            &c.serve.model,
            &vec![c.role; n],
            dp,
        ));
        // Before any rank starts: a bad module fails the start alone.
        let loras = crate::vllm::lora::registry(&c.serve.model, c.serve.lora.clone(), &metrics)?;
        let clock = WallClock::start(c.serve.speed);
        // A restarted engine is a newer incarnation to the peers that knew it.
        let generation = Generation(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as u32),
        );
        let ranks = Ranks::start(RankSetup {
            ids: pod_ids,
            generation,
            role: c.role,
            policy: worker_policy(cfg),
            handoff: cfg.handoff,
            transfer: cfg.transfer,
            specs: specs.to_vec(),
            bind_host: addr.ip().to_string(),
            base_port: c.side_channel_port,
            liveness: c.liveness,
            clock,
        })?;
        let listening = PodListening {
            http: addr,
            side_channel: (0..n).map(|r| ranks.port(r)).collect(),
            engine_id: (engine_id, pod_ids.engine),
            host,
        };
        metrics.cache_config(specs);
        metrics.set_kv_bytes_per_token(
            cfg.transfer
                .link()
                .map_or(crate::metrics::nixl::DEFAULT_KV_BYTES_PER_TOKEN, |(b, _)| b),
        );
        // The engine's own listener names its llm-d topics.
        let kv_ep = match &c.serve.kv {
            Some(ep) => Some(crate::kv_events::sources::resolve_topics(
                per_rank(ep, n)?,
                &c.serve.model,
                dp,
                &[(0, addr)],
                &c.serve.http,
            )),
            None => None,
        };
        let publishers = match &kv_ep {
            Some(ep) => Some(KvPublishers::start(ep).await?),
            None => None,
        };
        let view = Arc::new(Mutex::new(EngineView::default()));
        let setup = DriverSetup {
            ids: pod_ids,
            role: c.role,
            block_size: cfg.block_size,
            kv_failure: cfg.handoff.kv_load_failure,
            rank_rule: if cfg.backend == Backend::Sglang {
                RankRule::RoundRobin
            } else {
                RankRule::LeastLoaded
            },
            metrics: metrics.clone(),
            view: view.clone(),
            clock,
            kv: KvOut::new(n, cfg.block_size)
                .with_block_hash(c.serve.hash_mode.clone())
                .with_dp(dp)
                .with_publishers(publishers),
            legs: driver::legs::LegRooms::new(
                crate::server::bootstrap_timeout(c.serve.bootstrap_timeout_s)?,
                cfg.handoff.tombstones,
            ),
            peers: c.peers.clone(),
        };
        metrics.touch_all();
        let (tx, rx) = crossbeam_channel::unbounded::<Cmd>();
        let driver = std::thread::Builder::new()
            .name("engine".into())
            .spawn(move || PodDriver::new(setup, ranks).run(rx))
            .map_err(|source| ServeError::Spawn {
                what: "the engine thread",
                source,
            })?;
        Ok(Engine {
            listening,
            ids: pod_ids,
            tx,
            driver,
            metrics,
            view,
            kv_ep,
            loras: Arc::new(loras),
            drain: Arc::default(),
        })
    }

    /// The engine's HTTP routes: its worker listener's, what routers poll,
    /// vLLM's render endpoints, readiness and the debug view.
    fn routes(&self, c: PodConfig, specs: Vec<handoff_deployment::EngineSpec>) -> axum::Router {
        let cfg = &c.serve.cfg;
        let n = specs.len();
        let dp = DpLayout::new(n as u64).unwrap_or(DpLayout::SINGLE);
        let policy = worker_policy(cfg);
        let state = Arc::new(AppState {
            tx: self.tx.clone(),
            next_id: AtomicU64::new(self.ids.first_request().0),
            limits: Limits {
                model: c.serve.model.clone(),
                max_model_len: c.serve.max_model_len,
                tokenizer: c.serve.tokenizer,
                loras: self.loras.clone(),
            },
            metrics: self.metrics.clone(),
            view: self.view.clone(),
            created: crate::http::state::unix_secs(),
            rids: Arc::default(),
            client_faults: c.serve.client_faults,
            drain: self.drain.clone(),
        });
        let info = Arc::new(InfoState {
            app: state.clone(),
            backend: cfg.backend,
            pools: vec![c.role; n],
            specs,
            dp,
            policy,
            engine_process: true,
            kv: self.kv_ep.clone(),
            load_balance: c.serve.load_balance_method,
        });
        let ws = Arc::new(WorkerState {
            app: state.clone(),
            worker: WorkerId(0),
            pool: c.role,
            policy,
            backend: cfg.backend,
            dp,
            host: self.listening.host.clone(),
            port: self.listening.side_channel.first().copied().unwrap_or(0),
        });
        worker_router(ws)
            .merge(info::routes(info, Scope::Worker(0)))
            .merge(crate::openai::render::routes(state.clone()))
            .merge(crate::http::pod_routes(state))
    }
}

/// What the drain watches: the open responses and the driver's view.
type Draining = (Arc<crate::http::drain::Drain>, Arc<Mutex<EngineView>>);

/// Serves until `stop`, then drains: readiness fails and new requests
/// are refused while the open responses finish and the ranks let go of
/// what they hold, for at most `grace`. Then the listener stops; if the
/// grace period ran out, `end_engine` runs: the driver fails every request
/// still open with `shutdown` (counted in its summary), which each
/// response writes (a stream's error event and `[DONE]`, a whole
/// response's 503); what has not been written within [`FLUSH`] is cut.
/// `force` cuts at once.
async fn serve_http(
    listener: tokio::net::TcpListener,
    routes: axum::Router,
    timeouts: HttpTimeouts,
    (grace, end_engine, (drain, view)): (std::time::Duration, impl FnOnce(), Draining),
    stop: impl std::future::Future<Output = ()> + Send + 'static,
    force: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut http = tokio::spawn(accept::serve(listener, routes, timeouts, stop_rx));
    tokio::select! {
        () = stop => {}
        _ = &mut http => return,
    }
    drain.start();
    tokio::pin!(force);
    let grace_over = tokio::select! {
        () = quiet(&drain, &view) => false,
        () = tokio::time::sleep(grace) => true,
        () = &mut force => return http.abort(),
    };
    let _ = stop_tx.send(true);
    if grace_over {
        end_engine();
    }
    tokio::select! {
        _ = &mut http => {}
        () = tokio::time::sleep(FLUSH) => http.abort(),
        () = force => http.abort(),
    }
}

/// Until no response is open and every rank holds nothing (a prefill's
/// pinned KV read, a decode's reservations ended), seen on two polls in a
/// row: the view is the driver's after its last instant, so one poll may
/// predate a request that has just ended its response.
async fn quiet(drain: &crate::http::drain::Drain, view: &Mutex<EngineView>) {
    const POLL: std::time::Duration = std::time::Duration::from_millis(20);
    let mut seen = 0;
    while seen < 2 {
        let idle = drain.open() == 0
            && view.lock().is_ok_and(|v| {
                v.in_flight == 0 && v.open_streams == 0 && v.workers.iter().all(|w| w.drained)
            });
        seen = if idle { seen + 1 } else { 0 };
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_ports_are_per_rank_from_the_flags_first_address() {
        let ep = KvEndpoints {
            publish: vec!["tcp://*:5557".into(), "tcp://*:5558".into()],
            replay: vec!["tcp://*:6000".into()],
            ..Default::default()
        };
        let r = per_rank(&ep, 3).unwrap();
        let all = |p: u16| format!("tcp://0.0.0.0:{p}");
        assert_eq!(r.publish, [all(5557), all(5558), all(5559)]);
        assert_eq!(r.replay, [all(6000), all(6001), all(6002)]);
        let one = KvEndpoints {
            publish: vec!["tcp://127.0.0.1:7000".into()],
            ..ep.clone()
        };
        assert_eq!(per_rank(&one, 1).unwrap().publish, ["tcp://127.0.0.1:7000"]);
        let none = KvEndpoints {
            replay: Vec::new(),
            ..ep
        };
        assert!(per_rank(&none, 2).unwrap().replay.is_empty());
    }
}
