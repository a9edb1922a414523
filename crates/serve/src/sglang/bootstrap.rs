//! SGLang's bootstrap rooms: where the two legs of one PD request meet.
//!
//! SGLang's PD router (`sgl-router`, `src/routers/http/pd_router.rs`,
//! `execute_dual_dispatch_internal`) sends every request twice at once, the
//! same body on the same route to a prefill and to a decode worker, with
//! `bootstrap_host` (the prefill worker's host), `bootstrap_port` (its
//! bootstrap port as the router was told it, or `null`) and a random
//! `bootstrap_room` (`inject_bootstrap_into_value`). In SGLang the decode
//! worker finds the prefill worker by `bootstrap_host:bootstrap_port` and
//! registers its destination for the room with it; the prefill worker keys
//! the transfer by the room (`python/sglang/srt/disaggregation/mooncake/
//! conn.py`, `MooncakeKVManager.start_prefill_thread`, `transfer_infos`).
//! Either leg may arrive first.
//!
//! Here the two legs correlate on the whole triple, which both carry
//! unchanged. A prefill leg that comes first waits in a [`BootstrapTable`]
//! and nothing is booked for it: SGLang's prefill engine computes nothing
//! before the decode's metadata came (`disaggregation/prefill.py`,
//! `PrefillBootstrapQueue.pop_bootstrapped`). It waits at most the
//! bootstrap timeout (SGLang's `SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT`,
//! 300 s by default, after which a prefill still in `KVPoll.Bootstrapping`
//! fails: `CommonKVSender._check_bootstrap_timeout`, the abort in
//! `pop_bootstrapped` with HTTP 500).
//!
//! A decode leg that comes first reserves at once when the prefill it names
//! resolves (`director/`'s early reservation): SGLang's decode
//! engine puts it in `DecodePreallocQueue` (`disaggregation/decode.py`),
//! resolves the prefill's bootstrap info and DP rank without waiting for
//! the prefill leg (`_resolve_prefill_dp_rank`: `room % dp_size` under
//! `follow_bootstrap_room`), preallocates its request slot and KV pages
//! (`pop_preallocated`, `_pre_alloc`), sends its metadata, and holds them in
//! `DecodeTransferQueue` until the KV arrives or
//! `SGLANG_DISAGGREGATION_WAITING_TIMEOUT` (300 s) passes
//! (`CommonKVReceiver._check_waiting_timeout`, clock started by
//! `send_metadata`), when `pop_transferred` aborts it with HTTP 500 and
//! frees the pages (`release_kv_cache`) ([`BootstrapError::WaitingTimeout`]).
//! A decode leg whose prefill does not resolve (the prefill's rank is only
//! known once its leg registered it, `query_prefill_dp_ranks`) waits in the
//! table as a prefill leg does, booking nothing.
//!
//! A room serves one pair at a time. SGLang keys its per-room transfer
//! state by `bootstrap_room` alone (`CommonKVManager.request_status`,
//! `common/conn.py`; `MooncakeKVManager.transfer_infos`,
//! `mooncake/conn.py`), and its queues create a sender or receiver per
//! request without checking the room is free (`PrefillBootstrapQueue.add`,
//! `prefill.py`; `DecodePreallocQueue.add`, `decode.py`): a second pair in a
//! room that is still in use overwrites the first's state, and no error
//! names it. Here such a leg is refused at once with a 409 instead
//! ([`BootstrapError::DuplicateRoom`] while a leg of its side waits,
//! [`BootstrapError::RoomInUse`] while the room's pair is in flight), so
//! neither pair hangs; the room is free again when its pair's request ends
//! ([`BootstrapTable::vacate`]).
//!
//! Sans-IO: the table takes `now` (model time, as every timer of the
//! engine) and returns what happened; the caller answers the legs.

use crate::openai::{ApiError, ErrorKind};
use handoff_core::fasthash::FastMap;
use handoff_core::{Duration, Instant, RequestId, WorkerId};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// SGLang's `SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT` default, in seconds.
pub const DEFAULT_TIMEOUT_S: f64 = 300.0;

/// Most legs waiting at once; one more is refused (a 503), so a flood of
/// unpaired legs cannot grow the table without bound.
pub const MAX_WAITING: usize = 1 << 16;

/// What both legs of one request carry: the room's identity.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RoomKey {
    /// `bootstrap_host`: the prefill worker's host as the router knows it.
    pub host: String,
    /// `bootstrap_port`: the prefill worker's bootstrap port (`None` when
    /// the router was given none and sends `null`).
    pub port: Option<u16>,
    /// `bootstrap_room`: a random id in `0..2^63`.
    pub room: u64,
}

/// Which leg of the pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Side {
    /// Sent to a prefill worker: answers when the prefill's KV was sent.
    Prefill,
    /// Sent to a decode worker: streams the client's tokens.
    Decode,
}

impl Side {
    /// Stable lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Side::Prefill => "prefill",
            Side::Decode => "decode",
        }
    }

    fn other(self) -> Side {
        match self {
            Side::Prefill => Side::Decode,
            Side::Decode => Side::Prefill,
        }
    }
}

/// Why a leg was refused or failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BootstrapError {
    /// A bootstrap field is malformed.
    BadField {
        /// The field.
        field: &'static str,
        /// What is wrong.
        why: String,
    },
    /// A worker of an SGLang PD deployment got a request without a room.
    Missing {
        /// The worker's side.
        side: Side,
    },
    /// The fields came to a deployment that does not run SGLang's ordering.
    NotDestinationFirst,
    /// A leg of this side already waits in the room.
    DuplicateRoom {
        /// The side that came twice.
        side: Side,
        /// The room.
        room: u64,
    },
    /// The room's pair is still in flight: a room serves one pair at a
    /// time (module docs).
    RoomInUse {
        /// The side of the refused leg.
        side: Side,
        /// The room.
        room: u64,
    },
    /// An engine process of its own (`serve --engine`) names a pair's
    /// handoff by its room (`pod/`), and its ranks remember ended
    /// handoffs to classify late facts: a room used by an earlier pair is
    /// refused while it is remembered.
    RoomReused {
        /// The side of the refused leg.
        side: Side,
        /// The room.
        room: u64,
    },
    /// The two legs of the room carry different prompts.
    PromptMismatch {
        /// The room.
        room: u64,
    },
    /// The partner never came within the bootstrap timeout.
    Timeout {
        /// The side that waited.
        side: Side,
        /// The room.
        room: u64,
        /// How long it waited (model time).
        after: Duration,
    },
    /// [`MAX_WAITING`] legs already wait.
    Full,
    /// A decode leg reserved on arrival and its KV did not come within
    /// the waiting timeout (SGLang's `SGLANG_DISAGGREGATION_WAITING_TIMEOUT`):
    /// its reservation was freed.
    WaitingTimeout {
        /// The pair's request id (SGLang's `rid`).
        request: u64,
        /// The room.
        room: u64,
        /// The waiting timeout (model time).
        after: Duration,
    },
}

impl BootstrapError {
    /// The OpenAI-style error.
    pub fn api(&self) -> ApiError {
        match self {
            BootstrapError::BadField { field, why } => {
                ApiError::invalid(Some(field), format!("{field} {why}"))
            }
            BootstrapError::Missing { side } => ApiError::invalid(
                Some("bootstrap_room"),
                format!(
                    "this worker is a {} worker of an SGLang PD deployment: requests must carry \
                     bootstrap_host, bootstrap_port and bootstrap_room (sglang-router in PD mode \
                     sends them), or use the frontend's /v1 routes",
                    side.name()
                ),
            ),
            BootstrapError::NotDestinationFirst => ApiError::invalid(
                Some("bootstrap_room"),
                "bootstrap_room is SGLang's destination-first PD flow; this deployment is not \
                 (vLLM's proxy flow sends kv_transfer_params)",
            ),
            BootstrapError::DuplicateRoom { side, room } => ApiError {
                status: 409,
                message: format!(
                    "a {} leg of bootstrap_room {room} is already waiting for its partner",
                    side.name()
                ),
                kind: ErrorKind::InvalidRequest,
                param: Some("bootstrap_room"),
            },
            BootstrapError::RoomInUse { side, room } => ApiError {
                status: 409,
                message: format!(
                    "bootstrap_room {room} is in use by a pair in flight: this {} leg is refused \
                     (a room serves one pair at a time; send a fresh bootstrap_room)",
                    side.name()
                ),
                kind: ErrorKind::InvalidRequest,
                param: Some("bootstrap_room"),
            },
            BootstrapError::RoomReused { side, room } => ApiError {
                status: 409,
                message: format!(
                    "bootstrap_room {room} was used by an earlier pair on this engine: this {} \
                     leg is refused (its handoff is named by the room; send a fresh \
                     bootstrap_room)",
                    side.name()
                ),
                kind: ErrorKind::InvalidRequest,
                param: Some("bootstrap_room"),
            },
            BootstrapError::PromptMismatch { room } => ApiError::invalid(
                Some("prompt"),
                format!(
                    "the prefill and decode legs of bootstrap_room {room} carry different prompts"
                ),
            ),
            BootstrapError::Timeout { side, room, after } => ApiError {
                status: 500,
                message: format!(
                    "{} bootstrap failed for bootstrap_room {room}: its {} leg did not arrive \
                     within {} s (the bootstrap timeout, SGLang's \
                     SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT)",
                    match side {
                        Side::Prefill => "Prefill",
                        Side::Decode => "Decode",
                    },
                    side.other().name(),
                    after.as_secs_f64()
                ),
                kind: ErrorKind::Internal,
                param: None,
            },
            // `DecodeTransferQueue.pop_transferred`'s abort (HTTP 500) with
            // `KVTransferError`'s text for `_check_waiting_timeout`.
            BootstrapError::WaitingTimeout {
                request,
                room,
                after,
            } => ApiError {
                status: 500,
                message: format!(
                    "Decode transfer failed for request rank=0 decode_req.req.rid='{request}' \
                     decode_req.req.bootstrap_room={room} with exception \
                     KVTransferError(bootstrap_room={room}): Request {room} timed out after \
                     {:.1}s in KVPoll.WaitingForInput",
                    after.as_secs_f64()
                ),
                kind: ErrorKind::Internal,
                param: None,
            },
            BootstrapError::Full => ApiError {
                status: 503,
                message: format!("{MAX_WAITING} bootstrap legs already wait for their partners"),
                kind: ErrorKind::Unavailable,
                param: None,
            },
        }
    }
}

fn bad(field: &'static str, why: &str) -> BootstrapError {
    BootstrapError::BadField {
        field,
        why: why.into(),
    }
}

/// Reads the bootstrap fields of a request body (a JSON object): `None`
/// when it carries none of them (all absent or `null`). A batch (arrays,
/// one room per prompt) is refused: one request is one room here.
pub fn parse(body: &Value) -> Result<Option<RoomKey>, BootstrapError> {
    let get = |f: &str| body.get(f).filter(|v| !v.is_null());
    let (host, port, room) = (
        get("bootstrap_host"),
        get("bootstrap_port"),
        get("bootstrap_room"),
    );
    if host.is_none() && port.is_none() && room.is_none() {
        return Ok(None);
    }
    if [host, port, room]
        .iter()
        .any(|v| v.is_some_and(Value::is_array))
    {
        return Err(bad(
            "bootstrap_room",
            "is a list (a batch); send one prompt per request",
        ));
    }
    let room = match room {
        None => return Err(bad("bootstrap_room", "is required with bootstrap_host")),
        Some(v) => v
            .as_u64()
            .filter(|r| *r <= i64::MAX as u64)
            .ok_or_else(|| bad("bootstrap_room", "must be an integer in 0..2^63"))?,
    };
    let host = match host {
        Some(Value::String(h)) if !h.is_empty() && h.len() <= 255 => h.clone(),
        Some(_) => return Err(bad("bootstrap_host", "must be a host name or address")),
        None => return Err(bad("bootstrap_host", "is required with bootstrap_room")),
    };
    let port = match port {
        None => None,
        Some(v) => Some(
            v.as_u64()
                .and_then(|p| u16::try_from(p).ok())
                .ok_or_else(|| bad("bootstrap_port", "must be a port number or null"))?,
        ),
    };
    Ok(Some(RoomKey { host, port, room }))
}

/// One leg: its own id (its HTTP handler's), its side, the worker whose
/// listener got it, its prompt, and what the caller keeps with it.
#[derive(Debug)]
pub struct Leg<T> {
    /// The leg's id.
    pub id: RequestId,
    /// Its side.
    pub side: Side,
    /// The worker whose listener got it.
    pub worker: WorkerId,
    /// Prompt token ids.
    pub tokens: Vec<u32>,
    /// The caller's (answer channel, output length).
    pub payload: T,
}

/// What became of an arriving leg.
#[derive(Debug)]
pub enum Arrival<T> {
    /// It waits for its partner.
    Waiting,
    /// Its partner was waiting: here are both.
    Paired {
        /// The prefill leg.
        prefill: Leg<T>,
        /// The decode leg.
        decode: Leg<T>,
    },
    /// Refused: the leg, why, and a waiting partner that fails with it
    /// (two legs of one room with different prompts).
    Refused {
        /// The refused leg.
        leg: Leg<T>,
        /// Why.
        error: BootstrapError,
        /// Its partner, which leaves the table too.
        partner: Option<Leg<T>>,
    },
}

struct Waiting<T> {
    leg: Leg<T>,
    since: Instant,
}

/// Legs waiting for their partners, by room; see the module docs.
pub struct BootstrapTable<T> {
    timeout: Duration,
    rooms: BTreeMap<RoomKey, Waiting<T>>,
    /// Each waiting leg's room, by leg id.
    legs: FastMap<RequestId, RoomKey>,
    /// (deadline, leg id) of every waiting leg.
    deadlines: BTreeSet<(Instant, RequestId)>,
    /// Rooms whose pair is in flight, with the pair's request id.
    paired: BTreeMap<RoomKey, RequestId>,
    /// The room of each request in `paired`.
    paired_room: FastMap<RequestId, RoomKey>,
}

impl<T> BootstrapTable<T> {
    /// An empty table whose legs wait at most `timeout`.
    pub fn new(timeout: Duration) -> Self {
        BootstrapTable {
            timeout,
            rooms: BTreeMap::new(),
            legs: FastMap::default(),
            deadlines: BTreeSet::new(),
            paired: BTreeMap::new(),
            paired_room: FastMap::default(),
        }
    }

    /// `leg` arrives for room `key` at `now`. A leg for a room whose pair
    /// is in flight is refused; a pair that forms holds its room (under the
    /// decode leg's id, the pair's request) until [`Self::vacate`].
    pub fn arrive(&mut self, key: RoomKey, leg: Leg<T>, now: Instant) -> Arrival<T> {
        let room = key.room;
        if self.in_use(&key) {
            let side = leg.side;
            return Arrival::Refused {
                leg,
                error: BootstrapError::RoomInUse { side, room },
                partner: None,
            };
        }
        match self.rooms.get(&key).map(|w| w.leg.side) {
            Some(side) if side == leg.side => Arrival::Refused {
                leg,
                error: BootstrapError::DuplicateRoom { side, room },
                partner: None,
            },
            Some(_) => {
                let partner = self.take(&key);
                if partner.tokens != leg.tokens {
                    return Arrival::Refused {
                        leg,
                        error: BootstrapError::PromptMismatch { room },
                        partner: Some(partner),
                    };
                }
                let (prefill, decode) = match leg.side {
                    Side::Prefill => (leg, partner),
                    Side::Decode => (partner, leg),
                };
                self.occupy(key, decode.id);
                Arrival::Paired { prefill, decode }
            }
            None if self.rooms.len() >= MAX_WAITING => Arrival::Refused {
                leg,
                error: BootstrapError::Full,
                partner: None,
            },
            None => {
                self.legs.insert(leg.id, key.clone());
                self.deadlines.insert((now + self.timeout, leg.id));
                self.rooms.insert(key, Waiting { leg, since: now });
                Arrival::Waiting
            }
        }
    }

    /// Removes and returns the leg waiting in `key` (which must be there).
    fn take(&mut self, key: &RoomKey) -> Leg<T> {
        let w = self
            .rooms
            .remove(key)
            .unwrap_or_else(|| unreachable!("a room looked up just before"));
        self.legs.remove(&w.leg.id);
        self.deadlines.remove(&(w.since + self.timeout, w.leg.id));
        w.leg
    }

    /// The waiting leg `id` leaves (its client went away); `None` when it
    /// is not waiting (never was, or already paired or expired).
    pub fn remove(&mut self, id: RequestId) -> Option<Leg<T>> {
        let key = self.legs.get(&id)?.clone();
        Some(self.take(&key))
    }

    /// Legs whose partner did not come by `now`, in deadline order, each
    /// with its timeout error; they leave the table.
    pub fn expire(&mut self, now: Instant) -> Vec<(Leg<T>, BootstrapError)> {
        let mut out = Vec::new();
        while let Some(&(at, id)) = self.deadlines.first() {
            if at > now {
                break;
            }
            let Some(key) = self.legs.get(&id).cloned() else {
                self.deadlines.pop_first();
                continue;
            };
            let leg = self.take(&key);
            let error = BootstrapError::Timeout {
                side: leg.side,
                room: key.room,
                after: self.timeout,
            };
            out.push((leg, error));
        }
        out
    }

    /// Room `key` is held by the pair of `request` (formed outside the
    /// table: a decode leg that reserved before its prefill leg came).
    pub fn occupy(&mut self, key: RoomKey, request: RequestId) {
        if let Some(old) = self.paired.insert(key.clone(), request) {
            self.paired_room.remove(&old);
        }
        self.paired_room.insert(request, key);
    }

    /// The pair of `request` ended: its room is free again. Whether it held
    /// one.
    pub fn vacate(&mut self, request: RequestId) -> bool {
        let Some(key) = self.paired_room.remove(&request) else {
            return false;
        };
        self.paired.remove(&key);
        true
    }

    /// Whether room `key`'s pair is in flight.
    pub fn in_use(&self, key: &RoomKey) -> bool {
        self.paired.contains_key(key)
    }

    /// Rooms whose pair is in flight.
    pub fn in_use_len(&self) -> usize {
        self.paired.len()
    }

    /// The side of the leg waiting in `key`, if one does.
    pub fn waiting_side(&self, key: &RoomKey) -> Option<Side> {
        self.rooms.get(key).map(|w| w.leg.side)
    }

    /// When the next waiting leg times out.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(at, _)| *at)
    }

    /// Legs waiting.
    pub fn len(&self) -> usize {
        self.rooms.len()
    }

    /// Whether no leg waits.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.rooms.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(room: u64) -> RoomKey {
        RoomKey {
            host: "127.0.0.1".into(),
            port: Some(8998),
            room,
        }
    }

    fn leg(id: u64, side: Side, worker: u32) -> Leg<&'static str> {
        Leg {
            id: RequestId(id),
            side,
            worker: WorkerId(worker),
            tokens: vec![1, 2, 3],
            payload: "tx",
        }
    }

    const T0: Instant = Instant::ZERO;

    fn secs(s: u64) -> Instant {
        T0 + Duration::from_secs(s)
    }

    #[test]
    fn pairs_in_either_order() {
        for first in [Side::Prefill, Side::Decode] {
            let mut t = BootstrapTable::new(Duration::from_secs(2));
            let (a, b) = match first {
                Side::Prefill => (leg(1, Side::Prefill, 0), leg(2, Side::Decode, 1)),
                Side::Decode => (leg(2, Side::Decode, 1), leg(1, Side::Prefill, 0)),
            };
            assert!(matches!(t.arrive(key(7), a, T0), Arrival::Waiting));
            assert_eq!((t.len(), t.next_deadline()), (1, Some(secs(2))));
            match t.arrive(key(7), b, secs(1)) {
                Arrival::Paired { prefill, decode } => {
                    assert_eq!((prefill.id, prefill.worker), (RequestId(1), WorkerId(0)));
                    assert_eq!((decode.id, decode.worker), (RequestId(2), WorkerId(1)));
                }
                other => panic!("{first:?} first: {other:?}"),
            }
            assert!(t.is_empty() && t.next_deadline().is_none());
            assert!(t.expire(secs(100)).is_empty(), "a paired leg never expires");
        }
    }

    #[test]
    fn a_room_is_the_whole_triple() {
        let mut t = BootstrapTable::new(Duration::from_secs(2));
        assert!(matches!(
            t.arrive(key(7), leg(1, Side::Prefill, 0), T0),
            Arrival::Waiting
        ));
        let other_port = RoomKey {
            port: Some(8999),
            ..key(7)
        };
        assert!(matches!(
            t.arrive(other_port, leg(2, Side::Decode, 1), T0),
            Arrival::Waiting
        ));
        assert!(matches!(
            t.arrive(key(8), leg(3, Side::Decode, 1), T0),
            Arrival::Waiting
        ));
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn an_unpaired_leg_times_out_once() {
        let mut t = BootstrapTable::new(Duration::from_secs(2));
        assert!(matches!(
            t.arrive(key(7), leg(1, Side::Decode, 1), T0),
            Arrival::Waiting
        ));
        assert!(matches!(
            t.arrive(key(9), leg(2, Side::Prefill, 0), secs(1)),
            Arrival::Waiting
        ));
        assert!(t.expire(secs(1)).is_empty());
        let gone = t.expire(secs(2));
        assert_eq!(gone.len(), 1);
        let (l, e) = &gone[0];
        assert_eq!(l.id, RequestId(1));
        assert_eq!(
            *e,
            BootstrapError::Timeout {
                side: Side::Decode,
                room: 7,
                after: Duration::from_secs(2)
            }
        );
        assert_eq!(e.api().status, 500);
        assert!(e.api().message.contains("prefill leg did not arrive"));
        assert!(t.expire(secs(2)).is_empty(), "expired once");
        assert_eq!(t.next_deadline(), Some(secs(3)));
        // Its partner, late: it waits anew (the room is free again).
        assert!(matches!(
            t.arrive(key(7), leg(3, Side::Prefill, 0), secs(2)),
            Arrival::Waiting
        ));
        let ids: Vec<u64> = t.expire(secs(10)).iter().map(|(l, _)| l.id.0).collect();
        assert_eq!(ids, [2, 3], "in deadline order");
        assert!(t.is_empty());
    }

    #[test]
    fn a_duplicate_room_is_refused_and_the_first_leg_keeps_waiting() {
        let mut t = BootstrapTable::new(Duration::from_secs(2));
        assert!(matches!(
            t.arrive(key(7), leg(1, Side::Prefill, 0), T0),
            Arrival::Waiting
        ));
        match t.arrive(key(7), leg(2, Side::Prefill, 0), T0) {
            Arrival::Refused {
                leg,
                error,
                partner: None,
            } => {
                assert_eq!(leg.id, RequestId(2));
                assert_eq!(
                    error,
                    BootstrapError::DuplicateRoom {
                        side: Side::Prefill,
                        room: 7
                    }
                );
                assert_eq!(error.api().status, 409);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            t.arrive(key(7), leg(3, Side::Decode, 1), T0),
            Arrival::Paired { .. }
        ));
    }

    #[test]
    fn a_room_in_flight_refuses_both_legs_of_a_second_pair_until_vacated() {
        for first in [Side::Prefill, Side::Decode] {
            let mut t = BootstrapTable::new(Duration::from_secs(2));
            let (a, b) = match first {
                Side::Prefill => (leg(1, Side::Prefill, 0), leg(2, Side::Decode, 1)),
                Side::Decode => (leg(2, Side::Decode, 1), leg(1, Side::Prefill, 0)),
            };
            assert!(matches!(t.arrive(key(7), a, T0), Arrival::Waiting));
            assert!(matches!(t.arrive(key(7), b, T0), Arrival::Paired { .. }));
            assert!(t.in_use(&key(7)) && t.in_use_len() == 1);
            // Both legs of a second pair in the same room: refused at once,
            // nothing waits, no deadline is armed.
            for (id, side) in [(3, Side::Prefill), (4, Side::Decode)] {
                match t.arrive(key(7), leg(id, side, 0), secs(1)) {
                    Arrival::Refused {
                        leg,
                        error,
                        partner: None,
                    } => {
                        assert_eq!(leg.id, RequestId(id));
                        assert_eq!(error, BootstrapError::RoomInUse { side, room: 7 });
                        assert_eq!(error.api().status, 409);
                        assert_eq!(error.api().param, Some("bootstrap_room"));
                    }
                    other => panic!("{first:?} first, {side:?}: {other:?}"),
                }
            }
            assert!(t.is_empty() && t.next_deadline().is_none());
            // Another room is not affected.
            assert!(matches!(
                t.arrive(key(8), leg(5, Side::Prefill, 0), secs(1)),
                Arrival::Waiting
            ));
            // The pair (the decode leg's id) ends: the room is free again.
            assert!(
                !t.vacate(RequestId(1)),
                "the prefill leg's id holds nothing"
            );
            assert!(t.vacate(RequestId(2)));
            assert!(!t.vacate(RequestId(2)), "vacated once");
            assert!(!t.in_use(&key(7)) && t.in_use_len() == 0);
            assert!(matches!(
                t.arrive(key(7), leg(6, Side::Decode, 1), secs(1)),
                Arrival::Waiting
            ));
        }
    }

    #[test]
    fn an_early_pair_holds_its_room_too() {
        let mut t: BootstrapTable<&str> = BootstrapTable::new(Duration::from_secs(2));
        t.occupy(key(7), RequestId(9));
        assert!(matches!(
            t.arrive(key(7), leg(1, Side::Prefill, 0), T0),
            Arrival::Refused {
                error: BootstrapError::RoomInUse {
                    side: Side::Prefill,
                    room: 7
                },
                ..
            }
        ));
        assert!(t.vacate(RequestId(9)));
        assert!(matches!(
            t.arrive(key(7), leg(1, Side::Prefill, 0), T0),
            Arrival::Waiting
        ));
    }

    #[test]
    fn abandoned_legs_all_expire_and_free_the_table() {
        let mut t = BootstrapTable::new(Duration::from_secs(2));
        for i in 0..200u64 {
            let side = if i % 2 == 0 {
                Side::Prefill
            } else {
                Side::Decode
            };
            assert!(matches!(
                t.arrive(key(i), leg(i, side, 0), T0),
                Arrival::Waiting
            ));
        }
        assert_eq!(t.len(), 200);
        assert!(t.expire(secs(1)).is_empty());
        let gone = t.expire(secs(2));
        assert_eq!(gone.len(), 200);
        assert!(gone
            .iter()
            .all(|(_, e)| matches!(e, BootstrapError::Timeout { .. })));
        assert!(t.is_empty() && t.next_deadline().is_none() && t.legs.is_empty());
        assert!(t.deadlines.is_empty() && t.in_use_len() == 0);
    }

    #[test]
    fn a_reused_room_reads_as_such() {
        let e = BootstrapError::RoomReused {
            side: Side::Decode,
            room: 7,
        };
        let api = e.api();
        assert_eq!((api.status, api.param), (409, Some("bootstrap_room")));
        assert!(
            api.message.contains("bootstrap_room 7 was used"),
            "{}",
            api.message
        );
    }

    #[test]
    fn different_prompts_fail_both_legs() {
        let mut t = BootstrapTable::new(Duration::from_secs(2));
        assert!(matches!(
            t.arrive(key(7), leg(1, Side::Prefill, 0), T0),
            Arrival::Waiting
        ));
        let mut d = leg(2, Side::Decode, 1);
        d.tokens.push(4);
        match t.arrive(key(7), d, T0) {
            Arrival::Refused {
                leg,
                error: BootstrapError::PromptMismatch { room: 7 },
                partner: Some(p),
            } => assert_eq!((leg.id, p.id), (RequestId(2), RequestId(1))),
            other => panic!("{other:?}"),
        }
        assert!(t.is_empty() && t.next_deadline().is_none());
    }

    #[test]
    fn a_leg_that_leaves_frees_its_room_and_deadline() {
        let mut t = BootstrapTable::new(Duration::from_secs(2));
        assert!(matches!(
            t.arrive(key(7), leg(1, Side::Prefill, 0), T0),
            Arrival::Waiting
        ));
        assert_eq!(t.remove(RequestId(1)).map(|l| l.id), Some(RequestId(1)));
        assert!(t.remove(RequestId(1)).is_none(), "removed once");
        assert!(t.is_empty() && t.next_deadline().is_none());
        assert!(t.expire(secs(10)).is_empty());
        // The room is free: a decode leg for it now waits.
        assert!(matches!(
            t.arrive(key(7), leg(2, Side::Decode, 1), T0),
            Arrival::Waiting
        ));
    }

    #[test]
    fn the_waiting_timeout_reads_as_sglangs_abort() {
        let e = BootstrapError::WaitingTimeout {
            request: 12,
            room: 7,
            after: Duration::from_secs(300),
        };
        let api = e.api();
        assert_eq!(api.status, 500);
        assert!(
            api.message
                .contains("Request 7 timed out after 300.0s in KVPoll.WaitingForInput"),
            "{}",
            api.message
        );
        let mut t = BootstrapTable::new(Duration::from_secs(2));
        assert_eq!(t.waiting_side(&key(7)), None);
        assert!(matches!(
            t.arrive(key(7), leg(1, Side::Prefill, 0), T0),
            Arrival::Waiting
        ));
        assert_eq!(t.waiting_side(&key(7)), Some(Side::Prefill));
    }

    #[test]
    fn the_table_is_bounded() {
        let mut t = BootstrapTable::new(Duration::from_secs(2));
        for i in 0..MAX_WAITING as u64 {
            assert!(matches!(
                t.arrive(key(i), leg(i, Side::Decode, 1), T0),
                Arrival::Waiting
            ));
        }
        let n = MAX_WAITING as u64;
        match t.arrive(key(n), leg(n, Side::Decode, 1), T0) {
            Arrival::Refused {
                error: BootstrapError::Full,
                ..
            } => {}
            other => panic!("{other:?}"),
        }
        // A partner of a waiting leg still pairs.
        assert!(matches!(
            t.arrive(key(0), leg(n + 1, Side::Prefill, 0), T0),
            Arrival::Paired { .. }
        ));
    }

    #[test]
    fn fields_parse_or_name_what_is_wrong() {
        let p = |v: Value| parse(&v);
        assert_eq!(p(json!({"prompt": "x"})), Ok(None));
        assert_eq!(
            p(json!({"bootstrap_host": null, "bootstrap_port": null, "bootstrap_room": null})),
            Ok(None)
        );
        assert_eq!(
            p(json!({"bootstrap_host": "10.0.0.1", "bootstrap_port": 8998,
                     "bootstrap_room": 9223372036854775807u64})),
            Ok(Some(RoomKey {
                host: "10.0.0.1".into(),
                port: Some(8998),
                room: i64::MAX as u64
            }))
        );
        assert_eq!(
            p(json!({"bootstrap_host": "h", "bootstrap_port": null, "bootstrap_room": 0})),
            Ok(Some(RoomKey {
                host: "h".into(),
                port: None,
                room: 0
            }))
        );
        for (body, field) in [
            (json!({"bootstrap_room": 1}), "bootstrap_host"),
            (json!({"bootstrap_host": "h"}), "bootstrap_room"),
            (
                json!({"bootstrap_host": "h", "bootstrap_room": -1}),
                "bootstrap_room",
            ),
            (
                json!({"bootstrap_host": "h", "bootstrap_room": 9223372036854775808u64}),
                "bootstrap_room",
            ),
            (
                json!({"bootstrap_host": "h", "bootstrap_room": "1"}),
                "bootstrap_room",
            ),
            (
                json!({"bootstrap_host": 3, "bootstrap_room": 1}),
                "bootstrap_host",
            ),
            (
                json!({"bootstrap_host": "h", "bootstrap_port": 70000, "bootstrap_room": 1}),
                "bootstrap_port",
            ),
            (
                json!({"bootstrap_host": ["h"], "bootstrap_port": [1], "bootstrap_room": [1]}),
                "bootstrap_room",
            ),
        ] {
            match p(body.clone()) {
                Err(e @ BootstrapError::BadField { .. }) => {
                    let api = e.api();
                    assert_eq!((api.status, api.param), (400, Some(field)), "{body}");
                }
                other => panic!("{body}: {other:?}"),
            }
        }
    }
}
