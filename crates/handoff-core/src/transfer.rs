//! How long moving KV takes: the replaceable transfer-timing adapter of the
//! DEP ("Future Transfer-Timing Extension"). The lifecycle only sees
//! `StartTransfer` go out and `handle_transfer_done` come back; replay and
//! live both time transfers with this, sans-IO.

use crate::ids::{HandoffId, WorkerId};
use crate::time::{Duration, Instant};
use std::collections::BTreeMap;

/// The timing model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TransferModel {
    /// Every transfer takes the same time (the DEP's initial model).
    Fixed(Duration),
    /// `base + tokens × bytes_per_token ÷ bandwidth`, transfers independent.
    Bytes {
        /// Setup latency.
        base: Duration,
        /// KV bytes per token (all layers).
        bytes_per_token: u64,
        /// Bytes per second of one transfer.
        bandwidth: f64,
    },
    /// Processor sharing: each worker's link has `bandwidth` bytes/s split
    /// equally among its transfers; a transfer moves at the smaller of its
    /// two endpoints' shares.
    Contention {
        /// Setup latency.
        base: Duration,
        /// KV bytes per token.
        bytes_per_token: u64,
        /// Bytes per second per worker link.
        bandwidth: f64,
    },
}

impl Default for TransferModel {
    fn default() -> Self {
        TransferModel::Fixed(Duration::from_millis(10))
    }
}

impl TransferModel {
    /// The time one transfer of `tokens` takes alone on its links (what a
    /// live worker, which sees only its own transfers, uses).
    pub fn isolated_duration(&self, tokens: u64) -> Duration {
        match *self {
            TransferModel::Fixed(d) => d,
            TransferModel::Bytes {
                base,
                bytes_per_token,
                bandwidth,
            }
            | TransferModel::Contention {
                base,
                bytes_per_token,
                bandwidth,
            } => {
                let bytes = tokens.saturating_mul(bytes_per_token) as f64;
                let secs = if bandwidth > 0.0 {
                    bytes / bandwidth
                } else {
                    0.0
                };
                base + Duration::from_secs_f64(secs)
            }
        }
    }

    /// Setup latency (the whole time for `Fixed`).
    pub fn base(&self) -> Duration {
        match *self {
            TransferModel::Fixed(d) => d,
            TransferModel::Bytes { base, .. } | TransferModel::Contention { base, .. } => base,
        }
    }
}

#[derive(Clone, Debug)]
struct Flow {
    id: HandoffId,
    owner: WorkerId,
    src: WorkerId,
    dst: WorkerId,
    remaining: f64,
    started: Instant,
    ready_at: Instant,
}

/// A transfer whose completion time is now known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Completion {
    /// The attempt.
    pub id: HandoffId,
    /// The worker that started it (gets `handle_transfer_done`).
    pub owner: WorkerId,
    /// When it completes.
    pub at: Instant,
    /// Invalidation token: a completion is current only while its version
    /// matches (contention moves completion times).
    pub version: u64,
}

/// Tracks transfers in flight and predicts completions.
#[derive(Clone, Debug, Default)]
pub struct TransferTimer {
    model: Option<TransferModel>,
    flows: BTreeMap<HandoffId, Flow>,
    last: Instant,
    version: u64,
    /// Bytes moved so far (finished transfers).
    pub bytes_moved: f64,
}

impl TransferTimer {
    /// A timer for `model`.
    pub fn new(model: TransferModel) -> Self {
        TransferTimer {
            model: Some(model),
            ..Default::default()
        }
    }

    fn bytes(&self, tokens: u64) -> f64 {
        match self.model {
            Some(TransferModel::Bytes {
                bytes_per_token, ..
            })
            | Some(TransferModel::Contention {
                bytes_per_token, ..
            }) => (tokens * bytes_per_token) as f64,
            _ => 0.0,
        }
    }

    /// Starts a transfer; returns the completions whose times are now known
    /// or changed (all of them, under contention).
    pub fn start(
        &mut self,
        id: HandoffId,
        owner: WorkerId,
        src: WorkerId,
        dst: WorkerId,
        tokens: u64,
        now: Instant,
    ) -> Vec<Completion> {
        let model = self.model.unwrap_or_default();
        match model {
            TransferModel::Fixed(d) => {
                self.version += 1;
                vec![Completion {
                    id,
                    owner,
                    at: now + d,
                    version: self.version,
                }]
            }
            TransferModel::Bytes {
                base, bandwidth, ..
            } => {
                self.version += 1;
                let b = self.bytes(tokens);
                self.bytes_moved += b;
                let secs = if bandwidth > 0.0 { b / bandwidth } else { 0.0 };
                vec![Completion {
                    id,
                    owner,
                    at: now + base + Duration::from_secs_f64(secs),
                    version: self.version,
                }]
            }
            TransferModel::Contention { base, .. } => {
                self.advance(now);
                let remaining = self.bytes(tokens);
                self.flows.insert(
                    id,
                    Flow {
                        id,
                        owner,
                        src,
                        dst,
                        remaining,
                        started: now,
                        ready_at: now + base,
                    },
                );
                self.predict(now)
            }
        }
    }

    /// A transfer completed (or was abandoned): under contention the others
    /// speed up. Returns the changed completions.
    pub fn finish(&mut self, id: HandoffId, now: Instant) -> Vec<Completion> {
        if !matches!(self.model, Some(TransferModel::Contention { .. })) {
            return Vec::new();
        }
        self.advance(now);
        if let Some(f) = self.flows.remove(&id) {
            let total = f.remaining.max(0.0);
            self.bytes_moved += total;
            let _ = f.started;
        }
        self.predict(now)
    }

    fn rates(&self) -> BTreeMap<HandoffId, f64> {
        let Some(TransferModel::Contention { bandwidth, .. }) = self.model else {
            return BTreeMap::new();
        };
        let mut per_link: BTreeMap<WorkerId, u32> = BTreeMap::new();
        for f in self.flows.values() {
            *per_link.entry(f.src).or_default() += 1;
            *per_link.entry(f.dst).or_default() += 1;
        }
        self.flows
            .values()
            .map(|f| {
                let n = per_link[&f.src].max(per_link[&f.dst]).max(1);
                (f.id, bandwidth / f64::from(n))
            })
            .collect()
    }

    fn advance(&mut self, now: Instant) {
        let rates = self.rates();
        for f in self.flows.values_mut() {
            let from = self.last.max(f.ready_at);
            if now > from {
                let moved = rates.get(&f.id).copied().unwrap_or(0.0) * (now - from).as_secs_f64();
                self.bytes_moved += moved.min(f.remaining);
                f.remaining = (f.remaining - moved).max(0.0);
            }
        }
        self.last = now;
    }

    fn predict(&mut self, now: Instant) -> Vec<Completion> {
        self.version += 1;
        let rates = self.rates();
        self.flows
            .values()
            .map(|f| {
                let rate = rates.get(&f.id).copied().unwrap_or(0.0);
                let secs = if rate > 0.0 { f.remaining / rate } else { 0.0 };
                let start = now.max(f.ready_at);
                Completion {
                    id: f.id,
                    owner: f.owner,
                    at: start + Duration::from_secs_f64(secs),
                    version: self.version,
                }
            })
            .collect()
    }

    /// Whether `c` is still the current prediction.
    pub fn is_current(&self, c: &Completion) -> bool {
        match self.model {
            Some(TransferModel::Contention { .. }) => {
                c.version == self.version && self.flows.contains_key(&c.id)
            }
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_model_scales_with_tokens() {
        let mut t = TransferTimer::new(TransferModel::Bytes {
            base: Duration::from_millis(1),
            bytes_per_token: 1000,
            bandwidth: 1e6,
        });
        let c = t.start(
            HandoffId(1),
            WorkerId(1),
            WorkerId(0),
            WorkerId(1),
            500,
            Instant::ZERO,
        );
        assert_eq!(c[0].at, Instant::from_millis(501));
    }

    #[test]
    fn contention_shares_a_link() {
        let model = TransferModel::Contention {
            base: Duration::ZERO,
            bytes_per_token: 1,
            bandwidth: 1000.0,
        };
        let mut t = TransferTimer::new(model);
        let a = t.start(
            HandoffId(1),
            WorkerId(2),
            WorkerId(0),
            WorkerId(2),
            1000,
            Instant::ZERO,
        );
        assert_eq!(a[0].at, Instant::from_millis(1000));
        // A second flow out of the same source halves both rates.
        let b = t.start(
            HandoffId(2),
            WorkerId(3),
            WorkerId(0),
            WorkerId(3),
            1000,
            Instant::ZERO,
        );
        assert!(b.iter().all(|c| c.at == Instant::from_millis(2000)));
        assert!(!t.is_current(&a[0]));
        let after = t.finish(HandoffId(1), Instant::from_millis(2000));
        assert!(after.is_empty() || after.iter().all(|c| c.id == HandoffId(2)));
    }
}
