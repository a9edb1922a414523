//! Dynamo's profiled step-time model (`npz:FILE`): the planner profiler's
//! interpolation grids, looked up as Dynamo's mocker looks them up.
//!
//! Dynamo's profiler (`convert_profile_results_to_npz`) writes five arrays,
//! times in milliseconds:
//!
//! - `prefill_isl` (1-D) → `prefill_ttft_ms` (1-D, same length): a prefill
//!   pass by the new tokens it computes;
//! - `decode_active_kv_tokens` (1-D, rows) × `decode_context_length` (1-D,
//!   columns) → `decode_itl` (2-D): a decode pass by the context tokens
//!   summed over its batch and their integer mean per sequence.
//!
//! The lookups follow dynamo-mocker 1.6.1 (`src/common/perf_model.rs`,
//! `PerfModel::from_npz`, `predict_prefill_time`, `predict_decode_time`),
//! which builds `ndarray-interp` 0.5's `Linear` and `Bilinear` with
//! extrapolation on:
//!
//! - an axis needs at least two points, strictly increasing;
//! - a value is interpolated on the segment whose left point is the last
//!   one at or below it, clamped to the first and last segments, so past
//!   either end of an axis the end segment's line is extended (below the
//!   first point too, unlike `profile:FILE`'s clamp);
//! - prefill: `x` = new tokens of the pass (Dynamo: batch size × (mean
//!   prompt − mean cached prefix)); no new tokens cost nothing; the result is
//!   floored at 0 ms;
//! - decode: `x` = context tokens summed over the batch (Dynamo's
//!   `active_kv_tokens`), `y` = that sum divided by the batch, rounded down
//!   (its `context_length`); the result is floored at 1 ms;
//! - bilinear as `ndarray-interp`'s `Bilinear::interp_into`: along `x` on
//!   both columns of the cell, then along `y`;
//! - a pass with both parts costs their sum (aisimulate-core's vLLM core
//!   starts the decode part when the prefill part ends).
//!
//! Stricter than Dynamo: values must be finite and non-negative and axes
//! bounded in length ([`MAX_GRID_AXIS_POINTS`], [`MAX_GRID_CELLS`]), each
//! error naming the array and the point. The file reader is
//! `handoff_profiles::npz_file`; this module has no dependency.

use super::{scaled_ms, Pass, PerfModel};
use handoff_core::Duration;
use std::sync::Arc;

/// Most points one axis may have (Dynamo's profiler writes 100 by default).
pub const MAX_GRID_AXIS_POINTS: usize = 4096;

/// Most cells `decode_itl` may have.
pub const MAX_GRID_CELLS: usize = 1 << 20;

/// One of the five arrays of a Dynamo profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GridArray {
    /// `prefill_isl`: new tokens, the prefill axis.
    PrefillIsl,
    /// `prefill_ttft_ms`: prefill pass times.
    PrefillTtftMs,
    /// `decode_active_kv_tokens`: context tokens summed over a batch, rows.
    DecodeActiveKvTokens,
    /// `decode_context_length`: mean context per sequence, columns.
    DecodeContextLength,
    /// `decode_itl`: decode pass times, rows × columns.
    DecodeItl,
}

impl GridArray {
    /// All five, in the order they are read.
    pub const ALL: [GridArray; 5] = [
        GridArray::PrefillIsl,
        GridArray::PrefillTtftMs,
        GridArray::DecodeActiveKvTokens,
        GridArray::DecodeContextLength,
        GridArray::DecodeItl,
    ];

    /// The array's name in the archive (without `.npy`).
    pub fn name(self) -> &'static str {
        match self {
            GridArray::PrefillIsl => "prefill_isl",
            GridArray::PrefillTtftMs => "prefill_ttft_ms",
            GridArray::DecodeActiveKvTokens => "decode_active_kv_tokens",
            GridArray::DecodeContextLength => "decode_context_length",
            GridArray::DecodeItl => "decode_itl",
        }
    }

    /// Its number of dimensions.
    pub fn ndim(self) -> usize {
        match self {
            GridArray::DecodeItl => 2,
            _ => 1,
        }
    }
}

/// Where in an array a bad value sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GridAt {
    /// The `i`-th value of a 1-D array.
    Point(usize),
    /// Row and column of `decode_itl`.
    Cell(usize, usize),
}

impl std::fmt::Display for GridAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GridAt::Point(i) => write!(f, "[{i}]"),
            GridAt::Cell(r, c) => write!(f, "[{r}][{c}]"),
        }
    }
}

/// What is wrong with an array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GridErrorKind {
    /// An axis has fewer than the two points a segment needs.
    TooFewPoints {
        /// Points given.
        len: usize,
    },
    /// More points or cells than [`MAX_GRID_AXIS_POINTS`] / [`MAX_GRID_CELLS`].
    TooLarge {
        /// Values given.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// Its length (or a dimension of `decode_itl`) differs from its axis's.
    Length {
        /// The axis's length.
        expected: usize,
        /// The array's.
        found: usize,
    },
    /// A value is NaN or infinite.
    NotFinite(GridAt),
    /// A value is below zero.
    Negative(GridAt),
    /// An axis point is not above the one before it.
    NotIncreasing(usize),
}

/// A Dynamo profile refused by [`DynamoGrid::new`], naming the array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GridError {
    /// The array.
    pub array: GridArray,
    /// What is wrong.
    pub kind: GridErrorKind,
}

impl std::fmt::Display for GridError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ", self.array.name())?;
        match &self.kind {
            GridErrorKind::TooFewPoints { len } => {
                write!(f, "needs at least 2 points, has {len}")
            }
            GridErrorKind::TooLarge { len, max } => {
                write!(f, "{len} values, more than the {max} allowed")
            }
            GridErrorKind::Length { expected, found } => {
                write!(
                    f,
                    "expected {expected} values along its axis, found {found}"
                )
            }
            GridErrorKind::NotFinite(at) => write!(f, "{at} is not finite"),
            GridErrorKind::Negative(at) => write!(f, "{at} is negative"),
            GridErrorKind::NotIncreasing(i) => {
                write!(
                    f,
                    "[{i}] is not above the point before it (axes must increase)"
                )
            }
        }
    }
}

impl std::error::Error for GridError {}

/// The five arrays as read, `decode_itl` row-major with its shape.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GridArrays {
    /// `prefill_isl`.
    pub prefill_isl: Vec<f64>,
    /// `prefill_ttft_ms`.
    pub prefill_ttft_ms: Vec<f64>,
    /// `decode_active_kv_tokens`.
    pub decode_active_kv_tokens: Vec<f64>,
    /// `decode_context_length`.
    pub decode_context_length: Vec<f64>,
    /// `decode_itl`, row-major.
    pub decode_itl: Vec<f64>,
    /// `decode_itl`'s (rows, columns).
    pub decode_itl_shape: (usize, usize),
}

/// A checked Dynamo profile (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct DynamoGrid {
    name: String,
    a: GridArrays,
}

fn check_values(array: GridArray, values: &[f64], cols: usize) -> Result<(), GridError> {
    for (k, &v) in values.iter().enumerate() {
        let at = if array.ndim() == 2 {
            GridAt::Cell(k / cols.max(1), k % cols.max(1))
        } else {
            GridAt::Point(k)
        };
        let kind = if !v.is_finite() {
            GridErrorKind::NotFinite(at)
        } else if v < 0.0 {
            GridErrorKind::Negative(at)
        } else {
            continue;
        };
        return Err(GridError { array, kind });
    }
    Ok(())
}

fn check_axis(array: GridArray, axis: &[f64]) -> Result<(), GridError> {
    let err = |kind| GridError { array, kind };
    if axis.len() < 2 {
        return Err(err(GridErrorKind::TooFewPoints { len: axis.len() }));
    }
    if axis.len() > MAX_GRID_AXIS_POINTS {
        return Err(err(GridErrorKind::TooLarge {
            len: axis.len(),
            max: MAX_GRID_AXIS_POINTS,
        }));
    }
    check_values(array, axis, 1)?;
    match (1..axis.len()).find(|&i| axis[i] <= axis[i - 1]) {
        Some(i) => Err(err(GridErrorKind::NotIncreasing(i))),
        None => Ok(()),
    }
}

impl DynamoGrid {
    /// A profile named `name` (what the report shows after `npz:`), checked
    /// as the module docs say.
    pub fn new(name: String, a: GridArrays) -> Result<DynamoGrid, GridError> {
        check_axis(GridArray::PrefillIsl, &a.prefill_isl)?;
        let length = |array, expected: usize, found: usize| {
            if expected == found {
                Ok(())
            } else {
                Err(GridError {
                    array,
                    kind: GridErrorKind::Length { expected, found },
                })
            }
        };
        length(
            GridArray::PrefillTtftMs,
            a.prefill_isl.len(),
            a.prefill_ttft_ms.len(),
        )?;
        check_values(GridArray::PrefillTtftMs, &a.prefill_ttft_ms, 1)?;
        check_axis(GridArray::DecodeActiveKvTokens, &a.decode_active_kv_tokens)?;
        check_axis(GridArray::DecodeContextLength, &a.decode_context_length)?;
        let (rows, cols) = a.decode_itl_shape;
        length(GridArray::DecodeItl, a.decode_active_kv_tokens.len(), rows)?;
        length(GridArray::DecodeItl, a.decode_context_length.len(), cols)?;
        length(GridArray::DecodeItl, rows * cols, a.decode_itl.len())?;
        check_values(GridArray::DecodeItl, &a.decode_itl, cols)?;
        Ok(DynamoGrid { name, a })
    }

    /// The profile's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The arrays.
    pub fn arrays(&self) -> &GridArrays {
        &self.a
    }

    /// A prefill pass of `new_tokens`, in ms (Dynamo's
    /// `predict_prefill_time` on the interpolated model).
    pub fn prefill_ms(&self, new_tokens: u64) -> f64 {
        if new_tokens == 0 {
            return 0.0;
        }
        let x = new_tokens as f64;
        let (xs, ys) = (&self.a.prefill_isl, &self.a.prefill_ttft_ms);
        let i = lower(xs, x);
        frac((xs[i], ys[i]), (xs[i + 1], ys[i + 1]), x).max(0.0)
    }

    /// A decode pass of `batch` sequences attending over `context_tokens`
    /// in all, in ms (Dynamo's `predict_decode_time`).
    pub fn decode_ms(&self, batch: u64, context_tokens: u64) -> f64 {
        if batch == 0 {
            return 0.0;
        }
        let x = context_tokens as f64;
        let y = (context_tokens / batch) as f64;
        let (xs, ys) = (
            &self.a.decode_active_kv_tokens,
            &self.a.decode_context_length,
        );
        let (i, j) = (lower(xs, x), lower(ys, y));
        let cols = ys.len();
        let z = |r: usize, c: usize| self.a.decode_itl[r * cols + c];
        let z1 = frac((xs[i], z(i, j)), (xs[i + 1], z(i + 1, j)), x);
        let z2 = frac((xs[i], z(i, j + 1)), (xs[i + 1], z(i + 1, j + 1)), x);
        frac((ys[j], z1), (ys[j + 1], z2), y).max(1.0)
    }
}

/// The left index of the segment `v` is interpolated on: the last point at
/// or below `v`, clamped to `0..=len-2` (`ndarray-interp`'s
/// `get_lower_index`). Axes have at least two points.
fn lower(axis: &[f64], v: f64) -> usize {
    axis.partition_point(|&a| a <= v)
        .saturating_sub(1)
        .min(axis.len() - 2)
}

/// The line through two points at `x`, in `ndarray-interp`'s
/// `Linear::calc_frac` order of operations.
fn frac((x1, y1): (f64, f64), (x2, y2): (f64, f64), x: f64) -> f64 {
    let m = (y2 - y1) / (x2 - x1);
    m * (x - x1) + y1
}

/// [`DynamoGrid`] as a [`PerfModel`], every time divided by
/// `speedup_ratio`. Shared, so every worker of a run reads one copy.
#[derive(Clone, Debug, PartialEq)]
pub struct GridPerf {
    grid: Arc<DynamoGrid>,
    /// Divides every predicted time; must be positive.
    pub speedup_ratio: f64,
}

impl GridPerf {
    /// The model of `grid` at `speedup_ratio`.
    pub fn new(grid: Arc<DynamoGrid>, speedup_ratio: f64) -> GridPerf {
        GridPerf {
            grid,
            speedup_ratio,
        }
    }

    /// The profile.
    pub fn grid(&self) -> &DynamoGrid {
        &self.grid
    }
}

impl PerfModel for GridPerf {
    /// Prefill and decode parts, each rounded to whole nanoseconds as
    /// Dynamo makes a `Duration` of each, then summed; a non-empty pass
    /// lasts at least 1 µs (a prefill part Dynamo would floor at 0 ms),
    /// so token-emitting passes never share a timestamp.
    fn pass(&self, pass: &Pass) -> Duration {
        if pass.prefill_tokens == 0 && pass.decode_batch == 0 {
            return Duration::ZERO;
        }
        let p = scaled_ms(
            self.grid.prefill_ms(pass.prefill_tokens),
            self.speedup_ratio,
        );
        let d = scaled_ms(
            self.grid
                .decode_ms(pass.decode_batch, pass.decode_context_tokens),
            self.speedup_ratio,
        );
        (p + d).max(Duration::from_micros(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrays() -> GridArrays {
        GridArrays {
            prefill_isl: vec![100.0, 200.0, 400.0],
            prefill_ttft_ms: vec![10.0, 20.0, 60.0],
            decode_active_kv_tokens: vec![0.0, 1000.0],
            decode_context_length: vec![10.0, 110.0],
            decode_itl: vec![5.0, 7.0, 9.0, 15.0],
            decode_itl_shape: (2, 2),
        }
    }

    #[test]
    fn prefill_interpolates_and_extends_both_end_segments() {
        let g = DynamoGrid::new("g".into(), arrays()).unwrap();
        assert_eq!(g.prefill_ms(0), 0.0);
        assert_eq!(g.prefill_ms(100), 10.0);
        assert_eq!(g.prefill_ms(150), 15.0);
        assert_eq!(g.prefill_ms(200), 20.0);
        assert_eq!(g.prefill_ms(300), 40.0);
        // Past the last point: the last segment's slope (0.2 ms/token).
        assert_eq!(g.prefill_ms(500), 80.0);
        // Below the first: the first segment's line, floored at 0.
        assert_eq!(g.prefill_ms(50), 5.0);
        assert_eq!(g.prefill_ms(1), 0.1 * (1.0 - 100.0) + 10.0);
        let mut steep = arrays();
        steep.prefill_ttft_ms = vec![1.0, 20.0, 60.0];
        let g = DynamoGrid::new("g".into(), steep).unwrap();
        assert_eq!(g.prefill_ms(10), 0.0);
    }

    #[test]
    fn decode_is_bilinear_by_total_and_mean_context() {
        let g = DynamoGrid::new("g".into(), arrays()).unwrap();
        // 4 sequences, 400 tokens: x = 400, y = 100.
        // z1 = 5 + 0.4·4 = 6.6, z2 = 7 + 0.4·8 = 10.2, z = 6.6 + 0.9·3.6.
        let want = 6.6 + (10.2 - 6.6) / 100.0 * 90.0;
        assert!((g.decode_ms(4, 400) - want).abs() < 1e-12);
        // Grid corners.
        assert!((g.decode_ms(1, 1000) - (9.0 + 0.06 * 990.0)).abs() < 1e-12);
        assert_eq!(g.decode_ms(100, 1000), 9.0);
        // Mean context rounds down: 3 × 35 + 1 = 106 → y = 35.
        let x = 106.0;
        let z1 = 5.0 + 0.004 * x;
        let z2 = 7.0 + 0.008 * x;
        let want = z1 + (z2 - z1) / 100.0 * 25.0;
        assert!((g.decode_ms(3, 106) - want).abs() < 1e-12);
        // Past the last row and column: the edge cell's planes extended.
        let (x, y) = (2000.0, 1000.0);
        let z1 = 5.0 + 0.004 * x;
        let z2 = 7.0 + 0.008 * x;
        assert!((g.decode_ms(2, 2000) - (z1 + (z2 - z1) / 100.0 * (y - 10.0))).abs() < 1e-9);
        // Floored at 1 ms.
        let mut low = arrays();
        low.decode_itl = vec![0.2, 0.3, 0.4, 0.5];
        let g = DynamoGrid::new("g".into(), low).unwrap();
        assert_eq!(g.decode_ms(1, 10), 1.0);
        assert_eq!(g.decode_ms(0, 10), 0.0);
    }

    #[test]
    fn a_pass_sums_its_parts_and_scales() {
        let g = Arc::new(DynamoGrid::new("g".into(), arrays()).unwrap());
        let m = GridPerf::new(g.clone(), 1.0);
        let mut mixed = Pass::prefill(150, 0);
        mixed.add_decode(100);
        mixed.add_decode(100);
        // Decode: x = 200, y = 100: z1 = 5.8, z2 = 8.6, z = 5.8 + 0.9·2.8.
        let d = 5.8 + (8.6 - 5.8) / 100.0 * 90.0;
        let ns = |ms: f64| Duration::from_nanos((ms * 1e6).round() as u64);
        assert_eq!(m.pass(&mixed), ns(15.0) + ns(d));
        assert_eq!(m.pass(&Pass::default()), Duration::ZERO);
        let fast = GridPerf::new(g, 2.0);
        assert_eq!(fast.pass(&Pass::prefill(200, 0)), Duration::from_millis(10));
    }

    #[test]
    fn bad_arrays_are_named_with_the_point() {
        let bad = |f: fn(&mut GridArrays)| {
            let mut a = arrays();
            f(&mut a);
            DynamoGrid::new("g".into(), a).unwrap_err()
        };
        let e = bad(|a| a.prefill_isl = vec![1.0]);
        assert_eq!(e.array, GridArray::PrefillIsl);
        assert_eq!(e.kind, GridErrorKind::TooFewPoints { len: 1 });
        let e = bad(|a| a.decode_context_length = vec![10.0, 10.0]);
        assert_eq!(e.kind, GridErrorKind::NotIncreasing(1));
        assert_eq!(
            e.to_string(),
            "decode_context_length: [1] is not above the point before it (axes must increase)"
        );
        let e = bad(|a| {
            a.prefill_ttft_ms.pop();
        });
        assert_eq!(
            e.kind,
            GridErrorKind::Length {
                expected: 3,
                found: 2
            }
        );
        let e = bad(|a| a.decode_itl[3] = f64::NAN);
        assert_eq!(e.to_string(), "decode_itl: [1][1] is not finite");
        let e = bad(|a| a.decode_itl[2] = -1.0);
        assert_eq!(e.kind, GridErrorKind::Negative(GridAt::Cell(1, 0)));
        let e = bad(|a| a.prefill_isl[0] = -1.0);
        assert_eq!(e.kind, GridErrorKind::Negative(GridAt::Point(0)));
        let e = bad(|a| a.decode_itl_shape = (2, 1));
        assert_eq!(e.array, GridArray::DecodeItl);
        let e = bad(|a| a.prefill_isl = (0..=MAX_GRID_AXIS_POINTS).map(|i| i as f64).collect());
        assert!(matches!(e.kind, GridErrorKind::TooLarge { .. }));
    }
}
