//! `kv_recompute_threshold` on the decode's pull (vLLM
//! `nixl/pull_scheduler.py`, `NixlPullConnectorScheduler
//! .get_num_new_matched_tokens` and `_should_recompute_remote_kv`): a pull
//! of fewer tokens than the threshold past the decode's own prefix hit is
//! granted with nothing to read, and the activated request prefills those
//! tokens itself.

use super::*;
use handoff_core::{CommandOutcome as O, SchedulerCommand as C};

fn with_threshold(threshold: u64) -> VllmConfig {
    VllmConfig {
        kv_recompute_threshold: threshold,
        ..cfg(256)
    }
}

/// Reserves `prompt` tokens with no prefix hit and returns the grant.
fn grant(threshold: u64, prompt: u32) -> handoff_core::ReservationSummary {
    let mut h = Harness::fixed(with_threshold(threshold));
    match h.reserve(HandoffId(1), req(1, prompt, 2, &[])) {
        O::Reserved(s) => s,
        other => panic!("expected a grant, got {other:?}"),
    }
}

#[test]
fn the_default_is_upstreams_64() {
    assert_eq!(VllmConfig::default().kv_recompute_threshold, 64);
    assert_eq!(crate::KV_RECOMPUTE_THRESHOLD, 64);
}

#[test]
fn threshold_boundaries_63_64_65_and_zero() {
    // Below the threshold: the fresh blocks are allocated, nothing is read.
    let s = grant(64, 63);
    assert_eq!(
        (s.physical_blocks, s.transfer_tokens, s.transfer_blocks),
        (4, 0, 0)
    );
    // At and above it: the whole uncached prompt is pulled.
    let s = grant(64, 64);
    assert_eq!(
        (s.physical_blocks, s.transfer_tokens, s.transfer_blocks),
        (4, 64, 4)
    );
    let s = grant(64, 65);
    assert_eq!(
        (s.physical_blocks, s.transfer_tokens, s.transfer_blocks),
        (5, 65, 5)
    );
    // 0 disables the rule.
    let s = grant(0, 63);
    assert_eq!(
        (s.physical_blocks, s.transfer_tokens, s.transfer_blocks),
        (4, 63, 4)
    );
    let s = grant(0, 1);
    assert_eq!(s.transfer_tokens, 1);
}

#[test]
fn the_count_is_past_the_local_prefix_hit() {
    // A published 5-block prefix; a 100-token prompt sharing it leaves 20
    // tokens to pull: below 64, recomputed; with threshold 16, pulled.
    for (threshold, pulled) in [(64, 0), (16, 20)] {
        let mut h = Harness::fixed(with_threshold(threshold));
        let prefix = content(7, 5);
        h.apply(C::Submit(req(1, 81, 1, &prefix)));
        h.run_idle();
        let s = match h.reserve(HandoffId(2), req(2, 100, 2, &prefix)) {
            O::Reserved(s) => s,
            other => panic!("{other:?}"),
        };
        assert_eq!(s.matched_prefix_tokens, 80);
        assert_eq!(s.transfer_tokens, pulled, "threshold {threshold}");
        assert_eq!(s.physical_blocks, 2);
    }
}

#[test]
fn a_recomputed_destination_prefills_its_uncached_tokens_after_activation() {
    let mut h = Harness::fixed(with_threshold(64));
    let prefix = content(8, 5);
    h.apply(C::Submit(req(1, 81, 1, &prefix)));
    h.run_idle();
    h.take_events();
    let mut full = prefix.clone();
    full.extend(content(9, 1));
    let r = req(2, 100, 3, &full);
    let id = HandoffId(2);
    assert!(matches!(h.reserve(id, r.clone()), O::Reserved(_)));
    // Nothing is published before activation (invariant 4), nor at it: the
    // tokens past the hit are not computed yet.
    assert_eq!(h.apply(C::ActivateDestination { id }), O::Applied);
    assert!(h.take_events().is_empty());
    h.step();
    // The pass prefills the 20 tokens past the hit, not one decode token,
    // and publishes the block they fill.
    assert_eq!(h.out.prefill_tokens, 20);
    assert_eq!(
        stored_hashes(&h.take_events()),
        hashes_of(&r)[5..6].to_vec()
    );
    assert_eq!(h.firsts[&RequestId(2)], 1);
    h.run_idle();
    assert_eq!(h.tokens[&RequestId(2)], 3);
    assert!(h.core.is_drained());
    h.ledger.check_drained().unwrap();
}

#[test]
fn a_pulled_destination_computes_no_prompt_token_but_its_last() {
    // The contrast: at the threshold the KV is read and the activated
    // request's first pass is a decode of its last prompt token.
    let mut h = Harness::fixed(with_threshold(64));
    let id = HandoffId(3);
    assert!(matches!(h.reserve(id, req(3, 64, 2, &[])), O::Reserved(_)));
    assert_eq!(h.apply(C::ActivateDestination { id }), O::Applied);
    h.step();
    assert_eq!(h.out.prefill_tokens, 0);
    assert_eq!(h.firsts[&RequestId(3)], 1);
    h.run_idle();
    h.ledger.check_drained().unwrap();
}

#[test]
fn a_recomputed_destination_cancelled_before_activation_frees_once() {
    let mut h = Harness::fixed(with_threshold(64));
    let id = HandoffId(4);
    assert!(matches!(h.reserve(id, req(4, 40, 2, &[])), O::Reserved(_)));
    assert_eq!(h.cap().reserved_destination_blocks, 3);
    assert_eq!(h.apply(C::CancelDestination { id }), O::Applied);
    assert_eq!(h.cap().reserved_destination_blocks, 0);
    assert_eq!(h.apply(C::CancelDestination { id }), O::Noop);
    assert!(h.core.is_drained());
    h.ledger.check_drained().unwrap();
}
