//! vLLM caches generated blocks too: `BlockPool.cache_full_blocks`
//! (`vllm/v1/core/block_pool.py`, called from
//! `KVCacheManager.allocate_slots`) hashes every full block of a request's
//! token sequence, output tokens included, and emits `BlockStored` for it,
//! so a preempted request re-admitted later hits what it had generated and
//! recomputes at most its last, partial block.

use super::*;
use crate::core::generated_hash;
use handoff_core::SchedulerCommand as C;

/// Request 1 (prompt 40) and request 2 (prompt 48) decode in an 11-block
/// pool. It fills when request 2 takes its sixth block (pass 33); request
/// 1's next block boundary (pass 41) preempts request 2 with five full
/// blocks and a partial sixth. Request 1 finishes at pass 49, before it
/// needs another block, so request 2's cached blocks survive until it is
/// re-admitted.
#[test]
fn a_preempted_request_recomputes_at_most_one_block() {
    let mut h = Harness::fixed(cfg(11));
    h.apply(C::Submit(req(1, 40, 50, &content(1, 2))));
    h.apply(C::Submit(req(2, 48, 100, &content(2, 3))));
    while h.preempted.is_empty() {
        assert!(h.step() > 0);
    }
    assert_eq!(h.preempted, vec![RequestId(2)]);
    let generated = h.tokens[&RequestId(2)];
    assert_eq!(generated, 41);
    // Its five full blocks (three of prompt, two filled by decoding) stayed
    // cached; only the partial sixth was unhashed.
    assert_eq!(h.cap().cached_blocks, 5);
    let readmit = loop {
        h.step();
        if h.out.prefill_tokens > 0 {
            break h.out.prefill_tokens;
        }
    };
    assert_eq!(h.finished.first().map(|f| f.0), Some(RequestId(1)));
    assert!(
        readmit <= 16,
        "re-admission recomputed {readmit} tokens, more than one block"
    );
    assert_eq!(readmit, 48 + generated - 80);
    h.run_idle();
    assert_eq!(h.tokens[&RequestId(2)], 100);
    assert_eq!(h.firsts[&RequestId(2)], 1);
    assert!(h.core.is_drained());
}

#[test]
fn generated_blocks_are_stored_once_full_with_chained_stand_in_hashes() {
    let mut h = Harness::fixed(cfg(64));
    let r = req(7, 40, 40, &content(3, 2));
    h.apply(C::Submit(r.clone()));
    h.run_idle();
    let stored = stored_hashes(&h.take_events());
    let prompt = hashes_of(&r);
    assert_eq!(prompt.len(), 2);
    // 40 + 40 tokens: the 79 whose KV is computed fill four blocks (the
    // last sampled token never has KV), two of prompt and two more.
    assert_eq!(stored.len(), 4);
    assert_eq!(&stored[..2], &prompt[..]);
    let s = h.core.seqs.insert(
        &r,
        crate::sequence::Kind::Ordinary,
        crate::sequence::Phase::Waiting,
    );
    h.core.hash_prompt(s, &r);
    let seq = h.core.seqs.get(s).clone();
    h.core.seqs.remove(s);
    assert_eq!(stored[2], generated_hash(&seq, 2));
    assert_eq!(stored[3], generated_hash(&seq, 3));
    // Chained from the prompt: the same request id over another prompt, or
    // another request over the same prompt, has other stand-ins.
    let mut other = seq.clone();
    other.id = RequestId(8);
    assert_ne!(generated_hash(&other, 2), stored[2]);
    assert_eq!(seq.anchor, prompt[1], "chained from the last prompt block");
    let mut other = seq.clone();
    other.anchor ^= 1;
    assert_ne!(generated_hash(&other, 2), stored[2]);
    // A later request with the same prompt hits the prompt blocks only.
    h.apply(C::Submit(req(8, 40, 1, &content(3, 2))));
    h.step();
    assert_eq!(h.out.prefill_tokens, 40 - 32);
}

#[test]
fn with_prefix_caching_off_nothing_generated_is_hashed() {
    let mut c = cfg(64);
    c.enable_prefix_caching = false;
    let mut h = Harness::fixed(c);
    h.apply(C::Submit(req(1, 40, 60, &content(1, 2))));
    h.run_idle();
    assert!(h.take_events().is_empty());
    assert_eq!(h.cap().cached_blocks, 0);
}

/// A consumer that hands every drained KV event's hashes back
/// (`SchedulerCore::recycle_kv_hashes`) sees the same events, step by step,
/// as one that drops them: under churn (a pool a few prompts large, shared
/// prefixes, generated blocks published and evicted) the recycled buffers
/// carry capacity only, never a previous event's hashes.
#[test]
fn recycled_kv_hash_buffers_change_no_event() {
    let run = |recycle: bool| {
        let mut h = Harness::fixed(cfg(40));
        let mut seen = Vec::new();
        for i in 0..60u64 {
            if i % 2 == 0 {
                let shared = content(i % 3, 2);
                let mut c = shared.clone();
                c.extend(content(100 + i, 2));
                h.apply(C::Submit(req(
                    i,
                    40 + (i % 5) as u32 * 8,
                    20 + i as u32,
                    &c,
                )));
            }
            h.step();
            for e in h.take_events() {
                seen.push(format!("{e:?}"));
                if recycle {
                    match e.data {
                        KvEventData::Stored { block_hashes, .. }
                        | KvEventData::Removed { block_hashes } => {
                            h.core.recycle_kv_hashes(block_hashes)
                        }
                        KvEventData::Cleared => {}
                    }
                }
            }
        }
        h.run_idle();
        seen.extend(h.take_events().iter().map(|e| format!("{e:?}")));
        seen
    };
    let plain = run(false);
    assert!(plain.iter().filter(|s| s.contains("Removed")).count() > 5);
    assert!(plain.iter().filter(|s| s.contains("Stored")).count() > 20);
    assert_eq!(plain, run(true));
}
