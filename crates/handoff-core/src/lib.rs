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
//!
//! # Lifting it into a larger mocker
//!
//! A mocker with its own scheduler and event loop (Dynamo's `lib/mocker`,
//! say) keeps them and takes only the role machines: it feeds each
//! attempt's facts to a [`SourceHandoff`] (or [`DestinationHandoff`]) with
//! its own clock, and does what the returned actions say with its own
//! blocks. Duplicates and late facts are classified, never applied twice.
//!
//! ```
//! use handoff_core::{
//!     Duration, HandoffIdGen, HandoffPolicy, Instant, ReservationSummary, SourceAction,
//!     SourceEvent, SourceHandoff, SourceLease, SourceLeaseId, SourceState, Generation,
//!     TransitionError, Verdict, WorkerId,
//! };
//!
//! // The prefill worker 0 of the host mocker mints attempt ids.
//! let mut ids = HandoffIdGen::new(WorkerId(0), Generation(0));
//! let mut src = SourceHandoff::new(ids.next_id(), HandoffPolicy::SourceFirst, Duration::from_secs(30));
//! let t = Instant::from_millis(5);
//! src.handle(SourceEvent::Start, t).unwrap();
//! // The host's scheduler finished the prefill and kept its 8 blocks.
//! let lease = SourceLease { id: SourceLeaseId(1), blocks: 8, tokens: 128, deadline: Instant::from_millis(480_000) };
//! src.handle(SourceEvent::PrefillPinned { lease }, t).unwrap();
//! assert_eq!(src.state(), SourceState::Pinned);
//! // A decode worker reserved room; later its reader finished.
//! src.handle(SourceEvent::DestinationReserved { summary: ReservationSummary::default() }, t).unwrap();
//! let Ok(Verdict::Applied { actions, .. }) = src.handle(SourceEvent::ReaderCompleted, t) else {
//!     panic!("reader completion applies");
//! };
//! // Only now may the host free the pinned blocks.
//! assert!(actions.iter().any(|a| matches!(a, SourceAction::ReleaseSource)));
//! assert_eq!(src.state(), SourceState::Released);
//! // A late duplicate of the reader's fact changes nothing.
//! assert!(matches!(
//!     src.handle(SourceEvent::ReaderCompleted, t),
//!     Ok(Verdict::Duplicate) | Err(TransitionError::Stale { .. })
//! ));
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod accounting;
pub mod destination;
pub mod dp;
pub mod fasthash;
pub mod host;
pub mod ids;
pub mod kv;
pub mod msg;
pub mod outcome;
pub mod policy;
pub mod request;
pub mod rng;
pub mod scheduler;
#[cfg(feature = "serde")]
pub mod serde_vec;
pub mod session;
pub mod source;
mod spares;
mod state;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod time;
mod timer_queue;
pub mod transcript;
pub mod transition;
pub mod worker;

pub use destination::{
    DestinationAction, DestinationEvent, DestinationEventKind, DestinationHandoff,
    DestinationState, SourceReady,
};
pub use dp::{DpCoupling, DpLayout, DpRank, DpSizeError, WorkerWithDpRank, MAX_DP_SIZE};
pub use host::{HostFinal, HostInput, HostOutput, HostStatus, QuietKinds, WorkerHost};
pub use ids::{
    DestinationReservationId, Generation, HandoffId, HandoffIdGen, RequestId, SessionId,
    SourceLeaseId, WorkerId,
};
pub use kv::{KvCapacitySnapshot, KvEvent, KvEventData, KvEventQueue};
pub use msg::{FactKind, HandoffMsg, MsgBody, Role};
pub use outcome::FailureReason;
pub use policy::{
    Backend, CancelFrees, Capabilities, HandoffConfig, HandoffPolicy, Heartbeat,
    KvLoadFailurePolicy, KvTransferMode, StaleReadPolicy,
};
pub use request::{LoraAdapter, Request};
pub use rng::Rng;
pub use scheduler::{
    CommandOutcome, CoreBox, KvChunk, PrefillPinned, QuietFloor, ReservationSummary,
    SchedulerCommand, SchedulerCore, StepOutput, TokenEmission,
};
pub use source::{
    SourceAction, SourceEvent, SourceEventKind, SourceHandoff, SourceLease, SourceState,
};
pub use time::{Duration, Instant};
pub use transcript::Transcript;
pub use transition::{
    ActionList, CancelReason, LifecycleEvent, OwnershipDelta, RoleState, TransferResult,
    TransitionError, Verdict,
};
pub use worker::{
    DropReason, RequestError, Transition, Transmit, Worker, WorkerEvent, WorkerRequest, WorkerStats,
};
