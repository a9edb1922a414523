//! Steady-state decode throughput of the SGLang core: 256 running requests,
//! one pass per `step` call versus many, and heap allocations per pass
//! (counted by a wrapping global allocator; the target is zero).
//!
//! Run: `CARGO_TARGET_DIR=/work/target-sglang cargo bench -p handoff-sched-sglang --bench decode_step`

use handoff_core::{Instant, Request, RequestId, SchedulerCommand, SchedulerCore, StepOutput};
use handoff_sched_sglang::{SglangConfig, SglangCore};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant as WallClock;

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the
// wrapper only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const BATCH: u64 = 256;

/// A core with `BATCH` requests decoding, never finishing during the run.
fn steady_core(page: u32) -> (SglangCore, Instant, StepOutput) {
    let cfg = SglangConfig {
        total_pages: (1u64 << 40) / u64::from(page),
        max_running_requests: BATCH as u32,
        ..SglangConfig::with_page_size(page)
    };
    let mut core = SglangCore::with_config(cfg).expect("valid config");
    for i in 0..BATCH {
        let r = Request {
            id: RequestId(i),
            prompt_tokens: 1000,
            max_output_tokens: u32::MAX,
            prefix_hashes: vec![i, i + 1],
            hash_block_tokens: 512,
            session: None,
            arrival: Instant::ZERO,
            lora: None,
        };
        core.apply(SchedulerCommand::Submit(r), Instant::ZERO);
    }
    let mut out = StepOutput::default();
    let mut now = Instant::ZERO;
    // Prefill everything, then warm the buffers with a few decode passes.
    while core.capacity().running_requests < BATCH || core.capacity().waiting_requests > 0 {
        core.step(now, now, &mut out);
        now = now + out.duration;
    }
    for _ in 0..16 {
        core.step(now, now, &mut out);
        now = now + out.duration;
    }
    (core, now, out)
}

fn bench(page: u32, label: &str, calls: u64, horizon_ms: Option<u64>) {
    let (mut core, mut now, mut out) = steady_core(page);
    let allocs_before = ALLOCS.load(Ordering::Relaxed);
    let start = WallClock::now();
    let mut passes = 0u64;
    for _ in 0..calls {
        let horizon = match horizon_ms {
            None => now,
            Some(ms) => Instant(now.0.saturating_add(ms * 1_000_000)),
        };
        core.step(now, horizon, &mut out);
        assert_eq!(out.tokens.len() as u64, BATCH, "the batch stays whole");
        passes += out.steps;
        now = now + out.duration;
    }
    let secs = start.elapsed().as_secs_f64();
    let allocs = ALLOCS.load(Ordering::Relaxed) - allocs_before;
    println!(
        "sched-sglang decode {label} (page {page}, batch {BATCH}): {:.0} steps/s, {:.2} allocs/step ({passes} passes in {calls} calls, {:.3} s)",
        passes as f64 / secs,
        allocs as f64 / passes as f64,
        secs,
    );
}

fn main() {
    for page in [1, 16] {
        bench(page, "single-pass", 200_000, None);
        bench(page, "multi-pass", 20_000, Some(1_000));
    }
}
