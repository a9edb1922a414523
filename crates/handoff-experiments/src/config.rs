//! What a run models: the serving mode, the pools, the D→P sync knobs, the
//! timings and any injected faults.
//!
//! Defaults follow the seed (`shared/seeds/002_853f16a73bae9cfb.txt`,
//! "D→P KV 反向推送设计"): `K_DELTA = 1024` tokens and `max_sessions = 4`
//! (§4.8 and decision D2 of §11), one prefill worker and three decode
//! workers (§9, "1P3D").

use handoff_core::TransferModel;
use handoff_core::{Duration, FixedPerf, Instant, Pass, PerfModel, PolynomialPerf, SessionId};

/// KV bytes per token assumed by the seed: its §6 log example moves
/// 4.2 GB for a ~50K-token session.
pub const SEED_BYTES_PER_TOKEN: u64 = 84_000;

/// Link bandwidth (bytes/s) that makes a ~50K-token RDMA transfer take
/// ~300 ms, the middle of the seed's §3.2 "200–400 ms".
pub const SEED_LINK_BANDWIDTH: f64 = 15e9;

/// How the serving stack places turns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServingMode {
    /// Naive PD disaggregation (the seed's E1): every turn is prefilled on
    /// the prefill worker (with its prefix cache) and handed off to a decode
    /// worker chosen by the KV-aware router; decode keeps nothing between
    /// turns.
    NaivePd,
    /// KVC (the seed's E3/E4): a session's KV stays in a slot on its decode
    /// worker and the next turn appends there; otherwise the session is
    /// reseeded through the prefill worker.
    Kvc,
}

impl ServingMode {
    /// Stable name for reports.
    pub fn name(self) -> &'static str {
        match self {
            ServingMode::NaivePd => "naive-pd",
            ServingMode::Kvc => "kvc",
        }
    }
}

/// The D→P snapshot push and prefill bypass knobs (seed §4.8, §4.4, §11).
#[derive(Clone, Debug, PartialEq)]
pub struct SyncConfig {
    /// `--enable-d-to-p-sync`: push session KV back to the prefill worker.
    pub enabled: bool,
    /// `--d-to-p-sync-delta-tokens`: push only when the session grew by at
    /// least this much since its last successful push (`K_DELTA`, §3.1).
    pub delta_tokens: u64,
    /// `--d-to-p-sync-max-sessions`: snapshots the prefill worker keeps
    /// (LRU; §4.3, default 4 after decision D2).
    pub max_sessions: usize,
    /// Token budget of the snapshot side table. The seed allocates entries
    /// from the prefill worker's KV pool (§4.3 `ingest`); modelled as a
    /// separate budget so the radix cache and snapshots never fight.
    pub store_kv_tokens: u64,
    /// Use a fresh snapshot to skip the re-prefill (§4.4). Off in the seed's
    /// E4-ablate (push traffic without its benefit).
    pub bypass: bool,
    /// `K_TAIL_TOLERANCE` (§4.4): a snapshot qualifies when
    /// `kv_committed_len >= input_len - tail_tolerance`; the tail is
    /// appended on the new decode worker.
    pub tail_tolerance: u64,
    /// Snapshots older than this are `stale` (the `fresh` flag of the
    /// §4.6 status probe). `None`: never stale by age.
    pub max_age: Option<Duration>,
    /// Concurrent pushes per decode worker (the sender's thread pool of
    /// §4.1, `max_workers=2`).
    pub push_concurrency: u32,
    /// Probability that a push transfer fails (`KVPoll.Failed`, §7), drawn
    /// from the run's seeded generator.
    pub push_failure_rate: f64,
    /// How long a push may wait for the store's reservation, and how long
    /// the decode slot stays locked for one push, before it is abandoned.
    pub push_ttl: Duration,
}

impl Default for SyncConfig {
    fn default() -> Self {
        SyncConfig {
            enabled: false,
            delta_tokens: 1024,
            max_sessions: 4,
            store_kv_tokens: 4 * 64_000,
            bypass: true,
            tail_tolerance: 4096,
            max_age: None,
            push_concurrency: 2,
            push_failure_rate: 0.0,
            push_ttl: Duration::from_secs(30),
        }
    }
}

/// A perf model chosen at run time without dynamic dispatch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Perf {
    /// Dynamo's polynomial fit (`handoff_core::PolynomialPerf`).
    Polynomial(PolynomialPerf),
    /// Fixed per-token costs (`handoff_core::FixedPerf`).
    Fixed(FixedPerf),
}

impl PerfModel for Perf {
    fn pass(&self, pass: &Pass) -> Duration {
        match self {
            Perf::Polynomial(p) => p.pass(pass),
            Perf::Fixed(p) => p.pass(pass),
        }
    }
}

/// Which calibration [`Timings::for_mode`] builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimingMode {
    /// `PolynomialPerf` compute, contended links.
    Polynomial,
    /// The seed's §3.2 table: P open 50 ms, re-prefill ~2.25 s for 50K
    /// tokens, RDMA ~300 ms for 50K tokens, D' start 50 ms.
    SeedTimings,
}

/// Every duration the model charges that is not queueing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timings {
    /// Compute model of both pools.
    pub perf: Perf,
    /// Overhead before a turn reaches the prefill worker: routing, the
    /// snapshot probe and opening the streaming sessions on P and D' (seed
    /// §3.2 "P open session ~50ms", t=0..45ms of the timeline).
    pub p_open: Duration,
    /// Routing overhead of a direct-to-D append (no session to open).
    pub direct_route: Duration,
    /// From the KV landing on the new decode worker to its first token
    /// (seed §3.2 "D' decode start ~50ms").
    pub d_start: Duration,
    /// KV transfer timing, both directions (P→D' handoffs and D→P pushes).
    pub transfer: TransferModel,
    /// Links are full duplex: under `Contention`, P→D transfers and D→P
    /// pushes share bandwidth only within their own direction. `false`
    /// makes every transfer touching a worker share its link (a
    /// pessimistic half-duplex bound on what pushes cost reseeds).
    pub duplex: bool,
}

impl Timings {
    /// The default: polynomial compute, seed overheads, and full-duplex
    /// links whose bandwidth concurrent transfers of one direction share.
    pub fn polynomial() -> Timings {
        Timings {
            perf: Perf::Polynomial(PolynomialPerf::default()),
            p_open: Duration::from_millis(50),
            direct_route: Duration::from_millis(10),
            d_start: Duration::from_millis(50),
            transfer: TransferModel::Contention {
                base: Duration::from_millis(20),
                bytes_per_token: SEED_BYTES_PER_TOKEN,
                bandwidth: SEED_LINK_BANDWIDTH,
            },
            duplex: true,
        }
    }

    /// The seed's §3.2 assumptions: 45 µs per prefill token (50K tokens
    /// take 2.25 s, inside "1500-3000ms"), 20 ms setup plus 84 KB/token at
    /// 15 GB/s (50K tokens take 300 ms, inside "200-400ms"), 50 ms P open and
    /// 50 ms D' start; 20 ms per decode step.
    pub fn seed() -> Timings {
        Timings {
            perf: Perf::Fixed(FixedPerf {
                prefill_base: Duration::ZERO,
                per_prefill_token: Duration::from_micros(45),
                decode: Duration::from_millis(20),
            }),
            p_open: Duration::from_millis(50),
            direct_route: Duration::from_millis(10),
            d_start: Duration::from_millis(50),
            transfer: TransferModel::Bytes {
                base: Duration::from_millis(20),
                bytes_per_token: SEED_BYTES_PER_TOKEN,
                bandwidth: SEED_LINK_BANDWIDTH,
            },
            duplex: true,
        }
    }

    /// The calibration named by `mode`.
    pub fn for_mode(mode: TimingMode) -> Timings {
        match mode {
            TimingMode::Polynomial => Timings::polynomial(),
            TimingMode::SeedTimings => Timings::seed(),
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

impl Default for Timings {
    fn default() -> Self {
        Timings::polynomial()
    }
}

/// A fault injected at a virtual time (the seed's §7 failure table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// Decode worker `index` restarts: its session slots, push records and
    /// in-flight work are lost (§7 "D 重启 / session 丢失").
    RestartDecode(u32),
    /// The prefill worker restarts: its radix cache and snapshot store are
    /// cleared, in-flight work is lost (§7 "P 重启").
    RestartPrefill,
    /// The session's decode slot is dropped if it is idle and unlocked (a
    /// forced "session not resident").
    EvictSession(SessionId),
    /// The next `n` push transfers to start fail at their completion time
    /// (§7 "D→P transfer 中途失败").
    FailPushes(u32),
}

/// One injected fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// When it happens.
    pub at: Instant,
    /// What happens.
    pub kind: FaultKind,
}

/// Everything one run models.
#[derive(Clone, Debug, PartialEq)]
pub struct KvcConfig {
    /// Naive PD or KVC.
    pub mode: ServingMode,
    /// Decode workers (the seed's E1–E4 use 3).
    pub decode_workers: u32,
    /// KV capacity of each decode worker, in tokens. The default, 384K,
    /// holds ~7 sessions at 50K; three of them hold ~73% of the 1.58M
    /// tokens the default session trace keeps live at its peak, so idle
    /// sessions get evicted and reseed (the seed's reseed cause).
    pub decode_kv_tokens: u64,
    /// KV capacity of the prefill worker (in-flight prefills plus its radix
    /// prefix cache), in tokens; by default the same GPU as a decode worker.
    pub prefill_kv_tokens: u64,
    /// D→P sync (KVC only; ignored in naive PD).
    pub sync: SyncConfig,
    /// Time costs.
    pub timings: Timings,
    /// KVC load policy: when the session's decode worker runs at least this
    /// many more turns than the least busy other worker, the session is
    /// moved there (a reseed for load). 0 disables it.
    pub rebalance_threshold: u32,
    /// From a session's last turn completing to the client closing it
    /// (`release_session`); a push still running then is aborted (§3.1).
    pub session_close_delay: Duration,
    /// Wait and reservation lifetime of P→D handoffs.
    pub handoff_ttl: Duration,
    /// Seeds the push-failure draws.
    pub seed: u64,
    /// Keep the structured JSONL log in memory.
    pub log: bool,
    /// Injected faults, in any order.
    pub faults: Vec<Fault>,
}

impl Default for KvcConfig {
    fn default() -> Self {
        KvcConfig {
            mode: ServingMode::Kvc,
            decode_workers: 3,
            decode_kv_tokens: 384_000,
            prefill_kv_tokens: 384_000,
            sync: SyncConfig::default(),
            timings: Timings::default(),
            rebalance_threshold: 0,
            session_close_delay: Duration::from_millis(100),
            handoff_ttl: Duration::from_secs(600),
            seed: 0,
            log: false,
            faults: Vec::new(),
        }
    }
}

impl KvcConfig {
    /// Rejects configurations the model cannot run.
    pub fn validate(&self) -> Result<(), String> {
        if self.decode_workers == 0 {
            return Err("decode workers: need at least one".into());
        }
        if self.decode_kv_tokens == 0 || self.prefill_kv_tokens == 0 {
            return Err("KV capacities must be positive".into());
        }
        if self.sync.enabled {
            if self.sync.max_sessions == 0 {
                return Err("d-to-p-sync-max-sessions: must be at least 1".into());
            }
            if self.sync.push_concurrency == 0 {
                return Err("push concurrency: must be at least 1".into());
            }
        }
        let rate = self.sync.push_failure_rate;
        if !(rate.is_finite() && (0.0..=1.0).contains(&rate)) {
            return Err("push failure rate: must be within [0, 1]".into());
        }
        match self.timings.transfer {
            TransferModel::Bytes { bandwidth, .. }
            | TransferModel::Contention { bandwidth, .. }
                if !(bandwidth.is_finite() && bandwidth > 0.0) =>
            {
                Err("transfer bandwidth: must be positive".into())
            }
            _ => Ok(()),
        }
    }

    /// Whether pushes run in this configuration.
    pub fn sync_active(&self) -> bool {
        self.mode == ServingMode::Kvc && self.sync.enabled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_timings_match_the_section_3_2_table() {
        let t = Timings::seed();
        let prefill = t.perf.prefill(50_000).as_secs_f64();
        assert!((1.5..=3.0).contains(&prefill), "{prefill}");
        let rdma = t.transfer.isolated_duration(50_000).as_secs_f64();
        assert!((0.2..=0.4).contains(&rdma), "{rdma}");
        assert_eq!(t.p_open, Duration::from_millis(50));
        assert_eq!(t.d_start, Duration::from_millis(50));
        // The polynomial fit also lands in the seed's re-prefill range.
        let poly = Timings::polynomial().perf.prefill(50_000).as_secs_f64();
        assert!((1.5..=3.0).contains(&poly), "{poly}");
    }

    #[test]
    fn validation_rejects_nonsense() {
        assert!(KvcConfig::default().validate().is_ok());
        let bad = KvcConfig {
            decode_workers: 0,
            ..KvcConfig::default()
        };
        assert!(bad.validate().is_err());
        let mut bad = KvcConfig::default();
        bad.sync.push_failure_rate = 2.0;
        assert!(bad.validate().is_err());
    }
}
