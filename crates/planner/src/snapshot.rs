//! What a planner sees and what it answers.

use handoff_core::{Duration, Instant, WorkerId};

/// A pool a planner sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PlannerPool {
    /// Prefill workers.
    Prefill,
    /// Decode workers.
    Decode,
}

/// A worker's phase as a planner sees it (absent and gone workers are not
/// in a snapshot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkerPhase {
    /// Loading the model; counts toward the pool's size, serves nothing.
    Provisioning,
    /// Routable.
    Ready,
    /// Finishing what it holds; routed nothing new.
    Draining,
}

/// One worker of the fleet at the tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerSnapshot {
    /// The worker.
    pub worker: WorkerId,
    /// Its pool.
    pub pool: PlannerPool,
    /// Its phase.
    pub phase: WorkerPhase,
    /// Requests running (in the batch).
    pub running: u64,
    /// Requests waiting in its queue.
    pub waiting: u64,
    /// KV blocks in use.
    pub kv_used_blocks: u64,
    /// KV blocks in all.
    pub kv_total_blocks: u64,
}

impl WorkerSnapshot {
    /// Requests it holds, running and waiting: its load.
    pub fn load(&self) -> u64 {
        self.running.saturating_add(self.waiting)
    }

    /// KV usage in `[0, 1]` (vLLM's `kv_cache_usage_perc`).
    pub fn kv_usage(&self) -> f64 {
        if self.kv_total_blocks == 0 {
            0.0
        } else {
            self.kv_used_blocks as f64 / self.kv_total_blocks as f64
        }
    }
}

/// The traffic of the window since the last tick.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WindowTraffic {
    /// The window's length.
    pub length: Duration,
    /// Requests that arrived.
    pub arrivals: u64,
    /// Their prompt tokens.
    pub input_tokens: u64,
    /// Their requested output tokens.
    pub output_tokens: u64,
    /// Requests that ended (completed or failed).
    pub finished: u64,
    /// Mean TTFT of the requests that completed, ms.
    pub mean_ttft_ms: Option<f64>,
    /// Mean TPOT of the requests that completed, ms.
    pub mean_tpot_ms: Option<f64>,
}

impl WindowTraffic {
    /// Mean prompt length of the arrivals (0 with none).
    pub fn mean_isl(&self) -> f64 {
        if self.arrivals == 0 {
            0.0
        } else {
            self.input_tokens as f64 / self.arrivals as f64
        }
    }

    /// Mean requested output length of the arrivals (0 with none).
    pub fn mean_osl(&self) -> f64 {
        if self.arrivals == 0 {
            0.0
        } else {
            self.output_tokens as f64 / self.arrivals as f64
        }
    }
}

/// The fleet at a tick: deterministic for a deterministic run.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetSnapshot {
    /// Model time of the tick.
    pub now: Instant,
    /// Every provisioning, ready and draining worker, in worker order.
    pub workers: Vec<WorkerSnapshot>,
    /// The last window's traffic.
    pub window: WindowTraffic,
    /// Most workers each pool may have (its ceiling): prefill, decode.
    pub ceiling: [u32; 2],
}

impl FleetSnapshot {
    /// Workers of `pool` in `phase`.
    pub fn count(&self, pool: PlannerPool, phase: WorkerPhase) -> u32 {
        self.workers
            .iter()
            .filter(|w| w.pool == pool && w.phase == phase)
            .count() as u32
    }

    /// Workers of `pool` ready or on their way (provisioning): the size a
    /// target is compared with.
    pub fn size(&self, pool: PlannerPool) -> u32 {
        self.count(pool, WorkerPhase::Ready) + self.count(pool, WorkerPhase::Provisioning)
    }

    /// The ceiling of `pool`.
    pub fn ceiling(&self, pool: PlannerPool) -> u32 {
        match pool {
            PlannerPool::Prefill => self.ceiling[0],
            PlannerPool::Decode => self.ceiling[1],
        }
    }
}

/// A planner's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Prefill workers wanted (ready or provisioning).
    pub prefill_target: u32,
    /// Decode workers wanted.
    pub decode_target: u32,
    /// When to be called again.
    pub next_tick: Instant,
}
