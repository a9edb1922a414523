//! What crosses a connection: [`Frame`]s, and [`WireEvent`], the owned and
//! serialisable mirror of the [`WorkerEvent`]s a frontend needs.
//!
//! Times travel as nanoseconds on the *sender's* clock (`*_nanos`): clocks
//! are not shared across processes, so a receiver may compare times from one
//! worker with each other but must not mix them with its own.

use handoff_core::{
    CancelReason, DropReason, Generation, HandoffId, HandoffMsg, KvCapacitySnapshot, KvEvent,
    OwnershipDelta, RequestId, Role, WorkerEvent, WorkerId, WorkerRequest,
};
use serde::{Deserialize, Serialize};

/// One unit on the wire.
///
/// `Hello` and `Bye` are transport control frames: transports send them
/// themselves and report them as [`crate::Incoming::PeerUp`] /
/// [`crate::Incoming::PeerLost`], never as [`crate::Incoming::Frame`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Frame {
    /// First frame on every connection, in both directions: who is speaking
    /// and which incarnation.
    Hello {
        /// The sender.
        worker: WorkerId,
        /// The sender's incarnation.
        generation: Generation,
    },
    /// A handoff fact between workers.
    Handoff(HandoffMsg),
    /// Work from the frontend to a worker.
    Request(WorkerRequest),
    /// A report from a worker to the frontend.
    Event(WireEvent),
    /// Orderly shutdown of the connection.
    Bye,
}

impl Frame {
    /// Stable name for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Frame::Hello { .. } => "Hello",
            Frame::Handoff(_) => "Handoff",
            Frame::Request(_) => "Request",
            Frame::Event(_) => "Event",
            Frame::Bye => "Bye",
        }
    }

    /// Whether the transport itself owns this frame (`Hello`, `Bye`).
    pub fn is_control(&self) -> bool {
        matches!(self, Frame::Hello { .. } | Frame::Bye)
    }
}

/// What a frontend needs from a [`WorkerEvent`], owned so it can be
/// serialised. Core names (`&'static str`) become `String`s.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireEvent {
    /// A role moved (mirror of [`handoff_core::Transition`]).
    Transition {
        /// The attempt.
        id: HandoffId,
        /// The request.
        request: RequestId,
        /// The worker the role lives on.
        worker: WorkerId,
        /// Which role.
        role: Role,
        /// The fact that caused it.
        event: String,
        /// State before.
        from: String,
        /// State after.
        to: String,
        /// Ownership moved on the worker.
        delta: OwnershipDelta,
        /// When, on the worker's clock.
        at_nanos: u64,
    },
    /// A step ran; the `Tokens` events that follow belong to it.
    Step {
        /// Start of the first pass.
        start_nanos: u64,
        /// Passes covered.
        steps: u64,
        /// Total time.
        duration_nanos: u64,
        /// First pass.
        first_step_nanos: u64,
        /// Last pass.
        last_step_nanos: u64,
        /// Prefill tokens computed.
        prefill_tokens: u64,
    },
    /// Output tokens of the step just reported.
    Tokens {
        /// The request.
        request: RequestId,
        /// How many (one per pass).
        tokens: u32,
        /// Whether the first is the request's first output token.
        first: bool,
    },
    /// A request finished decoding and freed its KV.
    RequestFinished {
        /// The request.
        request: RequestId,
        /// When.
        at_nanos: u64,
    },
    /// A request lost its KV and will recompute / was retracted.
    Preempted {
        /// The request.
        request: RequestId,
        /// When.
        at_nanos: u64,
    },
    /// A handoff prefill completed and pinned.
    PrefillPinned {
        /// The attempt.
        id: HandoffId,
        /// The request.
        request: RequestId,
        /// Blocks held.
        blocks: u64,
        /// Tokens held.
        tokens: u64,
        /// When.
        at_nanos: u64,
    },
    /// A role ended; `reason` is `None` on success.
    RoleEnded {
        /// The attempt.
        id: HandoffId,
        /// The request.
        request: RequestId,
        /// Which role.
        role: Role,
        /// Why it ended early, if it did.
        reason: Option<CancelReason>,
        /// When.
        at_nanos: u64,
    },
    /// A KV cache event.
    Kv {
        /// The event.
        event: KvEvent,
        /// When.
        at_nanos: u64,
    },
    /// An incoming fact was dropped by the worker.
    Dropped {
        /// Its sender.
        from: WorkerId,
        /// Its attempt.
        id: HandoffId,
        /// Its name.
        fact: String,
        /// Why, as [`drop_reason_text`] renders it.
        reason: String,
        /// When.
        at_nanos: u64,
    },
    /// The sender's physical occupancy now.
    Capacity(KvCapacitySnapshot),
    /// End-of-run report: whether `worker` holds no ownership any more.
    Drained {
        /// The worker.
        worker: WorkerId,
        /// No runnable work and no retained ownership.
        drained: bool,
        /// Its occupancy at the end.
        capacity: KvCapacitySnapshot,
    },
}

fn nanos(d: handoff_core::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Stable text of a [`DropReason`] for the wire and logs.
pub fn drop_reason_text(reason: &DropReason) -> String {
    match reason {
        DropReason::OldGeneration => "old-generation".to_owned(),
        DropReason::Rejected(e) => format!("rejected: {e}"),
        DropReason::Unknown => "unknown".to_owned(),
        DropReason::WrongPeer => "wrong-peer".to_owned(),
    }
}

impl WireEvent {
    /// The wire form of `ev`, or `None` for events that stay on the worker
    /// (`StartTransfer` is executed by the worker's own driver).
    pub fn from_worker_event(ev: &WorkerEvent) -> Option<WireEvent> {
        Some(match ev {
            WorkerEvent::Transition(t) => WireEvent::Transition {
                id: t.id,
                request: t.request,
                worker: t.worker,
                role: t.role,
                event: t.event.to_owned(),
                from: t.from.to_owned(),
                to: t.to.to_owned(),
                delta: t.delta,
                at_nanos: t.at.as_nanos(),
            },
            WorkerEvent::Step {
                start,
                steps,
                duration,
                first_step,
                last_step,
                prefill_tokens,
            } => WireEvent::Step {
                start_nanos: start.as_nanos(),
                steps: *steps,
                duration_nanos: nanos(*duration),
                first_step_nanos: nanos(*first_step),
                last_step_nanos: nanos(*last_step),
                prefill_tokens: *prefill_tokens,
            },
            WorkerEvent::Tokens {
                request,
                tokens,
                first,
            } => WireEvent::Tokens {
                request: *request,
                tokens: *tokens,
                first: *first,
            },
            WorkerEvent::RequestFinished { request, at } => WireEvent::RequestFinished {
                request: *request,
                at_nanos: at.as_nanos(),
            },
            WorkerEvent::Preempted { request, at } => WireEvent::Preempted {
                request: *request,
                at_nanos: at.as_nanos(),
            },
            WorkerEvent::PrefillPinned {
                id,
                request,
                blocks,
                tokens,
                at,
            } => WireEvent::PrefillPinned {
                id: *id,
                request: *request,
                blocks: *blocks,
                tokens: *tokens,
                at_nanos: at.as_nanos(),
            },
            WorkerEvent::StartTransfer { .. } => return None,
            WorkerEvent::RoleEnded {
                id,
                request,
                role,
                reason,
                at,
            } => WireEvent::RoleEnded {
                id: *id,
                request: *request,
                role: *role,
                reason: *reason,
                at_nanos: at.as_nanos(),
            },
            WorkerEvent::Kv { event, at } => WireEvent::Kv {
                event: event.clone(),
                at_nanos: at.as_nanos(),
            },
            WorkerEvent::Dropped {
                from,
                id,
                fact,
                reason,
                at,
            } => WireEvent::Dropped {
                from: *from,
                id: *id,
                fact: (*fact).to_owned(),
                reason: drop_reason_text(reason),
                at_nanos: at.as_nanos(),
            },
        })
    }

    /// Stable name for logs.
    pub fn name(&self) -> &'static str {
        match self {
            WireEvent::Transition { .. } => "Transition",
            WireEvent::Step { .. } => "Step",
            WireEvent::Tokens { .. } => "Tokens",
            WireEvent::RequestFinished { .. } => "RequestFinished",
            WireEvent::Preempted { .. } => "Preempted",
            WireEvent::PrefillPinned { .. } => "PrefillPinned",
            WireEvent::RoleEnded { .. } => "RoleEnded",
            WireEvent::Kv { .. } => "Kv",
            WireEvent::Dropped { .. } => "Dropped",
            WireEvent::Capacity(_) => "Capacity",
            WireEvent::Drained { .. } => "Drained",
        }
    }
}

/// Sample values and proptest strategies shared by the crate's tests.
#[cfg(test)]
pub(crate) mod samples {
    use super::*;
    use handoff_core::{
        CancelReason, Instant, KvEventData, MsgBody, ReservationSummary, SessionId, SourceReady,
    };
    use handoff_core::{DestinationReservationId, Request};
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
            Frame::Bye,
        ];
        let events = [
            WireEvent::Transition {
                id,
                request: RequestId(1),
                worker: WorkerId(2),
                role: Role::Source,
                event: "Pinned".into(),
                from: "Computing".into(),
                to: "Held".into(),
                delta: OwnershipDelta {
                    pinned: 4,
                    reserved: 0,
                    active: -4,
                },
                at_nanos: 77,
            },
            WireEvent::Step {
                start_nanos: 1,
                steps: 2,
                duration_nanos: 3,
                first_step_nanos: 1,
                last_step_nanos: 2,
                prefill_tokens: 100,
            },
            WireEvent::Tokens {
                request: RequestId(1),
                tokens: 2,
                first: true,
            },
            WireEvent::RequestFinished {
                request: RequestId(1),
                at_nanos: 9,
            },
            WireEvent::Preempted {
                request: RequestId(2),
                at_nanos: 10,
            },
            WireEvent::PrefillPinned {
                id,
                request: RequestId(1),
                blocks: 4,
                tokens: 64,
                at_nanos: 11,
            },
            WireEvent::RoleEnded {
                id,
                request: RequestId(1),
                role: Role::Destination,
                reason: Some(CancelReason::PeerRestarted),
                at_nanos: 12,
            },
            WireEvent::Kv {
                event: KvEvent {
                    event_id: 5,
                    data: KvEventData::Stored {
                        parent_hash: Some(1),
                        block_hashes: vec![2, 3],
                    },
                },
                at_nanos: 13,
            },
            WireEvent::Kv {
                event: KvEvent {
                    event_id: 6,
                    data: KvEventData::Cleared,
                },
                at_nanos: 14,
            },
            WireEvent::Dropped {
                from: WorkerId(1),
                id,
                fact: "ReaderCompleted".into(),
                reason: "old-generation".into(),
                at_nanos: 15,
            },
            WireEvent::Capacity(cap),
            WireEvent::Drained {
                worker: WorkerId(2),
                drained: true,
                capacity: cap,
            },
        ];
        v.extend(events.into_iter().map(Frame::Event));
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
            })
    }

    fn arb_event() -> impl Strategy<Value = WireEvent> {
        prop_oneof![
            (any::<u128>(), any::<u64>(), "[a-zA-Z]{0,12}", arb_role()).prop_map(
                |(id, at, name, role)| WireEvent::Transition {
                    id: HandoffId(id),
                    request: RequestId(at),
                    worker: WorkerId(at as u32),
                    role,
                    event: name.clone(),
                    from: name.to_lowercase(),
                    to: name.to_uppercase(),
                    delta: OwnershipDelta {
                        pinned: at as i64,
                        reserved: -(at as i64 >> 3),
                        active: 0,
                    },
                    at_nanos: at,
                }
            ),
            (any::<u64>(), any::<u32>(), any::<bool>()).prop_map(|(r, tokens, first)| {
                WireEvent::Tokens {
                    request: RequestId(r),
                    tokens,
                    first,
                }
            }),
            (any::<u64>(), proptest::collection::vec(any::<u64>(), 0..6)).prop_map(|(e, h)| {
                WireEvent::Kv {
                    event: KvEvent {
                        event_id: e,
                        data: KvEventData::Removed { block_hashes: h },
                    },
                    at_nanos: e,
                }
            }),
            (
                any::<u128>(),
                proptest::option::of(arb_reason()),
                arb_role()
            )
                .prop_map(|(id, reason, role)| WireEvent::RoleEnded {
                    id: HandoffId(id),
                    request: RequestId(id as u64),
                    role,
                    reason,
                    at_nanos: 1,
                }),
            (any::<u64>(), any::<bool>()).prop_map(|(b, drained)| WireEvent::Drained {
                worker: WorkerId(b as u32),
                drained,
                capacity: KvCapacitySnapshot {
                    total_blocks: b,
                    ..Default::default()
                },
            }),
        ]
    }

    /// Any frame, control frames included.
    pub(crate) fn arb_frame() -> impl Strategy<Value = Frame> {
        prop_oneof![
            (any::<u32>(), any::<u32>()).prop_map(|(w, g)| Frame::Hello {
                worker: WorkerId(w),
                generation: Generation(g),
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
            Just(Frame::Bye),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_core::{Duration, Instant, KvEventData, Transition, TransitionError};

    #[test]
    fn start_transfer_stays_local() {
        let ev = WorkerEvent::StartTransfer {
            id: HandoffId(1),
            request: RequestId(1),
            source: WorkerId(0),
            destination: WorkerId(1),
            tokens: 10,
            blocks: 1,
            at: Instant(5),
        };
        assert_eq!(WireEvent::from_worker_event(&ev), None);
    }

    #[test]
    fn transition_names_become_owned() {
        let t = Transition {
            id: HandoffId(9),
            request: RequestId(2),
            worker: WorkerId(1),
            role: Role::Destination,
            event: "Reserved",
            from: "Reserving",
            to: "Reserved",
            delta: OwnershipDelta {
                pinned: 0,
                reserved: 3,
                active: 0,
            },
            at: Instant(40),
        };
        let w = WireEvent::from_worker_event(&WorkerEvent::Transition(t));
        assert_eq!(
            w,
            Some(WireEvent::Transition {
                id: HandoffId(9),
                request: RequestId(2),
                worker: WorkerId(1),
                role: Role::Destination,
                event: "Reserved".into(),
                from: "Reserving".into(),
                to: "Reserved".into(),
                delta: t.delta,
                at_nanos: 40,
            })
        );
    }

    #[test]
    fn step_durations_become_nanos() {
        let ev = WorkerEvent::Step {
            start: Instant(100),
            steps: 3,
            duration: Duration::from_micros(30),
            first_step: Duration::from_micros(9),
            last_step: Duration::from_micros(11),
            prefill_tokens: 7,
        };
        assert_eq!(
            WireEvent::from_worker_event(&ev),
            Some(WireEvent::Step {
                start_nanos: 100,
                steps: 3,
                duration_nanos: 30_000,
                first_step_nanos: 9_000,
                last_step_nanos: 11_000,
                prefill_tokens: 7,
            })
        );
    }

    #[test]
    fn dropped_reason_is_readable() {
        let ev = WorkerEvent::Dropped {
            from: WorkerId(4),
            id: HandoffId(3),
            fact: "SourceReady",
            reason: DropReason::Rejected(TransitionError::Stale {
                id: HandoffId(3),
                event: "SourceReady",
            }),
            at: Instant(1),
        };
        match WireEvent::from_worker_event(&ev) {
            Some(WireEvent::Dropped { fact, reason, .. }) => {
                assert_eq!(fact, "SourceReady");
                assert!(reason.starts_with("rejected: "), "{reason}");
                assert!(reason.contains("stale"), "{reason}");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(drop_reason_text(&DropReason::WrongPeer), "wrong-peer");
    }

    #[test]
    fn remaining_variants_map_field_for_field() {
        let id = HandoffId(5);
        let kv = KvEvent {
            event_id: 1,
            data: KvEventData::Cleared,
        };
        let cases = [
            (
                WorkerEvent::Tokens {
                    request: RequestId(1),
                    tokens: 4,
                    first: false,
                },
                WireEvent::Tokens {
                    request: RequestId(1),
                    tokens: 4,
                    first: false,
                },
            ),
            (
                WorkerEvent::RequestFinished {
                    request: RequestId(1),
                    at: Instant(2),
                },
                WireEvent::RequestFinished {
                    request: RequestId(1),
                    at_nanos: 2,
                },
            ),
            (
                WorkerEvent::Preempted {
                    request: RequestId(1),
                    at: Instant(3),
                },
                WireEvent::Preempted {
                    request: RequestId(1),
                    at_nanos: 3,
                },
            ),
            (
                WorkerEvent::PrefillPinned {
                    id,
                    request: RequestId(1),
                    blocks: 2,
                    tokens: 20,
                    at: Instant(4),
                },
                WireEvent::PrefillPinned {
                    id,
                    request: RequestId(1),
                    blocks: 2,
                    tokens: 20,
                    at_nanos: 4,
                },
            ),
            (
                WorkerEvent::RoleEnded {
                    id,
                    request: RequestId(1),
                    role: Role::Source,
                    reason: None,
                    at: Instant(5),
                },
                WireEvent::RoleEnded {
                    id,
                    request: RequestId(1),
                    role: Role::Source,
                    reason: None,
                    at_nanos: 5,
                },
            ),
            (
                WorkerEvent::Kv {
                    event: kv.clone(),
                    at: Instant(6),
                },
                WireEvent::Kv {
                    event: kv,
                    at_nanos: 6,
                },
            ),
        ];
        for (ev, want) in cases {
            assert_eq!(WireEvent::from_worker_event(&ev), Some(want));
        }
    }
}
