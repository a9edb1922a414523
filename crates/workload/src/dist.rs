//! Token-length distributions for the synthetic generators.

use handoff_core::Rng;

/// A distribution of token counts, always sampled into `[1, u32::MAX]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LengthDist {
    /// Always this value.
    Fixed(u32),
    /// Uniform over `min..=max` (bounds swapped if reversed).
    Uniform {
        /// Smallest value.
        min: u32,
        /// Largest value.
        max: u32,
    },
    /// `median · exp(sigma · Z)`, Z standard normal (Box–Muller), rounded
    /// and clamped to `min..=max`. Mean is `median · exp(sigma² / 2)`
    /// before clamping. Request lengths in production traces are
    /// right-skewed, which a log-normal imitates with two knobs.
    LogNormal {
        /// The median before clamping.
        median: f64,
        /// Spread of `ln(value)`.
        sigma: f64,
        /// Lower clamp.
        min: u32,
        /// Upper clamp.
        max: u32,
    },
}

impl LengthDist {
    /// Draws one value. Consumes a fixed number of random words per variant
    /// (0, 1 or 2), so one knob's change never shifts other streams.
    pub fn sample(&self, rng: &mut Rng) -> u32 {
        let v = match *self {
            LengthDist::Fixed(v) => v,
            LengthDist::Uniform { min, max } => {
                let (lo, hi) = if min <= max { (min, max) } else { (max, min) };
                let span = u64::from(hi - lo) + 1;
                lo + rng.below(span) as u32
            }
            LengthDist::LogNormal {
                median,
                sigma,
                min,
                max,
            } => {
                let (lo, hi) = if min <= max { (min, max) } else { (max, min) };
                let z = standard_normal(rng);
                let x = median * (sigma * z).exp();
                if x.is_nan() {
                    lo
                } else {
                    // `as` saturates, so huge or negative draws land on a clamp.
                    (x.round() as u32).clamp(lo, hi)
                }
            }
        };
        v.max(1)
    }

    /// The distribution's mean before clamping (exact for `Fixed` and
    /// `Uniform`).
    pub fn nominal_mean(&self) -> f64 {
        match *self {
            LengthDist::Fixed(v) => f64::from(v.max(1)),
            LengthDist::Uniform { min, max } => (f64::from(min) + f64::from(max)) / 2.0,
            LengthDist::LogNormal { median, sigma, .. } => median * (sigma * sigma / 2.0).exp(),
        }
    }
}

/// One standard normal draw from two uniforms (Box–Muller, cosine branch).
pub(crate) fn standard_normal(rng: &mut Rng) -> f64 {
    let u1 = 1.0 - rng.next_f64(); // (0, 1]: ln never sees zero
    let u2 = rng.next_f64();
    (-2.0 * u1.ln()).sqrt() * (core::f64::consts::TAU * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_of(d: LengthDist, n: usize) -> f64 {
        let mut rng = Rng::seeded(11);
        (0..n).map(|_| f64::from(d.sample(&mut rng))).sum::<f64>() / n as f64
    }

    #[test]
    fn samples_stay_in_range_and_hit_their_means() {
        let u = LengthDist::Uniform { min: 10, max: 20 };
        let mut rng = Rng::seeded(1);
        for _ in 0..1000 {
            assert!((10..=20).contains(&u.sample(&mut rng)));
        }
        assert!((mean_of(u, 20_000) - 15.0).abs() < 0.2);
        let ln = LengthDist::LogNormal {
            median: 4000.0,
            sigma: 0.4,
            min: 1,
            max: u32::MAX,
        };
        let m = mean_of(ln, 50_000);
        assert!((m / ln.nominal_mean() - 1.0).abs() < 0.02, "{m}");
        let clamped = LengthDist::LogNormal {
            median: 4000.0,
            sigma: 3.0,
            min: 100,
            max: 200,
        };
        for _ in 0..1000 {
            assert!((100..=200).contains(&clamped.sample(&mut rng)));
        }
    }

    #[test]
    fn degenerate_parameters_never_yield_zero() {
        let mut rng = Rng::seeded(3);
        assert_eq!(LengthDist::Fixed(0).sample(&mut rng), 1);
        assert!(LengthDist::Uniform { min: 9, max: 3 }.sample(&mut rng) >= 3);
        let nan = LengthDist::LogNormal {
            median: f64::NAN,
            sigma: 1.0,
            min: 0,
            max: 10,
        };
        assert_eq!(nan.sample(&mut rng), 1);
    }
}
