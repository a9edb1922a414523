//! The profile-driven step-time model: interpolation over measured tables.
//!
//! A [`PerfProfile`] holds two tables of pass times in milliseconds:
//!
//! - **prefill** by (new tokens, cached-prefix tokens): one chunk of `n` new
//!   tokens whose attention also reads `c` tokens already in KV (prefix-cache
//!   hits and earlier chunks of the same prompt), so chunking a long prompt
//!   no longer makes its attention cheaper;
//! - **decode** by (batch size, context tokens summed over the batch): what a
//!   decode pass reads, independent of how large the pool is.
//!
//! Decode's second axis is either the context summed over the batch (the
//! measured profile) or the context per sequence, the sum divided by the
//! batch (profiles exported from AIConfigurator, whose
//! `predict_decode_latency(batch, isl)` takes a per-request length):
//! [`DecodeAxis`].
//!
//! Lookups are bilinear inside the table, clamped below the first point of
//! an axis (the fixed cost of a pass) and, past the last, linearly
//! extrapolated (the slope of the last segment) or clamped and counted, as
//! the profile's [`BeyondGrid`] says. A pass with several prefill chunks
//! is looked up at its total new tokens and their new-token-weighted mean
//! prefix ([`Pass::mean_cached_tokens`]); the linear layers batch over all
//! new tokens and attention work is linear in the prefix of each chunk.
//!
//! **Mixed passes** (chunked prefill with piggybacked decodes, vLLM's
//! unified batch, SGLang's `--enable-mixed-chunk`) cost
//! `prefill + decode − pass_overhead_ms`: both table entries include the
//! per-pass fixed cost (weights read once, kernel launches, sampling), which
//! one pass pays once. [`PerfProfile::new`] requires the overhead to be at
//! most every table value, so a mixed pass never costs less than either part.
//!
//! A [`TableShape::NonDecreasing`] table must be non-decreasing along both
//! axes, and the extrapolated edges must keep that: along the last segment
//! of one axis, the step between adjacent points of the other axis may not
//! shrink. Together these make every lookup non-decreasing in every input,
//! which [`PerfTable::new`] checks with errors that name the table, row and
//! column. A [`TableShape::AsGiven`] table (AIConfigurator's predictions,
//! which dip where its kernels change tiles) skips those checks and may
//! only be used by a profile that clamps past its grid. The file format (JSON) and its parser live at the edge
//! (`handoff-replay`'s `profile_file`); this module has no dependency.

use super::overhead::{Applied, DeploymentShape, OverheadError, Overheads};
use super::{scaled_ms, BeyondGrid, BeyondGridCounts, Pass, PerfModel};
use handoff_core::Duration;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Most points an axis may have (bounds the tables before allocation).
pub const MAX_AXIS_POINTS: usize = 256;

/// A table of pass times over two axes, row-major: `ms[i * ys.len() + j]`
/// is the time at `xs[i]`, `ys[j]`.
#[derive(Clone, Debug, PartialEq)]
pub struct PerfTable {
    xs: Vec<f64>,
    ys: Vec<f64>,
    ms: Vec<f64>,
    shape: TableShape,
}

/// Which orderings a table's values must keep.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TableShape {
    /// Non-decreasing along both axes, also past the edges (measurements).
    #[default]
    NonDecreasing,
    /// As the source gave them (a model's predictions, which may dip).
    AsGiven,
}

/// What decode's second axis counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DecodeAxis {
    /// Context tokens summed over the batch (`context_tokens`).
    #[default]
    TotalContext,
    /// Context tokens per sequence, the sum divided by the batch
    /// (`context_per_sequence`).
    ContextPerSequence,
}

impl DecodeAxis {
    /// The axis's field name in the file.
    pub fn name(self) -> &'static str {
        match self {
            DecodeAxis::TotalContext => "context_tokens",
            DecodeAxis::ContextPerSequence => "context_per_sequence",
        }
    }
}

/// Which table of a profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableKind {
    /// Prefill by (new tokens, cached tokens).
    Prefill,
    /// Decode by (batch, context tokens).
    Decode,
}

impl TableKind {
    /// The table's name in the file.
    pub fn name(self) -> &'static str {
        match self {
            TableKind::Prefill => "prefill",
            TableKind::Decode => "decode",
        }
    }
}

/// What is wrong with a profile.
#[derive(Clone, Debug, PartialEq)]
pub enum ProfileErrorKind {
    /// The profile has no name.
    EmptyName,
    /// An axis has no point, or more than [`MAX_AXIS_POINTS`].
    AxisLength {
        /// Points given.
        len: usize,
    },
    /// An axis value is negative, not finite, or not above the previous.
    AxisNotIncreasing {
        /// Index of the offending point.
        index: usize,
    },
    /// The table has a row count or row length other than its axes'.
    Shape {
        /// Values expected.
        expected: usize,
        /// Values found.
        found: usize,
    },
    /// A time is not finite or not positive.
    BadValue {
        /// Row (first axis).
        row: usize,
        /// Column (second axis).
        col: usize,
    },
    /// A time is below its predecessor along an axis.
    Decreasing {
        /// Row (first axis).
        row: usize,
        /// Column (second axis).
        col: usize,
    },
    /// Past the table's last row or column, extrapolation would decrease:
    /// the step between two points of one axis shrinks across the last
    /// segment of the other.
    EdgeSlope {
        /// Row (first axis).
        row: usize,
        /// Column (second axis).
        col: usize,
    },
    /// The mixed-pass overhead is negative, not finite, or above a table
    /// value.
    Overhead,
    /// A table kept as given (not non-decreasing) in a profile that
    /// extrapolates past its grid: the extrapolation could turn negative.
    AsGivenNeedsClamp,
}

/// A profile rejected by [`PerfProfile::new`], naming where.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileError {
    /// The table (none: the profile's own fields).
    pub table: Option<TableKind>,
    /// The axis or field (`new_tokens`, `cached_tokens`, `batch`,
    /// `context_tokens`, `ms`, `name`, `pass_overhead_ms`).
    pub field: &'static str,
    /// What is wrong.
    pub kind: ProfileErrorKind,
}

impl std::fmt::Display for ProfileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(t) = self.table {
            write!(f, "{}.", t.name())?;
        }
        write!(f, "{}: ", self.field)?;
        match &self.kind {
            ProfileErrorKind::EmptyName => write!(f, "must not be empty"),
            ProfileErrorKind::AxisLength { len } => {
                write!(f, "needs 1..={MAX_AXIS_POINTS} points, has {len}")
            }
            ProfileErrorKind::AxisNotIncreasing { index } => write!(
                f,
                "point {index} must be finite, non-negative and above the one before"
            ),
            ProfileErrorKind::Shape { expected, found } => {
                write!(f, "expected {expected} values, found {found}")
            }
            ProfileErrorKind::BadValue { row, col } => {
                write!(f, "[{row}][{col}] must be a positive finite time")
            }
            ProfileErrorKind::Decreasing { row, col } => write!(
                f,
                "[{row}][{col}] is below the value before it (tables must be non-decreasing)"
            ),
            ProfileErrorKind::EdgeSlope { row, col } => write!(
                f,
                "[{row}][{col}]: extrapolating past the last row or column would decrease"
            ),
            ProfileErrorKind::Overhead => write!(
                f,
                "must be a finite time between 0 and the smallest table value"
            ),
            ProfileErrorKind::AsGivenNeedsClamp => write!(
                f,
                "a table that is not non-decreasing needs beyond_grid \"clamp\""
            ),
        }
    }
}

impl std::error::Error for ProfileError {}

fn check_axis(axis: &[f64], table: TableKind, field: &'static str) -> Result<(), ProfileError> {
    let err = |kind| ProfileError {
        table: Some(table),
        field,
        kind,
    };
    if axis.is_empty() || axis.len() > MAX_AXIS_POINTS {
        return Err(err(ProfileErrorKind::AxisLength { len: axis.len() }));
    }
    for (i, &v) in axis.iter().enumerate() {
        if !v.is_finite() || v < 0.0 || (i > 0 && v <= axis[i - 1]) {
            return Err(err(ProfileErrorKind::AxisNotIncreasing { index: i }));
        }
    }
    Ok(())
}

impl PerfTable {
    /// A [`TableShape::NonDecreasing`] table over `xs` × `ys` with
    /// `ms[i][j]` at (`xs[i]`, `ys[j]`), checked as the module docs say.
    /// `names` are the axes' field names.
    pub fn new(
        kind: TableKind,
        names: (&'static str, &'static str),
        xs: Vec<f64>,
        ys: Vec<f64>,
        rows: &[Vec<f64>],
    ) -> Result<PerfTable, ProfileError> {
        PerfTable::with_shape(kind, names, xs, ys, rows, TableShape::NonDecreasing)
    }

    /// A table of `shape` (see [`PerfTable::new`]); an
    /// [`TableShape::AsGiven`] table needs only axes, shape and positive
    /// finite times.
    pub fn with_shape(
        kind: TableKind,
        names: (&'static str, &'static str),
        xs: Vec<f64>,
        ys: Vec<f64>,
        rows: &[Vec<f64>],
        shape: TableShape,
    ) -> Result<PerfTable, ProfileError> {
        check_axis(&xs, kind, names.0)?;
        check_axis(&ys, kind, names.1)?;
        let err = |kind_| ProfileError {
            table: Some(kind),
            field: "ms",
            kind: kind_,
        };
        if rows.len() != xs.len() {
            return Err(err(ProfileErrorKind::Shape {
                expected: xs.len(),
                found: rows.len(),
            }));
        }
        let (nx, ny) = (xs.len(), ys.len());
        let mut ms = Vec::with_capacity(nx * ny);
        for row in rows {
            if row.len() != ny {
                return Err(err(ProfileErrorKind::Shape {
                    expected: ny,
                    found: row.len(),
                }));
            }
            ms.extend_from_slice(row);
        }
        let at = |i: usize, j: usize| ms[i * ny + j];
        for i in 0..nx {
            for j in 0..ny {
                let v = at(i, j);
                if !(v.is_finite() && v > 0.0) {
                    return Err(err(ProfileErrorKind::BadValue { row: i, col: j }));
                }
                let dips = (i > 0 && v < at(i - 1, j)) || (j > 0 && v < at(i, j - 1));
                if dips && shape == TableShape::NonDecreasing {
                    return Err(err(ProfileErrorKind::Decreasing { row: i, col: j }));
                }
            }
        }
        if shape == TableShape::AsGiven {
            return Ok(PerfTable { xs, ys, ms, shape });
        }
        // Past the last column, a row's step must not shrink from the
        // second-last column to the last (and likewise past the last row),
        // or bilinear extrapolation would turn down. Steps are differences
        // of decimal values, so equal steps may differ by float noise.
        const NOISE: f64 = 1e-9;
        if ny > 1 {
            for i in 1..nx {
                let d_last = at(i, ny - 1) - at(i - 1, ny - 1);
                let d_prev = at(i, ny - 2) - at(i - 1, ny - 2);
                if d_last < d_prev - NOISE {
                    return Err(err(ProfileErrorKind::EdgeSlope {
                        row: i,
                        col: ny - 1,
                    }));
                }
            }
        }
        if nx > 1 {
            for j in 1..ny {
                let d_last = at(nx - 1, j) - at(nx - 1, j - 1);
                let d_prev = at(nx - 2, j) - at(nx - 2, j - 1);
                if d_last < d_prev - NOISE {
                    return Err(err(ProfileErrorKind::EdgeSlope {
                        row: nx - 1,
                        col: j,
                    }));
                }
            }
        }
        Ok(PerfTable { xs, ys, ms, shape })
    }

    /// The first axis.
    pub fn xs(&self) -> &[f64] {
        &self.xs
    }

    /// The second axis.
    pub fn ys(&self) -> &[f64] {
        &self.ys
    }

    /// The smallest time in the table (its first entry when it is
    /// non-decreasing).
    pub fn min_ms(&self) -> f64 {
        match self.shape {
            TableShape::NonDecreasing => self.ms[0],
            TableShape::AsGiven => self.ms.iter().copied().fold(f64::INFINITY, f64::min),
        }
    }

    /// The orderings its values keep.
    pub fn shape(&self) -> TableShape {
        self.shape
    }

    /// The time at (`x`, `y`) as `beyond` says to look past the grid, and
    /// whether either coordinate was past its axis's last point.
    pub fn lookup(&self, x: f64, y: f64, beyond: BeyondGrid) -> (f64, bool) {
        self.lookup_near(x, y, beyond, &Near::default())
    }

    /// [`PerfTable::lookup`], starting each axis's search at the segment
    /// `near` remembers (the same answer, found in a comparison or two
    /// when successive lookups stay in one segment, as a stable batch's
    /// do), and remembering the segments found.
    pub fn lookup_near(&self, x: f64, y: f64, beyond: BeyondGrid, near: &Near) -> (f64, bool) {
        let (x_last, y_last) = (self.xs[self.xs.len() - 1], self.ys[self.ys.len() - 1]);
        let past = x > x_last || y > y_last;
        match beyond {
            BeyondGrid::Extrapolate => (self.at_near(x, y, near), past),
            BeyondGrid::Clamp => (self.at_near(x.min(x_last), y.min(y_last), near), past),
        }
    }

    /// The least time at `x` over `y` in `lo..=hi`, looked up as `beyond`
    /// says. At a fixed `x` a lookup is linear in `y` between adjacent
    /// points of the axis (and past its ends, where it is constant or the
    /// last segment's line), so the least is at `lo`, `hi` or a point of
    /// the axis between them: one lookup per such point, whatever the
    /// width of the range.
    pub fn min_along_y(&self, x: f64, range: (f64, f64), beyond: BeyondGrid) -> f64 {
        self.min_along_y_near(x, range, beyond, &Near::default())
    }

    /// [`PerfTable::min_along_y`], its searches starting at the segments
    /// `near` remembers (the same answer).
    pub fn min_along_y_near(
        &self,
        x: f64,
        (lo, hi): (f64, f64),
        beyond: BeyondGrid,
        near: &Near,
    ) -> f64 {
        // `lookup` at each `y`, with the column found once.
        let clamp = beyond == BeyondGrid::Clamp;
        let (x_last, y_last) = (self.xs[self.xs.len() - 1], self.ys[self.ys.len() - 1]);
        let column = self.column(if clamp { x.min(x_last) } else { x }, near);
        let at = |y: f64| self.at_column(column, if clamp { y.min(y_last) } else { y }, near);
        // The axis points strictly inside the range (the axis increases).
        let from = if lo.is_nan() {
            self.ys.len()
        } else {
            self.ys.partition_point(|&y| y <= lo)
        };
        let inside = self.ys[from..].iter().take_while(|&&y| y < hi);
        inside.fold(at(lo).min(at(hi)), |m, &y| m.min(at(y)))
    }

    /// The time at (`x`, `y`), in ms: bilinear inside, clamped below the
    /// first point of an axis, linear past the last.
    pub fn at(&self, x: f64, y: f64) -> f64 {
        self.at_near(x, y, &Near::default())
    }

    fn at_near(&self, x: f64, y: f64, near: &Near) -> f64 {
        self.at_column(self.column(x, near), y, near)
    }

    /// Where `x` falls on the first axis: what every lookup at that `x`
    /// shares.
    fn column(&self, x: f64, near: &Near) -> Column {
        let (i, tx) = segment(&self.xs, x, &near.0[0]);
        Column {
            i,
            i1: (i + 1).min(self.xs.len() - 1),
            tx,
        }
    }

    /// The time at `c`'s `x` and `y`: bilinear, as [`PerfTable::at`].
    #[inline]
    fn at_column(&self, c: Column, y: f64, near: &Near) -> f64 {
        let (j, ty) = segment(&self.ys, y, &near.0[1]);
        let ny = self.ys.len();
        let v = |a: usize, b: usize| self.ms[a * ny + b];
        let (i, i1, tx) = (c.i, c.i1, c.tx);
        let j1 = (j + 1).min(ny - 1);
        let lo = v(i, j) + tx * (v(i1, j) - v(i, j));
        let hi = v(i, j1) + tx * (v(i1, j1) - v(i, j1));
        lo + ty * (hi - lo)
    }
}

/// A first-axis segment and the position in it ([`PerfTable::column`]).
#[derive(Clone, Copy, Debug)]
struct Column {
    i: usize,
    i1: usize,
    tx: f64,
}

/// The segments of a table's two axes its last lookup found, where the
/// next one starts looking ([`PerfTable::lookup_near`]). Atomics (relaxed
/// loads and stores, plain moves on common hardware) so that a model
/// holding one stays `Sync`.
#[derive(Debug, Default)]
pub struct Near([AtomicUsize; 2]);

/// The segment of `axis` to interpolate `v` in: its first index and the
/// position in it (0 at or below the first point; above 1 past the last).
/// The index is the last `i <= n - 2` with `axis[i] <= v` (or 0): `hint`'s
/// segment when it is that one, else found by binary search (a prefill
/// axis has about a hundred points); `hint` then holds it.
fn segment(axis: &[f64], v: f64, hint: &AtomicUsize) -> (usize, f64) {
    let n = axis.len();
    if n == 1 || v <= axis[0] {
        return (0, 0.0);
    }
    let h = hint.load(Ordering::Relaxed);
    let fits = h + 2 <= n && (h == 0 || axis[h] <= v) && (h + 2 == n || v < axis[h + 1]);
    let i = if fits {
        h
    } else {
        let i = axis[1..n - 1].partition_point(|&a| a <= v);
        hint.store(i, Ordering::Relaxed);
        i
    };
    (i, (v - axis[i]) / (axis[i + 1] - axis[i]))
}

/// A checked step-time profile (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct PerfProfile {
    name: String,
    source: String,
    prefill: PerfTable,
    decode: PerfTable,
    pass_overhead_ms: f64,
    decode_axis: DecodeAxis,
    beyond: BeyondGrid,
    /// The step-time terms beyond the tables (all off unless set).
    overheads: Overheads,
    /// The deployment the tables are for, if recorded.
    shape: Option<DeploymentShape>,
}

impl PerfProfile {
    /// A profile named `name` (what the report shows), measured as `source`
    /// says, with its tables and mixed-pass overhead; it extrapolates past
    /// its grid, so both tables must be [`TableShape::NonDecreasing`].
    pub fn new(
        name: String,
        source: String,
        prefill: PerfTable,
        decode: PerfTable,
        pass_overhead_ms: f64,
    ) -> Result<PerfProfile, ProfileError> {
        PerfProfile::build(
            name,
            source,
            (prefill, decode),
            pass_overhead_ms,
            BeyondGrid::Extrapolate,
        )
    }

    /// A clamping profile (arguments as [`PerfProfile::new`]): lookups past
    /// the grid hold its edge and are counted
    /// ([`ProfilePerf`] counts them per core); its tables may be
    /// [`TableShape::AsGiven`].
    pub fn clamped(
        name: String,
        source: String,
        prefill: PerfTable,
        decode: PerfTable,
        pass_overhead_ms: f64,
    ) -> Result<PerfProfile, ProfileError> {
        PerfProfile::build(
            name,
            source,
            (prefill, decode),
            pass_overhead_ms,
            BeyondGrid::Clamp,
        )
    }

    fn build(
        name: String,
        source: String,
        (prefill, decode): (PerfTable, PerfTable),
        pass_overhead_ms: f64,
        beyond: BeyondGrid,
    ) -> Result<PerfProfile, ProfileError> {
        let err = |field, kind| ProfileError {
            table: None,
            field,
            kind,
        };
        if name.is_empty() {
            return Err(err("name", ProfileErrorKind::EmptyName));
        }
        let ok = pass_overhead_ms.is_finite()
            && pass_overhead_ms >= 0.0
            && pass_overhead_ms <= prefill.min_ms().min(decode.min_ms());
        if !ok {
            return Err(err("pass_overhead_ms", ProfileErrorKind::Overhead));
        }
        let as_given = [&prefill, &decode]
            .iter()
            .any(|t| t.shape == TableShape::AsGiven);
        if as_given && beyond == BeyondGrid::Extrapolate {
            return Err(err("beyond_grid", ProfileErrorKind::AsGivenNeedsClamp));
        }
        Ok(PerfProfile {
            name,
            source,
            prefill,
            decode,
            pass_overhead_ms,
            decode_axis: DecodeAxis::TotalContext,
            beyond,
            overheads: Overheads::default(),
            shape: None,
        })
    }

    /// The profile recording the deployment its tables are for (what the
    /// all-reduce and SGLang capture terms read).
    pub fn with_shape(mut self, shape: DeploymentShape) -> PerfProfile {
        self.shape = Some(shape);
        self
    }

    /// The deployment the tables are for, if recorded.
    pub fn shape(&self) -> Option<&DeploymentShape> {
        self.shape.as_ref()
    }

    /// The profile with the step-time terms `overheads` (replacing any),
    /// checked ([`Overheads::check`] against its deployment).
    pub fn with_overheads(mut self, overheads: Overheads) -> Result<PerfProfile, OverheadError> {
        overheads.check(self.shape.as_ref())?;
        self.overheads = overheads;
        Ok(self)
    }

    /// Its step-time terms beyond the tables.
    pub fn overheads(&self) -> &Overheads {
        &self.overheads
    }

    /// The profile with decode's second axis counting `axis`.
    pub fn with_decode_axis(mut self, axis: DecodeAxis) -> PerfProfile {
        self.decode_axis = axis;
        self
    }

    /// What decode's second axis counts.
    pub fn decode_axis(&self) -> DecodeAxis {
        self.decode_axis
    }

    /// What lookups past the grid do.
    pub fn beyond_grid(&self) -> BeyondGrid {
        self.beyond
    }

    /// The profile's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where its numbers come from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Prefill by (new tokens, cached tokens).
    pub fn prefill_table(&self) -> &PerfTable {
        &self.prefill
    }

    /// Decode by (batch, context tokens).
    pub fn decode_table(&self) -> &PerfTable {
        &self.decode
    }

    /// The fixed cost a mixed pass pays once, in ms.
    pub fn pass_overhead_ms(&self) -> f64 {
        self.pass_overhead_ms
    }

    /// The pass time in ms, before any speedup.
    pub fn pass_ms(&self, pass: &Pass) -> f64 {
        self.pass_ms_past(pass).0
    }

    /// The pass time in ms, before any speedup, and whether its prefill and
    /// its decode lookups lay past the grid.
    pub fn pass_ms_past(&self, pass: &Pass) -> (f64, (bool, bool)) {
        self.pass_ms_near(pass, &[Near::default(), Near::default()])
    }

    /// Whether `pass`'s prefill and decode lookups lie past the grid, as
    /// [`PerfProfile::pass_ms_past`] says, without looking them up.
    pub(crate) fn past_grid(&self, pass: &Pass) -> (bool, bool) {
        let past =
            |t: &PerfTable, x: f64, y: f64| x > t.xs[t.xs.len() - 1] || y > t.ys[t.ys.len() - 1];
        let prefill = pass.prefill_tokens > 0
            && past(
                &self.prefill,
                pass.prefill_tokens as f64,
                pass.mean_cached_tokens(),
            );
        let decode = pass.decode_batch > 0 && {
            let batch = pass.decode_batch as f64;
            let context = match self.decode_axis {
                DecodeAxis::TotalContext => pass.decode_context_tokens as f64,
                DecodeAxis::ContextPerSequence => pass.decode_context_tokens as f64 / batch,
            };
            past(&self.decode, batch, context)
        };
        (prefill, decode)
    }

    /// [`PerfProfile::pass_ms_past`], each table's lookup starting at the
    /// segments `near` (prefill's, decode's) remembers.
    pub(crate) fn pass_ms_near(&self, pass: &Pass, near: &[Near; 2]) -> (f64, (bool, bool)) {
        let (p, prefill_past) = if pass.prefill_tokens > 0 {
            self.prefill.lookup_near(
                pass.prefill_tokens as f64,
                pass.mean_cached_tokens(),
                self.beyond,
                &near[0],
            )
        } else {
            (0.0, false)
        };
        let (d, decode_past) = if pass.decode_batch > 0 {
            let batch = pass.decode_batch as f64;
            let context = match self.decode_axis {
                DecodeAxis::TotalContext => pass.decode_context_tokens as f64,
                DecodeAxis::ContextPerSequence => pass.decode_context_tokens as f64 / batch,
            };
            self.decode
                .lookup_near(batch, context, self.beyond, &near[1])
        } else {
            (0.0, false)
        };
        let ms = if p > 0.0 && d > 0.0 {
            p + d - self.pass_overhead_ms
        } else {
            p + d
        };
        (ms, (prefill_past, decode_past))
    }
}

/// [`PerfProfile`] as a [`PerfModel`], every time divided by
/// `speedup_ratio`, with the profile's step-time terms
/// ([`crate::overhead`]). Shared, so that every worker of a run reads one
/// copy.
#[derive(Debug)]
pub struct ProfilePerf {
    pub(crate) profile: Arc<PerfProfile>,
    /// Divides every predicted time; must be positive.
    pub speedup_ratio: f64,
    /// This model's own lookups past a clamping profile's grid: one model
    /// per core, so a core's count travels with its final state wherever
    /// the core runs (a thread, another process).
    counts: BeyondGridCounts,
    /// Where this model's last prefill and decode lookups fell.
    pub(crate) near: [Near; 2],
    /// The step-time terms as this engine applies them; `None` when none
    /// changes a time, and then every pass takes the table path.
    terms: Option<Box<Applied>>,
}

impl Clone for ProfilePerf {
    /// The same profile, speed-up and terms, with no passes counted yet.
    fn clone(&self) -> Self {
        ProfilePerf {
            terms: self.terms.clone(),
            ..ProfilePerf::bare(self.profile.clone(), self.speedup_ratio)
        }
    }
}

impl PartialEq for ProfilePerf {
    /// The same model: profile, speed-up and terms (counts are a run's,
    /// not the model's).
    fn eq(&self, other: &Self) -> bool {
        self.profile == other.profile
            && self.speedup_ratio == other.speedup_ratio
            && self.terms == other.terms
    }
}

impl ProfilePerf {
    /// The model of `profile` at `speedup_ratio`, with the profile's
    /// terms; capture-list rules are resolved without an engine's limits
    /// ([`crate::CudaGraph::resolve`]).
    pub fn new(profile: Arc<PerfProfile>, speedup_ratio: f64) -> ProfilePerf {
        let terms = Applied::new(profile.overheads(), profile.shape(), None, None);
        ProfilePerf {
            terms,
            ..ProfilePerf::bare(profile, speedup_ratio)
        }
    }

    /// The model of `profile` for an engine of `max_running` sequences and
    /// `max_batched_tokens` per pass (what the capture-list rules read).
    pub fn for_engine(
        profile: Arc<PerfProfile>,
        speedup_ratio: f64,
        max_running: u32,
        max_batched_tokens: u32,
    ) -> ProfilePerf {
        let terms = Applied::new(
            profile.overheads(),
            profile.shape(),
            Some(max_running),
            Some(max_batched_tokens),
        );
        ProfilePerf {
            terms,
            ..ProfilePerf::bare(profile, speedup_ratio)
        }
    }

    /// This model with `overheads` in place of the profile's (checked
    /// against its deployment), for an engine of `max_running` sequences
    /// if given: cheap, the tables are shared (a calibration trial).
    pub fn with_overheads(
        self,
        overheads: &Overheads,
        max_running: Option<u32>,
        max_batched_tokens: Option<u32>,
    ) -> Result<ProfilePerf, OverheadError> {
        overheads.check(self.profile.shape())?;
        let terms = Applied::new(
            overheads,
            self.profile.shape(),
            max_running,
            max_batched_tokens,
        );
        Ok(ProfilePerf { terms, ..self })
    }

    fn bare(profile: Arc<PerfProfile>, speedup_ratio: f64) -> ProfilePerf {
        ProfilePerf {
            profile,
            speedup_ratio,
            counts: BeyondGridCounts::default(),
            near: Default::default(),
            terms: None,
        }
    }

    /// Whether some step-time term changes this model's times.
    pub fn has_terms(&self) -> bool {
        self.terms.is_some()
    }

    /// Counts a pass's lookups past a clamping grid.
    pub(crate) fn count_past(&self, past: (bool, bool)) {
        if self.profile.beyond == BeyondGrid::Clamp {
            if past.0 {
                self.counts.count_prefill();
            }
            if past.1 {
                self.counts.count_decode();
            }
        }
    }

    /// The profile.
    pub fn profile(&self) -> &PerfProfile {
        &self.profile
    }
}

impl ProfilePerf {
    fn time(&self, pass: &Pass, count: bool) -> Duration {
        if pass.prefill_tokens == 0 && pass.decode_batch == 0 {
            return Duration::ZERO;
        }
        if let Some(t) = &self.terms {
            return self.time_with(t, pass, count);
        }
        let (ms, past) = self.profile.pass_ms_near(pass, &self.near);
        if count && self.profile.beyond == BeyondGrid::Clamp {
            if past.0 {
                self.counts.count_prefill();
            }
            if past.1 {
                self.counts.count_decode();
            }
        }
        // At least 1 µs, so token-emitting passes never share a timestamp.
        scaled_ms(ms, self.speedup_ratio).max(Duration::from_micros(1))
    }
}

impl PerfModel for ProfilePerf {
    fn pass(&self, pass: &Pass) -> Duration {
        self.time(pass, true)
    }

    fn pass_uncounted(&self, pass: &Pass) -> Duration {
        self.time(pass, false)
    }

    fn count_pass(&self, pass: &Pass) {
        if self.profile.beyond == BeyondGrid::Clamp
            && (pass.prefill_tokens > 0 || pass.decode_batch > 0)
        {
            let past = match &self.terms {
                Some(t) => self.profile.past_grid(&t.table_pass(pass)),
                None => self.profile.past_grid(pass),
            };
            if past.0 {
                self.counts.count_prefill();
            }
            if past.1 {
                self.counts.count_decode();
            }
        }
    }

    fn beyond_grid_passes(&self) -> (u64, u64) {
        self.counts.get()
    }

    /// The decode table's column for the batch is found once; each pass
    /// then looks up its context only. The same floating-point operations
    /// in the same order as [`PerfModel::pass_uncounted`] on each pass
    /// (`PerfProfile::pass_ms_near` with no prefill), so the same times.
    fn decode_run(
        &self,
        batch: u64,
        first_context: u64,
        pool_tokens: u64,
        max: u64,
        take: &mut dyn FnMut(Duration) -> bool,
    ) -> u64 {
        if let Some(t) = &self.terms {
            return self.decode_run_with(t, (batch, first_context, pool_tokens), max, take);
        }
        if batch == 0 {
            let mut k = 0;
            while k < max && take(Duration::ZERO) {
                k += 1;
            }
            return k;
        }
        let p = &*self.profile;
        let t = &p.decode;
        let (x_last, y_last) = (t.xs[t.xs.len() - 1], t.ys[t.ys.len() - 1]);
        let clamp = p.beyond == BeyondGrid::Clamp;
        let x = batch as f64;
        let column = t.column(if clamp { x.min(x_last) } else { x }, &self.near[1]);
        let mut k = 0;
        while k < max {
            let context = (first_context + batch * k) as f64;
            let y = match p.decode_axis {
                DecodeAxis::TotalContext => context,
                DecodeAxis::ContextPerSequence => context / x,
            };
            let d = t.at_column(column, if clamp { y.min(y_last) } else { y }, &self.near[1]);
            // `pass_ms_near` adds a zero prefill time.
            let ms = 0.0 + d;
            let time = scaled_ms(ms, self.speedup_ratio).max(Duration::from_micros(1));
            if !take(time) {
                break;
            }
            k += 1;
        }
        k
    }

    /// Decode lookups past a clamping grid: every pass when the batch is
    /// past it, else the passes from the first whose context is (contexts
    /// grow with the pass), found by bisection.
    fn count_decode_run(&self, batch: u64, first_context: u64, pool_tokens: u64, passes: u64) {
        if self.terms.is_some() {
            return self.count_run_with((batch, first_context, pool_tokens, passes));
        }
        let p = &*self.profile;
        if p.beyond != BeyondGrid::Clamp || batch == 0 || passes == 0 {
            return;
        }
        let t = &p.decode;
        let (x_last, y_last) = (t.xs[t.xs.len() - 1], t.ys[t.ys.len() - 1]);
        let x = batch as f64;
        let past = |k: u64| {
            let context = (first_context + batch * k) as f64;
            let y = match p.decode_axis {
                DecodeAxis::TotalContext => context,
                DecodeAxis::ContextPerSequence => context / x,
            };
            x > x_last || y > y_last
        };
        // The first pass past the grid: `past` is monotone in `k`.
        let (mut lo, mut hi) = (0u64, passes);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if past(mid) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        self.counts.count_decode_n(passes - lo);
    }

    /// `passes` times the least of the passes' decode lookups
    /// ([`PerfTable::min_along_y`]: the context of the first pass to that
    /// of the last), less a nanosecond for the float noise of the passes'
    /// own lookups: a bound that holds whether or not the table dips, at a
    /// lookup per point of the context axis the passes cross. Nothing is
    /// counted past the grid.
    fn stable_decode_floor(
        &self,
        batch: u64,
        first_context: u64,
        passes: u64,
        pool_tokens: u64,
    ) -> Duration {
        if let Some(t) = &self.terms {
            return self.floor_with(t, (batch, first_context, passes), pool_tokens);
        }
        if passes == 0 || batch == 0 {
            return Duration::ZERO;
        }
        let last_context = first_context.saturating_add(batch.saturating_mul(passes - 1));
        let y = |context: u64| match self.profile.decode_axis {
            DecodeAxis::TotalContext => context as f64,
            DecodeAxis::ContextPerSequence => context as f64 / batch as f64,
        };
        let ms = self.profile.decode.min_along_y_near(
            batch as f64,
            (y(first_context), y(last_context)),
            self.profile.beyond,
            &self.near[1],
        );
        let one = scaled_ms(ms, self.speedup_ratio)
            .saturating_sub(Duration::from_nanos(1))
            .max(Duration::from_micros(1));
        one.saturating_mul(u32::try_from(passes).unwrap_or(u32::MAX))
    }
}

#[cfg(test)]
#[path = "profile_tests.rs"]
mod tests;
