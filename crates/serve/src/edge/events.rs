//! The worker-event to metric (and stream) mapping, once for both modes.
//!
//! - `Kv`: into the reorder buffer and out on every channel
//!   ([`super::kv`]);
//! - `Tokens`: streamed when the scheduler's tokens reach a client (a
//!   decode or aggregated scheduler's, or a request a prefill scheduler
//!   serves whole); `FirstTokenFromPrefill` likewise, at its own instant
//!   (SGLang's decode streams the token its prefill sampled when the
//!   request joins the decode batch: no pass of its own);
//! - `RequestFinished` under the same rule: e2e latency and one success
//!   on that scheduler; the caller ends the stream;
//! - `Preempted`, `StaleRead`: their counters;
//! - a destination's `Reserving` to `Reserved`: the reservation wait
//!   (vLLM's queue-time histogram, the wait counter);
//! - `RoleEnded`: lease and reservation expiries; a source's end lets its
//!   pinned prompt's blocks go;
//! - on a vLLM engine, every event also through [`super::nixl`] (transfer
//!   starts and ends, source roles: the NIXL series).

use super::Edge;
use handoff_core::{
    CancelReason, DestinationState, Instant, RequestId, Role, RoleState, WorkerEvent, WorkerId,
};
use handoff_router::Pool;

impl Edge {
    /// Whether scheduler `s`'s tokens of `r` reach `r`'s client.
    fn streams(&self, s: WorkerId, r: RequestId) -> bool {
        self.pool(s) != Pool::Prefill || self.local.contains(&r)
    }

    /// Scheduler `s`'s event `e`, seen at `now`. Returns the request whose
    /// stream the event finished: the caller ends it.
    pub(crate) fn observe(
        &mut self,
        s: WorkerId,
        e: &WorkerEvent,
        now: Instant,
    ) -> Option<RequestId> {
        let si = s.0 as usize;
        self.nixl.observe(si, e, &self.metrics);
        self.conformance_event(s, e);
        match e {
            WorkerEvent::Kv { event, at } => self.kv.event(s, event.clone(), *at),
            WorkerEvent::Tokens { emissions } => {
                // A prefill scheduler's tokens reach a client only for a
                // request it serves whole.
                if self.pool(s) == Pool::Prefill && self.local.is_empty() {
                    return None;
                }
                for em in emissions.iter().filter(|e| e.tokens > 0) {
                    if self.streams(s, em.request) {
                        self.stream(si, em.request, em.tokens, now);
                    }
                }
            }
            WorkerEvent::FirstTokenFromPrefill { request, at } if self.streams(s, *request) => {
                self.stream(si, *request, 1, *at)
            }
            WorkerEvent::RequestFinished { request, .. } if self.streams(s, *request) => {
                self.finished_on(si, *request, now);
                return Some(*request);
            }
            WorkerEvent::Preempted { .. } => self.metrics.preempted(si),
            WorkerEvent::StaleRead { reused, .. } => self.metrics.stale_read(si, *reused),
            WorkerEvent::Transition(t) => match t.to {
                RoleState::Destination(DestinationState::Reserving) => {
                    self.reserving.insert(t.id, now);
                }
                RoleState::Destination(st) => {
                    if let Some(since) = self.reserving.remove(&t.id) {
                        if st == DestinationState::Reserved && now > since {
                            let wait = (now - since).as_secs_f64();
                            self.metrics.reservation_wait(si, wait);
                        }
                    }
                }
                _ => {}
            },
            WorkerEvent::RoleEnded {
                id,
                reason,
                role,
                request,
                ..
            } => {
                self.reserving.remove(id);
                if *role == Role::Source {
                    self.source_ended(*request);
                }
                match reason {
                    Some(CancelReason::LeaseExpired) => self.metrics.lease_expired(si),
                    Some(CancelReason::ReservationExpired) => self.metrics.reservation_expired(si),
                    _ => {}
                }
            }
            _ => {}
        }
        None
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::edge::flows::StreamMsg;
    use crate::edge::kv::KvOut;
    use crate::metrics::Metrics;
    use handoff_core::{Backend, TokenEmission};
    use std::sync::Arc;
    use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

    /// A prefill scheduler 0 and a decode scheduler 1.
    fn pd() -> (Edge, Arc<Metrics>) {
        let pools = vec![Pool::Prefill, Pool::Decode];
        let m = Arc::new(Metrics::new(Backend::Vllm, "m", &pools));
        (Edge::new(pools, m.clone(), KvOut::new(2, 16)), m)
    }

    fn open(e: &mut Edge, id: u64) -> UnboundedReceiver<StreamMsg> {
        let tokens: Vec<u32> = (0..40).collect();
        let r = crate::openai::prompt::request_for(RequestId(id), &tokens, 8, 16, Instant::ZERO);
        let (tx, rx) = unbounded_channel();
        e.open(&r, &tokens, tx);
        rx
    }

    fn tokens(id: u64, n: u32) -> WorkerEvent {
        WorkerEvent::Tokens {
            emissions: vec![TokenEmission {
                request: RequestId(id),
                tokens: n,
                first: false,
            }],
        }
    }

    fn finished(id: u64) -> WorkerEvent {
        WorkerEvent::RequestFinished {
            request: RequestId(id),
            at: Instant::ZERO,
        }
    }

    /// `name`'s sample of scheduler `engine`, if it is exported.
    pub(in crate::edge) fn sample_of(m: &Metrics, name: &str, engine: u32) -> Option<f64> {
        let tag = format!("engine=\"{engine}\"");
        m.render(None)
            .lines()
            .find(|l| l.starts_with(&format!("{name}{{")) && l.contains(&tag))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    /// `name`'s sample of scheduler `engine` (0 when not exported).
    fn sample(m: &Metrics, name: &str, engine: u32) -> f64 {
        sample_of(m, name, engine).unwrap_or(0.0)
    }

    #[test]
    fn a_prefill_schedulers_tokens_reach_only_a_request_it_serves_whole() {
        let (mut e, m) = pd();
        let (p, w) = (WorkerId(0), WorkerId(1));
        let mut a = open(&mut e, 1);
        let mut b = open(&mut e, 2);
        e.serve_whole(RequestId(2));
        let now = Instant::ZERO;
        assert_eq!(e.observe(p, &tokens(1, 1), now), None);
        assert_eq!(e.observe(p, &finished(1), now), None);
        assert!(
            a.try_recv().is_err(),
            "a PD prefill's token is not the client's"
        );
        e.observe(p, &tokens(2, 3), now);
        assert_eq!(b.try_recv(), Ok(StreamMsg::Tokens(3)));
        assert_eq!(e.observe(p, &finished(2), now), Some(RequestId(2)));
        e.observe(w, &tokens(1, 4), now);
        assert_eq!(a.try_recv(), Ok(StreamMsg::Tokens(4)));
        assert_eq!(e.observe(w, &finished(1), now), Some(RequestId(1)));
        assert_eq!(sample(&m, "vllm:generation_tokens_total", 0), 3.0);
        assert_eq!(sample(&m, "vllm:generation_tokens_total", 1), 4.0);
        assert_eq!(sample(&m, "vllm:request_success_total", 0), 1.0);
        assert_eq!(sample(&m, "vllm:request_success_total", 1), 1.0);
    }

    #[test]
    fn a_pin_counts_its_token_and_success_and_holds_its_blocks_until_its_source_ends() {
        let (mut e, m) = pd();
        let p = WorkerId(0);
        let _rx = open(&mut e, 1);
        assert_eq!(e.started(p, RequestId(1)), 0);
        assert_eq!(sample(&m, "vllm:prompt_tokens_total", 0), 40.0);
        let held = e.held().prompt_blocks;
        assert_eq!(held, 2);
        e.pinned(p, RequestId(1));
        e.close(RequestId(1), StreamMsg::Finished);
        assert_eq!(sample(&m, "vllm:generation_tokens_total", 0), 1.0);
        assert_eq!(sample(&m, "vllm:request_success_total", 0), 1.0);
        // Closed with a plain finish: nothing pinned, the blocks go.
        assert_eq!(e.held().prompt_blocks, 0);
        let _rx = open(&mut e, 2);
        e.pinned(p, RequestId(2));
        let pin = crate::vllm::kv_transfer::Pinned {
            request: RequestId(2),
            handoff: handoff_core::HandoffId(7),
            engine: crate::vllm::kv_transfer::EngineId {
                at: handoff_core::DpLayout::SINGLE.address(p),
                ranked: false,
            },
            blocks: 2,
            tokens: 40,
            side_port: None,
        };
        e.close(RequestId(2), StreamMsg::Prefilled(pin));
        assert_eq!(e.held().prompt_blocks, 2, "held for the reorder buffer");
        let ended = WorkerEvent::RoleEnded {
            id: handoff_core::HandoffId(7),
            role: Role::Source,
            request: RequestId(2),
            reason: None,
            at: Instant::ZERO,
        };
        e.observe(p, &ended, Instant::ZERO);
        assert_eq!(e.held().prompt_blocks, 0);
    }
}
