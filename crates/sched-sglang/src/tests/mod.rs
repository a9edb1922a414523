//! Scenario and property tests that check every invariant after every
//! operation, through [`handoff_core::SchedulerCore`] plus the core's own
//! consistency check.

mod consistency;
mod handoff;
mod harness;
mod lora;
mod ordinary;
mod pd_decode;
mod props;
mod session_props;
mod sessions;
mod snapshots;
mod stepping;
