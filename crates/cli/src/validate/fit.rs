//! A deterministic bounded search for `calibrate`: coordinate descent over
//! a few parameters, each tried at evenly spaced values of a window that
//! narrows around the best one found.
//!
//! The objective is a simulation (milliseconds per evaluation), noisy in
//! the sense that it is piecewise constant and not convex, so the search
//! uses no gradient: for each parameter in turn it evaluates `POINTS`
//! values across the current window, keeps the best (ties go to the
//! earlier value, the smaller one), and narrows that parameter's window to
//! `NARROW` of its width around it; `rounds` sweeps over all parameters.
//! The same inputs take the same path and give the same answer.

/// Values tried per parameter and sweep.
pub const POINTS: usize = 9;
/// What a window keeps of its width after a sweep.
pub const NARROW: f64 = 0.35;

/// One parameter: its name, its bounds and where the search starts.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    /// As the flags and the profile spell it.
    pub name: &'static str,
    /// Smallest value allowed.
    pub lo: f64,
    /// Largest value allowed.
    pub hi: f64,
    /// Start (and value when the search cannot improve on it).
    pub start: f64,
}

/// What the search found.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    /// The best values, in the parameters' order.
    pub values: Vec<f64>,
    /// The objective there.
    pub objective: f64,
    /// Objective evaluations made.
    pub evaluations: usize,
}

/// Minimises `objective` over `params` in `rounds` sweeps. An evaluation
/// that fails ends the search with its error.
pub fn minimise(
    params: &[Param],
    rounds: usize,
    mut objective: impl FnMut(&[f64]) -> Result<f64, String>,
) -> Result<Found, String> {
    let mut values: Vec<f64> = params.iter().map(|p| p.start.clamp(p.lo, p.hi)).collect();
    let mut windows: Vec<(f64, f64)> = params.iter().map(|p| (p.lo, p.hi)).collect();
    let mut best = objective(&values)?;
    let mut evaluations = 1;
    for _ in 0..rounds {
        for (i, p) in params.iter().enumerate() {
            let (lo, hi) = windows[i];
            for k in 0..POINTS {
                let v = lo + (hi - lo) * k as f64 / (POINTS - 1) as f64;
                if v == values[i] {
                    continue;
                }
                let mut trial = values.clone();
                trial[i] = v;
                let f = objective(&trial)?;
                evaluations += 1;
                if f < best {
                    best = f;
                    values = trial;
                }
            }
            let half = (hi - lo) * NARROW / 2.0;
            let c = values[i];
            windows[i] = ((c - half).max(p.lo), (c + half).min(p.hi));
        }
    }
    Ok(Found {
        values,
        objective: best,
        evaluations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(name: &'static str, lo: f64, hi: f64) -> Param {
        Param {
            name,
            lo,
            hi,
            start: lo,
        }
    }

    #[test]
    fn finds_the_minimum_of_a_bowl_within_its_bounds() {
        let f = minimise(&[p("a", 0.0, 10.0), p("b", 0.0, 1.0)], 5, |v| {
            Ok((v[0] - 4.2).powi(2) + 10.0 * (v[1] - 0.3).powi(2))
        })
        .unwrap();
        assert!((f.values[0] - 4.2).abs() < 0.05, "{f:?}");
        assert!((f.values[1] - 0.3).abs() < 0.01, "{f:?}");
    }

    #[test]
    fn stays_in_bounds_and_is_deterministic() {
        let run = || minimise(&[p("a", 1.0, 2.0)], 3, |v| Ok(-v[0])).unwrap();
        let (x, y) = (run(), run());
        assert_eq!(x, y);
        assert_eq!(x.values, vec![2.0]);
    }

    #[test]
    fn a_failed_evaluation_ends_the_search() {
        let mut n = 0;
        let r = minimise(&[p("a", 0.0, 1.0)], 2, |_| {
            n += 1;
            if n == 3 {
                Err("boom".into())
            } else {
                Ok(1.0)
            }
        });
        assert_eq!(r, Err("boom".to_string()));
    }

    #[test]
    fn a_flat_objective_keeps_the_start() {
        let f = minimise(
            &[Param {
                name: "a",
                lo: 0.0,
                hi: 1.0,
                start: 0.5,
            }],
            2,
            |_| Ok(3.0),
        )
        .unwrap();
        assert_eq!(f.values, vec![0.5]);
    }
}
