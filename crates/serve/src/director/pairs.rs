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

use super::{HttpDirector, Pending, StreamMsg};
use crate::sglang::bootstrap::{Arrival, BootstrapTable, Leg, RoomKey};
use handoff_core::{CancelReason, FailureReason, Instant, RequestId};
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

/// The pairs' state inside [`HttpDirector`].
pub(super) struct Pairs {
    rooms: BootstrapTable<LegOut>,
    /// Paired prefill legs still open, by the pair's request id.
    prefill: handoff_core::fasthash::FastMap<RequestId, PrefillLeg>,
    /// The pair's request id of each open prefill leg, by the leg's id.
    request_of: handoff_core::fasthash::FastMap<RequestId, RequestId>,
}

impl Pairs {
    pub(super) fn new(timeout: handoff_core::Duration) -> Self {
        Pairs {
            rooms: BootstrapTable::new(timeout),
            prefill: Default::default(),
            request_of: Default::default(),
        }
    }

    /// Legs waiting in rooms plus prefill legs still open.
    pub(super) fn open(&self) -> usize {
        self.rooms.len() + self.prefill.len()
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
    /// (which checked its pool). Returns whether a pair was queued (the
    /// engine must then be told its arrivals changed); a refused leg, and
    /// a partner failing with it, are answered here.
    pub fn leg(&mut self, key: RoomKey, leg: Leg<LegOut>, now: Instant) -> bool {
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

    /// Queues the engine request of a pair: the decode leg's id, prompt
    /// and output length, arriving now.
    fn submit_pair(&mut self, prefill: Leg<LegOut>, decode: Leg<LegOut>, now: Instant) {
        let request = crate::openai::prompt::request_for(
            decode.id,
            &decode.tokens,
            decode.payload.output_tokens,
            self.block_size,
            now,
        );
        self.open(&request, &decode.tokens, decode.payload.tx);
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
            decode: decode.worker,
        });
    }

    /// Legs whose partner did not come by `now` fail with the bootstrap
    /// timeout's error; nothing was booked for them.
    pub fn expire_legs(&mut self, now: Instant) {
        for (leg, error) in self.pairs.rooms.expire(now) {
            let _ = leg.payload.tx.send(StreamMsg::Bootstrap(error));
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
