//! The endpoints routers and gateways poll besides the OpenAI routes, on the
//! front port and on every worker's own listener, with the real engines'
//! field names and this deployment's live values.
//!
//! - SGLang (`sglang/srt/entrypoints/http_server.py`): `/server_info` and
//!   `/get_server_info` (`get_server_info`: the server args, the scheduler
//!   info and `internal_states`, one per data-parallel rank),
//!   `/model_info` and `/get_model_info` (`get_model_info`), `/get_load`
//!   (`get_load`: one `GetLoadReqOutput` per rank, `dp_rank`, `num_reqs`,
//!   `num_waiting_reqs`, `num_tokens`), `/health_generate`, `/generate`
//!   ([`crate::sglang::native`]).
//! - vLLM (`vllm/entrypoints/openai/api_server.py`): `/version`
//!   (`show_version`), `/v1/models` whose `owned_by` names the engine
//!   (`vllm` or `sglang`: smg's `detect_backend.rs`,
//!   `detect_via_models_endpoint`, reads the runtime from it), and on a
//!   worker's listener `/metrics` with that worker's series only, labelled
//!   `engine="0"` as a single-engine vLLM server labels them (vllm-router's
//!   `dp_utils.rs`, `discover_dp_size`, counts the distinct `engine` labels
//!   of a worker's `/metrics` as its data-parallel size).
//! - vLLM's `/kv_event_sources` ([`crate::kv_events::sources`]).
//! - smg (`crates/protocols/src/worker.rs`, `WorkerLoadResponse` and
//!   `SchedulerLoadSnapshot`; `model_gateway/src/worker/monitor.rs`,
//!   `fetch_http_load_native`): `/v1/loads` and `/loads`, `{timestamp,
//!   dp_rank_count, loads: [..]}`.
//!
//! Scope: on a worker's listener everything describes that worker (its
//! role as `disaggregation_mode`, its pool, its live load from the engine
//! thread's [`EngineView`]), one entry per data-parallel rank where the
//! engines list ranks (`dp_size`, `internal_states`, `/get_load`,
//! `/v1/loads`' `dp_rank_count` and `loads`, the `engine` label of its
//! `/metrics`: each rank is its own scheduler, see
//! [`handoff_core::DpLayout`]); on the front port the deployment as one
//! server that takes whole requests (`disaggregation_mode` `"null"`,
//! capacities and loads summed over the workers, one rank). Values the
//! mock does not have (GPU memory, throughput, a bootstrap server) are
//! left out or `null`, never invented.

use crate::director::driver::{EngineView, WorkerView};
use crate::http::error::{error, MAX_BODY_BYTES};
use crate::http::state::AppState;
use crate::sglang::native::NativeRequest;
use crate::vllm::kv_transfer::ProxyError;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use handoff_core::{Backend, DpLayout, HandoffPolicy};
use handoff_deployment::EngineSpec;
use handoff_router::Pool;
use serde_json::{json, Value};
use std::sync::Arc;

/// The version `/version` and `/server_info` report: this mock's.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What the info endpoints know of the deployment besides the live view.
pub struct InfoState {
    /// The server's shared state (engine commands, limits, metrics, view).
    pub app: Arc<AppState>,
    /// The engine every worker runs.
    pub backend: Backend,
    /// Every scheduler's pool, by id.
    pub pools: Vec<Pool>,
    /// Every scheduler's engine, by id.
    pub specs: Vec<EngineSpec>,
    /// How schedulers group into workers' ranks.
    pub dp: DpLayout,
    /// The deployment's handoff ordering.
    pub policy: HandoffPolicy,
    /// The process is this one engine (`serve --engine`): a worker's
    /// `/metrics` is the whole registry, its failures among them.
    pub engine_process: bool,
    /// The KV event sockets as started (topics resolved), if any.
    pub kv: Option<crate::kv_events::zmq::KvEndpoints>,
    /// SGLang's `--load-balance-method` as configured.
    pub load_balance: crate::LoadBalanceMethod,
}

/// Whom a listener speaks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The front port: the deployment as one server.
    Front,
    /// Worker `w`'s own listener (all its ranks).
    Worker(usize),
}

struct Scoped {
    info: Arc<InfoState>,
    scope: Scope,
}

/// The routes of `scope`'s listener, to merge into its router. A worker's
/// listener also gets `/metrics` (the front port has its own).
pub fn routes(info: Arc<InfoState>, scope: Scope) -> Router {
    let r = Router::new()
        .route("/server_info", get(server_info))
        .route("/get_server_info", get(server_info))
        .route("/model_info", get(model_info))
        .route("/get_model_info", get(model_info))
        .route("/get_load", get(get_load))
        .route("/v1/loads", get(loads))
        .route("/loads", get(loads))
        .route("/health_generate", get(health_generate))
        .route("/version", get(version))
        .route("/v1/models", get(models))
        .route("/kv_event_sources", get(kv_event_sources))
        .route("/abort_request", post(abort_request));
    // vLLM routes these only when VLLM_ALLOW_RUNTIME_LORA_UPDATING is set.
    let r = if info.app.limits.loras.config().runtime_updating {
        r.route("/v1/load_lora_adapter", post(load_lora_adapter))
            .route("/v1/unload_lora_adapter", post(unload_lora_adapter))
    } else {
        r
    };
    // A worker's own `/generate` is its listener's (SGLang PD legs first,
    // `sglang::pd::generate`, then `sglang::native::generate_on`).
    let r = match scope {
        Scope::Worker(_) => r.route("/metrics", get(worker_metrics)),
        Scope::Front => r.route("/generate", post(generate)),
    };
    // Set on the routes above only, so merging keeps the other router's.
    r.method_not_allowed_fallback(|| async {
        error(&crate::openai::ApiError::method_not_allowed())
    })
    .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
    .with_state(Arc::new(Scoped { info, scope }))
}

/// One scope's load and capacity, from the engine thread's view.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Load {
    /// Requests in the running batch.
    pub running: u64,
    /// Requests queued for admission.
    pub waiting: u64,
    /// KV tokens in use (active, pinned for a reader, reserved for an
    /// incoming handoff).
    pub used_tokens: u64,
    /// KV tokens in the pool.
    pub total_tokens: u64,
    /// SGLang's decode headroom promised to admitted requests.
    pub headroom_tokens: u64,
    /// `used_tokens / total_tokens`.
    pub usage: f64,
}

impl Load {
    fn add(&mut self, w: &WorkerView, block: u64) {
        let c = &w.capacity;
        self.running += c.running_requests;
        self.waiting += c.waiting_requests;
        self.used_tokens += c.kv_used_blocks() * block;
        self.total_tokens += c.total_blocks * block;
        self.headroom_tokens += c.decode_headroom_tokens;
        self.set_usage();
    }

    fn merge(&mut self, o: &Load) {
        self.running += o.running;
        self.waiting += o.waiting;
        self.used_tokens += o.used_tokens;
        self.total_tokens += o.total_tokens;
        self.headroom_tokens += o.headroom_tokens;
        self.set_usage();
    }

    fn set_usage(&mut self) {
        self.usage = if self.total_tokens == 0 {
            0.0
        } else {
            self.used_tokens as f64 / self.total_tokens as f64
        };
    }
}

/// One scope's load per data-parallel rank (the front's: one, summed).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RankLoads {
    /// By rank.
    pub ranks: Vec<Load>,
}

impl RankLoads {
    /// The ranks summed.
    pub fn total(&self) -> Load {
        let mut t = Load::default();
        for r in &self.ranks {
            t.merge(r);
        }
        t
    }
}

impl InfoState {
    fn block(&self, w: usize) -> u64 {
        self.specs.get(w).map_or(16, |s| u64::from(s.block_size))
    }

    /// The schedulers `scope` speaks for, rank 0 first.
    fn members(&self, scope: Scope) -> std::ops::Range<usize> {
        match scope {
            Scope::Front => 0..self.pools.len(),
            Scope::Worker(w) => {
                let n = usize::from(self.dp.dp_size());
                w.saturating_mul(n)..w.saturating_mul(n).saturating_add(n)
            }
        }
    }

    /// Worker `w`'s rank-0 scheduler, whose engine and pool every rank of
    /// the worker shares.
    fn first(&self, scope: Scope) -> usize {
        match scope {
            Scope::Worker(_) => self.members(scope).start,
            Scope::Front => 0,
        }
    }

    /// `scope`'s load in `view`, per rank (the front: one entry).
    pub fn load(&self, scope: Scope, view: &EngineView) -> RankLoads {
        let one = |w: usize| {
            let mut l = Load::default();
            if let Some(v) = view.workers.get(w) {
                l.add(v, self.block(w));
            }
            l
        };
        match scope {
            Scope::Front => {
                let mut l = Load::default();
                for w in self.members(scope) {
                    l.merge(&one(w));
                }
                RankLoads { ranks: vec![l] }
            }
            Scope::Worker(_) => RankLoads {
                ranks: self.members(scope).map(one).collect(),
            },
        }
    }

    /// SGLang's `disaggregation_mode` of `scope`.
    pub fn mode(&self, scope: Scope) -> &'static str {
        match scope {
            Scope::Worker(_) => match self.pools.get(self.first(scope)) {
                Some(Pool::Prefill) => "prefill",
                Some(Pool::Decode) => "decode",
                _ => "null",
            },
            Scope::Front => "null",
        }
    }

    /// SGLang's `load_balance_method` as this scope picks ranks
    /// ([`crate::director::dp_lb`]), resolved as SGLang reports it
    /// (`srt/server_args.py`, `ServerArgs._handle_load_balance_method`):
    /// under `auto` a prefill worker follows the bootstrap room and a
    /// decode worker round-robins; outside PD, round robin. Routers read it
    /// to know whether a pair's two ranks match (smg warns when it is
    /// missing or when the pools disagree).
    pub fn load_balance_method(&self, scope: Scope) -> &'static str {
        match self.mode(scope) {
            "prefill" => self.load_balance.resolved(true).name(),
            "decode" => self.load_balance.resolved(false).name(),
            _ => "round_robin",
        }
    }

    fn max_running(&self, scope: Scope) -> u64 {
        self.members(scope)
            .filter_map(|w| self.specs.get(w))
            .map(|s| u64::from(s.max_running))
            .sum()
    }

    fn spec(&self, scope: Scope) -> EngineSpec {
        self.specs
            .get(self.first(scope))
            .cloned()
            .unwrap_or_default()
    }

    fn engine_name(&self) -> &'static str {
        match self.backend {
            Backend::Sglang => "sglang",
            Backend::Vllm => "vllm",
            // trtllm-serve's model cards (`tensorrt_llm/serve/openai_protocol.py`).
            Backend::TrtLlm => "tensorrt_llm",
        }
    }

    /// `/server_info`: SGLang's server args (those this deployment has),
    /// the scheduler info and one `internal_states` entry per rank.
    pub fn server_info(&self, scope: Scope, loads: &RankLoads) -> Value {
        let limits = &self.app.limits;
        let spec = self.spec(scope);
        let load = loads.total();
        let states: Vec<Value> = loads
            .ranks
            .iter()
            .enumerate()
            .map(|(r, l)| {
                json!({
                    "dp_rank": r,
                    "memory_usage": {"token_capacity": l.total_tokens},
                    "load": l.used_tokens,
                    "running_batch_size": l.running,
                    "waiting_queue_size": l.waiting,
                    "num_reserved_decode_tokens": l.headroom_tokens,
                })
            })
            .collect();
        json!({
            "model_path": limits.model,
            "tokenizer_path": limits.model,
            "served_model_name": limits.model,
            "context_length": limits.max_model_len,
            "is_embedding": false,
            "tp_size": 1,
            "pp_size": 1,
            "dp_size": loads.ranks.len(),
            "page_size": spec.block_size,
            "chunked_prefill_size": spec.max_batched_tokens,
            "max_running_requests": self.max_running(scope),
            "max_total_num_tokens": load.total_tokens,
            "max_req_input_len": limits.max_model_len.saturating_sub(1),
            "disaggregation_mode": self.mode(scope),
            "load_balance_method": self.load_balance_method(scope),
            // No bootstrap server runs: SGLang's destination-first
            // bootstrap flow is not served over HTTP.
            "disaggregation_bootstrap_port": Value::Null,
            "disaggregation_transfer_backend": Value::Null,
            "engine": self.engine_name(),
            "internal_states": states,
            "version": VERSION,
        })
    }

    /// `/model_info`.
    pub fn model_info(&self) -> Value {
        let m = &self.app.limits.model;
        json!({
            "model_path": m,
            "tokenizer_path": m,
            "is_generation": true,
            "preferred_sampling_params": Value::Null,
            "weight_version": "default",
            "has_image_understanding": false,
            "has_audio_understanding": false,
        })
    }

    /// `/get_load`: SGLang's per-rank list. `num_tokens` counts the KV in
    /// use; SGLang also adds its waiting queue's prompt tokens, which the
    /// capacity snapshot does not carry.
    pub fn get_load(&self, loads: &RankLoads) -> Value {
        let v: Vec<Value> = loads
            .ranks
            .iter()
            .enumerate()
            .map(|(r, l)| {
                json!({
                    "dp_rank": r,
                    "num_reqs": l.running + l.waiting,
                    "num_waiting_reqs": l.waiting,
                    "num_tokens": l.used_tokens,
                })
            })
            .collect();
        Value::Array(v)
    }

    /// `/v1/loads` and `/loads`: smg's `WorkerLoadResponse`, one
    /// `SchedulerLoadSnapshot` per rank.
    pub fn loads(&self, scope: Scope, loads: &RankLoads, unix: u64) -> Value {
        // Every rank runs the worker's engine; the front's one entry sums.
        let max_running = match scope {
            Scope::Front => self.max_running(scope),
            Scope::Worker(_) => u64::from(self.spec(scope).max_running),
        };
        let v: Vec<Value> = loads
            .ranks
            .iter()
            .enumerate()
            .map(|(r, l)| {
                json!({
                    "dp_rank": r,
                    "num_running_reqs": l.running,
                    "num_waiting_reqs": l.waiting,
                    "num_total_reqs": l.running + l.waiting,
                    "num_used_tokens": l.used_tokens,
                    "max_total_num_tokens": l.total_tokens,
                    "token_usage": l.usage,
                    "max_running_requests": max_running,
                    "disagg_mode": self.mode(scope),
                })
            })
            .collect();
        json!({
            "timestamp": rfc3339(unix),
            "dp_rank_count": loads.ranks.len(),
            "loads": v,
        })
    }

    /// `/v1/models`, `owned_by` the engine: the served model, then every
    /// LoRA adapter loaded ([`crate::vllm::lora`]).
    pub fn models(&self) -> Value {
        let l = &self.app.limits;
        let mut data = vec![json!({
            "id": l.model,
            "object": "model",
            "created": self.app.created,
            "owned_by": self.engine_name(),
            "root": l.model,
            "parent": Value::Null,
            "max_model_len": l.max_model_len,
        })];
        data.extend(
            l.loras
                .cards(&l.model, self.app.created, self.engine_name()),
        );
        json!({"object": "list", "data": data})
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ` of Unix seconds (civil-from-days, proleptic
/// Gregorian).
pub fn rfc3339(unix: u64) -> String {
    let (days, secs) = (unix / 86_400, unix % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

fn view_load(s: &Scoped) -> Option<RankLoads> {
    let v = s.info.app.view.lock().ok()?;
    Some(s.info.load(s.scope, &v))
}

/// `POST /v1/load_lora_adapter` (vLLM `api_server.py`
/// `load_lora_adapter`): the success message as plain text with 200, or
/// the error JSON with its status.
async fn load_lora_adapter(State(s): State<Arc<Scoped>>, body: axum::body::Bytes) -> Response {
    lora_answer(crate::openai::json_object(&body).and_then(|v| s.info.app.limits.loras.load(&v)))
}

/// `POST /v1/unload_lora_adapter` (vLLM `unload_lora_adapter`).
async fn unload_lora_adapter(State(s): State<Arc<Scoped>>, body: axum::body::Bytes) -> Response {
    lora_answer(crate::openai::json_object(&body).and_then(|v| s.info.app.limits.loras.unload(&v)))
}

fn lora_answer(r: Result<String, crate::openai::ApiError>) -> Response {
    match r {
        Ok(text) => (StatusCode::OK, text).into_response(),
        Err(e) => error(&e),
    }
}

fn unavailable() -> Response {
    StatusCode::SERVICE_UNAVAILABLE.into_response()
}

async fn server_info(State(s): State<Arc<Scoped>>) -> Response {
    match view_load(&s) {
        Some(l) => Json(s.info.server_info(s.scope, &l)).into_response(),
        None => unavailable(),
    }
}

async fn model_info(State(s): State<Arc<Scoped>>) -> Response {
    Json(s.info.model_info()).into_response()
}

async fn get_load(State(s): State<Arc<Scoped>>) -> Response {
    match view_load(&s) {
        Some(l) => Json(s.info.get_load(&l)).into_response(),
        None => unavailable(),
    }
}

async fn loads(State(s): State<Arc<Scoped>>) -> Response {
    match view_load(&s) {
        Some(l) => Json(s.info.loads(s.scope, &l, crate::http::state::unix_secs())).into_response(),
        None => unavailable(),
    }
}

/// vLLM's `/kv_event_sources` ([`crate::kv_events::sources`]): a worker's
/// listener lists its ranks; the front port every scheduler, keyed by id.
async fn kv_event_sources(State(s): State<Arc<Scoped>>) -> Response {
    let members = s.info.members(s.scope);
    Json(crate::kv_events::sources::kv_event_sources(
        s.info.kv.as_ref(),
        members,
    ))
    .into_response()
}

/// SGLang's `/abort_request` ([`crate::sglang::native::abort_request`]): on a worker's
/// listener, the requests sent to that worker.
async fn abort_request(
    State(s): State<Arc<Scoped>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let scope = match s.scope {
        Scope::Front => None,
        Scope::Worker(w) => Some(w as u32),
    };
    crate::sglang::native::abort_request(&s.info.app, scope, body).await
}

async fn version() -> Response {
    Json(json!({ "version": VERSION })).into_response()
}

async fn models(State(s): State<Arc<Scoped>>) -> Response {
    Json(s.info.models()).into_response()
}

/// 200 once the engine thread has published its workers, else 503.
/// SGLang runs a one-token generation here; the mock's engine either runs
/// or the server is down, so its published view is the answer.
async fn health_generate(State(s): State<Arc<Scoped>>) -> Response {
    let up = s
        .info
        .app
        .view
        .lock()
        .map(|v| !v.workers.is_empty())
        .unwrap_or(false);
    if up {
        StatusCode::OK.into_response()
    } else {
        unavailable()
    }
}

/// Worker `w`'s series only, each rank's labelled `engine="RANK"` (0 with
/// one rank): on its own listener the worker is a vLLM server whose
/// data-parallel engines vLLM labels by index (`PrometheusStatLogger`'s
/// `engine` label), which vllm-router counts as the worker's DP size.
pub fn worker_series(text: &str, w: usize) -> String {
    let tag = format!("engine=\"{w}\"");
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if line.starts_with('#') {
            out.push_str(line);
        } else if line.contains(&tag) {
            let rank = line
                .split_once("dp_rank=\"")
                .and_then(|(_, r)| r.split_once('"'))
                .map_or("0", |(r, _)| r);
            out.push_str(&line.replacen(&tag, &format!("engine=\"{rank}\""), 1));
        } else {
            continue;
        }
        out.push('\n');
    }
    out
}

async fn worker_metrics(State(s): State<Arc<Scoped>>) -> Response {
    let Scope::Worker(w) = s.scope else {
        return error(&crate::openai::ApiError::not_found(None, "no such route"));
    };
    let all = s.info.app.metrics.render(None);
    let text = if s.info.engine_process {
        all
    } else {
        worker_series(&all, w)
    };
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// Where a `/generate` on `scope`'s listener runs: `None` routed by the
/// frontend, `Some(w)` on worker `w` itself, or why not.
fn placement(
    info: &InfoState,
    scope: Scope,
    req: &NativeRequest,
) -> Result<Option<usize>, ProxyError> {
    let Scope::Worker(w) = scope else {
        // The front serves whole requests; bootstrap fields are for workers.
        return Ok(None);
    };
    let pool = info
        .pools
        .get(info.first(scope))
        .copied()
        .unwrap_or(Pool::Decode);
    // SGLang's destination-first PD pair (`bootstrap_room` sent to both a
    // prefill and a decode worker) is where a bootstrap flow plugs in; until
    // one is served it is the same 400 as the OpenAI routes give.
    if req.bootstrap || (pool != Pool::Aggregated && !info.policy.prefill_at_arrival()) {
        return Err(ProxyError::Ordering);
    }
    match pool {
        Pool::Aggregated => Ok(Some(w)),
        pool => Err(ProxyError::NeedsParams { pool }),
    }
}

/// SGLang's native `/generate` on the front port
/// ([`crate::sglang::native::generate`]).
async fn generate(State(s): State<Arc<Scoped>>, body: Result<Bytes, BytesRejection>) -> Response {
    let place = |req: &NativeRequest| placement(&s.info, s.scope, req);
    crate::sglang::native::generate(&s.info.app, body, place).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_798_761_599), "2026-12-31T23:59:59Z");
    }

    #[test]
    fn worker_series_labels_each_rank_of_the_worker_by_its_rank() {
        let text = "vllm:x{model_name=\"m\",engine=\"1\",dp_rank=\"0\",role=\"decode\"} 2\n\
                    vllm:x{model_name=\"m\",engine=\"1\",dp_rank=\"1\",role=\"decode\"} 3\n\
                    vllm:x{model_name=\"m\",engine=\"0\",dp_rank=\"1\",role=\"prefill\"} 4\n";
        assert_eq!(
            worker_series(text, 1),
            "vllm:x{model_name=\"m\",engine=\"0\",dp_rank=\"0\",role=\"decode\"} 2\n\
             vllm:x{model_name=\"m\",engine=\"1\",dp_rank=\"1\",role=\"decode\"} 3\n"
        );
    }

    #[test]
    fn worker_series_keeps_one_worker_as_engine_zero() {
        let text = "# TYPE vllm:x gauge\n\
                    vllm:x{model_name=\"m\",engine=\"0\",role=\"prefill\"} 1\n\
                    vllm:x{model_name=\"m\",engine=\"1\",role=\"decode\"} 2\n\
                    vllm:x{model_name=\"m\",engine=\"10\",role=\"decode\"} 3\n";
        let one = worker_series(text, 1);
        assert_eq!(
            one,
            "# TYPE vllm:x gauge\nvllm:x{model_name=\"m\",engine=\"0\",role=\"decode\"} 2\n"
        );
    }
}
