//! Requests a proxy or an external router places itself: vLLM's
//! `kv_transfer_params` proxy flow and SGLang's bootstrap-room pairs. The
//! proxy, not the frontend's routers, picks the workers; each is booked
//! where it was sent.

use super::*;

/// Per-worker HTTP behind a disaggregation proxy (vLLM's
/// `kv_transfer_params`, SGLang's bootstrap rooms): the proxy, not the
/// routers, picks both workers.
impl Frontend {
    /// A proxy sent `request` to worker `w` itself. Aggregated, `w` serves
    /// it whole (an ordinary request). Disaggregated source-first or push,
    /// the request came with `do_remote_decode` (vLLM `NixlConnector` or
    /// `NixlPushConnector`): `w`
    /// is its prefill worker and its source role is returned. Its decode
    /// is not held here (the pin routes nothing): the proxy sends it later
    /// to a worker it picks, through [`Frontend::route_destination_to`].
    /// Either way it is booked on `w`, the router's choice bypassed.
    /// `None` for other orderings or when `w` is not a selectable worker
    /// of the first pool.
    pub fn arrive_at(
        &mut self,
        request: Request,
        w: WorkerId,
        now: Instant,
    ) -> Option<(WorkerId, WorkerRequest)> {
        if self.aggregated {
            self.prefill.book(w, &request, now)?;
            return Some((w, WorkerRequest::Ordinary(request)));
        }
        if !self.policy.prefill_at_arrival() {
            return None;
        }
        self.prefill.book(w, &request, now)?;
        let id = self.ids.next_id();
        Some((w, WorkerRequest::HandoffSource { id, request }))
    }

    /// A proxy sent `request` to worker `w` of a disaggregated
    /// source-first (vLLM) deployment without `kv_transfer_params`: `w`
    /// serves it as an ordinary request, whatever its pool, booked on its
    /// pool's router (the routers' choice bypassed). So does a vLLM worker
    /// running the NIXL connector: a request without remote params loads
    /// nothing and frees its blocks when it finishes
    /// (`vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py`,
    /// `NixlConnectorScheduler.get_num_new_matched_tokens` and
    /// `request_finished`); smg's PD passthrough sends exactly that. Its
    /// `RequestFinished` releases the booking, on a prefill worker as in the
    /// disabled ordering (nothing is held for a decode). `None` for an
    /// aggregated deployment ([`Frontend::arrive_at`] serves those), another
    /// ordering, or when `w` is not a selectable worker of either pool.
    pub fn arrive_local(
        &mut self,
        request: Request,
        w: WorkerId,
        now: Instant,
    ) -> Option<(WorkerId, WorkerRequest)> {
        if self.aggregated || !self.policy.prefill_at_arrival() {
            return None;
        }
        if self.prefill.workers().any(|x| x == w) {
            self.prefill.book(w, &request, now)?;
        } else {
            self.decode.as_mut()?.book(w, &request, now)?;
        }
        Some((w, WorkerRequest::Ordinary(request)))
    }

    /// SGLang's PD router sent both legs of `request` itself, to prefill
    /// worker `prefill` and decode worker `decode`, and they met in their
    /// bootstrap room: both are booked there, the routers' choice
    /// bypassed, and the two roles are returned as the destination-first
    /// branch of [`Frontend::arrive`] returns them (source on `prefill`,
    /// destination on `decode`, one new handoff id), so the decode
    /// reserves before the prefill runs. `None`, with nothing booked, for
    /// another ordering or when either worker is not selectable in its pool.
    pub fn arrive_pair(
        &mut self,
        request: Request,
        prefill: WorkerId,
        decode: WorkerId,
        now: Instant,
    ) -> Option<Vec<(WorkerId, WorkerRequest)>> {
        if self.aggregated || self.policy != HandoffPolicy::DestinationFirst {
            return None;
        }
        let d = self.decode.as_mut()?;
        d.book(decode, &request, now)?;
        if self.prefill.book(prefill, &request, now).is_none() {
            if let Some(d) = self.decode.as_mut() {
                let _ = d.request_released(request.id);
            }
            return None;
        }
        let id = self.ids.next_id();
        let dest = WorkerRequest::HandoffDestination {
            id,
            request: request.clone(),
            source: prefill,
            ready: None,
        };
        Some(vec![
            (prefill, WorkerRequest::HandoffSource { id, request }),
            (decode, dest),
        ])
    }

    /// The proxy sent the decode of handoff `id` (pinned on `source` as
    /// `ready`) to decode worker `to` with `do_remote_prefill`: it is
    /// booked there and its destination role returned. `None` when `to`
    /// is not a selectable decode worker.
    pub fn route_destination_to(
        &mut self,
        to: WorkerId,
        source: WorkerId,
        id: HandoffId,
        ready: SourceReady,
        request: Request,
        now: Instant,
    ) -> Option<(WorkerId, WorkerRequest)> {
        self.decode.as_mut()?.book(to, &request, now)?;
        Some((
            to,
            WorkerRequest::HandoffDestination {
                id,
                request,
                source,
                ready: Some(ready),
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frontend(policy: HandoffPolicy) -> Frontend {
        let cfg = FrontendConfig {
            policy,
            aggregated: false,
            mode: RouterMode::RoundRobin,
            block_size: 16,
            seed: 1,
            hop: Duration::ZERO,
            disabled_delay: Duration::ZERO,
            kv: crate::KvKnobs::default(),
        };
        let workers = [
            (WorkerId(0), Pool::Prefill),
            (WorkerId(1), Pool::Prefill),
            (WorkerId(2), Pool::Decode),
            (WorkerId(3), Pool::Decode),
        ];
        Frontend::new(cfg, &workers)
    }

    fn request(id: u64) -> Request {
        Request {
            id: RequestId(id),
            prompt_tokens: 100,
            max_output_tokens: 8,
            prefix_hashes: vec![1, 2],
            hash_block_tokens: 16,
            session: None,
            arrival: Instant::ZERO,
            lora: None,
        }
    }

    #[test]
    fn a_pair_books_both_fixed_workers_destination_first() {
        let mut f = frontend(HandoffPolicy::DestinationFirst);
        let routes = f
            .arrive_pair(request(7), WorkerId(1), WorkerId(3), Instant::ZERO)
            .expect("routed");
        let id = match &routes[..] {
            [(WorkerId(1), WorkerRequest::HandoffSource { id, request }), (
                WorkerId(3),
                WorkerRequest::HandoffDestination {
                    id: d,
                    source: WorkerId(1),
                    ready: None,
                    ..
                },
            )] if id == d && request.id == RequestId(7) => *id,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            f.prefill_router().booking(RequestId(7)).map(|b| b.worker),
            Some(WorkerId(1))
        );
        let d = f.decode_router().and_then(|d| d.booking(RequestId(7)));
        assert_eq!(d.map(|b| b.worker), Some(WorkerId(3)));
        // The source's end releases the prefill booking, the decode's
        // finish the decode one, as for a routed request.
        let ended = WorkerEvent::RoleEnded {
            id,
            request: RequestId(7),
            role: Role::Source,
            reason: None,
            at: Instant::ZERO,
        };
        f.on_event(WorkerId(1), Pool::Prefill, &ended, Instant::ZERO);
        let done = WorkerEvent::RequestFinished {
            request: RequestId(7),
            at: Instant::ZERO,
        };
        f.on_event(WorkerId(3), Pool::Decode, &done, Instant::ZERO);
        assert_eq!(f.prefill_router().live_bookings(), 0);
        assert_eq!(f.decode_router().map(|d| d.live_bookings()), Some(0));
    }

    #[test]
    fn a_plain_request_is_ordinary_on_either_pool_and_released_by_its_finish() {
        let mut f = frontend(HandoffPolicy::SourceFirst);
        for (w, pool, rid) in [
            (WorkerId(1), Pool::Prefill, 5),
            (WorkerId(3), Pool::Decode, 6),
        ] {
            match f.arrive_local(request(rid), w, Instant::ZERO) {
                Some((to, WorkerRequest::Ordinary(r))) if to == w && r.id == RequestId(rid) => {}
                other => panic!("{other:?}"),
            }
            let done = WorkerEvent::RequestFinished {
                request: RequestId(rid),
                at: Instant::ZERO,
            };
            // The finish routes nothing on (no decode is held for it).
            assert!(f.on_event(w, pool, &done, Instant::ZERO).is_empty());
        }
        assert_eq!(f.prefill_router().booking(RequestId(5)), None);
        assert_eq!(f.prefill_router().live_bookings(), 0);
        assert_eq!(f.decode_router().map(|d| d.live_bookings()), Some(0));
        // Other orderings, and a worker that is gone, take none.
        let mut d = frontend(HandoffPolicy::DestinationFirst);
        assert!(d
            .arrive_local(request(1), WorkerId(0), Instant::ZERO)
            .is_none());
        f.worker_lost(WorkerId(2));
        assert!(f
            .arrive_local(request(2), WorkerId(2), Instant::ZERO)
            .is_none());
        assert_eq!(f.decode_router().map(|d| d.live_bookings()), Some(0));
    }

    #[test]
    fn a_pair_that_cannot_be_placed_books_nothing() {
        let mut f = frontend(HandoffPolicy::DestinationFirst);
        // Workers of the wrong pool, or one that is gone.
        for (p, d) in [(WorkerId(2), WorkerId(3)), (WorkerId(0), WorkerId(1))] {
            assert!(f.arrive_pair(request(1), p, d, Instant::ZERO).is_none());
        }
        f.worker_lost(WorkerId(0));
        assert!(f
            .arrive_pair(request(1), WorkerId(0), WorkerId(2), Instant::ZERO)
            .is_none());
        assert_eq!(f.prefill_router().live_bookings(), 0);
        assert_eq!(f.decode_router().map(|d| d.live_bookings()), Some(0));
        // Source-first (vLLM) has no rooms.
        let mut v = frontend(HandoffPolicy::SourceFirst);
        assert!(v
            .arrive_pair(request(1), WorkerId(0), WorkerId(2), Instant::ZERO)
            .is_none());
        assert_eq!(v.prefill_router().live_bookings(), 0);
    }
}
