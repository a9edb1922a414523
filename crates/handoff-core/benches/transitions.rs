//! Role-transition throughput and allocation count: drives a source and a
//! destination role through a full source-first handoff many times and
//! reports transitions per second and heap allocations per transition.
//! Run: `cargo bench -p handoff-core --bench transitions`.

use handoff_core::{
    DestinationEvent, DestinationHandoff, Duration, HandoffId, HandoffPolicy, Instant,
    ReservationSummary, SourceEvent, SourceHandoff, SourceLease, SourceLeaseId, SourceReady,
    WorkerId,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn one_handoff(i: u64) -> u64 {
    let id = HandoffId(u128::from(i));
    let t = Instant(i);
    let ttl = Duration::from_secs(300);
    let mut s = SourceHandoff::new(id, HandoffPolicy::SourceFirst, ttl);
    let mut d = DestinationHandoff::new(id, HandoffPolicy::SourceFirst, ttl);
    let lease = SourceLease {
        id: SourceLeaseId(i),
        blocks: 8,
        tokens: 128,
        deadline: Instant(i + 1000),
    };
    let summary = ReservationSummary {
        physical_blocks: 8,
        transfer_tokens: 128,
        ..Default::default()
    };
    let ready = Some(SourceReady {
        blocks: 8,
        tokens: 128,
    });
    let mut n = 0u64;
    for ev in [SourceEvent::Start, SourceEvent::PrefillPinned { lease }] {
        n += u64::from(s.handle(ev, t).is_ok());
    }
    for ev in [
        DestinationEvent::Routed {
            source: WorkerId(0),
            ready,
        },
        DestinationEvent::Reserved { summary },
        DestinationEvent::ReceiveCompleted,
    ] {
        n += u64::from(d.handle(ev, t).is_ok());
    }
    for ev in [
        SourceEvent::DestinationReserved { summary },
        SourceEvent::ReaderCompleted,
    ] {
        n += u64::from(s.handle(ev, t).is_ok());
    }
    n += u64::from(d.handle(DestinationEvent::Finished, t).is_ok());
    black_box((s, d));
    n
}

fn main() {
    let rounds: u64 = 2_000_000;
    let mut medians = Vec::new();
    let mut alloc_per = 0.0;
    for _ in 0..5 {
        let a0 = ALLOCS.load(Ordering::Relaxed);
        let start = std::time::Instant::now();
        let mut transitions = 0u64;
        for i in 0..rounds {
            transitions += one_handoff(black_box(i));
        }
        let secs = start.elapsed().as_secs_f64();
        let allocs = ALLOCS.load(Ordering::Relaxed) - a0;
        alloc_per = allocs as f64 / transitions as f64;
        medians.push(transitions as f64 / secs);
    }
    medians.sort_by(|a, b| a.total_cmp(b));
    println!(
        "handoff-core role transitions: {:.1} M/s (median of 5), {:.3} allocs/transition",
        medians[2] / 1e6,
        alloc_per
    );
}
