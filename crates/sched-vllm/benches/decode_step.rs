//! Steady-state decode throughput of `VllmCore::step`, and heap allocations
//! per pass (the target is zero).
//!
//! 256 sequences decode in a pool large enough that nobody is preempted.
//! "single-pass" calls `step(now, now, ..)`, one forward pass per call, the
//! way a live worker drives it. "multi-pass" calls `step(now, far, ..)`,
//! letting the core cover every pass until the next finish in one call, the
//! way replay drives it.
//!
//! Run: `CARGO_TARGET_DIR=/work/target-vllm cargo bench -p handoff-sched-vllm --bench decode_step`

use handoff_core::{Instant, Request, RequestId, SchedulerCommand, SchedulerCore, StepOutput};
use handoff_sched_vllm::{VllmConfig, VllmCore};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call forwards to the system allocator unchanged; the counter
// is a relaxed atomic and never affects the returned memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const SEQS: u64 = 256;
const PROMPT: u32 = 512;

fn allocs() -> u64 {
    ALLOCS.load(Ordering::Relaxed)
}

/// A core with `SEQS` requests of `max_out` tokens, stepped until every one
/// of them is decoding.
fn steady_core(max_out: u32) -> (VllmCore, Instant, StepOutput) {
    let per_seq = (u64::from(PROMPT) + u64::from(max_out)).div_ceil(16) + 1;
    let cfg = VllmConfig {
        num_blocks: SEQS * per_seq + 1024,
        ..VllmConfig::default()
    };
    let mut core = VllmCore::new(cfg);
    for i in 0..SEQS {
        let request = Request {
            id: RequestId(i),
            prompt_tokens: PROMPT,
            max_output_tokens: max_out,
            prefix_hashes: vec![i * 7919 + 1],
            hash_block_tokens: PROMPT,
            session: None,
            arrival: Instant::ZERO,
            lora: None,
        };
        core.apply(SchedulerCommand::Submit(request), Instant::ZERO);
    }
    let mut out = StepOutput::default();
    let mut now = Instant::ZERO;
    loop {
        core.step(now, now, &mut out);
        now = now + out.duration;
        if out.prefill_tokens == 0 && core.capacity().running_requests == SEQS {
            break;
        }
    }
    (core, now, out)
}

fn main() {
    // Single pass per call.
    let passes: u64 = 20_000;
    let (mut core, mut now, mut out) = steady_core(40_000);
    for _ in 0..200 {
        core.step(now, now, &mut out);
        now = now + out.duration;
    }
    let a0 = allocs();
    let t0 = std::time::Instant::now();
    let mut covered = 0;
    for _ in 0..passes {
        core.step(now, now, &mut out);
        now = now + out.duration;
        covered += out.steps;
    }
    let wall = t0.elapsed().as_secs_f64();
    let a = allocs() - a0;
    assert_eq!(covered, passes, "every call is one decode pass");
    println!(
        "sched-vllm decode single-pass: {:.0} steps/s, {:.2} allocs/step ({} seqs, {} passes, {:.3} s)",
        covered as f64 / wall,
        a as f64 / covered as f64,
        SEQS,
        covered,
        wall
    );

    // As many passes per call as stay stable.
    let (mut core, mut now, mut out) = steady_core(40_000);
    let a0 = allocs();
    let t0 = std::time::Instant::now();
    let mut covered = 0u64;
    let mut calls = 0u64;
    while !core.is_empty() {
        core.step(now, Instant::MAX, &mut out);
        now = now + out.duration;
        covered += out.steps;
        calls += 1;
    }
    let wall = t0.elapsed().as_secs_f64();
    let a = allocs() - a0;
    println!(
        "sched-vllm decode multi-pass: {:.0} steps/s, {:.4} allocs/step ({} seqs, {} passes in {} calls, {:.3} s)",
        covered as f64 / wall,
        a as f64 / covered.max(1) as f64,
        SEQS,
        covered,
        calls,
        wall
    );
}
