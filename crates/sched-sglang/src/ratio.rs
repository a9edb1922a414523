//! The new-token ratio: SGLang's estimate of how much of each running
//! request's remaining `max_new_tokens` will really be generated.
//!
//! After SGLang `srt/managers/scheduler.py` (`init_new_token_ratio`,
//! `min_new_token_ratio`, `new_token_ratio_decay`, reset on idle) and
//! `NewTokenRatioTracker.estimate_new_token_ratio_after_retract`.
//!
//! SGLang subtracts the decay once per decode pass. The value is kept here as
//! "a base and a number of decays since", evaluated in closed form, so that
//! advancing k passes in one call gives bit-for-bit the same ratio as k
//! single passes (repeated floating-point subtraction would not).

/// The ratio's state; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct NewTokenRatio {
    init: f64,
    min: f64,
    decay: f64,
    base: f64,
    decays: u64,
}

impl NewTokenRatio {
    /// Starts at `init`.
    pub(crate) fn new(init: f64, min: f64, decay: f64) -> Self {
        NewTokenRatio {
            init,
            min,
            decay,
            base: init,
            decays: 0,
        }
    }

    /// The ratio now. A value set below the floor (after a retraction) holds
    /// until the next decay lifts it to the floor, as in SGLang.
    pub(crate) fn current(&self) -> f64 {
        if self.decays == 0 {
            self.base
        } else {
            (self.base - self.decays as f64 * self.decay).max(self.min)
        }
    }

    /// `n` decode passes without retraction.
    pub(crate) fn decay(&mut self, n: u64) {
        self.decays = self.decays.saturating_add(n);
    }

    /// A retraction's fresh estimate.
    pub(crate) fn set(&mut self, ratio: f64) {
        self.base = ratio;
        self.decays = 0;
    }

    /// The scheduler went idle.
    pub(crate) fn reset(&mut self) {
        self.set(self.init);
    }
}

/// `estimate_new_token_ratio_after_retract`: (tokens decoded so far plus
/// `retract_decode_steps` per survivor) / (their `max_new_tokens` + 1),
/// capped at 1.
pub(crate) fn ratio_after_retract(
    decoded: u64,
    survivors: u64,
    max_new_tokens: u64,
    retract_decode_steps: u64,
) -> f64 {
    let num = decoded as f64 + (retract_decode_steps * survivors) as f64;
    (num / (max_new_tokens as f64 + 1.0)).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decays_to_the_floor_and_resets() {
        let mut r = NewTokenRatio::new(0.7, 0.098, (0.7 - 0.098) / 600.0);
        assert_eq!(r.current(), 0.7);
        r.decay(300);
        assert!((r.current() - (0.7 + 0.098) / 2.0).abs() < 1e-9);
        r.decay(10_000);
        assert_eq!(r.current(), 0.098);
        r.set(0.01);
        assert_eq!(r.current(), 0.01);
        r.decay(1);
        assert_eq!(r.current(), 0.098);
        r.reset();
        assert_eq!(r.current(), 0.7);
    }

    #[test]
    fn closed_form_matches_itself_in_pieces() {
        let mut a = NewTokenRatio::new(0.7, 0.098, 0.001);
        let mut b = a;
        for _ in 0..37 {
            a.decay(1);
        }
        b.decay(37);
        assert_eq!(a.current().to_bits(), b.current().to_bits());
    }

    #[test]
    fn retract_estimate_is_capped() {
        assert_eq!(ratio_after_retract(0, 0, 0, 20), 0.0);
        assert_eq!(ratio_after_retract(1000, 10, 100, 20), 1.0);
        let r = ratio_after_retract(50, 2, 999, 20);
        assert!((r - 90.0 / 1000.0).abs() < 1e-12);
    }
}
