//! vLLM's NIXL telemetry from the worker events the edge sees
//! ([`crate::metrics::nixl`] holds the series).
//!
//! Which engine reports what, as vLLM's connector worker does
//! (`vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py`):
//!
//! - the scheduler that posted a transfer (its `StartTransfer`: the decode
//!   reading in pull mode, the prefill writing in push mode) times and
//!   counts it when it ends: `_pop_done_transfers` calls `record_transfer`
//!   on a handle found `DONE` — here the role's `ReceiveCompleted` (a
//!   reader) or `ReaderCompleted` (a writer's own transfer), a stale read
//!   included, since NIXL's read itself succeeded; a handle in any other
//!   state goes to `_handle_failed_transfer`, `record_failed_transfer` —
//!   here the posting role ending as `kv-load-failed`, `transfer-failed`
//!   or `peer-lost`. A transfer abandoned by a cancel or a teardown is
//!   neither.
//! - the prefill counts a lease that expired before its reader finished
//!   (`get_finished`'s sweep of `_reqs_to_send`: `record_kv_expired_req`);
//! - the prefill's queue depths are Dynamo's gauges: a source role that
//!   computes is in `_reqs_to_process`; once pinned (`Pinned`,
//!   `AwaitingReaderCompletion`) it is also in `_reqs_to_send`; its end
//!   takes it out of both.
//!
//! What NIXL measures that the mock has no cause for: the post time (the
//! mock posts a transfer at once: 0 s) and failed notifications (a
//! notice the mock's transport drops is lost silently, as a NIXL
//! `send_notif` that does not raise; the counter stays at zero). A
//! transfer's bytes are its tokens times the transfer model's KV bytes per
//! token; its descriptors are its blocks (one registered region: vLLM
//! posts one descriptor per block per region, `_get_block_descs_ids`).
//!
//! Entries live from a transfer's or a source's start to its role's end,
//! which every role reaches exactly once (DEP invariant 8).

use crate::metrics::nixl::XferTelemetry;
use crate::metrics::Metrics;
use handoff_core::fasthash::FastMap;
use handoff_core::{
    CancelReason, DestinationEventKind, HandoffId, Instant, LifecycleEvent, Role, RoleState,
    SourceEventKind, SourceState, WorkerEvent,
};

/// A transfer in flight.
#[derive(Clone, Copy, Debug)]
struct Xfer {
    since: Instant,
    tokens: u64,
    blocks: u64,
}

/// Where a live source role stands in vLLM's two send queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Queue {
    /// Computing: in `_reqs_to_process` only.
    InProcess,
    /// Pinned for a reader: in `_reqs_to_send` as well.
    Pending,
}

/// See the module docs. Keys are (scheduler, attempt): in one process
/// both ends of a handoff report through the same edge.
#[derive(Default)]
pub(crate) struct NixlLoad {
    xfers: FastMap<(usize, HandoffId), Xfer>,
    sources: FastMap<(usize, HandoffId), Queue>,
    /// Per scheduler: (pending sends, in-process).
    depth: Vec<(u64, u64)>,
}

impl NixlLoad {
    /// Entries held (transfers in flight, live source roles).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.xfers.len() + self.sources.len()
    }

    /// Scheduler `s`'s event `e`, into `m`'s NIXL series. Nothing on an
    /// engine without them (SGLang).
    pub(crate) fn observe(&mut self, s: usize, e: &WorkerEvent, m: &Metrics) {
        let Some((series, labels)) = m.nixl(s) else {
            return;
        };
        match e {
            WorkerEvent::StartTransfer {
                id,
                tokens,
                blocks,
                at,
                ..
            } => {
                let x = Xfer {
                    since: *at,
                    tokens: *tokens,
                    blocks: *blocks,
                };
                self.xfers.insert((s, *id), x);
            }
            WorkerEvent::Transition(t) => {
                let done = matches!(
                    t.event,
                    LifecycleEvent::Destination(DestinationEventKind::ReceiveCompleted)
                        | LifecycleEvent::Source(SourceEventKind::ReaderCompleted)
                );
                if done {
                    // A read of no blocks is the notice of a recompute
                    // (`kv_recompute_threshold`): upstream's `_read_blocks`
                    // only sends the notification and records no transfer.
                    if let Some(x) = self.xfers.remove(&(s, t.id)).filter(|x| x.blocks > 0) {
                        let bytes = x.tokens.saturating_mul(series.kv_bytes_per_token());
                        let tel = XferTelemetry {
                            xfer_secs: (t.at - x.since).as_secs_f64(),
                            post_secs: 0.0,
                            bytes,
                            descriptors: x.blocks,
                        };
                        series.transfer(labels, tel);
                    }
                }
                if let RoleState::Source(st) = t.to {
                    let q = match st {
                        SourceState::Computing => Some(Queue::InProcess),
                        SourceState::Pinned | SourceState::AwaitingReaderCompletion => {
                            Some(Queue::Pending)
                        }
                        SourceState::NotStarted | SourceState::Released => None,
                    };
                    self.set_source(s, t.id, q);
                    let (p, i) = self.depth(s);
                    series.sends(labels, p, i);
                }
            }
            WorkerEvent::RoleEnded {
                id, role, reason, ..
            } => {
                if self.xfers.remove(&(s, *id)).is_some()
                    && matches!(
                        reason,
                        Some(
                            CancelReason::KvLoadFailed
                                | CancelReason::TransferFailed
                                | CancelReason::PeerLost
                        )
                    )
                {
                    series.failed_transfer(labels);
                }
                if *role == Role::Source {
                    if *reason == Some(CancelReason::LeaseExpired) {
                        series.kv_expired(labels);
                    }
                    self.set_source(s, *id, None);
                    let (p, i) = self.depth(s);
                    series.sends(labels, p, i);
                }
            }
            _ => {}
        }
    }

    fn depth(&self, s: usize) -> (u64, u64) {
        self.depth.get(s).copied().unwrap_or_default()
    }

    /// Moves source `id` of scheduler `s` to queue `q` (`None`: out of
    /// both), keeping the per-scheduler depths.
    fn set_source(&mut self, s: usize, id: HandoffId, q: Option<Queue>) {
        if self.depth.len() <= s {
            self.depth.resize(s + 1, (0, 0));
        }
        let was = match q {
            Some(q) => self.sources.insert((s, id), q),
            None => self.sources.remove(&(s, id)),
        };
        let d = &mut self.depth[s];
        for (q, sign) in [(was, -1i8), (q, 1)] {
            let Some(q) = q else { continue };
            let step = |x: &mut u64| {
                *x = if sign > 0 {
                    x.saturating_add(1)
                } else {
                    x.saturating_sub(1)
                }
            };
            step(&mut d.1);
            if q == Queue::Pending {
                step(&mut d.0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_core::{
        Backend, DestinationState, OwnershipDelta, RequestId, Transition, WorkerId,
    };
    use handoff_router::Pool;

    fn metrics(backend: Backend) -> Metrics {
        Metrics::new(backend, "m", &[Pool::Prefill, Pool::Decode])
    }

    /// `name`'s sample of scheduler `engine` (-1 when not exported).
    fn sample(m: &Metrics, name: &str, engine: u32) -> f64 {
        super::super::events::tests::sample_of(m, name, engine).unwrap_or(-1.0)
    }

    fn moved(id: u64, role: Role, event: LifecycleEvent, to: RoleState, at: u64) -> WorkerEvent {
        let from = to;
        WorkerEvent::Transition(Transition {
            id: HandoffId(id.into()),
            request: RequestId(id),
            worker: WorkerId(0),
            role,
            event,
            from,
            to,
            delta: OwnershipDelta::default(),
            at: Instant::from_millis(at),
        })
    }

    fn source(id: u64, st: SourceState) -> WorkerEvent {
        let ev = LifecycleEvent::Source(SourceEventKind::PrefillPinned);
        moved(id, Role::Source, ev, RoleState::Source(st), 0)
    }

    fn ended(id: u64, role: Role, reason: Option<CancelReason>) -> WorkerEvent {
        WorkerEvent::RoleEnded {
            id: HandoffId(id.into()),
            request: RequestId(id),
            role,
            reason,
            at: Instant::ZERO,
        }
    }

    fn start(id: u64, tokens: u64, blocks: u64, at: u64) -> WorkerEvent {
        WorkerEvent::StartTransfer {
            id: HandoffId(id.into()),
            request: RequestId(id),
            source: WorkerId(0),
            destination: WorkerId(1),
            tokens,
            blocks,
            at: Instant::from_millis(at),
        }
    }

    #[test]
    fn pending_sends_follow_the_prefills_source_roles() {
        let m = metrics(Backend::Vllm);
        let mut n = NixlLoad::default();
        n.observe(0, &source(1, SourceState::Computing), &m);
        n.observe(0, &source(2, SourceState::Computing), &m);
        assert_eq!(sample(&m, "vllm:nixl_num_in_process_reqs", 0), 2.0);
        assert_eq!(sample(&m, "vllm:nixl_num_pending_sends", 0), 0.0);
        n.observe(0, &source(1, SourceState::Pinned), &m);
        n.observe(0, &source(1, SourceState::AwaitingReaderCompletion), &m);
        assert_eq!(sample(&m, "vllm:nixl_num_pending_sends", 0), 1.0);
        assert_eq!(sample(&m, "vllm:nixl_num_in_process_reqs", 0), 2.0);
        n.observe(
            0,
            &ended(1, Role::Source, Some(CancelReason::LeaseExpired)),
            &m,
        );
        assert_eq!(sample(&m, "vllm:nixl_num_pending_sends", 0), 0.0);
        assert_eq!(sample(&m, "vllm:nixl_num_in_process_reqs", 0), 1.0);
        assert_eq!(sample(&m, "vllm:nixl_num_kv_expired_reqs_total", 0), 1.0);
        n.observe(0, &ended(2, Role::Source, None), &m);
        assert_eq!(sample(&m, "vllm:nixl_num_in_process_reqs", 0), 0.0);
        assert_eq!(n.len(), 0);
    }

    #[test]
    fn the_reader_times_its_transfer_and_counts_a_failed_one() {
        let m = metrics(Backend::Vllm);
        m.set_kv_bytes_per_token(1000);
        let mut n = NixlLoad::default();
        n.observe(1, &start(1, 64, 4, 100), &m);
        let done = LifecycleEvent::Destination(DestinationEventKind::ReceiveCompleted);
        let active = RoleState::Destination(DestinationState::Active);
        n.observe(1, &moved(1, Role::Destination, done, active, 130), &m);
        assert_eq!(sample(&m, "vllm:nixl_xfer_time_seconds_count", 1), 1.0);
        assert!((sample(&m, "vllm:nixl_xfer_time_seconds_sum", 1) - 0.03).abs() < 1e-9);
        assert_eq!(sample(&m, "vllm:nixl_bytes_transferred_sum", 1), 64_000.0);
        assert_eq!(sample(&m, "vllm:nixl_num_descriptors_sum", 1), 4.0);
        assert_eq!(sample(&m, "vllm:nixl_post_time_seconds_count", 1), 1.0);
        // Nothing on the prefill: it posted nothing.
        assert_eq!(sample(&m, "vllm:nixl_xfer_time_seconds_count", 0), -1.0);
        n.observe(1, &start(2, 64, 4, 200), &m);
        n.observe(
            1,
            &ended(2, Role::Destination, Some(CancelReason::KvLoadFailed)),
            &m,
        );
        assert_eq!(sample(&m, "vllm:nixl_num_failed_transfers_total", 1), 1.0);
        // A cancelled load is not a failed transfer.
        n.observe(1, &start(3, 64, 4, 300), &m);
        n.observe(
            1,
            &ended(3, Role::Destination, Some(CancelReason::Client)),
            &m,
        );
        assert_eq!(sample(&m, "vllm:nixl_num_failed_transfers_total", 1), 1.0);
        assert_eq!(sample(&m, "vllm:nixl_xfer_time_seconds_count", 1), 1.0);
        assert_eq!(n.len(), 0);
    }

    #[test]
    fn a_recompute_notice_is_no_transfer() {
        let m = metrics(Backend::Vllm);
        m.set_kv_bytes_per_token(1000);
        let mut n = NixlLoad::default();
        n.observe(1, &start(1, 0, 0, 100), &m);
        let done = LifecycleEvent::Destination(DestinationEventKind::ReceiveCompleted);
        let active = RoleState::Destination(DestinationState::Active);
        n.observe(1, &moved(1, Role::Destination, done, active, 120), &m);
        // Not exported (-1) or at zero: nothing was observed.
        assert!(sample(&m, "vllm:nixl_xfer_time_seconds_count", 1) <= 0.0);
        assert!(sample(&m, "vllm:nixl_bytes_transferred_count", 1) <= 0.0);
        assert_eq!(n.len(), 0);
    }

    #[test]
    fn sglang_engines_have_no_nixl_series() {
        let m = metrics(Backend::Sglang);
        let mut n = NixlLoad::default();
        n.observe(0, &source(1, SourceState::Computing), &m);
        n.observe(1, &start(1, 64, 4, 100), &m);
        assert!(!m.render(None).contains("nixl"));
        assert_eq!(n.len(), 0);
    }
}
