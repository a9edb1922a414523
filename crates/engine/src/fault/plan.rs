//! Fault plans: what goes wrong and when, the per-fact fates, and the counts
//! of what was injected.

use super::error::FaultPlanError;
use super::GENERATE_STREAM;
use crate::scale::{Fleet, ScalePool};
use handoff_core::ids::{RequestId, WorkerId};
use handoff_core::rng::Rng;
use handoff_core::time::{Duration, Instant};
use std::fmt;

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
    /// in `[at, until)`. [`FaultInjector::fact`](super::FaultInjector::fact) enforces this by itself from
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
    /// An elastic pool grows by one worker: its lowest absent (or gone)
    /// member starts provisioning and is ready after the fleet's startup
    /// delay ([`crate::scale`]). At the pool's ceiling nothing happens.
    ScaleUp {
        /// The pool.
        pool: ScalePool,
    },
    /// A provisioning worker becomes routable (scheduled by `ScaleUp`;
    /// a no-op in any other phase).
    Ready {
        /// The worker.
        worker: WorkerId,
    },
    /// A ready worker drains: routed nothing new, it finishes what it
    /// holds and leaves once drained.
    Drain {
        /// The worker.
        worker: WorkerId,
    },
    /// A worker leaves at once: what it held unwinds as on a kill.
    Remove {
        /// The worker.
        worker: WorkerId,
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

/// What goes wrong in a run; see the [module docs](super) for the text form.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct FaultPlan {
    /// Seeds the injector's random streams.
    pub seed: u64,
    /// Timed faults, sorted by `at`, ties in the order they were given.
    /// Use [`FaultPlan::push`] to keep the order when building by hand;
    /// [`FaultInjector::new`](super::FaultInjector::new) sorts (stably) in any case.
    pub timed: Vec<TimedFault>,
    /// Control-channel misbehaviour.
    pub facts: FactFaults,
    /// Probability in `[0, 1]` that a KV transfer fails instead of completing.
    pub transfer_fail: f64,
    /// The elastic fleet scale events act on; empty without scaling.
    pub fleet: Fleet,
}

impl Default for FaultPlan {
    fn default() -> Self {
        FaultPlan::none()
    }
}

fn active(p: f64) -> bool {
    p > 0.0
}

pub(super) fn nanos(d: Duration) -> u64 {
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
            fleet: Fleet::default(),
        }
    }

    /// Whether the plan injects nothing: no timed faults, a perfect channel
    /// and transfers that never fail. The seed does not matter.
    pub fn is_empty(&self) -> bool {
        self.timed.is_empty()
            && self.facts.is_none()
            && !active(self.transfer_fail)
            && self.fleet.is_empty()
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

/// What a [`FaultInjector`](super::FaultInjector) has injected so far, for reports.
///
/// Timed faults count when [`FaultInjector::pop_due`](super::FaultInjector::pop_due) hands them out.
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
    /// Facts decided (every call to [`FaultInjector::fact`](super::FaultInjector::fact)).
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
    /// Transfers decided (every call to [`FaultInjector::transfer_ok`](super::FaultInjector::transfer_ok)).
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
