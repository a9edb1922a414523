//! `serve --engine prefill|decode|aggregated`: the process is one engine
//! (with its `--dp-size` ranks) instead of a whole deployment
//! (`handoff_serve::pod`). The flags here are the contract Kubernetes
//! manifests are written against (docs/pods.md).

use crate::args::DeployArgs;
use handoff_router::Pool;
use handoff_serve::pod::peers::{PeerAllow, PeerPolicy};
use handoff_serve::pod::{PodConfig, DEFAULT_GRACE_S, DEFAULT_SIDE_CHANNEL_PORT};
use handoff_serve::ServeConfig;
use std::path::Path;

/// `--engine`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineArg {
    /// A prefill engine: vLLM's pins each `do_remote_decode` prefill for a
    /// decode engine to read; SGLang's sends each room's KV to its decode.
    Prefill,
    /// A decode engine: vLLM's reads each `do_remote_prefill` request's KV
    /// from the prefill engine its `kv_transfer_params` name; SGLang's
    /// receives it from the bootstrap server its leg names.
    Decode,
    /// An engine that serves requests whole.
    Aggregated,
}

/// The flags of one engine per process.
#[derive(clap::Args, Debug)]
pub struct PodArgs {
    /// Run this process as exactly one engine (with its --dp-size ranks)
    /// instead of the whole deployment: its HTTP port is the engine's own
    /// (docs/pods.md).
    #[arg(long, value_enum, value_name = "ROLE")]
    pub engine: Option<EngineArg>,
    /// The engine's id, unique across hosts (a number below 2^24 is used
    /// as is, other text is hashed to one) [default: derived from the
    /// advertised host and the HTTP port].
    #[arg(long, value_name = "ID", requires = "engine")]
    pub engine_id: Option<String>,
    /// vLLM prefill: where decode engines connect to read (rank r on this
    /// port plus r); 0 picks free ports [default:
    /// $VLLM_NIXL_SIDE_CHANNEL_PORT, else 5600, vLLM's default].
    #[arg(long, value_name = "PORT")]
    pub side_channel_port: Option<u16>,
    /// The host decode engines are told to connect to (`remote_host`)
    /// [default: $VLLM_NIXL_SIDE_CHANNEL_HOST as vLLM reads it, else the
    /// --http host, or localhost when that is 0.0.0.0; in a cluster, the
    /// pod's IP].
    #[arg(long, value_name = "HOST")]
    pub side_channel_host: Option<String>,
    /// SGLang prefill: the bootstrap server's port, where decode engines
    /// connect for the rooms sglang-router names (SGLang's flag).
    #[arg(long, default_value_t = 8998, value_name = "PORT")]
    pub disaggregation_bootstrap_port: u16,
    /// After SIGTERM: how long responses in flight may take; then, with
    /// --engine, what is left fails with `shutdown` (a stream's error event
    /// and [DONE], a 503); in one process, the engine finishes what is left
    /// on model time at once and unpaired SGLang legs fail with `shutdown`.
    #[arg(long, default_value_t = DEFAULT_GRACE_S, value_name = "SECONDS")]
    pub grace_period_s: f64,
    /// How long a peer engine may stay silent (no frame, no ping) before
    /// it is taken for lost; pings go every tenth of it [default: sglang,
    /// its heartbeat's interval × max failures (10 s: see
    /// --sglang-heartbeat-interval-s), else 5000].
    #[arg(long, value_name = "MS")]
    pub peer_silence_ms: Option<u64>,
    /// Decode: where `remote_host` (vLLM) or `bootstrap_host` (SGLang) may
    /// point, comma-separated: `any`, addresses, CIDRs (`10.0.0.0/8`) and
    /// host names; a name not listed must resolve into a listed network
    /// [default: loopback, localhost and the private-use networks
    /// 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7].
    #[arg(long, value_name = "LIST")]
    pub kv_peer_allow: Option<String>,
    /// Decode: how long dialling a prefill engine (and then its hello) may
    /// take.
    #[arg(long, default_value_t = 5_000, value_name = "MS")]
    pub kv_connect_timeout_ms: u64,
}

impl PodArgs {
    /// Shapes the deployment the engine is taken from: one prefill and
    /// one decode worker, or one aggregated worker.
    pub fn shape(&self, d: &mut DeployArgs) {
        match self.engine {
            Some(EngineArg::Prefill | EngineArg::Decode) => {
                d.prefill = 1;
                d.decode = 1;
            }
            Some(EngineArg::Aggregated) => {
                d.prefill = 1;
                d.decode = 0;
            }
            None => {}
        }
    }
}

/// The side channel's port and advertised host: the flags, else vLLM's
/// environment variables (`vllm/envs.py`: `VLLM_NIXL_SIDE_CHANNEL_PORT`,
/// default 5600; `VLLM_NIXL_SIDE_CHANNEL_HOST`), read through `env`.
fn side_channel(
    p: &PodArgs,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(u16, Option<String>), String> {
    let port = match (p.side_channel_port, env("VLLM_NIXL_SIDE_CHANNEL_PORT")) {
        (Some(port), _) => port,
        (None, Some(v)) => v.trim().parse().map_err(|_| {
            format!("VLLM_NIXL_SIDE_CHANNEL_PORT={v}: a port (0..=65535) is expected")
        })?,
        (None, None) => DEFAULT_SIDE_CHANNEL_PORT,
    };
    let host = p
        .side_channel_host
        .clone()
        .or_else(|| env("VLLM_NIXL_SIDE_CHANNEL_HOST").filter(|h| !h.trim().is_empty()));
    Ok((port, host))
}

/// How long a silent peer engine is taken for alive: the flag (in its
/// range), else for SGLang its decode engine's heartbeat detection time
/// (`interval × max_failures`, `disaggregation/common/conn.py`,
/// `_start_heartbeat_checker_thread`), else 5 s.
fn peer_silence(
    flag_ms: Option<u64>,
    backend: handoff_core::Backend,
    heartbeat: Option<handoff_engine::fault::Heartbeat>,
) -> Result<std::time::Duration, String> {
    match flag_ms {
        Some(ms) if !(100..=3_600_000).contains(&ms) => {
            Err("--peer-silence-ms: 100..=3600000".into())
        }
        Some(ms) => Ok(std::time::Duration::from_millis(ms)),
        None if backend == handoff_core::Backend::Sglang => Ok(heartbeat
            .unwrap_or(handoff_engine::fault::Heartbeat::SGLANG)
            .detection()
            .min(std::time::Duration::from_secs(3_600))),
        None => Ok(std::time::Duration::from_millis(DEFAULT_PEER_SILENCE_MS)),
    }
}

/// `--kv-peer-allow` and `--kv-connect-timeout-ms`.
fn peer_policy(p: &PodArgs) -> Result<PeerPolicy, String> {
    if !(100..=600_000).contains(&p.kv_connect_timeout_ms) {
        return Err("--kv-connect-timeout-ms: 100..=600000".into());
    }
    let allow = match &p.kv_peer_allow {
        Some(list) => PeerAllow::parse(list).map_err(|e| e.to_string())?,
        None => PeerAllow::default(),
    };
    Ok(PeerPolicy {
        allow,
        connect_timeout: std::time::Duration::from_millis(p.kv_connect_timeout_ms),
    })
}

/// `--peer-silence-ms` without the flag, other than SGLang.
const DEFAULT_PEER_SILENCE_MS: u64 = 5_000;

/// Runs the engine `p.engine` names until SIGINT/SIGTERM; writes its
/// summary to `output` if asked.
pub fn run(serve: ServeConfig, p: &PodArgs, output: Option<&Path>) -> Result<(), String> {
    let role = match p.engine {
        Some(EngineArg::Prefill) => Pool::Prefill,
        Some(EngineArg::Decode) => Pool::Decode,
        Some(EngineArg::Aggregated) | None => Pool::Aggregated,
    };
    if !(p.grace_period_s.is_finite() && (0.0..=86_400.0).contains(&p.grace_period_s)) {
        return Err("--grace-period-s: a number of seconds in 0..=86400".into());
    }
    let silence = peer_silence(p.peer_silence_ms, serve.cfg.backend, serve.cfg.heartbeat)?;
    let (port, host) = side_channel(p, |k| std::env::var(k).ok())?;
    let peers = peer_policy(p)?;
    let backend = serve.cfg.backend;
    let c = PodConfig {
        serve,
        role,
        engine_id: p.engine_id.clone(),
        side_channel_port: if backend == handoff_core::Backend::Sglang && role == Pool::Prefill {
            p.disaggregation_bootstrap_port
        } else {
            port
        },
        side_channel_host: host,
        grace: std::time::Duration::from_secs_f64(p.grace_period_s),
        liveness: handoff_transport::Liveness {
            ping_every: silence / 10,
            silence_limit: silence,
        },
        peers,
    };
    let summary = handoff_serve::pod::serve_pod(c, |l| {
        eprintln!(
            "handoff-mocker serve: {} engine {} (wire id {}) listening on http://{}, side \
             channel {}:{:?}",
            role.name(),
            l.engine_id.0,
            l.engine_id.1,
            l.http,
            l.host,
            l.side_channel
        );
    })
    .map_err(|e| e.to_string())?;
    let failed: u64 = summary.failed.values().sum();
    eprintln!(
        "handoff-mocker serve: stopped after {} requests ended ({} finished, {failed} failed)",
        summary.finished + failed,
        summary.finished
    );
    if let Some(path) = output {
        let text = serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n")
            .map_err(|e| format!("--output {}: {e}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(port: Option<u16>, host: Option<&str>) -> PodArgs {
        PodArgs {
            engine: Some(EngineArg::Prefill),
            engine_id: None,
            side_channel_port: port,
            side_channel_host: host.map(str::to_string),
            disaggregation_bootstrap_port: 8998,
            grace_period_s: DEFAULT_GRACE_S,
            peer_silence_ms: None,
            kv_peer_allow: None,
            kv_connect_timeout_ms: 5_000,
        }
    }

    #[test]
    fn sglang_takes_a_peer_for_lost_after_its_heartbeat_detection() {
        use handoff_core::Backend;
        use handoff_engine::fault::Heartbeat;
        use std::time::Duration;
        // SGLang's defaults (environ.py): 5 s × 2 failures.
        assert_eq!(
            peer_silence(None, Backend::Sglang, None),
            Ok(Duration::from_secs(10))
        );
        let hb = Heartbeat::clamped(Duration::from_secs(3), 3);
        assert_eq!(
            peer_silence(None, Backend::Sglang, Some(hb)),
            Ok(Duration::from_secs(9))
        );
        // vLLM keeps the generic 5 s; the flag wins for both.
        assert_eq!(
            peer_silence(None, Backend::Vllm, None),
            Ok(Duration::from_secs(5))
        );
        assert_eq!(
            peer_silence(Some(700), Backend::Sglang, Some(hb)),
            Ok(Duration::from_millis(700))
        );
        assert!(peer_silence(Some(50), Backend::Vllm, None).is_err());
    }

    #[test]
    fn flags_come_before_vllms_environment_which_comes_before_the_default() {
        let env = |k: &str| match k {
            "VLLM_NIXL_SIDE_CHANNEL_PORT" => Some("5700".to_string()),
            "VLLM_NIXL_SIDE_CHANNEL_HOST" => Some("10.1.2.3".to_string()),
            _ => None,
        };
        let none = |_: &str| None;
        assert_eq!(side_channel(&args(None, None), none), Ok((5600, None)));
        assert_eq!(
            side_channel(&args(None, None), env),
            Ok((5700, Some("10.1.2.3".into())))
        );
        assert_eq!(
            side_channel(&args(Some(0), Some("h")), env),
            Ok((0, Some("h".into())))
        );
        let bad = |k: &str| (k == "VLLM_NIXL_SIDE_CHANNEL_PORT").then(|| "x".to_string());
        assert!(side_channel(&args(None, None), bad)
            .unwrap_err()
            .contains("VLLM_NIXL_SIDE_CHANNEL_PORT=x"));
    }

    #[test]
    fn the_peer_allow_list_and_connect_timeout_are_checked() {
        let mut a = args(None, None);
        assert_eq!(peer_policy(&a).unwrap(), PeerPolicy::default());
        a.kv_peer_allow = Some("10.0.0.0/8,prefill.local".into());
        let p = peer_policy(&a).unwrap();
        assert_eq!(p.allow.host("127.0.0.1"), Some(false));
        assert_eq!(p.allow.host("prefill.local"), Some(true));
        a.kv_peer_allow = Some("10.0.0.0/40".into());
        assert!(peer_policy(&a).unwrap_err().contains("--kv-peer-allow"));
        a.kv_peer_allow = None;
        a.kv_connect_timeout_ms = 5;
        assert!(peer_policy(&a)
            .unwrap_err()
            .contains("--kv-connect-timeout-ms"));
    }
}
