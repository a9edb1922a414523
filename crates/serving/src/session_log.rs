//! Observability of session-affine serving (seed 002 §6): the structured
//! JSONL log (`structural/d-to-p-sync.jsonl`: `snapshot_push_enqueued`,
//! `_sent`, `_failed`, `snapshot_recv_ingested`, `snapshot_evicted`,
//! `snapshot_bypass_hit`, `_miss`, plus the slot events), the per-request
//! fields (`execution_mode`, `d_to_p_snapshot_used`,
//! `d_to_p_snapshot_age_s`, `d_to_p_push_count_during_session`) and the
//! report's session summary.
//!
//! Fed only by the [`crate::Serving`] director from `WorkerEvent::Session`
//! and its own routing decisions, so replay and every live mode log the
//! same bytes. Lines are written by hand in a fixed key order with fixed
//! float precision.

use handoff_core::session::SessionEvent;
use handoff_core::{Instant, RequestId, SessionId, WorkerId};
use handoff_router::SessionRoute;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A request's session fields (the seed's §6 per-request metrics), in the
/// per-request records of session runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct SessionFields {
    /// The session.
    pub session_id: u64,
    /// `seed`, `direct` or `reseed` (the seed's `execution_mode`).
    pub execution_mode: &'static str,
    /// Why it was reseeded (`capacity`, `not_resident`, `worker_down`,
    /// `rebalance`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reseed_cause: Option<&'static str>,
    /// Its prefill was bypassed with a D→P snapshot.
    pub d_to_p_snapshot_used: bool,
    /// Age of that snapshot, seconds.
    pub d_to_p_snapshot_age_s: Option<f64>,
    /// Pushes of its session that landed before it ended.
    pub d_to_p_push_count_during_session: u64,
}

/// Counters of a session run, in the report.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SessionSummary {
    /// Turns by execution mode.
    pub modes: BTreeMap<&'static str, u64>,
    /// Reseeds by cause.
    pub reseed_causes: BTreeMap<&'static str, u64>,
    /// Decode session slots freed, by reason.
    pub slot_evictions: BTreeMap<&'static str, u64>,
    /// Tokens decode workers appended to resident slots (reused KV).
    pub appended_reused_tokens: u64,
    /// Pushes locked for sending, including retries.
    pub pushes_enqueued: u64,
    /// Pushes that landed.
    pub pushes_sent: u64,
    /// Tokens of KV those pushes moved.
    pub pushed_tokens: u64,
    /// Pushes that failed, by reason.
    pub pushes_failed: BTreeMap<&'static str, u64>,
    /// Pushes aborted by a session release.
    pub pushes_aborted: u64,
    /// Snapshots the prefill workers ingested.
    pub snapshots_ingested: u64,
    /// Ingests that overlapped another push of the same session.
    pub double_pushes: u64,
    /// Snapshots evicted, by reason.
    pub snapshot_evictions: BTreeMap<&'static str, u64>,
    /// Reseeds whose prefill a snapshot bypassed.
    pub bypass_hits: u64,
    /// Reseeds that re-prefilled, by reason (a session's first turn, which
    /// can have no snapshot, is logged but not counted).
    pub bypass_misses: BTreeMap<&'static str, u64>,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct SessionLog {
    keep_lines: bool,
    lines: Vec<String>,
    summary: SessionSummary,
    fields: BTreeMap<RequestId, SessionFields>,
    pushes: BTreeMap<SessionId, u64>,
}

fn bump(m: &mut BTreeMap<&'static str, u64>, k: &'static str) {
    *m.entry(k).or_default() += 1;
}

impl SessionLog {
    /// A log; JSONL lines are kept only when `keep_lines`.
    pub fn new(keep_lines: bool) -> Self {
        SessionLog {
            keep_lines,
            ..SessionLog::default()
        }
    }

    /// The JSONL lines so far.
    pub fn lines(&self) -> &[String] {
        &self.lines
    }

    /// Takes the JSONL lines.
    pub fn take_lines(&mut self) -> Vec<String> {
        std::mem::take(&mut self.lines)
    }

    /// Lines whose event is `event`.
    pub fn count(&self, event: &str) -> usize {
        let needle = format!("\"event\":\"{event}\"");
        self.lines.iter().filter(|l| l.contains(&needle)).count()
    }

    /// The summary so far.
    pub fn summary(&self) -> &SessionSummary {
        &self.summary
    }

    /// A turn was routed.
    pub fn routed(&mut self, request: RequestId, session: SessionId, route: SessionRoute) {
        bump(&mut self.summary.modes, route.name());
        let cause = match route {
            SessionRoute::Reseed(c) => {
                bump(&mut self.summary.reseed_causes, c.name());
                Some(c.name())
            }
            _ => None,
        };
        self.fields.insert(
            request,
            SessionFields {
                session_id: session.0,
                execution_mode: route.name(),
                reseed_cause: cause,
                ..SessionFields::default()
            },
        );
    }

    /// The session fields of `request` now: its pushes count those of its
    /// session that landed so far.
    pub fn fields(&self, request: RequestId) -> Option<SessionFields> {
        let mut f = *self.fields.get(&request)?;
        f.d_to_p_push_count_during_session = self
            .pushes
            .get(&SessionId(f.session_id))
            .copied()
            .unwrap_or(0);
        Some(f)
    }

    /// The session fields of `request`, which ended; forgets them.
    pub fn take_fields(&mut self, request: RequestId) -> Option<SessionFields> {
        let f = self.fields(request);
        self.fields.remove(&request);
        f
    }

    fn line(&mut self, at: Instant, event: &str, sid: SessionId, w: WorkerId, fields: &str) {
        if !self.keep_lines {
            return;
        }
        let mut l = String::with_capacity(96);
        let _ = write!(
            l,
            "{{\"ts\":{:.3},\"event\":\"{event}\",\"sid\":\"{}\",\"worker\":{}{fields}}}",
            at.as_nanos() as f64 / 1e6,
            sid.0,
            w.0
        );
        self.lines.push(l);
    }

    /// A worker's session event: counted in the summary, and one line of
    /// the log.
    pub fn event(&mut self, w: WorkerId, e: &SessionEvent, at: Instant) {
        let (name, session, fields) = match *e {
            SessionEvent::Committed { .. }
            | SessionEvent::Appended { .. }
            | SessionEvent::SlotEvicted { .. } => self.slot_event(e),
            SessionEvent::BypassHit { .. } | SessionEvent::BypassMiss { .. } => {
                self.bypass_event(e)
            }
            _ => self.snapshot_event(e),
        };
        self.line(at, name, session, w, &fields);
    }

    /// A decode worker's session slot: committed, appended, evicted.
    fn slot_event(&mut self, e: &SessionEvent) -> (&'static str, SessionId, String) {
        let s = &mut self.summary;
        match *e {
            SessionEvent::Appended {
                session,
                reused_tokens,
                ..
            } => {
                s.appended_reused_tokens += reused_tokens;
                (
                    "slot_appended",
                    session,
                    format!(",\"reused\":{reused_tokens}"),
                )
            }
            SessionEvent::SlotEvicted {
                session,
                tokens,
                reason,
                ..
            } => {
                bump(&mut s.slot_evictions, reason.name());
                (
                    "slot_evicted",
                    session,
                    format!(",\"seqlen\":{tokens},\"reason\":\"{}\"", reason.name()),
                )
            }
            SessionEvent::Committed {
                session, tokens, ..
            } => ("slot_committed", session, format!(",\"seqlen\":{tokens}")),
            _ => unreachable!("event() sends only slot events here"),
        }
    }

    /// A snapshot push from decode to prefill and the prefill worker's
    /// store: enqueued, sent, failed, aborted, ingested, evicted.
    fn snapshot_event(&mut self, e: &SessionEvent) -> (&'static str, SessionId, String) {
        let s = &mut self.summary;
        match *e {
            SessionEvent::PushEnqueued {
                session,
                delta,
                attempt,
                ..
            } => {
                s.pushes_enqueued += 1;
                (
                    "snapshot_push_enqueued",
                    session,
                    format!(",\"delta\":{delta},\"attempt\":{attempt}"),
                )
            }
            SessionEvent::PushSent {
                session, tokens, ..
            } => {
                s.pushes_sent += 1;
                s.pushed_tokens += tokens;
                *self.pushes.entry(session).or_default() += 1;
                (
                    "snapshot_push_sent",
                    session,
                    format!(",\"seqlen\":{tokens}"),
                )
            }
            SessionEvent::PushFailed {
                session,
                reason,
                retry,
                ..
            } => {
                bump(&mut s.pushes_failed, reason.name());
                (
                    "snapshot_push_failed",
                    session,
                    format!(",\"reason\":\"{}\",\"retry\":{retry}", reason.name()),
                )
            }
            SessionEvent::PushAborted { session, .. } => {
                s.pushes_aborted += 1;
                (
                    "snapshot_push_failed",
                    session,
                    String::from(",\"reason\":\"session_released\",\"retry\":false"),
                )
            }
            SessionEvent::SnapshotIngested {
                session,
                tokens,
                double_push,
                ..
            } => {
                s.snapshots_ingested += 1;
                s.double_pushes += u64::from(double_push);
                (
                    "snapshot_recv_ingested",
                    session,
                    format!(",\"seqlen\":{tokens},\"double_push\":{double_push}"),
                )
            }
            SessionEvent::SnapshotEvicted {
                session,
                tokens,
                reason,
            } => {
                bump(&mut s.snapshot_evictions, reason.name());
                (
                    "snapshot_evicted",
                    session,
                    format!(",\"seqlen\":{tokens},\"reason\":\"{}\"", reason.name()),
                )
            }
            _ => unreachable!("event() sends only snapshot events here"),
        }
    }

    /// The prefill bypass of a request: a snapshot used, or why not.
    fn bypass_event(&mut self, e: &SessionEvent) -> (&'static str, SessionId, String) {
        let s = &mut self.summary;
        match *e {
            SessionEvent::BypassHit {
                session,
                request,
                tokens,
                tail,
                age,
            } => {
                s.bypass_hits += 1;
                if let Some(f) = self.fields.get_mut(&request) {
                    f.d_to_p_snapshot_used = true;
                    f.d_to_p_snapshot_age_s = Some((age.as_secs_f64() * 1e3).round() / 1e3);
                }
                (
                    "snapshot_bypass_hit",
                    session,
                    format!(
                        ",\"seqlen\":{tokens},\"tail\":{tail},\"age_s\":{:.3}",
                        age.as_secs_f64()
                    ),
                )
            }
            SessionEvent::BypassMiss {
                session,
                request,
                reason,
            } => {
                let seed = self
                    .fields
                    .get(&request)
                    .is_some_and(|f| f.execution_mode == "seed");
                if !seed {
                    bump(&mut s.bypass_misses, reason.name());
                }
                (
                    "snapshot_bypass_miss",
                    session,
                    format!(",\"reason\":\"{}\"", reason.name()),
                )
            }
            _ => unreachable!("event() sends only bypass events here"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_core::session::{MissReason, PushFailure};
    use handoff_core::{Duration, SourceLeaseId};
    use handoff_router::ReseedCause;

    #[test]
    fn lines_are_json_and_fields_follow_the_events() {
        let mut log = SessionLog::new(true);
        let (s, r) = (SessionId(3), RequestId(9));
        log.routed(r, s, SessionRoute::Reseed(ReseedCause::Capacity));
        let lock = SourceLeaseId(1);
        log.event(
            WorkerId(1),
            &SessionEvent::PushSent {
                session: s,
                lock,
                tokens: 500,
            },
            Instant::from_millis(5),
        );
        log.event(
            WorkerId(1),
            &SessionEvent::PushFailed {
                session: s,
                lock,
                reason: PushFailure::Transfer,
                retry: true,
            },
            Instant::from_millis(6),
        );
        log.event(
            WorkerId(0),
            &SessionEvent::BypassHit {
                session: s,
                request: r,
                tokens: 500,
                tail: 0,
                age: Duration::from_millis(1500),
            },
            Instant::from_millis(7),
        );
        log.event(
            WorkerId(0),
            &SessionEvent::BypassMiss {
                session: s,
                request: RequestId(10),
                reason: MissReason::NoEntry,
            },
            Instant::from_millis(8),
        );
        for l in log.lines() {
            let v: serde_json::Value = serde_json::from_str(l).expect("valid JSON");
            assert_eq!(v["sid"], "3");
        }
        assert_eq!(
            log.lines()[0],
            r#"{"ts":5.000,"event":"snapshot_push_sent","sid":"3","worker":1,"seqlen":500}"#
        );
        assert_eq!(log.count("snapshot_bypass_miss"), 1);
        let f = log.take_fields(r).unwrap();
        assert_eq!(f.execution_mode, "reseed");
        assert_eq!(f.reseed_cause, Some("capacity"));
        assert!(f.d_to_p_snapshot_used);
        assert_eq!(f.d_to_p_snapshot_age_s, Some(1.5));
        assert_eq!(f.d_to_p_push_count_during_session, 1);
        assert!(log.take_fields(r).is_none(), "forgotten once taken");
        let sum = log.summary();
        assert_eq!(sum.bypass_misses.get("no_entry"), Some(&1));
        assert_eq!(sum.pushes_failed.get("transfer_failed"), Some(&1));
        assert_eq!(sum.reseed_causes.get("capacity"), Some(&1));
    }
}
