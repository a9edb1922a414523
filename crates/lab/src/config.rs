//! What an experiment run configures on the one engine: the deployment
//! (one SGLang prefill worker, N SGLang decode workers, destination-first),
//! the pools, the D→P sync knobs and the timing calibration.
//!
//! Defaults follow the seed (`shared/seeds/002_853f16a73bae9cfb.txt`):
//! `K_DELTA = 1024` tokens, `max_sessions = 4` (§4.8, decision D2), one
//! prefill and three decode workers (§9, "1P3D").

use handoff_core::Duration;

use handoff_perf::FixedPerf;

use handoff_engine::TransferModel;

pub use handoff_deployment::SessionOverheads;

/// KV bytes per token the seed assumes: its §6 log example moves 4.2 GB for
/// a ~50K-token session.
pub const SEED_BYTES_PER_TOKEN: u64 = 84_000;

/// Link bandwidth (bytes/s) that makes a ~50K-token RDMA transfer take
/// ~300 ms, the middle of the seed's §3.2 "200–400 ms".
pub const SEED_LINK_BANDWIDTH: f64 = 15e9;

/// Which pass-time model the cores run with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimingMode {
    /// Dynamo's polynomial fit (`handoff_perf::PolynomialPerf`), the
    /// engines' default.
    Polynomial,
    /// The seed's §3.2 table: 45 µs per prefill token (50K tokens 2.25 s),
    /// 20 ms per decode pass.
    Seed,
}

impl TimingMode {
    /// The seed's fixed per-token costs.
    pub fn seed_perf() -> FixedPerf {
        FixedPerf {
            prefill_base: Duration::ZERO,
            per_prefill_token: Duration::from_micros(45),
            decode: Duration::from_millis(20),
        }
    }
}

/// The D→P sync knobs (seed §4.8, §4.4, §11), as the SGLang cores take them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SyncConfig {
    /// `--d-to-p-sync-delta-tokens` (`K_DELTA`).
    pub delta_tokens: u64,
    /// `--d-to-p-sync-max-sessions`.
    pub max_sessions: u32,
    /// `K_TAIL_TOLERANCE`.
    pub tail_tolerance: u64,
    /// Snapshots older than this miss as stale.
    pub max_age: Option<Duration>,
}

impl Default for SyncConfig {
    fn default() -> Self {
        SyncConfig {
            delta_tokens: 1024,
            max_sessions: 4,
            tail_tolerance: 4096,
            max_age: None,
        }
    }
}

/// Everything one experiment run configures.
#[derive(Clone, Debug, PartialEq)]
pub struct ExperimentConfig {
    /// Decode workers (the seed's E1–E4 use 3).
    pub decode_workers: u32,
    /// KV pool of each decode worker, tokens (session slots live here).
    pub decode_kv_tokens: u64,
    /// KV pool of the prefill worker, tokens: in-flight prefills, its radix
    /// cache and the snapshot store share it (seed §4.3).
    pub prefill_kv_tokens: u64,
    /// D→P sync knobs.
    pub sync: SyncConfig,
    /// Pass-time model.
    pub timing: TimingMode,
    /// KV transfers, both directions (P→D handoffs and D→P pushes).
    pub transfer: TransferModel,
    /// Rebalance threshold of the session router; 0 disables.
    pub rebalance_threshold: u32,
    /// From a session's last turn to the client closing it.
    pub session_close_delay: Duration,
    /// The session frontend's fixed latencies (seed §3.2); none by default
    /// (`experiment --timings seed` sets [`SessionOverheads::SEED`]).
    pub overheads: SessionOverheads,
    /// Router seed.
    pub seed: u64,
}

impl Default for ExperimentConfig {
    fn default() -> Self {
        ExperimentConfig {
            decode_workers: 3,
            decode_kv_tokens: 384_000,
            prefill_kv_tokens: 384_000,
            sync: SyncConfig::default(),
            timing: TimingMode::Polynomial,
            transfer: TransferModel::Contention {
                base: Duration::from_millis(20),
                bytes_per_token: SEED_BYTES_PER_TOKEN,
                bandwidth: SEED_LINK_BANDWIDTH,
            },
            rebalance_threshold: 0,
            session_close_delay: Duration::from_millis(100),
            overheads: SessionOverheads::default(),
            seed: 0,
        }
    }
}

impl ExperimentConfig {
    /// Rejects configurations the engine cannot run.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.decode_workers == 0 {
            return Err(ConfigError::NoDecodeWorker);
        }
        if self.decode_kv_tokens == 0 || self.prefill_kv_tokens == 0 {
            return Err(ConfigError::EmptyKvPool);
        }
        if self.sync.max_sessions == 0 {
            return Err(ConfigError::NoSyncSession);
        }
        match self.transfer {
            TransferModel::Bytes { bandwidth, .. }
            | TransferModel::Contention { bandwidth, .. }
                if !(bandwidth.is_finite() && bandwidth > 0.0) =>
            {
                Err(ConfigError::Bandwidth)
            }
            _ => Ok(()),
        }
    }

    /// KV bytes per token of the transfer model (0 for `Fixed`).
    pub fn bytes_per_token(&self) -> u64 {
        match self.transfer {
            TransferModel::Fixed(_) => 0,
            TransferModel::Bytes {
                bytes_per_token, ..
            }
            | TransferModel::Contention {
                bytes_per_token, ..
            } => bytes_per_token,
        }
    }
}

/// Why an [`ExperimentConfig`] cannot run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// No decode worker.
    NoDecodeWorker,
    /// A KV pool of zero tokens.
    EmptyKvPool,
    /// `d-to-p-sync-max-sessions` of zero.
    NoSyncSession,
    /// A transfer bandwidth that is not a positive number.
    Bandwidth,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ConfigError::NoDecodeWorker => "decode workers: need at least one",
            ConfigError::EmptyKvPool => "KV capacities must be positive",
            ConfigError::NoSyncSession => "d-to-p-sync-max-sessions: must be at least 1",
            ConfigError::Bandwidth => "transfer bandwidth: must be positive",
        })
    }
}

impl std::error::Error for ConfigError {}

/// One column of the experiment matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// Naive PD-disaggregation, 1 prefill + N decode, KV-aware routing.
    E1,
    /// KVC: session-affine, a reseed re-prefills.
    E3,
    /// KVC plus D→P snapshot push and prefill bypass.
    E4,
    /// E4 with the bypass switched off: push traffic without its benefit.
    E4Ablate,
}

impl Variant {
    /// The four, in the seed's order.
    pub const ALL: [Variant; 4] = [Variant::E1, Variant::E3, Variant::E4, Variant::E4Ablate];

    /// Label in tables and logs.
    pub fn label(self) -> &'static str {
        match self {
            Variant::E1 => "E1",
            Variant::E3 => "E3",
            Variant::E4 => "E4",
            Variant::E4Ablate => "E4-ablate",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_perf::PerfModel;

    #[test]
    fn seed_timings_match_the_section_3_2_table() {
        let prefill = TimingMode::seed_perf().prefill(50_000).as_secs_f64();
        assert!((1.5..=3.0).contains(&prefill), "{prefill}");
        let rdma = ExperimentConfig::default()
            .transfer
            .isolated_duration(50_000)
            .as_secs_f64();
        assert!((0.2..=0.4).contains(&rdma), "{rdma}");
    }

    #[test]
    fn validation_rejects_nonsense() {
        assert!(ExperimentConfig::default().validate().is_ok());
        let bad = ExperimentConfig {
            decode_workers: 0,
            ..ExperimentConfig::default()
        };
        assert_eq!(bad.validate(), Err(ConfigError::NoDecodeWorker));
    }
}
