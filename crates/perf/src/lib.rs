//! # handoff-perf
//!
//! How long a forward pass takes: a step-time model behind a trait, shared
//! by the backend cores so that vLLM and SGLang runs are timed alike.
//!
//! A core describes each pass as a [`Pass`] (what it prefills, over what
//! cached prefix, and what it decodes, over how much context) and asks a
//! [`PerfModel`] for its duration. Implementations:
//!
//! - [`PolynomialPerf`] (`dynamo-polynomial`): Dynamo's legacy fit, the
//!   default, kept for comparability with Dynamo's mocker;
//! - [`ProfilePerf`] (`profile:FILE`): interpolation over measured or
//!   exported tables, prefill by (new tokens, cached-prefix tokens) and
//!   decode by (batch, context tokens summed or per sequence) — see
//!   [`profile`]; past the grid it extrapolates or clamps ([`beyond`]),
//!   and the step-time terms the tables leave out are added as
//!   [`overhead`] says (all off by default);
//! - [`GridPerf`] (`npz:FILE`): Dynamo's profiled interpolation, prefill by
//!   new tokens and decode by (summed, mean) context — see [`grid`];
//! - [`FixedPerf`]: fixed costs, for tests;
//! - [`StepModel`]: the run-time choice among the first three, an enum so the
//!   cores stay monomorphic (one match per pass, no virtual call).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod beyond;
pub mod grid;
pub mod overhead;
pub mod profile;

pub use beyond::{BeyondGrid, BeyondGridCounts};

pub use overhead::{
    CudaGraph, DeploymentShape, OverheadError, OverheadErrorKind, Overheads, Term, TermValue,
};

pub use grid::{DynamoGrid, GridArray, GridArrays, GridAt, GridError, GridErrorKind, GridPerf};

pub use profile::{
    DecodeAxis, PerfProfile, PerfTable, ProfileError, ProfileErrorKind, ProfilePerf, TableKind,
    TableShape,
};

use handoff_core::Duration;

/// What one forward pass computes: everything a step-time model may read.
///
/// The cores fill it with [`Pass::add_prefill`] and [`Pass::add_decode`]
/// (no allocation; a pass is a handful of sums).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pass {
    /// Prompt tokens computed in the pass (after prefix-cache hits).
    pub prefill_tokens: u64,
    /// Prefill chunks in the pass (one per sequence prefilling in it):
    /// what per-sequence costs count besides the decodes.
    pub prefill_seqs: u64,
    /// Σ over the pass's prefill chunks of new tokens × tokens already in
    /// KV before the chunk (prefix-cache hits plus earlier chunks): the
    /// attention work over cached prefix, which is not free.
    pub prefill_prefix_work: u64,
    /// Sequences decoding one token each.
    pub decode_batch: u64,
    /// Context tokens the decoding sequences attend over, summed.
    pub decode_context_tokens: u64,
    /// KV tokens the pass's sequences occupy (the legacy polynomial reads
    /// this as a fraction of `pool_tokens`).
    pub kv_tokens: u64,
    /// The worker's KV pool, in tokens.
    pub pool_tokens: u64,
}

impl Pass {
    /// A pass on a pool of `pool_tokens` that computes nothing yet.
    pub const fn on_pool(pool_tokens: u64) -> Pass {
        Pass {
            prefill_tokens: 0,
            prefill_seqs: 0,
            prefill_prefix_work: 0,
            decode_batch: 0,
            decode_context_tokens: 0,
            kv_tokens: 0,
            pool_tokens,
        }
    }

    /// A pure decode pass of `batch` sequences over `context_tokens` in all
    /// (which are also the KV tokens they occupy).
    pub const fn decode(batch: u64, context_tokens: u64, pool_tokens: u64) -> Pass {
        Pass {
            prefill_tokens: 0,
            prefill_seqs: 0,
            prefill_prefix_work: 0,
            decode_batch: batch,
            decode_context_tokens: context_tokens,
            kv_tokens: context_tokens,
            pool_tokens,
        }
    }

    /// A prefill-only pass of one chunk: `new_tokens` after `cached_tokens`.
    pub fn prefill(new_tokens: u64, cached_tokens: u64) -> Pass {
        let mut p = Pass::default();
        p.add_prefill(new_tokens, cached_tokens);
        p
    }

    /// Adds a prefill chunk of `new_tokens` after `cached_tokens` already in
    /// KV (they also occupy `new_tokens + cached_tokens` KV tokens): one
    /// more of [`Pass::prefill_seqs`].
    pub fn add_prefill(&mut self, new_tokens: u64, cached_tokens: u64) {
        self.prefill_tokens += new_tokens;
        self.prefill_seqs += 1;
        self.prefill_prefix_work = self
            .prefill_prefix_work
            .saturating_add(new_tokens.saturating_mul(cached_tokens));
        self.kv_tokens += new_tokens + cached_tokens;
    }

    /// Adds one decoding sequence whose attention reads `context_tokens`.
    pub fn add_decode(&mut self, context_tokens: u64) {
        self.decode_batch += 1;
        self.decode_context_tokens += context_tokens;
        self.kv_tokens += context_tokens;
    }

    /// The cached prefix the pass's new tokens attend over, weighted by
    /// new tokens: exact for a single chunk, the new-token-weighted mean for
    /// several (attention work is linear in the prefix for a fixed chunk).
    pub fn mean_cached_tokens(&self) -> f64 {
        if self.prefill_tokens == 0 {
            0.0
        } else {
            self.prefill_prefix_work as f64 / self.prefill_tokens as f64
        }
    }
}

/// Predicts forward-pass time. Implementations must be pure functions of
/// their arguments so replays are deterministic.
pub trait PerfModel {
    /// Time of one forward pass.
    fn pass(&self, pass: &Pass) -> Duration;

    /// Passes this model timed at its grid's edge because they lay past it
    /// (a clamping profile): (prefill lookups, decode lookups). None by
    /// default.
    fn beyond_grid_passes(&self) -> (u64, u64) {
        (0, 0)
    }

    /// Time of `pass` when it is a bound, not a pass run: the same as
    /// [`PerfModel::pass`], but a model that counts the passes it times
    /// (past a clamping grid) does not count it.
    fn pass_uncounted(&self, pass: &Pass) -> Duration {
        self.pass(pass)
    }

    /// Counts `pass` as run without timing it again: for a pass timed with
    /// [`PerfModel::pass_uncounted`] while planning and then run. Nothing
    /// by default.
    fn count_pass(&self, _pass: &Pass) {}

    /// Time to prefill `new_tokens` with no cached prefix in one pass.
    fn prefill(&self, new_tokens: u64) -> Duration {
        self.pass(&Pass::prefill(new_tokens, 0))
    }

    /// Whether a pass never gets shorter when work is added to it (prefill
    /// tokens, decodes, decode context; same pool): then a pass takes at
    /// least as long as any part of it, and `k` passes of a stable decode
    /// batch at least `k` times its next one. `false` (the default)
    /// promises nothing.
    fn grows_with_work(&self) -> bool {
        false
    }

    /// Times the pure decode passes of a stable batch, uncounted: the
    /// `i`th (from 0) is [`PerfModel::pass_uncounted`] of
    /// `Pass::decode(batch, first_context + i·batch, pool_tokens)`, handed
    /// to `take` in order until `take` declines one (it is not taken) or
    /// `max` are taken. Returns how many were taken. A profile times the
    /// run with its batch's axis segment found once; every time equals the
    /// pass-by-pass one.
    fn decode_run(
        &self,
        batch: u64,
        first_context: u64,
        pool_tokens: u64,
        max: u64,
        take: &mut dyn FnMut(Duration) -> bool,
    ) -> u64 {
        let mut k = 0;
        while k < max {
            let context = first_context + batch * k;
            if !take(self.pass_uncounted(&Pass::decode(batch, context, pool_tokens))) {
                break;
            }
            k += 1;
        }
        k
    }

    /// Counts as run the first `passes` passes of a [`PerfModel::decode_run`]:
    /// what [`PerfModel::count_pass`] on each would count.
    fn count_decode_run(&self, batch: u64, first_context: u64, pool_tokens: u64, passes: u64) {
        for k in 0..passes {
            self.count_pass(&Pass::decode(batch, first_context + batch * k, pool_tokens));
        }
    }

    /// At most the total time of `passes` pure decode passes of `batch`
    /// sequences on a pool of `pool_tokens`, the `i`th (from 0) attending
    /// over `first_context + i·batch` tokens: how long a stable batch's
    /// next passes take at least, found without running them (for
    /// `SchedulerCore::quiet_floor`). Evaluating it counts no pass. The
    /// default: `passes` times the first when the model
    /// [grows with work](PerfModel::grows_with_work), else the first.
    fn stable_decode_floor(
        &self,
        batch: u64,
        first_context: u64,
        passes: u64,
        pool_tokens: u64,
    ) -> Duration {
        if passes == 0 {
            return Duration::ZERO;
        }
        let first = self.pass(&Pass::decode(batch, first_context, pool_tokens));
        if self.grows_with_work() {
            first.saturating_mul(u32::try_from(passes).unwrap_or(u32::MAX))
        } else {
            first
        }
    }
}

/// The last pure decode pass a core timed, uncounted: a stable batch asks
/// for the same pass several times between passes (whether one more pass
/// fits, its quiet floor, then the pass itself), and a profile's lookup
/// costs more than a comparison.
#[derive(Clone, Copy, Debug, Default)]
pub struct DecodeMemo {
    last: Option<((u64, u64, u64), Duration)>,
}

impl DecodeMemo {
    /// `perf.pass_uncounted(&Pass::decode(batch, context, pool_tokens))`,
    /// remembered for the next call with the same arguments. A core holds
    /// one memo per model, so the answer is the model's.
    pub fn time<P: PerfModel + ?Sized>(
        &mut self,
        perf: &P,
        batch: u64,
        context: u64,
        pool_tokens: u64,
    ) -> Duration {
        let key = (batch, context, pool_tokens);
        match self.last {
            Some((k, d)) if k == key => d,
            _ => {
                let d = perf.pass_uncounted(&Pass::decode(batch, context, pool_tokens));
                self.last = Some((key, d));
                d
            }
        }
    }
}

/// Whole nanoseconds of `ms / ratio` (a non-positive ratio counts as 1):
/// integer times keep replays byte-identical across platforms.
pub(crate) fn scaled_ms(ms: f64, ratio: f64) -> Duration {
    // Dividing by one is exact: skipped, the same bits.
    let scaled = if ratio > 0.0 && ratio != 1.0 {
        ms / ratio
    } else {
        ms
    };
    Duration::from_nanos(round_half_away(scaled * 1e6).max(0.0) as u64)
}

/// `x.round()` (halves away from zero) without a call into the C library
/// for the values a pass time takes: for `0 < x < 2^52` the truncation is
/// exact, and so is `x - t` (Sterbenz: `t <= x < 2t`, or `t = 0`), so the
/// comparison with one half decides exactly as `round` does.
#[inline]
pub(crate) fn round_half_away(x: f64) -> f64 {
    if x > 0.0 && x < 4_503_599_627_370_496.0 {
        // Signed conversions are single instructions; `x < 2^52` fits.
        let t = x as i64 as f64;
        if x - t >= 0.5 {
            t + 1.0
        } else {
            t
        }
    } else {
        x.round()
    }
}

/// The default model: the quadratic prefill / KV-utilisation decode fit that
/// Dynamo's mocker ships as its `Polynomial` perf model
/// (ai-dynamo/dynamo `lib/mocker`, `PerfModel::predict_prefill_time` and
/// `predict_decode_time`), named `dynamo-polynomial`:
///
/// - prefill ms = 4.209989e-7·t² + 1.518344e-2·t + 16.50142, t = new tokens;
/// - decode ms = −25.74·u² + 54.01·u + 5.74, u = [`Pass::kv_tokens`] /
///   [`Pass::pool_tokens`], floored at 1 ms so token-emitting steps never
///   share a timestamp;
/// - a mixed pass costs both.
///
/// Its known faults, kept for comparability: decode depends on the pool's
/// size (the same batch is cheaper on a bigger pool), attention over a
/// cached prefix is free (a 32K prompt costs 966 ms in one pass, 677 ms as
/// four 8K chunks), and a mixed pass pays both fixed costs.
///
/// Both are divided by `speedup_ratio` (2.0 runs twice as fast).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PolynomialPerf {
    /// Divides every predicted time; must be positive.
    pub speedup_ratio: f64,
}

impl Default for PolynomialPerf {
    fn default() -> Self {
        PolynomialPerf { speedup_ratio: 1.0 }
    }
}

impl PolynomialPerf {
    fn prefill_time(&self, new_tokens: u64) -> Duration {
        let t = new_tokens as f64;
        scaled_ms(
            4.209989e-7 * t * t + 1.518344e-2 * t + 16.50142,
            self.speedup_ratio,
        )
    }

    fn decode_time(&self, kv_tokens: u64, pool_tokens: u64) -> Duration {
        let u = if pool_tokens == 0 {
            1.0
        } else {
            (kv_tokens as f64 / pool_tokens as f64).min(1.0)
        };
        scaled_ms(
            (-25.74 * u * u + 54.01 * u + 5.74).max(1.0),
            self.speedup_ratio,
        )
    }
}

impl PerfModel for PolynomialPerf {
    #[inline]
    fn pass(&self, pass: &Pass) -> Duration {
        let p = if pass.prefill_tokens > 0 {
            self.prefill_time(pass.prefill_tokens)
        } else {
            Duration::ZERO
        };
        let d = if pass.decode_batch > 0 {
            self.decode_time(pass.kv_tokens, pass.pool_tokens)
        } else {
            Duration::ZERO
        };
        p + d
    }

    /// The prefill fit rises with tokens (positive coefficients), the
    /// decode fit over the whole utilisation range it is used on (its
    /// vertex is at u = 1.049, past the clamp at 1; the 1 ms floor and the
    /// clamp only flatten it), and a mixed pass adds both.
    fn grows_with_work(&self) -> bool {
        true
    }
}

/// Fixed per-pass costs, for tests and for matching a measured deployment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedPerf {
    /// Cost of a pass that computes any prefill, plus `per_prefill_token` each.
    pub prefill_base: Duration,
    /// Extra cost per prefill token.
    pub per_prefill_token: Duration,
    /// Cost of a decode pass.
    pub decode: Duration,
}

impl PerfModel for FixedPerf {
    fn pass(&self, pass: &Pass) -> Duration {
        let p = if pass.prefill_tokens == 0 {
            Duration::ZERO
        } else {
            self.prefill_base
                + self.per_prefill_token * u32::try_from(pass.prefill_tokens).unwrap_or(u32::MAX)
        };
        let d = if pass.decode_batch == 0 {
            Duration::ZERO
        } else {
            self.decode
        };
        p + d
    }

    fn grows_with_work(&self) -> bool {
        true
    }
}

/// The step-time model chosen at run time (`--perf`).
#[derive(Clone, Debug, PartialEq)]
pub enum StepModel {
    /// `dynamo-polynomial`.
    Polynomial(PolynomialPerf),
    /// `profile:FILE`.
    Profile(ProfilePerf),
    /// `npz:FILE`.
    Grid(GridPerf),
}

impl Default for StepModel {
    fn default() -> Self {
        StepModel::Polynomial(PolynomialPerf::default())
    }
}

impl StepModel {
    /// The model's name as the report and `--perf` spell it
    /// (`dynamo-polynomial`, `profile:NAME` with the profile's name, or
    /// `npz:NAME` with the Dynamo profile's).
    pub fn label(&self) -> String {
        match self {
            StepModel::Polynomial(_) => "dynamo-polynomial".to_string(),
            StepModel::Profile(p) => format!("profile:{}", p.profile().name()),
            StepModel::Grid(g) => format!("npz:{}", g.grid().name()),
        }
    }
}

impl PerfModel for StepModel {
    #[inline]
    fn pass(&self, pass: &Pass) -> Duration {
        match self {
            StepModel::Polynomial(m) => m.pass(pass),
            StepModel::Profile(m) => m.pass(pass),
            StepModel::Grid(m) => m.pass(pass),
        }
    }

    fn grows_with_work(&self) -> bool {
        match self {
            StepModel::Polynomial(m) => m.grows_with_work(),
            StepModel::Profile(m) => m.grows_with_work(),
            StepModel::Grid(m) => m.grows_with_work(),
        }
    }

    fn beyond_grid_passes(&self) -> (u64, u64) {
        match self {
            StepModel::Profile(m) => m.beyond_grid_passes(),
            StepModel::Polynomial(_) | StepModel::Grid(_) => (0, 0),
        }
    }

    fn count_pass(&self, pass: &Pass) {
        if let StepModel::Profile(m) = self {
            m.count_pass(pass);
        }
    }

    fn pass_uncounted(&self, pass: &Pass) -> Duration {
        match self {
            StepModel::Polynomial(m) => m.pass(pass),
            StepModel::Profile(m) => m.pass_uncounted(pass),
            StepModel::Grid(m) => m.pass(pass),
        }
    }

    fn decode_run(
        &self,
        batch: u64,
        first_context: u64,
        pool_tokens: u64,
        max: u64,
        take: &mut dyn FnMut(Duration) -> bool,
    ) -> u64 {
        match self {
            StepModel::Polynomial(m) => m.decode_run(batch, first_context, pool_tokens, max, take),
            StepModel::Profile(m) => m.decode_run(batch, first_context, pool_tokens, max, take),
            StepModel::Grid(m) => m.decode_run(batch, first_context, pool_tokens, max, take),
        }
    }

    fn count_decode_run(&self, batch: u64, first_context: u64, pool_tokens: u64, passes: u64) {
        if let StepModel::Profile(m) = self {
            m.count_decode_run(batch, first_context, pool_tokens, passes);
        }
    }

    fn stable_decode_floor(
        &self,
        batch: u64,
        first_context: u64,
        passes: u64,
        pool_tokens: u64,
    ) -> Duration {
        match self {
            StepModel::Polynomial(m) => {
                m.stable_decode_floor(batch, first_context, passes, pool_tokens)
            }
            StepModel::Profile(m) => {
                m.stable_decode_floor(batch, first_context, passes, pool_tokens)
            }
            StepModel::Grid(m) => m.stable_decode_floor(batch, first_context, passes, pool_tokens),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dynamo's formulas as the previous `step(prefill, batch, active,
    /// total)` applied them, for checking that `dynamo-polynomial` kept its
    /// numbers through the `Pass` interface.
    fn legacy(prefill: u64, batch: u64, active: u64, total: u64) -> Duration {
        let ns = |ms: f64| Duration::from_nanos((ms * 1e6).round().max(0.0) as u64);
        let t = prefill as f64;
        let p = if prefill > 0 {
            ns(4.209989e-7 * t * t + 1.518344e-2 * t + 16.50142)
        } else {
            Duration::ZERO
        };
        let u = if total == 0 {
            1.0
        } else {
            (active as f64 / total as f64).min(1.0)
        };
        let d = if batch > 0 {
            ns((-25.74 * u * u + 54.01 * u + 5.74).max(1.0))
        } else {
            Duration::ZERO
        };
        p + d
    }

    #[test]
    fn polynomial_matches_the_cited_fit() {
        let m = PolynomialPerf::default();
        // 4096 tokens: 4.209989e-7*4096^2 + 1.518344e-2*4096 + 16.50142 ms
        let expect = 4.209989e-7 * 4096f64 * 4096f64 + 1.518344e-2 * 4096.0 + 16.50142;
        let got = m.prefill(4096).as_secs_f64() * 1e3;
        assert!((got - expect).abs() < 1e-6, "{got} vs {expect}");
        assert_eq!(m.prefill(0), Duration::ZERO);
        let empty = m.pass(&Pass::decode(1, 0, 100)).as_secs_f64() * 1e3;
        assert!((empty - 5.74).abs() < 1e-6);
        let fast = PolynomialPerf { speedup_ratio: 2.0 };
        assert_eq!(fast.prefill(4096) * 2, m.prefill(4096));
    }

    #[test]
    fn polynomial_keeps_its_numbers_through_pass() {
        let m = StepModel::default();
        for &(prefill, chunks, batch, context, total) in &[
            (0u64, 1u64, 1u64, 900u64, 262_144u64),
            (8192, 1, 0, 0, 262_144),
            (8192, 2, 37, 91_000, 262_144),
            (300, 3, 200, 500_000, 262_144),
            (0, 1, 5, 0, 0),
        ] {
            let mut p = Pass::on_pool(total);
            let mut left = prefill;
            for c in 0..chunks {
                let n = if c + 1 == chunks {
                    left
                } else {
                    prefill / chunks
                };
                p.add_prefill(n, 100 * c);
                left -= n;
            }
            for _ in 0..batch {
                p.add_decode(context / batch.max(1));
            }
            assert_eq!(
                m.pass(&p),
                legacy(prefill, batch, p.kv_tokens, total),
                "{p:?}"
            );
        }
    }

    #[test]
    fn polynomial_passes_never_shrink_as_work_is_added() {
        let m = PolynomialPerf::default();
        assert!(m.grows_with_work());
        for pool in [1u64 << 10, 1 << 14, 1 << 20] {
            for batch in [1u64, 7, 64] {
                let mut prev = Duration::ZERO;
                for kv in (0..=pool + pool / 4).step_by((pool / 97).max(1) as usize) {
                    let d = m.pass(&Pass::decode(batch, kv, pool));
                    assert!(d >= prev, "pool {pool} batch {batch} kv {kv}");
                    prev = d;
                    // Adding a prefill chunk to it never shortens it either.
                    let mut mixed = Pass::decode(batch, kv, pool);
                    mixed.add_prefill(1 + kv % 9000, kv % 300);
                    assert!(m.pass(&mixed) >= d);
                }
            }
        }
        let mut prev = Duration::ZERO;
        for t in (0..200_000u64).step_by(997) {
            let d = m.pass(&Pass::prefill(t, 0));
            assert!(d >= prev, "prefill {t}");
            prev = d;
        }
    }

    #[test]
    fn mixed_step_adds_parts() {
        let m = FixedPerf {
            prefill_base: Duration::from_millis(10),
            per_prefill_token: Duration::from_micros(1),
            decode: Duration::from_millis(5),
        };
        let mut p = Pass::prefill(1000, 0);
        p.add_decode(10);
        p.add_decode(10);
        p.add_decode(10);
        assert_eq!(m.pass(&p), Duration::from_millis(16));
        assert_eq!(m.pass(&Pass::default()), Duration::ZERO);
    }

    #[test]
    fn pass_sums_prefix_work_and_context() {
        let mut p = Pass::on_pool(1000);
        p.add_prefill(100, 50);
        p.add_prefill(300, 0);
        p.add_decode(40);
        assert_eq!(p.prefill_tokens, 400);
        assert_eq!(p.prefill_seqs, 2);
        assert_eq!(p.prefill_prefix_work, 5000);
        assert_eq!(p.mean_cached_tokens(), 12.5);
        assert_eq!((p.decode_batch, p.decode_context_tokens), (1, 40));
        assert_eq!(p.kv_tokens, 150 + 300 + 40);
    }
}
