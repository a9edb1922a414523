//! The radix cache's per-request work on a prefill worker: every handoff
//! prefill matches its prompt, locks the shared prefix, publishes its new
//! blocks, evicts the least recently used cache to make room, pins, and is
//! released (unlocked, cached). Prompts share a prefix in families so that
//! matching, locking and eviction of partly shared paths all happen, as on
//! a conversation trace. Reports requests per second and pages evicted.
//!
//! Run: `cargo bench -p handoff-sched-sglang --bench prefill_churn`

use handoff_core::{
    Generation, HandoffIdGen, Instant, Request, RequestId, SchedulerCommand, SchedulerCore,
    StepOutput, WorkerId,
};
use handoff_sched_sglang::{SglangConfig, SglangCore};
use std::time::Instant as WallClock;

/// Prompt tokens: 96 event blocks of 64 tokens, hashed in 512-token chunks.
const PROMPT: u32 = 6144;

fn run(page: u32, requests: u64) {
    let cfg = SglangConfig {
        // Room for about 40 prompts: the cache turns over every few dozen.
        total_pages: 40 * u64::from(PROMPT) / u64::from(page),
        ..SglangConfig::with_page_size(page)
    };
    let mut core = SglangCore::with_config(cfg).expect("valid config");
    let mut ids = HandoffIdGen::new(WorkerId(0), Generation(0));
    let mut out = StepOutput::default();
    let mut now = Instant::ZERO;
    let mut kv = Vec::new();
    let (mut removed, mut stored) = (0usize, 0usize);
    let start = WallClock::now();
    for i in 0..requests {
        // 16 families; a family's prompts share their first half.
        let family = (i * 7919) % 16;
        let request = Request {
            id: RequestId(i),
            prompt_tokens: PROMPT,
            max_output_tokens: 1,
            prefix_hashes: (0..12)
                .map(|c| {
                    if c < 6 {
                        family * 1000 + c
                    } else {
                        (1 << 40) | (i * 16 + c)
                    }
                })
                .collect(),
            hash_block_tokens: 512,
            session: None,
            arrival: now,
            lora: None,
        };
        let id = ids.next_id();
        core.apply(SchedulerCommand::SubmitHandoffPrefill { id, request }, now);
        // Chunked at 8192 tokens: one pass computes the prompt and pins it.
        while !core.is_empty() {
            core.step(now, now, &mut out);
            now = now + out.duration;
        }
        core.apply(SchedulerCommand::ReleaseSource { id }, now);
        core.drain_kv_events(&mut kv);
        for e in kv.drain(..) {
            match e.data {
                handoff_core::KvEventData::Stored { block_hashes, .. } => {
                    stored += block_hashes.len()
                }
                handoff_core::KvEventData::Removed { block_hashes } => {
                    removed += block_hashes.len()
                }
                _ => {}
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "sched-sglang prefill churn (page {page}, {requests} handoff prefills of {PROMPT} tokens): \
         {:.0} requests/s, {stored} blocks stored, {removed} evicted ({:.3} s)",
        requests as f64 / secs,
        secs,
    );
}

fn main() {
    for page in [1, 16] {
        run(page, 100_000);
    }
}
