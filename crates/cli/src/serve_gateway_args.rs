//! `serve`'s flags for what gateways subscribe to and ask for: llm-d's
//! per-engine KV topics, a PUB socket that connects to a remote subscriber,
//! the replay answer's layout (`handoff_serve::kv_events`), and faults a
//! client asks for per request (`handoff_serve`'s `http::client_faults`).

use handoff_serve::kv_events::sources::LlmdTopic;
use handoff_serve::kv_events::zmq::ReplayLayout;
use handoff_serve::{per_worker, KvEndpoints};

/// The flags, flattened into `serve`'s.
#[derive(clap::Args, Debug)]
pub struct GatewayArgs {
    /// Name each engine's KV topic as llm-d's subscriber splits it,
    /// `kv@HOST:PORT@MODEL`: the worker's own HTTP listener (or the
    /// --kv-topic-host / --kv-topic-port given), the served model name.
    /// Replaces --kv-topic.
    #[arg(long, conflicts_with = "kv_topic")]
    kv_topic_llmd: bool,
    /// The host written in every llm-d topic.
    #[arg(long, value_name = "HOST", requires = "kv_topic_llmd")]
    kv_topic_host: Option<String>,
    /// The port written in worker 0's llm-d topic (worker i: PORT + i).
    #[arg(long, value_name = "PORT", requires = "kv_topic_llmd")]
    kv_topic_port: Option<u16>,
    /// Connect every engine's PUB socket to this remote endpoint (a
    /// subscriber that binds, as llm-d's central one does) instead of
    /// binding --kv-events.
    #[arg(long, value_name = "tcp://HOST:PORT", group = "kv_sink")]
    kv_events_connect: Option<String>,
    /// The replay socket's answer: topic (vLLM 0.26 on: a topic frame
    /// before each sequence) or legacy (vLLM before 0.26).
    #[arg(long, value_enum, default_value_t = Layout::Topic, requires = "kv_replay")]
    kv_replay_layout: Layout,
    /// Obey fault headers a client sends with a request (x-mock-fail-status,
    /// x-mock-fail-after-tokens, AIBrix's x-aibrix-mock-fail and
    /// x-aibrix-mock-delay-ms / -role); off, they are ignored.
    #[arg(long)]
    client_faults: bool,
    /// Serve LoRA adapters (vLLM's flag): requests may name one as
    /// `model`; implied by --lora-modules or
    /// VLLM_ALLOW_RUNTIME_LORA_UPDATING=true.
    #[arg(long)]
    enable_lora: bool,
    /// LoRA adapters loaded at start, vLLM's forms: NAME=PATH or
    /// '{"name": ..., "path": ..., "base_model_name": ...}'.
    #[arg(long, num_args = 1.., value_name = "NAME=PATH",
          value_parser = handoff_serve::parse_lora_module)]
    lora_modules: Vec<handoff_serve::LoraModule>,
    /// The largest adapter rank (vLLM's default 16; recorded only: the
    /// mock loads no weights).
    #[arg(long, default_value_t = handoff_serve::DEFAULT_MAX_LORA_RANK, value_name = "RANK")]
    max_lora_rank: u32,
}

/// `--kv-replay-layout`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// `[identity, "", topic, seq, payload]`.
    Topic,
    /// `[identity, "", seq, payload]`.
    Legacy,
}

/// The ranks vLLM's `LoRAConfig` accepts for `max_lora_rank`
/// (`vllm/config/lora.py`, `possible_max_ranks`).
const LORA_RANKS: [u32; 9] = [1, 8, 16, 32, 64, 128, 256, 320, 512];

impl GatewayArgs {
    /// The LoRA flags, with `max_loras` the deployment's `--max-loras` and
    /// `runtime` the value of VLLM_ALLOW_RUNTIME_LORA_UPDATING; `None` when
    /// LoRA is not served.
    pub fn lora(
        &self,
        max_loras: Option<u32>,
        runtime: Option<&str>,
    ) -> Result<Option<handoff_serve::LoraConfig>, String> {
        let max_loras = max_loras.unwrap_or(handoff_serve::DEFAULT_MAX_LORAS);
        if max_loras < 1 {
            return Err("--max-loras: must be at least 1".into());
        }
        if !LORA_RANKS.contains(&self.max_lora_rank) {
            return Err(format!(
                "--max-lora-rank {}: must be one of {LORA_RANKS:?}, as vLLM accepts",
                self.max_lora_rank
            ));
        }
        let c = handoff_serve::LoraConfig {
            modules: self.lora_modules.clone(),
            max_loras,
            max_lora_rank: self.max_lora_rank,
            runtime_updating: handoff_serve::lora_runtime_updating(runtime),
        };
        Ok((self.enable_lora || c.enabled()).then_some(c))
    }

    /// `--client-faults`.
    pub fn client_faults(&self) -> bool {
        self.client_faults
    }

    /// `kv` (from --kv-events, if given) with these flags applied, for `n`
    /// schedulers; `Some` also when only --kv-events-connect is given.
    pub fn kv(&self, kv: Option<KvEndpoints>, n: usize) -> Result<Option<KvEndpoints>, String> {
        let mut kv = match (&self.kv_events_connect, kv) {
            (Some(remote), _) => {
                per_worker(remote, 1, "--kv-events-connect").map_err(|e| e.to_string())?;
                Some(KvEndpoints {
                    publish: vec![remote.clone(); n],
                    connect: true,
                    ..KvEndpoints::default()
                })
            }
            (None, kv) => kv,
        };
        if let Some(ep) = kv.as_mut() {
            ep.replay_layout = match self.kv_replay_layout {
                Layout::Topic => ReplayLayout::Topic,
                Layout::Legacy => ReplayLayout::Legacy,
            };
            ep.llmd = self.kv_topic_llmd.then(|| LlmdTopic {
                host: self.kv_topic_host.clone(),
                port: self.kv_topic_port,
            });
        }
        Ok(kv)
    }
}
