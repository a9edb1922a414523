//! What `/debug/workers` shows and the capacity gauges, from one snapshot:
//! each scheduler's [`HostFinal`] sets its Prometheus gauges
//! ([`Metrics::capacity`]), the rank picker's counts and its row of the
//! view at once, so a scrape of `/metrics` and of `/debug/workers` read the
//! same instant's capacity in both serve modes.

use crate::director::dp_lb::RankPicker;
use crate::metrics::Metrics;
use handoff_core::{HostFinal, KvCapacitySnapshot};
use handoff_router::Pool;
use serde::Serialize;

/// One worker (one rank of it, with `--dp-size` above 1) as
/// `/debug/workers` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct WorkerView {
    /// Worker id.
    pub worker: u32,
    /// The rank, with `--dp-size` above 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dp_rank: Option<u16>,
    /// Requests the rank took from its worker's listener (by
    /// [`RankPicker`]), with `--dp-size` above 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listener_requests: Option<u64>,
    /// prefill, decode or aggregated.
    pub role: &'static str,
    /// Its lifecycle phase (absent, provisioning, ready, draining, gone),
    /// in an elastic deployment (`serve --admin`) only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<&'static str>,
    /// No request, role, step or output held.
    pub drained: bool,
    /// Handoff roles alive.
    pub live_handoffs: u64,
    /// Its capacity snapshot.
    pub capacity: KvCapacitySnapshot,
}

/// How many entries each per-request table of the director and the
/// serving director under it holds (`/debug/workers`' `held`). Every one
/// is keyed by a request, a leg or a handoff in flight and is emptied when
/// it ends, so all are zero once nothing is in flight, however many
/// requests came before: a long run's state does not grow with its count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Held {
    /// HTTP streams open (one per request in flight).
    pub flows: usize,
    /// Arrivals queued and not yet arrived.
    pub arriving: usize,
    /// Per-worker `do_remote_decode` prefills not yet pinned.
    pub proxied: usize,
    /// Pinned prefills waiting for their decode.
    pub parked: usize,
    /// Plain requests served whole on a prefill worker.
    pub local: usize,
    /// Destinations waiting for a reservation.
    pub reserving: usize,
    /// Prompt blocks held for flows in flight (their token ids).
    pub prompt_blocks: usize,
    /// SGLang PD legs waiting in rooms, open prefill legs and rooms whose
    /// pair is in flight.
    pub legs: usize,
    /// Requests the recorder tracks (arrived, not ended).
    pub recorded: usize,
    /// Requests booked on the routers.
    pub router_bookings: usize,
    /// LoRA requests tracked for `vllm:lora_requests_info`.
    pub lora: usize,
}

/// What the engine thread shares with HTTP handlers.
#[derive(Debug, Default, Serialize)]
pub struct EngineView {
    /// Every worker, by id.
    pub workers: Vec<WorkerView>,
    /// Requests the serving director has in flight.
    pub in_flight: usize,
    /// HTTP requests not yet ended.
    pub open_streams: usize,
    /// Every per-request table's size: all zero when nothing is in flight.
    pub held: Held,
    /// Model time reached, in seconds.
    pub model_time_s: f64,
}

/// A pool's name in the view and the metrics' `role` label.
pub(crate) fn role_name(p: Pool) -> &'static str {
    match p {
        Pool::Prefill => "prefill",
        Pool::Decode => "decode",
        Pool::Aggregated => "aggregated",
    }
}

/// Where a scheduler's row is: its index, the worker id it shows, its rank
/// and whether the worker has several.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Row {
    /// The scheduler's index (metrics and picker).
    pub s: usize,
    /// The worker id shown.
    pub worker: u32,
    /// Its rank within the worker.
    pub dp_rank: u16,
    /// The worker has several ranks.
    pub split: bool,
}

/// Scheduler `row.s`'s gauges, picker counts and view row from `f`.
pub(crate) fn worker_row(
    metrics: &Metrics,
    picker: &mut RankPicker,
    row: Row,
    pool: Pool,
    f: &HostFinal,
) -> WorkerView {
    metrics.capacity(row.s, &f.capacity);
    let busy = f.capacity.running_requests + f.capacity.waiting_requests > 0;
    metrics.conformance().load(row.s, pool, busy);
    picker.refresh(row.s, &f.capacity);
    WorkerView {
        worker: row.worker,
        dp_rank: row.split.then_some(row.dp_rank),
        listener_requests: row.split.then(|| picker.taken(row.s)),
        role: role_name(pool),
        phase: None,
        drained: f.drained,
        live_handoffs: f.live_handoffs,
        capacity: f.capacity,
    }
}
