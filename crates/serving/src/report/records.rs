//! Per-request state the recorder keeps while a request is in flight, and the [`RequestRecord`] it writes when it ends.

use handoff_core::FailureReason;
use handoff_core::{Instant, WorkerId};
use serde::Serialize;

/// A request in flight: what its tokens touch inline, the rest (written at
/// lifecycle transitions, read when it ends) behind a box, so the window of
/// records the per-token path walks stays small. One cache line each
/// (aligned, 48 bytes used): a decode pass touches the records of its whole
/// batch, and a record across two lines cost two misses.
#[derive(Clone, Debug, Default)]
#[repr(align(64))]
pub(super) struct ReqRec {
    pub(super) tok: TokenRec,
    pub(super) cold: Box<ColdRec>,
}

const _: () = assert!(std::mem::size_of::<Option<ReqRec>>() == 64);

/// `Option<Instant>` in 8 bytes: model time never reaches `Instant::MAX`
/// (the engine's "never").
#[derive(Clone, Copy, Debug)]
pub(super) struct Stamp(u64);

impl Default for Stamp {
    fn default() -> Self {
        Stamp(u64::MAX)
    }
}

impl Stamp {
    pub(super) fn get(self) -> Option<Instant> {
        (self.0 != u64::MAX).then_some(Instant(self.0))
    }

    pub(super) fn of(t: Option<Instant>) -> Self {
        Stamp(t.map_or(u64::MAX, |t| t.0))
    }
}

/// `Option<WorkerId>` in 4 bytes (no worker id is `u32::MAX`: ids are
/// positions in a pool list).
#[derive(Clone, Copy, Debug)]
pub(super) struct WorkerSlot(u32);

impl Default for WorkerSlot {
    fn default() -> Self {
        WorkerSlot(u32::MAX)
    }
}

impl WorkerSlot {
    pub(super) fn get(self) -> Option<WorkerId> {
        (self.0 != u32::MAX).then_some(WorkerId(self.0))
    }
}

/// What every output token touches (one update per request per pass),
/// packed: see [`ReqRec`].
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct TokenRec {
    pub(super) first: Stamp,
    pub(super) second: Stamp,
    pub(super) last: Stamp,
    pub(super) tokens: u64,
    pub(super) decode_worker: WorkerSlot,
    pub(super) prefill_worker: WorkerSlot,
}

impl TokenRec {
    pub(super) fn first(&self) -> Option<Instant> {
        self.first.get()
    }

    pub(super) fn second(&self) -> Option<Instant> {
        self.second.get()
    }

    pub(super) fn last(&self) -> Option<Instant> {
        self.last.get()
    }

    pub(super) fn set_first(&mut self, t: Option<Instant>) {
        self.first = Stamp::of(t);
    }

    pub(super) fn set_second(&mut self, t: Option<Instant>) {
        self.second = Stamp::of(t);
    }

    pub(super) fn set_last(&mut self, t: Option<Instant>) {
        self.last = Stamp::of(t);
    }

    pub(super) fn decode_worker(&self) -> Option<WorkerId> {
        self.decode_worker.get()
    }

    pub(super) fn prefill_worker(&self) -> Option<WorkerId> {
        self.prefill_worker.get()
    }

    pub(super) fn set_decode_worker(&mut self, w: WorkerId) {
        self.decode_worker = WorkerSlot(w.0);
    }

    pub(super) fn set_prefill_worker(&mut self, w: WorkerId) {
        self.prefill_worker = WorkerSlot(w.0);
    }

    /// The prefill worker, unless one is already known.
    pub(super) fn note_prefill_worker(&mut self, w: WorkerId) {
        if self.prefill_worker().is_none() {
            self.set_prefill_worker(w);
        }
    }
}

/// A request's arrival and handoff milestones.
#[derive(Clone, Debug, Default)]
pub(super) struct ColdRec {
    pub(super) arrival: Instant,
    pub(super) input: u32,
    pub(super) pinned_at: Option<Instant>,
    pub(super) routed_at: Option<Instant>,
    pub(super) reserved_at: Option<Instant>,
    pub(super) transfer_start: Option<Instant>,
    pub(super) transfer_end: Option<Instant>,
    pub(super) activated_at: Option<Instant>,
    pub(super) released_at: Option<Instant>,
    pub(super) stale_kv: Option<super::StaleKv>,
    pub(super) session: Option<crate::session_log::SessionFields>,
    pub(super) lora: Option<String>,
}

/// How one request ended, as `--per-request-jsonl` writes it: one JSON
/// object per request, in the order requests ended (times in ms of model
/// time; latencies absent when the request never got that far).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RequestRecord {
    /// Request id (the trace's record index).
    pub id: u64,
    /// `completed` or `failed`.
    pub outcome: &'static str,
    /// Why it failed (`lease-expired`, `worker-lost`, `unfinished`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<FailureReason>,
    /// Arrival, ms.
    pub arrival_ms: f64,
    /// When it ended (completion or failure), ms.
    pub end_ms: f64,
    /// Prompt tokens.
    pub input_tokens: u32,
    /// The LoRA adapter it ran on (absent on the base model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora_name: Option<String>,
    /// Output tokens produced.
    pub output_tokens: u64,
    /// Time to first token, ms.
    pub ttft_ms: Option<f64>,
    /// First to second token, ms.
    pub ttst_ms: Option<f64>,
    /// Mean time per output token after the first, ms.
    pub tpot_ms: Option<f64>,
    /// Arrival to completion, ms (completed requests only).
    pub e2e_ms: Option<f64>,
    /// The prefill (or aggregated) worker that computed its prompt.
    pub prefill_worker: Option<u32>,
    /// Its data-parallel rank (only with `--dp-size` above 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill_dp_rank: Option<u16>,
    /// The decode worker that produced its tokens.
    pub decode_worker: Option<u32>,
    /// Its data-parallel rank (only with `--dp-size` above 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_dp_rank: Option<u16>,
    /// Handoff phase times, ms of model time (absent when the request had
    /// no handoff or never reached the phase).
    pub handoff: HandoffTimes,
    /// Its destination read source KV already released: `reused` (a block
    /// had gone to another request) or `not-reused` (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale_kv: Option<super::StaleKv>,
    /// Session fields (session runs only; seed 002 §6).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub session: Option<crate::session_log::SessionFields>,
    /// Whether it met each `--slo` target (only with `--slo`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo: Option<super::slo::SloVerdicts>,
}

/// When one request's handoff reached each phase, ms of model time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct HandoffTimes {
    /// The prefill completed and its KV pinned.
    pub pinned_ms: Option<f64>,
    /// The decode side was routed.
    pub routed_ms: Option<f64>,
    /// The destination reserved its blocks.
    pub reserved_ms: Option<f64>,
    /// The KV transfer started.
    pub transfer_start_ms: Option<f64>,
    /// The KV transfer completed.
    pub transfer_end_ms: Option<f64>,
    /// The destination activated (decode may run).
    pub activated_ms: Option<f64>,
    /// The source released its pinned KV.
    pub source_released_ms: Option<f64>,
    /// Pinned to released: how long the source KV was stranded, ms.
    pub source_pinned_for_ms: Option<f64>,
}

/// Where each finished request's [`RequestRecord`] goes.
pub type RequestSink = Box<dyn FnMut(&RequestRecord)>;
