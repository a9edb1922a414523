//! Starting and stopping a server: the tokio runtime (HTTP and ZMQ), the
//! engine thread, and shutdown on SIGINT/SIGTERM (or a caller's signal).

use crate::director::driver::{self, Cmd, DriverConfig, EngineView};
use crate::error::ServeError;
use crate::http::accept::{self, HttpTimeouts};
use crate::http::worker::{worker_router, WorkerState};
use crate::http::{router, AppState};
use crate::kv_events::zmq::{KvEndpoints, KvPublishers};
use crate::metrics::info::{self, InfoState, Scope};
use crate::metrics::Metrics;
use crate::openai::Limits;
use crate::shutdown::{shutdown_signals, FLUSH};
use handoff_deployment::{deployment, DeploymentConfig, EngineSpec};
use handoff_kv_events::dynamo_events::RouterEventWriter;
use handoff_serving::Report;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

/// Everything `serve` needs.
pub struct ServeConfig {
    /// The deployment (as replay builds it).
    pub cfg: DeploymentConfig,
    /// Every worker's engine, by id.
    pub specs: Vec<EngineSpec>,
    /// Model time runs this much faster than wall time.
    pub speed: f64,
    /// Where HTTP listens (`127.0.0.1:0` picks a free port).
    pub http: String,
    /// How long a client may take to send a request, on every listener
    /// ([`crate::http::accept`]).
    pub http_timeouts: HttpTimeouts,
    /// The served model name.
    pub model: String,
    /// Prompt plus output tokens per request, at most.
    pub max_model_len: u32,
    /// ZMQ KV event sockets, if asked for.
    pub kv: Option<KvEndpoints>,
    /// `--kv-events-out`.
    pub kv_jsonl: Option<RouterEventWriter>,
    /// Per-worker HTTP listeners for a disaggregation proxy
    /// ([`crate::http::worker`]): worker id and where it listens.
    pub worker_http: Vec<(u32, String)>,
    /// How long an SGLang PD leg waits for its partner, in model seconds
    /// ([`crate::sglang::bootstrap`]; SGLang's default is
    /// [`crate::sglang::bootstrap::DEFAULT_TIMEOUT_S`]).
    pub bootstrap_timeout_s: f64,
    /// `--tokenizer`: what text prompts are tokenised with.
    pub tokenizer: crate::openai::tokenizer::Tokenizer,
    /// `--block-hash`: the hashes blocks are published under.
    pub hash_mode: handoff_kv_events::vllm_hash::BlockHashMode,
    /// Obey requests' fault headers (`--client-faults`,
    /// [`crate::http::client_faults`]).
    pub client_faults: bool,
    /// `--load-balance-method`: SGLang's rank rule for PD legs.
    pub load_balance_method: crate::LoadBalanceMethod,
    /// LoRA (`--enable-lora`, `--lora-modules`, `--max-loras`; vLLM only);
    /// `None`: no adapters ([`crate::vllm::lora`]).
    pub lora: Option<crate::vllm::lora::LoraConfig>,
    /// `--admin`: serve `POST /admin/scale` ([`crate::http::admin`]) over
    /// the elastic fleet in `cfg.faults.fleet` (every worker ready from
    /// the start when it is empty).
    pub admin: bool,
}

/// Where a server listens, once it does.
#[derive(Clone, Debug)]
pub struct Listening {
    /// The frontend (`--http`).
    pub http: SocketAddr,
    /// Each per-worker listener: worker id and address.
    pub workers: Vec<(u32, SocketAddr)>,
}

/// `WORKER=ADDR` (`--worker-http`).
pub fn parse_worker_http(s: &str) -> Result<(u32, String), ServeError> {
    let bad = |expected| ServeError::Flag {
        flag: "--worker-http".into(),
        value: s.to_string(),
        expected,
    };
    let (w, addr) = s.split_once('=').ok_or_else(|| bad("WORKER=HOST:PORT"))?;
    let w = w
        .parse::<u32>()
        .map_err(|_| bad("WORKER=HOST:PORT with a numeric worker"))?;
    Ok((w, addr.to_string()))
}

/// Worker i on `host:base+i`, for `n` workers (`--worker-http-base-port`).
pub fn worker_http_ports(
    host: &str,
    base: u16,
    n: usize,
) -> Result<Vec<(u32, String)>, ServeError> {
    (0..n)
        .map(|i| {
            let p = u16::try_from(usize::from(base) + i).map_err(|_| ServeError::PortRange {
                flag: "--worker-http-base-port".into(),
                value: base.to_string(),
                worker: i,
            })?;
            Ok((i as u32, format!("{host}:{p}")))
        })
        .collect()
}

/// `tcp://HOST:PORT` with `PORT + i` for each of `n` workers.
pub fn per_worker(base: &str, n: usize, flag: &str) -> Result<Vec<String>, ServeError> {
    let bad = |expected| ServeError::Flag {
        flag: flag.to_string(),
        value: base.to_string(),
        expected,
    };
    let rest = base
        .strip_prefix("tcp://")
        .ok_or_else(|| bad("tcp://HOST:PORT"))?;
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| bad("tcp://HOST:PORT"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| bad("tcp://HOST:PORT with a numeric port"))?;
    (0..n)
        .map(|i| {
            let p = u16::try_from(usize::from(port) + i).map_err(|_| ServeError::PortRange {
                flag: flag.to_string(),
                value: base.to_string(),
                worker: i,
            })?;
            Ok(format!("tcp://{host}:{p}"))
        })
        .collect()
}

/// Runs the server until SIGINT/SIGTERM; `on_listen` is told the bound
/// HTTP address first. Returns the run's report.
pub fn serve(c: ServeConfig, on_listen: impl FnOnce(SocketAddr)) -> Result<Report, ServeError> {
    let (stop, force) = shutdown_signals();
    runtime()?.block_on(run(
        c,
        |l: Listening| on_listen(l.http),
        (stop, None),
        force,
    ))
}

/// [`serve`], telling `on_listen` every bound address (the per-worker
/// listeners' too).
pub fn serve_workers(
    c: ServeConfig,
    on_listen: impl FnOnce(Listening),
) -> Result<Report, ServeError> {
    let (stop, force) = shutdown_signals();
    runtime()?.block_on(run(c, on_listen, (stop, None), force))
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, ServeError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|source| ServeError::Spawn {
            what: "the runtime",
            source,
        })
}

/// [`serve`] until `stop` completes instead of a signal (tests, embedders).
pub fn serve_until(
    c: ServeConfig,
    on_listen: impl FnOnce(SocketAddr),
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<Report, ServeError> {
    let force = std::future::pending::<()>();
    runtime()?.block_on(run(
        c,
        |l: Listening| on_listen(l.http),
        (stop, None),
        force,
    ))
}

/// [`serve_until`], telling `on_listen` every bound address (the
/// per-worker listeners' too).
pub fn serve_workers_until(
    c: ServeConfig,
    on_listen: impl FnOnce(Listening),
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<Report, ServeError> {
    serve_workers_until_forced(c, on_listen, stop, std::future::pending())
}

/// [`serve_workers`] with a grace period: after the first signal, open
/// responses may take `grace`; then the engine stops and finishes what is
/// still in flight on model time at once, so every open response ends
/// with its status (see [`serve_listeners`]).
pub fn serve_workers_graced(
    c: ServeConfig,
    grace: std::time::Duration,
    on_listen: impl FnOnce(Listening),
) -> Result<Report, ServeError> {
    let (stop, force) = shutdown_signals();
    runtime()?.block_on(run(c, on_listen, (stop, Some(grace)), force))
}

/// [`serve_workers_graced`] until `stop` completes instead of a signal.
pub fn serve_workers_until_graced(
    c: ServeConfig,
    on_listen: impl FnOnce(Listening),
    stop: impl std::future::Future<Output = ()> + Send + 'static,
    grace: std::time::Duration,
) -> Result<Report, ServeError> {
    let force = std::future::pending::<()>();
    runtime()?.block_on(run(c, on_listen, (stop, Some(grace)), force))
}

/// [`serve_workers_until`], with `force` ending the graceful shutdown
/// `stop` began: connections still open are cut, and what was in flight
/// is counted on stderr (the second signal of [`serve`]).
pub fn serve_workers_until_forced(
    c: ServeConfig,
    on_listen: impl FnOnce(Listening),
    stop: impl std::future::Future<Output = ()> + Send + 'static,
    force: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<Report, ServeError> {
    runtime()?.block_on(run(c, on_listen, (stop, None), force))
}

async fn run(
    mut c: ServeConfig,
    on_listen: impl FnOnce(Listening),
    (stop, grace): (
        impl std::future::Future<Output = ()> + Send + 'static,
        Option<std::time::Duration>,
    ),
    force: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<Report, ServeError> {
    let workers = deployment(&c.cfg);
    if c.specs.len() != workers.len() {
        return Err(ServeError::Specs {
            specs: c.specs.len(),
            schedulers: workers.len(),
        });
    }
    let pools: Vec<_> = workers.iter().map(|(_, p)| *p).collect();
    if c.admin {
        admin_fleet(&mut c.cfg)?;
    }
    let policy = handoff_deployment::worker_policy(&c.cfg);
    let dp = c.cfg.dp;
    // A listener is a worker's, shared by its ranks.
    let n_workers = pools.len() / usize::from(dp.dp_size());
    let worker_listeners = bind_workers(&c.worker_http, n_workers).await?;
    let gpus = c.cfg.sizing.as_ref().map_or(0, |z| {
        let decode = pools
            .iter()
            .filter(|p| **p == handoff_router::Pool::Decode)
            .count();
        z.gpus(pools.len() as u64, decode as u64)
    });
    let sglang = c.cfg.backend == handoff_core::Backend::Sglang;
    let m = Metrics::with_ranks(c.cfg.backend, &c.model, &pools, dp).with_slo(
        c.cfg.sizing.as_ref(),
        gpus,
        sglang,
    );
    let metrics = Arc::new(if c.admin { m.with_fleet(sglang) } else { m });
    metrics.cache_config(&c.specs);
    metrics.set_kv_bytes_per_token(
        c.cfg
            .transfer
            .link()
            .map_or(crate::metrics::nixl::DEFAULT_KV_BYTES_PER_TOKEN, |(b, _)| b),
    );
    let loras = crate::vllm::lora::registry(&c.model, c.lora.clone(), &metrics)?;
    let kv_ep = c.kv.clone().map(|ep| {
        let addrs: Vec<_> = worker_listeners.iter().map(|(w, _, a)| (*w, *a)).collect();
        crate::kv_events::sources::resolve_topics(ep, &c.model, dp, &addrs, &c.http)
    });
    let kv = match &kv_ep {
        Some(ep) => Some(KvPublishers::start(ep).await?),
        None => None,
    };
    let (listener, addr) = bind(&c.http, "--http").await?;
    let view = Arc::new(Mutex::new(EngineView::default()));
    let (tx, rx) = crossbeam_channel::unbounded::<Cmd>();
    let backend = c.cfg.backend;
    let load_balance = c.load_balance_method;
    let timeouts = c.http_timeouts;
    let admin = c.admin;
    let info_specs = c.specs.clone();
    let d = DriverConfig {
        cfg: c.cfg,
        specs: c.specs,
        speed: c.speed,
        metrics: metrics.clone(),
        kv,
        jsonl: c.kv_jsonl,
        view: view.clone(),
        bootstrap_timeout: bootstrap_timeout(c.bootstrap_timeout_s)?,
        hash_mode: c.hash_mode,
        load_balance: c.load_balance_method,
    };
    let engine = spawn_engine(d, rx)?;
    // The shutdown summary of the conformance report reads it.
    let ledger = metrics.clone();
    let state = Arc::new(AppState {
        tx: tx.clone(),
        next_id: AtomicU64::new(0),
        limits: Limits {
            model: c.model,
            max_model_len: c.max_model_len,
            tokenizer: c.tokenizer,
            loras: Arc::new(loras),
        },
        metrics,
        view: view.clone(),
        created: crate::http::state::unix_secs(),
        rids: Arc::default(),
        client_faults: c.client_faults,
        drain: Arc::default(),
    });
    let info = Arc::new(InfoState {
        app: state.clone(),
        backend,
        pools: pools.clone(),
        specs: info_specs,
        dp,
        policy,
        engine_process: false,
        kv: kv_ep,
        load_balance,
    });
    on_listen(Listening {
        http: addr,
        workers: worker_listeners.iter().map(|(w, _, a)| (*w, *a)).collect(),
    });
    // Every listener stops when `stop` does.
    let (stop_rx, force_rx) = relay(stop, force);
    let others = spawn_workers(worker_listeners, &info, timeouts, &stop_rx);
    let render = crate::openai::render::routes(state.clone());
    let mut front = router(state.clone())
        .merge(info::routes(info, Scope::Front))
        .merge(render);
    if admin {
        front = front.merge(crate::http::admin::routes(state));
    }
    let end_engine = {
        let tx = tx.clone();
        move || {
            let _ = tx.send(Cmd::Shutdown);
        }
    };
    serve_listeners(
        (listener, front, timeouts),
        others,
        (stop_rx, grace, end_engine),
        force_rx,
        &view,
    )
    .await;
    let _ = tx.send(Cmd::Shutdown);
    let ended = engine.join().map_err(|_| ServeError::EnginePanicked)?;
    ledger.conformance().print_summary();
    ended
}

/// `--admin`'s fleet: the one `cfg` names, else every worker a member,
/// ready from the start, with the default startup delay. One rank per
/// worker: a fleet's members are schedulers, as replay's are.
fn admin_fleet(cfg: &mut DeploymentConfig) -> Result<(), ServeError> {
    if cfg.dp.dp_size() != 1 {
        return Err(ServeError::Flag {
            flag: "--admin".into(),
            value: format!("--dp-size {}", cfg.dp.dp_size()),
            expected: "--dp-size 1: an elastic fleet scales whole workers of one rank",
        });
    }
    if cfg.faults.fleet.is_empty() {
        let (p, d) = (cfg.prefill_workers, cfg.decode_workers);
        cfg.faults.fleet = handoff_engine::scale::Fleet::pools(
            p,
            p,
            d,
            d,
            handoff_core::Duration::from_secs(DEFAULT_STARTUP_DELAY_S),
        );
    }
    Ok(())
}

/// A scale-up's startup delay (model load and warm-up) when the fleet is
/// not given: replay's `--startup-delay` default.
pub const DEFAULT_STARTUP_DELAY_S: u64 = 30;

/// Binds `addr` (given as `flag`) and says where it listens.
async fn bind(addr: &str, flag: &str) -> Result<(tokio::net::TcpListener, SocketAddr), ServeError> {
    let l = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| ServeError::socket(flag, addr, e))?;
    let at = l
        .local_addr()
        .map_err(|e| ServeError::socket(flag, addr, e))?;
    Ok((l, at))
}

/// The engine thread, running [`driver::run`] until `Shutdown`.
fn spawn_engine(
    d: DriverConfig,
    rx: crossbeam_channel::Receiver<Cmd>,
) -> Result<std::thread::JoinHandle<Result<Report, ServeError>>, ServeError> {
    std::thread::Builder::new()
        .name("engine".into())
        .spawn(move || driver::run(d, rx))
        .map_err(|source| ServeError::Spawn {
            what: "the engine thread",
            source,
        })
}

/// Relays `stop` to every listener (a watch that turns true) and then
/// `force` (a oneshot that fires).
fn relay(
    stop: impl std::future::Future<Output = ()> + Send + 'static,
    force: impl std::future::Future<Output = ()> + Send + 'static,
) -> (
    tokio::sync::watch::Receiver<bool>,
    tokio::sync::oneshot::Receiver<()>,
) {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (force_tx, force_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        stop.await;
        let _ = stop_tx.send(true);
        force.await;
        let _ = force_tx.send(());
    });
    (stop_rx, force_rx)
}

/// Binds each `--worker-http` listener (worker id, address), refusing a
/// worker the deployment does not have.
async fn bind_workers(
    asked: &[(u32, String)],
    n_workers: usize,
) -> Result<Vec<(u32, tokio::net::TcpListener, SocketAddr)>, ServeError> {
    let mut out = Vec::new();
    for (w, a) in asked {
        if *w as usize >= n_workers {
            return Err(ServeError::NoSuchWorker {
                worker: *w,
                workers: n_workers,
            });
        }
        let l = tokio::net::TcpListener::bind(a)
            .await
            .and_then(|l| Ok((l.local_addr()?, l)))
            .map_err(|e| ServeError::socket("--worker-http", format!("{w}={a}"), e))?;
        out.push((*w, l.1, l.0));
    }
    Ok(out)
}

/// `--disaggregation-bootstrap-timeout` as model time.
pub(crate) fn bootstrap_timeout(secs: f64) -> Result<handoff_core::Duration, ServeError> {
    handoff_core::Duration::try_from_secs_f64(secs).map_err(|_| ServeError::Flag {
        flag: "--disaggregation-bootstrap-timeout".into(),
        value: secs.to_string(),
        expected: "a number of seconds",
    })
}

/// Each per-worker listener on a task of its own, until `stop`.
fn spawn_workers(
    listeners: Vec<(u32, tokio::net::TcpListener, SocketAddr)>,
    info: &Arc<InfoState>,
    timeouts: HttpTimeouts,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let dp = info.dp;
    listeners
        .into_iter()
        .map(|(w, l, a)| {
            let ws = Arc::new(WorkerState {
                app: info.app.clone(),
                worker: handoff_core::WorkerId(w),
                pool: info.pools[w as usize * usize::from(dp.dp_size())],
                policy: info.policy,
                backend: info.backend,
                dp,
                host: a.ip().to_string(),
                port: a.port(),
            });
            tokio::spawn(serve_worker(ws, info.clone(), l, timeouts, stop.clone()))
        })
        .collect()
}

/// One worker's listener: its PD endpoints, its info routes and the
/// render routes, until `stop`.
async fn serve_worker(
    ws: Arc<WorkerState>,
    info: Arc<InfoState>,
    l: tokio::net::TcpListener,
    timeouts: HttpTimeouts,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let w = ws.worker.0 as usize;
    let render = crate::openai::render::routes(ws.app.clone());
    let routes = worker_router(ws)
        .merge(info::routes(info, Scope::Worker(w)))
        .merge(render);
    accept::serve(l, routes, timeouts, stop).await
}

/// Serves the front until `stop`, then waits for every listener to finish
/// its responses, or cuts them off when `force` comes first. With a
/// `grace` period, when it ends `end_engine` stops the engine: what is
/// still in flight finishes on model time at once (the driver's tail) and
/// SGLang PD legs still without a pair fail with `shutdown`, so every
/// response still open is answered; what has not been written within
/// [`FLUSH`] is cut.
async fn serve_listeners(
    (listener, front, timeouts): (tokio::net::TcpListener, axum::Router, HttpTimeouts),
    others: Vec<tokio::task::JoinHandle<()>>,
    (stop_rx, grace, end_engine): (
        tokio::sync::watch::Receiver<bool>,
        Option<std::time::Duration>,
        impl FnOnce(),
    ),
    force_rx: tokio::sync::oneshot::Receiver<()>,
    view: &Mutex<EngineView>,
) {
    let aborts: Vec<_> = others.iter().map(|o| o.abort_handle()).collect();
    let mut stopped = stop_rx.clone();
    let graceful = async {
        accept::serve(listener, front, timeouts, stop_rx).await;
        for o in others {
            let _ = o.await;
        }
    };
    tokio::pin!(graceful, force_rx);
    let grace_over = async {
        let _ = stopped.wait_for(|s| *s).await;
        match grace {
            Some(g) => tokio::time::sleep(g).await,
            None => std::future::pending().await,
        }
    };
    let forced = tokio::select! {
        () = &mut graceful => return,
        () = grace_over => {
            end_engine();
            tokio::select! {
                () = &mut graceful => return,
                () = tokio::time::sleep(FLUSH) => false,
                Ok(()) = &mut force_rx => true,
            }
        }
        Ok(()) = &mut force_rx => true,
    };
    // Dropping the front's accept loop drops its connections; the worker
    // listeners' loops are aborted with theirs.
    for a in aborts {
        a.abort();
    }
    if forced {
        let (in_flight, open) = view
            .lock()
            .map_or((0, 0), |v| (v.in_flight, v.open_streams));
        eprintln!(
            "handoff-mocker serve: forced exit: {in_flight} requests in flight and \
             {open} open HTTP responses cut off"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_worker_ports() {
        assert_eq!(
            per_worker("tcp://127.0.0.1:5557", 3, "--kv-events").unwrap(),
            vec![
                "tcp://127.0.0.1:5557",
                "tcp://127.0.0.1:5558",
                "tcp://127.0.0.1:5559"
            ]
        );
        assert!(per_worker("127.0.0.1:5557", 1, "--kv-events").is_err());
        assert!(per_worker("tcp://h:x", 1, "--kv-events").is_err());
        assert!(per_worker("tcp://h:65535", 2, "--kv-events").is_err());
    }
}
