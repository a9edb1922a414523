//! Handoff lifecycle scenarios (DEP test scenarios 1 and 4, failure matrix).

use super::*;
use handoff_core::{Backend, CommandOutcome as O, SchedulerCommand as C};

fn hid(n: u128) -> HandoffId {
    HandoffId(n)
}

fn summary(o: &O) -> handoff_core::ReservationSummary {
    match o {
        O::Reserved(s) => *s,
        other => panic!("expected Reserved, got {other:?}"),
    }
}

#[test]
fn ordinary_request_prefills_decodes_and_leaves_its_prefix_cached() {
    let mut h = Harness::fixed(cfg(64));
    let r = req(1, 100, 3, &content(1, 7));
    assert_eq!(h.apply(C::Submit(r.clone())), O::Submitted);
    assert_eq!(h.cap().waiting_requests, 1);
    h.step();
    assert_eq!(h.out.prefill_tokens, 100);
    assert_eq!(h.out.tokens.len(), 1);
    assert!(h.out.tokens[0].first);
    // 6 full prompt blocks published in one chained run.
    let ev = h.take_events();
    assert_eq!(stored_hashes(&ev), hashes_of(&r));
    assert_eq!(h.run_idle(), 2);
    assert_eq!(h.tokens[&RequestId(1)], 3);
    assert_eq!(h.firsts[&RequestId(1)], 1);
    assert_eq!(h.finished.len(), 1);
    let cap = h.cap();
    assert_eq!((cap.active_blocks, cap.cached_blocks), (0, 6));
    assert!(h.core.is_drained());

    // The same prompt again hits the 6 cached blocks and computes only the
    // 4-token tail.
    h.apply(C::Submit(req(2, 100, 1, &content(1, 7))));
    h.step();
    assert_eq!(h.out.prefill_tokens, 4);
    assert!(stored_hashes(&h.take_events()).is_empty());
    assert_eq!(h.out.finished, vec![RequestId(2)]);
}

#[test]
fn whole_prompt_hit_still_recomputes_the_last_block() {
    let mut h = Harness::fixed(cfg(64));
    h.apply(C::Submit(req(1, 64, 1, &content(3, 4))));
    h.run_idle();
    assert_eq!(stored_hashes(&h.take_events()).len(), 4);
    h.apply(C::Submit(req(2, 64, 1, &content(3, 4))));
    h.step();
    // max hit = (64 - 1) / 16 = 3 blocks; the last block is recomputed and,
    // its hash being cached already, adopted rather than duplicated.
    assert_eq!(h.out.prefill_tokens, 16);
    assert_eq!(h.cap().cached_blocks, 4);
    assert!(h.take_events().is_empty());
}

#[test]
fn max_output_zero_means_one_token() {
    let mut h = Harness::fixed(cfg(16));
    h.apply(C::Submit(req(1, 20, 0, &[])));
    h.step();
    assert_eq!(h.out.finished, vec![RequestId(1)]);
    assert_eq!(h.tokens[&RequestId(1)], 1);
}

#[test]
fn chunked_prefill_spans_passes_and_is_timed_as_prefill() {
    let mut c = cfg(512);
    c.max_num_batched_tokens = 1000;
    let mut h = Harness::fixed(c);
    h.apply(C::Submit(req(1, 2500, 2, &[])));
    let mut prefill = Vec::new();
    while !h.core.is_empty() {
        h.step();
        prefill.push(h.out.prefill_tokens);
    }
    assert_eq!(prefill, vec![1000, 1000, 500, 0]);
    assert_eq!(h.tokens[&RequestId(1)], 2);
}

#[test]
fn admission_needs_the_full_prompt_and_the_watermark() {
    let mut c = cfg(100);
    c.watermark = 0.1;
    let mut h = Harness::fixed(c);
    // 80 blocks running (idle core: no watermark applies).
    h.apply(C::Submit(req(1, 80 * 16, 50, &[])));
    h.step();
    assert_eq!(h.cap().active_blocks, 80);
    // 15 blocks would fit the 20 free ones, but not with 10 kept back.
    h.apply(C::Submit(req(2, 15 * 16, 1, &[])));
    h.step();
    assert_eq!(h.cap().waiting_requests, 1);
    assert_eq!(h.out.prefill_tokens, 0);
    // 10 blocks do fit with the watermark, but FCFS keeps it behind the head.
    h.apply(C::Submit(req(3, 10 * 16, 1, &[])));
    h.step();
    assert_eq!(h.cap().waiting_requests, 2);
    h.run_idle();
    assert_eq!(h.finished.len(), 3);
}

#[test]
fn dep_scenario_1_stranded_source() {
    let prompt = 4096;
    let blocks = 4096 / 16;
    // Prefill worker.
    let mut p = Harness::fixed(cfg(1024));
    // Decode worker: exactly full with ordinary decodes.
    let mut d = Harness::fixed(cfg(300));
    let id = hid(0xd1);
    let r = req(7, prompt, 4, &content(9, blocks as usize));

    assert_eq!(
        p.apply(C::SubmitHandoffPrefill {
            id,
            request: r.clone()
        }),
        O::Submitted
    );
    let mut prefill_passes = 0;
    while p.out.pinned.is_empty() {
        assert!(p.step() > 0);
        assert!(p.out.prefill_tokens > 0);
        prefill_passes += 1;
    }
    assert_eq!(prefill_passes, 1, "4096 tokens fit one 8192-token pass");
    let pinned = p.out.pinned[0];
    assert_eq!((pinned.id, pinned.request), (id, RequestId(7)));
    assert_eq!((pinned.blocks, pinned.tokens), (256, 4096));
    assert!(
        p.out.tokens.is_empty(),
        "a handoff prefill emits no client tokens"
    );
    let cap = p.cap();
    assert_eq!((cap.pinned_source_blocks, cap.active_blocks), (256, 0));
    assert!(p.core.is_empty() && !p.core.is_drained());
    // Prefill compute load is gone; physical usage stays.
    assert_eq!(p.step(), 0);
    assert_eq!(p.cap().pinned_source_blocks, 256);
    assert_eq!(p.core.held_sources(), 1);
    // Its KV was published normally while it was computed.
    assert_eq!(stored_hashes(&p.take_events()), hashes_of(&r));

    for i in 0..4 {
        d.apply(C::Submit(req(100 + i, 1150, 20, &[])));
    }
    d.step();
    d.step();
    assert_eq!(d.cap().running_requests, 4);
    assert!(d.cap().free_blocks() + d.cap().cached_blocks < 256);
    let free_before = d.cap().free_blocks();
    assert_eq!(d.reserve(id, r.clone()), O::Unavailable(None));
    assert_eq!(d.cap().reserved_destination_blocks, 0);
    assert!(d.cap().free_blocks() <= free_before, "nothing was reserved");

    // Pressure holds until decode capacity frees: the waiting loop grants
    // the reservation in the first pass after the decodes finished.
    let mut grant = None;
    while grant.is_none() {
        assert!(d.core.reservations() == 0);
        d.step();
        grant = d.out.reserved.first().map(|&(g, s)| (g, s));
        assert_eq!(p.cap().pinned_source_blocks, 256);
        assert!(d.out.unavailable.is_empty(), "a refusal is reported once");
    }
    assert_eq!(
        d.finished.len(),
        4,
        "granted only once the decodes were gone"
    );
    let (granted, s) = grant.unwrap();
    assert_eq!(granted, id);
    assert_eq!(s.physical_blocks, 256);
    assert_eq!(
        (
            s.matched_prefix_tokens,
            s.transfer_tokens,
            s.transfer_blocks
        ),
        (0, 4096, 256)
    );
    assert!(!s.request_slot);
    assert_eq!(s.decode_headroom_tokens, 0);
    let cap = d.cap();
    assert_eq!(cap.reserved_destination_blocks, 256);
    assert_eq!(
        cap.free_request_slots, cap.total_request_slots,
        "no running slot taken"
    );
    assert!(d.core.is_empty() && !d.core.is_drained());
    d.take_events();
    assert_eq!(d.step(), 0, "a reservation is not runnable");
    assert!(d.out.reserved.is_empty(), "granted once");

    // Transfer completes: activation publishes once.
    assert_eq!(d.apply(C::ActivateDestination { id }), O::Applied);
    assert_eq!(d.apply(C::ActivateDestination { id }), O::Noop);
    let ev = d.take_events();
    assert_eq!(ev.len(), 1);
    assert_eq!(stored_hashes(&ev), hashes_of(&r));
    let cap = d.cap();
    assert_eq!(
        (cap.reserved_destination_blocks, cap.active_blocks),
        (0, 256)
    );
    assert_eq!(cap.waiting_requests, 1);

    // Reader completion releases the source: its blocks become cache.
    assert_eq!(p.apply(C::ReleaseSource { id }), O::Applied);
    assert_eq!(p.apply(C::ReleaseSource { id }), O::Noop);
    assert_eq!(p.apply(C::CancelSource { id }), O::Noop);
    let cap = p.cap();
    assert_eq!((cap.pinned_source_blocks, cap.cached_blocks), (0, 256));
    assert!(p.core.is_drained());

    // Decode runs from the transferred KV: no prompt recompute.
    d.step();
    assert_eq!(d.out.prefill_tokens, 0);
    assert_eq!(d.out.tokens.len(), 1);
    assert!(d.out.tokens[0].first);
    assert_eq!(d.cap().active_blocks, 256);
    d.run_idle();
    assert_eq!(d.tokens[&RequestId(7)], 4);
    assert_eq!(d.firsts[&RequestId(7)], 1);
    assert!(d.core.is_drained());
    assert!(
        stored_hashes(&d.take_events()).is_empty(),
        "never republished"
    );
    p.ledger.check_drained().unwrap();
    d.ledger.check_drained().unwrap();
}

#[test]
fn reserved_blocks_are_not_hits_and_not_published_before_activation() {
    let mut h = Harness::fixed(cfg(128));
    let a = hid(1);
    let ra = req(1, 160, 2, &content(4, 10));
    let s = summary(&h.reserve(a, ra.clone()));
    assert_eq!((s.physical_blocks, s.matched_prefix_tokens), (10, 0));
    assert!(h.take_events().is_empty());

    // An ordinary request with the same prompt finds no hit.
    h.apply(C::Submit(req(2, 160, 1, &content(4, 10))));
    h.step();
    assert_eq!(h.out.prefill_tokens, 160);
    assert_eq!(stored_hashes(&h.take_events()), hashes_of(&ra));
    assert_eq!(h.cap().cached_blocks, 10);
    assert_eq!(h.cap().reserved_destination_blocks, 10);

    // Meanwhile the hashes were cached by the probe: activation adopts the
    // canonical blocks, frees its own copies and publishes nothing.
    assert_eq!(h.apply(C::ActivateDestination { id: a }), O::Applied);
    assert!(h.take_events().is_empty());
    let cap = h.cap();
    assert_eq!(
        (
            cap.active_blocks,
            cap.cached_blocks,
            cap.reserved_destination_blocks
        ),
        (10, 0, 0)
    );
    assert_eq!(cap.free_blocks(), 118);
    h.run_idle();
    assert!(h.core.is_drained());
    h.ledger.check_drained().unwrap();
}

#[test]
fn second_reservation_shares_the_cached_prefix_not_the_unpublished_suffix() {
    let mut h = Harness::fixed(cfg(128));
    let prefix = content(5, 5);
    // Publish a 5-block prefix (81 tokens: 5 full blocks + 1).
    h.apply(C::Submit(req(1, 81, 1, &prefix)));
    h.run_idle();
    let ev = h.take_events();
    assert_eq!(stored_hashes(&ev).len(), 5);
    assert_eq!(h.cap().cached_blocks, 5);

    let mut full = prefix.clone();
    full.extend(content(6, 5));
    let ra = req(2, 160, 2, &full);
    let rb = req(3, 160, 2, &full);
    let (a, b) = (hid(10), hid(11));
    let sa = summary(&h.reserve(a, ra.clone()));
    assert_eq!(
        (
            sa.matched_prefix_tokens,
            sa.physical_blocks,
            sa.transfer_tokens
        ),
        (80, 5, 80)
    );
    let sb = summary(&h.reserve(b, rb.clone()));
    assert_eq!(
        (
            sb.matched_prefix_tokens,
            sb.physical_blocks,
            sb.transfer_blocks
        ),
        (80, 5, 5)
    );
    assert_ne!(sa.reservation, sb.reservation);
    let cap = h.cap();
    // The locked prefix is no longer evictable: it counts as reserved.
    assert_eq!(
        (cap.reserved_destination_blocks, cap.cached_blocks),
        (15, 0)
    );
    assert!(h.take_events().is_empty());

    assert_eq!(h.apply(C::ActivateDestination { id: a }), O::Applied);
    let ev = h.take_events();
    assert_eq!(ev.len(), 1);
    let hashes = hashes_of(&ra);
    match &ev[0].data {
        KvEventData::Stored {
            parent_hash,
            block_hashes,
        } => {
            assert_eq!(*parent_hash, Some(hashes[4]));
            assert_eq!(block_hashes, &hashes[5..]);
        }
        other => panic!("{other:?}"),
    }
    // B adopts A's now-canonical suffix; its own copies are freed.
    assert_eq!(h.apply(C::ActivateDestination { id: b }), O::Applied);
    assert!(h.take_events().is_empty());
    let cap = h.cap();
    assert_eq!(
        (cap.active_blocks, cap.reserved_destination_blocks),
        (10, 0)
    );
    assert_eq!(cap.free_blocks(), 118);
    h.run_idle();
    assert_eq!(h.tokens[&RequestId(2)], 2);
    assert_eq!(h.tokens[&RequestId(3)], 2);
    assert!(h.core.is_drained());
    h.ledger.check_drained().unwrap();
}

#[test]
fn failed_reservation_leaves_everything_as_it_was() {
    let mut c = cfg(64);
    c.watermark = 0.05;
    let mut h = Harness::fixed(c);
    // Some cached, some pinned, some running, some reserved, events pending.
    h.apply(C::Submit(req(1, 160, 1, &content(1, 10))));
    h.run_idle();
    h.apply(C::SubmitHandoffPrefill {
        id: hid(1),
        request: req(2, 200, 1, &content(2, 12)),
    });
    h.step();
    h.reserve(hid(2), req(3, 100, 1, &content(1, 6)));
    h.apply(C::Submit(req(4, 64, 40, &[])));
    h.step();
    let cap = h.cap();
    assert!(cap.pinned_source_blocks > 0 && cap.reserved_destination_blocks > 0);
    assert!(cap.active_blocks > 0 && cap.cached_blocks > 0);
    // Events are still queued inside the core: they must stay exactly so.
    // A pass that cannot grant a queued reservation does exactly what it
    // would have done without it.
    let mut without = h.core.clone();
    let big = req(5, 700, 1, &content(7, 44));
    let now = h.now;
    assert_eq!(h.reserve(hid(3), big), O::Unavailable(None));
    let mut out = StepOutput::default();
    without.step(now, now, &mut out);
    assert_eq!(h.apply(C::CancelDestination { id: hid(3) }), O::Applied);
    assert_eq!(h.core.fingerprint(), without.fingerprint());
    h.check();
    let mut a = Vec::new();
    without.drain_kv_events(&mut a);
    let mut b = Vec::new();
    h.core.drain_kv_events(&mut b);
    assert_eq!(a, b);
}

#[test]
fn cancel_source_before_completion_frees_once_and_never_pins() {
    // Still waiting.
    let mut h = Harness::fixed(cfg(64));
    let id = hid(1);
    h.apply(C::SubmitHandoffPrefill {
        id,
        request: req(1, 100, 1, &content(1, 6)),
    });
    assert_eq!(h.apply(C::ReleaseSource { id }), O::Noop);
    assert_eq!(h.apply(C::CancelSource { id }), O::Applied);
    assert_eq!(h.apply(C::CancelSource { id }), O::Noop);
    assert!(h.core.is_drained());
    assert_eq!(h.step(), 0);

    // Mid chunked prefill: the computed full blocks stay as cache.
    let mut c = cfg(64);
    c.max_num_batched_tokens = 256;
    let mut h = Harness::fixed(c);
    h.apply(C::SubmitHandoffPrefill {
        id,
        request: req(2, 600, 1, &content(2, 38)),
    });
    h.step();
    assert!(h.out.pinned.is_empty());
    assert_eq!(h.cap().active_blocks, 16);
    assert_eq!(h.apply(C::CancelSource { id }), O::Applied);
    let cap = h.cap();
    assert_eq!(
        (cap.active_blocks, cap.cached_blocks, cap.running_requests),
        (0, 16, 0)
    );
    assert_eq!(h.apply(C::ReleaseSource { id }), O::Noop);
    assert_eq!(h.apply(C::CancelSource { id }), O::Noop);
    assert_eq!(h.step(), 0);
    assert!(h.core.is_drained());
    assert!(removed_hashes(&h.take_events()).is_empty());
    h.ledger.check_drained().unwrap();
}

#[test]
fn cancel_while_held_frees_once() {
    let mut h = Harness::fixed(cfg(64));
    let id = hid(9);
    h.apply(C::SubmitHandoffPrefill {
        id,
        request: req(1, 100, 1, &content(1, 6)),
    });
    h.step();
    assert_eq!(h.out.pinned.len(), 1);
    assert_eq!(h.cap().pinned_source_blocks, 7);
    assert_eq!(h.apply(C::CancelSource { id }), O::Applied);
    assert_eq!(h.apply(C::CancelSource { id }), O::Noop);
    assert_eq!(h.apply(C::ReleaseSource { id }), O::Noop);
    let cap = h.cap();
    assert_eq!((cap.pinned_source_blocks, cap.cached_blocks), (0, 6));
    assert!(h.core.is_drained());
    h.ledger.check_drained().unwrap();
}

#[test]
fn cancel_after_reservation_unlocks_prefix_without_removed_events() {
    let mut h = Harness::fixed(cfg(64));
    h.apply(C::Submit(req(1, 81, 1, &content(1, 5))));
    h.run_idle();
    h.take_events();
    let id = hid(3);
    let s = summary(&h.reserve(id, req(2, 160, 1, &content(1, 10))));
    assert_eq!((s.matched_prefix_tokens, s.physical_blocks), (80, 5));
    assert_eq!(h.cap().reserved_destination_blocks, 10);
    assert_eq!(h.apply(C::CancelDestination { id }), O::Applied);
    assert_eq!(h.apply(C::CancelDestination { id }), O::Noop);
    assert_eq!(h.apply(C::ActivateDestination { id }), O::Noop);
    let cap = h.cap();
    assert_eq!((cap.reserved_destination_blocks, cap.cached_blocks), (0, 5));
    assert_eq!(cap.free_blocks(), 59);
    assert!(h.take_events().is_empty());
    assert!(h.core.is_drained());
    h.ledger.check_drained().unwrap();
}

#[test]
fn cancel_after_activation_aborts_the_decode_and_frees_once() {
    // Queued to decode: the abort takes it out of the waiting queue.
    let mut h = Harness::fixed(cfg(64));
    let id = hid(4);
    h.reserve(id, req(1, 40, 3, &[]));
    assert_eq!(h.apply(C::ActivateDestination { id }), O::Applied);
    assert_eq!(h.cap().active_blocks, 3);
    assert_eq!(h.apply(C::CancelDestination { id }), O::Applied);
    assert_eq!(h.cap().active_blocks, 0);
    assert_eq!(h.apply(C::CancelDestination { id }), O::Noop);
    h.run_idle();
    assert!(!h.tokens.contains_key(&RequestId(1)));
    assert!(h.finished.is_empty());
    let cap = h.cap();
    assert_eq!(cap.free_blocks() + cap.cached_blocks, 64);
    assert!(h.core.is_drained());
    h.ledger.check_drained().unwrap();
    // Decoding: the abort takes it out of the running batch; it never
    // finishes and its blocks are freed once.
    let id = hid(5);
    h.reserve(id, req(2, 40, 50, &[]));
    h.apply(C::ActivateDestination { id });
    h.step();
    h.step();
    assert!(h.tokens[&RequestId(2)] > 0);
    assert_eq!(h.apply(C::CancelDestination { id }), O::Applied);
    h.run_idle();
    assert!(h.tokens[&RequestId(2)] < 50);
    assert!(h.finished.is_empty());
    let cap = h.cap();
    assert_eq!(cap.free_blocks() + cap.cached_blocks, 64);
    assert!(h.core.is_drained());
    h.ledger.check_drained().unwrap();
}

#[test]
fn activated_destination_waits_for_a_running_slot() {
    // vLLM's waiting loop stops at `max_num_seqs` running: with the one slot
    // taken, a queued destination is not even allocated.
    let mut c = cfg(256);
    c.max_num_seqs = 1;
    let mut h = Harness::fixed(c);
    h.apply(C::Submit(req(1, 32, 5, &[])));
    h.step();
    let id = hid(5);
    assert_eq!(h.reserve(id, req(2, 64, 2, &[])), O::Unavailable(None));
    for _ in 0..3 {
        assert_eq!(h.cap().running_requests, 1);
        assert_eq!(h.cap().reserved_destination_blocks, 0);
        h.step();
        assert!(h.out.reserved.is_empty());
    }
    // Request 1 finished in that pass; the next pass grants the blocks.
    assert_eq!(h.finished.len(), 1);
    assert_eq!(h.cap().running_requests, 0);
    h.step();
    assert_eq!(h.granted.len(), 1);
    assert_eq!(h.cap().reserved_destination_blocks, 4);
    h.apply(C::ActivateDestination { id });
    assert_eq!(h.cap().waiting_requests, 1);
    h.run_idle();
    assert_eq!(h.tokens[&RequestId(2)], 2);
    assert_eq!(h.firsts[&RequestId(2)], 1);
    assert!(h.core.is_drained());
    h.ledger.check_drained().unwrap();
}

#[test]
fn preemption_under_pressure_never_touches_held_or_reserved_blocks() {
    let mut h = Harness::fixed(cfg(64));
    let (src, dst) = (hid(1), hid(2));
    h.apply(C::SubmitHandoffPrefill {
        id: src,
        request: req(1, 256, 1, &content(1, 16)),
    });
    h.step();
    summary(&h.reserve(dst, req(2, 256, 1, &content(2, 16))));
    let pinned_blocks: Vec<u32> = {
        let s = h.core.sources.get(&src).copied().unwrap();
        h.core.seqs.get(s).blocks.clone()
    };
    let reserved_blocks: Vec<u32> = {
        let s = h.core.destinations.get(&dst).copied().unwrap();
        h.core.seqs.get(s).blocks.clone()
    };
    assert_eq!(h.cap().pinned_source_blocks, 16);
    assert_eq!(h.cap().reserved_destination_blocks, 16);
    // Two decodes that cannot both grow to completion in the 32 free blocks.
    h.apply(C::Submit(req(10, 64, 400, &[])));
    h.apply(C::Submit(req(11, 64, 400, &[])));
    let mut steps = 0;
    while !h.core.is_empty() {
        assert!(h.step() > 0, "work stalled");
        steps += 1;
        assert_eq!(h.cap().pinned_source_blocks, 16);
        assert_eq!(h.cap().reserved_destination_blocks, 16);
        let s = h.core.sources.get(&src).copied().unwrap();
        assert_eq!(h.core.seqs.get(s).blocks, pinned_blocks);
        let s = h.core.destinations.get(&dst).copied().unwrap();
        assert_eq!(h.core.seqs.get(s).blocks, reserved_blocks);
    }
    assert!(
        !h.preempted.is_empty(),
        "expected preemption in {steps} passes"
    );
    assert_eq!(
        h.preempted[0],
        RequestId(11),
        "the newest request is preempted"
    );
    assert_eq!(h.tokens[&RequestId(10)], 400);
    assert_eq!(h.tokens[&RequestId(11)], 400);
    assert_eq!(
        h.firsts[&RequestId(11)],
        1,
        "a resumed request's token is not first"
    );
    assert_eq!(h.apply(C::ReleaseSource { id: src }), O::Applied);
    assert_eq!(h.apply(C::CancelDestination { id: dst }), O::Applied);
    assert!(h.core.is_drained());
    h.ledger.check_drained().unwrap();
}

#[test]
fn trtllm_mode_refuses_reservation() {
    let mut c = cfg(64);
    c.refuse_destination_reservation = true;
    let mut h = Harness::fixed(c);
    let caps = h.core.capabilities();
    assert_eq!(caps.backend, Backend::TrtLlm);
    assert!(!caps.destination_reservation);
    let before = h.core.fingerprint();
    let r = req(1, 32, 1, &[]);
    assert_eq!(h.reserve(hid(1), r.clone()), O::Unsupported(Some(r)));
    assert_eq!(h.core.fingerprint(), before);
    assert_eq!(h.apply(C::ActivateDestination { id: hid(1) }), O::Noop);

    let v = VllmCore::new(cfg(64));
    let caps = v.capabilities();
    assert_eq!(caps.backend, Backend::Vllm);
    assert!(caps.destination_reservation);
    assert_eq!(caps.source_lease_ttl, Duration::from_secs(30));
    // The core's default lease is the one whose heartbeat the handoff
    // config arms for vLLM.
    assert_eq!(caps.source_lease_ttl, handoff_core::Heartbeat::VLLM_LEASE);
    assert_eq!(caps.block_size, 16);
}

#[test]
fn unknown_ids_and_impossible_requests_never_panic() {
    let mut h = Harness::fixed(cfg(8));
    for cmd in [
        C::ActivateDestination { id: hid(1) },
        C::ReleaseSource { id: hid(1) },
        C::CancelSource { id: hid(1) },
        C::CancelDestination { id: hid(1) },
    ] {
        assert_eq!(h.apply(cmd), O::Noop);
    }
    let huge = req(1, 8 * 16, 1, &[]);
    assert_eq!(h.apply(C::Submit(huge.clone())), O::Unsupported(Some(huge)));
    let empty = req(2, 0, 1, &[]);
    assert_eq!(
        h.apply(C::Submit(empty.clone())),
        O::Unsupported(Some(empty))
    );
    // A live attempt id is not taken twice.
    let a = req(3, 16, 1, &[]);
    assert_eq!(
        h.apply(C::SubmitHandoffPrefill {
            id: hid(5),
            request: a.clone()
        }),
        O::Submitted
    );
    assert_eq!(
        h.apply(C::SubmitHandoffPrefill {
            id: hid(5),
            request: a.clone()
        }),
        O::Unsupported(Some(a))
    );
    assert!(h.core.is_drained() || h.apply(C::CancelSource { id: hid(5) }) == O::Applied);
    assert!(h.core.is_drained());
}

#[test]
fn capacity_counts_a_shared_block_once_by_its_strongest_owner() {
    let mut h = Harness::fixed(cfg(64));
    let id = hid(1);
    h.apply(C::SubmitHandoffPrefill {
        id,
        request: req(1, 160, 1, &content(1, 10)),
    });
    h.step();
    assert_eq!(h.cap().pinned_source_blocks, 10);
    // A running request hits 9 of the held source's blocks (never the
    // last), recomputes the last one and adopts the canonical copy: all 10
    // are shared, each counted once, as active.
    h.apply(C::Submit(req(2, 160, 5, &content(1, 10))));
    h.step();
    let cap = h.cap();
    assert_eq!(cap.active_blocks, 10);
    assert_eq!(cap.pinned_source_blocks, 0);
    assert_eq!(cap.free_blocks(), 54);
    assert_eq!(h.out.prefill_tokens, 16);
    h.run_idle();
    assert_eq!(h.cap().pinned_source_blocks, 10);
    h.apply(C::ReleaseSource { id });
    assert!(h.core.is_drained());
}

#[test]
fn prefix_caching_off_hashes_and_publishes_nothing() {
    let mut c = cfg(64);
    c.enable_prefix_caching = false;
    let mut h = Harness::fixed(c);
    h.apply(C::Submit(req(1, 100, 1, &content(1, 6))));
    h.run_idle();
    h.apply(C::Submit(req(2, 100, 1, &content(1, 6))));
    h.step();
    assert_eq!(h.out.prefill_tokens, 100);
    let id = hid(1);
    let s = summary(&h.reserve(id, req(3, 100, 1, &content(1, 6))));
    assert_eq!(s.matched_prefix_tokens, 0);
    h.apply(C::ActivateDestination { id });
    h.run_idle();
    assert!(h.take_events().is_empty());
    assert_eq!(h.cap().cached_blocks, 0);
}
