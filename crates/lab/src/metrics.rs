//! The per-run summary the experiment compares, computed from what the one
//! engine reports: the per-request records (with the seed's §6 session
//! fields), the report and its session summary.

use handoff_serving::{Report, RequestRecord};
use serde::Serialize;
use std::collections::BTreeMap;

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

/// A record's execution mode: its session route, or `pd` (naive PD).
pub fn mode_of(r: &RequestRecord) -> &'static str {
    r.session.map_or("pd", |s| s.execution_mode)
}

/// TTFT p50, p99 and mean of a set of records, ms.
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

fn owned(m: &BTreeMap<&'static str, u64>) -> BTreeMap<String, u64> {
    m.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// Everything one run reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RunSummary {
    /// Configuration label (E1, E3, E4, E4-ablate).
    pub label: String,
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
    /// First arrival to last completion, s.
    pub makespan_s: f64,
    /// Completed requests per second.
    pub throughput_rps: f64,
    /// Output tokens per second.
    pub output_tps: f64,
    /// Prompt tokens computed on the prefill worker.
    pub prefill_tokens: u64,
    /// Prompt tokens computed on decode workers (appends).
    pub append_tokens: u64,
    /// Pushes locked for sending (after the K_DELTA throttle; retries too).
    pub pushes_enqueued: u64,
    /// Pushes the prefill worker ingested.
    pub pushes_sent: u64,
    /// Push failures by reason (aborts by a session release included).
    pub push_failures: BTreeMap<String, u64>,
    /// Bytes the landed pushes moved.
    pub push_bytes: u64,
    /// `push_bytes / makespan`, GB/s.
    pub push_gbps: f64,
    /// Reseeds that bypassed the re-prefill.
    pub bypass_hits: u64,
    /// Reseed bypass misses by reason.
    pub bypass_misses: BTreeMap<String, u64>,
    /// Snapshot evictions by reason.
    pub snapshot_evictions: BTreeMap<String, u64>,
    /// Ingests that overlapped another push of the session.
    pub double_pushes: u64,
    /// Decode session slots evicted for room (closes not counted).
    pub slot_evictions: u64,
    /// Every worker ended drained and no request failed.
    pub drained: bool,
}

impl RunSummary {
    /// The summary of one engine run.
    pub fn of(
        label: &str,
        sync: (bool, bool),
        report: &Report,
        records: &[RequestRecord],
        bytes_per_token: u64,
    ) -> RunSummary {
        let done = || records.iter().filter(|r| r.outcome == "completed");
        let mut s = RunSummary {
            label: label.into(),
            d_to_p_sync: sync.0,
            bypass: sync.1,
            requests: report.num_requests,
            completed: report.completed_requests,
            failed: report.failed_requests,
            ..RunSummary::default()
        };
        (s.ttft_p50_ms, s.ttft_p99_ms, s.ttft_mean_ms) = ttft_stats(done());
        for r in done() {
            *s.modes.entry(mode_of(r).to_string()).or_default() += 1;
            if let Some(c) = r.session.and_then(|f| f.reseed_cause) {
                *s.reseed_causes.entry(c.to_string()).or_default() += 1;
            }
        }
        let reseeds = done().filter(|r| mode_of(r) == "reseed").count();
        s.reseed_share = if s.completed == 0 {
            0.0
        } else {
            (reseeds as f64 / s.completed as f64 * 1e4).round() / 1e4
        };
        let (p50, p99, _) = ttft_stats(done().filter(|r| mode_of(r) == "reseed"));
        s.reseed_ttft_p50_ms = p50;
        s.reseed_ttft_p99_ms = p99;
        s.normal_ttft_p50_ms = ttft_stats(done().filter(|r| mode_of(r) != "reseed")).0;
        s.direct_ttft_p50_ms = ttft_stats(done().filter(|r| mode_of(r) == "direct")).0;
        for w in &report.workers {
            match w.pool {
                "prefill" => s.prefill_tokens += w.prefill_tokens,
                _ => s.append_tokens += w.prefill_tokens,
            }
        }
        s.makespan_s = round3(report.duration_s);
        s.throughput_rps = round3(report.request_throughput_rps);
        s.output_tps = round3(report.output_token_throughput_tps);
        if let Some(sum) = &report.sessions {
            s.pushes_enqueued = sum.pushes_enqueued;
            s.pushes_sent = sum.pushes_sent;
            s.push_failures = owned(&sum.pushes_failed);
            if sum.pushes_aborted > 0 {
                s.push_failures
                    .insert("session_released".into(), sum.pushes_aborted);
            }
            s.push_bytes = sum.pushed_tokens * bytes_per_token;
            s.bypass_hits = sum.bypass_hits;
            s.bypass_misses = owned(&sum.bypass_misses);
            s.snapshot_evictions = owned(&sum.snapshot_evictions);
            s.double_pushes = sum.double_pushes;
            s.slot_evictions = sum
                .slot_evictions
                .iter()
                .filter(|(k, _)| **k != "session_close")
                .map(|(_, v)| v)
                .sum();
        }
        if report.duration_s > 0.0 {
            s.push_gbps = round3(s.push_bytes as f64 / report.duration_s / 1e9);
        }
        s.drained = s.failed == 0 && report.workers.iter().all(|w| w.drained);
        s
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
