//! How a worker learns that a peer died, and the notices still to come.
//!
//! The generic model tells every live peer at the instant of the kill
//! ([`PeerLossDetection::default`]). SGLang's decode engine instead
//! heartbeats each prefill engine it knows: every
//! `SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL` (5 s, raised to at least 2 s)
//! it asks the prefill's bootstrap server for `/health`, counts the failed
//! probes, and when they reach `SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE`
//! (2, at least 1) marks the prefill dead and fails every room it was
//! receiving from it ("Lost connection with prefill instance"), which its
//! queues then abort with HTTP 500 (`python/sglang/srt/disaggregation/
//! common/conn.py`: `CommonKVManager.__init__` reads and clamps both,
//! `_start_heartbeat_checker_thread`, `_handle_node_failure`;
//! `disaggregation/decode.py`: `DecodeTransferQueue.pop_transferred`). The
//! mock takes the detection time as `interval × max_failures` after the
//! death (upstream's worst case, which the probe phase makes anywhere in
//! the last interval of it). The prefill side has no heartbeat upstream and
//! learns at once here, as before.

use handoff_core::ids::WorkerId;
use handoff_core::time::{Duration, Instant};
use handoff_core::Generation;
use std::collections::VecDeque;

/// SGLang's decode→prefill heartbeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    /// Time between probes.
    pub interval: Duration,
    /// Failed probes after which the peer is taken for dead.
    pub max_failures: u32,
}

impl Heartbeat {
    /// SGLang's defaults: `SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL` = 5 s,
    /// `SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE` = 2
    /// (`python/sglang/srt/environ.py`, `Envs`).
    pub const SGLANG: Heartbeat = Heartbeat {
        interval: Duration::from_secs(5),
        max_failures: 2,
    };

    /// The least interval SGLang accepts (`CommonKVManager.__init__`:
    /// `max(interval, 2.0)`).
    pub const MIN_INTERVAL: Duration = Duration::from_secs(2);

    /// A heartbeat as SGLang's decode engine takes its two settings: an
    /// interval under 2 s is raised to 2 s, a failure count under 1 to 1.
    pub fn clamped(interval: Duration, max_failures: u32) -> Heartbeat {
        Heartbeat {
            interval: interval.max(Self::MIN_INTERVAL),
            max_failures: max_failures.max(1),
        }
    }

    /// How long after a peer's death the watcher takes it for dead:
    /// `interval × max_failures`.
    pub fn detection(&self) -> Duration {
        self.interval
            .checked_mul(self.max_failures)
            .unwrap_or(Duration::MAX)
    }
}

/// Who learns of a dead peer late, and how late.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerLossDetection {
    /// `None`: every peer learns at the instant of the death.
    pub heartbeat: Option<Heartbeat>,
    /// The workers that heartbeat their peers (SGLang's decode workers,
    /// every rank); the others learn at once.
    pub watchers: Vec<WorkerId>,
}

impl PeerLossDetection {
    /// The delay before `watcher` hears that a peer died.
    pub fn delay_for(&self, watcher: WorkerId) -> Duration {
        match self.heartbeat {
            Some(hb) if self.watchers.contains(&watcher) => hb.detection(),
            _ => Duration::ZERO,
        }
    }
}

/// A loss `watcher` hears of at `at`, if `lost` is then still down in the
/// generation it died in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LossNotice {
    /// When the watcher takes the peer for dead.
    pub at: Instant,
    /// Who hears it.
    pub watcher: WorkerId,
    /// The peer that died.
    pub lost: WorkerId,
    /// The generation it died in: a restart since voids the notice (the
    /// watcher heard the new generation instead, and a heartbeat to a
    /// restarted bootstrap server succeeds).
    pub generation: Generation,
}

/// Loss notices not yet delivered, in delivery order.
///
/// Every notice of a run is `now + delay` for one of at most two delays
/// (zero notices are never queued), pushed as the model clock advances, so
/// pushing at the back keeps a per-delay order; [`LossNotices::pop_due`]
/// scans the (short) queue for the earliest due.
#[derive(Clone, Debug, Default)]
pub struct LossNotices {
    queue: VecDeque<LossNotice>,
}

impl LossNotices {
    /// Queues `n`.
    pub fn push(&mut self, n: LossNotice) {
        self.queue.push_back(n);
    }

    /// Takes the earliest notice due at or before `now` (ties in push
    /// order).
    pub fn pop_due(&mut self, now: Instant) -> Option<LossNotice> {
        let (i, _) = self
            .queue
            .iter()
            .enumerate()
            .filter(|(_, n)| n.at <= now)
            .min_by_key(|(i, n)| (n.at, *i))?;
        self.queue.remove(i)
    }

    /// Notices still to come.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether none is to come.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sglang_detects_after_interval_times_failures() {
        // environ.py: 5 s and 2 failures, so 10 s.
        assert_eq!(Heartbeat::SGLANG.detection(), Duration::from_secs(10));
        // conn.py clamps: interval at least 2 s, failures at least 1.
        let hb = Heartbeat::clamped(Duration::from_millis(500), 0);
        assert_eq!(hb, Heartbeat::clamped(Duration::from_secs(2), 1));
        assert_eq!(hb.detection(), Duration::from_secs(2));
        let hb = Heartbeat::clamped(Duration::from_secs(3), 4);
        assert_eq!(hb.detection(), Duration::from_secs(12));
    }

    #[test]
    fn only_watchers_hear_late() {
        let d = PeerLossDetection {
            heartbeat: Some(Heartbeat::SGLANG),
            watchers: vec![WorkerId(1)],
        };
        assert_eq!(d.delay_for(WorkerId(1)), Duration::from_secs(10));
        assert_eq!(d.delay_for(WorkerId(0)), Duration::ZERO);
        assert_eq!(
            PeerLossDetection::default().delay_for(WorkerId(1)),
            Duration::ZERO
        );
    }

    #[test]
    fn notices_come_due_in_time_order() {
        let n = |s: u64, w: u32| LossNotice {
            at: Instant::ZERO + Duration::from_secs(s),
            watcher: WorkerId(w),
            lost: WorkerId(0),
            generation: Generation::FIRST,
        };
        let mut q = LossNotices::default();
        q.push(n(10, 1));
        q.push(n(12, 2));
        q.push(n(10, 3));
        assert!(q.pop_due(Instant::ZERO + Duration::from_secs(9)).is_none());
        let at = Instant::ZERO + Duration::from_secs(10);
        assert_eq!(q.pop_due(at).map(|x| x.watcher), Some(WorkerId(1)));
        assert_eq!(q.pop_due(at).map(|x| x.watcher), Some(WorkerId(3)));
        assert!(q.pop_due(at).is_none());
        assert_eq!(q.len(), 1);
    }
}
