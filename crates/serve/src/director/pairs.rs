//! SGLang's PD flow on the worker listeners: the bootstrap rooms
//! ([`crate::sglang::bootstrap`]) and what each leg of a pair hears.
//!
//! One engine request serves a pair; its id is the decode leg's, so the
//! decode leg's stream is an ordinary flow (tokens, usage, its end). The
//! prefill leg is answered as SGLang's prefill server answers
//! (`disaggregation/prefill.py`, `process_disagg_prefill_inflight_queue`):
//! when the prefill's part is done, i.e. its source role ended normally
//! after the KV was sent, with the one token the prefill sampled; a
//! source that ended early (cancelled, expired, torn down) fails it.
//!
//! A decode leg that comes first and whose prefill resolves (the caller
//! names the prefill scheduler) reserves at once, as SGLang's
//! `DecodePreallocQueue` does (`disaggregation/decode.py`,
//! `pop_preallocated`): its request goes to the engine now, the
//! destination role reserves and arms the reservation deadline (the
//! workers' `reservation_ttl`, SGLang's
//! `SGLANG_DISAGGREGATION_WAITING_TIMEOUT`), and the source role's route is
//! held here until the prefill leg comes. A prefill leg that never comes
//! leaves the reservation to expire: the destination frees it (exactly
//! once, by its role machine) and the decode leg fails with
//! [`BootstrapError::WaitingTimeout`], SGLang's abort.
//!
//! A room serves one pair at a time ([`crate::sglang::bootstrap`]): from
//! the moment its pair forms (or its decode leg reserves early) until the
//! pair's request ends, a leg for it is refused at once
//! ([`BootstrapError::RoomInUse`]; a second leg of the side an early decode
//! already has is [`BootstrapError::DuplicateRoom`]).

use super::{HttpDirector, Pending, StreamMsg};
use crate::sglang::bootstrap::{Arrival, BootstrapError, BootstrapTable, Leg, RoomKey, Side};
use handoff_core::fasthash::FastMap;
use handoff_core::{CancelReason, Duration, FailureReason, Instant, RequestId, WorkerId};
use handoff_engine::Route;
use std::collections::BTreeMap;
use tokio::sync::mpsc::UnboundedSender;

/// What a leg carries besides its prompt.
pub struct LegOut {
    /// Output tokens the request generates (the decode leg's count is
    /// the pair's).
    pub output_tokens: u32,
    /// Where the leg's answer goes.
    pub tx: UnboundedSender<StreamMsg>,
}

/// The open prefill leg of a paired request.
pub(super) struct PrefillLeg {
    /// The leg's own id (its HTTP handler's).
    leg: RequestId,
    tx: UnboundedSender<StreamMsg>,
}

/// A decode leg that reserved before its prefill leg came.
pub(super) struct EarlyDecode {
    /// The pair's request (the decode leg's id).
    request: RequestId,
    /// Its prompt, which the prefill leg must repeat.
    tokens: Vec<u32>,
}

/// The pairs' state inside [`HttpDirector`].
pub(super) struct Pairs {
    rooms: BootstrapTable<LegOut>,
    /// Decode legs that reserved on arrival, still without a prefill leg.
    early: BTreeMap<RoomKey, EarlyDecode>,
    /// The room of each request in `early`.
    early_room: FastMap<RequestId, RoomKey>,
    /// The source routes of early requests, held until the prefill leg.
    held: FastMap<RequestId, Vec<Route>>,
    /// How long a reservation waits for its KV (the workers'
    /// `reservation_ttl`), for the decode leg's error.
    waiting_timeout: Duration,
    /// Paired prefill legs still open, by the pair's request id.
    prefill: handoff_core::fasthash::FastMap<RequestId, PrefillLeg>,
    /// The pair's request id of each open prefill leg, by the leg's id.
    request_of: handoff_core::fasthash::FastMap<RequestId, RequestId>,
}

impl Pairs {
    pub(super) fn new(timeout: handoff_core::Duration) -> Self {
        Pairs {
            rooms: BootstrapTable::new(timeout),
            early: BTreeMap::new(),
            early_room: Default::default(),
            held: Default::default(),
            waiting_timeout: Duration::from_secs(300),
            prefill: Default::default(),
            request_of: Default::default(),
        }
    }

    /// Legs waiting in rooms, decode legs reserved early and prefill legs
    /// still open.
    pub(super) fn open(&self) -> usize {
        self.rooms.len() + self.early.len() + self.prefill.len()
    }

    /// What [`Self::open`] counts plus rooms whose pair is in flight: every
    /// per-leg table, for `/debug/workers`' `held`.
    pub(super) fn held(&self) -> usize {
        self.open() + self.rooms.in_use_len()
    }

    /// Sets the waiting timeout the decode leg's error names.
    pub(super) fn set_waiting_timeout(&mut self, t: Duration) {
        self.waiting_timeout = t;
    }
}

/// How a paired prefill leg ends.
pub(super) enum PrefillEnd {
    /// Its KV was sent: one token, `length`.
    Sent,
    /// It failed.
    Failed(FailureReason),
}

impl HttpDirector {
    /// A leg of room `key` arrived at `now` on `leg.worker`'s listener
    /// (which checked its pool). `prefill` is, for a decode leg, the
    /// prefill scheduler its bootstrap fields resolve to (`None`: it does
    /// not resolve yet, the leg waits for its partner). Returns whether
    /// the engine has a new arrival (it must then be told its arrivals
    /// changed); a refused leg, and a partner failing with it, are
    /// answered here.
    pub fn leg(
        &mut self,
        key: RoomKey,
        leg: Leg<LegOut>,
        now: Instant,
        prefill: Option<WorkerId>,
    ) -> bool {
        if self.pairs.early.contains_key(&key) {
            return self.joins_early(key, leg, now);
        }
        if self.pairs.rooms.in_use(&key) {
            let error = BootstrapError::RoomInUse {
                side: leg.side,
                room: key.room,
            };
            let _ = leg.payload.tx.send(StreamMsg::Bootstrap(error));
            return false;
        }
        if let (Side::Decode, Some(p), None) =
            (leg.side, prefill, self.pairs.rooms.waiting_side(&key))
        {
            self.reserve_early(key, leg, p, now);
            return true;
        }
        match self.pairs.rooms.arrive(key, leg, now) {
            Arrival::Waiting => false,
            Arrival::Refused {
                leg,
                error,
                partner,
            } => {
                for l in std::iter::once(leg).chain(partner) {
                    let _ = l.payload.tx.send(StreamMsg::Bootstrap(error.clone()));
                }
                false
            }
            Arrival::Paired { prefill, decode } => {
                self.submit_pair(prefill, decode, now);
                true
            }
        }
    }

    /// A decode leg reserves before its prefill leg: its request goes to
    /// the engine as a pair with `prefill`, whose source route is held.
    fn reserve_early(
        &mut self,
        key: RoomKey,
        decode: Leg<LegOut>,
        prefill: WorkerId,
        now: Instant,
    ) {
        let (request, worker, tokens) = self.open_decode(decode, now);
        self.pairs.rooms.occupy(key.clone(), request.id);
        self.pairs.early_room.insert(request.id, key.clone());
        self.pairs.early.insert(
            key,
            EarlyDecode {
                request: request.id,
                tokens,
            },
        );
        self.arriving.push_back(Pending::Pair {
            request,
            prefill,
            decode: worker,
            early: true,
        });
    }

    /// A leg came to a room whose decode leg reserved early: a prefill leg
    /// with the same prompt releases the held source; anything else is
    /// refused (the early decode keeps waiting).
    fn joins_early(&mut self, key: RoomKey, leg: Leg<LegOut>, now: Instant) -> bool {
        let refuse = |leg: Leg<LegOut>, error: BootstrapError| {
            let _ = leg.payload.tx.send(StreamMsg::Bootstrap(error));
            false
        };
        let room = key.room;
        let Some(e) = self.pairs.early.get(&key) else {
            return false;
        };
        if leg.side == Side::Decode {
            return refuse(
                leg,
                BootstrapError::DuplicateRoom {
                    side: Side::Decode,
                    room,
                },
            );
        }
        if e.tokens != leg.tokens {
            return refuse(leg, BootstrapError::PromptMismatch { room });
        }
        let request = e.request;
        self.pairs.early.remove(&key);
        self.pairs.early_room.remove(&request);
        self.pairs.request_of.insert(leg.id, request);
        self.pairs.prefill.insert(
            request,
            PrefillLeg {
                leg: leg.id,
                tx: leg.payload.tx,
            },
        );
        self.arriving
            .push_back(Pending::Release { request, at: now });
        true
    }

    /// Keeps the routes of `out` to `prefill` (the source of early request
    /// `r`) until its prefill leg comes.
    pub(super) fn hold_source(
        &mut self,
        r: RequestId,
        prefill: WorkerId,
        out: &mut Vec<Route>,
        from: usize,
    ) {
        let mut held = Vec::new();
        let mut i = from;
        while i < out.len() {
            if out[i].to == prefill {
                held.push(out.remove(i));
            } else {
                i += 1;
            }
        }
        if !held.is_empty() {
            self.pairs.held.insert(r, held);
        }
    }

    /// The held source routes of `r`, now its prefill leg came.
    pub(super) fn release_source(&mut self, r: RequestId) -> Vec<Route> {
        self.pairs.held.remove(&r).unwrap_or_default()
    }

    /// Request `r` ends with `msg`: its room, if it is a pair's, is free
    /// again; if it was an early decode still without its prefill leg, its
    /// held source is dropped and a reservation that expired reads as
    /// SGLang's waiting-timeout abort.
    pub(super) fn early_ended(&mut self, r: RequestId, msg: StreamMsg) -> StreamMsg {
        self.pairs.rooms.vacate(r);
        // Held source routes never reach their worker: their bookings
        // there come off now (no role will report them).
        for route in self.pairs.held.remove(&r).unwrap_or_default() {
            self.inner.route_dropped(r, route.to);
        }
        let Some(key) = self.pairs.early_room.remove(&r) else {
            return msg;
        };
        self.pairs.early.remove(&key);
        match msg {
            StreamMsg::Failed(FailureReason::Handoff(CancelReason::ReservationExpired)) => {
                let error = BootstrapError::WaitingTimeout {
                    request: r.0,
                    room: key.room,
                    after: self.pairs.waiting_timeout,
                };
                self.unpaired(None, r, &error);
                StreamMsg::Bootstrap(error)
            }
            m => m,
        }
    }

    /// Queues the engine request of a pair: the decode leg's id, prompt
    /// and output length, arriving now.
    fn submit_pair(&mut self, prefill: Leg<LegOut>, decode: Leg<LegOut>, now: Instant) {
        let (request, worker, _) = self.open_decode(decode, now);
        self.pairs.request_of.insert(prefill.id, request.id);
        self.pairs.prefill.insert(
            request.id,
            PrefillLeg {
                leg: prefill.id,
                tx: prefill.payload.tx,
            },
        );
        self.arriving.push_back(Pending::Pair {
            request,
            prefill: prefill.worker,
            decode: worker,
            early: false,
        });
    }

    /// The engine request of a pair (the decode leg's id, prompt and
    /// output length, arriving `now`), its client's stream opened; with the
    /// decode leg's worker and prompt tokens.
    fn open_decode(
        &mut self,
        decode: Leg<LegOut>,
        now: Instant,
    ) -> (handoff_core::Request, WorkerId, Vec<u32>) {
        let request = crate::openai::prompt::request_for(
            decode.id,
            &decode.tokens,
            decode.payload.output_tokens,
            self.block_size,
            now,
        );
        self.open(&request, &decode.tokens, decode.payload.tx);
        (request, decode.worker, decode.tokens)
    }

    /// Legs whose partner did not come by `now` fail with the bootstrap
    /// timeout's error; nothing was booked for them. Each is an unpaired
    /// leg of the conformance report.
    pub fn expire_legs(&mut self, now: Instant) {
        for (leg, error) in self.pairs.rooms.expire(now) {
            self.unpaired(Some(leg.worker), leg.id, &error);
            let _ = leg.payload.tx.send(StreamMsg::Bootstrap(error));
        }
    }

    /// Notes leg `id` on `worker` that failed with `error` as unpaired, if
    /// its partner never came (the bootstrap or the waiting timeout).
    fn unpaired(&self, worker: Option<WorkerId>, id: RequestId, error: &BootstrapError) {
        let (room, side) = match error {
            BootstrapError::Timeout { side, room, .. } => (*room, side.name()),
            BootstrapError::WaitingTimeout { room, .. } => (*room, Side::Decode.name()),
            _ => return,
        };
        self.edge.ledger().note(
            crate::conformance::ConformanceKind::UnpairedLeg,
            worker.map(|w| w.0),
            Some(id.0),
            crate::conformance::Detail::Room { room, side },
        );
    }

    /// The engine stops: every leg still waiting for its partner fails
    /// with `shutdown` (nothing was booked for it; it never was a request).
    pub fn shutdown_legs(&mut self) {
        for (leg, _) in self.pairs.rooms.expire(Instant::MAX) {
            let _ = leg
                .payload
                .tx
                .send(StreamMsg::Failed(FailureReason::Shutdown));
        }
    }

    /// When the next waiting leg times out.
    pub fn leg_deadline(&self) -> Option<Instant> {
        self.pairs.rooms.next_deadline()
    }

    /// The client of request or leg `id` went away: a leg still waiting
    /// leaves its room (`None`: nothing to cancel in the engine); a paired
    /// prefill leg's request is cancelled, as SGLang's prefill server
    /// aborts on a disconnect and its decode then fails; any other id is
    /// itself the request to cancel.
    pub fn leg_gone(&mut self, id: RequestId) -> Option<RequestId> {
        if self.pairs.rooms.remove(id).is_some() {
            return None;
        }
        Some(self.pairs.request_of.get(&id).copied().unwrap_or(id))
    }

    /// Ends the open prefill leg of pair request `r`, if there is one.
    pub(super) fn end_prefill_leg(&mut self, r: RequestId, how: PrefillEnd) {
        let Some(p) = self.pairs.prefill.remove(&r) else {
            return;
        };
        self.pairs.request_of.remove(&p.leg);
        match how {
            PrefillEnd::Sent => {
                let _ = p.tx.send(StreamMsg::Tokens(1));
                let _ = p.tx.send(StreamMsg::Finished);
            }
            PrefillEnd::Failed(why) => {
                let _ = p.tx.send(StreamMsg::Failed(why));
            }
        }
    }

    /// A source role of request `r` ended on its prefill worker: its KV
    /// was sent (`reason` none), or it ended early.
    pub(super) fn source_ended(&mut self, r: RequestId, reason: Option<CancelReason>) {
        let how = match reason {
            None => PrefillEnd::Sent,
            Some(why) => PrefillEnd::Failed(FailureReason::from(why)),
        };
        self.end_prefill_leg(r, how);
    }

    /// Request `r` was routed and its prefill is on `w` with `cached`
    /// prompt tokens: its prefill leg hears it too.
    pub(super) fn prefill_leg_started(&self, r: RequestId, cached: u32) {
        if let Some(p) = self.pairs.prefill.get(&r) {
            let _ = p.tx.send(StreamMsg::Started {
                cached_tokens: cached,
            });
        }
    }
}
