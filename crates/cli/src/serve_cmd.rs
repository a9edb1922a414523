//! `serve`: the deployment behind an OpenAI-compatible HTTP server, with
//! vLLM-format KV events on ZMQ and Prometheus metrics (`handoff-serve`).
//! Requests run through the one engine and the shared serving director on
//! the wall clock; on SIGINT/SIGTERM the run's report is written like any
//! other run's.

use crate::args::DeployArgs;
use handoff_kv_events::RouterEventWriter;
use handoff_serve::{per_worker, worker_http_ports, KvEndpoints, KvEventEncoding, ServeConfig};
use std::path::PathBuf;

/// Options of `serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    deploy: DeployArgs,
    #[command(flatten)]
    pod: crate::pod_cmd::PodArgs,
    /// Where HTTP listens (port 0 picks a free one; the address is printed).
    #[arg(long, default_value = "127.0.0.1:8000", value_name = "ADDR")]
    http: String,
    /// How long a client may take to send a request head, from a new
    /// connection or the end of the previous response (vLLM's
    /// VLLM_HTTP_TIMEOUT_KEEP_ALIVE, uvicorn's timeout_keep_alive: 5 s).
    #[arg(long, default_value_t = handoff_serve::DEFAULT_HEADER_TIMEOUT_S, value_name = "SECONDS")]
    http_header_timeout_s: f64,
    /// How long a client may take to send a request body, from its head.
    #[arg(long, default_value_t = handoff_serve::DEFAULT_BODY_TIMEOUT_S, value_name = "SECONDS")]
    http_body_timeout_s: f64,
    /// The model name served (requests must name it), as vLLM's flag of
    /// the same name [default: --model, else handoff-mocker; --model
    /// without --gpu only names the model served].
    #[arg(long, value_name = "NAME")]
    served_model_name: Option<String>,
    /// Prompt plus output tokens per request, at most.
    #[arg(long, default_value_t = 32_768, value_name = "TOKENS")]
    max_model_len: u32,
    /// Model time runs this many times faster than wall time.
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// Publish KV events in vLLM's ZMQ format: worker i binds a PUB socket
    /// on PORT + i; with --dp-size N, rank r of worker i on PORT + i·N + r
    /// (each rank its own publisher, as vLLM offsets a rank's port).
    #[arg(long, value_name = "tcp://HOST:PORT", group = "kv_sink")]
    kv_events: Option<String>,
    /// vLLM's ROUTER replay socket for the KV events: worker i on PORT + i
    /// (needs --kv-events).
    #[arg(
        long,
        alias = "kv-events-replay",
        value_name = "tcp://HOST:PORT",
        requires = "kv_events"
    )]
    kv_replay: Option<String>,
    /// The topic frame of every KV event message (vLLM's default: empty).
    #[arg(long, default_value = "", value_name = "TOPIC")]
    kv_topic: String,
    /// How each ZMQ event is laid out: msgspec's array form (array, vLLM
    /// before 0.28) or its tagged map (map, vLLM 0.28 on, which
    /// vllm-router's kv_aware subscriber reads).
    #[arg(long, value_enum, default_value_t = KvEncoding::Array, requires = "kv_sink")]
    kv_event_encoding: KvEncoding,
    #[command(flatten)]
    gateway: crate::serve_gateway_args::GatewayArgs,
    /// Write every KV event as a Dynamo `RouterEvent` JSON line to FILE.
    #[arg(long, value_name = "FILE")]
    kv_events_out: Option<PathBuf>,
    /// Per-worker HTTP for a disaggregation proxy (vLLM's
    /// `kv_transfer_params`): worker i also listens on the --http host at
    /// PORT + i.
    #[arg(long, value_name = "PORT")]
    worker_http_base_port: Option<u16>,
    /// Per-worker HTTP for one worker, WORKER=HOST:PORT (repeatable).
    #[arg(long, value_name = "WORKER=HOST:PORT", value_parser = handoff_serve::parse_worker_http)]
    worker_http: Vec<(u32, String)>,
    /// SGLang PD on the per-worker listeners: how long a leg sent by
    /// sglang-router waits for its partner leg, in model seconds (SGLang's
    /// SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT, 300 by default).
    #[arg(long, default_value_t = handoff_serve::DEFAULT_BOOTSTRAP_TIMEOUT_S, value_name = "SECONDS")]
    bootstrap_timeout_s: f64,
    /// A Hugging Face tokenizer.json for text prompts (completions with the
    /// tokenizer's special tokens, chat rendered by the built-in template
    /// without them); without it, the built-in stand-in tokenizer.
    #[arg(long, value_name = "FILE")]
    tokenizer: Option<PathBuf>,
    /// The block hashes every KV event channel publishes: the cores' own
    /// chain (mocker), or vLLM's sha256_cbor prefix-cache chain (vllm).
    #[arg(long, value_enum, default_value_t = BlockHash::Mocker)]
    block_hash: BlockHash,
    /// With --block-hash vllm: the PYTHONHASHSEED vLLM's NONE_HASH is made
    /// from (a router must hash with the same one): `random` or an integer
    /// in 0..=4294967295, as Python accepts.
    #[arg(
        long,
        default_value = handoff_kv_events::vllm_hash::DEFAULT_SEED,
        value_name = "SEED",
        value_parser = handoff_kv_events::vllm_hash::python_hash_seed
    )]
    block_hash_seed: String,
    /// Write the run's report, as JSON, to FILE at shutdown.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// SGLang PD with --dp-size: how a leg picks its rank (SGLang's flag):
    /// `auto` follows the bootstrap room on prefill workers and
    /// round-robins decode legs.
    #[arg(long, value_enum, default_value_t = LbMethod::Auto, value_name = "METHOD")]
    load_balance_method: LbMethod,
    /// Serve `POST /admin/scale` on the --http address: add a worker to a
    /// pool or drain or remove one while serving (docs/elastic.md). Off by
    /// default: without it the route does not exist.
    #[arg(long, conflicts_with = "engine")]
    admin: bool,
    /// With --admin: most prefill workers; those above --prefill start
    /// absent until a scale-up [default: --prefill].
    #[arg(long, value_name = "N", requires = "admin")]
    max_prefill: Option<u32>,
    /// With --admin: most decode workers; those above --decode start
    /// absent [default: --decode].
    #[arg(long, value_name = "N", requires = "admin")]
    max_decode: Option<u32>,
    /// With --admin: seconds (model time) from a scale-up to the worker
    /// being routable (model load and warm-up) [default: 30].
    #[arg(long, value_name = "SECS", requires = "admin")]
    startup_delay: Option<f64>,
}

impl ServeArgs {
    /// The deployment and its engines; with --admin, widened to the
    /// fleet's ceilings with the workers above --prefill/--decode absent.
    fn deployment(
        &self,
    ) -> Result<
        (
            handoff_deployment::DeploymentConfig,
            Vec<handoff_deployment::EngineSpec>,
        ),
        String,
    > {
        if !self.admin {
            return self.deploy.deployment(false);
        }
        let scale = crate::args::ScaleArgs {
            max_prefill: self.max_prefill,
            max_decode: self.max_decode,
            startup_delay: self.startup_delay,
            ..Default::default()
        };
        let wide = scale.widen(&self.deploy)?;
        let (mut cfg, specs) = wide.deployment(false)?;
        scale.apply(&mut cfg, (self.deploy.prefill, self.deploy.decode))?;
        Ok((cfg, specs))
    }
}

/// `--load-balance-method`, under SGLang's names.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LbMethod {
    /// `follow_bootstrap_room` on prefill, `round_robin` on decode.
    Auto,
    /// Round robin (read as `follow_bootstrap_room` on prefill, as SGLang).
    #[value(name = "round_robin")]
    RoundRobin,
    /// Rank `bootstrap_room % dp_size`.
    #[value(name = "follow_bootstrap_room")]
    FollowBootstrapRoom,
    /// The rank with the fewest requests.
    #[value(name = "total_requests")]
    TotalRequests,
}

impl From<LbMethod> for handoff_serve::LoadBalanceMethod {
    fn from(m: LbMethod) -> Self {
        match m {
            LbMethod::Auto => Self::Auto,
            LbMethod::RoundRobin => Self::RoundRobin,
            LbMethod::FollowBootstrapRoom => Self::FollowBootstrapRoom,
            LbMethod::TotalRequests => Self::TotalRequests,
        }
    }
}

/// `--kv-event-encoding`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum KvEncoding {
    /// `["BlockStored", block_hashes, ...]`.
    Array,
    /// `{"type": "BlockStored", "block_hashes": ..., ...}`.
    Map,
}

impl From<KvEncoding> for KvEventEncoding {
    fn from(e: KvEncoding) -> Self {
        match e {
            KvEncoding::Array => KvEventEncoding::Array,
            KvEncoding::Map => KvEventEncoding::Map,
        }
    }
}

/// `--block-hash`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum BlockHash {
    /// The cores' chained u64 (README: "Reproducing our hashes").
    Mocker,
    /// vLLM's sha256_cbor chain, its low 64 bits on the wire.
    Vllm,
}

/// Where each of the `n` workers publishes and replays its KV events
/// (`--kv-events`, `--kv-replay`, the gateway's topics), if anywhere.
fn kv_endpoints(a: &ServeArgs, n: usize) -> Result<Option<KvEndpoints>, String> {
    let kv = match &a.kv_events {
        Some(base) => Some(KvEndpoints {
            publish: per_worker(base, n, "--kv-events").map_err(|e| e.to_string())?,
            replay: match &a.kv_replay {
                Some(r) => per_worker(r, n, "--kv-replay").map_err(|e| e.to_string())?,
                None => Vec::new(),
            },
            topic: a.kv_topic.clone(),
            encoding: a.kv_event_encoding.into(),
            ..KvEndpoints::default()
        }),
        None => None,
    };
    Ok(a.gateway.kv(kv, n)?.map(|mut ep| {
        ep.encoding = a.kv_event_encoding.into();
        ep
    }))
}

/// The per-worker HTTP listeners: `--worker-http-base-port` gives the
/// first `workers` ports on the server's host, `--worker-http` names
/// (and overrides) single ones; sorted by worker.
fn worker_listeners(a: &ServeArgs, workers: usize) -> Result<Vec<(u32, String)>, String> {
    let mut listeners = match a.worker_http_base_port {
        Some(base) => {
            let host = a.http.rsplit_once(':').map_or("127.0.0.1", |(h, _)| h);
            worker_http_ports(host, base, workers).map_err(|e| e.to_string())?
        }
        None => Vec::new(),
    };
    for (w, addr) in &a.worker_http {
        listeners.retain(|(x, _)| x != w);
        listeners.push((*w, addr.clone()));
    }
    listeners.sort();
    Ok(listeners)
}

/// Runs `serve` until SIGINT/SIGTERM.
pub fn run(mut a: ServeArgs) -> Result<(), String> {
    use crate::limits::{bootstrap_timeout, int, MAX_KV_TOKENS};
    a.pod.shape(&mut a.deploy);
    let hw = &mut a.deploy.hardware;
    let model = a
        .served_model_name
        .clone()
        .or_else(|| hw.model.clone())
        .unwrap_or_else(|| "handoff-mocker".to_string());
    if hw.gpu.is_none() {
        // `serve --model NAME` names what is served, as it always has.
        hw.model = None;
    }
    bootstrap_timeout(a.bootstrap_timeout_s)?;
    let sglang = a.deploy.backend() == handoff_core::Backend::Sglang;
    a.deploy
        .check_wall_clock(a.speed, sglang.then_some(a.bootstrap_timeout_s))?;
    int(
        "max-model-len",
        u64::from(a.max_model_len),
        1,
        MAX_KV_TOKENS,
    )?;
    let http_timeouts =
        handoff_serve::HttpTimeouts::from_secs(a.http_header_timeout_s, a.http_body_timeout_s)
            .map_err(|e| e.to_string())?;
    let (cfg, mut specs) = a.deployment()?;
    let lora_env = std::env::var(handoff_serve::RUNTIME_UPDATING_ENV).ok();
    let lora = a.gateway.lora(a.deploy.max_loras, lora_env.as_deref())?;
    if let Some(l) = &lora {
        for s in &mut specs {
            s.max_loras = Some(l.max_loras);
        }
    }
    let n = specs.len();
    let kv = kv_endpoints(&a, n)?;
    let kv_jsonl = match &a.kv_events_out {
        Some(p) => {
            let f = std::fs::File::create(p)
                .map_err(|e| format!("--kv-events-out {}: {e}", p.display()))?;
            Some(RouterEventWriter::new(Box::new(std::io::BufWriter::new(f))))
        }
        None => None,
    };
    // One listener per worker, shared by its ranks.
    let worker_http = worker_listeners(&a, n / usize::from(cfg.dp.dp_size()))?;
    let tokenizer = match &a.tokenizer {
        Some(p) => handoff_serve::Tokenizer::from_file(p).map_err(|e| e.to_string())?,
        None => handoff_serve::Tokenizer::Builtin,
    };
    let hash_mode = match a.block_hash {
        BlockHash::Mocker => handoff_kv_events::vllm_hash::BlockHashMode::Mocker,
        BlockHash::Vllm => handoff_kv_events::vllm_hash::BlockHashMode::Vllm(
            handoff_kv_events::vllm_hash::VllmHasher::new(&a.block_hash_seed),
        ),
    };
    let c = ServeConfig {
        cfg,
        specs,
        speed: a.speed,
        http: a.http.clone(),
        http_timeouts,
        model: model.clone(),
        max_model_len: a.max_model_len,
        kv,
        kv_jsonl,
        worker_http,
        bootstrap_timeout_s: a.bootstrap_timeout_s,
        tokenizer,
        hash_mode,
        client_faults: a.gateway.client_faults(),
        load_balance_method: a.load_balance_method.into(),
        lora,
        admin: a.admin,
    };
    if a.pod.engine.is_some() {
        return crate::pod_cmd::run(c, &a.pod, a.output.as_deref());
    }
    let grace = a.pod.grace_period_s;
    if !(grace.is_finite() && (0.0..=86_400.0).contains(&grace)) {
        return Err("--grace-period-s: a number of seconds in 0..=86400".into());
    }
    let grace = std::time::Duration::from_secs_f64(grace);
    let report = handoff_serve::serve_workers_graced(c, grace, |l| {
        eprintln!(
            "handoff-mocker serve: listening on http://{} (model {})",
            l.http, model
        );
        for (w, addr) in &l.workers {
            eprintln!("handoff-mocker serve: worker {w} listens on http://{addr}");
        }
    })
    .map_err(|e| e.to_string())?;
    eprintln!(
        "handoff-mocker serve: stopped after {} requests ({} completed, {} failed)",
        report.num_requests, report.completed_requests, report.failed_requests
    );
    if let Some(p) = &a.output {
        crate::report_out::write_output_with(p, &report, &serde_json::Map::new())?;
    }
    Ok(())
}
