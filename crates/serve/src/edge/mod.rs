//! The engine edge: what lies between HTTP and the engine in both serve
//! modes, once. `HttpDirector` (every worker in one process,
//! `director/`) and `PodDriver` (one engine per process,
//! `pod/`) decide where requests go; everything a client, a
//! scraper or a KV indexer sees of a request passes through an [`Edge`]:
//!
//! - flows, the per-request stream state ([`flows`]): a request's
//!   `StreamMsg`s, its prefix-cache lookup when it is placed, its output
//!   tokens with TTFT, ITL and the token counters, its end with the
//!   failure and success counters and e2e latency, its LoRA adapter's
//!   place in `vllm:lora_requests_info` ([`lora`]);
//! - the worker-event to metric mapping ([`events`]): preemptions, stale
//!   reads, reservation waits, lease and reservation expiries, and vLLM's
//!   NIXL telemetry ([`nixl`]: transfer times, bytes, failures, expired
//!   leases, the prefill's pending sends);
//! - KV-event publishing ([`kv`]: the reorder buffer, each block's token
//!   ids and identity ([`blocks`]), the wire events per scheduler, the
//!   Dynamo JSONL, the ZMQ flush);
//! - the `/debug/workers` view and the capacity gauges ([`view`]);
//! - the conformance hooks ([`conformance`]: prompts computed outside
//!   disaggregation, leases that ran out, by their reader).
//!
//! A scheduler is named by its index among the edge's schedulers
//! (`WorkerId(s)`): a worker's rank in one process, a rank in an engine
//! process; the metrics are labelled by the same index.

pub(crate) mod blocks;
mod conformance;
mod events;
pub(crate) mod flows;
pub(crate) mod kv;
mod lora;
mod nixl;
pub(crate) mod view;

use crate::metrics::Metrics;
use handoff_core::fasthash::{FastMap, FastSet};
use handoff_core::{HandoffId, Instant, RequestId, WorkerId};
use handoff_router::Pool;
use kv::KvOut;
use std::sync::Arc;

pub(crate) use flows::Flow;

/// See the module docs.
pub(crate) struct Edge {
    /// Each scheduler's pool.
    pools: Vec<Pool>,
    metrics: Arc<Metrics>,
    flows: FastMap<RequestId, Flow>,
    /// Flows served whole on a prefill worker (smg's passthrough prefill,
    /// an engine process's plain request): their tokens and finish reach
    /// the client, which a prefill worker's otherwise do not.
    local: FastSet<RequestId>,
    /// The prompt blocks of each pinned prefill, held from its response
    /// until its source role ends: the prefill's `Stored` events may still
    /// wait in the reorder buffer when the pin ends its stream, and must
    /// carry the prompt's token ids.
    pinned: FastMap<RequestId, Vec<u64>>,
    /// LoRA requests in flight, by worker and state.
    lora: lora::LoraLoad,
    /// Destinations waiting for a reservation, since when.
    reserving: FastMap<HandoffId, Instant>,
    /// Transfers in flight and live sources, for the NIXL series.
    nixl: nixl::NixlLoad,
    /// The conformance report's engine-side state.
    detector: conformance::Detector,
    kv: KvOut,
}

/// The sizes of the edge's per-request tables (`/debug/workers`' `held`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct EdgeHeld {
    /// Flows open.
    pub flows: usize,
    /// Flows served whole on a prefill worker.
    pub local: usize,
    /// Destinations waiting for a reservation.
    pub reserving: usize,
    /// Prompt blocks held for flows and pinned prefills.
    pub prompt_blocks: usize,
    /// LoRA requests tracked.
    pub lora: usize,
}

impl Edge {
    /// The edge of schedulers of `pools`, publishing KV events through `kv`.
    pub(crate) fn new(pools: Vec<Pool>, metrics: Arc<Metrics>, kv: KvOut) -> Self {
        Edge {
            pools,
            metrics,
            flows: FastMap::default(),
            local: FastSet::default(),
            pinned: FastMap::default(),
            lora: lora::LoraLoad::default(),
            reserving: FastMap::default(),
            nixl: nixl::NixlLoad::default(),
            detector: conformance::Detector::default(),
            kv,
        }
    }

    /// Scheduler `s`'s pool (decode for one the edge does not know).
    pub(crate) fn pool(&self, s: WorkerId) -> Pool {
        self.pools
            .get(s.0 as usize)
            .copied()
            .unwrap_or(Pool::Decode)
    }

    /// The KV-event channels.
    pub(crate) fn kv(&self) -> &KvOut {
        &self.kv
    }

    /// The KV-event channels, to feed.
    pub(crate) fn kv_mut(&mut self) -> &mut KvOut {
        &mut self.kv
    }

    /// The per-request tables' sizes.
    pub(crate) fn held(&self) -> EdgeHeld {
        EdgeHeld {
            flows: self.flows.len(),
            local: self.local.len(),
            reserving: self.reserving.len(),
            prompt_blocks: self.kv.held_blocks(),
            lora: self.lora.len(),
        }
    }
}
