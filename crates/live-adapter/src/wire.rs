//! Rebuilding core events from what crossed a process boundary.

use handoff_core::{Duration, Instant, Transition, WorkerEvent};
use transport::WireEvent;

/// The core event a frontend consumes, if `e` is one (reports such as
/// `Drained` are handled by the caller).
pub fn to_worker_event(e: &WireEvent) -> Option<WorkerEvent> {
    Some(match e.clone() {
        WireEvent::Transition { .. } => WorkerEvent::Transition(to_transition(e)?),
        WireEvent::Step {
            start_nanos,
            steps,
            duration_nanos,
            first_step_nanos,
            last_step_nanos,
            prefill_tokens,
        } => WorkerEvent::Step {
            start: Instant(start_nanos),
            steps,
            duration: Duration::from_nanos(duration_nanos),
            first_step: Duration::from_nanos(first_step_nanos),
            last_step: Duration::from_nanos(last_step_nanos),
            prefill_tokens,
        },
        WireEvent::Tokens {
            request,
            tokens,
            first,
        } => WorkerEvent::Tokens {
            request,
            tokens,
            first,
        },
        WireEvent::RequestFinished { request, at_nanos } => WorkerEvent::RequestFinished {
            request,
            at: Instant(at_nanos),
        },
        WireEvent::Preempted { request, at_nanos } => WorkerEvent::Preempted {
            request,
            at: Instant(at_nanos),
        },
        WireEvent::PrefillPinned {
            id,
            request,
            blocks,
            tokens,
            at_nanos,
        } => WorkerEvent::PrefillPinned {
            id,
            request,
            blocks,
            tokens,
            at: Instant(at_nanos),
        },
        WireEvent::RoleEnded {
            id,
            request,
            role,
            reason,
            at_nanos,
        } => WorkerEvent::RoleEnded {
            id,
            request,
            role,
            reason,
            at: Instant(at_nanos),
        },
        WireEvent::Kv { event, at_nanos } => WorkerEvent::Kv {
            event,
            at: Instant(at_nanos),
        },
        _ => return None,
    })
}

/// The core transition `e` describes; `None` if it is not one or names a
/// state or event no role has (a peer speaking another version).
pub fn to_transition(e: &WireEvent) -> Option<Transition> {
    let WireEvent::Transition {
        id,
        request,
        worker,
        role,
        event,
        from,
        to,
        delta,
        at_nanos,
    } = e
    else {
        return None;
    };
    Some(Transition {
        id: *id,
        request: *request,
        worker: *worker,
        role: *role,
        event: handoff_core::transcript::intern_name(event)?,
        from: handoff_core::transcript::intern_name(from)?,
        to: handoff_core::transcript::intern_name(to)?,
        delta: *delta,
        at: Instant(*at_nanos),
    })
}
