//! Router bookings and request terminal checks, in the director's order.

use super::*;

impl Checker {
    /// The booking state the checker knew before a call, for `r`.
    pub(crate) fn call_of(&self, w: WorkerId, e: &WorkerEvent) -> Option<Call> {
        let pool = self.pool(w);
        let (request, source_end, decode_end, finished) = match e {
            WorkerEvent::RoleEnded {
                request,
                role,
                reason,
                ..
            } => (
                *request,
                *role == Role::Source,
                *role == Role::Destination && reason.is_some(),
                false,
            ),
            WorkerEvent::RequestFinished { request, .. } => {
                let d = pool == Pool::Decode;
                (*request, false, d, d)
            }
            WorkerEvent::PrefillPinned { request, .. } => (*request, false, false, false),
            _ => return None,
        };
        Some(Call::Event {
            request,
            source_end,
            decode_end,
            finished,
        })
    }

    /// What a worker event means for bookings and terminal states, read
    /// before the director sees it ([`Checker::judge_event`] takes it after).
    pub fn event_call(&self, w: WorkerId, e: &WorkerEvent) -> EventCall {
        EventCall(self.call_of(w, e))
    }

    /// An event that means nothing for bookings or terminal states (one of
    /// a voided attempt).
    pub fn event_call_none(&self) -> EventCall {
        EventCall(None)
    }

    /// Judges what the director did with a worker event (see
    /// [`Checker::event_call`]): booking changes and terminal states of its
    /// request, and the routers' totals.
    pub fn judge_event(&mut self, view: &dyn ServingView, call: EventCall) {
        match call.0 {
            Some(c @ Call::Event { request, .. }) => self.after(view, c, &[request]),
            _ => self.after(view, Call::Other, &[]),
        }
    }

    /// The next trace request arrived; `routed` says whether the director
    /// sent it anywhere.
    pub fn arrived(&mut self, view: &dyn ServingView, routed: bool) {
        let Some(r) = self.arrivals.pop_front() else {
            self.flag(Kind::Terminal, || {
                "an arrival beyond the end of the trace".to_string()
            });
            return;
        };
        self.reqs.insert(
            r,
            ReqRec {
                live: true,
                ..ReqRec::default()
            },
        );
        // A request no pool could take fails at once; any other is in flight.
        if routed != view.in_flight(r) {
            self.flag(Kind::Terminal, || {
                format!(
                    "{r} arrived, {} routed, but the report {} it in flight",
                    if routed { "was" } else { "was not" },
                    if routed { "does not count" } else { "counts" }
                )
            });
        }
        self.after(view, Call::Arrive, &[r]);
    }

    /// Judges what a director call changed for `candidates` (bookings and
    /// terminal states), then checks the routers' totals.
    pub(crate) fn after(&mut self, view: &dyn ServingView, call: Call, candidates: &[RequestId]) {
        for &r in candidates {
            self.judge(view, call, r);
        }
        let (pre, dec) = (
            view.live_bookings(Pool::Prefill),
            view.live_bookings(Pool::Decode),
        );
        if pre != self.live_pre || dec != self.live_dec {
            let (lp, ld) = (self.live_pre, self.live_dec);
            self.flag(Kind::Booking, || {
                format!(
                    "routers hold {pre} prefill and {dec} decode bookings, the checker saw {lp} and {ld} ({call:?})"
                )
            });
            self.live_pre = pre;
            self.live_dec = dec;
        }
        if !candidates.is_empty() {
            if let Err(e) = view.audit() {
                self.flag(Kind::Booking, || e);
            }
        }
    }

    pub(crate) fn judge(&mut self, view: &dyn ServingView, call: Call, r: RequestId) {
        let Some(mut rec) = self.reqs.get(&r).copied() else {
            return;
        };
        // Terminal first: a booking released by a loss is justified by the
        // request failing in the same call.
        if rec.live && !view.in_flight(r) {
            rec.live = false;
            match call {
                Call::Event { finished: true, .. } => {
                    rec.finished = true;
                    self.paths.finished += 1;
                }
                _ => {
                    rec.failed = true;
                    rec.cancelled = matches!(call, Call::Cancel);
                    self.paths.failed += 1;
                }
            }
        } else if let Call::Event { finished: true, .. } = call {
            if !rec.live && !rec.cancelled {
                let was = if rec.finished { "finished" } else { "failed" };
                self.flag(Kind::Terminal, || {
                    format!("{r} finished decoding after it had already {was}")
                });
            }
        }
        // The frontend releases a lost worker's bookings (and those of
        // requests that never reached their worker) for requests that failed.
        let lost_worker = match call {
            Call::WorkerLost(w) | Call::Undeliverable(w) if !rec.live => Some(w),
            _ => None,
        };
        let (source_end, decode_end) = match call {
            Call::Event {
                source_end,
                decode_end,
                ..
            } => (source_end, decode_end),
            _ => (false, false),
        };
        // A migrated request's bookings move at the migration, outside the
        // events of either attempt's roles; this per-event provenance model
        // does not follow them (the end-of-run check that no booking is
        // left still does).
        let migrated = view.migrated(r);
        for pool in [Pool::Prefill, Pool::Decode] {
            let on = view.booked(pool, r);
            let now = on.is_some();
            let trigger = if pool == Pool::Prefill {
                source_end
            } else {
                decode_end
            };
            let bk = if pool == Pool::Prefill {
                &mut rec.pre
            } else {
                &mut rec.dec
            };
            let live = if pool == Pool::Prefill {
                &mut self.live_pre
            } else {
                &mut self.live_dec
            };
            if migrated {
                // Follow the router for it, keeping the totals in step.
                if bk.live != now {
                    if now {
                        *live += 1;
                    } else {
                        *live -= 1;
                    }
                    bk.live = now;
                }
                bk.worker = on;
                continue;
            }
            let mut problem: Option<String> = None;
            match (bk.live, now) {
                (false, true) => {
                    bk.booked += 1;
                    bk.live = true;
                    bk.worker = on;
                    *live += 1;
                    if bk.booked > 1 + u8::from(view.migrated(r)) {
                        problem = Some(format!("{r} booked twice in the {pool:?} pool"));
                    }
                }
                (true, false) => {
                    bk.live = false;
                    *live -= 1;
                    if trigger {
                        bk.triggered = true;
                    } else if lost_worker.is_some() && lost_worker == bk.worker {
                        bk.lost = true;
                    } else if view.migrated(r) {
                        // A migration releases every booking of the old
                        // attempt at once.
                    } else {
                        problem = Some(format!(
                            "{r}'s {pool:?} booking released by {call:?}, not by its request's end there"
                        ));
                    }
                }
                (false, false) if trigger && !bk.lost => {
                    problem = Some(if bk.triggered {
                        format!("{r}'s {pool:?} booking released twice (again by {call:?})")
                    } else {
                        format!("{r}: {call:?} releases a {pool:?} booking never made")
                    });
                }
                (true, true) if trigger && !view.migrated(r) => {
                    problem = Some(format!("{r}'s {pool:?} booking still held after {call:?}"));
                }
                _ => {}
            }
            if let Some(p) = problem {
                self.flag(Kind::Booking, || p);
            }
        }
        self.reqs.insert(r, rec);
    }

    pub(crate) fn live_requests(&self) -> Vec<RequestId> {
        self.reqs
            .iter()
            .filter(|(_, r)| r.live || r.pre.live || r.dec.live)
            .map(|(id, _)| *id)
            .collect()
    }

    // ---------------------------------------------------- hosts
}
