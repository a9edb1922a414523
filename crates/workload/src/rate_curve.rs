//! Time-varying arrival rates for the synthetic generator (`--rate-curve`)
//! and the non-homogeneous Poisson process that follows them.
//!
//! Text forms (times in seconds, or with a `ms`/`s`/`m`/`h` suffix; rates
//! in requests/s):
//!
//! - `step:T=R,T=R,...`: rate `R` from time `T` on, times strictly
//!   increasing; before the first `T` the rate is 0.
//! - `ramp:R0..R1/T`: linear from `R0` at 0 to `R1` at `T`, then `R1`.
//! - `sine:MEAN,AMP,PERIOD`: `MEAN + AMP·sin(2πt/PERIOD)`, `AMP <= MEAN`.
//! - `bursts:BASE,PEAK,EVERY,LEN`: `PEAK` during the first `LEN` of every
//!   `EVERY`, `BASE` otherwise.
//!
//! Arrivals come by time rescaling: with `Λ(t) = ∫₀ᵗ λ`, the k-th arrival
//! is at `Λ⁻¹(E₁ + … + E_k)` for unit exponentials `E_i` (Çinlar's
//! theorem), so one exponential draw per arrival whatever the curve, and a
//! seed gives the same arrivals on every machine. `Λ` has a closed form for
//! every curve; its inverse is found by bisection in a bounded number of
//! steps. Every curve's rate stays positive on average from some time on
//! (checked when parsed), so `Λ` is unbounded and every arrival exists.

use std::fmt;

/// Largest rate a curve may name, in requests/s.
pub const MAX_RATE: f64 = 1e6;
/// Largest time a curve may name, in seconds (about 115 days).
pub const MAX_TIME_SECS: f64 = 1e7;
/// Most points a `step:` curve may list.
pub const MAX_STEPS: usize = 1024;
/// Longest spec accepted, in bytes.
pub const MAX_SPEC_BYTES: usize = 16 * 1024;

/// A rate over model time, in requests/s.
#[derive(Clone, Debug, PartialEq)]
pub enum RateCurve {
    /// Piecewise constant: `(from_secs, rate)`, times strictly increasing;
    /// 0 before the first.
    Step(Vec<(f64, f64)>),
    /// Linear from `from` to `to` over `over_secs`, then `to`.
    Ramp {
        /// Rate at 0.
        from: f64,
        /// Rate at `over_secs` and after.
        to: f64,
        /// Length of the ramp.
        over_secs: f64,
    },
    /// `mean + amp·sin(2πt/period_secs)`.
    Sine {
        /// Mean rate.
        mean: f64,
        /// Amplitude, at most `mean`.
        amp: f64,
        /// Period.
        period_secs: f64,
    },
    /// `peak` during the first `len_secs` of every `every_secs`, else `base`.
    Bursts {
        /// Rate between bursts.
        base: f64,
        /// Rate within a burst.
        peak: f64,
        /// Period of the bursts.
        every_secs: f64,
        /// Length of one burst, at most `every_secs`.
        len_secs: f64,
    },
}

/// What is wrong with a rate curve's text.
#[derive(Clone, Debug, PartialEq)]
pub enum RateCurveProblem {
    /// Longer than [`MAX_SPEC_BYTES`].
    TooLong,
    /// No `KIND:` prefix, or an unknown kind.
    UnknownKind,
    /// A number that does not parse.
    BadNumber,
    /// A time with an unknown unit suffix.
    BadUnit,
    /// A rate outside `[0, MAX_RATE]`.
    RateOutOfRange,
    /// A time outside `[0, MAX_TIME_SECS]` (or not positive where a length
    /// is meant).
    TimeOutOfRange,
    /// Fields missing or extra for the kind.
    Arity {
        /// Fields the kind takes.
        expected: usize,
        /// Fields found.
        found: usize,
    },
    /// A `step:` item without `=`.
    MissingEquals,
    /// A `ramp:` without `..` or `/`.
    RampForm,
    /// `step:` times not strictly increasing.
    NotIncreasing,
    /// More than [`MAX_STEPS`] steps.
    TooManySteps,
    /// `sine:` amplitude above its mean (the rate would go negative).
    AmplitudeAboveMean,
    /// `bursts:` length above its period.
    BurstLongerThanPeriod,
    /// The rate is 0 from some time on, so the workload could never end.
    EndsAtZero,
}

/// A located error in a rate curve's text.
#[derive(Clone, Debug, PartialEq)]
pub struct RateCurveError {
    /// Byte offset of the offending field in the spec.
    pub offset: usize,
    /// What is wrong.
    pub problem: RateCurveProblem,
}

impl fmt::Display for RateCurveProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use RateCurveProblem as P;
        match self {
            P::TooLong => write!(f, "longer than {MAX_SPEC_BYTES} bytes"),
            P::UnknownKind => write!(
                f,
                "expected step:T=R,..., ramp:R0..R1/T, sine:MEAN,AMP,PERIOD or bursts:BASE,PEAK,EVERY,LEN"
            ),
            P::BadNumber => write!(f, "not a number"),
            P::BadUnit => write!(f, "unknown time unit (ms, s, m, h)"),
            P::RateOutOfRange => write!(f, "rate must be within 0..={MAX_RATE} per s"),
            P::TimeOutOfRange => write!(f, "time must be within 0..={MAX_TIME_SECS} s"),
            P::Arity { expected, found } => {
                write!(f, "expected {expected} fields, found {found}")
            }
            P::MissingEquals => write!(f, "a step is T=R"),
            P::RampForm => write!(f, "a ramp is R0..R1/T"),
            P::NotIncreasing => write!(f, "step times must increase"),
            P::TooManySteps => write!(f, "more than {MAX_STEPS} steps"),
            P::AmplitudeAboveMean => write!(f, "amplitude above the mean"),
            P::BurstLongerThanPeriod => write!(f, "burst longer than its period"),
            P::EndsAtZero => write!(f, "the rate ends at 0, so the workload would never end"),
        }
    }
}

impl fmt::Display for RateCurveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rate curve at byte {}: {}", self.offset, self.problem)
    }
}

impl std::error::Error for RateCurveError {}

fn err(offset: usize, problem: RateCurveProblem) -> RateCurveError {
    RateCurveError { offset, problem }
}

/// `(offset, text)` of each `sep`-separated field of `s`, which starts at
/// byte `base` of the spec.
fn fields(s: &str, base: usize, sep: char) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut at = base;
    for part in s.split(sep) {
        out.push((at, part));
        at += part.len() + sep.len_utf8();
    }
    out
}

fn number(at: usize, s: &str) -> Result<f64, RateCurveError> {
    let t = s.trim();
    match t.parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(x),
        _ => Err(err(at, RateCurveProblem::BadNumber)),
    }
}

fn rate(at: usize, s: &str) -> Result<f64, RateCurveError> {
    let r = number(at, s)?;
    if (0.0..=MAX_RATE).contains(&r) {
        Ok(r)
    } else {
        Err(err(at, RateCurveProblem::RateOutOfRange))
    }
}

/// A time in seconds; `positive` refuses 0 (a length or period).
fn time(at: usize, s: &str, positive: bool) -> Result<f64, RateCurveError> {
    let t = s.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale = match unit {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(err(at, RateCurveProblem::BadUnit)),
    };
    let secs = number(at, num)? * scale;
    if !(0.0..=MAX_TIME_SECS).contains(&secs) || (positive && secs <= 0.0) {
        return Err(err(at, RateCurveProblem::TimeOutOfRange));
    }
    Ok(secs)
}

fn arity(at: usize, f: &[(usize, &str)], expected: usize) -> Result<(), RateCurveError> {
    if f.len() == expected {
        Ok(())
    } else {
        Err(err(
            at,
            RateCurveProblem::Arity {
                expected,
                found: f.len(),
            },
        ))
    }
}

impl std::str::FromStr for RateCurve {
    type Err = RateCurveError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RateCurve::parse(s)
    }
}

impl RateCurve {
    /// Parses the text forms of the module doc.
    pub fn parse(spec: &str) -> Result<RateCurve, RateCurveError> {
        if spec.len() > MAX_SPEC_BYTES {
            return Err(err(MAX_SPEC_BYTES, RateCurveProblem::TooLong));
        }
        let Some((kind, body)) = spec.split_once(':') else {
            return Err(err(0, RateCurveProblem::UnknownKind));
        };
        let base = kind.len() + 1;
        match kind.trim() {
            "step" => Self::parse_step(body, base),
            "ramp" => Self::parse_ramp(body, base),
            "sine" => {
                let f = fields(body, base, ',');
                arity(base, &f, 3)?;
                let mean = rate(f[0].0, f[0].1)?;
                let amp = rate(f[1].0, f[1].1)?;
                let period_secs = time(f[2].0, f[2].1, true)?;
                if amp > mean {
                    return Err(err(f[1].0, RateCurveProblem::AmplitudeAboveMean));
                }
                if mean <= 0.0 {
                    return Err(err(f[0].0, RateCurveProblem::EndsAtZero));
                }
                Ok(RateCurve::Sine {
                    mean,
                    amp,
                    period_secs,
                })
            }
            "bursts" => {
                let f = fields(body, base, ',');
                arity(base, &f, 4)?;
                let base_rate = rate(f[0].0, f[0].1)?;
                let peak = rate(f[1].0, f[1].1)?;
                let every_secs = time(f[2].0, f[2].1, true)?;
                let len_secs = time(f[3].0, f[3].1, true)?;
                if len_secs > every_secs {
                    return Err(err(f[3].0, RateCurveProblem::BurstLongerThanPeriod));
                }
                if peak <= 0.0 && base_rate <= 0.0 {
                    return Err(err(f[1].0, RateCurveProblem::EndsAtZero));
                }
                Ok(RateCurve::Bursts {
                    base: base_rate,
                    peak,
                    every_secs,
                    len_secs,
                })
            }
            _ => Err(err(0, RateCurveProblem::UnknownKind)),
        }
    }

    fn parse_step(body: &str, base: usize) -> Result<RateCurve, RateCurveError> {
        let f = fields(body, base, ',');
        if f.len() > MAX_STEPS {
            return Err(err(f[MAX_STEPS].0, RateCurveProblem::TooManySteps));
        }
        let mut steps: Vec<(f64, f64)> = Vec::with_capacity(f.len());
        for (at, item) in f {
            let Some((t, r)) = item.split_once('=') else {
                return Err(err(at, RateCurveProblem::MissingEquals));
            };
            let t = time(at, t, false)?;
            let r = rate(at + item.find('=').unwrap_or(0) + 1, r)?;
            if steps.last().is_some_and(|&(prev, _)| t <= prev) {
                return Err(err(at, RateCurveProblem::NotIncreasing));
            }
            steps.push((t, r));
        }
        if steps.last().is_none_or(|&(_, r)| r <= 0.0) {
            return Err(err(base + body.len(), RateCurveProblem::EndsAtZero));
        }
        Ok(RateCurve::Step(steps))
    }

    fn parse_ramp(body: &str, base: usize) -> Result<RateCurve, RateCurveError> {
        let (rates, over) = body
            .split_once('/')
            .ok_or(err(base, RateCurveProblem::RampForm))?;
        let (r0, r1) = rates
            .split_once("..")
            .ok_or(err(base, RateCurveProblem::RampForm))?;
        let from = rate(base, r0)?;
        let to_at = base + r0.len() + 2;
        let to = rate(to_at, r1)?;
        let over_secs = time(base + rates.len() + 1, over, true)?;
        if to <= 0.0 {
            return Err(err(to_at, RateCurveProblem::EndsAtZero));
        }
        Ok(RateCurve::Ramp {
            from,
            to,
            over_secs,
        })
    }

    /// The rate at `t` seconds.
    pub fn rate_at(&self, t: f64) -> f64 {
        match *self {
            RateCurve::Step(ref steps) => {
                let i = steps.partition_point(|&(from, _)| from <= t);
                if i == 0 {
                    0.0
                } else {
                    steps[i - 1].1
                }
            }
            RateCurve::Ramp {
                from,
                to,
                over_secs,
            } => {
                if t >= over_secs {
                    to
                } else {
                    from + (to - from) * t / over_secs
                }
            }
            RateCurve::Sine {
                mean,
                amp,
                period_secs,
            } => mean + amp * (std::f64::consts::TAU * t / period_secs).sin(),
            RateCurve::Bursts {
                base,
                peak,
                every_secs,
                len_secs,
            } => {
                if t.rem_euclid(every_secs) < len_secs {
                    peak
                } else {
                    base
                }
            }
        }
    }

    /// `Λ(t)`: expected arrivals in `[0, t]`; non-decreasing in `t`.
    pub fn cumulative(&self, t: f64) -> f64 {
        let t = t.max(0.0);
        match *self {
            RateCurve::Step(ref steps) => {
                let mut total = 0.0;
                for (i, &(from, r)) in steps.iter().enumerate() {
                    if from >= t {
                        break;
                    }
                    let end = steps.get(i + 1).map_or(t, |&(next, _)| next.min(t));
                    total += r * (end - from);
                }
                total
            }
            RateCurve::Ramp {
                from,
                to,
                over_secs,
            } => {
                let within = t.min(over_secs);
                let ramp = from * within + (to - from) * within * within / (2.0 * over_secs);
                ramp + to * (t - within)
            }
            RateCurve::Sine {
                mean,
                amp,
                period_secs,
            } => {
                let w = std::f64::consts::TAU / period_secs;
                mean * t + amp / w * (1.0 - (w * t).cos())
            }
            RateCurve::Bursts {
                base,
                peak,
                every_secs,
                len_secs,
            } => {
                let whole = (t / every_secs).floor();
                let into = t - whole * every_secs;
                let burst = whole * len_secs + into.min(len_secs);
                base * t + (peak - base) * burst
            }
        }
    }

    /// The earliest `t >= after` with `Λ(t) >= target` (to within 1 ns),
    /// by doubling then bisection; bounded in steps whatever the inputs.
    pub fn invert(&self, after: f64, target: f64) -> f64 {
        let mut lo = after.max(0.0);
        if self.cumulative(lo) >= target {
            return lo;
        }
        let mut step = 1.0_f64;
        let mut hi = lo + step;
        // Λ is unbounded (parse refuses curves that end at 0), so this ends;
        // 200 doublings pass any finite horizon.
        for _ in 0..200 {
            if self.cumulative(hi) >= target {
                break;
            }
            lo = hi;
            step *= 2.0;
            hi = lo + step;
        }
        for _ in 0..200 {
            if hi - lo <= 1e-9 {
                break;
            }
            let mid = lo + (hi - lo) / 2.0;
            if self.cumulative(mid) >= target {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi
    }

    /// Short text for a run's note (the spec's kind and numbers).
    pub fn describe(&self) -> String {
        match self {
            RateCurve::Step(steps) => {
                let s: Vec<String> = steps.iter().map(|(t, r)| format!("{t}={r}")).collect();
                format!("step:{}", s.join(","))
            }
            RateCurve::Ramp {
                from,
                to,
                over_secs,
            } => format!("ramp:{from}..{to}/{over_secs}"),
            RateCurve::Sine {
                mean,
                amp,
                period_secs,
            } => format!("sine:{mean},{amp},{period_secs}"),
            RateCurve::Bursts {
                base,
                peak,
                every_secs,
                len_secs,
            } => format!("bursts:{base},{peak},{every_secs},{len_secs}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &str) -> RateCurve {
        RateCurve::parse(s).unwrap()
    }

    fn e(s: &str) -> RateCurveError {
        RateCurve::parse(s).unwrap_err()
    }

    #[test]
    fn parses_every_kind() {
        assert_eq!(
            p("step:0=8,60s=32,2m=8"),
            RateCurve::Step(vec![(0.0, 8.0), (60.0, 32.0), (120.0, 8.0)])
        );
        assert_eq!(
            p("ramp:0..40/5m"),
            RateCurve::Ramp {
                from: 0.0,
                to: 40.0,
                over_secs: 300.0
            }
        );
        assert_eq!(
            p("sine:16,8,1h"),
            RateCurve::Sine {
                mean: 16.0,
                amp: 8.0,
                period_secs: 3600.0
            }
        );
        assert_eq!(
            p("bursts:4,40,60,500ms"),
            RateCurve::Bursts {
                base: 4.0,
                peak: 40.0,
                every_secs: 60.0,
                len_secs: 0.5
            }
        );
    }

    #[test]
    fn errors_are_located_and_typed() {
        use RateCurveProblem as P;
        assert_eq!(e("wave:1"), err(0, P::UnknownKind));
        assert_eq!(e("step:0=8,30=x"), err(12, P::BadNumber));
        assert_eq!(e("step:0=8,30"), err(9, P::MissingEquals));
        assert_eq!(e("step:10=8,5=4"), err(10, P::NotIncreasing));
        assert_eq!(e("step:0=8,30=0"), err(13, P::EndsAtZero));
        assert_eq!(e("step:0=8,30d=1"), err(9, P::BadUnit));
        assert_eq!(e("step:0=2e6"), err(7, P::RateOutOfRange));
        assert_eq!(e("sine:4,8,60"), err(7, P::AmplitudeAboveMean));
        assert_eq!(
            e("sine:4,2"),
            err(
                5,
                P::Arity {
                    expected: 3,
                    found: 2
                }
            )
        );
        assert_eq!(e("sine:4,2,0"), err(9, P::TimeOutOfRange));
        assert_eq!(e("ramp:4/60"), err(5, P::RampForm));
        assert_eq!(e("ramp:4..0/60"), err(8, P::EndsAtZero));
        assert_eq!(e("bursts:1,9,10,20"), err(14, P::BurstLongerThanPeriod));
        let many = format!("step:{}", vec!["1=1"; MAX_STEPS + 1].join(","));
        assert_eq!(e(&many).problem, P::TooManySteps);
        assert_eq!(e(&"x".repeat(MAX_SPEC_BYTES + 1)).problem, P::TooLong);
        assert_eq!(
            e("step:0=8,30=x").to_string(),
            "rate curve at byte 12: not a number"
        );
    }

    #[test]
    fn cumulative_matches_the_rate() {
        for c in [
            p("step:0=8,60=32,120=8"),
            p("step:5=3"),
            p("ramp:2..40/100"),
            p("sine:16,8,50"),
            p("bursts:4,40,10,2"),
        ] {
            // Λ(b) - Λ(a) against a midpoint sum of λ.
            let mut sum = 0.0;
            let dt = 0.001;
            for i in 0..200_000 {
                sum += c.rate_at((f64::from(i) + 0.5) * dt) * dt;
            }
            let exact = c.cumulative(200.0);
            assert!(
                (sum - exact).abs() < 1e-3 * exact.max(1.0),
                "{c:?}: {sum} vs {exact}"
            );
        }
    }

    #[test]
    fn invert_finds_the_crossing() {
        let c = p("step:10=4");
        assert!((c.invert(0.0, 8.0) - 12.0).abs() < 1e-6);
        let s = p("sine:16,8,50");
        let t = s.invert(3.0, 100.0);
        assert!((s.cumulative(t) - 100.0).abs() < 1e-3);
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in "\\PC{0,64}") {
            let _ = RateCurve::parse(&s);
        }

        #[test]
        fn parse_never_panics_on_near_forms(
            kind in prop::sample::select(vec!["step", "ramp", "sine", "bursts", ""]),
            body in "[0-9.,=:/a-z\\-e ]{0,40}",
        ) {
            if let Ok(c) = RateCurve::parse(&format!("{kind}:{body}")) {
                // Anything accepted is usable: Λ is finite and grows.
                let a = c.cumulative(1e3);
                prop_assert!(a.is_finite());
                let t = c.invert(0.0, a + 1.0);
                prop_assert!(t.is_finite() && t >= 1e3 - 1e-6);
            }
        }
    }
}
