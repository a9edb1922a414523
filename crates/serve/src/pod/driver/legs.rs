//! SGLang's PD legs between engine processes, as `sglang-router` sends
//! them (the same body, with `bootstrap_host`, `bootstrap_port` and
//! `bootstrap_room`, to a prefill and a decode engine at once) and as
//! SGLang's engines meet (`python/sglang/srt/disaggregation/`):
//!
//! - the prefill engine's bootstrap server is its side channel
//!   (`--disaggregation-bootstrap-port`); its leg becomes the source of a
//!   destination-first handoff on rank `room % dp` (SGLang's
//!   `follow_bootstrap_room`), which waits for a reservation until its
//!   bootstrap timeout (the source role's own wait);
//! - the decode engine's rank dials `bootstrap_host:bootstrap_port` (the
//!   transport's hello names the prefill rank and its incarnation, as
//!   SGLang's decode learns the prefill's rank info from the bootstrap
//!   server, `CommonKVReceiver._get_bootstrap_info_from_server`), and its
//!   leg becomes the destination: it preallocates (reserves) and tells the
//!   source, which then prefills and sends the KV;
//! - both legs name the handoff by the room: the id is the prefill rank's
//!   scheduler and incarnation with the room as its sequence, so neither
//!   side needs to hear from the other first (a fact that comes before its
//!   leg is held by the worker until the leg does).
//!
//! The prefill leg answers when its KV was sent (the one token SGLang's
//! prefill samples), or with the reason its source ended; the decode leg
//! streams the client's tokens.
//!
//! Rooms ([`LegRooms`]): since the handoff is named by its room, a leg whose
//! handoff is open on this engine is refused at once
//! ([`BootstrapError::DuplicateRoom`]), and so is one whose handoff an
//! earlier leg used while the ranks may still remember it
//! ([`BootstrapError::RoomReused`]): a rank refuses a handoff id it holds or
//! remembers, and nothing would ever answer the leg. A prefill leg whose
//! decode has not reserved within `--bootstrap-timeout-s` fails with
//! SGLang's bootstrap timeout (`CommonKVSender._check_bootstrap_timeout`,
//! `common/conn.py`; the abort in `PrefillBootstrapQueue.pop_bootstrapped`,
//! `prefill.py`): its source role is cancelled on the rank with
//! [`CancelReason::LeaseExpired`], the reason the role gives when its own
//! wait for a destination runs out, and the flow ends at once. What this does not model: a decode leg
//! for a prefill engine with several ranks must find the room's rank at
//! `bootstrap_port` plus `room % dp` (SGLang asks the bootstrap server
//! which rank holds the room).

use super::{Kind, PodDriver, Waiting};
use crate::director::dp_lb::RankRule;
use crate::director::StreamMsg;
use crate::openai::prompt::request_for;
use crate::sglang::bootstrap::{BootstrapError, RoomKey, Side};
use crate::vllm::kv_transfer::ProxyError;
use handoff_core::fasthash::{FastMap, FastSet};
use handoff_core::{
    CancelReason, Duration, FailureReason, Generation, HandoffId, Instant, Request, RequestId,
    Role, RoleState, SourceState, Transition, WorkerId, WorkerRequest,
};
use handoff_transport::{Frame, PeerHello, Transport};
use std::collections::{BTreeSet, VecDeque};
use tokio::sync::mpsc::UnboundedSender;

/// The legs' rooms on one engine (module docs): sans-IO, every call takes
/// the model time it happens at.
pub(crate) struct LegRooms {
    /// How long a prefill leg waits for its decode's reservation.
    timeout: Duration,
    /// How many used handoffs are remembered (the ranks' tombstones).
    remember: usize,
    /// The open leg of each handoff, and its side.
    open: FastMap<HandoffId, (RequestId, Side)>,
    /// The handoff of each open leg.
    handoff_of: FastMap<RequestId, HandoffId>,
    /// Handoffs legs used, oldest first, at most `remember`.
    used: VecDeque<HandoffId>,
    /// The ids of `used`, for lookups.
    used_set: FastSet<HandoffId>,
    /// (deadline, leg) of prefill legs whose decode has not reserved.
    deadlines: BTreeSet<(Instant, RequestId)>,
    /// The deadline of each leg in `deadlines`.
    deadline_of: FastMap<RequestId, Instant>,
}

impl LegRooms {
    /// Rooms whose prefill legs wait at most `timeout` and whose handoffs
    /// are remembered for the last `remember` legs.
    pub(crate) fn new(timeout: Duration, remember: usize) -> Self {
        LegRooms {
            timeout,
            remember: remember.max(1),
            open: FastMap::default(),
            handoff_of: FastMap::default(),
            used: VecDeque::new(),
            used_set: FastSet::default(),
            deadlines: BTreeSet::new(),
            deadline_of: FastMap::default(),
        }
    }

    /// Leg `id` of `side` takes `handoff` (room `room`) at `now`; a
    /// prefill leg's wait for its decode starts. Refused when the handoff is
    /// open or remembered.
    pub(crate) fn claim(
        &mut self,
        handoff: HandoffId,
        room: u64,
        (id, side): (RequestId, Side),
        now: Instant,
    ) -> Result<(), BootstrapError> {
        if self.open.contains_key(&handoff) {
            return Err(BootstrapError::DuplicateRoom { side, room });
        }
        if self.used_set.contains(&handoff) {
            return Err(BootstrapError::RoomReused { side, room });
        }
        if self.used.len() >= self.remember {
            if let Some(old) = self.used.pop_front() {
                self.used_set.remove(&old);
            }
        }
        self.used.push_back(handoff);
        self.used_set.insert(handoff);
        self.open.insert(handoff, (id, side));
        self.handoff_of.insert(id, handoff);
        if side == Side::Prefill {
            let at = now + self.timeout;
            self.deadlines.insert((at, id));
            self.deadline_of.insert(id, at);
        }
        Ok(())
    }

    /// The source of leg `id` moved on from waiting (its decode reserved):
    /// no bootstrap deadline any more.
    pub(crate) fn reserved(&mut self, id: RequestId) {
        if let Some(at) = self.deadline_of.remove(&id) {
            self.deadlines.remove(&(at, id));
        }
    }

    /// Leg `id` ended: its handoff is no longer open (it stays remembered).
    pub(crate) fn ended(&mut self, id: RequestId) {
        self.reserved(id);
        if let Some(h) = self.handoff_of.remove(&id) {
            self.open.remove(&h);
        }
    }

    /// Prefill legs whose decode did not reserve by `now`, with their
    /// handoff; they leave the table.
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<(RequestId, HandoffId)> {
        let mut out = Vec::new();
        while let Some(&(at, id)) = self.deadlines.first() {
            if at > now {
                break;
            }
            self.deadlines.pop_first();
            self.deadline_of.remove(&id);
            if let Some(h) = self.handoff_of.remove(&id) {
                self.open.remove(&h);
                out.push((id, h));
            }
        }
        out
    }

    /// The bootstrap timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Legs with an open handoff.
    pub(crate) fn len(&self) -> usize {
        self.open.len()
    }
}

/// A decode leg waiting for its rank to reach the bootstrap server.
pub(super) struct PendingLeg {
    pub(super) rank: usize,
    pub(super) room: u64,
    pub(super) tokens: Vec<u32>,
    pub(super) request: Request,
    pub(super) tx: UnboundedSender<StreamMsg>,
}

/// The handoff both legs of `room` name: issued by prefill scheduler
/// `source` in its incarnation `generation`, with the room as sequence.
pub(crate) fn room_handoff(source: WorkerId, generation: Generation, room: u64) -> HandoffId {
    HandoffId((u128::from(source.0) << 96) | (u128::from(generation.0) << 64) | u128::from(room))
}

impl PodDriver {
    /// One leg of an SGLang PD pair.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn leg(
        &mut self,
        side: Side,
        key: RoomKey,
        id: RequestId,
        tokens: &[u32],
        output_tokens: u32,
        now: Instant,
        tx: UnboundedSender<StreamMsg>,
    ) {
        let request = request_for(id, tokens, output_tokens, self.s.block_size, now);
        match side {
            Side::Prefill => {
                let r = self
                    .picker
                    .pick(WorkerId(0), RankRule::Room(key.room))
                    .map_or(0, |w| w.0 as usize);
                let me = self.s.ids.scheduler(r);
                let handoff = room_handoff(me, self.ranks.frontend.generation(), key.room);
                let claimed = self.s.legs.claim(handoff, key.room, (id, side), now);
                if let Err(e) = claimed {
                    let _ = tx.send(StreamMsg::Bootstrap(e));
                    return;
                }
                let wr = WorkerRequest::HandoffSource {
                    id: handoff,
                    request: request.clone(),
                };
                self.open((r, Kind::PrefillLeg, Some(handoff)), request, tokens, tx);
                self.edge.started(WorkerId(r as u32), id);
                self.send(r, wr);
            }
            Side::Decode => {
                let Some(port) = key.port else {
                    let _ = tx.send(StreamMsg::Refused(ProxyError::BadParam {
                        field: "bootstrap_port",
                        why: "is required by a decode engine of its own".into(),
                    }));
                    return;
                };
                let r = self.pick(None);
                let p = PendingLeg {
                    rank: r,
                    room: key.room,
                    tokens: tokens.to_vec(),
                    request,
                    tx,
                };
                self.dial((r, key.host, port), Waiting::Leg(p));
            }
        }
    }

    /// The decode leg's rank reached the prefill engine `hello`: be the
    /// destination of the room's handoff.
    pub(super) fn leg_linked(&mut self, p: PendingLeg, hello: PeerHello) {
        let handoff = room_handoff(hello.worker, hello.generation, p.room);
        let id = p.request.id;
        let now = self.s.clock.now();
        if let Err(e) = self.s.legs.claim(handoff, p.room, (id, Side::Decode), now) {
            let _ = p.tx.send(StreamMsg::Bootstrap(e));
            return;
        }
        let wr = WorkerRequest::HandoffDestination {
            id: handoff,
            request: p.request.clone(),
            source: hello.worker,
            ready: None,
        };
        let source = hello.worker;
        self.open(
            (p.rank, Kind::Decode { source }, Some(handoff)),
            p.request,
            &p.tokens,
            p.tx,
        );
        self.edge.tell(id, StreamMsg::Started { cached_tokens: 0 });
        self.send(p.rank, wr);
    }

    /// The prefill leg's source ended: its KV was sent (the one token the
    /// prefill sampled), or it ended for `why`.
    pub(super) fn prefill_leg_ended(&mut self, id: RequestId, why: Option<CancelReason>) {
        match why {
            None => {
                self.edge.tell(id, StreamMsg::Tokens(1));
                self.end(id, StreamMsg::Finished);
            }
            Some(why) => self.end(id, StreamMsg::Failed(FailureReason::from(why))),
        }
    }

    /// A role moved on a rank: a prefill leg's source that left
    /// `NotStarted` has its decode's reservation.
    pub(super) fn leg_moved(&mut self, t: &Transition) {
        if t.role == Role::Source
            && t.from == RoleState::Source(SourceState::NotStarted)
            && t.to != t.from
        {
            self.s.legs.reserved(t.request);
        }
    }

    /// Prefill legs whose decode did not reserve within the bootstrap
    /// timeout: each source is cancelled on its rank (it ends there once,
    /// with [`CancelReason::LeaseExpired`]) and the leg fails now with
    /// SGLang's bootstrap-timeout error, counted as that reason.
    pub(super) fn expire_legs(&mut self) {
        let now = self.s.clock.now();
        for (id, handoff) in self.s.legs.expire(now) {
            let Some(f) = self.flows.get(&id) else {
                continue;
            };
            let to = self.s.ids.scheduler(f.rank);
            let reason = CancelReason::LeaseExpired;
            let _ = self.ranks.frontend.send(
                to,
                Frame::Cancel {
                    id: handoff,
                    reason,
                },
            );
            let why = FailureReason::from(reason);
            self.s.metrics.request_failed(why);
            *self.summary.failed.entry(why.name()).or_default() += 1;
            let error = BootstrapError::Timeout {
                side: Side::Prefill,
                room: handoff.sequence(),
                after: self.s.legs.timeout(),
            };
            self.edge.ledger().note(
                crate::conformance::ConformanceKind::UnpairedLeg,
                Some(f.rank as u32),
                Some(id.0),
                crate::conformance::Detail::Room {
                    room: handoff.sequence(),
                    side: Side::Prefill.name(),
                },
            );
            self.end(id, StreamMsg::Bootstrap(error));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_legs_name_the_prefill_rank_its_incarnation_and_the_room() {
        let id = room_handoff(WorkerId(7 * 64), Generation(1_800_000_000), (1 << 63) - 5);
        assert_eq!(id.issuer(), WorkerId(7 * 64));
        assert_eq!(id.generation(), Generation(1_800_000_000));
        assert_eq!(id.sequence(), (1 << 63) - 5);
        assert_ne!(
            id,
            room_handoff(WorkerId(7 * 64), Generation(1_800_000_001), (1 << 63) - 5)
        );
    }
}

#[cfg(test)]
mod room_tests {
    use super::*;

    const T0: Instant = Instant::ZERO;

    fn secs(s: u64) -> Instant {
        T0 + Duration::from_secs(s)
    }

    fn h(room: u64) -> HandoffId {
        room_handoff(WorkerId(0), Generation(5), room)
    }

    #[test]
    fn an_open_or_remembered_room_is_refused_at_once() {
        let mut r = LegRooms::new(Duration::from_secs(2), 4);
        r.claim(h(7), 7, (RequestId(1), Side::Prefill), T0).unwrap();
        assert_eq!(
            r.claim(h(7), 7, (RequestId(2), Side::Prefill), T0),
            Err(BootstrapError::DuplicateRoom {
                side: Side::Prefill,
                room: 7
            })
        );
        r.ended(RequestId(1));
        assert_eq!(r.len(), 0);
        assert_eq!(
            r.claim(h(7), 7, (RequestId(3), Side::Prefill), T0),
            Err(BootstrapError::RoomReused {
                side: Side::Prefill,
                room: 7
            })
        );
        // Remembered for the last 4 legs only, as the ranks' tombstones.
        for room in 10..14 {
            r.claim(h(room), room, (RequestId(room), Side::Decode), T0)
                .unwrap();
        }
        assert!(r.claim(h(7), 7, (RequestId(20), Side::Decode), T0).is_ok());
        assert!(r.used.len() <= 4 && r.used.len() == r.used_set.len());
    }

    #[test]
    fn a_prefill_leg_expires_at_the_timeout_unless_reserved() {
        let mut r = LegRooms::new(Duration::from_secs(2), 64);
        r.claim(h(1), 1, (RequestId(1), Side::Prefill), T0).unwrap();
        r.claim(h(2), 2, (RequestId(2), Side::Prefill), T0).unwrap();
        r.claim(h(3), 3, (RequestId(3), Side::Decode), T0).unwrap();
        r.reserved(RequestId(2));
        assert!(r.expire(secs(1)).is_empty());
        assert_eq!(r.expire(secs(2)), vec![(RequestId(1), h(1))]);
        assert!(
            r.expire(secs(100)).is_empty(),
            "once; reserved and decode legs never"
        );
        assert_eq!(r.len(), 2);
        r.ended(RequestId(2));
        r.ended(RequestId(3));
        r.ended(RequestId(3));
        assert_eq!(r.len(), 0);
        assert!(r.deadlines.is_empty() && r.deadline_of.is_empty() && r.handoff_of.is_empty());
    }
}
