//! [`QuietPromises`]: a core's [`QuietFloor`] answers held to the steps that
//! follow them, for the cores' property tests of
//! [`crate::SchedulerCore::quiet_floor`].

use crate::{Instant, QuietFloor};

/// The promises made since the last input; see the module docs.
#[derive(Debug, Default)]
pub struct QuietPromises {
    made: Vec<(Instant, QuietFloor)>,
    checked: u64,
}

impl QuietPromises {
    /// A step released its outputs at `end`: `quiet` if they were only its
    /// passes' shape and tokens ([`crate::StepOutput::is_quiet`]), `kv` if
    /// KV events came with them. Panics if that breaks a promise: released
    /// before `next`, more than tokens before `pass`, more than tokens and
    /// KV events before `kv`.
    pub fn released(&mut self, end: Instant, quiet: bool, kv: bool) {
        for &(from, f) in &self.made {
            self.checked += 1;
            assert!(
                end >= from + f.next,
                "released at {end:?}: {from:?} + {f:?}"
            );
            assert!(
                end >= from + f.pass || (quiet && !kv),
                "more than tokens at {end:?}: {from:?} + {f:?}"
            );
            assert!(
                end >= from + f.kv || quiet,
                "more than tokens and KV events at {end:?}: {from:?} + {f:?}"
            );
        }
    }

    /// The core answered `floor` for the step that ends at `end`; promises
    /// whose every bound has passed are dropped.
    pub fn promised(&mut self, end: Instant, floor: QuietFloor) {
        self.made.retain(|&(from, f)| from + f.kv > end);
        self.made.push((end, floor));
    }

    /// An input reached the core: every promise is void.
    pub fn input(&mut self) {
        self.made.clear();
    }

    /// (Promise, release) pairs checked so far.
    pub fn checked(&self) -> u64 {
        self.checked
    }
}
