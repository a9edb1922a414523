//! Destination-first handoff: DEP scenario 2, reservations, source holds,
//! exactly-once cleanup.

use super::harness::{req, Harness};
use crate::SglangConfig;
use handoff_core::{
    CommandOutcome, HandoffId, KvEventData, RequestId, ReservationSummary, SchedulerCommand,
    SchedulerCore,
};

/// A decode server in the DEP's locked-prefix mode
/// (`--disaggregation-decode-enable-radix-cache`).
fn decode_cfg(page: u32) -> SglangConfig {
    SglangConfig {
        total_pages: 8192 / u64::from(page),
        disaggregation_decode_enable_radix_cache: true,
        ..SglangConfig::with_page_size(page)
    }
}

fn prefill_cfg(page: u32) -> SglangConfig {
    SglangConfig {
        total_pages: 65536 / u64::from(page),
        ..SglangConfig::with_page_size(page)
    }
}

#[derive(Clone, Copy, Debug)]
enum Hit {
    Zero,
    Partial,
    Full,
}

const PROMPT: u32 = 1024;

fn prompt_chunks() -> Vec<u64> {
    (1000..1016).collect()
}

fn stored_since(h: &Harness, from: usize) -> Vec<(Option<u64>, Vec<u64>)> {
    h.events[from..]
        .iter()
        .filter_map(|e| match &e.data {
            KvEventData::Stored {
                parent_hash,
                block_hashes,
            } => Some((*parent_hash, block_hashes.clone())),
            _ => None,
        })
        .collect()
}

/// DEP test scenario 2, "SGLang destination gate".
fn dep_scenario_2(page: u32, hit: Hit) {
    let p = u64::from(page);
    let mut d = Harness::new(decode_cfg(page));
    let mut pf = Harness::new(prefill_cfg(page));
    let id = HandoffId(0xabc);
    let handoff = req(7, PROMPT, 50, &prompt_chunks());
    let mut all_hashes = Vec::new();
    handoff.block_hashes(64, &mut all_hashes);
    assert_eq!(all_hashes.len(), 16);

    // Warm the destination cache for partial and full hits.
    let expected_prefix = match hit {
        Hit::Zero => 0,
        Hit::Partial => {
            let mut c: Vec<u64> = prompt_chunks()[..8].to_vec();
            c.extend([1, 2]);
            d.submit(req(1, 600, 1, &c));
            512
        }
        Hit::Full => {
            d.submit(req(1, PROMPT, 1, &prompt_chunks()));
            1024
        }
    };
    d.run_idle(10);

    // Fill the decode worker: three long requests running.
    for i in 0..3 {
        d.submit(req(10 + i, 2000, 300, &[500 + i]));
    }
    d.step();
    assert_eq!(d.cap().running_requests, 3);
    d.step();

    // Gate closed: nothing may be held, so the caller keeps the prefill
    // undispatched.
    let before = d.cap();
    let nodes = d.core.radix_nodes();
    let events = d.events.len();
    match d.reserve(id, handoff.clone()) {
        CommandOutcome::Unavailable(Some(r)) => assert_eq!(r, handoff),
        other => panic!("page {page} {hit:?}: expected Unavailable, got {other:?}"),
    }
    assert_eq!(d.cap(), before);
    assert_eq!(d.core.radix_nodes(), nodes);
    assert_eq!(d.events.len(), events);
    assert!(pf.core.is_drained(), "prefill not dispatched");

    // Capacity frees once the batch drains.
    d.run_idle(1000);
    for i in 0..3 {
        assert_eq!(d.tokens_of(10 + i), 300);
    }
    let events = d.events.len();
    let before = d.cap();
    let summary = match d.reserve(id, handoff.clone()) {
        CommandOutcome::Reserved(s) => s,
        other => panic!("page {page} {hit:?}: expected Reserved, got {other:?}"),
    };
    let delta = (u64::from(PROMPT) - expected_prefix) / p;
    assert_eq!(
        summary,
        ReservationSummary {
            reservation: summary.reservation,
            physical_blocks: delta,
            matched_prefix_tokens: expected_prefix,
            transfer_tokens: u64::from(PROMPT) - expected_prefix,
            transfer_blocks: delta,
            request_slot: true,
            decode_headroom_tokens: 512,
        },
        "page {page} {hit:?}"
    );
    assert!(summary.reservation.is_some());
    let cap = d.cap();
    assert_eq!(cap.free_request_slots + 1, before.free_request_slots);
    // The locked prefix leaves the cache and counts once, as reserved.
    assert_eq!(cap.reserved_destination_blocks, u64::from(PROMPT) / p);
    assert_eq!(
        cap.cached_blocks + expected_prefix / p,
        before.cached_blocks,
        "the prefix is locked, not copied"
    );
    assert_eq!(
        cap.kv_used_blocks(),
        u64::from(PROMPT) / p,
        "headroom is not pages"
    );
    assert_eq!(cap.decode_headroom_tokens, 512);
    assert!(cap.decode_headroom_tokens > 0 && cap.active_blocks == 0);
    assert_eq!(d.events.len(), events, "no Stored before the KV arrives");
    assert!(d.core.is_empty() && !d.core.is_drained());

    // The prefill may now be dispatched; it completes into a held source.
    assert_eq!(
        pf.apply(SchedulerCommand::SubmitHandoffPrefill {
            id,
            request: handoff.clone()
        }),
        CommandOutcome::Submitted
    );
    pf.run_idle(10);
    assert_eq!(pf.pinned.len(), 1);
    let pin = pf.pinned[0];
    assert_eq!((pin.id, pin.request, pin.tokens), (id, RequestId(7), 1024));
    assert_eq!(pin.blocks, u64::from(PROMPT) / p);
    assert_eq!(
        pf.tokens_of(7),
        0,
        "a handoff prefill emits no client tokens"
    );
    let pcap = pf.cap();
    assert_eq!(pcap.pinned_source_blocks, u64::from(PROMPT) / p);
    assert_eq!(pcap.active_blocks, 0);
    assert!(pf.core.is_empty() && !pf.core.is_drained());

    // Transfer done: activation publishes only the delta, once.
    let events = d.events.len();
    assert_eq!(
        d.apply(SchedulerCommand::ActivateDestination { id }),
        CommandOutcome::Applied
    );
    let stored = stored_since(&d, events);
    let first_new = (expected_prefix / 64) as usize;
    match hit {
        Hit::Full => assert!(stored.is_empty(), "a full hit publishes nothing"),
        _ => {
            assert_eq!(stored.len(), 1);
            let parent = first_new.checked_sub(1).map(|i| all_hashes[i]);
            assert_eq!(stored[0], (parent, all_hashes[first_new..].to_vec()));
        }
    }
    let cap = d.cap();
    assert_eq!(cap.reserved_destination_blocks, 0);
    assert_eq!(cap.active_blocks, u64::from(PROMPT) / p);
    assert_eq!(cap.waiting_requests, 1);
    assert_eq!(
        d.apply(SchedulerCommand::ActivateDestination { id }),
        CommandOutcome::Noop
    );

    // The reader is done: the source is released exactly once.
    assert_eq!(
        pf.apply(SchedulerCommand::ReleaseSource { id }),
        CommandOutcome::Applied
    );
    assert_eq!(
        pf.apply(SchedulerCommand::ReleaseSource { id }),
        CommandOutcome::Noop
    );
    assert_eq!(pf.cap().cached_blocks, u64::from(PROMPT) / p);

    // Decode runs with no prefill: the prefill's token is streamed as the
    // request joins the batch, and the first pass emits the second.
    d.step();
    assert_eq!(d.out.prefill_tokens, 0);
    assert_eq!(d.out.shipped_first_tokens, vec![RequestId(7)]);
    assert_eq!(d.out.tokens.len(), 1);
    assert!(!d.out.tokens[0].first);
    assert_eq!(d.tokens_of(7), 2);
    d.run_idle(100);
    assert_eq!(d.tokens_of(7), 50);
    d.assert_drained();
    pf.assert_drained();
}

#[test]
fn dep_scenario_2_zero_partial_full_hits_all_page_sizes() {
    for page in [1, 16, 64] {
        for hit in [Hit::Zero, Hit::Partial, Hit::Full] {
            dep_scenario_2(page, hit);
        }
    }
}

#[test]
fn locked_prefix_survives_eviction_while_reserved() {
    let mut d = Harness::new(SglangConfig {
        total_pages: 3000,
        disaggregation_decode_enable_radix_cache: true,
        ..SglangConfig::default()
    });
    d.submit(req(1, 1024, 1, &prompt_chunks()));
    d.run_idle(10);
    assert_eq!(d.cap().cached_blocks, 1024);
    let id = HandoffId(1);
    let CommandOutcome::Reserved(s) = d.reserve(id, req(2, 1024, 10, &prompt_chunks())) else {
        panic!("full hit must reserve");
    };
    assert_eq!(s.physical_blocks, 0);
    assert_eq!(d.cap().reserved_destination_blocks, 1024);
    assert_eq!(d.cap().cached_blocks, 0);
    // A request needing more than the unlocked pool waits; nothing is evicted.
    d.submit(req(3, 2500, 1, &[9]));
    d.step();
    assert_eq!(d.out.prefill_tokens, 0);
    assert_eq!(d.cap().reserved_destination_blocks, 1024);
    let mut hashes = Vec::new();
    req(2, 1024, 1, &prompt_chunks()).block_hashes(64, &mut hashes);
    assert!(hashes.iter().all(|h| d.core.radix.contains(*h)));
    // Unlocking makes the prefix evictable again; the waiting request runs.
    assert_eq!(
        d.apply(SchedulerCommand::CancelDestination { id }),
        CommandOutcome::Applied
    );
    assert_eq!(d.cap().cached_blocks, 1024);
    d.run_idle(10);
    assert!(d.finished(3));
    assert!(!d.core.radix.contains(hashes[15]), "evicted once unlocked");
    d.assert_drained();
}

#[test]
fn slot_exhaustion_alone_refuses_a_reservation() {
    let mut d = Harness::new(SglangConfig {
        total_pages: 1 << 20,
        max_running_requests: 2,
        prealloc_slot_margin: 0,
        ..SglangConfig::default()
    });
    for i in 0..2 {
        let out = d.reserve(HandoffId(i), req(i as u64, 100, 10, &[i as u64]));
        assert!(matches!(out, CommandOutcome::Reserved(_)));
    }
    let cap = d.cap();
    assert_eq!(cap.free_request_slots, 0);
    assert!(cap.free_blocks() > 1000);
    let out = d.reserve(HandoffId(9), req(9, 100, 10, &[9]));
    assert!(matches!(out, CommandOutcome::Unavailable(Some(_))));
    assert_eq!(d.cap(), cap);
    for i in 0..2 {
        d.apply(SchedulerCommand::CancelDestination { id: HandoffId(i) });
    }
    assert!(matches!(
        d.reserve(HandoffId(9), req(9, 100, 10, &[9])),
        CommandOutcome::Reserved(_)
    ));
    d.apply(SchedulerCommand::CancelDestination { id: HandoffId(9) });
    d.assert_drained();
}

#[test]
fn headroom_counts_against_later_reservations_but_not_pages() {
    let mut d = Harness::new(SglangConfig {
        total_pages: 2000,
        ..SglangConfig::default()
    });
    // Each needs 100 pages + 512 headroom; headroom of earlier ones counts.
    let mut reserved = 0;
    for i in 0..10u64 {
        match d.reserve(HandoffId(u128::from(i)), req(i, 100, 10, &[i])) {
            CommandOutcome::Reserved(_) => reserved += 1,
            CommandOutcome::Unavailable(_) => break,
            other => panic!("{other:?}"),
        }
    }
    // 2000 >= 100k + 512k + 100 + 512 holds for k <= 2.
    assert_eq!(reserved, 3);
    let cap = d.cap();
    assert_eq!(cap.reserved_destination_blocks, 300);
    assert_eq!(cap.decode_headroom_tokens, 3 * 512);
    assert_eq!(cap.kv_used_blocks(), 300);
    for i in 0..3u128 {
        d.apply(SchedulerCommand::CancelDestination { id: HandoffId(i) });
    }
    d.assert_drained();
}

#[test]
fn cleanup_is_exactly_once_in_every_phase() {
    let mut pf = Harness::new(SglangConfig {
        total_pages: 100_000,
        chunked_prefill_size: 1024,
        ..SglangConfig::default()
    });
    let chunks: Vec<u64> = (0..64).collect();
    // Computing, still waiting.
    let a = HandoffId(1);
    pf.apply(SchedulerCommand::SubmitHandoffPrefill {
        id: a,
        request: req(1, 4000, 5, &chunks),
    });
    assert_eq!(
        pf.apply(SchedulerCommand::ReleaseSource { id: a }),
        CommandOutcome::Noop,
        "release before the pin is not a cancel"
    );
    assert_eq!(
        pf.apply(SchedulerCommand::CancelSource { id: a }),
        CommandOutcome::Applied
    );
    assert_eq!(
        pf.apply(SchedulerCommand::CancelSource { id: a }),
        CommandOutcome::Noop
    );
    assert!(pf.core.is_drained());
    // Computing, mid-chunk: its computed blocks stay cached.
    let b = HandoffId(2);
    pf.apply(SchedulerCommand::SubmitHandoffPrefill {
        id: b,
        request: req(2, 4000, 5, &chunks),
    });
    pf.step();
    assert_eq!(pf.cap().active_blocks, 1024);
    assert_eq!(
        pf.apply(SchedulerCommand::CancelSource { id: b }),
        CommandOutcome::Applied
    );
    assert_eq!(pf.cap().active_blocks, 0);
    assert_eq!(pf.cap().cached_blocks, 1024);
    assert!(pf.core.is_drained());
    // Held: cancel ends the lease; release afterwards is a no-op.
    let c = HandoffId(3);
    pf.apply(SchedulerCommand::SubmitHandoffPrefill {
        id: c,
        request: req(3, 4000, 5, &chunks),
    });
    pf.run_idle(10);
    assert!(pf
        .ledger
        .is_open(c, handoff_core::accounting::Holding::SourceLease));
    assert_eq!(
        pf.apply(SchedulerCommand::CancelSource { id: c }),
        CommandOutcome::Applied
    );
    assert_eq!(
        pf.apply(SchedulerCommand::ReleaseSource { id: c }),
        CommandOutcome::Noop
    );
    assert_eq!(
        pf.apply(SchedulerCommand::SubmitHandoffPrefill {
            id: HandoffId(4),
            request: req(4, 10, 5, &[1]),
        }),
        CommandOutcome::Submitted
    );
    assert_eq!(
        pf.apply(SchedulerCommand::SubmitHandoffPrefill {
            id: HandoffId(4),
            request: req(4, 10, 5, &[1]),
        }),
        CommandOutcome::Noop,
        "a live attempt id is not resubmitted"
    );
    pf.run_idle(10);
    pf.apply(SchedulerCommand::ReleaseSource { id: HandoffId(4) });
    pf.assert_drained();

    let mut d = Harness::new(decode_cfg(1));
    // Reserved, then cancelled: activation afterwards is a no-op.
    let r = HandoffId(10);
    assert!(matches!(
        d.reserve(r, req(10, 500, 5, &[1])),
        CommandOutcome::Reserved(_)
    ));
    assert_eq!(
        d.reserve(r, req(10, 500, 5, &[1])),
        CommandOutcome::Noop,
        "duplicate reservation"
    );
    assert_eq!(
        d.apply(SchedulerCommand::CancelDestination { id: r }),
        CommandOutcome::Applied
    );
    assert_eq!(
        d.apply(SchedulerCommand::ActivateDestination { id: r }),
        CommandOutcome::Noop
    );
    assert_eq!(
        d.apply(SchedulerCommand::CancelDestination { id: r }),
        CommandOutcome::Noop
    );
    // After activation the reservation is over: a cancel (a client abort)
    // aborts the request, queued or decoding; it never finishes and a second
    // cancel is a no-op.
    let s = HandoffId(11);
    d.reserve(s, req(11, 500, 5, &[2]));
    d.apply(SchedulerCommand::ActivateDestination { id: s });
    assert_eq!(
        d.apply(SchedulerCommand::CancelDestination { id: s }),
        CommandOutcome::Applied
    );
    assert_eq!(
        d.apply(SchedulerCommand::CancelDestination { id: s }),
        CommandOutcome::Noop
    );
    d.run_idle(10);
    assert_eq!(d.tokens_of(11), 0);
    assert!(!d.finished(11));
    let s = HandoffId(12);
    d.reserve(s, req(12, 500, 5, &[3]));
    d.apply(SchedulerCommand::ActivateDestination { id: s });
    d.step();
    d.step();
    assert!(d.tokens_of(12) > 0 && !d.finished(12), "decoding");
    assert_eq!(
        d.apply(SchedulerCommand::CancelDestination { id: s }),
        CommandOutcome::Applied
    );
    d.run_idle(10);
    assert!(d.tokens_of(12) < 5 && !d.finished(12));
    assert_eq!(d.cap().kv_used_blocks(), 0, "its pages are freed");
    // Unknown ids never panic.
    for cmd in [
        SchedulerCommand::ActivateDestination { id: HandoffId(99) },
        SchedulerCommand::CancelDestination { id: HandoffId(99) },
        SchedulerCommand::ReleaseSource { id: HandoffId(99) },
        SchedulerCommand::CancelSource { id: HandoffId(99) },
    ] {
        assert_eq!(d.apply(cmd), CommandOutcome::Noop);
    }
    d.assert_drained();
}

#[test]
fn shared_prefix_is_counted_once_with_precedence() {
    let mut w = Harness::new(SglangConfig {
        total_pages: 100_000,
        ..SglangConfig::default()
    });
    let shared: Vec<u64> = (0..8).collect();
    // A running request caches the shared prefix...
    w.submit(req(1, 512, 100, &shared));
    w.step();
    // ...and a handoff prefill of the same prompt plus a tail reuses it.
    let mut longer = shared.clone();
    longer.extend([50, 51]);
    let id = HandoffId(5);
    w.apply(SchedulerCommand::SubmitHandoffPrefill {
        id,
        request: req(2, 640, 1, &longer),
    });
    w.step();
    assert_eq!(w.pinned.len(), 1);
    assert_eq!(w.pinned[0].blocks, 640, "the held footprint");
    let cap = w.cap();
    // The 512 shared pages count as active, only the 128-token tail as
    // pinned.
    assert_eq!(cap.pinned_source_blocks, 128);
    assert_eq!(cap.active_blocks, 512);
    w.run_idle(1000);
    assert!(w.finished(1));
    // With the running request gone, the whole path is pinned.
    assert_eq!(w.cap().pinned_source_blocks, 640);
    w.apply(SchedulerCommand::ReleaseSource { id });
    w.assert_drained();
}

#[test]
fn activated_requests_wait_for_a_running_slot() {
    let mut d = Harness::new(SglangConfig {
        total_pages: 100_000,
        max_running_requests: 1,
        prealloc_slot_margin: 2,
        ..SglangConfig::default()
    });
    for i in 0..2u64 {
        let id = HandoffId(u128::from(i));
        assert!(matches!(
            d.reserve(id, req(i, 100, 3, &[i])),
            CommandOutcome::Reserved(_)
        ));
        d.apply(SchedulerCommand::ActivateDestination { id });
    }
    d.step();
    assert_eq!(d.cap().running_requests, 1);
    assert_eq!(d.cap().waiting_requests, 1);
    d.run_idle(100);
    assert_eq!(d.tokens_of(0), 3);
    assert_eq!(d.tokens_of(1), 3);
    d.assert_drained();
}
