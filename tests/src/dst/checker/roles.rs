//! Role, ledger, transfer and KV checks, in each worker's own order.

use super::*;

impl Checker {
    pub(crate) fn transition(&mut self, t: &Transition) {
        let key = (t.id, t.role);
        let w = t.worker;
        self.lease_transition(t);
        let initial = match t.role {
            Role::Source => RoleState::Source(SS::NotStarted),
            Role::Destination => RoleState::Destination(DS::NotRouted),
        };
        let prev = match self.roles.get(&key).copied() {
            Some(r) => r,
            None => {
                if t.from != initial {
                    self.flag(Kind::Transition, || {
                        format!(
                            "{} {:?} on {}: first transition is from {:?}, not {initial:?}",
                            t.id, t.role, w, t.from
                        )
                    });
                }
                if let Some(c) = self.live_roles.get_mut(w.0 as usize) {
                    *c += 1;
                }
                if t.role == Role::Source {
                    self.paths.attempts += 1;
                }
                RoleRec {
                    worker: w,
                    request: t.request,
                    state: initial,
                    ended: false,
                    pinned: 0,
                    reserved: 0,
                    reserved_once: false,
                }
            }
        };
        if released(prev.state) {
            self.flag(Kind::Transition, || {
                format!(
                    "{} {:?} on {}: {:?} after Released",
                    t.id, t.role, w, t.event
                )
            });
            return;
        }
        if prev.worker != w {
            self.flag(Kind::Transition, || {
                format!("{} {:?} moved from {} to {}", t.id, t.role, prev.worker, w)
            });
        }
        if t.from != prev.state {
            self.flag(Kind::Transition, || {
                format!(
                    "{} {:?} on {}: {:?} from {:?} but the role was in {:?}",
                    t.id, t.role, w, t.event, t.from, prev.state
                )
            });
        }
        let mut rec = prev;
        rec.state = t.to;
        rec.pinned += t.delta.pinned;
        rec.reserved += t.delta.reserved;
        if t.event == LifecycleEvent::Destination(DE::Reserved) {
            rec.reserved_once = true;
        }
        match t.event {
            LifecycleEvent::Destination(DE::Unavailable) => self.paths.reservation_waits += 1,
            LifecycleEvent::Source(SE::LeaseRenewed) => self.paths.lease_renewals += 1,
            _ => {}
        }
        let wi = w.0 as usize;
        // Leases and reservations: open on entering a holding state, end on
        // leaving it; the deltas must give back exactly what they took.
        let (was, is) = (holds_lease(t.from), holds_lease(t.to));
        if !was && is {
            if let Err(e) = self.ledger.open(t.id, Holding::SourceLease) {
                self.flag(Kind::Ledger, || e.to_string());
            }
            if let Some(c) = self.open_leases.get_mut(wi) {
                *c += 1;
            }
        } else if was && !is {
            if let Err(e) = self.ledger.end(t.id, Holding::SourceLease) {
                self.flag(Kind::Ledger, || e.to_string());
            }
            if let Some(c) = self.open_leases.get_mut(wi) {
                *c -= 1;
            }
            if rec.pinned != 0 {
                self.flag(Kind::Ledger, || {
                    format!(
                        "{} source lease on {w} ended with pinned deltas summing to {}",
                        t.id, rec.pinned
                    )
                });
            }
        }
        let (was, is) = (holds_reservation(t.from), holds_reservation(t.to));
        if !was && is {
            if let Err(e) = self.ledger.open(t.id, Holding::DestinationReservation) {
                self.flag(Kind::Ledger, || e.to_string());
            }
            if let Some(c) = self.open_reservations.get_mut(wi) {
                *c += 1;
            }
            self.guard_reserved(w, t.id);
        } else if was && !is {
            if let Err(e) = self.ledger.end(t.id, Holding::DestinationReservation) {
                self.flag(Kind::Ledger, || e.to_string());
            }
            if let Some(c) = self.open_reservations.get_mut(wi) {
                *c -= 1;
            }
            if rec.reserved != 0 {
                self.flag(Kind::Ledger, || {
                    format!(
                        "{} reservation on {w} ended with reserved deltas summing to {}",
                        t.id, rec.reserved
                    )
                });
            }
            self.guard_ended(w, t.id, t.to == RoleState::Destination(DS::Active));
        }
        if t.to == RoleState::Destination(DS::Active) {
            self.paths.activations += 1;
            if t.event == LifecycleEvent::Destination(DE::ReceiveCompleted)
                && self.released_early.contains(&t.id)
                && !self.stale_ok.contains(&t.id)
            {
                self.flag(Kind::ReadOfReleasedSource, || {
                    format!(
                        "{} destination on {w} activated from a source released before the read completed",
                        t.id
                    )
                });
            }
        }
        self.roles.insert(key, rec);
    }

    /// Destination `id` on `w` holds a reservation now: its hashes must not
    /// be published until it activates.
    pub(crate) fn guard_reserved(&mut self, w: WorkerId, id: HandoffId) {
        if self.pool(w) != Pool::Decode {
            return;
        }
        let Some(req) = self.dest_requests.get(&id) else {
            return;
        };
        let mut hashes = Vec::new();
        req.block_hashes(self.block_size, &mut hashes);
        if let Some(g) = self.guards.get_mut(w.0 as usize) {
            for h in &hashes {
                *g.pending.entry(*h).or_default() += 1;
            }
        }
        self.dest_hashes.insert(id, hashes);
    }

    /// Destination `id` on `w` left its reservation, activating or not.
    pub(crate) fn guard_ended(&mut self, w: WorkerId, id: HandoffId, activated: bool) {
        let Some(hashes) = self.dest_hashes.remove(&id) else {
            return;
        };
        if let Some(g) = self.guards.get_mut(w.0 as usize) {
            for h in &hashes {
                if let Some(c) = g.pending.get_mut(h) {
                    *c -= 1;
                    if *c == 0 {
                        g.pending.remove(h);
                    }
                }
                if activated {
                    g.allowed.insert(*h);
                }
            }
        }
    }

    pub(crate) fn kv(&mut self, w: WorkerId, data: &KvEventData) {
        let wi = w.0 as usize;
        match data {
            KvEventData::Cleared => {
                if let Some(g) = self.guards.get_mut(wi) {
                    g.allowed.clear();
                }
            }
            KvEventData::Stored { block_hashes, .. } => {
                let Some(g) = self.guards.get(wi) else {
                    return;
                };
                if g.pending.is_empty() {
                    return;
                }
                let bad = block_hashes
                    .iter()
                    .find(|h| g.pending.contains_key(h) && !g.allowed.contains(h))
                    .copied();
                if let Some(h) = bad {
                    let who: Vec<String> = self
                        .dest_hashes
                        .iter()
                        .filter(|(_, hs)| hs.contains(&h))
                        .map(|(id, _)| id.to_string())
                        .collect();
                    self.flag(Kind::StoredBeforeActivation, || {
                        format!(
                            "{w} published block {h:#x} of reserved, not yet active destination(s) {}",
                            who.join(", ")
                        )
                    });
                }
            }
            KvEventData::Removed { .. } => {}
        }
    }

    pub(crate) fn start_transfer(&mut self, id: HandoffId) {
        let n = self.transfers.entry(id).or_default();
        *n += 1;
        if *n > 1 {
            self.flag(Kind::TransferBeforeReservation, || {
                format!("{id}: transfer started twice")
            });
        }
        if self
            .roles
            .get(&(id, Role::Source))
            .is_some_and(|r| released(r.state))
        {
            self.paths.transfers_from_released += 1;
        }
        match self.roles.get(&(id, Role::Destination)).copied() {
            Some(d) if d.reserved_once => {
                if released(d.state) {
                    self.paths.transfers_to_released += 1;
                }
            }
            Some(d) => self.flag(Kind::TransferBeforeReservation, || {
                format!(
                    "{id}: transfer started while its destination on {} is {:?} and never reserved",
                    d.worker, d.state
                )
            }),
            None => self.flag(Kind::TransferBeforeReservation, || {
                format!("{id}: transfer started with no destination role seen")
            }),
        }
    }

    pub(crate) fn role_ended(
        &mut self,
        w: WorkerId,
        id: HandoffId,
        request: RequestId,
        role: Role,
        reason: Option<CancelReason>,
    ) {
        match reason {
            Some(CancelReason::LeaseExpired) => self.paths.lease_expiries += 1,
            Some(CancelReason::ReservationExpired) => self.paths.reservation_expiries += 1,
            Some(CancelReason::Client) => self.paths.client_cancels += 1,
            Some(CancelReason::PeerAborted) => self.paths.peer_aborts += 1,
            Some(CancelReason::PeerLost) => self.paths.peer_lost += 1,
            Some(CancelReason::PeerRestarted) => self.paths.peer_restarted += 1,
            Some(CancelReason::TransferFailed) => self.paths.transfer_failures += 1,
            Some(CancelReason::Unsupported) => self.paths.unsupported += 1,
            Some(CancelReason::Teardown) => self.paths.teardowns += 1,
            Some(CancelReason::KvLoadFailed) => self.paths.kv_load_failures += 1,
            None => {}
        }
        self.lease_ended(id, role, reason);
        match role {
            Role::Source if reason.is_some() => {
                self.released_early.insert(id);
            }
            Role::Destination => {
                self.released_early.remove(&id);
            }
            Role::Source => {}
        }
        let Some(rec) = self.roles.get_mut(&(id, role)) else {
            self.flag(Kind::RoleEnd, || {
                format!("{id} {role:?} on {w} ended but never transitioned")
            });
            return;
        };
        if rec.ended {
            self.flag(Kind::RoleEnd, || {
                format!("{id} {role:?} on {w} ended twice ({reason:?})")
            });
            return;
        }
        rec.ended = true;
        let (state, rw, rr) = (rec.state, rec.worker, rec.request);
        if !released(state) || rw != w || rr != request {
            self.flag(Kind::RoleEnd, || {
                format!(
                    "{id} {role:?} ended on {w} for {request} while in {state:?} on {rw} for {rr}"
                )
            });
        }
        if let Some(c) = self.live_roles.get_mut(rw.0 as usize) {
            *c -= 1;
        }
    }

    // ---------------------------------------------------- around calls
}
