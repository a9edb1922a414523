//! vLLM's NIXL connector series, on the vLLM engines that move KV.
//!
//! Names, types, help and buckets after vLLM's
//! `vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py`
//! (`NixlPromMetrics.__init__`; the values it is fed come from
//! `NixlKVConnectorStats.record_transfer`, `record_failed_transfer`,
//! `record_failed_notification`, `record_kv_expired_req`):
//!
//! - `vllm:nixl_xfer_time_seconds`, histogram, buckets 0.005 to 5 s;
//! - `vllm:nixl_post_time_seconds`, histogram, buckets 0.001 to 5 s;
//! - `vllm:nixl_bytes_transferred`, histogram, buckets 2^11 to 2^33 bytes
//!   in powers of 4 ("uniform 2kb to 16gb range");
//! - `vllm:nixl_num_descriptors`, histogram, buckets 10 to 50000;
//! - `vllm:nixl_num_failed_transfers`, `vllm:nixl_num_failed_notifications`,
//!   `vllm:nixl_num_kv_expired_reqs`, counters (exported with `_total`, as
//!   Python's `prometheus_client` writes counters).
//!
//! Dynamo's connector subclass adds two gauges on the prefill side
//! (ai-dynamo/dynamo
//! `components/src/dynamo/vllm/custom_connectors/nixl_with_pending_metrics.py`,
//! `NixlPromMetricsWithPending`): `vllm:nixl_num_pending_sends`
//! (`len(_reqs_to_send)`: finished prefills holding KV for a reader) and
//! `vllm:nixl_num_in_process_reqs` (`len(_reqs_to_process)`: those plus
//! the handoff prefills still computing).
//!
//! Every family carries the engine's usual labels ([`WorkerLabels`]);
//! vLLM's carry `model_name` and `engine` the same way
//! (`create_metric_per_engine`).

use super::WorkerLabels;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering};

/// `NixlPromMetrics`' time buckets; the transfer-time histogram drops the
/// first (`buckets[1:]`).
pub(crate) const TIME_BUCKETS: [f64; 13] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0,
];

/// `NixlPromMetrics`' descriptor-count buckets.
pub(crate) const DESCRIPTOR_BUCKETS: [f64; 14] = [
    10.0, 20.0, 30.0, 50.0, 75.0, 100.0, 200.0, 400.0, 1000.0, 2000.0, 4000.0, 10000.0, 20000.0,
    50000.0,
];

/// KV bytes per token when the transfer model names none (`--transfer
/// fixed`): the mocker's default model's (Qwen3-8B, bf16: 36 layers × 8 KV
/// heads × 128 × 2 × 2), the number `--bytes-per-token` defaults to.
pub const DEFAULT_KV_BYTES_PER_TOKEN: u64 = 131_072;

fn xfer_hist() -> Histogram {
    Histogram::new(TIME_BUCKETS[1..].iter().copied())
}

fn post_hist() -> Histogram {
    Histogram::new(TIME_BUCKETS.iter().copied())
}

/// `[2 ** (10 + i) for i in range(1, 25, 2)]`.
fn bytes_hist() -> Histogram {
    Histogram::new(
        (1..25)
            .step_by(2)
            .map(|i| f64::from(1u32 << 10) * 2f64.powi(i)),
    )
}

fn desc_hist() -> Histogram {
    Histogram::new(DESCRIPTOR_BUCKETS.iter().copied())
}

type Hist = Family<WorkerLabels, Histogram, fn() -> Histogram>;
type Count = Family<WorkerLabels, Counter>;
type IGauge = Family<WorkerLabels, Gauge>;

/// One finished transfer, as NIXL's telemetry reports it
/// (`nixlXferTelemetry`: `xferDuration`, `postDuration`, `totalBytes`,
/// `descCount`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct XferTelemetry {
    /// Seconds from post to done.
    pub xfer_secs: f64,
    /// Seconds posting took.
    pub post_secs: f64,
    /// Bytes moved.
    pub bytes: u64,
    /// Descriptors in the transfer.
    pub descriptors: u64,
}

/// See the module docs.
pub(crate) struct NixlSeries {
    xfer: Hist,
    post: Hist,
    bytes: Hist,
    descriptors: Hist,
    failed_transfers: Count,
    failed_notifications: Count,
    kv_expired: Count,
    pending_sends: IGauge,
    in_process: IGauge,
    /// What one token's KV weighs in a transfer.
    kv_bytes_per_token: AtomicU64,
}

impl NixlSeries {
    pub(crate) fn new() -> Self {
        NixlSeries {
            xfer: Hist::new_with_constructor(xfer_hist as fn() -> Histogram),
            post: Hist::new_with_constructor(post_hist as fn() -> Histogram),
            bytes: Hist::new_with_constructor(bytes_hist as fn() -> Histogram),
            descriptors: Hist::new_with_constructor(desc_hist as fn() -> Histogram),
            failed_transfers: Count::default(),
            failed_notifications: Count::default(),
            kv_expired: Count::default(),
            pending_sends: IGauge::default(),
            in_process: IGauge::default(),
            kv_bytes_per_token: AtomicU64::new(DEFAULT_KV_BYTES_PER_TOKEN),
        }
    }

    /// Registers every family under vLLM's names and help.
    pub(crate) fn register(&self, r: &mut Registry) {
        r.register(
            "vllm:nixl_xfer_time_seconds",
            "Histogram of transfer duration for NIXL KV Cache transfers.",
            self.xfer.clone(),
        );
        r.register(
            "vllm:nixl_post_time_seconds",
            "Histogram of transfer post time for NIXL KV Cache transfers.",
            self.post.clone(),
        );
        r.register(
            "vllm:nixl_bytes_transferred",
            "Histogram of bytes transferred per NIXL KV Cache transfers.",
            self.bytes.clone(),
        );
        r.register(
            "vllm:nixl_num_descriptors",
            "Histogram of number of descriptors per NIXL KV Cache transfers.",
            self.descriptors.clone(),
        );
        r.register(
            "vllm:nixl_num_failed_transfers",
            "Number of failed NIXL KV Cache transfers.",
            self.failed_transfers.clone(),
        );
        r.register(
            "vllm:nixl_num_failed_notifications",
            "Number of failed NIXL KV Cache notifications.",
            self.failed_notifications.clone(),
        );
        r.register(
            "vllm:nixl_num_kv_expired_reqs",
            "Number of requests that had their KV expire. NOTE: This metric is \
             tracked on the P instance.",
            self.kv_expired.clone(),
        );
        r.register(
            "vllm:nixl_num_pending_sends",
            "Current number of finished prefill requests holding KV blocks pending \
             decode-side pull (i.e., in _reqs_to_send). NOTE: This metric is tracked \
             on the P instance.",
            self.pending_sends.clone(),
        );
        r.register(
            "vllm:nixl_num_in_process_reqs",
            "Current number of NIXL-tracked requests on this worker (in-flight \
             transfers + pending-send queue). NOTE: This metric is tracked on the \
             P instance.",
            self.in_process.clone(),
        );
    }

    /// Creates `l`'s series at zero.
    pub(crate) fn touch(&self, l: &WorkerLabels) {
        let _ = self.xfer.get_or_create(l);
        let _ = self.post.get_or_create(l);
        let _ = self.bytes.get_or_create(l);
        let _ = self.descriptors.get_or_create(l);
        let _ = self.failed_transfers.get_or_create(l);
        let _ = self.failed_notifications.get_or_create(l);
        let _ = self.kv_expired.get_or_create(l);
        let _ = self.pending_sends.get_or_create(l);
        let _ = self.in_process.get_or_create(l);
    }

    pub(crate) fn set_kv_bytes_per_token(&self, b: u64) {
        self.kv_bytes_per_token.store(b, Ordering::Relaxed);
    }

    pub(crate) fn kv_bytes_per_token(&self) -> u64 {
        self.kv_bytes_per_token.load(Ordering::Relaxed)
    }

    /// `record_transfer`: one successful transfer.
    pub(crate) fn transfer(&self, l: &WorkerLabels, t: XferTelemetry) {
        self.xfer.get_or_create(l).observe(t.xfer_secs);
        self.post.get_or_create(l).observe(t.post_secs);
        self.bytes.get_or_create(l).observe(t.bytes as f64);
        self.descriptors
            .get_or_create(l)
            .observe(t.descriptors as f64);
    }

    /// `record_failed_transfer`.
    pub(crate) fn failed_transfer(&self, l: &WorkerLabels) {
        self.failed_transfers.get_or_create(l).inc();
    }

    /// `record_kv_expired_req`.
    pub(crate) fn kv_expired(&self, l: &WorkerLabels) {
        self.kv_expired.get_or_create(l).inc();
    }

    /// The prefill side's queue depths now.
    pub(crate) fn sends(&self, l: &WorkerLabels, pending: u64, in_process: u64) {
        let i = |x: u64| i64::try_from(x).unwrap_or(i64::MAX);
        self.pending_sends.get_or_create(l).set(i(pending));
        self.in_process.get_or_create(l).set(i(in_process));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_vllms() {
        let mut r = Registry::default();
        let s = NixlSeries::new();
        s.register(&mut r);
        let l = WorkerLabels {
            model_name: "m".into(),
            engine: "0".into(),
            dp_rank: None,
            role: "decode".into(),
        };
        s.touch(&l);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).expect("encode");
        let les = |name: &str| -> Vec<String> {
            text.lines()
                .filter(|x| x.starts_with(&format!("{name}_bucket{{")))
                .filter_map(|x| x.split("le=\"").nth(1)?.split('"').next().map(String::from))
                .collect()
        };
        let xfer = les("vllm:nixl_xfer_time_seconds");
        assert_eq!(xfer.first().map(String::as_str), Some("0.005"));
        assert_eq!(xfer.len(), 13, "12 bounds and +Inf");
        assert_eq!(les("vllm:nixl_post_time_seconds")[0], "0.001");
        let bytes = les("vllm:nixl_bytes_transferred");
        assert_eq!(bytes[0], "2048.0");
        assert_eq!(bytes[11], "8589934592.0");
        assert_eq!(bytes.len(), 13);
        assert_eq!(les("vllm:nixl_num_descriptors").len(), 15);
        for c in [
            "vllm:nixl_num_failed_transfers_total",
            "vllm:nixl_num_failed_notifications_total",
            "vllm:nixl_num_kv_expired_reqs_total",
        ] {
            assert!(text.contains(&format!("{c}{{")), "{c} missing:\n{text}");
        }
        assert!(text.contains("# TYPE vllm:nixl_num_pending_sends gauge"));
        assert!(text.contains("# TYPE vllm:nixl_num_in_process_reqs gauge"));
    }
}
