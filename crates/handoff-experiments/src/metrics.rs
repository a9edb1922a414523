//! Per-request records (the seed's §6 "Per-request metrics", added to
//! `metrics.jsonl`) and the per-run summary the experiment compares.

use serde::Serialize;
use std::collections::BTreeMap;

/// How a turn was served (`execution_mode` of the seed's §9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecMode {
    /// Naive PD: prefill worker, then a P→D handoff (E1's normal path).
    Pd,
    /// KVC first turn: prefilled on P and seeded onto a decode worker.
    Seed,
    /// KVC direct-to-D append on the session's decode worker.
    Direct,
    /// KVC reseed: the session's context rebuilt on a decode worker through
    /// the prefill worker (re-prefill or snapshot bypass).
    Reseed,
}

impl ExecMode {
    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            ExecMode::Pd => "pd",
            ExecMode::Seed => "seed",
            ExecMode::Direct => "direct",
            ExecMode::Reseed => "reseed",
        }
    }
}

/// One request's outcome.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RequestRecord {
    /// Request id.
    pub request_id: u64,
    /// Session id.
    pub session: u64,
    /// Turn index within the session.
    pub turn: u32,
    /// How it was served.
    pub execution_mode: ExecMode,
    /// Why it was reseeded: `not_resident`, `capacity` or `rebalance`.
    pub reseed_cause: Option<&'static str>,
    /// Decode worker index that served it.
    pub decode_worker: Option<u32>,
    /// When the client sent it (closed loop), ms.
    pub sent_ms: f64,
    /// Time to first token, ms (`None` if it failed first).
    pub ttft_ms: Option<f64>,
    /// Send to last token, ms.
    pub e2e_ms: Option<f64>,
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Prompt tokens computed on the prefill worker.
    pub prefill_tokens_computed: u64,
    /// Prompt tokens computed on a decode worker (direct append or the tail
    /// after a bypass).
    pub append_tokens_computed: u64,
    /// A reseed served from a D→P snapshot (prefill bypass).
    pub d_to_p_snapshot_used: bool,
    /// Age of that snapshot, seconds.
    pub d_to_p_snapshot_age_s: Option<f64>,
    /// Successful pushes of the session before this turn was sent.
    pub d_to_p_push_count_during_session: u32,
    /// Why a reseed did not bypass.
    pub bypass_miss_reason: Option<&'static str>,
    /// Why it failed, if it did.
    pub failed: Option<&'static str>,
}

/// Nearest-rank percentile of sorted `v` (0 for empty).
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let n = sorted.len();
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    sorted[rank - 1]
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Everything one run reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RunSummary {
    /// Configuration label (E1, E3, E4, E4-ablate, or a custom one).
    pub label: String,
    /// `naive-pd` or `kvc`.
    pub mode: String,
    /// D→P sync on.
    pub d_to_p_sync: bool,
    /// Prefill bypass on.
    pub bypass: bool,
    /// Requests in the trace.
    pub requests: u64,
    /// Requests that completed.
    pub completed: u64,
    /// Requests that failed.
    pub failed: u64,
    /// TTFT median over completed requests, ms.
    pub ttft_p50_ms: f64,
    /// TTFT 99th percentile, ms.
    pub ttft_p99_ms: f64,
    /// TTFT mean, ms.
    pub ttft_mean_ms: f64,
    /// Turns per execution mode.
    pub modes: BTreeMap<String, u64>,
    /// Reseeds over completed requests.
    pub reseed_share: f64,
    /// TTFT median of reseeds, ms.
    pub reseed_ttft_p50_ms: f64,
    /// TTFT 99th percentile of reseeds, ms.
    pub reseed_ttft_p99_ms: f64,
    /// TTFT median of every non-reseed turn (E1: every turn), ms.
    pub normal_ttft_p50_ms: f64,
    /// TTFT median of direct appends, ms.
    pub direct_ttft_p50_ms: f64,
    /// Reseed causes.
    pub reseed_causes: BTreeMap<String, u64>,
    /// First send to last completion, s.
    pub makespan_s: f64,
    /// Completed requests per second.
    pub throughput_rps: f64,
    /// Output tokens per second.
    pub output_tps: f64,
    /// Prompt tokens computed on the prefill worker.
    pub prefill_tokens: u64,
    /// Prompt tokens computed on decode workers.
    pub append_tokens: u64,
    /// Pushes enqueued (after the K_DELTA throttle).
    pub pushes_enqueued: u64,
    /// Push handoffs started.
    pub pushes_started: u64,
    /// Pushes ingested by the prefill worker.
    pub pushes_sent: u64,
    /// Push attempts that failed (any reason, including aborts).
    pub pushes_failed: u64,
    /// Pushes retried.
    pub pushes_retried: u64,
    /// Queued pushes dropped before starting (session gone).
    pub pushes_dropped: u64,
    /// Push failures by reason.
    pub push_failures: BTreeMap<String, u64>,
    /// Bytes of every push transfer started.
    pub push_bytes: u64,
    /// `push_bytes / makespan`, GB/s.
    pub push_gbps: f64,
    /// Reseeds that bypassed the re-prefill.
    pub bypass_hits: u64,
    /// Bypass misses by reason.
    pub bypass_misses: BTreeMap<String, u64>,
    /// Snapshot evictions by reason.
    pub snapshot_evictions: BTreeMap<String, u64>,
    /// Double-push warnings.
    pub double_pushes: u64,
    /// Session slots evicted from decode workers.
    pub slot_evictions: u64,
    /// Ledger holdings opened (leases and reservations, both directions).
    pub ledger_opened: u64,
    /// Ledger holdings ended.
    pub ledger_ended: u64,
    /// The end-of-run accounting check passed.
    pub drained: bool,
}

/// TTFT statistics of a set of records.
pub fn ttft_stats<'a>(records: impl Iterator<Item = &'a RequestRecord>) -> (f64, f64, f64) {
    let mut v: Vec<f64> = records.filter_map(|r| r.ttft_ms).collect();
    v.sort_by(|a, b| a.total_cmp(b));
    let mean = if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    };
    (
        round3(percentile(&v, 0.5)),
        round3(percentile(&v, 0.99)),
        round3(mean),
    )
}

impl RunSummary {
    /// Fills the request-derived fields from `records`.
    pub fn fill_from_records(&mut self, records: &[RequestRecord]) {
        let done = || records.iter().filter(|r| r.failed.is_none());
        self.requests = records.len() as u64;
        self.completed = done().count() as u64;
        self.failed = self.requests - self.completed;
        (self.ttft_p50_ms, self.ttft_p99_ms, self.ttft_mean_ms) = ttft_stats(done());
        for r in done() {
            *self
                .modes
                .entry(r.execution_mode.name().to_string())
                .or_default() += 1;
            if let Some(c) = r.reseed_cause {
                *self.reseed_causes.entry(c.to_string()).or_default() += 1;
            }
        }
        let reseeds = done()
            .filter(|r| r.execution_mode == ExecMode::Reseed)
            .count();
        self.reseed_share = if self.completed == 0 {
            0.0
        } else {
            (reseeds as f64 / self.completed as f64 * 1e4).round() / 1e4
        };
        let (p50, p99, _) = ttft_stats(done().filter(|r| r.execution_mode == ExecMode::Reseed));
        self.reseed_ttft_p50_ms = p50;
        self.reseed_ttft_p99_ms = p99;
        self.normal_ttft_p50_ms =
            ttft_stats(done().filter(|r| r.execution_mode != ExecMode::Reseed)).0;
        self.direct_ttft_p50_ms =
            ttft_stats(done().filter(|r| r.execution_mode == ExecMode::Direct)).0;
        self.prefill_tokens = records.iter().map(|r| r.prefill_tokens_computed).sum();
        self.append_tokens = records.iter().map(|r| r.append_tokens_computed).sum();
        let first = records
            .iter()
            .map(|r| r.sent_ms)
            .fold(f64::INFINITY, f64::min);
        let last = done()
            .filter_map(|r| r.e2e_ms.map(|e| r.sent_ms + e))
            .fold(0.0f64, f64::max);
        let span = if first.is_finite() && last > first {
            (last - first) / 1e3
        } else {
            0.0
        };
        self.makespan_s = round3(span);
        if span > 0.0 {
            self.throughput_rps = round3(self.completed as f64 / span);
            let out: u64 = done().map(|r| r.output_tokens).sum();
            self.output_tps = round3(out as f64 / span);
            self.push_gbps = round3(self.push_bytes as f64 / span / 1e9);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
