//! What the driver that started a run adds to its configuration: the model
//! it imitates, the workload as it ran, and the flags that run it again.
//! The deployment alone ([`super::ReportConfig::of`]) knows none of these.

use serde::Serialize;

/// The model, GPU and tensor parallelism every worker imitates (absent when
/// the step-time model was given without a model: `--perf` alone).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ModelReport {
    /// The model's short name (`qwen3-8b`).
    pub model: String,
    /// The GPU (`h100`).
    pub gpu: String,
    /// GPUs per worker, tensor-parallel.
    pub tp: u32,
}

/// Where requests came from and how they arrived.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorkloadReport {
    /// The trace file, as the command line named it; absent: the embedded
    /// synthetic workload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// The trace's format (`mooncake`, `azure`); only with a trace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_format: Option<&'static str>,
    /// Synthetic workload: requests generated (after `--limit`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
    /// Synthetic workload: Poisson arrival rate, requests/s (open loop).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_per_s: Option<f64>,
    /// Synthetic workload: the time-varying rate (`--rate-curve`) that
    /// replaces `rate_per_s`, as its text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_curve: Option<String>,
    /// Trace: requests read at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Divisor of every arrival time and think time.
    pub arrival_speedup_ratio: f64,
    /// Closed loop: requests kept in flight (arrival times ignored);
    /// absent: open loop, at the workload's arrival times.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<usize>,
}

/// The driver's part of [`super::ReportConfig`].
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RunReport {
    /// The imitated model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelReport>,
    /// The workload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadReport>,
    /// The command-line flags that shape the run (deployment and workload,
    /// as given, in a fixed order; paths relative to where it started):
    /// `handoff-mocker replay FLAGS` runs it again (`replay --rerun`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
}

impl RunReport {
    /// Whether the driver described nothing.
    pub fn is_empty(&self) -> bool {
        self == &RunReport::default()
    }
}
