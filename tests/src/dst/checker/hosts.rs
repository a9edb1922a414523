//! Checks against the hosts themselves: accounting, quiescence, drained workers, the final report.

use super::*;

impl Checker {
    /// Checks every host after an engine unit, appending what it finds to
    /// `out` (the hosts and the checker are read at once, so the checker is
    /// not borrowed mutably).
    pub fn hosts<S: SchedulerCore>(&self, hosts: &[WorkerHost<S>], out: &mut Vec<Violation>) {
        let now = self.now;
        let mut flag = |kind: Kind, detail: &dyn Fn() -> String| {
            if out.len() < MAX_VIOLATIONS {
                out.push(Violation {
                    kind,
                    at: now,
                    detail: detail(),
                });
            }
        };
        for h in hosts {
            let w = h.id();
            let worker = h.worker();
            let cap = worker.capacity();
            if let Err(e) = check_identity(&cap) {
                flag(Kind::Accounting, &|| format!("{w}: {e}"));
            }
            if let Some(free) = worker.core().free_blocks() {
                let sum = free + cap.cached_blocks + cap.kv_used_blocks();
                if sum != cap.total_blocks {
                    flag(Kind::Accounting, &|| {
                        format!(
                            "{w}: free {free} + cached {} + used {} (active {} + pinned {} + reserved {}) = {sum} != total {}",
                            cap.cached_blocks,
                            cap.kv_used_blocks(),
                            cap.active_blocks,
                            cap.pinned_source_blocks,
                            cap.reserved_destination_blocks,
                            cap.total_blocks
                        )
                    });
                }
            }
            if cap.free_request_slots > cap.total_request_slots {
                flag(Kind::Accounting, &|| {
                    format!(
                        "{w}: {} free request slots of {}",
                        cap.free_request_slots, cap.total_request_slots
                    )
                });
            }
            let wi = w.0 as usize;
            let seen = self.live_roles.get(wi).copied().unwrap_or(0);
            let have = worker.live_handoffs() as i64;
            if seen != have {
                flag(Kind::Ownership, &|| {
                    format!("{w} holds {have} roles, the checker saw {seen} start and not end")
                });
            }
            if self.open_leases.get(wi) == Some(&0) && cap.pinned_source_blocks > 0 {
                flag(Kind::Ownership, &|| {
                    format!(
                        "{w}: {} pinned blocks with no open source lease",
                        cap.pinned_source_blocks
                    )
                });
            }
            if self.open_reservations.get(wi) == Some(&0) && cap.reserved_destination_blocks > 0 {
                flag(Kind::Ownership, &|| {
                    format!(
                        "{w}: {} reserved blocks with no open reservation",
                        cap.reserved_destination_blocks
                    )
                });
            }
        }
    }

    /// Nothing is left to happen: no worker holds a role (one that is up
    /// would hold it until the engine's teardown: it is stuck) or pinned or
    /// reserved blocks without one.
    pub(crate) fn quiescent<S: SchedulerCore>(
        &self,
        hosts: &[WorkerHost<S>],
        up: &[bool],
        out: &mut Vec<Violation>,
    ) {
        let now = self.now;
        let mut flag = |kind: Kind, detail: &dyn Fn() -> String| {
            out.push(Violation {
                kind,
                at: now,
                detail: detail(),
            });
        };
        for h in hosts {
            let w = h.id();
            let worker = h.worker();
            let cap = worker.capacity();
            if worker.live_handoffs() > 0 {
                let state = if up.get(w.0 as usize) == Some(&false) {
                    "is down but"
                } else {
                    "has nothing left to do and"
                };
                flag(Kind::Drained, &|| {
                    format!("{w} {state} holds {} roles", worker.live_handoffs())
                });
            }
            if cap.pinned_source_blocks + cap.reserved_destination_blocks > 0
                && worker.live_handoffs() == 0
            {
                flag(Kind::Drained, &|| {
                    format!(
                        "{w} holds {} pinned and {} reserved blocks and no role at the end",
                        cap.pinned_source_blocks, cap.reserved_destination_blocks
                    )
                });
            }
        }
    }

    /// Appends violations found elsewhere (the host checks), up to the cap.
    pub fn extend(&mut self, found: Vec<Violation>) {
        for v in found {
            if self.violations.len() < MAX_VIOLATIONS {
                self.violations.push(v);
            }
        }
    }

    /// After the engine's teardown: every worker that is up is drained.
    pub(crate) fn drained<S: SchedulerCore>(&mut self, hosts: &[WorkerHost<S>], up: &[bool]) {
        for h in hosts {
            let w = h.id();
            if up.get(w.0 as usize) == Some(&true) && !h.is_drained() {
                let cap = h.worker().capacity();
                self.flag(Kind::Drained, || {
                    format!(
                        "{w} not drained at the end: {} roles, core empty {}, {cap:?}",
                        h.worker().live_handoffs(),
                        h.worker().is_empty()
                    )
                });
            }
        }
    }

    /// The director finished: every role ended, every holding ended, no
    /// booking left, every request terminal once.
    pub(crate) fn finished(&mut self, view: &dyn ServingView, torn_down: u64) {
        if let Some((w, q)) = self.held.iter().enumerate().find(|(_, q)| !q.is_empty()) {
            let n = q.len();
            self.flag(Kind::Transition, || {
                format!("w{w}: {n} held step outputs were never released")
            });
        }
        if let Err(e) = self.ledger.check_drained() {
            self.flag(Kind::Ledger, || e.to_string());
        }
        let mut open: Vec<(HandoffId, Role, RoleRec)> = self
            .roles
            .iter()
            .filter(|(_, r)| !r.ended)
            .map(|((id, role), r)| (*id, *role, *r))
            .collect();
        open.sort_by_key(|(id, role, _)| (*id, *role as u8));
        if let Some((id, role, r)) = open.first().copied() {
            let n = open.len();
            self.flag(Kind::RoleEnd, || {
                format!(
                    "{n} roles never ended, first {id} {role:?} on {} in {:?}",
                    r.worker, r.state
                )
            });
        }
        if self.live_pre + self.live_dec > 0 {
            let (p, d) = (self.live_pre, self.live_dec);
            let who: Vec<String> = self
                .reqs
                .iter()
                .filter(|(_, r)| r.pre.live || r.dec.live)
                .take(4)
                .map(|(id, _)| id.to_string())
                .collect();
            self.flag(Kind::Booking, || {
                format!(
                    "{p} prefill and {d} decode bookings left at the end ({})",
                    who.join(", ")
                )
            });
        }
        let left: Vec<RequestId> = self
            .reqs
            .iter()
            .filter(|(_, r)| r.live)
            .map(|(id, _)| *id)
            .collect();
        if !left.is_empty() && torn_down == 0 {
            let n = left.len();
            let first = left[0];
            self.flag(Kind::Terminal, || {
                format!("{n} requests neither finished nor failed with nothing torn down, first {first}")
            });
        }
        self.paths.failed += left.len() as u64;
        self.paths.torn_down_at_end += torn_down;
        self.paths.out_of_order_kv_events += view.out_of_order_kv_events();
        if !self.arrivals.is_empty() {
            let n = self.arrivals.len();
            self.flag(Kind::Terminal, || {
                format!("{n} trace requests never arrived")
            });
        }
    }
}
