//! # handoff-core
//!
//! The engine-neutral prefill→decode KV handoff lifecycle, sans-IO: ids,
//! role state machines ([`source::SourceHandoff`],
//! [`destination::DestinationHandoff`]), the facts that cross roles
//! ([`msg::HandoffMsg`]), the [`scheduler::SchedulerCore`] trait backends
//! implement, and the [`worker::Worker`] that replay and live both drive.
//!
//! Nothing here reads a clock, sleeps or does I/O; time is an argument and
//! work comes out of `poll_*` methods, in the style of quinn-proto.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod accounting;
pub mod destination;
pub mod engine;
pub mod fasthash;
pub mod fault;
pub mod host;
pub mod ids;
pub mod kv;
pub mod msg;
pub mod perf;
pub mod policy;
pub mod request;
pub mod rng;
pub mod scheduler;
#[cfg(feature = "serde")]
pub mod serde_vec;
pub mod source;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod time;
pub mod transcript;
pub mod transfer;
pub mod transition;
pub mod worker;

pub use destination::{
    DestinationAction, DestinationEvent, DestinationEventKind, DestinationHandoff,
    DestinationState, SourceReady,
};
pub use fault::{
    FactFate, FactFaults, Fault, FaultCounts, FaultInjector, FaultPlan, FaultPlanError,
    FaultPlanErrorKind, TimedFault,
};
pub use host::{HostFinal, HostInput, HostOutput, HostStatus, WorkerHost};
pub use ids::{
    DestinationReservationId, Generation, HandoffId, HandoffIdGen, RequestId, SessionId,
    SourceLeaseId, WorkerId,
};
pub use kv::{KvCapacitySnapshot, KvEvent, KvEventData, KvEventIds, KvEventQueue};
pub use msg::{FactKind, HandoffMsg, MsgBody, Role};
pub use perf::{FixedPerf, PerfModel, PolynomialPerf};
pub use policy::{Backend, Capabilities, HandoffConfig, HandoffPolicy};
pub use request::Request;
pub use rng::Rng;
pub use scheduler::{
    CommandOutcome, CoreBox, PrefillPinned, ReservationSummary, SchedulerCommand, SchedulerCore,
    StepOutput, TokenEmission,
};
pub use source::{
    SourceAction, SourceEvent, SourceEventKind, SourceHandoff, SourceLease, SourceState,
};
pub use time::{Duration, Instant};
pub use transcript::Transcript;
pub use transfer::{Completion, TransferModel, TransferTimer};
pub use transition::{
    ActionList, CancelReason, LifecycleEvent, OwnershipDelta, RoleState, TransitionError, Verdict,
};
pub use worker::{
    DropReason, RequestError, Transition, Transmit, Worker, WorkerEvent, WorkerRequest, WorkerStats,
};
