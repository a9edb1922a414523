//! What every workload source yields: a request plus its session context.

use handoff_core::request::mix64;
use handoff_core::{Duration, Request, SessionId};

/// One request of a workload, with the session information a trace may add.
///
/// `request.session` names the session; `turn` is this request's index within
/// it (0 for the first turn) and is `Some` exactly when `request.session` is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceItem {
    /// The request, with `arrival` the open-loop send time.
    pub request: Request,
    /// Turn index within `request.session`, counted in trace order.
    pub turn: Option<u32>,
    /// Think-time before this turn (Mooncake `delay`). A closed-loop session
    /// driver sends the turn `delay` after the previous turn completed
    /// instead of at `request.arrival`.
    pub delay: Option<Duration>,
}

/// Maps a textual session id to a [`SessionId`], stably across runs and
/// platforms: FNV-1a over the UTF-8 bytes, finished with `mix64`.
///
/// Integer session ids in a trace map to `SessionId(n)` directly, so the
/// string `"5"` and the integer `5` name different sessions.
pub fn session_id_from_str(s: &str) -> SessionId {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in s.as_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    SessionId(mix64(h))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_session_ids_are_stable_and_distinct() {
        assert_eq!(session_id_from_str("abc"), session_id_from_str("abc"));
        assert_ne!(session_id_from_str("abc"), session_id_from_str("abd"));
        // Pinned so a change of hash (which would silently re-key every
        // session of a saved trace) fails loudly.
        assert_eq!(
            session_id_from_str(""),
            SessionId(mix64(0xcbf2_9ce4_8422_2325))
        );
    }
}
