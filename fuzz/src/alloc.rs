//! A counting global allocator, so the harness can say how much memory one
//! decode call asked for.
//!
//! It wraps [`System`] and keeps three numbers: bytes live now, the highest
//! live count since the last [`measure`] began, and bytes requested since
//! then. A `realloc` is counted as if the old and the new block were both
//! live for a moment (which is what a moving reallocation costs), so the
//! peak is an upper bound on the real high-water mark, never an
//! underestimate.
//!
//! The counters are thread-local: a measurement counts what its own thread
//! allocated.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The allocator installed as `#[global_allocator]` in this binary.
pub struct Counting;

thread_local! {
    // Per thread, so that one thread's measurement is not disturbed by
    // another's allocations (the test harness runs tests in parallel).
    // Signed: a block freed on another thread than the one that
    // allocated it makes that thread's count go down, possibly below 0.
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
    static REQUESTED: Cell<usize> = const { Cell::new(0) };
}

fn grew(by: usize) {
    // `try_with`: during thread teardown the slots may be gone.
    let _ = LIVE.try_with(|live| {
        let now = live.get().wrapping_add(by as isize);
        live.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
        let _ = REQUESTED.try_with(|r| r.set(r.get().wrapping_add(by)));
    });
}

fn shrank(by: usize) {
    let _ = LIVE.try_with(|live| live.set(live.get().wrapping_sub(by as isize)));
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged; the bookkeeping touches only const-initialised thread-local
// cells (no lazy initialisation, no destructor) and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded contract.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Count the new block before the old one goes: the worst case of a
        // moving reallocation.
        grew(new_size);
        // SAFETY: forwarded contract.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if p.is_null() {
            shrank(new_size);
        } else {
            shrank(layout.size());
        }
        p
    }
}

/// What one measured call cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Highest live bytes during the call, above what was live when it
    /// started.
    pub peak: usize,
    /// Bytes requested during the call (sum of allocation sizes, including
    /// reallocation targets), whether or not they were freed again.
    pub requested: usize,
}

/// Runs `f` and reports how much it allocated on this thread. Not
/// reentrant.
pub fn measure<T>(f: impl FnOnce() -> T) -> (T, Usage) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let requested = REQUESTED.with(Cell::get);
    let out = f();
    let usage = Usage {
        peak: PEAK.with(Cell::get).saturating_sub(base).max(0) as usize,
        requested: REQUESTED.with(Cell::get).wrapping_sub(requested),
    };
    (out, usage)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_a_vector() {
        let (v, u) = measure(|| vec![0u8; 10_000]);
        assert!(u.peak >= 10_000, "{u:?}");
        assert!(u.requested >= 10_000);
        drop(v);
        let (_, u) = measure(|| {
            let a = vec![1u64; 1000];
            drop(a);
            let b = vec![1u64; 500];
            drop(b);
        });
        assert!(u.peak >= 8000 && u.peak < 12_000, "{u:?}");
        assert!(u.requested >= 12_000, "{u:?}");
    }
}
