//! Work from the frontend: ordinary requests, sessions, and the roles a
//! new handoff or push attempt opens.

use super::{
    sorted, DestEntry, PushRole, RequestError, SourceEntry, TimerKind, Worker, WorkerRequest,
};
use crate::destination::{DestinationEvent, DestinationHandoff};
use crate::ids::{HandoffId, RequestId};
use crate::policy::{CancelFrees, HandoffPolicy};
use crate::request::Request;
use crate::scheduler::{CommandOutcome, SchedulerCommand, SchedulerCore};
use crate::source::{SourceEvent, SourceHandoff};
use crate::time::Instant;
use crate::transition::CancelReason;

impl<S: SchedulerCore> Worker<S> {
    /// Takes a request from the frontend.
    pub fn handle_request(&mut self, req: WorkerRequest, now: Instant) -> Result<(), RequestError> {
        let result = self.accept_request(req, now);
        self.pump_reservations(now);
        self.flush_kv(now);
        result
    }

    fn accept_request(&mut self, req: WorkerRequest, now: Instant) -> Result<(), RequestError> {
        match req {
            WorkerRequest::Ordinary(request) => {
                let rid = request.id;
                match self.core.apply(SchedulerCommand::Submit(request), now) {
                    CommandOutcome::Submitted => Ok(()),
                    CommandOutcome::Unsupported(_) => Err(RequestError::Unsupported(rid)),
                    _ => Err(RequestError::Refused(rid)),
                }
            }
            WorkerRequest::CloseSession(session) => {
                self.close_session(session, now);
                Ok(())
            }
            WorkerRequest::EvictSession(session) => {
                self.core
                    .apply(SchedulerCommand::EvictSession { session }, now);
                Ok(())
            }
            WorkerRequest::PushSource {
                id,
                request,
                session,
                lock,
                tokens,
            } => {
                self.check_new(id)?;
                let push = PushRole {
                    session,
                    lock,
                    tokens,
                    failure: None,
                };
                self.open_source(id, request, None, Some(push), now);
                Ok(())
            }
            WorkerRequest::PushDestination {
                id,
                request,
                session,
                tokens,
                source,
            } => {
                self.check_new(id)?;
                let push = PushRole {
                    session,
                    lock: crate::ids::SourceLeaseId(0),
                    tokens,
                    failure: None,
                };
                let routed = DestinationEvent::Routed {
                    source,
                    ready: None,
                };
                self.open_dest(id, request, None, Some(push), routed, now);
                Ok(())
            }
            WorkerRequest::HandoffSource { id, request } => {
                self.check_new(id)?;
                let request_id = request.id;
                self.open_source(id, request_id, Some(request), None, now);
                Ok(())
            }
            WorkerRequest::HandoffDestination {
                id,
                request,
                source,
                ready,
            } => {
                self.check_new(id)?;
                let request_id = request.id;
                let routed = DestinationEvent::Routed { source, ready };
                self.open_dest(id, request_id, Some(request), None, routed, now);
                Ok(())
            }
        }
    }

    /// Closes a session: the core aborts the session's push, and its roles
    /// end too, on either side.
    ///
    /// The close reaches the decode worker holding the slot and every
    /// prefill worker. A push's source may end here before it has heard
    /// from its destination (its peer is still unknown, so no `Abort` can be
    /// sent; the destination's later `DestinationReserved` only meets a
    /// tombstone), so the prefill worker ends the session's push
    /// destinations itself: a queued one leaves the reservation queue, a
    /// reserved one frees its pages (`CancelSnapshot`). Otherwise, with no
    /// reservation deadline, the reservation pins its pages for good and
    /// prefill admission behind it stalls. SGLang does the same on the
    /// receiving side: `Scheduler.abort_request`
    /// (`python/sglang/srt/managers/scheduler.py`) also aborts requests
    /// still in the disaggregation queues (`DecodePreallocQueue`, the
    /// transfer queue in `python/sglang/srt/disaggregation/decode.py`), and
    /// their preallocated KV is released rather than left to a sender that
    /// is gone.
    fn close_session(&mut self, session: crate::ids::SessionId, now: Instant) {
        self.core
            .apply(SchedulerCommand::ReleaseSession { session }, now);
        // The core aborted the session's push; its roles end too.
        let pushes = sorted(
            self.sources
                .iter()
                .filter(|(_, e)| e.push.is_some_and(|p| p.session == session))
                .map(|(id, _)| *id)
                .collect(),
        );
        for id in pushes {
            self.source_event(
                id,
                SourceEvent::Cancelled {
                    reason: CancelReason::Client,
                },
                now,
            );
        }
        let receiving = sorted(
            self.dests
                .iter()
                .filter(|(_, e)| e.push.is_some_and(|p| p.session == session))
                .map(|(id, _)| *id)
                .collect(),
        );
        for id in receiving {
            self.dest_event(
                id,
                DestinationEvent::Cancelled {
                    reason: CancelReason::Client,
                },
                now,
            );
        }
    }

    /// Starts the source role of a new attempt `id` (already checked new)
    /// and replays the facts that came early for it.
    fn open_source(
        &mut self,
        id: HandoffId,
        request_id: RequestId,
        request: Option<Request>,
        push: Option<PushRole>,
        now: Instant,
    ) {
        // A seed-002 push's source is a locked session slot, not a vLLM
        // prefill: a cancel (the session closing) frees it at once.
        let rule = match push {
            Some(_) => CancelFrees::Immediately,
            None => self.config.cancel_frees,
        };
        self.sources.insert(
            id,
            SourceEntry {
                role: SourceHandoff::new(id, self.policy, self.caps.source_lease_ttl)
                    .with_cancel_frees(rule),
                request_id,
                request,
                peer: None,
                push,
            },
        );
        self.source_event(id, SourceEvent::Start, now);
        self.replay_early(id, now);
    }

    /// Starts the destination role of a new attempt `id` (already checked
    /// new) with its routing fact, and replays the facts that came early.
    fn open_dest(
        &mut self,
        id: HandoffId,
        request_id: RequestId,
        request: Option<Request>,
        push: Option<PushRole>,
        routed: DestinationEvent,
        now: Instant,
    ) {
        let heartbeat = self
            .config
            .heartbeat
            .filter(|_| self.policy.prefill_at_arrival() && push.is_none());
        let rule = match push {
            Some(_) => CancelFrees::Immediately,
            None => self.config.cancel_frees,
        };
        self.dests.insert(
            id,
            DestEntry {
                role: DestinationHandoff::new(id, self.policy, self.config.reservation_ttl)
                    .with_cancel_frees(rule),
                request_id,
                request,
                in_core: false,
                push,
            },
        );
        self.dest_event(id, routed, now);
        if let Some(hb) = heartbeat {
            self.arm(now + hb.every, id, TimerKind::Heartbeat);
        }
        self.replay_early(id, now);
    }

    fn check_new(&self, id: HandoffId) -> Result<(), RequestError> {
        if self.policy == HandoffPolicy::Disabled {
            return Err(RequestError::HandoffDisabled(id));
        }
        if self.sources.contains_key(&id)
            || self.dests.contains_key(&id)
            || self.tombstone_set.contains_key(&id)
        {
            return Err(RequestError::DuplicateHandoff(id));
        }
        Ok(())
    }
}
