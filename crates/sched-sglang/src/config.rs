//! Server arguments of the modelled SGLang worker.
//!
//! Field names follow SGLang's `ServerArgs` and `envs` where one exists, so a
//! deployment's launch flags can be copied over one to one.

use core::fmt;
use handoff_core::Duration;

/// Tokens a KV event hash covers by default.
pub const DEFAULT_EVENT_BLOCK_TOKENS: u32 = 64;

/// Context length assumed when deriving SGLang's request limits from the
/// pool ([`default_max_running_requests`]): Llama-3.1-8B's 131,072 (SGLang
/// reads the served model's `context_len` from its config).
pub const ASSUMED_CONTEXT_LEN: u64 = 131_072;

/// `--max-running-requests` as SGLang derives it when the flag is unset:
/// the request-to-token pool holds `clamp(max_total_num_tokens /
/// context_len × 512, 2048, 4096)` requests (`ModelRunner.init_memory_pool`,
/// `max_num_reqs`, in `python/sglang/srt/model_executor/model_runner.py`),
/// and the running limit is the smaller of that and `max_total_num_tokens /
/// 2` (`ModelRunner` / `TpModelWorker` `max_running_requests`). The
/// attention backend's own cap is not modelled. At least 1.
pub fn default_max_running_requests(total_tokens: u64, context_len: u64) -> u32 {
    let pool = (total_tokens as f64 / context_len.max(1) as f64 * 512.0) as u64;
    let pool = pool.clamp(2048, 4096);
    u32::try_from(pool.min(total_tokens / 2).max(1)).unwrap_or(u32::MAX)
}

/// The knobs of one SGLang worker.
///
/// Defaults are SGLang's (`server_args.py`, `environ.py`) except for the
/// pool size, which SGLang derives from GPU memory and a mocker must be
/// told, and `max_running_requests`, which SGLang derives from the pool
/// ([`default_max_running_requests`]; the command line does so) and which
/// defaults to 256 here so library users and tests get the same batch
/// limit on both backends.
#[derive(Clone, Debug, PartialEq)]
pub struct SglangConfig {
    /// Pages in the token-to-KV pool (`max_total_num_tokens / page_size`).
    pub total_pages: u64,
    /// Tokens per page (`--page-size`, default 1).
    pub page_size: u32,
    /// Requests the running batch may hold, prefill and decode alike
    /// (`--max-running-requests`).
    pub max_running_requests: u32,
    /// Extra request slots beyond `max_running_requests` for preallocated and
    /// transferring requests (SGLang's `DecodeReqToTokenPool` `pre_alloc_size`:
    /// `2 * max_running_requests` when that is at most 32, otherwise
    /// `SGLANG_DISAGGREGATION_NUM_PRE_ALLOCATE_REQS`, default 0).
    pub prealloc_slot_margin: u32,
    /// Prompt tokens one pass may compute for one request before it is
    /// chunked (`--chunked-prefill-size`, 8192); 0 disables chunking.
    pub chunked_prefill_size: u32,
    /// Prompt tokens one prefill pass may compute in total
    /// (`--max-prefill-tokens`, 16384).
    pub max_prefill_tokens: u32,
    /// Decode headroom promised per decode-bound request at preallocation
    /// (`--num-reserved-decode-tokens`, 512).
    pub num_reserved_decode_tokens: u32,
    /// Clip on `max_new_tokens` in memory estimates
    /// (`SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`, 4096).
    pub max_new_tokens_clip: u32,
    /// Starting new-token ratio (`SGLANG_INIT_NEW_TOKEN_RATIO` 0.7 times
    /// `--schedule-conservativeness` 1.0).
    pub init_new_token_ratio: f64,
    /// Floor of the ratio (`init * SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR`, 0.14).
    pub min_new_token_ratio: f64,
    /// Ratio decay per decode pass (`(init - min) /
    /// SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`, 600 steps).
    pub new_token_ratio_decay: f64,
    /// Tokens per surviving request a retraction frees room for
    /// (`SGLANG_RETRACT_DECODE_STEPS`, 20); also feeds the post-retraction
    /// ratio estimate.
    pub retract_decode_steps: u32,
    /// Piggyback the decode batch on prefill passes (`--enable-mixed-chunk`,
    /// off by default: SGLang then alternates prefill and decode passes).
    pub enable_mixed_chunk: bool,
    /// How long a completed handoff prefill stays held without its reader
    /// (SGLang's `SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT` /
    /// `SGLANG_DISAGGREGATION_WAITING_TIMEOUT`, 300 s). The caller enforces it
    /// by sending `ReleaseSource`.
    pub source_lease_ttl: Duration,
    /// Keep a radix prefix cache on a PD decode server
    /// (`--disaggregation-decode-enable-radix-cache`, off by default).
    ///
    /// Off, as upstream defaults, a decode server runs a chunk cache
    /// (`mem_cache/chunk_cache.py`: no prefix matching, a finished request's
    /// KV is freed, nothing is published): every preallocation takes and
    /// every transfer moves the whole prompt, and the decode side reports
    /// no KV events (`disaggregation/decode.py` `pop_preallocated`, whose
    /// `use_decode_radix_cache` gates `_match_prefix_and_lock`). On, it is
    /// the DEP's locked-prefix mode: the prompt is matched against the
    /// decode radix tree and locked, only the page-aligned delta is
    /// allocated and transferred, and activation publishes the delta.
    ///
    /// Applies to destination (decode-side) requests only: a worker of this
    /// model is a decode server exactly when it takes destinations.
    pub disaggregation_decode_enable_radix_cache: bool,
    /// A handoff prefill starts sending its cached prefix (the radix-cache
    /// hit, already on the device) when its first pass begins, before the
    /// forward over the new suffix, instead of with the first finished chunk
    /// (SGLang `SGLANG_DISAGG_PREFILL_EARLY_SEND_CACHED_PREFIX`, default on
    /// in `environ.py`; `disaggregation/prefill.py`
    /// `maybe_send_cached_prefix_chunk`, called as `run_batch` begins).
    /// Off, the prefix goes with the first chunk or the final transfer.
    /// The CLI sets it (from that variable or
    /// `--disagg-prefill-early-send-cached-prefix`); this crate reads no
    /// environment.
    pub disagg_prefill_early_send_cached_prefix: bool,
    /// Tokens each KV event hash (and each radix node) covers. Must be a
    /// multiple of `page_size`. SGLang itself reports one hash per page; a
    /// coarser granularity keeps long prompts at page size 1 cheap, at the
    /// cost of caching and matching prefixes only in whole event blocks.
    pub event_block_tokens: u32,
    /// Streaming sessions, the D→P snapshot push and the prefill bypass
    /// (seed 002); off by default, which keeps the core's behaviour exactly
    /// as without sessions.
    pub sessions: SessionConfig,
    /// SGLang's `--max-loras-per-batch`: distinct adapters one batch may
    /// hold, the base model counting as one (module `lora`); `None`, LoRA
    /// off (no limit). 0 is taken as 1.
    pub max_loras_per_batch: Option<u32>,
}

/// Session-affine serving knobs (seed 002, `shared/seeds/002_853f16a73bae9cfb.txt`).
///
/// On a decode worker a request that names a session keeps its KV in a
/// session slot when it finishes (SGLang's streaming sessions,
/// `srt/managers/session_controller.py`, and the session-aware cache the
/// seed's §3.1 names, `SessionAwareCache.cache_finished_req`), and the
/// session's next request appends to it. On a prefill worker the
/// [`PrefillSnapshotStore`](crate::snapshot_store::PrefillSnapshotStore)
/// holds snapshots decode workers pushed back, and a reseed covered by one
/// bypasses its prefill.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SessionConfig {
    /// Keep session KV between turns and accept snapshots.
    pub enabled: bool,
    /// `--enable-d-to-p-sync`: offer a push of a session's KV after a turn
    /// commits (seed §4.5).
    pub push: bool,
    /// `--d-to-p-sync-delta-tokens` (`K_DELTA`, seed §3.1): a push is offered
    /// only when the session grew by at least this many tokens since its
    /// last successful push.
    pub push_delta_tokens: u64,
    /// `--d-to-p-sync-max-sessions` (seed §4.3, default 4 after decision D2):
    /// snapshot entries the prefill worker keeps, least recently used first
    /// out.
    pub snapshot_max_sessions: u32,
    /// Use a covering snapshot to skip the re-prefill (seed §4.4); off in
    /// the seed's E4-ablate.
    pub bypass: bool,
    /// `K_TAIL_TOLERANCE` (seed §4.4): a snapshot covers a prompt when
    /// `kv_committed_len >= input_len - tail_tolerance_tokens`.
    pub tail_tolerance_tokens: u64,
    /// Snapshots older than this miss as `stale` (the `fresh` flag of the
    /// seed's §4.6 status probe); `None`: never stale by age.
    pub snapshot_max_age: Option<Duration>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            enabled: false,
            push: false,
            push_delta_tokens: 1024,
            snapshot_max_sessions: 4,
            bypass: true,
            tail_tolerance_tokens: 4096,
            snapshot_max_age: None,
        }
    }
}

/// SGLang's default `pre_alloc_size` for a decode worker.
pub fn default_prealloc_slot_margin(max_running_requests: u32) -> u32 {
    if max_running_requests <= 32 {
        max_running_requests.saturating_mul(2)
    } else {
        0
    }
}

impl Default for SglangConfig {
    fn default() -> Self {
        let init = 0.7;
        let min = init * 0.14;
        SglangConfig {
            total_pages: 1 << 18,
            page_size: 1,
            max_running_requests: 256,
            prealloc_slot_margin: default_prealloc_slot_margin(256),
            chunked_prefill_size: 8192,
            max_prefill_tokens: 16384,
            num_reserved_decode_tokens: 512,
            max_new_tokens_clip: 4096,
            init_new_token_ratio: init,
            min_new_token_ratio: min,
            new_token_ratio_decay: (init - min) / 600.0,
            retract_decode_steps: 20,
            enable_mixed_chunk: false,
            source_lease_ttl: Duration::from_secs(300),
            disaggregation_decode_enable_radix_cache: false,
            disagg_prefill_early_send_cached_prefix: true,
            event_block_tokens: DEFAULT_EVENT_BLOCK_TOKENS,
            sessions: SessionConfig::default(),
            max_loras_per_batch: None,
        }
    }
}

impl SglangConfig {
    /// The defaults with `page_size` pages and the smallest event block of at
    /// least 64 tokens that is a whole number of pages.
    pub fn with_page_size(page_size: u32) -> Self {
        let p = page_size.max(1);
        SglangConfig {
            page_size: p,
            event_block_tokens: DEFAULT_EVENT_BLOCK_TOKENS.div_ceil(p).saturating_mul(p),
            ..SglangConfig::default()
        }
    }

    /// Request slots in the req-to-token pool.
    pub fn total_request_slots(&self) -> u64 {
        u64::from(self.max_running_requests) + u64::from(self.prealloc_slot_margin)
    }

    /// Tokens the pool holds.
    pub fn total_tokens(&self) -> u64 {
        self.total_pages.saturating_mul(u64::from(self.page_size))
    }

    /// Checks the combination is one the core can run.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.page_size == 0 {
            return Err(ConfigError::ZeroPageSize);
        }
        if self.total_pages == 0 {
            return Err(ConfigError::EmptyPool);
        }
        // Budgets are signed token counts; keep the pool well inside i64.
        match self.total_pages.checked_mul(u64::from(self.page_size)) {
            Some(t) if t <= 1 << 60 => {}
            _ => return Err(ConfigError::PoolTooLarge(self.total_pages)),
        }
        if self.max_running_requests == 0 {
            return Err(ConfigError::NoRunningRequests);
        }
        if self.max_prefill_tokens == 0 {
            return Err(ConfigError::NoPrefillTokens);
        }
        if self.chunked_prefill_size != 0 && self.chunked_prefill_size < self.page_size {
            return Err(ConfigError::ChunkBelowPage {
                chunked_prefill_size: self.chunked_prefill_size,
                page_size: self.page_size,
            });
        }
        if self.event_block_tokens == 0 || !self.event_block_tokens.is_multiple_of(self.page_size) {
            return Err(ConfigError::EventBlockNotPageMultiple {
                event_block_tokens: self.event_block_tokens,
                page_size: self.page_size,
            });
        }
        let ratios = [
            ("init_new_token_ratio", self.init_new_token_ratio),
            ("min_new_token_ratio", self.min_new_token_ratio),
            ("new_token_ratio_decay", self.new_token_ratio_decay),
        ];
        for (name, v) in ratios {
            if !v.is_finite() || v < 0.0 {
                return Err(ConfigError::BadRatio(name, v));
            }
        }
        if self.min_new_token_ratio > self.init_new_token_ratio {
            return Err(ConfigError::BadRatio(
                "min_new_token_ratio",
                self.min_new_token_ratio,
            ));
        }
        if self.sessions.enabled && self.sessions.snapshot_max_sessions == 0 {
            return Err(ConfigError::NoSnapshotSessions);
        }
        Ok(())
    }
}

/// Why a configuration was refused.
#[derive(Clone, Debug, PartialEq)]
pub enum ConfigError {
    /// `page_size` is zero.
    ZeroPageSize,
    /// `total_pages` is zero.
    EmptyPool,
    /// `total_pages * page_size` exceeds 2^60 tokens.
    PoolTooLarge(u64),
    /// `max_running_requests` is zero.
    NoRunningRequests,
    /// `max_prefill_tokens` is zero.
    NoPrefillTokens,
    /// A non-zero `chunked_prefill_size` smaller than a page could never
    /// make progress on a long prompt.
    ChunkBelowPage {
        /// The configured chunk.
        chunked_prefill_size: u32,
        /// The configured page size.
        page_size: u32,
    },
    /// `event_block_tokens` is zero or not a whole number of pages.
    EventBlockNotPageMultiple {
        /// The configured event block.
        event_block_tokens: u32,
        /// The configured page size.
        page_size: u32,
    },
    /// A new-token-ratio knob is negative, not finite, or min exceeds init.
    BadRatio(&'static str, f64),
    /// Sessions are on but the snapshot store may hold no session.
    NoSnapshotSessions,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ZeroPageSize => write!(f, "page_size must be at least 1"),
            ConfigError::EmptyPool => write!(f, "total_pages must be at least 1"),
            ConfigError::PoolTooLarge(n) => write!(f, "total_pages {n} is too large"),
            ConfigError::NoRunningRequests => {
                write!(f, "max_running_requests must be at least 1")
            }
            ConfigError::NoPrefillTokens => write!(f, "max_prefill_tokens must be at least 1"),
            ConfigError::ChunkBelowPage {
                chunked_prefill_size,
                page_size,
            } => write!(
                f,
                "chunked_prefill_size {chunked_prefill_size} is below page_size {page_size}"
            ),
            ConfigError::EventBlockNotPageMultiple {
                event_block_tokens,
                page_size,
            } => write!(
                f,
                "event_block_tokens {event_block_tokens} must be a positive multiple of page_size {page_size}"
            ),
            ConfigError::BadRatio(name, v) => write!(f, "{name} = {v} is out of range"),
            ConfigError::NoSnapshotSessions => {
                write!(f, "sessions.snapshot_max_sessions must be at least 1")
            }
        }
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_running_requests_derive_from_the_pool_as_sglang_does() {
        // 262,144 tokens at a 131,072 context: 1,024 slots, raised to 2,048.
        assert_eq!(default_max_running_requests(262_144, 131_072), 2048);
        // 2M tokens at 32K: 32,768, capped at 4,096.
        assert_eq!(default_max_running_requests(1 << 21, 32_768), 4096);
        // 3M tokens at 131,072: 12,000, capped at 4,096.
        assert_eq!(default_max_running_requests(3_000_000, 131_072), 4096);
        // A tiny pool: half its tokens.
        assert_eq!(default_max_running_requests(1000, 131_072), 500);
        assert_eq!(default_max_running_requests(1, 131_072), 1);
    }

    #[test]
    fn defaults_match_sglang() {
        let c = SglangConfig::default();
        c.validate().unwrap();
        assert_eq!(c.page_size, 1);
        assert_eq!(c.chunked_prefill_size, 8192);
        assert_eq!(c.max_prefill_tokens, 16384);
        assert_eq!(c.num_reserved_decode_tokens, 512);
        assert_eq!(c.max_new_tokens_clip, 4096);
        assert!((c.min_new_token_ratio - 0.098).abs() < 1e-12);
        assert!((c.new_token_ratio_decay * 600.0 - (0.7 - 0.098)).abs() < 1e-12);
        assert_eq!(c.source_lease_ttl, Duration::from_secs(300));
        assert_eq!(c.prealloc_slot_margin, 0);
        assert_eq!(default_prealloc_slot_margin(8), 16);
        // `server_args.py`: `disaggregation_decode_enable_radix_cache = False`.
        assert!(!c.disaggregation_decode_enable_radix_cache);
    }

    #[test]
    fn event_block_must_be_page_multiple() {
        let mut c = SglangConfig::with_page_size(16);
        assert_eq!(c.event_block_tokens, 64);
        c.validate().unwrap();
        c.event_block_tokens = 40;
        assert!(matches!(
            c.validate(),
            Err(ConfigError::EventBlockNotPageMultiple { .. })
        ));
        assert_eq!(SglangConfig::with_page_size(48).event_block_tokens, 96);
        assert_eq!(SglangConfig::with_page_size(128).event_block_tokens, 128);
        let zero = SglangConfig {
            page_size: 0,
            ..SglangConfig::default()
        };
        assert_eq!(zero.validate(), Err(ConfigError::ZeroPageSize));
        let tiny_chunk = SglangConfig {
            chunked_prefill_size: 32,
            ..SglangConfig::with_page_size(64)
        };
        assert!(matches!(
            tiny_chunk.validate(),
            Err(ConfigError::ChunkBelowPage { .. })
        ));
    }
}
