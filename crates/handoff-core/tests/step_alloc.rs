//! A decode step costs no allocation once its driver recycles the events it
//! consumed (`WorkerHost::recycle`): the `Step` and `Tokens` events take the
//! core's filled buffers and leave recycled ones in their place. A driver
//! that drops its events instead pays a copy per step, which this test also
//! shows, so it can tell the two apart.

use handoff_core::testing::FakeCore;
use handoff_core::{
    Backend, Generation, HandoffConfig, HandoffPolicy, HostInput, HostOutput, Instant, Request,
    RequestId, Worker, WorkerHost, WorkerId, WorkerRequest,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static CALLS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    let _ = CALLS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: forwards to `System` unchanged; the bookkeeping only touches a
// const-initialised thread-local cell and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: forwarded contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn allocations() -> u64 {
    CALLS.with(Cell::get)
}

/// Allocation calls made by 50 steady decode steps of a batch of 8, after
/// a warm-up, with the driver recycling consumed events or not.
fn steady_decode_allocations(recycle: bool) -> u64 {
    let core = FakeCore::new(Backend::Vllm, 4096, 16);
    let mut host = WorkerHost::new(Worker::new(
        WorkerId(0),
        Generation(0),
        HandoffPolicy::SourceFirst,
        HandoffConfig::default(),
        core,
    ));
    let mut out = Vec::new();
    let mut now = Instant::ZERO;
    for i in 0..8 {
        let request = Request {
            id: RequestId(i),
            prompt_tokens: 32,
            max_output_tokens: 1000,
            prefix_hashes: vec![],
            hash_block_tokens: 16,
            session: None,
            arrival: now,
            lora: None,
        };
        let input = HostInput::Request(WorkerRequest::Ordinary(request));
        host.deliver(input, now, &mut out);
    }
    let mut before = 0;
    for step in 0..60 {
        if step == 10 {
            before = allocations();
        }
        host.step(now, now, &mut out);
        if let Some(end) = host.status().step_end {
            now = end;
        }
        host.advance(now, &mut out);
        for o in out.drain(..) {
            if let HostOutput::Event(e) = o {
                if recycle {
                    host.recycle(e);
                }
            }
        }
    }
    allocations() - before
}

#[test]
fn a_recycling_driver_steps_without_allocating() {
    assert_eq!(steady_decode_allocations(true), 0);
    // Dropping the events costs the copy the recycling saves: one
    // allocation per step at least.
    assert!(steady_decode_allocations(false) >= 50);
}
