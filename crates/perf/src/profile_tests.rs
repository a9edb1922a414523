//! Tests of [`super`]: lookups, checks, mixed passes, clamping.
use super::*;

fn table(xs: &[f64], ys: &[f64], rows: &[&[f64]]) -> Result<PerfTable, ProfileError> {
    let rows: Vec<Vec<f64>> = rows.iter().map(|r| r.to_vec()).collect();
    PerfTable::new(
        TableKind::Prefill,
        ("new_tokens", "cached_tokens"),
        xs.to_vec(),
        ys.to_vec(),
        &rows,
    )
}

#[test]
fn interpolates_clamps_and_extrapolates() {
    let t = table(
        &[100.0, 200.0],
        &[0.0, 1000.0],
        &[&[10.0, 20.0], &[30.0, 60.0]],
    )
    .unwrap();
    assert_eq!(t.at(100.0, 0.0), 10.0);
    assert_eq!(t.at(200.0, 1000.0), 60.0);
    assert_eq!(t.at(150.0, 0.0), 20.0);
    assert_eq!(t.at(150.0, 500.0), (15.0 + 45.0) / 2.0);
    // Below the first point: clamped.
    assert_eq!(t.at(1.0, 0.0), 10.0);
    // Past the last: the last segment's slope.
    assert_eq!(t.at(300.0, 0.0), 50.0);
    assert_eq!(t.at(100.0, 2000.0), 30.0);
    assert_eq!(
        t.at(300.0, 2000.0),
        10.0 + 2.0 * 20.0 + 2.0 * 10.0 + 4.0 * 20.0
    );
}

#[test]
fn rejects_bad_tables_with_their_place() {
    let e = table(&[1.0, 1.0], &[0.0], &[&[1.0], &[2.0]]).unwrap_err();
    assert_eq!(e.field, "new_tokens");
    assert_eq!(e.kind, ProfileErrorKind::AxisNotIncreasing { index: 1 });
    let e = table(&[1.0, 2.0], &[0.0], &[&[1.0]]).unwrap_err();
    assert_eq!(
        e.kind,
        ProfileErrorKind::Shape {
            expected: 2,
            found: 1
        }
    );
    let e = table(&[1.0, 2.0], &[0.0, 1.0], &[&[1.0, 2.0], &[3.0, f64::NAN]]).unwrap_err();
    assert_eq!(e.kind, ProfileErrorKind::BadValue { row: 1, col: 1 });
    let e = table(&[1.0, 2.0], &[0.0, 1.0], &[&[1.0, 2.0], &[3.0, 1.5]]).unwrap_err();
    assert_eq!(e.kind, ProfileErrorKind::Decreasing { row: 1, col: 1 });
    // Monotone, but the x-step shrinks in the last column: past it the
    // extrapolation would fall.
    let e = table(&[1.0, 2.0], &[0.0, 1.0], &[&[1.0, 5.0], &[4.0, 6.0]]).unwrap_err();
    assert_eq!(e.kind, ProfileErrorKind::EdgeSlope { row: 1, col: 1 });
    assert_eq!(
        e.to_string(),
        "prefill.ms: [1][1]: extrapolating past the last row or column would decrease"
    );
    let ok = table(&[1.0], &[0.0], &[&[3.0]]).unwrap();
    let p = |o| PerfProfile::new("p".into(), String::new(), ok.clone(), ok.clone(), o);
    assert_eq!(p(3.5).unwrap_err().kind, ProfileErrorKind::Overhead);
    assert!(p(3.0).is_ok());
}

#[test]
fn mixed_pass_pays_the_overhead_once() {
    let pre = table(&[1.0, 1000.0], &[0.0], &[&[10.0], &[100.0]]).unwrap();
    let dec = PerfTable::new(
        TableKind::Decode,
        ("batch", "context_tokens"),
        vec![1.0, 64.0],
        vec![0.0, 1e6],
        &[vec![8.0, 20.0], vec![9.0, 30.0]],
    )
    .unwrap();
    let prof = PerfProfile::new("t".into(), String::new(), pre, dec, 7.0).unwrap();
    let m = ProfilePerf::new(Arc::new(prof), 1.0);
    let mut mixed = Pass::on_pool(1 << 20);
    mixed.add_prefill(1000, 0);
    mixed.add_decode(0);
    assert_eq!(m.pass(&Pass::prefill(1000, 0)), Duration::from_millis(100));
    assert_eq!(m.pass(&Pass::decode(1, 0, 1)), Duration::from_millis(8));
    assert_eq!(m.pass(&mixed), Duration::from_millis(101));
    assert_eq!(m.pass(&Pass::default()), Duration::ZERO);
    let fast = ProfilePerf::new(m.profile.clone(), 2.0);
    assert_eq!(fast.pass(&mixed) * 2, m.pass(&mixed));
}

fn decode_table(shape: TableShape) -> PerfTable {
    PerfTable::with_shape(
        TableKind::Decode,
        ("batch", "context_per_sequence"),
        vec![1.0, 8.0],
        vec![16.0, 1024.0],
        &[vec![6.0, 7.0], vec![6.5, 6.8]],
        shape,
    )
    .unwrap()
}

#[test]
fn an_as_given_table_needs_a_clamping_profile() {
    // 6.8 < 7.0: a dip, refused as non-decreasing, kept as given.
    let e = PerfTable::new(
        TableKind::Decode,
        ("batch", "context_per_sequence"),
        vec![1.0, 8.0],
        vec![16.0, 1024.0],
        &[vec![6.0, 7.0], vec![6.5, 6.8]],
    )
    .unwrap_err();
    assert_eq!(e.kind, ProfileErrorKind::Decreasing { row: 1, col: 1 });
    let pre = table(&[1.0, 100.0], &[0.0], &[&[5.0], &[9.0]]).unwrap();
    let dec = decode_table(TableShape::AsGiven);
    let e = PerfProfile::new("a".into(), String::new(), pre.clone(), dec.clone(), 1.0);
    assert_eq!(e.unwrap_err().kind, ProfileErrorKind::AsGivenNeedsClamp);
    let p = PerfProfile::clamped("a".into(), String::new(), pre, dec, 1.0).unwrap();
    assert_eq!(p.beyond_grid(), BeyondGrid::Clamp);
    // The overhead is bounded by the true minimum, wherever it lies.
    let low = decode_table(TableShape::AsGiven);
    let pre = table(&[1.0, 100.0], &[0.0], &[&[5.0], &[9.0]]).unwrap();
    assert_eq!(
        PerfProfile::clamped("a".into(), String::new(), pre, low, 5.5)
            .unwrap_err()
            .kind,
        ProfileErrorKind::Overhead
    );
}

#[test]
fn a_clamping_profile_holds_its_edge_and_counts_each_pass_past_it() {
    let pre = table(&[1.0, 100.0], &[0.0, 50.0], &[&[5.0, 6.0], &[9.0, 12.0]]).unwrap();
    let p = PerfProfile::clamped(
        "c".into(),
        String::new(),
        pre,
        decode_table(TableShape::AsGiven),
        1.0,
    )
    .unwrap()
    .with_decode_axis(DecodeAxis::ContextPerSequence);
    let m = ProfilePerf::new(Arc::new(p), 1.0);
    let ms = |pass: &Pass| m.pass(pass).as_secs_f64() * 1e3;
    // Inside: no count. Per-sequence context: 8 sequences × 1024 each.
    assert!((ms(&Pass::decode(8, 8 * 1024, 1)) - 6.8).abs() < 1e-9);
    assert!((ms(&Pass::prefill(100, 50)) - 12.0).abs() < 1e-9);
    assert_eq!(m.beyond_grid_passes(), (0, 0));
    // Past the last batch, the last context, or both: the edge's value.
    assert!((ms(&Pass::decode(64, 64 * 16, 1)) - 6.5).abs() < 1e-9);
    assert!((ms(&Pass::decode(8, 8 * 100_000, 1)) - 6.8).abs() < 1e-9);
    assert!((ms(&Pass::prefill(10_000, 1_000)) - 12.0).abs() < 1e-9);
    assert_eq!(m.beyond_grid_passes(), (1, 2));
    // Below the first point is the fixed cost, clamped and not counted.
    assert!((ms(&Pass::decode(1, 1, 1)) - 6.0).abs() < 1e-9);
    assert_eq!(m.beyond_grid_passes(), (1, 2));
    // A mixed pass past both grids counts once in each.
    let mut mixed = Pass::prefill(500, 0);
    mixed.add_decode(5000);
    assert!((ms(&mixed) - (9.0 + 7.0 - 1.0)).abs() < 1e-9);
    assert_eq!(m.beyond_grid_passes(), (2, 3));
}

#[test]
fn an_extrapolating_profile_counts_nothing() {
    let t = table(&[1.0, 2.0], &[0.0], &[&[1.0], &[2.0]]).unwrap();
    let p = PerfProfile::new("e".into(), String::new(), t.clone(), t, 1.0).unwrap();
    let m = ProfilePerf::new(Arc::new(p), 1.0);
    assert_eq!(m.pass(&Pass::prefill(4, 0)), Duration::from_millis(4));
    assert_eq!(m.beyond_grid_passes(), (0, 0));
    assert_eq!(m.profile().decode_axis(), DecodeAxis::TotalContext);
}

#[test]
fn a_stable_decode_floor_bounds_the_passes_and_counts_nothing() {
    // A decode table that dips along context at batch 4 (7.0, 6.2, 6.9).
    let dec = PerfTable::with_shape(
        TableKind::Decode,
        ("batch", "context_per_sequence"),
        vec![1.0, 4.0, 16.0],
        vec![16.0, 256.0, 1024.0],
        &[
            vec![6.0, 6.5, 7.0],
            vec![7.0, 6.2, 6.9],
            vec![8.0, 8.5, 8.1],
        ],
        TableShape::AsGiven,
    )
    .unwrap();
    let pre = table(&[1.0, 100.0], &[0.0], &[&[5.0], &[9.0]]).unwrap();
    for axis in [DecodeAxis::ContextPerSequence, DecodeAxis::TotalContext] {
        let p = PerfProfile::clamped("f".into(), String::new(), pre.clone(), dec.clone(), 1.0)
            .unwrap()
            .with_decode_axis(axis);
        let m = ProfilePerf::new(Arc::new(p), 1.3);
        for (batch, first, passes) in [
            (4u64, 40u64, 1u64),
            (4, 40, 900),
            (3, 7, 2000),
            (16, 0, 300),
        ] {
            let sum: Duration = (0..passes)
                .map(|i| m.pass_uncounted(&Pass::decode(batch, first + i * batch, 1)))
                .sum();
            let floor = m.stable_decode_floor(batch, first, passes, 1);
            assert!(
                floor <= sum,
                "{axis:?} {batch} {first} {passes}: {floor:?} > {sum:?}"
            );
            // At most the least pass each, less a nanosecond; at least the
            // least of the table's row there (6.2 ms at batch 4).
            let least = (0..passes)
                .map(|i| m.pass_uncounted(&Pass::decode(batch, first + i * batch, 1)))
                .min()
                .unwrap();
            assert!(floor <= (least - Duration::from_nanos(1)) * passes as u32);
            assert!(floor >= Duration::from_secs_f64(6.0e-3 / 1.3) * passes as u32);
        }
        assert_eq!(m.stable_decode_floor(4, 40, 0, 1), Duration::ZERO);
        assert_eq!(m.beyond_grid_passes(), (0, 0));
    }
}

#[test]
fn segments_are_found_as_the_linear_scan_found_them() {
    let scan = |axis: &[f64], v: f64| {
        let n = axis.len();
        if n == 1 || v <= axis[0] {
            return (0, 0.0);
        }
        let mut i = 0;
        while i + 2 < n && v >= axis[i + 1] {
            i += 1;
        }
        (i, (v - axis[i]) / (axis[i + 1] - axis[i]))
    };
    for axis in [
        vec![3.0],
        vec![0.0, 10.0],
        vec![1.0, 2.0, 4.0, 8.0, 16.0, 1024.0],
    ] {
        for k in 0..2200 {
            let v = k as f64 * 0.5 - 5.0;
            let fresh = AtomicUsize::new(0);
            assert_eq!(segment(&axis, v, &fresh), scan(&axis, v), "{axis:?} {v}");
            // Whatever segment a hint remembers, the answer is the scan's.
            for h in 0..axis.len().saturating_sub(1) {
                let hint = AtomicUsize::new(h);
                assert_eq!(segment(&axis, v, &hint), scan(&axis, v), "{axis:?} {v} {h}");
            }
        }
    }
}

#[test]
fn a_counted_pass_counts_as_a_timed_one() {
    let pre = table(&[1.0, 100.0], &[0.0, 50.0], &[&[5.0, 6.0], &[9.0, 12.0]]).unwrap();
    let p = PerfProfile::clamped(
        "c".into(),
        String::new(),
        pre,
        decode_table(TableShape::AsGiven),
        1.0,
    )
    .unwrap()
    .with_decode_axis(DecodeAxis::ContextPerSequence);
    let (timed, counted) = (
        ProfilePerf::new(Arc::new(p.clone()), 1.0),
        ProfilePerf::new(Arc::new(p), 1.0),
    );
    let mut mixed = Pass::prefill(500, 60);
    mixed.add_decode(5000);
    for pass in [
        Pass::decode(8, 8 * 1024, 1),
        Pass::decode(64, 64 * 16, 1),
        Pass::decode(8, 8 * 100_000, 1),
        Pass::prefill(100, 50),
        Pass::prefill(10_000, 1_000),
        mixed,
        Pass::default(),
    ] {
        timed.pass(&pass);
        assert_eq!(counted.pass_uncounted(&pass), timed.pass_uncounted(&pass));
        counted.count_pass(&pass);
        assert_eq!(
            counted.beyond_grid_passes(),
            timed.beyond_grid_passes(),
            "{pass:?}"
        );
    }
    assert_eq!(counted.beyond_grid_passes(), (2, 3));
}

/// A decode table with a dip, five batches and six contexts, for the run
/// tests below.
fn dipping_profile(axis: DecodeAxis, clamp: bool) -> PerfProfile {
    let mut rows = vec![
        vec![6.0, 6.1, 6.7, 7.3, 7.9, 9.1],
        vec![6.2, 6.0, 6.9, 7.7, 8.3, 10.2],
        vec![6.9, 7.2, 7.1, 8.8, 9.9, 13.4],
        vec![8.1, 8.6, 9.7, 12.3, 15.9, 22.7],
        vec![11.3, 12.9, 15.2, 21.8, 30.6, 44.4],
    ];
    let shape = if clamp {
        TableShape::AsGiven
    } else {
        // An extrapolating profile needs a non-decreasing table: the dips
        // lifted.
        (rows[1][1], rows[2][2]) = (6.3, 7.3);
        TableShape::NonDecreasing
    };
    let dec = PerfTable::with_shape(
        TableKind::Decode,
        ("batch", "context"),
        vec![1.0, 4.0, 16.0, 64.0, 256.0],
        vec![64.0, 512.0, 4096.0, 32768.0, 65536.0, 262144.0],
        &rows,
        shape,
    )
    .unwrap();
    let pre = table(&[1.0, 100.0], &[0.0, 50.0], &[&[5.0, 6.0], &[9.0, 12.0]]).unwrap();
    let p = if clamp {
        PerfProfile::clamped("r".into(), String::new(), pre, dec, 1.0)
    } else {
        PerfProfile::new("r".into(), String::new(), pre, dec, 1.0)
    };
    p.unwrap().with_decode_axis(axis)
}

proptest::proptest! {
    /// A decode run times each pass as `pass_uncounted` does, bit for bit,
    /// stops where `take` declines, and counts past the grid what
    /// `count_pass` on each pass counts.
    #[test]
    fn a_decode_run_is_its_passes_one_by_one(
        per_sequence in proptest::bool::ANY,
        clamp in proptest::bool::ANY,
        speedup in proptest::sample::select(vec![1.0, 1.7, 3.0]),
        batch in 0u64..400,
        first in 0u64..400_000,
        max in 0u64..600,
        stop_after in 0u64..700,
    ) {
        let axis = if per_sequence {
            DecodeAxis::ContextPerSequence
        } else {
            DecodeAxis::TotalContext
        };
        let p = Arc::new(dipping_profile(axis, clamp));
        let (run, one) = (ProfilePerf::new(p.clone(), speedup), ProfilePerf::new(p, speedup));
        let mut got = Vec::new();
        let n = run.decode_run(batch, first, 1 << 20, max, &mut |d| {
            if got.len() as u64 == stop_after {
                return false;
            }
            got.push(d);
            true
        });
        proptest::prop_assert_eq!(n, got.len() as u64);
        proptest::prop_assert_eq!(n, max.min(stop_after));
        let want: Vec<Duration> = (0..n)
            .map(|k| one.pass_uncounted(&Pass::decode(batch, first + batch * k, 1 << 20)))
            .collect();
        proptest::prop_assert_eq!(&got, &want);
        run.count_decode_run(batch, first, 1 << 20, n);
        for k in 0..n {
            one.count_pass(&Pass::decode(batch, first + batch * k, 1 << 20));
        }
        proptest::prop_assert_eq!(run.beyond_grid_passes(), one.beyond_grid_passes());
    }

    /// Pass times round as `f64::round` does, halves included.
    #[test]
    fn pass_times_round_as_f64_round(
        whole in 0u64..(1 << 54),
        frac in proptest::sample::select(vec![0.0, 0.25, 0.5, 0.75, 0.49999999999999994]),
        any in proptest::num::f64::ANY,
    ) {
        for x in [whole as f64 + frac, any, whole as f64 * 0.5, -(whole as f64) - frac] {
            proptest::prop_assert_eq!(
                crate::round_half_away(x).to_bits(),
                x.round().to_bits(),
                "{}",
                x
            );
        }
    }
}

proptest::proptest! {
    /// The least along `y` is the least of `lookup`s at the range's ends and
    /// the axis points inside, bit for bit.
    #[test]
    fn the_least_along_y_is_the_least_lookup(
        clamp in proptest::bool::ANY,
        x in 0.0f64..400.0,
        lo in 0.0f64..300_000.0,
        width in 0.0f64..300_000.0,
    ) {
        let p = dipping_profile(DecodeAxis::TotalContext, clamp);
        let (t, beyond) = (p.decode_table(), p.beyond_grid());
        let hi = lo + width;
        let at = |y: f64| t.lookup(x, y, beyond).0;
        let want = t.ys().iter().filter(|&&y| lo < y && y < hi).fold(at(lo).min(at(hi)), |m, &y| m.min(at(y)));
        proptest::prop_assert_eq!(t.min_along_y(x, (lo, hi), beyond).to_bits(), want.to_bits());
        // Whatever segments the hints hold.
        for (hx, hy) in [(0, 0), (3, 4), (1, 2), (4, 0)] {
            let near = Near([AtomicUsize::new(hx), AtomicUsize::new(hy)]);
            let got = t.min_along_y_near(x, (lo, hi), beyond, &near);
            proptest::prop_assert_eq!(got.to_bits(), want.to_bits());
        }
    }
}
