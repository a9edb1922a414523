//! Edge coverage on the stable toolchain, when the build asks for it.
//!
//! `cargo fuzz` needs nightly only for its sanitizers; the coverage
//! instrumentation it relies on is LLVM's SanitizerCoverage pass, which
//! stable rustc runs when given
//! `-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=3
//! -Cllvm-args=-sanitizer-coverage-inline-8bit-counters` (see
//! `fuzz/coverage.sh`). The pass gives every instrumented edge a one-byte
//! counter in the `__sancov_cntrs` section and makes each module's
//! constructor call [`__sanitizer_cov_8bit_counters_init`] with the
//! section's bounds, before `main`. This module defines that callback (the
//! job libFuzzer's runtime does under `cargo fuzz`), so an instrumented build
//! of this binary sees its counters; an ordinary build never calls it and
//! [`Coverage::available`] is false.
//!
//! Between inputs the harness clears the counters, runs one input, and asks
//! [`Coverage::novel`] whether any edge reached a hit-count bucket (1, 2, 3,
//! 4–7, 8–15, 16–31, 32–127, 128+, as AFL buckets them) it had never reached
//! before. Such inputs join the corpus.

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering::Relaxed};

/// Counter regions handed to the callback. Every constructor of one linked
/// section reports the same bounds, so a few slots are plenty.
const REGIONS: usize = 16;

static STARTS: [AtomicPtr<u8>; REGIONS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; REGIONS];
static LENS: [AtomicUsize; REGIONS] = [const { AtomicUsize::new(0) }; REGIONS];
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// SanitizerCoverage's registration hook for inline 8-bit counters. Called
/// by instrumented modules' constructors before `main`; must not allocate.
///
/// # Safety
/// `start..end` must be a writable counter region that lives for the whole
/// program, as the instrumentation guarantees.
#[no_mangle]
pub unsafe extern "C" fn __sanitizer_cov_8bit_counters_init(start: *mut u8, end: *mut u8) {
    if start.is_null() || end <= start {
        return;
    }
    let n = COUNT.load(Relaxed);
    if (0..n).any(|i| STARTS[i].load(Relaxed) == start) || n == REGIONS {
        return;
    }
    STARTS[n].store(start, Relaxed);
    LENS[n].store(end as usize - start as usize, Relaxed);
    COUNT.store(n + 1, Relaxed);
}

/// The counters of an instrumented build, and which buckets were ever hit.
pub struct Coverage {
    regions: Vec<(*mut u8, usize)>,
    /// Per counter, the bucket bits ever seen.
    seen: Vec<u8>,
    /// Edges hit at least once over the run.
    edges: usize,
}

fn bucket(hits: u8) -> u8 {
    match hits {
        0 => 0,
        1 => 1,
        2 => 2,
        3 => 4,
        4..=7 => 8,
        8..=15 => 16,
        16..=31 => 32,
        32..=127 => 64,
        128..=255 => 128,
    }
}

impl Coverage {
    /// The regions the instrumentation registered (none in an ordinary
    /// build).
    pub fn new() -> Self {
        let n = COUNT.load(Relaxed);
        let regions: Vec<(*mut u8, usize)> = (0..n)
            .map(|i| (STARTS[i].load(Relaxed), LENS[i].load(Relaxed)))
            .collect();
        let total = regions.iter().map(|r| r.1).sum();
        Coverage {
            regions,
            seen: vec![0; total],
            edges: 0,
        }
    }

    /// Whether this build is instrumented.
    pub fn available(&self) -> bool {
        !self.seen.is_empty()
    }

    /// Instrumented edges in the binary.
    pub fn total(&self) -> usize {
        self.seen.len()
    }

    /// Edges hit at least once so far.
    pub fn edges(&self) -> usize {
        self.edges
    }

    /// Zeroes the counters before an input runs.
    pub fn clear(&mut self) {
        for &(p, len) in &self.regions {
            // SAFETY: the instrumentation registered `p..p+len` as a live,
            // writable counter region for the program's lifetime.
            unsafe { std::ptr::write_bytes(p, 0, len) };
        }
    }

    /// Folds the counters of the input just run into the seen buckets;
    /// true if any edge reached a bucket it never reached before.
    pub fn novel(&mut self) -> bool {
        let mut new = false;
        let mut k = 0;
        for &(p, len) in &self.regions {
            // SAFETY: as in `clear`; the harness is single-threaded, so no
            // one writes the counters while this reads them.
            let counters = unsafe { std::slice::from_raw_parts(p, len) };
            for &c in counters {
                if c != 0 {
                    let b = bucket(c);
                    let seen = &mut self.seen[k];
                    if *seen & b == 0 {
                        if *seen == 0 {
                            self.edges += 1;
                        }
                        *seen |= b;
                        new = true;
                    }
                }
                k += 1;
            }
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_follow_afl() {
        let got: Vec<u8> = [0u8, 1, 2, 3, 4, 7, 8, 16, 31, 32, 127, 128, 255]
            .iter()
            .map(|&h| bucket(h))
            .collect();
        assert_eq!(got, [0, 1, 2, 4, 8, 8, 16, 32, 32, 64, 64, 128, 128]);
    }

    #[test]
    fn an_ordinary_build_has_no_counters() {
        // `cargo test` builds without the sancov pass, so nothing registers
        // and nothing can be novel.
        let mut c = Coverage::new();
        if !c.available() {
            c.clear();
            assert!(!c.novel());
            assert_eq!((c.edges(), c.total()), (0, 0));
        }
    }
}
