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
//! streams the client's tokens. What this does not model: a decode leg
//! for a prefill engine with several ranks must find the room's rank at
//! `bootstrap_port` plus `room % dp` (SGLang asks the bootstrap server
//! which rank holds the room).

use super::{Kind, PodDriver, Waiting};
use crate::director::dp_lb::RankRule;
use crate::director::StreamMsg;
use crate::openai::prompt::request_for;
use crate::sglang::bootstrap::{RoomKey, Side};
use crate::vllm::kv_transfer::ProxyError;
use handoff_core::{
    CancelReason, FailureReason, Generation, HandoffId, Instant, Request, RequestId, WorkerId,
    WorkerRequest,
};
use handoff_transport::{PeerHello, Transport};
use tokio::sync::mpsc::UnboundedSender;

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
