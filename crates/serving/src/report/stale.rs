//! Reads of released source KV: what upstream vLLM cannot see and the mock
//! reports.
//!
//! A source-first destination whose read ended after its source's lease
//! ran out (or the source was cancelled) read freed blocks; vLLM's decode
//! worker keeps what it read and the request succeeds
//! (`nixl/base_worker.py`: the prefill worker only logs "Potentially
//! invalid KV blocks for unrecognized request" when the read's notice
//! comes). The mock counts such reads and splits them by whether the
//! source's worker had already given one of the blocks to another request
//! before the read ended (certainly corrupt) or not (possibly intact).

use serde::Serialize;

/// Stale reads over the run (omitted from the report when there were none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StaleReads {
    /// Destinations that activated from a read of released KV.
    pub reads: u64,
    /// Of those, reads that ended after a released block was reused.
    pub reused: u64,
    /// Of those, reads whose released blocks were all still unused.
    pub not_reused: u64,
}

impl StaleReads {
    /// Whether no read was stale.
    pub fn none(&self) -> bool {
        self.reads == 0
    }

    /// Counts one stale read.
    pub(super) fn add(&mut self, reused: bool) {
        self.reads += 1;
        if reused {
            self.reused += 1;
        } else {
            self.not_reused += 1;
        }
    }
}

/// A request's stale read, in its per-request record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StaleKv {
    /// A released block had been reused before the read ended.
    Reused,
    /// The released blocks were still unused when the read ended.
    NotReused,
}

impl StaleKv {
    /// The kind of a read, by whether a block was reused.
    pub fn of(reused: bool) -> Self {
        if reused {
            StaleKv::Reused
        } else {
            StaleKv::NotReused
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_split_by_reuse() {
        let mut s = StaleReads::default();
        assert!(s.none());
        s.add(true);
        s.add(false);
        s.add(false);
        assert_eq!(
            s,
            StaleReads {
                reads: 3,
                reused: 1,
                not_reused: 2
            }
        );
        assert_eq!(
            serde_json::to_string(&StaleKv::of(false)).unwrap(),
            "\"not-reused\""
        );
    }
}
