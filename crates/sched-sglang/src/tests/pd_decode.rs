//! SGLang's PD decode server as upstream runs it: chunk cache by default,
//! the first token shipped from prefill, and retraction to a host-offload
//! queue that resumes without recompute and gates new preallocation.

use super::harness::{req, Harness};
use crate::seq::{Kind, Phase};
use crate::SglangConfig;
use handoff_core::{CommandOutcome, HandoffId, RequestId, SchedulerCommand};

fn chunks() -> Vec<u64> {
    (2000..2016).collect()
}

/// Reserves and activates `id` for `r`; returns its summary.
fn land(d: &mut Harness, id: HandoffId, r: handoff_core::Request) -> (u64, u64) {
    let CommandOutcome::Reserved(s) = d.reserve(id, r) else {
        panic!("reservation refused");
    };
    assert_eq!(
        d.apply(SchedulerCommand::ActivateDestination { id }),
        CommandOutcome::Applied
    );
    (s.matched_prefix_tokens, s.transfer_tokens)
}

/// `server_args.py` defaults `disaggregation_decode_enable_radix_cache` to
/// False: the decode server's chunk cache never matches, so the second
/// request of a shared prompt moves the whole prompt again, and the decode
/// side publishes nothing. The flag restores prefix reuse and publication.
#[test]
fn decode_defaults_to_a_chunk_cache() {
    for radix in [false, true] {
        let mut d = Harness::new(SglangConfig {
            total_pages: 1 << 14,
            disaggregation_decode_enable_radix_cache: radix,
            ..SglangConfig::default()
        });
        assert_eq!(
            land(&mut d, HandoffId(1), req(1, 1024, 4, &chunks())),
            (0, 1024)
        );
        d.run_idle(100);
        assert!(d.finished(1));
        let (matched, moved) = land(&mut d, HandoffId(2), req(2, 1024, 4, &chunks()));
        d.run_idle(100);
        assert!(d.finished(2));
        if radix {
            assert_eq!((matched, moved), (1024, 0), "a full hit moves nothing");
            assert!(!d.stored_hashes().is_empty());
        } else {
            assert_eq!((matched, moved), (0, 1024), "the whole prompt moves");
            assert!(d.events.is_empty(), "no decode KV events: {:?}", d.events);
            assert_eq!(d.cap().cached_blocks, 0, "a finished request is freed");
        }
        d.assert_drained();
    }
}

/// The prefill's output id arrives with the KV and is streamed as the
/// request joins the batch (`_commit_transfer_to_req`,
/// `process_batch_result_prebuilt`): at the start of the call, before any
/// pass; decode passes produce the other N−1 tokens.
#[test]
fn first_token_is_shipped_and_decode_makes_the_rest() {
    let mut d = Harness::new(SglangConfig {
        total_pages: 1 << 14,
        ..SglangConfig::default()
    });
    land(&mut d, HandoffId(1), req(1, 512, 5, &chunks()));
    let start = d.now;
    assert_eq!(d.step(), 1);
    assert_eq!(d.out.shipped_first_tokens, vec![RequestId(1)]);
    let seen = d.seen[&RequestId(1)].clone();
    assert_eq!(seen.first_at, Some(start), "no pass before the first token");
    assert_eq!(seen.tokens, 2, "the first pass makes the second token");
    let passes = 1 + d.run_idle(100);
    assert_eq!(passes, 4, "N−1 decode passes");
    assert_eq!(d.tokens_of(1), 5);
    d.assert_drained();

    // A one-token request ends with its shipped token: no pass runs.
    land(&mut d, HandoffId(2), req(2, 512, 1, &chunks()));
    let at = d.now;
    assert_eq!(d.step(), 0);
    assert_eq!(d.out.finished, vec![RequestId(2)]);
    assert_eq!(d.out.finished_at_start, 1);
    assert_eq!(d.seen[&RequestId(2)].finished_at, Some(at));
    assert_eq!(d.tokens_of(2), 1);
    d.assert_drained();
}

/// Decode retraction offloads to the retracted queue (`release_req`
/// `offload_kv_cache`, `DecodePreallocQueue.add(is_retracted=True)`); while
/// the queue is not empty nothing new is preallocated
/// (`process_decode_queue`), and a resumed request reloads its KV and
/// continues without a prefill pass (`resume_retracted_reqs`).
#[test]
fn decode_retraction_offloads_gates_and_resumes_without_recompute() {
    let mut d = Harness::new(SglangConfig {
        total_pages: 3000,
        num_reserved_decode_tokens: 16,
        ..SglangConfig::default()
    });
    for i in 0..3u64 {
        land(
            &mut d,
            HandoffId(u128::from(i)),
            req(i, 500, 1000, &[9000 + i]),
        );
    }
    let mut prefill = 0;
    while d.core.retracted.is_empty() {
        assert!(d.step() > 0, "the pool runs out before anything finishes");
        prefill += d.out.prefill_tokens;
    }
    assert_eq!(d.out.preempted.len(), 1);
    let victim = d.core.retracted[0];
    let v = d.core.seqs.get(victim).expect("victim").clone();
    assert_eq!(v.phase, Phase::Retracted);
    assert_eq!(
        v.offloaded,
        v.prompt + v.emitted - 1,
        "prompt + emitted − 1 on host"
    );
    assert!(
        !v.has_slot && v.private_pages == 0,
        "device KV and slot freed"
    );

    // A survivor is aborted: room appears, but the queue keeps it for the
    // retracted request.
    let survivor = d
        .core
        .running
        .iter()
        .find_map(|&i| match d.core.seqs.get(i).map(|s| s.kind) {
            Some(Kind::Destination(id)) => Some(id),
            _ => None,
        })
        .expect("a survivor");
    assert_eq!(
        d.apply(SchedulerCommand::CancelDestination { id: survivor }),
        CommandOutcome::Applied
    );
    let small = req(50, 16, 4, &[9050]);
    assert!(matches!(
        d.reserve(HandoffId(50), small.clone()),
        CommandOutcome::Unavailable(Some(_))
    ));
    // The next pass resumes it without a prefill; then preallocation opens.
    d.step();
    assert!(d.core.retracted.is_empty());
    assert_eq!(d.out.prefill_tokens, 0);
    assert!(d.core.running.contains(&victim));
    assert!(matches!(
        d.reserve(HandoffId(50), small),
        CommandOutcome::Reserved(_)
    ));
    d.apply(SchedulerCommand::ActivateDestination { id: HandoffId(50) });
    loop {
        let n = d.step();
        prefill += d.out.prefill_tokens;
        if n == 0 {
            break;
        }
    }
    assert_eq!(prefill, 0, "nothing is recomputed on decode");
    for i in 0..3u64 {
        if HandoffId(u128::from(i)) != survivor {
            assert_eq!(d.tokens_of(i), 1000, "request {i}");
            assert!(d.finished(i));
        }
    }
    assert!(d.finished(50));
    d.assert_drained();
}

/// `send_kv_chunk`: a chunked handoff prefill reports each finished chunk's
/// KV (cumulative, whole pages) so it can stream while later chunks
/// compute; the last chunk pins instead, and its transfer carries the rest.
#[test]
fn chunked_handoff_prefill_streams_each_finished_chunk() {
    let mut pf = Harness::new(SglangConfig {
        total_pages: 1 << 12,
        chunked_prefill_size: 512,
        ..SglangConfig::with_page_size(16)
    });
    let id = HandoffId(7);
    assert_eq!(
        pf.apply(SchedulerCommand::SubmitHandoffPrefill {
            id,
            request: req(7, 2000, 8, &chunks()),
        }),
        CommandOutcome::Submitted
    );
    let mut ready = Vec::new();
    while pf.step() > 0 {
        ready.extend(pf.out.kv_chunks.iter().map(|c| (c.id, c.ready_tokens)));
        if !pf.out.pinned.is_empty() {
            assert!(pf.out.kv_chunks.is_empty(), "the last chunk pins");
        }
    }
    assert_eq!(ready, vec![(id, 512), (id, 1024), (id, 1536)]);
    assert_eq!(pf.pinned.len(), 1);
    // An ordinary chunked prefill streams nothing.
    pf.submit(req(8, 2000, 2, &[77]));
    while pf.step() > 0 {
        assert!(pf.out.kv_chunks.is_empty());
    }
}

/// `SGLANG_DISAGG_PREFILL_EARLY_SEND_CACHED_PREFIX` (on by default): a
/// handoff prefill whose prompt hits the prefill worker's radix cache sends
/// that prefix as its first pass begins (`before_pass`), before the forward
/// over the rest; later chunks report at their pass's end as before. With
/// the knob off only the finished chunks are reported.
#[test]
fn a_cached_prefix_is_sent_before_the_forward_pass() {
    for early in [true, false] {
        let mut pf = Harness::new(SglangConfig {
            total_pages: 1 << 12,
            chunked_prefill_size: 512,
            disagg_prefill_early_send_cached_prefix: early,
            ..SglangConfig::with_page_size(16)
        });
        assert!(SglangConfig::default().disagg_prefill_early_send_cached_prefix);
        // An ordinary request leaves 1024 prompt tokens (16 event blocks
        // of 64) in the radix cache.
        pf.submit(req(1, 1030, 1, &chunks()));
        pf.run_idle(20);
        let id = HandoffId(7);
        pf.apply(SchedulerCommand::SubmitHandoffPrefill {
            id,
            request: req(7, 2000, 8, &chunks()),
        });
        let mut ready = Vec::new();
        while pf.step() > 0 {
            ready.extend(
                pf.out
                    .kv_chunks
                    .iter()
                    .map(|c| (c.id, c.ready_tokens, c.before_pass)),
            );
        }
        let chunked = [(id, 1536, false)];
        if early {
            assert_eq!(ready, [&[(id, 1024, true)][..], &chunked].concat());
        } else {
            assert_eq!(ready, chunked);
        }
    }
}
