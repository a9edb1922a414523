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

use handoff_core::ids::{RequestId, WorkerId};
use handoff_core::rng::Rng;
use handoff_core::time::{Duration, Instant};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

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

/// One fault, applied at a model time given by its [`TimedFault`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Fault {
    /// The worker dies: everything it holds (requests, leases, reservations,
    /// KV) is gone, and its peers and the frontend are told it is lost. It
    /// stays down until a [`Fault::Restart`]; killing a worker that is
    /// already down changes nothing.
    Kill {
        /// The worker that dies.
        worker: WorkerId,
    },
    /// The worker comes back as its next generation with a fresh core. If
    /// it was up, this is a [`Fault::Kill`] immediately followed by the
    /// restart.
    Restart {
        /// The worker that restarts.
        worker: WorkerId,
    },
    /// Facts between `a` and `b`, in both directions, are dropped when sent
    /// in `[at, until)`. [`FaultInjector::fact`] enforces this by itself from
    /// the plan; the engine sees the popped fault only to log or count it.
    Partition {
        /// One side.
        a: WorkerId,
        /// The other side.
        b: WorkerId,
        /// First instant at which the pair can talk again.
        until: Instant,
    },
    /// The client cancels the request (a no-op for the engine if the
    /// request has finished, was already cancelled or does not exist).
    Cancel {
        /// The request cancelled.
        request: RequestId,
    },
}

/// A [`Fault`] and the model time at which it happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TimedFault {
    /// When the fault happens (for a partition, when it starts).
    pub at: Instant,
    /// What happens.
    pub fault: Fault,
}

/// Per-fact misbehaviour of the worker-to-worker control channel.
///
/// Each probability is in `[0, 1]` and is decided independently per fact:
/// a fact is dropped with probability `drop`; a fact not dropped is
/// duplicated with probability `duplicate`; each delivered copy gets an
/// extra delay, uniform in `[1ns, max_delay]`, with probability `delay`.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct FactFaults {
    /// Probability that a fact is lost.
    pub drop: f64,
    /// Probability that a fact that is not lost arrives twice.
    pub duplicate: f64,
    /// Probability that a delivered copy is held back by up to `max_delay`.
    pub delay: f64,
    /// Longest extra delay; a zero `max_delay` disables delays.
    pub max_delay: Duration,
}

impl FactFaults {
    /// A channel that delivers every fact once, on time.
    pub const NONE: FactFaults = FactFaults {
        drop: 0.0,
        duplicate: 0.0,
        delay: 0.0,
        max_delay: Duration::ZERO,
    };

    /// Whether this channel never misbehaves. A probability counts as active
    /// only when it is `> 0` (so a NaN, like 0, never fires), and delays only
    /// when `max_delay` is non-zero too.
    pub fn is_none(&self) -> bool {
        let delays = active(self.delay) && !self.max_delay.is_zero();
        !(active(self.drop) || active(self.duplicate) || delays)
    }
}

impl Default for FactFaults {
    fn default() -> Self {
        FactFaults::NONE
    }
}

/// What goes wrong in a run; see the [module docs](self) for the text form.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct FaultPlan {
    /// Seeds the injector's random streams.
    pub seed: u64,
    /// Timed faults, sorted by `at`, ties in the order they were given.
    /// Use [`FaultPlan::push`] to keep the order when building by hand;
    /// [`FaultInjector::new`] sorts (stably) in any case.
    pub timed: Vec<TimedFault>,
    /// Control-channel misbehaviour.
    pub facts: FactFaults,
    /// Probability in `[0, 1]` that a KV transfer fails instead of completing.
    pub transfer_fail: f64,
}

impl Default for FaultPlan {
    fn default() -> Self {
        FaultPlan::none()
    }
}

fn active(p: f64) -> bool {
    p > 0.0
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl FaultPlan {
    /// The plan that injects nothing (seed 0).
    pub fn none() -> Self {
        FaultPlan {
            seed: 0,
            timed: Vec::new(),
            facts: FactFaults::NONE,
            transfer_fail: 0.0,
        }
    }

    /// Whether the plan injects nothing: no timed faults, a perfect channel
    /// and transfers that never fail. The seed does not matter.
    pub fn is_empty(&self) -> bool {
        self.timed.is_empty() && self.facts.is_none() && !active(self.transfer_fail)
    }

    /// Adds a timed fault after every fault already at or before `at`,
    /// keeping [`FaultPlan::timed`] sorted and ties in insertion order.
    pub fn push(&mut self, at: Instant, fault: Fault) {
        let i = self.timed.partition_point(|t| t.at <= at);
        self.timed.insert(i, TimedFault { at, fault });
    }

    /// Parses the text format; the same as `text.parse()`.
    pub fn parse(text: &str) -> Result<FaultPlan, FaultPlanError> {
        text.parse()
    }

    /// A seeded random plan for simulation testing, the same for the same
    /// arguments.
    ///
    /// `intensity` (clamped to `[0, 1]`, NaN as 0) scales everything: at 0
    /// the plan [is empty](FaultPlan::is_empty); at 1 it has 4 kills, each
    /// of a random worker at a random time in `[0, span)` and followed by a
    /// restart of that worker later but no later than `span` (1 ns after the
    /// kill when `span` is zero); 3 partitions
    /// between two distinct random workers, each lasting up to a quarter of
    /// `span`; cancels of about 5% of `requests` (at most 1000, random ids
    /// `< requests`, possibly repeated) at random times in `[0, span)`; and
    /// probabilities drawn in the upper half of: drop 10%, duplicate 5%,
    /// delay 20% (max delay 1..=20 ms), transfer failure 5%. Counts are
    /// `round(intensity * full count)`. Kills need a worker, partitions two
    /// and cancels a request; with fewer there are none of that kind.
    ///
    /// The plan's `seed` is `seed`; the generator's own draws come from a
    /// differently mixed stream.
    pub fn generate(
        seed: u64,
        workers: u32,
        requests: u64,
        span: Duration,
        intensity: f64,
    ) -> FaultPlan {
        let i = if intensity.is_nan() {
            0.0
        } else {
            intensity.clamp(0.0, 1.0)
        };
        let mut plan = FaultPlan {
            seed,
            ..FaultPlan::none()
        };
        if !active(i) {
            return plan;
        }
        let mut rng = Rng::seeded(seed ^ GENERATE_STREAM);
        let span_ns = nanos(span);
        // `round` of a value in [0, 1000]: the casts cannot truncate.
        let count = |full: f64| (i * full).round() as u64;

        if workers > 0 {
            for _ in 0..count(4.0) {
                let worker = WorkerId(rng.below(u64::from(workers)) as u32);
                let down = rng.below(span_ns);
                let up = down + 1 + rng.below(span_ns - down);
                plan.push(Instant(down), Fault::Kill { worker });
                plan.push(Instant(up), Fault::Restart { worker });
            }
        }
        if workers > 1 {
            let w = u64::from(workers);
            for _ in 0..count(3.0) {
                let a = rng.below(w);
                let b = (a + 1 + rng.below(w - 1)) % w;
                let from = rng.below(span_ns);
                let len = 1 + rng.below((span_ns / 4).max(1));
                plan.push(
                    Instant(from),
                    Fault::Partition {
                        a: WorkerId(a as u32),
                        b: WorkerId(b as u32),
                        until: Instant(from.saturating_add(len)),
                    },
                );
            }
        }
        if requests > 0 {
            let full = requests.min(20_000) as f64 / 20.0;
            for _ in 0..count(full) {
                let request = RequestId(rng.below(requests));
                let at = rng.below(span_ns);
                plan.push(Instant(at), Fault::Cancel { request });
            }
        }
        let mut upper_half = |full: f64| i * full * (0.5 + 0.5 * rng.next_f64());
        plan.facts.drop = upper_half(0.10);
        plan.facts.duplicate = upper_half(0.05);
        plan.facts.delay = upper_half(0.20);
        plan.transfer_fail = upper_half(0.05);
        plan.facts.max_delay = Duration::from_micros(1_000 + rng.below(19_001));
        plan
    }
}

/// What happens to one fact; extra delays come on top of the channel's own
/// latency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum FactFate {
    /// Delivered once.
    Deliver {
        /// Extra delay (zero when not delayed).
        extra_delay: Duration,
    },
    /// Lost, by chance or because a partition was active when it was sent.
    Drop,
    /// Delivered twice; each copy has its own extra delay, so the second
    /// copy may overtake the first.
    Duplicate {
        /// Extra delay of the first copy.
        first_extra: Duration,
        /// Extra delay of the second copy.
        second_extra: Duration,
    },
}

/// What a [`FaultInjector`] has injected so far, for reports.
///
/// Timed faults count when [`FaultInjector::pop_due`] hands them out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct FaultCounts {
    /// Kills handed out.
    pub kills: u64,
    /// Restarts handed out.
    pub restarts: u64,
    /// Partitions handed out.
    pub partitions: u64,
    /// Cancels handed out.
    pub cancels: u64,
    /// Facts decided (every call to [`FaultInjector::fact`]).
    pub facts: u64,
    /// Facts dropped because a partition between their ends was active.
    pub facts_partitioned: u64,
    /// Facts dropped by chance (not counting partitions).
    pub facts_dropped: u64,
    /// Facts delivered twice.
    pub facts_duplicated: u64,
    /// Delivered copies given a non-zero extra delay (a duplicated fact can
    /// count twice).
    pub facts_delayed: u64,
    /// Transfers decided (every call to [`FaultInjector::transfer_ok`]).
    pub transfers: u64,
    /// Transfers failed.
    pub transfers_failed: u64,
}

impl FaultCounts {
    /// Nothing was injected: no timed fault handed out, no fact dropped,
    /// duplicated or delayed, no transfer failed (facts and transfers may
    /// still have been decided).
    pub fn injected_nothing(&self) -> bool {
        self.kills
            + self.restarts
            + self.partitions
            + self.cancels
            + self.facts_partitioned
            + self.facts_dropped
            + self.facts_duplicated
            + self.facts_delayed
            + self.transfers_failed
            == 0
    }
}

impl fmt::Display for FaultCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "kills {}, restarts {}, partitions {}, cancels {}; \
             facts {}: {} cut by partition, {} dropped, {} duplicated, {} delayed; \
             transfers {}: {} failed",
            self.kills,
            self.restarts,
            self.partitions,
            self.cancels,
            self.facts,
            self.facts_partitioned,
            self.facts_dropped,
            self.facts_duplicated,
            self.facts_delayed,
            self.transfers,
            self.transfers_failed
        )
    }
}

/// A [`FaultPlan`] being applied.
///
/// Randomness comes from two streams seeded from the plan's seed, one for
/// facts and one for transfers. [`fact`](FaultInjector::fact) always draws
/// [`FACT_DRAWS`] values and [`transfer_ok`](FaultInjector::transfer_ok)
/// always draws [`TRANSFER_DRAWS`], whatever the probabilities and the
/// outcome (a partition-dropped fact still draws). So the n-th fact's fate
/// depends only on the seed, the probabilities and its own arguments, never
/// on how earlier facts fared or on how many transfers ran in between; and a
/// plan whose probabilities are all 0 delivers every fact once with no extra
/// delay and completes every transfer.
#[derive(Clone, Debug)]
pub struct FaultInjector {
    plan: FaultPlan,
    next: usize,
    fact_rng: Rng,
    transfer_rng: Rng,
    /// Partition windows per unordered worker pair (smaller id first),
    /// sorted, merged and disjoint: `[start, until)` in nanoseconds.
    cuts: BTreeMap<(WorkerId, WorkerId), Vec<(u64, u64)>>,
    counts: FaultCounts,
}

fn pair(a: WorkerId, b: WorkerId) -> (WorkerId, WorkerId) {
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}

/// `[0, 1)` from 64 random bits, as [`Rng::next_f64`] does.
fn unit(x: u64) -> f64 {
    (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// `[0, n)` from 64 random bits, as [`Rng::below`] does (but always from a
/// drawn value, so the draw count does not depend on `n`).
fn scale(x: u64, n: u64) -> u64 {
    ((u128::from(x) * u128::from(n)) >> 64) as u64
}

impl FaultInjector {
    /// Starts applying `plan` (its timed faults are stably sorted by time).
    pub fn new(mut plan: FaultPlan) -> Self {
        plan.timed.sort_by_key(|t| t.at);
        let mut cuts: BTreeMap<(WorkerId, WorkerId), Vec<(u64, u64)>> = BTreeMap::new();
        for t in &plan.timed {
            if let Fault::Partition { a, b, until } = t.fault {
                if t.at < until {
                    cuts.entry(pair(a, b)).or_default().push((t.at.0, until.0));
                }
            }
        }
        for windows in cuts.values_mut() {
            windows.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::with_capacity(windows.len());
            for &(s, e) in windows.iter() {
                match merged.last_mut() {
                    Some(last) if s <= last.1 => last.1 = last.1.max(e),
                    _ => merged.push((s, e)),
                }
            }
            *windows = merged;
        }
        FaultInjector {
            fact_rng: Rng::seeded(plan.seed),
            transfer_rng: Rng::seeded(plan.seed ^ TRANSFER_STREAM),
            plan,
            next: 0,
            cuts,
            counts: FaultCounts::default(),
        }
    }

    /// The plan being applied (timed faults sorted).
    pub fn plan(&self) -> &FaultPlan {
        &self.plan
    }

    /// When the earliest timed fault not yet taken happens; `None` when all
    /// have been taken.
    pub fn next_timed(&self) -> Option<Instant> {
        self.plan.timed.get(self.next).map(|t| t.at)
    }

    /// Timed faults not yet taken, in order.
    pub fn remaining(&self) -> &[TimedFault] {
        &self.plan.timed[self.next..]
    }

    /// Takes the next timed fault if it is due at or before `now`, in plan
    /// order (by time, ties in plan order). Call until `None` to take every
    /// fault due.
    pub fn pop_due(&mut self, now: Instant) -> Option<TimedFault> {
        let t = *self.plan.timed.get(self.next)?;
        if t.at > now {
            return None;
        }
        self.next += 1;
        let c = &mut self.counts;
        match t.fault {
            Fault::Kill { .. } => c.kills += 1,
            Fault::Restart { .. } => c.restarts += 1,
            Fault::Partition { .. } => c.partitions += 1,
            Fault::Cancel { .. } => c.cancels += 1,
        }
        Some(t)
    }

    /// Cuts the link between `a` and `b` over `[from, until)` now, outside
    /// the plan (a harness injecting a partition at a phase it reached).
    pub fn cut(&mut self, a: WorkerId, b: WorkerId, from: Instant, until: Instant) {
        if from >= until {
            return;
        }
        self.counts.partitions += 1;
        let windows = self.cuts.entry(pair(a, b)).or_default();
        windows.push((from.0, until.0));
        windows.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(windows.len());
        for &(s, e) in windows.iter() {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        *windows = merged;
    }

    /// Whether a partition between `a` and `b` (either order) is active at
    /// `at`, i.e. some partition of the pair has `start <= at < until`.
    /// Independent of which timed faults have been popped.
    pub fn is_partitioned(&self, a: WorkerId, b: WorkerId, at: Instant) -> bool {
        let Some(windows) = self.cuts.get(&pair(a, b)) else {
            return false;
        };
        let i = windows.partition_point(|&(s, _)| s <= at.0);
        i > 0 && at.0 < windows[i - 1].1
    }

    /// Decides the fate of one fact sent from `from` to `to` at `sent`.
    ///
    /// A partition of the pair active at `sent` drops it; otherwise it is
    /// dropped, duplicated and delayed by the plan's [`FactFaults`]. Always
    /// draws [`FACT_DRAWS`] values from the fact stream.
    pub fn fact(&mut self, from: WorkerId, to: WorkerId, sent: Instant) -> FactFate {
        let mut r = [0u64; FACT_DRAWS as usize];
        for x in &mut r {
            *x = self.fact_rng.next_u64();
        }
        let [drop, dup, delay1, amount1, delay2, amount2] = r;
        self.counts.facts += 1;
        if self.is_partitioned(from, to, sent) {
            self.counts.facts_partitioned += 1;
            return FactFate::Drop;
        }
        let ff = self.plan.facts;
        if unit(drop) < ff.drop {
            self.counts.facts_dropped += 1;
            return FactFate::Drop;
        }
        let first_extra = self.extra(delay1, amount1);
        if unit(dup) < ff.duplicate {
            self.counts.facts_duplicated += 1;
            let second_extra = self.extra(delay2, amount2);
            FactFate::Duplicate {
                first_extra,
                second_extra,
            }
        } else {
            FactFate::Deliver {
                extra_delay: first_extra,
            }
        }
    }

    fn extra(&mut self, decide: u64, amount: u64) -> Duration {
        let max = nanos(self.plan.facts.max_delay);
        if max == 0 || unit(decide) >= self.plan.facts.delay {
            return Duration::ZERO;
        }
        self.counts.facts_delayed += 1;
        Duration::from_nanos(1 + scale(amount, max))
    }

    /// Whether a KV transfer completes: `false` with probability
    /// `transfer_fail`. Always draws exactly [`TRANSFER_DRAWS`] value from
    /// the transfer stream.
    pub fn transfer_ok(&mut self) -> bool {
        let x = self.transfer_rng.next_u64();
        self.counts.transfers += 1;
        let ok = unit(x) >= self.plan.transfer_fail;
        if !ok {
            self.counts.transfers_failed += 1;
        }
        ok
    }

    /// What has been injected so far.
    pub fn injected(&self) -> FaultCounts {
        self.counts
    }
}

// ---------------------------------------------------------------- text form

/// A [`FaultPlan`] text that does not parse, with where and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultPlanError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters, of the offending token (or just past
    /// the directive's last token when something is missing).
    pub column: usize,
    /// What is wrong.
    pub kind: FaultPlanErrorKind,
}

/// What a token was expected to be, in [`FaultPlanErrorKind::Expected`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expected {
    /// A worker id, `0..=4294967295`.
    WorkerId,
    /// A request id, `0..=18446744073709551615`.
    RequestId,
    /// A seed, `0..=18446744073709551615`.
    Seed,
    /// A decimal number in `[0, 1]`.
    Probability,
    /// A time such as `1.5s`.
    Time,
    /// This keyword.
    Keyword(&'static str),
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expected::WorkerId => f.write_str("a worker id"),
            Expected::RequestId => f.write_str("a request id"),
            Expected::Seed => f.write_str("a seed (an integer up to 2^64-1)"),
            Expected::Probability => f.write_str("a probability"),
            Expected::Time => f.write_str("a time like 1.5s, 250ms, 20us or 100ns"),
            Expected::Keyword(k) => write!(f, "`{k}`"),
        }
    }
}

/// Why a [`FaultPlan`] text does not parse. Quoted tokens are clipped to 40
/// characters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultPlanErrorKind {
    /// The first word of a directive is not a directive.
    UnknownDirective {
        /// The word.
        found: String,
    },
    /// A token is missing (`found: None`) or is not what the grammar needs.
    Expected {
        /// What was needed.
        expected: Expected,
        /// The token found instead; `None` at the end of the directive.
        found: Option<String>,
    },
    /// A number that is not in `[0, 1]` (or not finite) given as a
    /// probability.
    ProbabilityOutOfRange {
        /// The token.
        found: String,
    },
    /// A time with a minus sign.
    NegativeTime {
        /// The token.
        found: String,
    },
    /// A time past `u64::MAX` nanoseconds (about 584 years).
    TimeOutOfRange {
        /// The token.
        found: String,
    },
    /// A time with digits finer than a nanosecond.
    SubNanosecond {
        /// The token.
        found: String,
    },
    /// A partition that does not end after it starts.
    EmptyPartition {
        /// Its start.
        from: Instant,
        /// Its end.
        until: Instant,
    },
    /// A partition between a worker and itself.
    SelfPartition {
        /// The worker named twice.
        worker: WorkerId,
    },
    /// A once-only directive given again.
    Repeated {
        /// The directive.
        directive: &'static str,
        /// The line that gave it first.
        first_line: usize,
    },
    /// More than [`MAX_TIMED_FAULTS`] timed faults.
    TooManyTimedFaults {
        /// The limit.
        max: usize,
    },
    /// A token after a complete directive.
    Trailing {
        /// The token.
        found: String,
    },
}

impl fmt::Display for FaultPlanErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use FaultPlanErrorKind as K;
        match self {
            K::UnknownDirective { found } => write!(
                f,
                "unknown directive {found:?} (expected seed, kill, restart, partition, \
                 cancel, drop, duplicate, delay or transfer-fail)"
            ),
            K::Expected {
                expected,
                found: Some(found),
            } => write!(f, "expected {expected}, found {found:?}"),
            K::Expected {
                expected,
                found: None,
            } => write!(f, "expected {expected}, found end of directive"),
            K::ProbabilityOutOfRange { found } => {
                write!(f, "probability {found:?} is not a number in [0, 1]")
            }
            K::NegativeTime { found } => write!(f, "time {found:?} is negative"),
            K::TimeOutOfRange { found } => {
                write!(f, "time {found:?} is past {}ns", u64::MAX)
            }
            K::SubNanosecond { found } => {
                write!(f, "time {found:?} is finer than a nanosecond")
            }
            K::EmptyPartition { from, until } => write!(
                f,
                "partition from {} to {} is empty (it must end after it starts)",
                TimeText(from.0),
                TimeText(until.0)
            ),
            K::SelfPartition { worker } => write!(
                f,
                "a partition needs two different workers, found {} twice",
                worker.0
            ),
            K::Repeated {
                directive,
                first_line,
            } => write!(f, "`{directive}` given twice (first on line {first_line})"),
            K::TooManyTimedFaults { max } => write!(f, "more than {max} timed faults"),
            K::Trailing { found } => {
                write!(f, "unexpected {found:?} after a complete directive")
            }
        }
    }
}

impl fmt::Display for FaultPlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}, column {}: {}",
            self.line, self.column, self.kind
        )
    }
}

impl std::error::Error for FaultPlanError {}

/// A time in the text format, in the coarsest unit that is exact.
struct TimeText(u64);

impl fmt::Display for TimeText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        if n.is_multiple_of(1_000_000_000) {
            write!(f, "{}s", n / 1_000_000_000)
        } else if n.is_multiple_of(1_000_000) {
            write!(f, "{}ms", n / 1_000_000)
        } else if n.is_multiple_of(1_000) {
            write!(f, "{}us", n / 1_000)
        } else {
            write!(f, "{n}ns")
        }
    }
}

/// Writes the text format, one directive per line: `seed`, the timed faults
/// in order, then every channel and transfer probability (zeros included).
/// Times use the coarsest exact unit; probabilities use Rust's shortest
/// round-tripping decimal. A plan built by hand with values the parser
/// rejects (a NaN, a probability above 1, an empty partition, a delay past
/// `u64::MAX` ns) is written as is and will not parse back.
impl fmt::Display for FaultPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "seed {}", self.seed)?;
        for t in &self.timed {
            let at = TimeText(t.at.0);
            match t.fault {
                Fault::Kill { worker } => writeln!(f, "kill {} at {at}", worker.0)?,
                Fault::Restart { worker } => writeln!(f, "restart {} at {at}", worker.0)?,
                Fault::Partition { a, b, until } => writeln!(
                    f,
                    "partition {} {} from {at} to {}",
                    a.0,
                    b.0,
                    TimeText(until.0)
                )?,
                Fault::Cancel { request } => writeln!(f, "cancel {} at {at}", request.0)?,
            }
        }
        writeln!(f, "drop {}", self.facts.drop)?;
        writeln!(f, "duplicate {}", self.facts.duplicate)?;
        writeln!(
            f,
            "delay {} max {}",
            self.facts.delay,
            TimeText(nanos(self.facts.max_delay))
        )?;
        writeln!(f, "transfer-fail {}", self.transfer_fail)
    }
}

impl FromStr for FaultPlan {
    type Err = FaultPlanError;

    fn from_str(text: &str) -> Result<FaultPlan, FaultPlanError> {
        let mut p = Parser {
            plan: FaultPlan::none(),
            seen: [None; 5],
        };
        let mut toks: Vec<Tok<'_>> = Vec::with_capacity(MAX_DIRECTIVE_TOKENS);
        for (i, line) in text.split('\n').enumerate() {
            let line_no = i + 1;
            let code = match line.find('#') {
                Some(hash) => &line[..hash],
                None => line,
            };
            let mut start: Option<(usize, usize)> = None;
            let mut col = 0;
            for (byte, c) in code.char_indices() {
                col += 1;
                if c == ';' || c.is_whitespace() {
                    if let Some((s, sc)) = start.take() {
                        push_tok(&mut toks, &code[s..byte], sc);
                    }
                    if c == ';' {
                        p.directive(line_no, &toks)?;
                        toks.clear();
                    }
                } else if start.is_none() {
                    start = Some((byte, col));
                }
            }
            if let Some((s, sc)) = start {
                push_tok(&mut toks, &code[s..], sc);
            }
            p.directive(line_no, &toks)?;
            toks.clear();
        }
        p.plan.timed.sort_by_key(|t| t.at);
        Ok(p.plan)
    }
}

/// The longest directive (`partition A B from T to U`) has 7 tokens; one
/// more is kept to report as trailing, the rest are not stored, so memory
/// stays bounded whatever the input.
const MAX_DIRECTIVE_TOKENS: usize = 8;

#[derive(Clone, Copy)]
struct Tok<'a> {
    col: usize,
    text: &'a str,
}

fn push_tok<'a>(toks: &mut Vec<Tok<'a>>, text: &'a str, col: usize) {
    if toks.len() < MAX_DIRECTIVE_TOKENS {
        toks.push(Tok { col, text });
    }
}

/// A token for an error message, at most 40 characters.
fn clip(text: &str) -> String {
    match text.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_owned(),
    }
}

/// The once-only directives, indexing `Parser::seen`.
const ONCE: [&str; 5] = ["seed", "drop", "duplicate", "delay", "transfer-fail"];

struct Parser {
    plan: FaultPlan,
    /// For each of [`ONCE`], the line that gave it.
    seen: [Option<usize>; 5],
}

struct Cursor<'t, 'a> {
    toks: &'t [Tok<'a>],
    pos: usize,
    line: usize,
}

impl<'a> Cursor<'_, 'a> {
    fn err(&self, column: usize, kind: FaultPlanErrorKind) -> FaultPlanError {
        FaultPlanError {
            line: self.line,
            column,
            kind,
        }
    }

    /// Column just past the directive's last stored token.
    fn end_col(&self) -> usize {
        self.toks
            .last()
            .map_or(1, |t| t.col + t.text.chars().count())
    }

    fn next(&mut self, expected: Expected) -> Result<Tok<'a>, FaultPlanError> {
        match self.toks.get(self.pos) {
            Some(&t) => {
                self.pos += 1;
                Ok(t)
            }
            None => Err(self.err(
                self.end_col(),
                FaultPlanErrorKind::Expected {
                    expected,
                    found: None,
                },
            )),
        }
    }

    fn expected(&self, t: Tok<'_>, expected: Expected) -> FaultPlanError {
        self.err(
            t.col,
            FaultPlanErrorKind::Expected {
                expected,
                found: Some(clip(t.text)),
            },
        )
    }

    fn keyword(&mut self, kw: &'static str) -> Result<(), FaultPlanError> {
        let t = self.next(Expected::Keyword(kw))?;
        if t.text == kw {
            Ok(())
        } else {
            Err(self.expected(t, Expected::Keyword(kw)))
        }
    }

    fn integer<T: FromStr>(&mut self, expected: Expected) -> Result<(T, usize), FaultPlanError> {
        let t = self.next(expected)?;
        // Plain digits only: `u64::from_str` would also take a leading `+`.
        if !t.text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(self.expected(t, expected));
        }
        match t.text.parse() {
            Ok(v) => Ok((v, t.col)),
            Err(_) => Err(self.expected(t, expected)),
        }
    }

    fn worker(&mut self) -> Result<(WorkerId, usize), FaultPlanError> {
        let (w, col) = self.integer(Expected::WorkerId)?;
        Ok((WorkerId(w), col))
    }

    fn time(&mut self) -> Result<(u64, usize), FaultPlanError> {
        let t = self.next(Expected::Time)?;
        parse_time(t.text)
            .map(|ns| (ns, t.col))
            .map_err(|kind| self.err(t.col, kind))
    }

    fn probability(&mut self) -> Result<f64, FaultPlanError> {
        let t = self.next(Expected::Probability)?;
        let p: f64 = t
            .text
            .parse()
            .map_err(|_| self.expected(t, Expected::Probability))?;
        if !(0.0..=1.0).contains(&p) {
            return Err(self.err(
                t.col,
                FaultPlanErrorKind::ProbabilityOutOfRange {
                    found: clip(t.text),
                },
            ));
        }
        // Turns -0 into 0.
        Ok(p + 0.0)
    }

    fn finish(&self) -> Result<(), FaultPlanError> {
        match self.toks.get(self.pos) {
            Some(t) => Err(self.err(
                t.col,
                FaultPlanErrorKind::Trailing {
                    found: clip(t.text),
                },
            )),
            None => Ok(()),
        }
    }
}

/// Parses `digits[.digits](ns|us|ms|s)` exactly into nanoseconds.
fn parse_time(text: &str) -> Result<u64, FaultPlanErrorKind> {
    let expected = || FaultPlanErrorKind::Expected {
        expected: Expected::Time,
        found: Some(clip(text)),
    };
    let (number, unit) = if let Some(n) = text.strip_suffix("ns") {
        (n, 1u128)
    } else if let Some(n) = text.strip_suffix("us") {
        (n, 1_000)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1_000_000)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1_000_000_000)
    } else {
        return Err(expected());
    };
    let (negative, number) = match number.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, number),
    };
    let (int, frac) = match number.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (number, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(int) || frac.is_some_and(|f| !digits(f)) {
        return Err(expected());
    }
    if negative {
        return Err(FaultPlanErrorKind::NegativeTime { found: clip(text) });
    }
    let out_of_range = || FaultPlanErrorKind::TimeOutOfRange { found: clip(text) };
    let max = u128::from(u64::MAX);
    let mut whole: u128 = 0;
    for b in int.bytes() {
        whole = whole * 10 + u128::from(b - b'0');
        if whole > max {
            return Err(out_of_range());
        }
    }
    let mut total = whole * unit;
    if let Some(frac) = frac {
        let frac = frac.trim_end_matches('0');
        // A unit is at most 10^9 ns, so more than 9 significant fraction
        // digits (the last one non-zero) cannot be a whole nanosecond.
        if frac.len() > 9 {
            return Err(FaultPlanErrorKind::SubNanosecond { found: clip(text) });
        }
        let mut value: u128 = 0;
        for b in frac.bytes() {
            value = value * 10 + u128::from(b - b'0');
        }
        let scaled = value * unit;
        let denom = 10u128.pow(frac.len() as u32);
        if !scaled.is_multiple_of(denom) {
            return Err(FaultPlanErrorKind::SubNanosecond { found: clip(text) });
        }
        total += scaled / denom;
    }
    u64::try_from(total).map_err(|_| out_of_range())
}

impl Parser {
    fn directive(&mut self, line: usize, toks: &[Tok<'_>]) -> Result<(), FaultPlanError> {
        let Some(&head) = toks.first() else {
            return Ok(());
        };
        let mut c = Cursor { toks, pos: 1, line };
        let once = ONCE.iter().position(|d| *d == head.text);
        if let Some(i) = once {
            if let Some(first_line) = self.seen[i] {
                return Err(c.err(
                    head.col,
                    FaultPlanErrorKind::Repeated {
                        directive: ONCE[i],
                        first_line,
                    },
                ));
            }
            self.seen[i] = Some(line);
        }
        let timed = match head.text {
            "seed" => {
                self.plan.seed = c.integer(Expected::Seed)?.0;
                None
            }
            "drop" => {
                self.plan.facts.drop = c.probability()?;
                None
            }
            "duplicate" => {
                self.plan.facts.duplicate = c.probability()?;
                None
            }
            "delay" => {
                self.plan.facts.delay = c.probability()?;
                c.keyword("max")?;
                self.plan.facts.max_delay = Duration::from_nanos(c.time()?.0);
                None
            }
            "transfer-fail" => {
                self.plan.transfer_fail = c.probability()?;
                None
            }
            "kill" | "restart" => {
                let (worker, _) = c.worker()?;
                c.keyword("at")?;
                let (at, _) = c.time()?;
                let fault = if head.text == "kill" {
                    Fault::Kill { worker }
                } else {
                    Fault::Restart { worker }
                };
                Some(TimedFault {
                    at: Instant(at),
                    fault,
                })
            }
            "partition" => {
                let (a, _) = c.worker()?;
                let (b, b_col) = c.worker()?;
                if a == b {
                    return Err(c.err(b_col, FaultPlanErrorKind::SelfPartition { worker: a }));
                }
                c.keyword("from")?;
                let (from, _) = c.time()?;
                c.keyword("to")?;
                let (until, until_col) = c.time()?;
                if until <= from {
                    return Err(c.err(
                        until_col,
                        FaultPlanErrorKind::EmptyPartition {
                            from: Instant(from),
                            until: Instant(until),
                        },
                    ));
                }
                Some(TimedFault {
                    at: Instant(from),
                    fault: Fault::Partition {
                        a,
                        b,
                        until: Instant(until),
                    },
                })
            }
            "cancel" => {
                let (request, _) = c.integer(Expected::RequestId)?;
                c.keyword("at")?;
                let (at, _) = c.time()?;
                Some(TimedFault {
                    at: Instant(at),
                    fault: Fault::Cancel {
                        request: RequestId(request),
                    },
                })
            }
            other => {
                return Err(c.err(
                    head.col,
                    FaultPlanErrorKind::UnknownDirective { found: clip(other) },
                ))
            }
        };
        c.finish()?;
        if let Some(t) = timed {
            if self.plan.timed.len() >= MAX_TIMED_FAULTS {
                return Err(c.err(
                    head.col,
                    FaultPlanErrorKind::TooManyTimedFaults {
                        max: MAX_TIMED_FAULTS,
                    },
                ));
            }
            self.plan.timed.push(t);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "\
seed 7
kill 2 at 1.5s
restart 2 at 3s
partition 0 2 from 1s to 2s
cancel 17 at 250ms
drop 0.01
duplicate 0.02
delay 0.05 max 20ms
transfer-fail 0.02
";

    fn err(text: &str) -> FaultPlanError {
        FaultPlan::parse(text).expect_err(text)
    }

    fn at(line: usize, column: usize, text: &str) -> FaultPlanErrorKind {
        let e = err(text);
        assert_eq!((e.line, e.column), (line, column), "{text:?}: {e}");
        e.kind
    }

    #[test]
    fn parses_the_example() {
        let plan = FaultPlan::parse(EXAMPLE).unwrap();
        let w = WorkerId;
        assert_eq!(plan.seed, 7);
        assert_eq!(
            plan.timed,
            vec![
                TimedFault {
                    at: Instant::from_millis(250),
                    fault: Fault::Cancel {
                        request: RequestId(17)
                    }
                },
                TimedFault {
                    at: Instant::from_millis(1000),
                    fault: Fault::Partition {
                        a: w(0),
                        b: w(2),
                        until: Instant::from_millis(2000)
                    }
                },
                TimedFault {
                    at: Instant::from_millis(1500),
                    fault: Fault::Kill { worker: w(2) }
                },
                TimedFault {
                    at: Instant::from_millis(3000),
                    fault: Fault::Restart { worker: w(2) }
                },
            ]
        );
        assert_eq!(
            plan.facts,
            FactFaults {
                drop: 0.01,
                duplicate: 0.02,
                delay: 0.05,
                max_delay: Duration::from_millis(20)
            }
        );
        assert_eq!(plan.transfer_fail, 0.02);
        assert!(!plan.is_empty());
        assert_eq!(FaultPlan::parse(&plan.to_string()), Ok(plan));
    }

    #[test]
    fn separators_comments_and_blank_input() {
        assert_eq!(FaultPlan::parse(""), Ok(FaultPlan::none()));
        assert_eq!(
            FaultPlan::parse("  # nothing\n;;\r\n\t"),
            Ok(FaultPlan::none())
        );
        let plan = FaultPlan::parse("seed 3; kill 1 at 5ms # gone\r\n;restart 1 at 6ms;").unwrap();
        assert_eq!(plan.seed, 3);
        assert_eq!(plan.timed.len(), 2);
        assert_eq!(plan.timed[1].at, Instant::from_millis(6));
        assert!(FaultPlan::none().is_empty());
        assert_eq!(
            FaultPlan::parse(&FaultPlan::none().to_string()),
            Ok(FaultPlan::none())
        );
    }

    #[test]
    fn times_are_exact() {
        let t = |s: &str| parse_time(s);
        assert_eq!(t("1.5s"), Ok(1_500_000_000));
        assert_eq!(t("250ms"), Ok(250_000_000));
        assert_eq!(t("0.001us"), Ok(1));
        assert_eq!(t("7ns"), Ok(7));
        assert_eq!(t("0s"), Ok(0));
        assert_eq!(
            t("1.000000000000000000000000000000000000000000s"),
            Ok(1_000_000_000)
        );
        assert_eq!(t("18446744073709551615ns"), Ok(u64::MAX));
        assert_eq!(t("18446744073.709551615s"), Ok(u64::MAX));
        assert!(matches!(
            t("18446744073.709551616s"),
            Err(FaultPlanErrorKind::TimeOutOfRange { .. })
        ));
        assert!(matches!(
            t("99999999999999999999999999999999999999999999s"),
            Err(FaultPlanErrorKind::TimeOutOfRange { .. })
        ));
        assert!(matches!(
            t("1.5ns"),
            Err(FaultPlanErrorKind::SubNanosecond { .. })
        ));
        assert!(matches!(
            t("0.0000000001s"),
            Err(FaultPlanErrorKind::SubNanosecond { .. })
        ));
        assert!(matches!(
            t("-1s"),
            Err(FaultPlanErrorKind::NegativeTime { .. })
        ));
        for bad in [
            "1", "s", ".5s", "1.s", "1e3ms", "infs", "NaNs", "1 s", "+1s", "1.5.5s", "1µs", "--1s",
        ] {
            assert!(
                matches!(
                    t(bad),
                    Err(FaultPlanErrorKind::Expected {
                        expected: Expected::Time,
                        ..
                    })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn errors_name_line_and_column() {
        let e = err("seed 7\nkill x at 1s");
        assert_eq!(
            e.to_string(),
            r#"line 2, column 6: expected a worker id, found "x""#
        );

        assert_eq!(
            at(1, 1, "explode 3"),
            FaultPlanErrorKind::UnknownDirective {
                found: "explode".into()
            }
        );
        assert_eq!(
            at(1, 11, "kill 1 at 1.5"),
            FaultPlanErrorKind::Expected {
                expected: Expected::Time,
                found: Some("1.5".into())
            }
        );
        let missing = at(1, 10, "kill 1 at");
        assert_eq!(
            missing,
            FaultPlanErrorKind::Expected {
                expected: Expected::Time,
                found: None
            }
        );
        assert_eq!(
            missing.to_string(),
            "expected a time like 1.5s, 250ms, 20us or 100ns, found end of directive"
        );
        assert_eq!(
            at(1, 8, "kill 1 in 1s"),
            FaultPlanErrorKind::Expected {
                expected: Expected::Keyword("at"),
                found: Some("in".into())
            }
        );
        assert_eq!(
            at(1, 6, "kill 4294967296 at 1s"),
            FaultPlanErrorKind::Expected {
                expected: Expected::WorkerId,
                found: Some("4294967296".into())
            }
        );
        assert!(matches!(
            at(1, 6, "kill +1 at 1s"),
            FaultPlanErrorKind::Expected { .. }
        ));
        assert_eq!(
            at(2, 6, "\ndrop 1.5"),
            FaultPlanErrorKind::ProbabilityOutOfRange {
                found: "1.5".into()
            }
        );
        for p in ["NaN", "inf", "-0.1"] {
            assert!(matches!(
                at(1, 6, &format!("drop {p}")),
                FaultPlanErrorKind::ProbabilityOutOfRange { .. }
            ));
        }
        assert_eq!(
            at(1, 9, "seed 1; seed 2"),
            FaultPlanErrorKind::Repeated {
                directive: "seed",
                first_line: 1
            }
        );
        assert_eq!(
            at(1, 13, "partition 1 1 from 1s to 2s"),
            FaultPlanErrorKind::SelfPartition {
                worker: WorkerId(1)
            }
        );
        let empty = at(3, 26, "\n\npartition 0 1 from 2s to 1500ms");
        assert_eq!(
            empty.to_string(),
            "partition from 2s to 1500ms is empty (it must end after it starts)"
        );
        assert_eq!(
            at(1, 14, "kill 1 at 1s extra"),
            FaultPlanErrorKind::Trailing {
                found: "extra".into()
            }
        );
        assert!(matches!(
            at(1, 11, "kill 1 at -2ms"),
            FaultPlanErrorKind::NegativeTime { .. }
        ));
        assert!(matches!(
            at(1, 15, "delay 0.1 max 0.5ns"),
            FaultPlanErrorKind::SubNanosecond { .. }
        ));
        assert!(matches!(
            at(1, 10, "delay 0.1"),
            FaultPlanErrorKind::Expected {
                expected: Expected::Keyword("max"),
                found: None
            }
        ));
        // Columns count characters, not bytes; tabs count as one.
        assert!(matches!(
            at(1, 14, "seed\u{3000}1;\u{3000}kill x at 1s"),
            FaultPlanErrorKind::Expected {
                expected: Expected::WorkerId,
                ..
            }
        ));
        // Long tokens are clipped in messages.
        let long = "x".repeat(1000);
        let e = err(&format!("kill {long} at 1s"));
        assert!(e.to_string().len() < 120, "{e}");
    }

    #[test]
    fn too_many_timed_faults() {
        let mut text = "cancel 1 at 0s\n".repeat(MAX_TIMED_FAULTS);
        assert_eq!(
            FaultPlan::parse(&text).map(|p| p.timed.len()),
            Ok(MAX_TIMED_FAULTS)
        );
        text.push_str("cancel 2 at 1s");
        let e = err(&text);
        assert_eq!((e.line, e.column), (MAX_TIMED_FAULTS + 1, 1));
        assert_eq!(
            e.kind,
            FaultPlanErrorKind::TooManyTimedFaults {
                max: MAX_TIMED_FAULTS
            }
        );
    }

    #[test]
    fn zero_plan_delivers_everything_on_time() {
        for plan in [
            FaultPlan::none(),
            FaultPlan {
                seed: 99,
                ..FaultPlan::none()
            },
            FaultPlan::generate(5, 8, 100, Duration::from_secs(1), 0.0),
            // Delay probability without a max delay injects nothing either.
            FaultPlan {
                facts: FactFaults {
                    delay: 1.0,
                    ..FactFaults::NONE
                },
                ..FaultPlan::none()
            },
        ] {
            assert!(plan.is_empty(), "{plan}");
            let mut inj = FaultInjector::new(plan);
            assert_eq!(inj.next_timed(), None);
            assert_eq!(inj.pop_due(Instant::MAX), None);
            for i in 0..10_000u64 {
                let fate = inj.fact(WorkerId(i as u32 % 3), WorkerId(7), Instant(i * 997));
                assert_eq!(
                    fate,
                    FactFate::Deliver {
                        extra_delay: Duration::ZERO
                    }
                );
                assert!(inj.transfer_ok());
            }
            let c = inj.injected();
            assert_eq!((c.facts, c.transfers), (10_000, 10_000));
            assert_eq!(
                c,
                FaultCounts {
                    facts: 10_000,
                    transfers: 10_000,
                    ..FaultCounts::default()
                }
            );
        }
    }

    #[test]
    fn partitions_cut_both_directions_only_inside_the_window() {
        let plan = FaultPlan::parse(
            "partition 1 3 from 10ms to 20ms; partition 3 1 from 15ms to 30ms; partition 1 3 from 50ms to 60ms",
        )
        .unwrap();
        let mut inj = FaultInjector::new(plan);
        let (a, b, c) = (WorkerId(1), WorkerId(3), WorkerId(2));
        let ms = Instant::from_millis;
        for (t, cut) in [
            (ms(0), false),
            (Instant(ms(10).0 - 1), false),
            (ms(10), true),
            (ms(19), true),
            (ms(25), true),
            (Instant(ms(30).0 - 1), true),
            (ms(30), false),
            (ms(49), false),
            (ms(50), true),
            (ms(60), false),
            (Instant::MAX, false),
        ] {
            assert_eq!(inj.is_partitioned(a, b, t), cut, "{t:?}");
            assert_eq!(inj.is_partitioned(b, a, t), cut, "{t:?}");
            let expect_drop = |f: FactFate| (f == FactFate::Drop) == cut;
            assert!(expect_drop(inj.fact(a, b, t)), "{t:?}");
            assert!(expect_drop(inj.fact(b, a, t)), "{t:?}");
            // Other pairs are never cut.
            assert!(!inj.is_partitioned(a, c, t));
            assert_ne!(inj.fact(a, c, t), FactFate::Drop);
            assert_ne!(inj.fact(c, b, t), FactFate::Drop);
        }
        // Popping the partitions is only reporting; the cut does not depend on it.
        while inj.pop_due(Instant::MAX).is_some() {}
        assert_eq!(inj.injected().partitions, 3);
        assert!(inj.is_partitioned(b, a, ms(12)));
        assert_eq!(inj.injected().facts_partitioned, 2 * 5);
    }

    #[test]
    fn pop_due_takes_faults_in_plan_order() {
        let plan = FaultPlan::parse(
            "restart 1 at 2s; kill 1 at 1s; cancel 5 at 2s; kill 0 at 1s; cancel 6 at 2000ms",
        )
        .unwrap();
        let mut inj = FaultInjector::new(plan);
        assert_eq!(inj.next_timed(), Some(Instant::from_millis(1000)));
        assert_eq!(inj.pop_due(Instant::from_millis(999)), None);
        let mut taken = Vec::new();
        while let Some(t) = inj.pop_due(Instant::from_millis(1000)) {
            taken.push(t.fault);
        }
        assert_eq!(
            taken,
            [
                Fault::Kill {
                    worker: WorkerId(1)
                },
                Fault::Kill {
                    worker: WorkerId(0)
                }
            ]
        );
        assert_eq!(inj.next_timed(), Some(Instant::from_millis(2000)));
        assert_eq!(inj.remaining().len(), 3);
        let rest: Vec<_> = std::iter::from_fn(|| inj.pop_due(Instant::MAX))
            .map(|t| t.fault)
            .collect();
        assert_eq!(
            rest,
            [
                Fault::Restart {
                    worker: WorkerId(1)
                },
                Fault::Cancel {
                    request: RequestId(5)
                },
                Fault::Cancel {
                    request: RequestId(6)
                }
            ]
        );
        assert_eq!(inj.next_timed(), None);
        let c = inj.injected();
        assert_eq!((c.kills, c.restarts, c.partitions, c.cancels), (2, 1, 0, 2));
    }

    #[test]
    fn hand_built_plans_are_sorted_by_the_injector() {
        let mut plan = FaultPlan::none();
        plan.timed.push(TimedFault {
            at: Instant(5),
            fault: Fault::Kill {
                worker: WorkerId(0),
            },
        });
        plan.timed.push(TimedFault {
            at: Instant(1),
            fault: Fault::Kill {
                worker: WorkerId(1),
            },
        });
        plan.push(
            Instant(1),
            Fault::Kill {
                worker: WorkerId(2),
            },
        );
        let mut inj = FaultInjector::new(plan);
        let order: Vec<_> = std::iter::from_fn(|| inj.pop_due(Instant::MAX))
            .map(|t| t.fault)
            .collect();
        assert_eq!(
            order,
            [1, 2, 0].map(|w| Fault::Kill {
                worker: WorkerId(w)
            })
        );
    }

    fn fates(plan: &FaultPlan, n: u64) -> Vec<(FactFate, bool)> {
        let mut inj = FaultInjector::new(plan.clone());
        (0..n)
            .map(|i| {
                let f = inj.fact(
                    WorkerId((i % 4) as u32),
                    WorkerId(((i + 1) % 4) as u32),
                    Instant(i * 1_000),
                );
                (f, inj.transfer_ok())
            })
            .collect()
    }

    #[test]
    fn same_seed_same_fates_and_rates_follow_probabilities() {
        let plan = FaultPlan::parse(
            "seed 11; drop 0.1; duplicate 0.2; delay 0.3 max 5ms; transfer-fail 0.25",
        )
        .unwrap();
        let a = fates(&plan, 20_000);
        assert_eq!(a, fates(&plan, 20_000));
        let other = FaultPlan {
            seed: 12,
            ..plan.clone()
        };
        assert_ne!(a, fates(&other, 20_000));

        let mut inj = FaultInjector::new(plan);
        for i in 0..100_000u64 {
            if let FactFate::Deliver { extra_delay } =
                inj.fact(WorkerId(0), WorkerId(1), Instant(i))
            {
                assert!(extra_delay <= Duration::from_millis(5));
            }
            inj.transfer_ok();
        }
        let c = inj.injected();
        let rate = |k: u64, n: u64| k as f64 / n as f64;
        assert!(
            (0.09..0.11).contains(&rate(c.facts_dropped, c.facts)),
            "{c}"
        );
        assert!(
            (0.17..0.19).contains(&rate(c.facts_duplicated, c.facts)),
            "{c}"
        );
        // Delivered copies: 0.9 * 1.2 per fact, 30% of them delayed.
        assert!(
            (0.30..0.345).contains(&rate(c.facts_delayed, c.facts)),
            "{c}"
        );
        assert!(
            (0.24..0.26).contains(&rate(c.transfers_failed, c.transfers)),
            "{c}"
        );
    }

    #[test]
    fn draws_do_not_depend_on_outcomes() {
        // The same seed with and without an early partition: facts sent after
        // it ends meet the same fates, because cut facts still draw.
        let base = "seed 4; drop 0.2; duplicate 0.2; delay 0.5 max 1ms; transfer-fail 0.5";
        let plain = FaultPlan::parse(base).unwrap();
        let cut = FaultPlan::parse(&format!("{base}; partition 0 1 from 0s to 500us")).unwrap();
        let (a, b) = (fates(&plain, 2_000), fates(&cut, 2_000));
        assert_ne!(a[..500], b[..500]);
        assert_eq!(a[500..], b[500..]);
        // Transfers use their own stream: not calling transfer_ok leaves fact
        // fates unchanged.
        let mut inj = FaultInjector::new(plain);
        let alone: Vec<_> = (0..2_000u64)
            .map(|i| {
                inj.fact(
                    WorkerId((i % 4) as u32),
                    WorkerId(((i + 1) % 4) as u32),
                    Instant(i * 1_000),
                )
            })
            .collect();
        assert_eq!(alone, a.iter().map(|x| x.0).collect::<Vec<_>>());
    }

    #[test]
    fn generated_plans_are_seeded_and_well_formed() {
        let span = Duration::from_secs(10);
        let plan = FaultPlan::generate(42, 6, 5_000, span, 1.0);
        assert_eq!(plan, FaultPlan::generate(42, 6, 5_000, span, 1.0));
        assert_ne!(plan, FaultPlan::generate(43, 6, 5_000, span, 1.0));
        assert_eq!(plan.seed, 42);
        assert!(plan.timed.windows(2).all(|w| w[0].at <= w[1].at));
        let count = |f: fn(&Fault) -> bool| plan.timed.iter().filter(|t| f(&t.fault)).count();
        assert_eq!(count(|f| matches!(f, Fault::Kill { .. })), 4);
        assert_eq!(count(|f| matches!(f, Fault::Restart { .. })), 4);
        assert_eq!(count(|f| matches!(f, Fault::Partition { .. })), 3);
        assert_eq!(count(|f| matches!(f, Fault::Cancel { .. })), 250);
        for t in &plan.timed {
            assert!(t.at <= Instant::ZERO + span);
            match t.fault {
                Fault::Kill { worker } | Fault::Restart { worker } => assert!(worker.0 < 6),
                Fault::Partition { a, b, until } => {
                    assert!(a != b && a.0 < 6 && b.0 < 6 && until > t.at);
                }
                Fault::Cancel { request } => assert!(request.0 < 5_000),
            }
        }
        assert!((0.05..=0.1).contains(&plan.facts.drop));
        assert!((0.025..=0.05).contains(&plan.facts.duplicate));
        assert!((0.1..=0.2).contains(&plan.facts.delay));
        assert!((0.025..=0.05).contains(&plan.transfer_fail));
        assert!(plan.facts.max_delay >= Duration::from_millis(1));
        assert!(plan.facts.max_delay <= Duration::from_millis(20));
        assert_eq!(FaultPlan::parse(&plan.to_string()), Ok(plan));

        // Degenerate deployments and spans still give valid plans.
        for (w, r, s) in [
            (0, 0, Duration::ZERO),
            (1, 1, Duration::ZERO),
            (2, 3, Duration::from_nanos(1)),
        ] {
            let p = FaultPlan::generate(1, w, r, s, 1.0);
            assert_eq!(FaultPlan::parse(&p.to_string()), Ok(p));
        }
        assert!(FaultPlan::generate(1, 4, 10, span, f64::NAN).is_empty());
        assert!(FaultPlan::generate(1, 4, 10, span, -3.0).is_empty());
    }

    #[test]
    fn counts_display() {
        let c = FaultCounts {
            kills: 1,
            facts: 10,
            facts_dropped: 2,
            ..FaultCounts::default()
        };
        assert_eq!(
            c.to_string(),
            "kills 1, restarts 0, partitions 0, cancels 0; facts 10: 0 cut by partition, \
             2 dropped, 0 duplicated, 0 delayed; transfers 0: 0 failed"
        );
    }
}
