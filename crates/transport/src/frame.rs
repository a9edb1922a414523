//! What crosses a connection: [`Frame`]s. Worker reports travel as the
//! core's own [`WorkerEvent`]s, typed end to end.
//!
//! Times in events are [`handoff_core::Instant`]s on the *sender's* clock:
//! clocks are not shared across processes, so a receiver may compare times
//! from one worker with each other but must not mix them with its own.

use handoff_core::{CancelReason, HandoffId, HostFinal, HostOutput, HostStatus, Instant};
use handoff_core::{
    Generation, HandoffMsg, KvCapacitySnapshot, WorkerEvent, WorkerId, WorkerRequest,
};
use handoff_engine::HostOp;
use serde::{Deserialize, Serialize};

/// One unit on the wire.
///
/// `Hello`, `Bye` and `Ping` are transport control frames: transports send
/// them themselves and report them as [`crate::Incoming::PeerUp`] /
/// [`crate::Incoming::PeerLost`] (a `Ping` only keeps a connection alive),
/// never as [`crate::Incoming::Frame`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Frame {
    /// First frame on every connection, in both directions: who is speaking
    /// and which incarnation.
    Hello {
        /// The sender.
        worker: WorkerId,
        /// The sender's incarnation.
        generation: Generation,
        /// What the sender serves as, so a misconfigured deployment (a
        /// decode worker given as prefill) is refused at start.
        role: PeerRole,
    },
    /// A handoff fact between workers.
    Handoff(HandoffMsg),
    /// Work from the frontend to a worker.
    Request(WorkerRequest),
    /// A report from a worker to the frontend. `StartTransfer` never travels:
    /// the worker's own driver executes it.
    Event(WorkerEvent),
    /// A worker's drained state changed. Superseded by [`Frame::Final`]
    /// (this version's nodes send that instead); kept so that the variant
    /// indices of the frames after it stay as they are on the wire.
    Drained {
        /// The worker.
        worker: WorkerId,
        /// No runnable work, no retained ownership, no live role.
        drained: bool,
        /// Its occupancy at that moment.
        capacity: KvCapacitySnapshot,
    },
    /// Orderly shutdown of the connection.
    Bye,
    /// Virtual clock, coordinator to node: perform one engine operation.
    Host(HostOp),
    /// Virtual clock, node to coordinator: what the operation released.
    HostReply(HostReply),
    /// Virtual clock, coordinator to node: send your final state.
    FinalQuery,
    /// A node's final state (virtual clock: the answer to `FinalQuery`).
    Final(HostFinal),
    /// Wall clock, frontend to worker at the start of a session: model time
    /// zero is this moment (nanoseconds since the Unix epoch) and runs
    /// `speed_micros / 1e6` times faster than wall time, so that every
    /// process stamps its events on the frontend's clock. (An integer, so
    /// that every value on the wire is a speed: no NaN.)
    Clock {
        /// Model time zero, in Unix nanoseconds.
        origin_unix_nanos: u64,
        /// Model microseconds per wall second.
        speed_micros: u64,
    },
    /// Wall clock, worker to frontend: a transfer this worker timed ended
    /// at model time `at` (`ok`: the KV arrived), so that the frontend's
    /// recorder measures it as the engine's director does in replay.
    TransferDone {
        /// The attempt whose KV moved.
        id: HandoffId,
        /// Whether the KV arrived.
        ok: bool,
        /// When, on the frontend's clock.
        at: Instant,
    },
    /// Liveness, every TCP endpoint to every peer it is connected to, every
    /// [`crate::tcp::Liveness::ping_every`]: a transport control frame that
    /// says only "still here", so that a peer that stops (hung, stopped by
    /// a signal) is told from one that is merely idle.
    Ping,
    /// Wall clock, source worker to the worker reading attempt `id`'s KV:
    /// the source freed that KV early (lease expiry or cancel) at model
    /// time `at`, so a read of it that ends later read blocks the source
    /// may have given to another request. The engine knows this itself in
    /// replay (`handoff_engine`'s `reads.rs`); on the wall clock no one
    /// process sees both sides, so the source says it. Not a handoff fact:
    /// vLLM's prefill worker sends nothing when its lease expires, the
    /// reader just reads freed blocks.
    SourceReleased {
        /// The attempt whose source KV was freed.
        id: HandoffId,
        /// When, on the frontend's clock.
        at: Instant,
        /// When the source's worker first gave one of those blocks to
        /// another request (a second notice of the same release), if it
        /// did.
        reused_at: Option<Instant>,
        /// Freed by its lease's expiry (a read may outlive only that; after
        /// any other early release the read fails).
        expired: bool,
    },
    /// Frontend to worker: abandon attempt `id` here for `reason`, as the
    /// one-process engine delivers a client cancel to every role of the
    /// request's attempt (`handoff_engine`'s `Fault::Cancel`, applied as
    /// [`handoff_core::HostInput::Cancel`]). The role ends as any cancelled
    /// role does: a peer that must know hears it through the lifecycle's
    /// own facts. vLLM's API server aborts a request whose client went away
    /// (`vllm/entrypoints/utils.py`, `with_cancellation`; `AsyncLLM.generate`
    /// in `vllm/v1/engine/async_llm.py` aborts on `CancelledError`).
    Cancel {
        /// The attempt to abandon.
        id: HandoffId,
        /// Why, as the role records it.
        reason: CancelReason,
    },
    /// Wall clock, a destination worker to the source of a read it started
    /// (only from a node that confirms its sources, `WorkerNode::confirming_sources`
    /// in `handoff-live-adapter`): does your worker hold a live source role
    /// of attempt `id`? Real NIXL fails a read of blocks the remote agent
    /// never registered (`nixl_connector.py`, `_read_blocks`); in vLLM's
    /// source-first pull nothing else crosses from source to reader before
    /// the read ends, so without this a peer that only answers the
    /// transport's `Hello` would be "read" successfully.
    SourceQuery {
        /// The attempt whose KV is being read.
        id: HandoffId,
    },
    /// Wall clock, the answer to a [`Frame::SourceQuery`], to the worker
    /// that asked: whether this worker holds a live source role of `id`
    /// (nothing else about it).
    SourceAnswer {
        /// The attempt asked about.
        id: HandoffId,
        /// A live source role of `id` is held here.
        held: bool,
    },
}

/// What an endpoint serves as, announced in its `Hello`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PeerRole {
    /// The frontend (or virtual-clock coordinator).
    Frontend,
    /// A prefill (source) worker.
    Prefill,
    /// A decode (destination) worker.
    Decode,
    /// A worker that prefills and decodes, with no handoff.
    Aggregated,
    /// Not stated (tests, tools).
    Any,
}

impl PeerRole {
    /// Lower-case name, as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            PeerRole::Frontend => "frontend",
            PeerRole::Prefill => "prefill",
            PeerRole::Decode => "decode",
            PeerRole::Aggregated => "aggregated",
            PeerRole::Any => "unstated",
        }
    }
}

impl std::fmt::Display for PeerRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A node's answer to one engine operation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostReply {
    /// Outputs the host released, in order.
    #[serde(deserialize_with = "handoff_core::serde_vec::deserialize")]
    pub outputs: Vec<HostOutput>,
    /// The host's status afterwards.
    pub status: HostStatus,
}

impl Frame {
    /// Stable name for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Frame::Hello { .. } => "Hello",
            Frame::Handoff(_) => "Handoff",
            Frame::Request(_) => "Request",
            Frame::Event(_) => "Event",
            Frame::Drained { .. } => "Drained",
            Frame::Bye => "Bye",
            Frame::Host(_) => "Host",
            Frame::HostReply(_) => "HostReply",
            Frame::FinalQuery => "FinalQuery",
            Frame::Final(_) => "Final",
            Frame::Clock { .. } => "Clock",
            Frame::TransferDone { .. } => "TransferDone",
            Frame::Ping => "Ping",
            Frame::SourceReleased { .. } => "SourceReleased",
            Frame::Cancel { .. } => "Cancel",
            Frame::SourceQuery { .. } => "SourceQuery",
            Frame::SourceAnswer { .. } => "SourceAnswer",
        }
    }

    /// Whether the transport itself owns this frame (`Hello`, `Bye`,
    /// `Ping`).
    pub fn is_control(&self) -> bool {
        matches!(self, Frame::Hello { .. } | Frame::Bye | Frame::Ping)
    }
}

/// Sample values and proptest strategies shared by the crate's tests.
#[cfg(test)]
pub(crate) mod samples {
    use super::*;
    use handoff_core::{
        CancelReason, DestinationEventKind, DestinationReservationId, DestinationState, DropReason,
        Duration, FactKind, HandoffId, Instant, KvEvent, KvEventData, LifecycleEvent, MsgBody,
        OwnershipDelta, Request, RequestId, ReservationSummary, Role, RoleState, SessionId,
        SourceEventKind, SourceReady, SourceState, TokenEmission, Transition, TransitionError,
    };
    use proptest::prelude::*;

    pub(crate) fn request(id: u64) -> Request {
        Request {
            id: RequestId(id),
            prompt_tokens: 1000,
            max_output_tokens: 32,
            prefix_hashes: vec![1, 2, 3],
            hash_block_tokens: 512,
            session: Some(SessionId(4)),
            arrival: Instant(12_345),
            // Odd ids run on an adapter, so frames carry both forms.
            lora: (id % 2 == 1).then(|| handoff_core::LoraAdapter {
                id: 3,
                name: "sql-adapter".into(),
            }),
        }
    }

    pub(crate) fn handoff(seq: u64) -> HandoffMsg {
        HandoffMsg {
            id: HandoffId((7u128 << 96) | (1u128 << 64) | u128::from(seq)),
            generation: Generation(1),
            body: MsgBody::SourceReady {
                blocks: 4,
                tokens: 64,
            },
        }
    }

    /// One frame of every kind and every event variant.
    pub(crate) fn every_frame() -> Vec<Frame> {
        let id = HandoffId(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        let cap = KvCapacitySnapshot {
            total_blocks: 100,
            active_blocks: 3,
            ..Default::default()
        };
        let mut v = vec![
            Frame::Hello {
                worker: WorkerId(3),
                generation: Generation(9),
                role: PeerRole::Any,
            },
            Frame::Handoff(handoff(1)),
            Frame::Handoff(HandoffMsg {
                id,
                generation: Generation(2),
                body: MsgBody::DestinationReserved {
                    summary: ReservationSummary {
                        reservation: Some(DestinationReservationId(5)),
                        physical_blocks: 3,
                        matched_prefix_tokens: 16,
                        transfer_tokens: 48,
                        transfer_blocks: 3,
                        request_slot: true,
                        decode_headroom_tokens: 128,
                    },
                },
            }),
            Frame::Handoff(HandoffMsg {
                id,
                generation: Generation(2),
                body: MsgBody::Abort {
                    reason: CancelReason::LeaseExpired,
                    to: Role::Destination,
                },
            }),
            Frame::Ping,
            Frame::SourceReleased {
                id,
                at: Instant(78),
                reused_at: Some(Instant(80)),
                expired: true,
            },
            Frame::Cancel {
                id,
                reason: CancelReason::Client,
            },
            Frame::SourceQuery { id },
            Frame::SourceAnswer { id, held: true },
            Frame::Request(WorkerRequest::Ordinary(request(1))),
            Frame::Request(WorkerRequest::HandoffSource {
                id,
                request: request(2),
            }),
            Frame::Request(WorkerRequest::HandoffDestination {
                id,
                request: request(3),
                source: WorkerId(1),
                ready: Some(SourceReady {
                    blocks: 2,
                    tokens: 30,
                }),
            }),
            Frame::Request(WorkerRequest::CloseSession(handoff_core::SessionId(4))),
            Frame::Request(WorkerRequest::EvictSession(handoff_core::SessionId(4))),
            Frame::Request(WorkerRequest::PushSource {
                id,
                request: RequestId(1 << 63),
                session: handoff_core::SessionId(4),
                lock: handoff_core::SourceLeaseId(2),
                tokens: 4096,
            }),
            Frame::Request(WorkerRequest::PushDestination {
                id,
                request: RequestId(1 << 63),
                session: handoff_core::SessionId(4),
                tokens: 4096,
                source: WorkerId(2),
            }),
            Frame::Drained {
                worker: WorkerId(2),
                drained: true,
                capacity: cap,
            },
            Frame::Bye,
        ];
        let events = [
            WorkerEvent::Transition(Transition {
                id,
                request: RequestId(1),
                worker: WorkerId(2),
                role: Role::Source,
                event: LifecycleEvent::Source(SourceEventKind::PrefillPinned),
                from: RoleState::Source(SourceState::Computing),
                to: RoleState::Source(SourceState::Pinned),
                delta: OwnershipDelta {
                    pinned: 4,
                    reserved: 0,
                    active: -4,
                },
                at: Instant(77),
            }),
            WorkerEvent::Step {
                start: Instant(1),
                steps: 2,
                duration: Duration::from_nanos(3),
                first_step: Duration::from_nanos(1),
                last_step: Duration::from_nanos(2),
                passes: vec![Duration::from_nanos(1), Duration::from_nanos(2)],
                prefill_tokens: 100,
            },
            WorkerEvent::Tokens {
                emissions: vec![
                    TokenEmission {
                        request: RequestId(1),
                        tokens: 2,
                        first: true,
                    },
                    TokenEmission {
                        request: RequestId(2),
                        tokens: 1,
                        first: false,
                    },
                ],
            },
            WorkerEvent::FirstTokenFromPrefill {
                request: RequestId(1),
                at: Instant(8),
            },
            WorkerEvent::RequestFinished {
                request: RequestId(1),
                at: Instant(9),
            },
            WorkerEvent::Preempted {
                request: RequestId(2),
                at: Instant(10),
            },
            WorkerEvent::PrefillPinned {
                id,
                request: RequestId(1),
                blocks: 4,
                tokens: 64,
                at: Instant(11),
            },
            WorkerEvent::StartTransfer {
                id,
                request: RequestId(1),
                source: WorkerId(0),
                destination: WorkerId(1),
                tokens: 64,
                blocks: 4,
                at: Instant(11),
            },
            WorkerEvent::KvChunkReady {
                id,
                request: RequestId(1),
                source: WorkerId(0),
                destination: WorkerId(1),
                tokens: 32,
                at: Instant(10),
            },
            WorkerEvent::RoleEnded {
                id,
                request: RequestId(1),
                role: Role::Destination,
                reason: Some(CancelReason::PeerRestarted),
                at: Instant(12),
            },
            WorkerEvent::Session {
                event: handoff_core::session::SessionEvent::BypassMiss {
                    session: handoff_core::SessionId(4),
                    request: RequestId(1),
                    reason: handoff_core::session::MissReason::SeqlenShort,
                },
                at: Instant(12),
            },
            WorkerEvent::Kv {
                event: KvEvent {
                    event_id: 5,
                    data: KvEventData::Stored {
                        parent_hash: Some(1),
                        block_hashes: vec![2, 3],
                    },
                },
                at: Instant(13),
            },
            WorkerEvent::Kv {
                event: KvEvent {
                    event_id: 6,
                    data: KvEventData::Cleared,
                },
                at: Instant(14),
            },
            WorkerEvent::Dropped {
                from: WorkerId(1),
                id,
                fact: FactKind::ReaderCompleted,
                reason: DropReason::OldGeneration,
                at: Instant(15),
            },
            WorkerEvent::StaleRead {
                id,
                request: RequestId(3),
                reused: true,
                at: Instant(15),
            },
            WorkerEvent::SourceKvReused {
                id,
                at: Instant(15),
            },
            WorkerEvent::Dropped {
                from: WorkerId(1),
                id,
                fact: FactKind::SourceReady,
                reason: DropReason::Rejected(TransitionError::Invalid {
                    id,
                    state: RoleState::Destination(DestinationState::NotRouted),
                    event: LifecycleEvent::Destination(DestinationEventKind::SourceReady),
                }),
                at: Instant(16),
            },
        ];
        v.extend(events.into_iter().map(Frame::Event));
        // Engine operations: the lockstep group's two phases.
        let (now, end) = (Instant(7), Instant(u64::MAX));
        let ops = [HostOp::StepPass { now }, HostOp::EndPass { now, end }];
        v.extend(ops.into_iter().map(Frame::Host));
        v
    }

    fn arb_role() -> impl Strategy<Value = Role> {
        prop_oneof![Just(Role::Source), Just(Role::Destination)]
    }

    fn arb_reason() -> impl Strategy<Value = CancelReason> {
        prop_oneof![
            Just(CancelReason::Client),
            Just(CancelReason::PeerLost),
            Just(CancelReason::Teardown),
            Just(CancelReason::TransferFailed),
        ]
    }

    fn arb_msg() -> impl Strategy<Value = HandoffMsg> {
        let body = prop_oneof![
            (any::<u64>(), any::<u64>())
                .prop_map(|(blocks, tokens)| MsgBody::SourceReady { blocks, tokens }),
            (any::<u64>(), any::<bool>()).prop_map(|(b, slot)| MsgBody::DestinationReserved {
                summary: ReservationSummary {
                    reservation: Some(DestinationReservationId(b)),
                    physical_blocks: b,
                    request_slot: slot,
                    ..Default::default()
                }
            }),
            Just(MsgBody::ReceiveCompleted),
            Just(MsgBody::ReaderCompleted),
            any::<u64>().prop_map(|extend_nanos| MsgBody::LeaseRenewal { extend_nanos }),
            (arb_reason(), arb_role()).prop_map(|(reason, to)| MsgBody::Abort { reason, to }),
        ];
        (any::<u128>(), any::<u32>(), body).prop_map(|(id, g, body)| HandoffMsg {
            id: HandoffId(id),
            generation: Generation(g),
            body,
        })
    }

    fn arb_request() -> impl Strategy<Value = Request> {
        (
            any::<u64>(),
            any::<u32>(),
            proptest::collection::vec(any::<u64>(), 0..8),
            proptest::option::of(any::<u64>()),
        )
            .prop_map(|(id, prompt, hashes, session)| Request {
                id: RequestId(id),
                prompt_tokens: prompt,
                max_output_tokens: prompt / 3,
                prefix_hashes: hashes,
                hash_block_tokens: 512,
                session: session.map(SessionId),
                arrival: Instant(id ^ 0x55),
                lora: None,
            })
    }

    fn arb_lifecycle() -> impl Strategy<Value = (Role, LifecycleEvent, RoleState, RoleState)> {
        prop_oneof![
            (
                prop::sample::select(SourceEventKind::ALL.to_vec()),
                prop::sample::select(SourceState::ALL.to_vec()),
                prop::sample::select(SourceState::ALL.to_vec()),
            )
                .prop_map(|(e, f, t)| (Role::Source, e.into(), f.into(), t.into())),
            (
                prop::sample::select(DestinationEventKind::ALL.to_vec()),
                prop::sample::select(DestinationState::ALL.to_vec()),
                prop::sample::select(DestinationState::ALL.to_vec()),
            )
                .prop_map(|(e, f, t)| (
                    Role::Destination,
                    e.into(),
                    f.into(),
                    t.into()
                )),
        ]
    }

    fn arb_drop_reason() -> impl Strategy<Value = DropReason> {
        prop_oneof![
            Just(DropReason::OldGeneration),
            Just(DropReason::Unknown),
            Just(DropReason::WrongPeer),
            (any::<u128>(), arb_lifecycle()).prop_map(|(id, (_, event, state, _))| {
                DropReason::Rejected(TransitionError::Invalid {
                    id: HandoffId(id),
                    state,
                    event,
                })
            }),
            (any::<u128>(), arb_lifecycle()).prop_map(|(id, (_, event, _, _))| {
                DropReason::Rejected(TransitionError::Stale {
                    id: HandoffId(id),
                    event,
                })
            }),
        ]
    }

    fn arb_event() -> impl Strategy<Value = WorkerEvent> {
        prop_oneof![
            (any::<u128>(), any::<u64>(), arb_lifecycle()).prop_map(
                |(id, at, (role, event, from, to))| WorkerEvent::Transition(Transition {
                    id: HandoffId(id),
                    request: RequestId(at),
                    worker: WorkerId(at as u32),
                    role,
                    event,
                    from,
                    to,
                    delta: OwnershipDelta {
                        pinned: at as i64,
                        reserved: -(at as i64 >> 3),
                        active: 0,
                    },
                    at: Instant(at),
                })
            ),
            (any::<u64>(), any::<u64>(), any::<u32>()).prop_map(|(start, steps, ns)| {
                WorkerEvent::Step {
                    start: Instant(start),
                    steps,
                    duration: Duration::from_nanos(u64::from(ns) * 3),
                    first_step: Duration::from_nanos(u64::from(ns)),
                    last_step: Duration::from_nanos(u64::from(ns) + 1),
                    passes: (0..steps % 3)
                        .map(|i| Duration::from_nanos(u64::from(ns) + i))
                        .collect(),
                    prefill_tokens: steps ^ start,
                }
            }),
            proptest::collection::vec((any::<u64>(), any::<u32>(), any::<bool>()), 0..5).prop_map(
                |v| WorkerEvent::Tokens {
                    emissions: v
                        .into_iter()
                        .map(|(r, tokens, first)| TokenEmission {
                            request: RequestId(r),
                            tokens,
                            first,
                        })
                        .collect(),
                }
            ),
            (any::<u64>(), proptest::collection::vec(any::<u64>(), 0..6)).prop_map(|(e, h)| {
                WorkerEvent::Kv {
                    event: KvEvent {
                        event_id: e,
                        data: KvEventData::Removed { block_hashes: h },
                    },
                    at: Instant(e),
                }
            }),
            (
                any::<u128>(),
                proptest::option::of(arb_reason()),
                arb_role()
            )
                .prop_map(|(id, reason, role)| WorkerEvent::RoleEnded {
                    id: HandoffId(id),
                    request: RequestId(id as u64),
                    role,
                    reason,
                    at: Instant(1),
                }),
            (
                any::<u128>(),
                prop::sample::select(FactKind::ALL.to_vec()),
                arb_drop_reason()
            )
                .prop_map(|(id, fact, reason)| WorkerEvent::Dropped {
                    from: WorkerId(id as u32),
                    id: HandoffId(id),
                    fact,
                    reason,
                    at: Instant(id as u64),
                }),
        ]
    }

    /// Any frame, control frames included.
    pub(crate) fn arb_frame() -> impl Strategy<Value = Frame> {
        prop_oneof![
            (any::<u32>(), any::<u32>()).prop_map(|(w, g)| Frame::Hello {
                worker: WorkerId(w),
                generation: Generation(g),
                role: PeerRole::Any,
            }),
            arb_msg().prop_map(Frame::Handoff),
            (arb_request(), any::<u128>(), any::<u32>()).prop_map(|(r, id, w)| {
                match w % 3 {
                    0 => Frame::Request(WorkerRequest::Ordinary(r)),
                    1 => Frame::Request(WorkerRequest::HandoffSource {
                        id: HandoffId(id),
                        request: r,
                    }),
                    _ => Frame::Request(WorkerRequest::HandoffDestination {
                        id: HandoffId(id),
                        request: r,
                        source: WorkerId(w),
                        ready: None,
                    }),
                }
            }),
            arb_event().prop_map(Frame::Event),
            (any::<u64>(), any::<bool>()).prop_map(|(b, drained)| Frame::Drained {
                worker: WorkerId(b as u32),
                drained,
                capacity: KvCapacitySnapshot {
                    total_blocks: b,
                    ..Default::default()
                },
            }),
            Just(Frame::Bye),
            (any::<u128>(), arb_reason()).prop_map(|(id, reason)| Frame::Cancel {
                id: HandoffId(id),
                reason,
            }),
            any::<u128>().prop_map(|id| Frame::SourceQuery { id: HandoffId(id) }),
            (any::<u128>(), any::<bool>()).prop_map(|(id, held)| Frame::SourceAnswer {
                id: HandoffId(id),
                held,
            }),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::samples::every_frame;
    use super::*;
    use std::collections::BTreeSet;

    /// Which [`WorkerEvent`] variant `e` is; exhaustive, so a new variant
    /// must be added here (and to the samples).
    fn variant(e: &WorkerEvent) -> &'static str {
        match e {
            WorkerEvent::Transition(_) => "Transition",
            WorkerEvent::Step { .. } => "Step",
            WorkerEvent::Tokens { .. } => "Tokens",
            WorkerEvent::FirstTokenFromPrefill { .. } => "FirstTokenFromPrefill",
            WorkerEvent::RequestFinished { .. } => "RequestFinished",
            WorkerEvent::Preempted { .. } => "Preempted",
            WorkerEvent::PrefillPinned { .. } => "PrefillPinned",
            WorkerEvent::StartTransfer { .. } => "StartTransfer",
            WorkerEvent::KvChunkReady { .. } => "KvChunkReady",
            WorkerEvent::RoleEnded { .. } => "RoleEnded",
            WorkerEvent::Kv { .. } => "Kv",
            WorkerEvent::Session { .. } => "Session",
            WorkerEvent::Dropped { .. } => "Dropped",
            WorkerEvent::StaleRead { .. } => "StaleRead",
            WorkerEvent::SourceKvReused { .. } => "SourceKvReused",
        }
    }

    #[test]
    fn samples_cover_every_frame_and_event_variant() {
        let frames = every_frame();
        let kinds: BTreeSet<&str> = frames.iter().map(Frame::name).collect();
        assert_eq!(kinds.len(), 12, "{kinds:?}");
        let events: BTreeSet<&str> = frames
            .iter()
            .filter_map(|f| match f {
                Frame::Event(e) => Some(variant(e)),
                _ => None,
            })
            .collect();
        assert_eq!(events.len(), 15, "{events:?}");
    }

    /// Core types no frame carries yet still serialise (a driver may ship
    /// them); they round-trip through the codec's bincode configuration.
    #[test]
    fn transmits_and_stats_round_trip() {
        fn round_trip<T>(v: &T) -> T
        where
            T: Serialize + for<'de> Deserialize<'de>,
        {
            let cfg = bincode::config::standard();
            let bytes = bincode::serde::encode_to_vec(v, cfg).expect("encodes");
            let (back, used) = bincode::serde::decode_from_slice(&bytes, cfg).expect("decodes");
            assert_eq!(used, bytes.len());
            back
        }
        let t = handoff_core::Transmit {
            to: WorkerId(4),
            msg: super::samples::handoff(3),
            at: handoff_core::Instant(99),
        };
        assert_eq!(round_trip(&t), t);
        let stats = handoff_core::WorkerStats {
            applied: 7,
            stale: 2,
            early_dropped: 1,
            ..Default::default()
        };
        assert_eq!(round_trip(&stats), stats);
    }

    #[test]
    fn only_hello_bye_and_ping_are_control() {
        for f in every_frame() {
            assert_eq!(
                f.is_control(),
                matches!(f.name(), "Hello" | "Bye" | "Ping"),
                "{}",
                f.name()
            );
        }
    }
}
