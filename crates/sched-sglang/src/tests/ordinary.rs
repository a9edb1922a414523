//! Ordinary requests: prefill, decode, caching, chunking, retraction.

use super::harness::{req, Harness};
use crate::SglangConfig;
use handoff_core::{CommandOutcome, RequestId, SchedulerCommand, SchedulerCore};

fn cfg(page: u32, pages: u64) -> SglangConfig {
    SglangConfig {
        total_pages: pages,
        ..SglangConfig::with_page_size(page)
    }
}

#[test]
fn prefill_emits_first_token_then_decodes_to_length() {
    for page in [1, 16, 64] {
        let mut h = Harness::new(cfg(page, 100_000 / u64::from(page)));
        h.submit(req(1, 300, 4, &[1, 2, 3, 4, 5]));
        assert!(!h.core.is_empty());
        assert_eq!(h.step(), 1);
        assert_eq!(h.out.prefill_tokens, 300);
        assert_eq!(h.out.tokens.len(), 1);
        assert!(h.out.tokens[0].first);
        assert_eq!(h.cap().running_requests, 1);
        // 300 tokens: four full 64-token blocks are cached and published.
        assert_eq!(h.stored_hashes().len(), 4);
        assert_eq!(h.cap().active_blocks, 300u64.div_ceil(u64::from(page)));
        h.run_idle(100);
        assert_eq!(h.tokens_of(1), 4);
        assert!(h.finished(1));
        let cap = h.cap();
        assert_eq!(cap.kv_used_blocks(), 0);
        assert_eq!(
            cap.cached_blocks,
            256 / u64::from(page),
            "prompt blocks stay cached"
        );
        h.assert_drained();
    }
}

#[test]
fn zero_output_is_one_token_and_finishes_in_the_prefill_pass() {
    let mut h = Harness::new(cfg(1, 10_000));
    h.submit(req(1, 100, 0, &[1, 2]));
    assert_eq!(h.step(), 1);
    assert_eq!(h.tokens_of(1), 1);
    assert!(h.finished(1));
    assert!(h.core.is_empty());
    h.assert_drained();
}

#[test]
fn prefix_cache_hit_skips_computation_but_computes_one_token() {
    let mut h = Harness::new(cfg(1, 10_000));
    h.submit(req(1, 256, 1, &[7, 8, 9, 10]));
    h.run_idle(10);
    let stored = h.stored_hashes().len();
    // Same prompt: at most (256 - 1) / 64 = 3 blocks may be reused.
    h.submit(req(2, 256, 1, &[7, 8, 9, 10]));
    h.step();
    assert_eq!(h.out.prefill_tokens, 64);
    assert_eq!(
        h.stored_hashes().len(),
        stored,
        "duplicate block is not republished"
    );
    // Longer prompt sharing the prefix: 4 cached blocks reused.
    h.submit(req(3, 400, 1, &[7, 8, 9, 10, 11, 12, 13]));
    h.step();
    assert_eq!(h.out.prefill_tokens, 400 - 256);
    h.assert_drained();
}

#[test]
fn chunked_prefill_splits_long_prompts_and_publishes_per_chunk() {
    let mut h = Harness::new(SglangConfig {
        total_pages: 100_000,
        chunked_prefill_size: 8192,
        ..SglangConfig::default()
    });
    let chunks: Vec<u64> = (0..400).collect();
    h.submit(req(1, 20_000, 2, &chunks));
    assert_eq!(h.step(), 1);
    assert_eq!(h.out.prefill_tokens, 8192);
    assert!(h.out.tokens.is_empty());
    assert_eq!(
        h.stored_hashes().len(),
        128,
        "first chunk's blocks are cached"
    );
    assert_eq!(h.cap().active_blocks, 8192);
    h.step();
    assert_eq!(h.out.prefill_tokens, 8192);
    h.step();
    assert_eq!(h.out.prefill_tokens, 20_000 - 16_384);
    assert!(h.out.tokens[0].first);
    h.run_idle(10);
    assert_eq!(h.tokens_of(1), 2);
    h.assert_drained();
}

#[test]
fn max_prefill_tokens_limits_a_pass_but_not_a_lone_request() {
    let mut h = Harness::new(SglangConfig {
        total_pages: 100_000,
        max_prefill_tokens: 1000,
        chunked_prefill_size: 0,
        ..SglangConfig::default()
    });
    h.submit(req(1, 1500, 1, &[1]));
    h.submit(req(2, 600, 1, &[2]));
    h.submit(req(3, 600, 1, &[3]));
    h.step();
    assert_eq!(
        h.out.prefill_tokens, 1500,
        "the first request is always taken"
    );
    h.step();
    assert_eq!(h.out.prefill_tokens, 600, "600 + 600 exceeds 1000");
    h.step();
    assert_eq!(h.out.prefill_tokens, 600);
    h.run_idle(10);
    h.assert_drained();
}

#[test]
fn new_token_ratio_gates_admission_and_sets_batch_full() {
    // 2000 tokens; a running request with 1000 new tokens to go reserves
    // 0.7 * 1000 of them.
    let mut h = Harness::new(SglangConfig {
        total_pages: 2000,
        ..SglangConfig::default()
    });
    h.submit(req(1, 500, 1000, &[1]));
    h.step();
    assert_eq!(h.cap().running_requests, 1);
    // 2000 - 500 - 0.7 * 999 = 800.7 tokens left: a 700 + 200 request is
    // refused, and admission backs off until the batch shrinks.
    h.submit(req(2, 700, 200, &[2]));
    h.step();
    assert_eq!(h.out.prefill_tokens, 0);
    assert!(h.core.batch_is_full);
    h.step();
    assert_eq!(h.out.prefill_tokens, 0, "no retry while batch_is_full");
    h.run_idle(5000);
    assert_eq!(h.tokens_of(2), 200);
    h.assert_drained();
}

#[test]
fn decode_out_of_pages_retracts_and_recomputes() {
    for page in [1u32, 16] {
        let mut h = Harness::new(SglangConfig {
            total_pages: 4096 / u64::from(page),
            // Admission then barely accounts for future decode tokens.
            max_new_tokens_clip: 10,
            init_new_token_ratio: 0.0,
            min_new_token_ratio: 0.0,
            new_token_ratio_decay: 0.0,
            ..SglangConfig::with_page_size(page)
        });
        for i in 0..6 {
            h.submit(req(i, 500, 400, &[100 + i]));
        }
        h.run_idle(100_000);
        let preempted: u32 = h.seen.values().map(|s| s.preempted).sum();
        assert!(
            preempted > 0,
            "page {page}: the pool is too small for all six"
        );
        for i in 0..6 {
            assert_eq!(h.tokens_of(i), 400, "page {page}: request {i}");
        }
        h.assert_drained();
    }
}

#[test]
fn retraction_picks_fewest_outputs_then_longest_prompt() {
    let mut h = Harness::new(SglangConfig {
        total_pages: 2500,
        max_new_tokens_clip: 100,
        init_new_token_ratio: 0.0,
        min_new_token_ratio: 0.0,
        new_token_ratio_decay: 0.0,
        ..SglangConfig::default()
    });
    h.submit(req(1, 1000, 1000, &[1]));
    for _ in 0..11 {
        h.step();
    }
    assert_eq!(h.tokens_of(1), 11);
    h.submit(req(2, 600, 1000, &[2]));
    h.submit(req(3, 600, 1000, &[3]));
    h.step();
    assert_eq!(h.out.prefill_tokens, 1200);
    let mut victim = None;
    for _ in 0..1000 {
        h.step();
        if let Some(&r) = h.out.preempted.first() {
            victim = Some(r);
            break;
        }
    }
    // 1 has the most output; 2 and 3 tie, and the later in batch order goes.
    assert_eq!(victim, Some(RequestId(3)));
    assert!(h.core.new_token_ratio() > 0.0, "ratio re-estimated");
    h.run_idle(100_000);
    for i in 1..=3 {
        assert_eq!(h.tokens_of(i), 1000);
    }
    h.assert_drained();
}

#[test]
fn oversize_requests_are_refused_as_unsupported() {
    let mut h = Harness::new(cfg(1, 1000));
    let out = h.apply(SchedulerCommand::Submit(req(1, 990, 20, &[1])));
    assert!(matches!(out, CommandOutcome::Unsupported(Some(r)) if r.id == RequestId(1)));
    assert!(h.core.is_drained());
}

#[test]
fn mixed_chunk_decodes_alongside_prefill() {
    let mut h = Harness::new(SglangConfig {
        total_pages: 100_000,
        enable_mixed_chunk: true,
        ..SglangConfig::default()
    });
    h.submit(req(1, 100, 10, &[1]));
    h.step();
    h.submit(req(2, 100, 10, &[2]));
    h.step();
    assert_eq!(h.out.prefill_tokens, 100);
    assert_eq!(
        h.out.tokens.len(),
        2,
        "request 1 decoded in the prefill pass"
    );
    h.run_idle(100);
    assert_eq!(h.tokens_of(1), 10);
    assert_eq!(h.tokens_of(2), 10);
    h.assert_drained();
}

#[test]
fn lru_eviction_makes_room_and_publishes_removed() {
    let mut h = Harness::new(cfg(1, 1000));
    h.submit(req(1, 640, 1, &(0..10).collect::<Vec<_>>()));
    h.run_idle(10);
    assert_eq!(h.cap().cached_blocks, 640);
    h.submit(req(2, 640, 1, &(100..110).collect::<Vec<_>>()));
    h.run_idle(10);
    let removed = h
        .events
        .iter()
        .any(|e| matches!(e.data, handoff_core::KvEventData::Removed { .. }));
    assert!(removed);
    assert!(h.cap().cached_blocks <= 1000);
    h.assert_drained();
}

#[test]
fn a_pass_admits_up_to_the_last_free_slot() {
    let mut h = Harness::new(SglangConfig {
        total_pages: 100_000,
        max_running_requests: 4,
        prealloc_slot_margin: 0,
        ..SglangConfig::default()
    });
    for i in 0..5 {
        h.submit(req(i, 100, 50, &[i]));
    }
    h.step();
    assert_eq!(h.out.prefill_tokens, 400);
    assert_eq!(h.cap().running_requests, 4);
    assert_eq!(h.cap().free_request_slots, 0);
    assert!(h.core.batch_is_full, "the fifth waits for a slot");
    h.run_idle(1000);
    assert_eq!(h.tokens_of(4), 50);
    h.assert_drained();
}

/// A worker with 10^11 tokens of KV at SGLang's default page of one token
/// serves a few requests: the pool is counts, so nothing is sized by it,
/// and every page the requests used is back once they finish.
#[test]
fn a_pool_of_10_to_the_11_tokens_serves_requests() {
    let mut h = Harness::new(cfg(1, 100_000_000_000));
    for id in 1..=4 {
        h.submit(req(id, 1000, 8, &[id % 2, 9]));
    }
    h.run_idle(200);
    for id in 1..=4 {
        assert!(h.finished(id), "request {id} finished");
    }
    let cap = h.cap();
    assert_eq!(cap.total_blocks, 100_000_000_000);
    assert_eq!(cap.kv_used_blocks(), 0);
    assert_eq!(h.core.radix.total_pages(), cap.cached_blocks);
    h.assert_drained();
}
