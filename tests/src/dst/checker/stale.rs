//! Stale reads: a destination may activate from KV its source released
//! (vLLM reads freed blocks and goes on), but only after a real lease
//! expiry: the source's lease ran its full term since it was pinned, and no
//! renewal (a reader's heartbeat, or a failed reservation's renewal)
//! arrived within the shortest extension before the expiry. A read after
//! any other early end (a cancel, a lost peer) must never complete.

use super::*;

/// What a stale read's source looked like when it ended.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SourceTerm {
    /// When its lease began (the pin).
    pub(crate) pinned: Option<Instant>,
    /// When its last renewal arrived.
    pub(crate) renewed: Option<Instant>,
    /// Why and when it ended early, once it did.
    pub(crate) ended: Option<(CancelReason, Instant)>,
}

/// The lease terms the deployment gives its sources.
#[derive(Clone, Copy, Debug, Default)]
pub struct LeaseTerms {
    /// The shortest source lease of any prefill engine, if known.
    pub ttl: Option<Duration>,
    /// The shortest extension a renewal grants (heartbeat or the DEP's
    /// renewal on failed reservations), if renewals exist.
    pub extension: Option<Duration>,
}

impl Checker {
    /// The lease terms stale reads are judged against.
    pub fn with_lease_terms(mut self, terms: LeaseTerms) -> Self {
        self.lease_terms = terms;
        self
    }

    /// Follows a source's lease from a transition.
    pub(crate) fn lease_transition(&mut self, t: &Transition) {
        if t.role != Role::Source {
            return;
        }
        let term = self.terms.entry(t.id).or_insert(SourceTerm {
            pinned: None,
            renewed: None,
            ended: None,
        });
        match t.event {
            LifecycleEvent::Source(SE::PrefillPinned) => term.pinned = Some(t.at),
            LifecycleEvent::Source(SE::LeaseRenewed) => term.renewed = Some(t.at),
            _ => {}
        }
    }

    /// A source ended: early ends are kept until its destination ends.
    pub(crate) fn lease_ended(&mut self, id: HandoffId, role: Role, reason: Option<CancelReason>) {
        match (role, reason) {
            (Role::Source, Some(r)) => {
                if let Some(term) = self.terms.get_mut(&id) {
                    term.ended = Some((r, self.now));
                }
            }
            (Role::Source, None) => {
                self.terms.remove(&id);
            }
            (Role::Destination, _) => {
                self.terms.remove(&id);
                self.stale_ok.remove(&id);
            }
        }
    }

    /// A destination on `w` read `id`'s released KV and goes on.
    pub(crate) fn stale_read(&mut self, w: WorkerId, id: HandoffId, reused: bool) {
        self.paths.stale_reads += 1;
        if reused {
            self.paths.stale_reads_reused += 1;
        }
        self.stale_ok.insert(id);
        let Some(term) = self.terms.get(&id).copied() else {
            self.flag(Kind::ReadOfReleasedSource, || {
                format!("{id}: stale read on {w} of a source never seen pinned")
            });
            return;
        };
        let Some((reason, at)) = term.ended else {
            self.flag(Kind::ReadOfReleasedSource, || {
                format!("{id}: stale read on {w} while its source still holds the KV")
            });
            return;
        };
        if reason != CancelReason::LeaseExpired {
            self.flag(Kind::ReadOfReleasedSource, || {
                format!("{id}: read on {w} completed after its source ended for {reason:?}, not a lease expiry")
            });
            return;
        }
        let terms = self.lease_terms;
        if let (Some(p), Some(ttl)) = (term.pinned, terms.ttl) {
            if at < p + ttl {
                self.flag(Kind::ReadOfReleasedSource, || {
                    format!(
                        "{id}: lease pinned at {p:?} expired at {at:?}, before its {ttl:?} term"
                    )
                });
            }
        }
        if let (Some(r), Some(ext)) = (term.renewed, terms.extension) {
            if at < r + ext {
                self.flag(Kind::ReadOfReleasedSource, || {
                    format!("{id}: lease expired at {at:?} though a renewal arrived at {r:?} (extension {ext:?})")
                });
            }
        }
    }
}
