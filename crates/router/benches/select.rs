//! Selection + booking throughput and steady-state allocations.
//!
//! Simulates a prefill pool: each request is selected, its blocks are then
//! published by the chosen worker (Stored), and a bounded window of live
//! requests is completed and released; old blocks are evicted (Removed) so
//! the prefix indexes stay bounded. Only router calls are timed and counted.
//!
//! Run: `cargo bench -p handoff-router --bench select`

use handoff_core::{Instant, KvEvent, KvEventData, Request, RequestId, Rng, WorkerId};
use handoff_router::{PoolRole, Router, RouterConfig, RouterMode};
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const BS: u32 = 16;

fn make_requests(n: u64) -> Vec<Request> {
    let mut rng = Rng::seeded(1);
    let mut next_id = 1_000u64;
    (0..n)
        .map(|i| {
            let prompt = 2048 + rng.below(4096) as u32;
            let group = rng.below(40);
            let shared = 4u64;
            let blocks = u64::from(prompt).div_ceil(512);
            let mut prefix: Vec<u64> = (group * shared..group * shared + shared).collect();
            while (prefix.len() as u64) < blocks {
                prefix.push(next_id);
                next_id += 1;
            }
            Request {
                id: RequestId(i),
                prompt_tokens: prompt,
                max_output_tokens: 200,
                prefix_hashes: prefix,
                hash_block_tokens: 512,
                session: None,
                arrival: Instant::ZERO,
                lora: None,
            }
        })
        .collect()
}

fn bench(mode: RouterMode, requests: &[Request], workers: u32) {
    let mut r = Router::new(
        RouterConfig::new(PoolRole::Prefill, mode, BS).with_seed(7),
        (0..workers).map(WorkerId),
    );
    let mut live: VecDeque<RequestId> = VecDeque::new();
    let mut published: Vec<VecDeque<Vec<u64>>> = vec![VecDeque::new(); workers as usize];
    let mut hashes = Vec::new();
    let mut event_id = 0u64;
    let (mut router_nanos, mut calls) = (0u128, 0u64);
    let (mut event_nanos, mut events) = (0u128, 0u64);
    let warmup = requests.len() / 5;
    let mut steady_allocs = 0u64;
    let mut steady_selects = 0u64;

    for (n, req) in requests.iter().enumerate() {
        let a0 = ALLOCS.load(Ordering::Relaxed);
        let t = std::time::Instant::now();
        let s = r.select(req, Instant(n as u64));
        router_nanos += t.elapsed().as_nanos();
        calls += 1;
        let a1 = ALLOCS.load(Ordering::Relaxed);
        if n >= warmup {
            steady_allocs += a1 - a0;
            steady_selects += 1;
        }
        let Some(s) = s else { continue };
        // The chosen worker publishes the prompt's blocks (outside timing).
        req.block_hashes(BS, &mut hashes);
        let w = s.worker.0 as usize;
        event_id += 1;
        let stored = KvEvent {
            event_id,
            data: KvEventData::Stored {
                parent_hash: None,
                block_hashes: hashes.clone(),
            },
        };
        let t = std::time::Instant::now();
        r.on_kv_event(s.worker, &stored);
        event_nanos += t.elapsed().as_nanos();
        events += 1;
        published[w].push_back(hashes.clone());
        if published[w].len() > 64 {
            let old = published[w].pop_front().unwrap_or_default();
            event_id += 1;
            let removed = KvEvent {
                event_id,
                data: KvEventData::Removed { block_hashes: old },
            };
            let t = std::time::Instant::now();
            r.on_kv_event(s.worker, &removed);
            event_nanos += t.elapsed().as_nanos();
            events += 1;
        }
        live.push_back(req.id);
        if live.len() > 64 {
            let old = live.pop_front().unwrap_or(RequestId(0));
            let a0 = ALLOCS.load(Ordering::Relaxed);
            let t = std::time::Instant::now();
            r.prefill_completed(old);
            r.request_released(old);
            router_nanos += t.elapsed().as_nanos();
            calls += 2;
            if n >= warmup {
                steady_allocs += ALLOCS.load(Ordering::Relaxed) - a0;
            }
        }
    }
    let per_worker: Vec<u64> = r.loads().map(|(_, l)| l.selected).collect();
    let spread = match (per_worker.iter().min(), per_worker.iter().max()) {
        (Some(lo), Some(hi)) => format!("selected per worker {lo}..{hi}"),
        _ => String::new(),
    };
    println!(
        "{:>13} {workers:>3} workers: {} selects, {:.0} ns per router call, {:.0} ns per kv event (untimed in calls), {:.3} allocations per steady-state select+release, {spread}",
        mode.name(),
        requests.len(),
        router_nanos as f64 / calls as f64,
        event_nanos as f64 / events.max(1) as f64,
        steady_allocs as f64 / steady_selects.max(1) as f64,
    );
}

fn main() {
    let requests = make_requests(50_000);
    // 4 workers as in the README's deployments (scored worker by worker);
    // 16, the smallest pool that keeps the pool-wide index; 64 as one pool
    // of the 64P+64D cluster-scale replay.
    for workers in [4, 16, 64] {
        for mode in RouterMode::ALL {
            bench(mode, &requests, workers);
        }
    }
}
