//! Requests a disaggregation proxy places itself (per-worker HTTP): booked on the workers it picked, with the recorder and flight tracking.

use super::*;

/// Per-worker HTTP behind a disaggregation proxy: the proxy picks the
/// prefill worker, then (later, maybe never) the decode worker. Kept apart
/// from the routing above so it stays additive.
impl<I: Iterator<Item = TraceItem>> Serving<I> {
    /// A request a proxy placed arrives now: recorded, and in flight with no
    /// role yet (`migrated`: never to be migrated). Returns its id.
    fn placed(
        &mut self,
        request: &Request,
        migrated: bool,
        local: bool,
        now: Instant,
    ) -> RequestId {
        self.now = now;
        if let Some(rec) = self.rec.as_mut() {
            rec.arrival(request);
        }
        self.flights.insert(
            request.id,
            Flight {
                request: request.clone(),
                holder: WorkerId(u32::MAX),
                attempt: None,
                migrated,
                has_destination: false,
                destination_active: false,
                roles: Vec::new(),
                local,
            },
        );
        request.id
    }

    /// Sends placed request `rid`'s roles now, or fails it as `no-worker`
    /// when the frontend could book none (`routes` is `None`). Returns
    /// whether it was routed.
    fn send_placed(
        &mut self,
        rid: RequestId,
        routes: Option<Vec<(WorkerId, WorkerRequest)>>,
        out: &mut Vec<Route>,
    ) -> bool {
        let Some(routes) = routes else {
            self.fail(rid, FailureReason::NoWorker, None);
            return false;
        };
        for (to, r) in routes {
            self.send_now(to, r, out);
        }
        true
    }

    /// Tracks `r` on `to` and delivers it there now.
    pub(super) fn send_now(&mut self, to: WorkerId, r: WorkerRequest, out: &mut Vec<Route>) {
        self.track(to, &r);
        out.push(Route {
            to,
            request: r,
            delay: handoff_core::Duration::ZERO,
        });
    }

    /// `request` arrives now, outside the workload, on worker `w` (router
    /// bypassed, [`Frontend::arrive_at`]): whole on an aggregated worker,
    /// else as the source-first source on prefill worker `w`, whose decode
    /// waits for [`Serving::route_destination_to`]. Until then the request
    /// is in flight with no destination, so a source lease that runs out
    /// fails it (`lease-expired`), as an abandoned vLLM prefill's blocks
    /// are freed when their lease runs out unrenewed. Returns whether
    /// it was routed (else it failed as `no-worker`); the handoff id is
    /// then [`Serving::attempt_of`].
    pub fn arrive_at(
        &mut self,
        request: Request,
        w: WorkerId,
        now: Instant,
        out: &mut Vec<Route>,
    ) -> bool {
        let rid = self.placed(&request, false, false, now);
        let routes = self.frontend.arrive_at(request, w, now).map(|r| vec![r]);
        self.send_placed(rid, routes, out)
    }

    /// `request` arrives now, outside the workload, on worker `w` of a
    /// disaggregated source-first deployment without `kv_transfer_params`
    /// ([`Frontend::arrive_local`]): `w` serves it whole, prefill and
    /// decode, whatever its pool, as vLLM serves a request that names no
    /// remote KV (smg's PD passthrough: a `max_tokens: 1` prefill, then the
    /// plain request on a decode worker). It is never migrated (its flight
    /// counts as migrated already): the proxy picked `w` and retries as it
    /// sees fit. Returns whether it was routed (else it failed as
    /// `no-worker`, with nothing booked).
    pub fn arrive_local(
        &mut self,
        request: Request,
        w: WorkerId,
        now: Instant,
        out: &mut Vec<Route>,
    ) -> bool {
        let rid = self.placed(&request, true, true, now);
        let routes = self.frontend.arrive_local(request, w, now).map(|r| vec![r]);
        self.send_placed(rid, routes, out)
    }

    /// Whether `request` is in flight served whole on a proxy's pick
    /// ([`Serving::arrive_local`]).
    pub(super) fn is_local(&self, request: RequestId) -> bool {
        self.flights.get(&request).is_some_and(|f| f.local)
    }

    /// What the recorder must hear of prefill worker `w`'s event `e` beyond
    /// what [`Recorder::event`] takes from a prefill worker: the tokens and
    /// the finish of requests it serves whole ([`Serving::arrive_local`]),
    /// counted as an aggregated worker's. A disabled ordering's prefill
    /// tokens and finish stay uncounted, as before.
    pub(super) fn local_event(&mut self, w: WorkerId, e: &WorkerEvent) {
        match e {
            WorkerEvent::Tokens { emissions }
                if emissions.iter().any(|e| self.is_local(e.request)) =>
            {
                let mine: Vec<_> = emissions
                    .iter()
                    .filter(|e| self.is_local(e.request))
                    .cloned()
                    .collect();
                if let Some(rec) = self.rec.as_mut() {
                    rec.local_tokens(w, &mine);
                }
            }
            WorkerEvent::RequestFinished { request, at } if self.is_local(*request) => {
                if let Some(rec) = self.rec.as_mut() {
                    rec.local_finished(*request, *at);
                }
            }
            _ => {}
        }
    }

    /// The decode of `request`'s current attempt `id` (pinned on `source`
    /// as `ready`) goes to decode worker `to`, generating
    /// `max_output_tokens`. Returns whether it was routed: `false` when
    /// the request is no longer in flight, `id` is not its current
    /// attempt, it already has a destination, or `to` cannot take it.
    #[allow(clippy::too_many_arguments)]
    pub fn route_destination_to(
        &mut self,
        request: RequestId,
        id: HandoffId,
        source: WorkerId,
        ready: handoff_core::SourceReady,
        to: WorkerId,
        max_output_tokens: u32,
        now: Instant,
        out: &mut Vec<Route>,
    ) -> bool {
        self.now = now;
        let Some(f) = self.flights.get_mut(&request) else {
            return false;
        };
        if f.attempt != Some(id) || f.has_destination {
            return false;
        }
        f.request.max_output_tokens = max_output_tokens;
        let req = f.request.clone();
        let Some((to, r)) = self
            .frontend
            .route_destination_to(to, source, id, ready, req, now)
        else {
            return false;
        };
        self.send_now(to, r, out);
        true
    }

    /// SGLang's PD router sent both legs of `request` itself and they met
    /// in their bootstrap room: it arrives now, outside the workload, as
    /// one destination-first handoff from prefill worker `prefill` to
    /// decode worker `decode` ([`Frontend::arrive_pair`]): the decode
    /// reserves, then the prefill runs and its KV moves. It is never
    /// migrated (its flight counts as migrated already): the workers are
    /// the router's, and SGLang's answer to a lost worker is the router's
    /// retry of the whole request, not a new pair behind its back.
    /// Returns whether it was routed (else it failed as `no-worker`, with
    /// nothing booked).
    pub fn arrive_pair(
        &mut self,
        request: Request,
        prefill: WorkerId,
        decode: WorkerId,
        now: Instant,
        out: &mut Vec<Route>,
    ) -> bool {
        let rid = self.placed(&request, true, false, now);
        let routes = self.frontend.arrive_pair(request, prefill, decode, now);
        self.send_placed(rid, routes, out)
    }
}
