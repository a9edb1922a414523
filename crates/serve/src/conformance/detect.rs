//! The engine side's conformance state, sans-IO: it takes `now` (model
//! time) and returns what it found; the edge notes the findings.
//!
//! - a prompt computed on a scheduler: on a decode scheduler it is a
//!   decode without the handoff's fields; on either pool, the same
//!   block-aligned prompt computed on the other pool within
//!   [`DUPLICATE_WINDOW`] is a duplicate prefill (a prompt is identified by
//!   its last full block's chained hash, which names every block before
//!   it); at most [`MAX_RECENT`] prompts are remembered;
//! - a vLLM source's lease that ran out: by whether a reader had begun
//!   (the source reached `AwaitingReaderCompletion`, as vLLM's prefill
//!   learns of a read from the decode's handshake and notification,
//!   `NixlConnectorWorker._read_blocks`) or not. SGLang has no lease: its
//!   prefill leg ends by the bootstrap timeout, which is an unpaired leg.

use super::{ConformanceKind, Detail};
use handoff_core::fasthash::{FastMap, FastSet};
use handoff_core::{Duration, HandoffId, Instant, WorkerId};
use handoff_router::Pool;
use std::collections::VecDeque;

/// How long a prefilled prompt is remembered (model time).
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(60);

/// Most prompts remembered at once; the oldest goes first.
pub const MAX_RECENT: usize = 1 << 14;

/// Most sources tracked as being read (bounded by live sources; the cap
/// only guards a core that never ends one).
const MAX_READING: usize = 1 << 16;

/// One finding: a kind and what the example says.
pub type Finding = (ConformanceKind, Detail);

/// When a prompt was last computed on each pool, and where.
#[derive(Clone, Copy, Default)]
struct Seen {
    prefill: Option<(Instant, WorkerId)>,
    decode: Option<(Instant, WorkerId)>,
}

impl Seen {
    fn slot(&mut self, pool: Pool) -> &mut Option<(Instant, WorkerId)> {
        match pool {
            Pool::Decode => &mut self.decode,
            Pool::Prefill | Pool::Aggregated => &mut self.prefill,
        }
    }
}

/// See the module docs.
#[derive(Default)]
pub struct Detector {
    seen: FastMap<u64, Seen>,
    /// Prompts in the order computed, for the window and the bound.
    order: VecDeque<(Instant, u64)>,
    /// Sources whose reader has begun.
    reading: FastSet<HandoffId>,
}

impl Detector {
    /// Scheduler `s` of `pool` computes a prompt at `now`, whose last full
    /// block's chained hash is `last` (`None`: shorter than a block).
    pub fn computed(
        &mut self,
        s: WorkerId,
        pool: Pool,
        last: Option<u64>,
        now: Instant,
    ) -> Vec<Finding> {
        let mut found = Vec::new();
        if pool == Pool::Decode {
            found.push((ConformanceKind::DecodeWithoutParams, Detail::None));
        }
        if pool == Pool::Aggregated {
            return found;
        }
        self.forget(now);
        if let Some(h) = last {
            let seen = self.seen.entry(h).or_default();
            let other = match pool {
                Pool::Decode => &mut seen.prefill,
                _ => &mut seen.decode,
            };
            if let Some((at, first)) = other.take() {
                if now.saturating_since(at) <= DUPLICATE_WINDOW {
                    found.push((
                        ConformanceKind::DuplicatePrefill,
                        Detail::FirstPrefilledOn(first.0),
                    ));
                }
            }
            *seen.slot(pool) = Some((now, s));
            self.order.push_back((now, h));
        }
        found
    }

    /// Drops prompts older than the window, and the oldest past the bound.
    fn forget(&mut self, now: Instant) {
        while let Some(&(at, h)) = self.order.front() {
            let old = now.saturating_since(at) > DUPLICATE_WINDOW;
            if !old && self.order.len() < MAX_RECENT {
                break;
            }
            self.order.pop_front();
            if let Some(seen) = self.seen.get_mut(&h) {
                for slot in [&mut seen.prefill, &mut seen.decode] {
                    if slot.is_some_and(|(t, _)| t <= at) {
                        *slot = None;
                    }
                }
                if seen.prefill.is_none() && seen.decode.is_none() {
                    self.seen.remove(&h);
                }
            }
        }
    }

    /// Source `id`'s reader began.
    pub fn reader_began(&mut self, id: HandoffId) {
        if self.reading.len() < MAX_READING {
            self.reading.insert(id);
        }
    }

    /// Source `id` ended; `lease_expired`: its lease ran out. Returns the
    /// finding, by whether its reader had begun.
    pub fn source_ended(&mut self, id: HandoffId, lease_expired: bool) -> Option<Finding> {
        let reading = self.reading.remove(&id);
        lease_expired.then(|| {
            let kind = if reading {
                ConformanceKind::LeaseExpiredReading
            } else {
                ConformanceKind::LeaseExpiredUnread
            };
            (kind, Detail::None)
        })
    }

    /// Prompts remembered and sources tracked.
    #[cfg(test)]
    pub fn held(&self) -> (usize, usize) {
        (self.seen.len(), self.reading.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: WorkerId = WorkerId(0);
    const D: WorkerId = WorkerId(1);

    fn kinds(f: &[Finding]) -> Vec<ConformanceKind> {
        f.iter().map(|(k, _)| *k).collect()
    }

    #[test]
    fn a_prompt_on_both_pools_within_the_window_is_a_duplicate_once() {
        let mut d = Detector::default();
        let t = Instant::ZERO;
        assert!(d.computed(P, Pool::Prefill, Some(9), t).is_empty());
        let f = d.computed(D, Pool::Decode, Some(9), t + Duration::from_secs(1));
        assert_eq!(
            kinds(&f),
            [
                ConformanceKind::DecodeWithoutParams,
                ConformanceKind::DuplicatePrefill
            ]
        );
        assert_eq!(f[1].1, Detail::FirstPrefilledOn(0));
        // The pair is counted once: a third computation on the decode pool
        // has no prefill to pair with.
        let f = d.computed(D, Pool::Decode, Some(9), t + Duration::from_secs(2));
        assert_eq!(kinds(&f), [ConformanceKind::DecodeWithoutParams]);
    }

    #[test]
    fn the_same_pool_twice_or_outside_the_window_is_no_duplicate() {
        let mut d = Detector::default();
        let t = Instant::ZERO;
        d.computed(P, Pool::Prefill, Some(9), t);
        assert!(d
            .computed(WorkerId(2), Pool::Prefill, Some(9), t)
            .is_empty());
        let late = t + DUPLICATE_WINDOW + Duration::from_secs(1);
        let f = d.computed(D, Pool::Decode, Some(9), late);
        assert_eq!(kinds(&f), [ConformanceKind::DecodeWithoutParams]);
        assert!(d.computed(P, Pool::Aggregated, Some(5), t).is_empty());
        assert!(d.computed(P, Pool::Prefill, None, t).is_empty());
    }

    #[test]
    fn the_window_memory_is_bounded() {
        let mut d = Detector::default();
        for h in 0..(MAX_RECENT as u64 * 2) {
            d.computed(P, Pool::Prefill, Some(h), Instant::ZERO);
        }
        assert!(d.held().0 <= MAX_RECENT);
        let later = Instant::ZERO + DUPLICATE_WINDOW + Duration::from_secs(1);
        d.computed(P, Pool::Prefill, Some(u64::MAX), later);
        assert_eq!(d.held().0, 1, "everything older than the window went");
    }

    #[test]
    fn a_lease_expiry_is_told_apart_by_its_reader() {
        let mut d = Detector::default();
        let (a, b) = (HandoffId(1), HandoffId(2));
        d.reader_began(b);
        assert_eq!(
            d.source_ended(a, true).map(|f| f.0),
            Some(ConformanceKind::LeaseExpiredUnread)
        );
        assert_eq!(
            d.source_ended(b, true).map(|f| f.0),
            Some(ConformanceKind::LeaseExpiredReading)
        );
        d.reader_began(a);
        assert_eq!(d.source_ended(a, false), None);
        assert_eq!(d.held().1, 0);
    }
}
