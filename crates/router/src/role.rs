//! Which pool a router serves. The lowest module of the crate's routing
//! side: configuration, costs, the policy view and the policies all name a
//! pool's role, and it names nothing of theirs.

/// Which pool a router serves; decides what a booking holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolRole {
    /// Prefill workers: a booking holds the prompt's blocks (request
    /// ownership, until the source is released) and its uncached prefill
    /// tokens (compute load, until prefill completes).
    Prefill,
    /// Decode workers: a booking holds prompt + output blocks until the
    /// request completes or fails terminally.
    Decode,
}
