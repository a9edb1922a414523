//! Frames to start from: one of every [`Frame`] variant (and of every
//! [`WorkerEvent`], [`HostOp`], [`HostInput`] and [`HostOutput`] variant
//! inside them), and random frames with boundary values in every field.
//!
//! The transport crate's own sample helpers are test-only (`#[cfg(test)]`)
//! and cover six of the ten frame kinds, so the harness builds its own.

use crate::rng::Rng;
use handoff_core::{
    CancelReason, DestinationEventKind, DestinationReservationId, DestinationState, DropReason,
    Duration, FactKind, Generation, HandoffId, HandoffMsg, HostFinal, HostInput, HostOutput,
    HostStatus, Instant, KvCapacitySnapshot, KvEvent, KvEventData, LifecycleEvent, MsgBody,
    OwnershipDelta, Request, RequestError, RequestId, ReservationSummary, Role, RoleState,
    SessionId, SourceEventKind, SourceReady, SourceState, TokenEmission, Transition,
    TransitionError, Transmit, WorkerEvent, WorkerId, WorkerRequest, WorkerStats,
};
use handoff_engine::HostOp;
use handoff_transport::{Frame, HostReply};

/// Stable name of a frame including the variant inside it, for outcome
/// histograms (`Event/Kv`, `Host/Deliver/Request`, ...).
pub fn detailed_name(f: &Frame) -> String {
    match f {
        Frame::Event(e) => format!("Event/{}", event_name(e)),
        Frame::Handoff(m) => format!("Handoff/{}", m.body.name()),
        Frame::Request(r) => format!(
            "Request/{}",
            match r {
                WorkerRequest::Ordinary(_) => "Ordinary",
                WorkerRequest::HandoffSource { .. } => "HandoffSource",
                WorkerRequest::HandoffDestination { .. } => "HandoffDestination",
                WorkerRequest::CloseSession(_) => "CloseSession",
                WorkerRequest::EvictSession(_) => "EvictSession",
                WorkerRequest::PushSource { .. } => "PushSource",
                WorkerRequest::PushDestination { .. } => "PushDestination",
            }
        ),
        Frame::Host(op) => format!(
            "Host/{}",
            match op {
                HostOp::Deliver { input, .. } => match input {
                    HostInput::Request(_) => "Deliver/Request",
                    HostInput::Message { .. } => "Deliver/Message",
                    HostInput::TransferDone { .. } => "Deliver/TransferDone",
                    HostInput::Cancel { .. } => "Deliver/Cancel",
                    HostInput::PeerLost(_) => "Deliver/PeerLost",
                    HostInput::PeerGeneration { .. } => "Deliver/PeerGeneration",
                },
                HostOp::Advance { .. } => "Advance",
                HostOp::Step { .. } => "Step",
                HostOp::StepPass { .. } => "StepPass",
                HostOp::EndPass { .. } => "EndPass",
                HostOp::Teardown { .. } => "Teardown",
                HostOp::Restart { .. } => "Restart",
            }
        ),
        other => other.name().to_string(),
    }
}

fn event_name(e: &WorkerEvent) -> &'static str {
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

fn request(id: u64) -> Request {
    Request {
        id: RequestId(id),
        prompt_tokens: 1000,
        max_output_tokens: 32,
        prefix_hashes: vec![1, 2, 3],
        hash_block_tokens: 512,
        session: Some(SessionId(4)),
        arrival: Instant(12_345),
        lora: None,
    }
}

fn every_event() -> Vec<WorkerEvent> {
    let id = HandoffId(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
    vec![
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
            duration: Duration::from_nanos(3_000_000_007),
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
                    request: RequestId(u64::MAX),
                    tokens: u32::MAX,
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
                data: KvEventData::Removed {
                    block_hashes: vec![u64::MAX],
                },
            },
            at: Instant(14),
        },
        WorkerEvent::Kv {
            event: KvEvent {
                event_id: 7,
                data: KvEventData::Cleared,
            },
            at: Instant(14),
        },
        WorkerEvent::Session {
            event: handoff_core::session::SessionEvent::PushFailed {
                session: SessionId(4),
                lock: handoff_core::SourceLeaseId(3),
                reason: handoff_core::session::PushFailure::Transfer,
                retry: true,
            },
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
        WorkerEvent::StaleRead {
            id,
            request: RequestId(3),
            reused: false,
            at: Instant(17),
        },
        WorkerEvent::SourceKvReused {
            id,
            at: Instant(18),
        },
    ]
}

/// One frame of every kind, with every event, host operation, host input
/// and host output variant somewhere among them.
pub fn every_frame() -> Vec<Frame> {
    let id = HandoffId(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
    let cap = KvCapacitySnapshot {
        total_blocks: 100,
        active_blocks: 3,
        ..Default::default()
    };
    let msg = HandoffMsg {
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
    };
    let mut v = vec![
        Frame::Hello {
            worker: WorkerId(3),
            generation: Generation(9),
            role: handoff_transport::PeerRole::Prefill,
        },
        Frame::Clock {
            origin_unix_nanos: 1_700_000_000_000_000_000,
            speed_micros: 10_000_000,
        },
        Frame::Handoff(msg),
        Frame::Handoff(HandoffMsg {
            id,
            generation: Generation(1),
            body: MsgBody::SourceReady {
                blocks: 4,
                tokens: 64,
            },
        }),
        Frame::Handoff(HandoffMsg {
            id,
            generation: Generation(1),
            body: MsgBody::LeaseRenewal {
                extend_nanos: 1_000_000,
            },
        }),
        Frame::Handoff(HandoffMsg {
            id,
            generation: Generation(1),
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
        Frame::Request(WorkerRequest::CloseSession(SessionId(4))),
        Frame::Request(WorkerRequest::EvictSession(SessionId(4))),
        Frame::Request(WorkerRequest::PushSource {
            id,
            request: RequestId(1 << 63),
            session: SessionId(4),
            lock: handoff_core::SourceLeaseId(2),
            tokens: 4096,
        }),
        Frame::Request(WorkerRequest::PushDestination {
            id,
            request: RequestId(1 << 63),
            session: SessionId(4),
            tokens: 4096,
            source: WorkerId(2),
        }),
        Frame::Drained {
            worker: WorkerId(2),
            drained: true,
            capacity: cap,
        },
        Frame::Host(HostOp::Deliver {
            input: HostInput::Request(WorkerRequest::Ordinary(request(4))),
            now: Instant(5),
        }),
        Frame::Host(HostOp::Deliver {
            input: HostInput::Message {
                from: WorkerId(1),
                msg,
            },
            now: Instant(6),
        }),
        Frame::Host(HostOp::Deliver {
            input: HostInput::TransferDone {
                id,
                result: handoff_core::TransferResult::SourceReleased { reused: true },
            },
            now: Instant(7),
        }),
        Frame::Host(HostOp::Deliver {
            input: HostInput::Cancel {
                id,
                reason: CancelReason::Client,
            },
            now: Instant(8),
        }),
        Frame::Host(HostOp::Deliver {
            input: HostInput::PeerLost(WorkerId(3)),
            now: Instant(9),
        }),
        Frame::Host(HostOp::Deliver {
            input: HostInput::PeerGeneration {
                peer: WorkerId(3),
                generation: Generation(4),
            },
            now: Instant(10),
        }),
        Frame::Host(HostOp::Advance { now: Instant(11) }),
        Frame::Host(HostOp::Step {
            now: Instant(12),
            horizon: Instant(13),
        }),
        Frame::Host(HostOp::Teardown { now: Instant(14) }),
        Frame::Host(HostOp::Restart { now: Instant(15) }),
        Frame::HostReply(HostReply {
            outputs: vec![
                HostOutput::Transmit(Transmit {
                    to: WorkerId(2),
                    msg,
                    at: Instant(16),
                }),
                HostOutput::Event(WorkerEvent::Tokens {
                    emissions: vec![TokenEmission {
                        request: RequestId(9),
                        tokens: 1,
                        first: false,
                    }],
                }),
                HostOutput::Refused(RequestError::DuplicateHandoff(id)),
                HostOutput::Refused(RequestError::HandoffDisabled(id)),
                HostOutput::Refused(RequestError::Refused(RequestId(3))),
                HostOutput::Refused(RequestError::Unsupported(RequestId(4))),
            ],
            status: HostStatus {
                deadline: Some(Instant(20)),
                wants_step: true,
                drained: false,
                step_end: None,
            },
        }),
        Frame::FinalQuery,
        Frame::Cancel {
            id,
            reason: CancelReason::Client,
        },
        Frame::TransferDone {
            id,
            ok: false,
            at: Instant(77),
        },
        Frame::SourceQuery { id },
        Frame::SourceAnswer { id, held: false },
        Frame::Final(HostFinal {
            worker: WorkerId(1),
            generation: Generation(2),
            drained: true,
            capacity: cap,
            stats: WorkerStats {
                applied: 7,
                stale: 2,
                ..Default::default()
            },
            live_handoffs: 0,
            steps: 99,
            beyond_grid_passes: (3, 4),
        }),
        Frame::Bye,
    ];
    v.extend(every_event().into_iter().map(Frame::Event));
    v
}

fn u32_of(rng: &mut Rng) -> u32 {
    let v = rng.interesting_u64();
    if rng.one_in(4) {
        u32::MAX
    } else {
        v as u32
    }
}

fn id(rng: &mut Rng) -> HandoffId {
    let hi = u128::from(rng.interesting_u64());
    let lo = u128::from(rng.interesting_u64());
    HandoffId((hi << 64) | lo)
}

fn instant(rng: &mut Rng) -> Instant {
    Instant(rng.interesting_u64())
}

fn duration(rng: &mut Rng) -> Duration {
    match rng.below(3) {
        0 => Duration::from_nanos(rng.interesting_u64()),
        1 => Duration::new(rng.interesting_u64(), 999_999_999),
        _ => Duration::MAX,
    }
}

fn hashes(rng: &mut Rng) -> Vec<u64> {
    let n = match rng.below(8) {
        0 => 0,
        1 => rng.range(100, 600),
        _ => rng.below(8),
    };
    (0..n).map(|_| rng.interesting_u64()).collect()
}

fn gen_request(rng: &mut Rng) -> Request {
    Request {
        id: RequestId(rng.interesting_u64()),
        prompt_tokens: u32_of(rng),
        max_output_tokens: u32_of(rng),
        prefix_hashes: hashes(rng),
        hash_block_tokens: u32_of(rng),
        session: rng.coin().then(|| SessionId(rng.interesting_u64())),
        arrival: instant(rng),
        lora: None,
    }
}

fn gen_worker_request(rng: &mut Rng) -> WorkerRequest {
    match rng.below(3) {
        0 => WorkerRequest::Ordinary(gen_request(rng)),
        1 => WorkerRequest::HandoffSource {
            id: id(rng),
            request: gen_request(rng),
        },
        _ => WorkerRequest::HandoffDestination {
            id: id(rng),
            request: gen_request(rng),
            source: WorkerId(u32_of(rng)),
            ready: rng.coin().then(|| SourceReady {
                blocks: rng.interesting_u64(),
                tokens: rng.interesting_u64(),
            }),
        },
    }
}

fn gen_msg(rng: &mut Rng) -> HandoffMsg {
    let body = match rng.below(6) {
        0 => MsgBody::SourceReady {
            blocks: rng.interesting_u64(),
            tokens: rng.interesting_u64(),
        },
        1 => MsgBody::DestinationReserved {
            summary: ReservationSummary {
                reservation: rng
                    .coin()
                    .then(|| DestinationReservationId(rng.interesting_u64())),
                physical_blocks: rng.interesting_u64(),
                matched_prefix_tokens: rng.interesting_u64(),
                transfer_tokens: rng.interesting_u64(),
                transfer_blocks: rng.interesting_u64(),
                request_slot: rng.coin(),
                decode_headroom_tokens: rng.interesting_u64(),
            },
        },
        2 => MsgBody::ReceiveCompleted,
        3 => MsgBody::ReaderCompleted,
        4 => MsgBody::LeaseRenewal {
            extend_nanos: rng.interesting_u64(),
        },
        _ => MsgBody::Abort {
            reason: *rng.pick(&CancelReason::ALL),
            to: gen_role(rng),
        },
    };
    HandoffMsg {
        id: id(rng),
        generation: Generation(u32_of(rng)),
        body,
    }
}

fn gen_role(rng: &mut Rng) -> Role {
    if rng.coin() {
        Role::Source
    } else {
        Role::Destination
    }
}

fn gen_lifecycle(rng: &mut Rng) -> (LifecycleEvent, RoleState) {
    if rng.coin() {
        (
            LifecycleEvent::Source(*rng.pick(&SourceEventKind::ALL)),
            RoleState::Source(*rng.pick(&SourceState::ALL)),
        )
    } else {
        (
            LifecycleEvent::Destination(*rng.pick(&DestinationEventKind::ALL)),
            RoleState::Destination(*rng.pick(&DestinationState::ALL)),
        )
    }
}

fn gen_event(rng: &mut Rng) -> WorkerEvent {
    match rng.below(12) {
        0 => {
            let (event, from) = gen_lifecycle(rng);
            let (_, to) = gen_lifecycle(rng);
            WorkerEvent::Transition(Transition {
                id: id(rng),
                request: RequestId(rng.interesting_u64()),
                worker: WorkerId(u32_of(rng)),
                role: gen_role(rng),
                event,
                from,
                to,
                delta: OwnershipDelta {
                    pinned: rng.interesting_u64() as i64,
                    reserved: i64::MIN,
                    active: -(rng.interesting_u64() as i64 >> 1),
                },
                at: instant(rng),
            })
        }
        1 => WorkerEvent::Step {
            start: instant(rng),
            steps: rng.interesting_u64(),
            duration: duration(rng),
            first_step: duration(rng),
            last_step: duration(rng),
            passes: (0..rng.below(4)).map(|_| duration(rng)).collect(),
            prefill_tokens: rng.interesting_u64(),
        },
        2 => WorkerEvent::Tokens {
            emissions: (0..rng.below(4))
                .map(|_| TokenEmission {
                    request: RequestId(rng.interesting_u64()),
                    tokens: u32_of(rng),
                    first: rng.coin(),
                })
                .collect(),
        },
        3 => WorkerEvent::RequestFinished {
            request: RequestId(rng.interesting_u64()),
            at: instant(rng),
        },
        4 => WorkerEvent::Preempted {
            request: RequestId(rng.interesting_u64()),
            at: instant(rng),
        },
        5 => WorkerEvent::PrefillPinned {
            id: id(rng),
            request: RequestId(rng.interesting_u64()),
            blocks: rng.interesting_u64(),
            tokens: rng.interesting_u64(),
            at: instant(rng),
        },
        6 => WorkerEvent::StartTransfer {
            id: id(rng),
            request: RequestId(rng.interesting_u64()),
            source: WorkerId(u32_of(rng)),
            destination: WorkerId(u32_of(rng)),
            tokens: rng.interesting_u64(),
            blocks: rng.interesting_u64(),
            at: instant(rng),
        },
        7 => WorkerEvent::RoleEnded {
            id: id(rng),
            request: RequestId(rng.interesting_u64()),
            role: gen_role(rng),
            reason: rng.coin().then(|| *rng.pick(&CancelReason::ALL)),
            at: instant(rng),
        },
        10 => WorkerEvent::KvChunkReady {
            id: id(rng),
            request: RequestId(rng.interesting_u64()),
            source: WorkerId(u32_of(rng)),
            destination: WorkerId(u32_of(rng)),
            tokens: rng.interesting_u64(),
            at: instant(rng),
        },
        9 => WorkerEvent::FirstTokenFromPrefill {
            request: RequestId(rng.interesting_u64()),
            at: instant(rng),
        },
        8 => WorkerEvent::Kv {
            event: KvEvent {
                event_id: rng.interesting_u64(),
                data: match rng.below(3) {
                    0 => KvEventData::Stored {
                        parent_hash: rng.coin().then(|| rng.interesting_u64()),
                        block_hashes: hashes(rng),
                    },
                    1 => KvEventData::Removed {
                        block_hashes: hashes(rng),
                    },
                    _ => KvEventData::Cleared,
                },
            },
            at: instant(rng),
        },
        _ => {
            let (event, state) = gen_lifecycle(rng);
            let hid = id(rng);
            let reason = match rng.below(7) {
                0 => DropReason::OldGeneration,
                1 => DropReason::Unknown,
                2 => DropReason::WrongPeer,
                3 => DropReason::Rejected(TransitionError::Stale { id: hid, event }),
                4 => DropReason::Rejected(TransitionError::Invalid {
                    id: hid,
                    state,
                    event,
                }),
                5 => DropReason::Rejected(TransitionError::Conflict { id: hid, event }),
                _ => DropReason::Rejected(TransitionError::Premature { id: hid, event }),
            };
            WorkerEvent::Dropped {
                from: WorkerId(u32_of(rng)),
                id: hid,
                fact: *rng.pick(&FactKind::ALL),
                reason,
                at: instant(rng),
            }
        }
    }
}

fn gen_capacity(rng: &mut Rng) -> KvCapacitySnapshot {
    KvCapacitySnapshot {
        total_blocks: rng.interesting_u64(),
        active_blocks: rng.interesting_u64(),
        pinned_source_blocks: rng.interesting_u64(),
        reserved_destination_blocks: rng.interesting_u64(),
        cached_blocks: rng.interesting_u64(),
        total_request_slots: rng.interesting_u64(),
        free_request_slots: rng.interesting_u64(),
        decode_headroom_tokens: rng.interesting_u64(),
        running_requests: rng.interesting_u64(),
        waiting_requests: rng.interesting_u64(),
    }
}

fn gen_output(rng: &mut Rng) -> HostOutput {
    match rng.below(3) {
        0 => HostOutput::Transmit(Transmit {
            to: WorkerId(u32_of(rng)),
            msg: gen_msg(rng),
            at: instant(rng),
        }),
        1 => HostOutput::Event(gen_event(rng)),
        _ => HostOutput::Refused(match rng.below(4) {
            0 => RequestError::DuplicateHandoff(id(rng)),
            1 => RequestError::HandoffDisabled(id(rng)),
            2 => RequestError::Unsupported(RequestId(rng.interesting_u64())),
            _ => RequestError::Refused(RequestId(rng.interesting_u64())),
        }),
    }
}

fn gen_host_op(rng: &mut Rng) -> HostOp {
    let now = instant(rng);
    match rng.below(5) {
        0 => HostOp::Deliver {
            input: match rng.below(6) {
                0 => HostInput::Request(gen_worker_request(rng)),
                1 => HostInput::Message {
                    from: WorkerId(u32_of(rng)),
                    msg: gen_msg(rng),
                },
                2 => HostInput::TransferDone {
                    id: id(rng),
                    result: *rng.pick(&[
                        handoff_core::TransferResult::Completed,
                        handoff_core::TransferResult::Failed,
                        handoff_core::TransferResult::SourceLost,
                        handoff_core::TransferResult::SourceReleased { reused: false },
                        handoff_core::TransferResult::SourceReleased { reused: true },
                    ]),
                },
                3 => HostInput::Cancel {
                    id: id(rng),
                    reason: *rng.pick(&CancelReason::ALL),
                },
                4 => HostInput::PeerLost(WorkerId(u32_of(rng))),
                _ => HostInput::PeerGeneration {
                    peer: WorkerId(u32_of(rng)),
                    generation: Generation(u32_of(rng)),
                },
            },
            now,
        },
        1 => HostOp::Advance { now },
        2 => HostOp::Step {
            now,
            horizon: instant(rng),
        },
        3 => HostOp::Teardown { now },
        _ => HostOp::Restart { now },
    }
}

/// A random frame of any kind, fields drawn from boundary values.
pub fn gen_frame(rng: &mut Rng) -> Frame {
    match rng.below(12) {
        0 => Frame::Hello {
            worker: WorkerId(u32_of(rng)),
            generation: Generation(u32_of(rng)),
            role: [
                handoff_transport::PeerRole::Frontend,
                handoff_transport::PeerRole::Prefill,
                handoff_transport::PeerRole::Decode,
                handoff_transport::PeerRole::Aggregated,
                handoff_transport::PeerRole::Any,
            ][(u32_of(rng) % 5) as usize],
        },
        1 => Frame::Handoff(gen_msg(rng)),
        2 => Frame::Request(gen_worker_request(rng)),
        3 => Frame::Event(gen_event(rng)),
        4 => Frame::Drained {
            worker: WorkerId(u32_of(rng)),
            drained: rng.coin(),
            capacity: gen_capacity(rng),
        },
        5 => Frame::Bye,
        6 => Frame::Host(gen_host_op(rng)),
        7 => Frame::HostReply(HostReply {
            outputs: (0..rng.below(6)).map(|_| gen_output(rng)).collect(),
            status: HostStatus {
                deadline: rng.coin().then(|| instant(rng)),
                wants_step: rng.coin(),
                drained: rng.coin(),
                step_end: rng.coin().then(|| instant(rng)),
            },
        }),
        8 => Frame::FinalQuery,
        9 => Frame::TransferDone {
            id: id(rng),
            ok: rng.coin(),
            at: instant(rng),
        },
        10 => Frame::Cancel {
            id: id(rng),
            reason: *rng.pick(&CancelReason::ALL),
        },
        _ => Frame::Final(HostFinal {
            worker: WorkerId(u32_of(rng)),
            generation: Generation(u32_of(rng)),
            drained: rng.coin(),
            capacity: gen_capacity(rng),
            stats: WorkerStats {
                applied: rng.interesting_u64(),
                duplicates: rng.interesting_u64(),
                stale: rng.interesting_u64(),
                old_generation: rng.interesting_u64(),
                rejected: rng.interesting_u64(),
                early: rng.interesting_u64(),
                early_dropped: rng.interesting_u64(),
            },
            live_handoffs: rng.interesting_u64(),
            steps: rng.interesting_u64(),
            beyond_grid_passes: (rng.interesting_u64(), rng.interesting_u64()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn samples_cover_every_variant() {
        let frames = every_frame();
        let kinds: BTreeSet<&str> = frames.iter().map(Frame::name).collect();
        assert_eq!(kinds.len(), 15, "{kinds:?}");
        let detailed: BTreeSet<String> = frames.iter().map(detailed_name).collect();
        // 15 events, 10 host operations/inputs, 4 handoff bodies, 7
        // requests, and the 11 other kinds.
        assert_eq!(
            detailed.iter().filter(|n| n.starts_with("Event/")).count(),
            15
        );
        assert_eq!(
            detailed.iter().filter(|n| n.starts_with("Host/")).count(),
            10
        );
        assert_eq!(
            detailed
                .iter()
                .filter(|n| n.starts_with("Request/"))
                .count(),
            7
        );
    }

    #[test]
    fn generated_frames_encode() {
        let mut rng = Rng::new(11);
        let mut out = Vec::new();
        for _ in 0..2000 {
            out.clear();
            let f = gen_frame(&mut rng);
            handoff_transport::encode_frame(&f, &mut out).unwrap_or_else(|e| panic!("{f:?}: {e}"));
        }
    }
}
