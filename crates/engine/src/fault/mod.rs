//! A typed, seeded fault plan and the injector that applies it.
//!
//! A [`FaultPlan`] says what goes wrong in a run: timed [`Fault`]s (kills,
//! restarts, partitions, client cancels) and per-fact misbehaviour of the
//! worker-to-worker control channel ([`FactFaults`]) and of KV transfers.
//! A [`FaultInjector`] is the plan being applied: the engine asks it which
//! timed faults are due ([`FaultInjector::pop_due`]), what happens to each
//! fact it sends ([`FaultInjector::fact`]) and whether each transfer
//! completes ([`FaultInjector::transfer_ok`]).
//!
//! Like the rest of the crate this is sans-IO: no clock, no I/O, no threads.
//! Every answer is a pure function of the plan and the sequence of calls, so
//! a failing simulation replays exactly from its plan text.
//!
//! # Text format
//!
//! One directive per line or separated by `;`; `#` starts a comment that
//! runs to the end of the line. Times are a non-negative decimal with a unit
//! `ns`, `us`, `ms` or `s` (`1.5s`, `250ms`), exact to the nanosecond.
//!
//! ```text
//! seed 7
//! kill 2 at 1.5s
//! restart 2 at 3s
//! partition 0 2 from 1s to 2s
//! cancel 17 at 250ms
//! drop 0.01
//! duplicate 0.02
//! delay 0.05 max 20ms
//! transfer-fail 0.02
//! ```
//!
//! `seed`, `drop`, `duplicate`, `delay` and `transfer-fail` may each appear
//! once; omitted, they are `0` (and `max 0s`). Timed directives may repeat
//! and appear in any order; the parsed plan holds them sorted by time, ties
//! in text order. [`FaultPlan`]'s `Display` writes this format back, so
//! `plan.to_string().parse() == Ok(plan)` for every plan the parser or
//! [`FaultPlan::generate`] produces.

mod error;
mod injector;
mod peer_loss;
mod plan;
#[cfg(test)]
mod tests;
mod text;

pub use error::{Expected, FaultPlanError, FaultPlanErrorKind};
pub use injector::FaultInjector;
pub use peer_loss::{Heartbeat, LossNotice, LossNotices, PeerLossDetection};
pub use plan::{FactFate, FactFaults, Fault, FaultCounts, FaultPlan, TimedFault};
pub(crate) use text::parse_time;

/// Most timed faults a parsed plan may hold; more is a
/// [`FaultPlanErrorKind::TooManyTimedFaults`] error.
pub const MAX_TIMED_FAULTS: usize = 1_000_000;

/// Random values [`FaultInjector::fact`] draws from the fact stream on every
/// call, whatever the outcome: drop, duplicate, and for each of the two
/// possible copies a delay decision and a delay amount.
pub const FACT_DRAWS: u32 = 6;

/// Random values [`FaultInjector::transfer_ok`] draws from the transfer
/// stream on every call.
pub const TRANSFER_DRAWS: u32 = 1;

/// Mixed into the plan seed to seed the transfer stream, so that transfer
/// decisions and fact decisions never share random values.
const TRANSFER_STREAM: u64 = 0x7472_616e_7366_6572;
/// Mixed into the seed given to [`FaultPlan::generate`] for its own draws,
/// so the plan's choices are independent of the injector's later draws.
const GENERATE_STREAM: u64 = 0x6765_6e65_7261_7465;
