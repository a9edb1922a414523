//! [`Serving`] as the engine's [`Director`]: arrivals, routing each worker event through the frontend, and the fate of requests on losses.

use super::*;

impl<I: Iterator<Item = TraceItem>> Director for Serving<I> {
    /// A pass's shape and tokens reach only the recorder, which adds them
    /// up per worker and per request (no order between workers shows),
    /// except on an aggregated worker, whose first tokens end its prefill
    /// load in the frontend. KV events reach the router, whose per-worker
    /// indexes do not depend on the order between workers and are read
    /// only when routing, at events; but a KV sink sees their order.
    fn quiet_events(&self, w: WorkerId) -> handoff_engine::QuietEvents {
        use handoff_engine::QuietEvents;
        // An aggregated worker's first tokens end a prefill load in the
        // router (`Frontend::on_event`); its other tokens only the recorder
        // reads, as a decode worker's.
        match (self.pool(w), self.kv_sink.is_some()) {
            (Pool::Aggregated, true) => QuietEvents::LaterTokens,
            (Pool::Aggregated, false) => QuietEvents::LaterTokensAndKv,
            (_, true) => QuietEvents::Pass,
            (_, false) => QuietEvents::PassAndKv,
        }
    }

    fn next_arrival(&mut self) -> Option<Instant> {
        if let Some(lp) = self.sessions.as_ref() {
            return lp.due.keys().next().map(|&(t, _)| t.max(self.now));
        }
        if let Some(n) = self.concurrency {
            if self.in_flight() >= n {
                return None;
            }
        }
        if self.next.is_none() {
            self.next = self.workload.next();
        }
        match self.concurrency {
            Some(_) => self.next.as_ref().map(|_| self.now),
            None => self.next.as_ref().map(|i| i.request.arrival),
        }
    }

    fn arrive(&mut self, now: Instant, out: &mut Vec<Route>) {
        self.now = now;
        let next = match self.sessions.as_mut() {
            Some(lp) => match lp.due.pop_first() {
                Some((_, Due::Turn(item))) => {
                    if let Some(s) = item.request.session {
                        lp.of_request
                            .insert(item.request.id, (s, item.turn.unwrap_or(0)));
                    }
                    Some(*item)
                }
                Some((_, Due::Close(s))) => {
                    for (to, request) in self.frontend.close_session(s) {
                        out.push(Route {
                            to,
                            request,
                            delay: handoff_core::Duration::ZERO,
                        });
                    }
                    return;
                }
                None => None,
            },
            None => self.next.take(),
        };
        let Some(mut item) = next else {
            return;
        };
        if self.concurrency.is_some() || self.sessions.is_some() {
            item.request.arrival = now;
        }
        if let Some(rec) = self.rec.as_mut() {
            rec.arrival(&item.request);
        }
        let rid = item.request.id;
        self.flights.insert(
            rid,
            Flight {
                request: item.request.clone(),
                holder: WorkerId(u32::MAX),
                attempt: None,
                migrated: false,
                has_destination: false,
                destination_active: false,
                roles: Vec::new(),
                local: false,
            },
        );
        let session = item.request.session;
        let routes = self.frontend.arrive(item.request, now);
        let delay = match (self.sessions.as_ref(), self.frontend.last_session_route()) {
            (Some(lp), Some(route)) if session.is_some() => lp.overheads.delay(route),
            _ => handoff_core::Duration::ZERO,
        };
        if let (Some(log), Some(s), Some(route)) = (
            self.session_log.as_mut(),
            session,
            self.frontend.last_session_route(),
        ) {
            log.routed(rid, s, route);
            if let (Some(rec), Some(f)) = (self.rec.as_mut(), log.fields(rid)) {
                rec.set_session(rid, f);
            }
        }
        if routes.is_empty() {
            return self.fail(rid, FailureReason::NoWorker, None);
        }
        for (to, request) in routes {
            self.track(to, &request);
            out.push(Route { to, request, delay });
        }
    }

    fn on_event(&mut self, w: WorkerId, e: &WorkerEvent, now: Instant, out: &mut Vec<Route>) {
        self.now = now;
        let pool = self.pool(w);
        // Most events are a pass's shape and tokens: only the recorder reads
        // them (the frontend reads an aggregated worker's first tokens, which
        // end its prefill load), and they belong to no attempt, so none is
        // stale or a push.
        let pass_only = match e {
            WorkerEvent::Step { .. } => true,
            WorkerEvent::Tokens { .. } => pool != Pool::Aggregated,
            _ => false,
        };
        if pass_only {
            if let Some(rec) = self.rec.as_mut() {
                rec.event(w, pool, e, false);
            }
            if pool == Pool::Prefill {
                self.local_event(w, e);
            }
            return;
        }
        if let (Some(sink), WorkerEvent::Kv { event, at }) = (self.kv_sink.as_mut(), e) {
            sink.event(w, event, *at);
        }
        if let (Some(t), WorkerEvent::Transition(tr)) = (self.transcript.as_mut(), e) {
            t.record(tr);
        }
        if self.push_event(e) {
            // A D→P push (a reversed handoff) serves no client request: it
            // is in the transcript and the session log, not in the request
            // figures, and its end decides no request's fate.
            let routed = self.frontend.on_event(w, pool, e, now);
            out.extend(
                routed
                    .into_iter()
                    .map(|(to, request, delay)| Route { to, request, delay }),
            );
            return;
        }
        let stale = self.stale(e);
        if let (Some(log), WorkerEvent::Session { event, at }) = (self.session_log.as_mut(), e) {
            log.event(w, event, *at);
            if let handoff_core::session::SessionEvent::BypassHit { request, .. } = event {
                if let (Some(rec), Some(f)) = (self.rec.as_mut(), log.fields(*request)) {
                    rec.set_session(*request, f);
                }
            }
        }
        if let Some(rec) = self.rec.as_mut() {
            rec.event(w, pool, e, stale);
        }
        if let WorkerEvent::RoleEnded {
            id,
            reason: Some(reason),
            ..
        } = e
        {
            self.unwinds.role_ended(w, *id, *reason);
        }
        if pool == Pool::Prefill {
            self.local_event(w, e);
        }
        match e {
            WorkerEvent::StartTransfer {
                id, request, at, ..
            } => return self.transfer_started(*id, *request, *at),
            WorkerEvent::RequestFinished { request, .. }
                if pool != Pool::Prefill || self.is_local(*request) =>
            {
                self.request_finished(w, *request, now, out);
            }
            WorkerEvent::Transition(t)
                if !stale && t.to == RoleState::Destination(DestinationState::Active) =>
            {
                // Activated: it is ordinary decode work on that worker now.
                if let Some(f) = self.flights.get_mut(&t.request) {
                    f.holder = t.worker;
                    f.destination_active = true;
                }
            }
            WorkerEvent::RoleEnded {
                id,
                request,
                role,
                reason,
                ..
            } if !stale => {
                let migrated = self.role_ended(w, *id, *request, *role, *reason, now, out);
                if migrated {
                    return;
                }
            }
            _ => {}
        }
        if stale {
            return;
        }
        let routed = self.frontend.on_event(w, pool, e, now);
        // Most events route nothing (a pass's tokens, a KV event).
        for (to, request, delay) in routed {
            if self.drop_cancelled(to, &request) {
                continue;
            }
            self.track(to, &request);
            out.push(Route { to, request, delay });
        }
        if let WorkerEvent::RoleEnded {
            request,
            role: handoff_core::Role::Destination,
            reason: Some(handoff_core::CancelReason::KvLoadFailed),
            ..
        } = e
        {
            self.recompute(w, *request, now, out);
        }
    }

    /// A worker refused a request. One its core can never serve (a direct
    /// session turn larger than the decode pool) fails as `unsupported`,
    /// the reason a handoff gets when its destination cannot reserve it at
    /// all; its booking on `w` is released. Any other refusal is counted.
    fn on_refused(&mut self, w: WorkerId, e: RequestError, now: Instant) {
        if let Some(rec) = self.rec.as_mut() {
            rec.refused(e);
        }
        if let RequestError::Unsupported(r) = e {
            if self.flights.contains_key(&r) {
                self.now = now;
                let unsupported = FailureReason::Handoff(handoff_core::CancelReason::Unsupported);
                self.fail(r, unsupported, Some(w));
            }
        }
    }

    fn on_undeliverable(
        &mut self,
        w: WorkerId,
        request: &WorkerRequest,
        why: Undeliverable,
        now: Instant,
        out: &mut Vec<Route>,
    ) {
        self.now = now;
        if let Some(rec) = self.rec.as_mut() {
            rec.undeliverable(why);
        }
        let Some((rid, attempt)) = parts(request) else {
            return;
        };
        let current = self
            .flights
            .get(&rid)
            .is_some_and(|f| attempt.is_none() || f.attempt == attempt);
        if current {
            // Its worker went down while it travelled: the same as a loss.
            self.migrate_or_fail(rid, FailureReason::WorkerDown, now, out, Some(w));
        }
    }

    fn on_transfer_done(&mut self, id: HandoffId, _ok: bool, now: Instant) {
        self.now = now;
        if let Some(rec) = self.rec.as_mut() {
            rec.transfer_done(id, now);
        }
    }

    fn on_worker_down(&mut self, w: WorkerId, now: Instant) {
        self.now = now;
        if let Some(sink) = self.kv_sink.as_mut() {
            sink.worker_down(w);
        }
        self.frontend.worker_lost(w);
        if !self.lost.contains(&w) {
            self.lost.push(w);
        }
    }

    fn on_worker_lost(&mut self, w: WorkerId, now: Instant, out: &mut Vec<Route>) {
        self.on_worker_down(w, now);
        // Every request last routed to `w` moves now: a dead process reports
        // nothing, so waiting for its roles' ends would wait forever (live);
        // the engine's teardown reports that follow are then of a voided
        // attempt. Requests whose roles on `w` were the peers of roles
        // elsewhere end there, when those peers hear of the loss.
        let mut hit: Vec<RequestId> = self
            .flights
            .iter()
            .filter(|(_, f)| f.holder == w)
            .map(|(r, _)| *r)
            .collect();
        // Deterministic order whatever the map's.
        hit.sort_unstable();
        for r in hit {
            self.migrate_or_fail(r, FailureReason::WorkerLost, now, out, Some(w));
        }
    }

    /// The client cancelled `request`: every role of its current attempt
    /// that was routed and has not ended, where it was routed. The request
    /// fails (`client`) now, as the client sees it; each worker then
    /// applies `CancelReason::Client` to its role by the deployment's
    /// `CancelFrees` rule, so a role may keep its KV past the request (a
    /// finished vLLM prefill until its read or lease, a decode until its
    /// load ends) and its bookings come off when it ends. A request with
    /// no handoff attempt (served whole, or recomputing on its decode
    /// worker after a failed load) is not cancelled: it runs to its end.
    fn cancel(&mut self, request: RequestId, now: Instant) -> Vec<(WorkerId, HandoffId)> {
        let Some(f) = self.flights.get(&request) else {
            return Vec::new();
        };
        let roles = f.roles.clone();
        if !roles.is_empty() && f.attempt.is_some() {
            self.now = now;
            self.cancelled.insert(request);
            self.fail(request, CancelReason::Client.into(), None);
        }
        roles
    }

    fn on_worker_back(
        &mut self,
        w: WorkerId,
        _generation: Generation,
        now: Instant,
        out: &mut Vec<Route>,
    ) {
        self.lost.retain(|x| *x != w);
        let pool = self.pool(w);
        for (to, request, delay) in self.frontend.worker_back(w, pool, now) {
            if self.drop_cancelled(to, &request) {
                continue;
            }
            self.track(to, &request);
            out.push(Route { to, request, delay });
        }
    }

    fn on_fleet(&mut self, summary: &handoff_engine::scale::FleetSummary) {
        self.fleet = Some(summary.clone());
    }

    fn on_scale(&mut self, r: &handoff_engine::scale::ScaleRecord) {
        if let Some(rec) = self.rec.as_mut() {
            rec.scale_event(r);
        }
        self.unwinds.scale(r);
        if let handoff_engine::scale::ScaleEvent::Removed { worker, .. } = r.event {
            // Attempts with a role there unwind now, whether or not the
            // removed worker reports its roles' ends.
            for f in self.flights.values() {
                for &(_, id) in f.roles.iter().filter(|(rw, _)| *rw == worker) {
                    self.unwinds.cut(id);
                }
            }
        }
    }

    fn finish(&mut self, end: Instant, finals: &[HostFinal], torn_down: u64, faults: FaultCounts) {
        if let Some(sink) = self.kv_sink.as_mut() {
            sink.finish();
        }
        if let Some(t) = self.transcript.as_mut() {
            for f in finals {
                t.finish_worker(f.worker, f.drained, f.capacity);
            }
        }
        if let Some(mut rec) = self.rec.take() {
            let costs = rec.scale_costs(end);
            rec.unresolved_teardown += torn_down;
            rec.faults = faults;
            let pools = &self.pools;
            let (mut report, details) = rec.finish_detailed(
                end,
                finals.iter().map(|f| {
                    (
                        *f,
                        pools
                            .get(f.worker.0 as usize)
                            .copied()
                            .unwrap_or(Pool::Decode),
                    )
                }),
            );
            report.sessions = self.session_log.as_ref().map(|l| l.summary().clone());
            report.scaling = self.fleet.as_ref().map(|f| {
                crate::report::ScalingReport::new(f, self.fleet_gpus)
                    .with_costs(costs.as_ref(), &self.unwinds)
            });
            self.report = Some(report);
            self.details = details;
        }
    }
}
