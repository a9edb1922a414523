//! How long moving KV takes: the replaceable transfer-timing adapter of the
//! DEP ("Future Transfer-Timing Extension"). The lifecycle only sees
//! `StartTransfer` go out and `handle_transfer_done` come back; replay and
//! live both time transfers with this, sans-IO.

use crate::rank_fan::RankFan;
use handoff_core::ids::{HandoffId, WorkerId};
use handoff_core::time::{Duration, Instant};
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

    /// KV bytes per token and link bandwidth (bytes/s), `None` for `Fixed`.
    pub fn link(&self) -> Option<(u64, f64)> {
        match *self {
            TransferModel::Fixed(_) => None,
            TransferModel::Bytes {
                bytes_per_token,
                bandwidth,
                ..
            }
            | TransferModel::Contention {
                bytes_per_token,
                bandwidth,
                ..
            } => Some((bytes_per_token, bandwidth)),
        }
    }

    /// Stable lower-case name, as `--transfer` spells it.
    pub fn name(&self) -> &'static str {
        match self {
            TransferModel::Fixed(_) => "fixed",
            TransferModel::Bytes { .. } => "bytes",
            TransferModel::Contention { .. } => "contention",
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
    /// Tokens offered so far.
    tokens: u64,
    /// Still streaming chunks: it cannot complete until `start` closes it,
    /// and it takes a share of its links only while it has bytes to move.
    open: bool,
}

/// A transfer streamed chunk by chunk under the bytes model: one sender
/// moving chunks in order.
#[derive(Clone, Copy, Debug)]
struct Serial {
    /// Tokens offered so far.
    tokens: u64,
    /// When the bytes offered so far are through.
    busy_until: Instant,
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
    /// Not a completion: a transfer still streaming chunks runs out of
    /// ready bytes then, so the other flows' shares change; the driver calls
    /// [`TransferTimer::reflow`] (contention only).
    pub drain: bool,
}

impl Flow {
    /// Whether it takes a share of its links: a streaming flow only while
    /// it has ready bytes to move.
    fn moving(&self) -> bool {
        !self.open || self.remaining > 0.0
    }
}

/// Tracks transfers in flight and predicts completions.
#[derive(Clone, Debug, Default)]
pub struct TransferTimer {
    model: Option<TransferModel>,
    flows: BTreeMap<HandoffId, Flow>,
    serial: BTreeMap<HandoffId, Serial>,
    last: Instant,
    version: u64,
    /// Bytes moved so far (finished transfers).
    pub bytes_moved: f64,
    /// How each handoff fans out over the two sides' ranks: its setup on
    /// the critical path ([`RankFan::setup`]) and its transfer count.
    fan: RankFan,
    /// Rank-to-rank transfers started ([`RankFan::transfers`] per
    /// handoff; a handoff streamed in chunks counts once).
    pub rank_transfers: u64,
}

impl TransferTimer {
    /// A timer for `model`.
    pub fn new(model: TransferModel) -> Self {
        TransferTimer {
            model: Some(model),
            ..Default::default()
        }
    }

    /// This timer with handoffs between pools of different TPs fanned out
    /// as `fan` says (a uniform fan changes nothing).
    pub fn with_fan(self, fan: RankFan) -> Self {
        TransferTimer { fan, ..self }
    }

    /// The fan handoffs are timed with.
    pub fn fan(&self) -> RankFan {
        self.fan
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

    /// Starts a transfer of `tokens` in all, taking over what
    /// [`TransferTimer::stream`] already offered for `id`; returns the
    /// completions whose times are now known or changed (all of them, under
    /// contention).
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
        if !matches!(model, TransferModel::Fixed(_)) {
            self.rank_transfers += u64::from(self.fan.transfers());
        }
        let setup = self.fan.setup(model.base());
        match model {
            TransferModel::Fixed(d) => {
                self.version += 1;
                vec![Completion {
                    id,
                    owner,
                    at: now + d,
                    version: self.version,
                    drain: false,
                }]
            }
            TransferModel::Bytes { bandwidth, .. } => {
                self.version += 1;
                let (from, sent) = match self.serial.remove(&id) {
                    Some(s) => (now.max(s.busy_until), s.tokens),
                    None => (now + setup, 0),
                };
                let b = self.bytes(tokens.saturating_sub(sent));
                self.bytes_moved += b;
                let secs = if bandwidth > 0.0 { b / bandwidth } else { 0.0 };
                vec![Completion {
                    id,
                    owner,
                    at: from + Duration::from_secs_f64(secs),
                    version: self.version,
                    drain: false,
                }]
            }
            TransferModel::Contention { .. } => {
                self.advance(now);
                let bytes_per_token = self.bytes_per_token();
                match self.flows.get_mut(&id) {
                    Some(f) if f.open => {
                        let more = tokens.saturating_sub(f.tokens);
                        f.tokens = f.tokens.max(tokens);
                        f.open = false;
                        f.remaining += more.saturating_mul(bytes_per_token) as f64;
                    }
                    _ => {
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
                                ready_at: now + setup,
                                tokens,
                                open: false,
                            },
                        );
                    }
                }
                self.predict(now)
            }
        }
    }

    /// Offers the first `tokens` of `id`'s transfer (cumulative) before it
    /// starts: KV of finished prefill chunks streams while later chunks
    /// compute (SGLang `send_kv_chunk`), so the transfer overlaps the
    /// prefill. The setup latency is paid once, at the first chunk. No
    /// effect under the fixed model. Returns changed completions.
    pub fn stream(
        &mut self,
        id: HandoffId,
        owner: WorkerId,
        src: WorkerId,
        dst: WorkerId,
        tokens: u64,
        now: Instant,
    ) -> Vec<Completion> {
        let model = self.model.unwrap_or_default();
        let setup = self.fan.setup(model.base());
        match model {
            TransferModel::Fixed(_) => Vec::new(),
            TransferModel::Bytes { bandwidth, .. } => {
                let s = self.serial.entry(id).or_insert(Serial {
                    tokens: 0,
                    busy_until: now + setup,
                });
                let more = tokens.saturating_sub(s.tokens);
                s.tokens = s.tokens.max(tokens);
                let b = more.saturating_mul(self.bytes_per_token()) as f64;
                let secs = if bandwidth > 0.0 { b / bandwidth } else { 0.0 };
                let s = self.serial.get_mut(&id).expect("just inserted");
                s.busy_until = now.max(s.busy_until) + Duration::from_secs_f64(secs);
                self.bytes_moved += b;
                Vec::new()
            }
            TransferModel::Contention { .. } => {
                // A chunk stamped before the links' clock (a cached prefix
                // sent as its step began, released at the step's end)
                // joins from that clock: shared links cannot be rewound.
                let now = now.max(self.last);
                self.advance(now);
                let bytes_per_token = self.bytes_per_token();
                let f = self.flows.entry(id).or_insert(Flow {
                    id,
                    owner,
                    src,
                    dst,
                    remaining: 0.0,
                    started: now,
                    ready_at: now + setup,
                    tokens: 0,
                    open: true,
                });
                if !f.open {
                    return Vec::new();
                }
                let more = tokens.saturating_sub(f.tokens);
                f.tokens = f.tokens.max(tokens);
                f.remaining += more.saturating_mul(bytes_per_token) as f64;
                self.predict(now)
            }
        }
    }

    /// Forgets a transfer that streamed chunks but will never start (its
    /// source ended first). Returns changed completions.
    pub fn abandon(&mut self, id: HandoffId, now: Instant) -> Vec<Completion> {
        self.serial.remove(&id);
        if !self.flows.get(&id).is_some_and(|f| f.open) {
            return Vec::new();
        }
        self.advance(now);
        self.flows.remove(&id);
        self.predict(now)
    }

    /// Re-predicts every flow after a [`Completion::drain`].
    pub fn reflow(&mut self, now: Instant) -> Vec<Completion> {
        if !matches!(self.model, Some(TransferModel::Contention { .. })) {
            return Vec::new();
        }
        self.advance(now);
        self.predict(now)
    }

    fn bytes_per_token(&self) -> u64 {
        match self.model {
            Some(TransferModel::Bytes {
                bytes_per_token, ..
            })
            | Some(TransferModel::Contention {
                bytes_per_token, ..
            }) => bytes_per_token,
            _ => 0,
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
        for f in self.flows.values().filter(|f| f.moving()) {
            *per_link.entry(f.src).or_default() += 1;
            *per_link.entry(f.dst).or_default() += 1;
        }
        self.flows
            .values()
            .filter(|f| f.moving())
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
                // A streaming flow's drain time is rounded to the ns: what
                // is left then is rounding, not bytes.
                if f.open && f.remaining < 1.0 {
                    f.remaining = 0.0;
                }
            }
        }
        self.last = now;
    }

    fn predict(&mut self, now: Instant) -> Vec<Completion> {
        self.version += 1;
        let rates = self.rates();
        self.flows
            .values()
            .filter(|f| !f.open || f.remaining > 0.0)
            .map(|f| {
                let rate = rates.get(&f.id).copied().unwrap_or(0.0);
                let secs = if rate > 0.0 { f.remaining / rate } else { 0.0 };
                let start = now.max(f.ready_at);
                let mut at = start + Duration::from_secs_f64(secs);
                if f.open {
                    // Later than now, so the reflow it causes makes progress.
                    at = at.max(now + Duration::from_nanos(1));
                }
                Completion {
                    id: f.id,
                    owner: f.owner,
                    at,
                    version: self.version,
                    drain: f.open,
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

    /// `send_kv_chunk`: chunks offered during the prefill move while later
    /// chunks compute, so only what is left when the transfer starts (at
    /// the pin) is on the critical path; the setup latency is paid once.
    #[test]
    fn bytes_model_streams_chunks_ahead_of_the_start() {
        let model = TransferModel::Bytes {
            base: Duration::from_millis(1),
            bytes_per_token: 1000,
            bandwidth: 1e6,
        };
        let (id, w0, w1) = (HandoffId(1), WorkerId(0), WorkerId(1));
        let mut t = TransferTimer::new(model);
        assert!(t.stream(id, w0, w0, w1, 300, Instant::ZERO).is_empty());
        // Ready at 1 + 300 ms; the next chunk queues behind it.
        t.stream(id, w0, w0, w1, 500, Instant::from_millis(100));
        let c = t.start(id, w0, w0, w1, 1000, Instant::from_millis(600));
        assert_eq!(c[0].at, Instant::from_millis(1100));
        assert!((t.bytes_moved - 1e6).abs() < 1e-6);
        // Without chunks the whole transfer follows the start.
        let mut plain = TransferTimer::new(model);
        let c = plain.start(id, w0, w0, w1, 1000, Instant::from_millis(600));
        assert_eq!(c[0].at, Instant::from_millis(1601));
    }

    /// Under contention a streaming flow shares its links only while it has
    /// bytes: when it drains, the timer says so and the others speed up.
    #[test]
    fn contention_streaming_flow_shares_only_while_it_moves() {
        let model = TransferModel::Contention {
            base: Duration::ZERO,
            bytes_per_token: 1,
            bandwidth: 1000.0,
        };
        let (a, b) = (HandoffId(1), HandoffId(2));
        let (w0, w1, w2) = (WorkerId(0), WorkerId(1), WorkerId(2));
        let mut t = TransferTimer::new(model);
        t.stream(a, w0, w0, w1, 100, Instant::ZERO);
        let now = t.start(b, w0, w0, w2, 1000, Instant::ZERO);
        // a drains its 100 bytes at half the link: 200 ms.
        let drain = now.iter().find(|c| c.id == a).copied().expect("a");
        assert!(drain.drain && drain.at == Instant::from_millis(200));
        assert!(t.is_current(&drain));
        // b alone again from 200 ms: 900 bytes left at full rate.
        let after = t.reflow(drain.at);
        let done = after.iter().find(|c| c.id == b).expect("b");
        assert!(!done.drain);
        assert_eq!(done.at, Instant::from_millis(1100));
        assert!(
            after.iter().all(|c| c.id != a),
            "a idle, nothing to predict"
        );
        // a's prefill ends: its last 50 tokens and its completion.
        let closed = t.start(a, w0, w0, w1, 150, Instant::from_millis(300));
        let ca = closed.iter().find(|c| c.id == a).expect("a");
        assert!(!ca.drain && ca.at == Instant::from_millis(400));
        // A stream whose source ended before starting is forgotten.
        t.stream(HandoffId(3), w0, w0, w1, 10, Instant::from_millis(300));
        assert!(!t
            .abandon(HandoffId(3), Instant::from_millis(301))
            .is_empty());
        assert!(
            t.abandon(a, Instant::from_millis(301)).is_empty(),
            "a started"
        );
    }

    /// A chunk stamped before the links' clock (SGLang's early-sent cached
    /// prefix, stamped at its step's start and released at its end) starts
    /// flowing at the clock: the bytes other flows moved meanwhile are not
    /// moved again.
    #[test]
    fn contention_stream_in_the_past_joins_at_the_clock() {
        let model = TransferModel::Contention {
            base: Duration::ZERO,
            bytes_per_token: 1,
            bandwidth: 1000.0,
        };
        let (a, b) = (HandoffId(1), HandoffId(2));
        let (w0, w1) = (WorkerId(0), WorkerId(1));
        let mut t = TransferTimer::new(model);
        t.start(b, w0, w0, w1, 1000, Instant::ZERO);
        t.reflow(Instant::from_millis(500));
        let c = t.stream(a, w0, w0, w1, 100, Instant::from_millis(100));
        // b moved 500 bytes alone; from 500 ms the two share the link (a
        // drains its 100 bytes at half of it), not from 100 ms.
        let drain_a = c.iter().find(|c| c.id == a).expect("a");
        assert_eq!(drain_a.at, Instant::from_millis(700));
        let done_b = c.iter().find(|c| c.id == b).expect("b");
        assert_eq!(done_b.at, Instant::from_millis(1500));
        assert!((t.bytes_moved - 500.0).abs() < 1e-6);
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

    /// A handoff between TP1 prefill and TP2 decode (and 2 -> 1) moves the
    /// same bytes in two transfers; the setup is paid once per transfer of
    /// the busiest issuing rank: one each under vLLM's pull from TP1 into
    /// TP2, two when a TP1 decode rank reads from two prefill ranks.
    #[test]
    fn a_fanned_handoff_moves_the_same_bytes_in_more_transfers() {
        use crate::rank_fan::FanIssuer;
        let model = TransferModel::Bytes {
            base: Duration::from_millis(10),
            bytes_per_token: 1000,
            bandwidth: 1e6,
        };
        let (id, w0, w1) = (HandoffId(1), WorkerId(0), WorkerId(1));
        let run = |fan: RankFan| {
            let mut t = TransferTimer::new(model).with_fan(fan);
            let c = t.start(id, w1, w0, w1, 500, Instant::ZERO);
            (c[0].at, t.bytes_moved, t.rank_transfers)
        };
        let uniform = run(RankFan::UNIFORM);
        assert_eq!(uniform, (Instant::from_millis(510), 500_000.0, 1));
        let up = run(RankFan::new(1, 2, FanIssuer::Decode));
        assert_eq!(up, (Instant::from_millis(510), 500_000.0, 2));
        let down = run(RankFan::new(2, 1, FanIssuer::Decode));
        assert_eq!(down, (Instant::from_millis(520), 500_000.0, 2));
        // SGLang: the TP1 prefill rank writes both decode slices.
        let sglang = run(RankFan::new(1, 2, FanIssuer::Prefill));
        assert_eq!(sglang, (Instant::from_millis(520), 500_000.0, 2));
        // Contention charges the same setup before its flow moves.
        let shared = TransferModel::Contention {
            base: Duration::from_millis(10),
            bytes_per_token: 1000,
            bandwidth: 1e6,
        };
        let mut t = TransferTimer::new(shared).with_fan(RankFan::new(2, 1, FanIssuer::Decode));
        let c = t.start(id, w1, w0, w1, 500, Instant::ZERO);
        assert_eq!(c[0].at, Instant::from_millis(520));
        // A streamed handoff pays the fanned setup once, at its first chunk.
        let mut t = TransferTimer::new(model).with_fan(RankFan::new(1, 2, FanIssuer::Prefill));
        t.stream(id, w0, w0, w1, 300, Instant::ZERO);
        // Busy until 2 × 10 + 300 ms; the last 200 tokens follow.
        let c = t.start(id, w0, w0, w1, 500, Instant::from_millis(100));
        assert_eq!(c[0].at, Instant::from_millis(520));
        assert_eq!(t.rank_transfers, 2);
    }
}
