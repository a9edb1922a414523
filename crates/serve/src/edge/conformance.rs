//! The edge's conformance hooks ([`crate::conformance`]): what the engine
//! side sees in both serve modes (a prompt computed on a scheduler, a
//! source's reader and its end), turned into findings by the sans-IO
//! [`Detector`] and noted in the metrics' [`crate::conformance::Ledger`].

use super::Edge;
use crate::conformance::detect::Finding;
use crate::conformance::{ConformanceKind, Detail};
use handoff_core::{
    Backend, CancelReason, HandoffId, Instant, RequestId, Role, RoleState, SourceState,
    WorkerEvent, WorkerId,
};
use handoff_router::Pool;

pub(crate) use crate::conformance::detect::Detector;

impl Edge {
    /// The conformance tally, for what the drivers see themselves (an
    /// unknown prefill engine, an unpaired leg).
    pub(crate) fn ledger(&self) -> &crate::conformance::Ledger {
        self.metrics.conformance()
    }

    /// Scheduler `s` computes request `r`'s prompt (last full block's
    /// hash `last`, arrived `at`): a decode scheduler's or a whole-served
    /// prefill's is noted, with the other pool idle or the same prompt on
    /// the other pool.
    pub(super) fn computed(&mut self, s: WorkerId, r: RequestId, last: Option<u64>, at: Instant) {
        let pool = self.pool(s);
        let whole = pool == Pool::Decode || (pool == Pool::Prefill && self.local.contains(&r));
        let mut found = self.detector.computed(s, pool, last, at);
        let other = match pool {
            Pool::Decode => Some(Pool::Prefill),
            Pool::Prefill => Some(Pool::Decode),
            Pool::Aggregated => None,
        };
        let ledger = self.metrics.conformance();
        if let Some(other) = other.filter(|o| whole && ledger.pool_idle(*o)) {
            found.push((ConformanceKind::IdlePool, Detail::IdlePool(other)));
        }
        self.note_all(s, Some(r), found);
    }

    /// A source's reader and end (vLLM: SGLang's prefill has no lease).
    pub(super) fn conformance_event(&mut self, s: WorkerId, e: &WorkerEvent) {
        match e {
            WorkerEvent::Transition(t)
                if t.to == RoleState::Source(SourceState::AwaitingReaderCompletion) =>
            {
                self.detector.reader_began(t.id);
            }
            WorkerEvent::RoleEnded {
                id,
                role: Role::Source,
                request,
                reason,
                ..
            } => self.source_gone(s, *id, *request, *reason),
            _ => {}
        }
    }

    fn source_gone(&mut self, s: WorkerId, id: HandoffId, r: RequestId, why: Option<CancelReason>) {
        let vllm = self.metrics.conformance().backend() == Backend::Vllm;
        let expired = vllm && why == Some(CancelReason::LeaseExpired);
        if let Some(f) = self.detector.source_ended(id, expired) {
            self.note_all(s, Some(r), vec![f]);
        }
    }

    fn note_all(&self, s: WorkerId, r: Option<RequestId>, found: Vec<Finding>) {
        let ledger = self.metrics.conformance();
        for (kind, detail) in found {
            ledger.note(kind, Some(s.0), r.map(|r| r.0), detail);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::conformance::ConformanceKind;
    use crate::edge::kv::KvOut;
    use crate::edge::Edge;
    use crate::metrics::Metrics;
    use handoff_core::{
        Backend, CancelReason, HandoffId, Instant, RequestId, Role, WorkerEvent, WorkerId,
    };
    use handoff_router::Pool;
    use std::sync::Arc;

    fn edge(backend: Backend) -> (Edge, Arc<Metrics>) {
        let pools = vec![Pool::Prefill, Pool::Decode];
        let m = Arc::new(Metrics::new(backend, "m", &pools));
        (Edge::new(pools, m.clone(), KvOut::new(2, 16)), m)
    }

    fn open(e: &mut Edge, id: u64) {
        let tokens: Vec<u32> = (0..40).collect();
        let r = crate::openai::prompt::request_for(RequestId(id), &tokens, 8, 16, Instant::ZERO);
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        e.open(&r, &tokens, tx);
    }

    #[test]
    fn a_plain_request_on_both_pools_is_a_decode_without_params_and_a_duplicate() {
        let (mut e, m) = edge(Backend::Vllm);
        let l = m.conformance();
        l.load(0, Pool::Prefill, false);
        open(&mut e, 1);
        e.serve_whole(RequestId(1));
        e.started(WorkerId(0), RequestId(1));
        assert_eq!(l.count(ConformanceKind::DecodeWithoutParams), 0);
        assert_eq!(l.count(ConformanceKind::IdlePool), 0, "no decode reported");
        open(&mut e, 2);
        e.started(WorkerId(1), RequestId(2));
        assert_eq!(l.count(ConformanceKind::DecodeWithoutParams), 1);
        assert_eq!(l.count(ConformanceKind::DuplicatePrefill), 1);
        assert_eq!(
            l.count(ConformanceKind::IdlePool),
            1,
            "the prefill pool idles"
        );
    }

    #[test]
    fn a_pd_prefill_is_not_noted() {
        let (mut e, m) = edge(Backend::Vllm);
        m.conformance().load(1, Pool::Decode, false);
        open(&mut e, 1);
        e.started(WorkerId(0), RequestId(1));
        let j = m.conformance().json();
        for k in ConformanceKind::ALL {
            assert_eq!(j["kinds"][k.name()]["count"], 0, "{}", k.name());
        }
    }

    fn ended(id: u128, reason: Option<CancelReason>) -> WorkerEvent {
        WorkerEvent::RoleEnded {
            id: HandoffId(id),
            role: Role::Source,
            request: RequestId(id as u64),
            reason,
            at: Instant::ZERO,
        }
    }

    #[test]
    fn a_vllm_lease_expiry_is_noted_and_an_sglang_source_end_is_not() {
        let (mut e, m) = edge(Backend::Vllm);
        e.observe(
            WorkerId(0),
            &ended(3, Some(CancelReason::LeaseExpired)),
            Instant::ZERO,
        );
        e.observe(WorkerId(0), &ended(4, None), Instant::ZERO);
        assert_eq!(
            m.conformance().count(ConformanceKind::LeaseExpiredUnread),
            1
        );
        let (mut e, m) = edge(Backend::Sglang);
        e.observe(
            WorkerId(0),
            &ended(3, Some(CancelReason::LeaseExpired)),
            Instant::ZERO,
        );
        assert_eq!(
            m.conformance().count(ConformanceKind::LeaseExpiredUnread),
            0
        );
    }
}
