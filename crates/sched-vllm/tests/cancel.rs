//! A client's cancel on vLLM's block pool: two workers on `VllmCore`, the
//! facts between them carried by hand. Under `CancelFrees::Upstream` a
//! prefill that already finished keeps its blocks past the abort
//! (vllm-project/vllm PR #25067) and a decode whose load is in flight keeps
//! its blocks until the load ends (PR #32255); the pool's identity holds
//! throughout and both pools end with nothing used. Under
//! `CancelFrees::Immediately` both free at the cancel.

use handoff_core::accounting::check_identity;
use handoff_core::{
    CancelFrees, CancelReason, Generation, HandoffConfig, HandoffIdGen, HandoffPolicy, Instant,
    Request, RequestId, SourceReady, TransferResult, Worker, WorkerId, WorkerRequest,
};
use handoff_sched_vllm::{VllmConfig, VllmCore};

const P: WorkerId = WorkerId(0);
const D: WorkerId = WorkerId(1);

fn worker(id: WorkerId, rule: CancelFrees) -> Worker<VllmCore> {
    let core = VllmCore::new(VllmConfig {
        num_blocks: 256,
        block_size: 16,
        ..VllmConfig::default()
    });
    let config = HandoffConfig {
        cancel_frees: rule,
        ..HandoffConfig::for_backend(handoff_core::Backend::Vllm)
    };
    Worker::new(
        id,
        Generation::FIRST,
        HandoffPolicy::SourceFirst,
        config,
        core,
    )
}

fn carry(p: &mut Worker<VllmCore>, d: &mut Worker<VllmCore>, now: Instant) {
    loop {
        let mut moved = false;
        while let Some(t) = p.poll_transmit() {
            d.handle_message(P, t.msg, now);
            moved = true;
        }
        while let Some(t) = d.poll_transmit() {
            p.handle_message(D, t.msg, now);
            moved = true;
        }
        while p.poll_event().is_some() || d.poll_event().is_some() {}
        for w in [&*p, &*d] {
            check_identity(&w.capacity()).expect("block identity");
        }
        if !moved {
            return;
        }
    }
}

/// Pins a 160-token prefill on P, routes its decode to D (reserved,
/// reading), cancels both roles for the client; returns the pair and `now`.
fn cancelled_mid_read(rule: CancelFrees) -> (Worker<VllmCore>, Worker<VllmCore>, Instant) {
    let (mut p, mut d) = (worker(P, rule), worker(D, rule));
    let id = HandoffIdGen::new(P, Generation::FIRST).next_id();
    let request = Request {
        id: RequestId(3),
        prompt_tokens: 160,
        max_output_tokens: 4,
        prefix_hashes: vec![],
        hash_block_tokens: 16,
        session: None,
        arrival: Instant::ZERO,
        lora: None,
    };
    let mut now = Instant::ZERO;
    let src = WorkerRequest::HandoffSource {
        id,
        request: request.clone(),
    };
    p.handle_request(src, now).unwrap();
    while p.capacity().pinned_source_blocks == 0 {
        now = p.step(now, now).expect("the prefill runs");
    }
    carry(&mut p, &mut d, now);
    let dst = WorkerRequest::HandoffDestination {
        id,
        request,
        source: P,
        ready: Some(SourceReady {
            blocks: 10,
            tokens: 160,
        }),
    };
    d.handle_request(dst, now).unwrap();
    // The decode's scheduler allocates its blocks in a pass
    // (WAITING_FOR_REMOTE_KVS), then starts the read.
    for _ in 0..4 {
        carry(&mut p, &mut d, now);
        if d.capacity().reserved_destination_blocks > 0 {
            break;
        }
        now = d.step(now, now).unwrap_or(now);
    }
    carry(&mut p, &mut d, now);
    assert!(d.capacity().reserved_destination_blocks > 0, "D reserved");
    p.cancel(id, CancelReason::Client, now);
    d.cancel(id, CancelReason::Client, now);
    carry(&mut p, &mut d, now);
    (p, d, now)
}

#[test]
fn upstream_keeps_both_sides_until_the_load_ends() {
    let (mut p, mut d, now) = cancelled_mid_read(CancelFrees::Upstream);
    assert_eq!(p.capacity().pinned_source_blocks, 10);
    assert!(d.capacity().reserved_destination_blocks > 0);
    let id = HandoffIdGen::new(P, Generation::FIRST).next_id();
    d.handle_transfer_done(id, TransferResult::Completed, now);
    carry(&mut p, &mut d, now);
    for w in [&p, &d] {
        let c = w.capacity();
        assert_eq!(c.kv_used_blocks(), 0, "{c:?}");
    }
    assert!(p.is_drained() && d.is_drained());
}

#[test]
fn the_immediate_rule_frees_both_sides_at_the_cancel() {
    let (p, d, _) = cancelled_mid_read(CancelFrees::Immediately);
    assert_eq!(p.capacity().kv_used_blocks(), 0);
    assert_eq!(d.capacity().kv_used_blocks(), 0);
}
