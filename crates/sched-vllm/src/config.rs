//! The knobs of one vLLM worker, named after vLLM's own `CacheConfig` /
//! `SchedulerConfig` fields so a deployment's flags map one to one.

use handoff_core::Duration;

/// Default lifetime of a pinned source without a reader in vLLM before the
/// NIXL lease (vLLM PR #41383): `VLLM_NIXL_ABORT_REQUEST_TIMEOUT` (480 s),
/// after which `nixl_connector.py` (`NixlConnectorScheduler.request_finished`
/// records the deadline) frees the delayed blocks; no heartbeat renews it.
pub const NIXL_ABORT_REQUEST_TIMEOUT: Duration = Duration::from_secs(480);

/// Default lease of a pinned source in upstream vLLM: the NIXL connector's
/// `kv_lease_duration` (`kv_connector_extra_config`, 30 s;
/// `nixl/base_worker.py`), renewed by the decode worker's heartbeats
/// ([`handoff_core::Heartbeat`]) until its read completes.
pub const KV_LEASE_DURATION: Duration = Duration::from_secs(30);

/// How long a push-mode decode engine keeps a registration nothing wrote
/// into: `push_registration_timeout` (`kv_connector_extra_config`;
/// `nixl/push_scheduler.py`, `NixlPushConnectorScheduler.__init__`),
/// whose default is `decoder_kv_blocks_ttl`, 480 s
/// (`nixl/base_scheduler.py`). Upstream the watchdog
/// (`build_connector_meta`) only drops the registration and warns; the
/// request then waits for the client or proxy to give up. The mock ends
/// the destination there ([`handoff_core::HandoffConfig::reservation_ttl`]).
pub const PUSH_REGISTRATION_TIMEOUT: Duration = Duration::from_secs(480);

/// Default `kv_recompute_threshold` (`kv_connector_extra_config`, read in
/// `nixl/base_scheduler.py` `NixlBaseConnectorScheduler.__init__`): a
/// remote KV pull of fewer tokens than this is not made; the requesting
/// engine computes them itself ([`should_recompute_remote_kv`]).
pub const KV_RECOMPUTE_THRESHOLD: u64 = 64;

/// Whether a pull of `count` remote tokens is replaced by local compute:
/// vLLM's `NixlPullConnectorScheduler._should_recompute_remote_kv`
/// (`nixl/pull_scheduler.py`, vLLM main at 0050936b), true when
/// `threshold > 0` and `0 < count < threshold`. Zero disables it.
pub fn should_recompute_remote_kv(threshold: u64, count: u64) -> bool {
    threshold > 0 && count > 0 && count < threshold
}

/// Default running-batch limit: what vLLM's `EngineArgs.get_batch_defaults`
/// (`vllm/engine/arg_utils.py`) picks for `vllm serve` (the OpenAI API
/// server usage context) on the hardware this mocker assumes, a GPU with at
/// least 70 GiB that is not an A100 (H100/H200 class): `max_num_seqs` 1024
/// with `max_num_batched_tokens` 8192 ([`DEFAULT_MAX_NUM_BATCHED_TOKENS`]).
/// Smaller GPUs and A100s get 256 and 2048. The KV pool of the defaults
/// (16,384 blocks of 16 tokens at 128 KiB a token, 32 GiB) is also an
/// 80 GB-GPU serving of a Llama-3-8B-sized model.
pub const DEFAULT_MAX_NUM_SEQS: u32 = 1024;

/// Default token budget of one pass; see [`DEFAULT_MAX_NUM_SEQS`].
pub const DEFAULT_MAX_NUM_BATCHED_TOKENS: u32 = 8192;

/// Configuration of a `VllmCore`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VllmConfig {
    /// KV blocks in the pool (vLLM `num_gpu_blocks`). vLLM keeps one of them
    /// as its null block; here every block is usable.
    pub num_blocks: u64,
    /// Tokens per block (vLLM `block_size`, default 16).
    pub block_size: u32,
    /// Running-batch size limit (vLLM `max_num_seqs`; default
    /// [`DEFAULT_MAX_NUM_SEQS`]).
    pub max_num_seqs: u32,
    /// Token budget of one forward pass (vLLM `max_num_batched_tokens`;
    /// default [`DEFAULT_MAX_NUM_BATCHED_TOKENS`]).
    pub max_num_batched_tokens: u32,
    /// Fraction of the pool kept free when admitting waiting or preempted
    /// requests and reservations (vLLM `SchedulerConfig.watermark`, applied in
    /// `KVCacheManager.allocate_slots` only while something is running).
    pub watermark: f64,
    /// Prefix caching by chained block hashes (vLLM
    /// `enable_prefix_caching`). When off, nothing is hashed, hit or
    /// published.
    pub enable_prefix_caching: bool,
    /// How long a pinned source may wait for its reader, reported through
    /// `capabilities()`; expiry itself is driven by the caller as a
    /// `ReleaseSource`.
    pub source_lease_ttl: Duration,
    /// TensorRT-LLM mode: every `ReserveDestination` answers `Unsupported`
    /// and the capabilities name [`handoff_core::Backend::TrtLlm`].
    pub refuse_destination_reservation: bool,
    /// Divides every modelled pass time of the default perf model (2.0 runs
    /// twice as fast). Ignored when a perf model is supplied explicitly.
    pub speedup_ratio: f64,
    /// At most this many distinct LoRA adapters among the requests one pass
    /// schedules (vLLM `LoRAConfig.max_loras`, `--max-loras`, default 1
    /// when LoRA is enabled); `None`, the default, is no limit (vLLM
    /// without `--enable-lora`, where no request carries an adapter).
    pub max_loras: Option<u32>,
    /// A decode's pull of fewer remote prompt tokens than this (beyond its
    /// own prefix-cache hit) is replaced by computing them locally (vLLM's
    /// `kv_recompute_threshold`, default [`KV_RECOMPUTE_THRESHOLD`]; 0
    /// disables). Pull mode only: the caller sets 0 under push.
    pub kv_recompute_threshold: u64,
}

impl Default for VllmConfig {
    fn default() -> Self {
        VllmConfig {
            num_blocks: 16_384,
            block_size: 16,
            max_num_seqs: DEFAULT_MAX_NUM_SEQS,
            max_num_batched_tokens: DEFAULT_MAX_NUM_BATCHED_TOKENS,
            watermark: 0.0,
            enable_prefix_caching: true,
            source_lease_ttl: KV_LEASE_DURATION,
            refuse_destination_reservation: false,
            speedup_ratio: 1.0,
            max_loras: None,
            kv_recompute_threshold: KV_RECOMPUTE_THRESHOLD,
        }
    }
}

impl VllmConfig {
    /// A default configuration with `num_blocks` blocks.
    pub fn with_blocks(num_blocks: u64) -> Self {
        VllmConfig {
            num_blocks,
            ..VllmConfig::default()
        }
    }

    /// Blocks the watermark keeps free: `int(watermark * num_blocks)` as vLLM
    /// computes `watermark_blocks`; negative or NaN fractions count as zero.
    pub fn watermark_blocks(&self) -> u64 {
        let w = if self.watermark.is_finite() && self.watermark > 0.0 {
            self.watermark.min(1.0)
        } else {
            0.0
        };
        (w * self.num_blocks as f64) as u64
    }

    /// `block_size` with zero treated as one, so arithmetic never divides by
    /// zero on a bad config.
    pub fn block_tokens(&self) -> u32 {
        self.block_size.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_vllm_serve_on_an_h100_class_gpu() {
        let c = VllmConfig::default();
        // `get_batch_defaults`, OPENAI_API_SERVER, >= 70 GiB, not A100.
        assert_eq!((c.max_num_seqs, c.max_num_batched_tokens), (1024, 8192));
        assert_eq!(c.block_size, 16);
    }

    #[test]
    fn watermark_rounds_down_and_ignores_nonsense() {
        let mut c = VllmConfig::with_blocks(1000);
        assert_eq!(c.watermark_blocks(), 0);
        c.watermark = 0.0109;
        assert_eq!(c.watermark_blocks(), 10);
        c.watermark = -1.0;
        assert_eq!(c.watermark_blocks(), 0);
        c.watermark = f64::NAN;
        assert_eq!(c.watermark_blocks(), 0);
        c.block_size = 0;
        assert_eq!(c.block_tokens(), 1);
    }
}

#[cfg(test)]
mod threshold_tests {
    use super::*;

    #[test]
    fn recompute_below_the_threshold_only() {
        assert!(!should_recompute_remote_kv(64, 0), "nothing to pull");
        assert!(should_recompute_remote_kv(64, 1));
        assert!(should_recompute_remote_kv(64, 63));
        assert!(
            !should_recompute_remote_kv(64, 64),
            "at the threshold: pull"
        );
        assert!(!should_recompute_remote_kv(64, 65));
        assert!(!should_recompute_remote_kv(0, 1), "0 disables");
        assert!(!should_recompute_remote_kv(0, 63));
    }
}
