//! A client's cancel under vLLM's rules (`CancelFrees::Upstream`) and the
//! earlier free-at-cancel rule (`CancelFrees::Immediately`), on two workers
//! whose facts this test carries by hand: a finished prefill keeps its KV
//! until the decode's read notice (vllm-project/vllm PR #25067); a decode
//! whose load is in flight keeps its blocks until the load ends
//! (PR #32255); a decode cancelled before its load sends the prefill the
//! release that frees it at once (PRs #41269, #57570).

use handoff_core::testing::FakeCore;
use handoff_core::{
    Backend, CancelFrees, CancelReason, Generation, HandoffConfig, HandoffId, HandoffIdGen,
    HandoffPolicy, Instant, Request, RequestId, Role, SourceReady, TransferResult, Worker,
    WorkerEvent, WorkerId, WorkerRequest,
};

const P: WorkerId = WorkerId(0);
const D: WorkerId = WorkerId(1);

struct Pair {
    p: Worker<FakeCore>,
    d: Worker<FakeCore>,
    id: HandoffId,
    request: Request,
    now: Instant,
    /// Roles that ended, with their reasons: P's, then D's, per drain.
    ended: Vec<(Role, Option<CancelReason>)>,
}

impl Pair {
    fn new(rule: CancelFrees) -> Pair {
        let config = HandoffConfig {
            cancel_frees: rule,
            ..HandoffConfig::for_backend(Backend::Vllm)
        };
        let worker = |w| {
            Worker::new(
                w,
                Generation::FIRST,
                HandoffPolicy::SourceFirst,
                config,
                FakeCore::new(Backend::Vllm, 4096, 16),
            )
        };
        let request = Request {
            id: RequestId(7),
            prompt_tokens: 64,
            max_output_tokens: 8,
            prefix_hashes: vec![],
            hash_block_tokens: 16,
            session: None,
            arrival: Instant::ZERO,
            lora: None,
        };
        Pair {
            p: worker(P),
            d: worker(D),
            id: HandoffIdGen::new(P, Generation::FIRST).next_id(),
            request,
            now: Instant::ZERO,
            ended: Vec::new(),
        }
    }

    /// Runs the prefill to its pin on P.
    fn pin(&mut self) {
        let src = WorkerRequest::HandoffSource {
            id: self.id,
            request: self.request.clone(),
        };
        self.p.handle_request(src, self.now).unwrap();
        for _ in 0..10 {
            self.now = Instant(self.now.0 + 1_000_000);
            self.p.step(self.now, self.now);
            if self.p.capacity().pinned_source_blocks > 0 {
                break;
            }
        }
        assert!(
            self.p.capacity().pinned_source_blocks > 0,
            "the prefill pins"
        );
        self.drain();
    }

    /// Routes the decode to D, which reserves and starts its read.
    fn route(&mut self) {
        let dst = WorkerRequest::HandoffDestination {
            id: self.id,
            request: self.request.clone(),
            source: P,
            ready: Some(SourceReady {
                blocks: 4,
                tokens: 64,
            }),
        };
        self.d.handle_request(dst, self.now).unwrap();
        self.drain();
        assert!(
            self.d.capacity().reserved_destination_blocks > 0,
            "D reserves"
        );
    }

    /// Carries every fact between the two and collects the role ends.
    fn drain(&mut self) {
        loop {
            let mut moved = false;
            while let Some(t) = self.p.poll_transmit() {
                self.d.handle_message(P, t.msg, self.now);
                moved = true;
            }
            while let Some(t) = self.d.poll_transmit() {
                self.p.handle_message(D, t.msg, self.now);
                moved = true;
            }
            if !moved {
                break;
            }
        }
        for w in [&mut self.p, &mut self.d] {
            while let Some(e) = w.poll_event() {
                if let WorkerEvent::RoleEnded { role, reason, .. } = e {
                    self.ended.push((role, reason));
                }
            }
        }
    }

    fn cancel_both(&mut self) {
        self.p.cancel(self.id, CancelReason::Client, self.now);
        self.d.cancel(self.id, CancelReason::Client, self.now);
        self.drain();
    }

    fn pinned(&self) -> u64 {
        self.p.capacity().pinned_source_blocks
    }

    fn reserved(&self) -> u64 {
        self.d.capacity().reserved_destination_blocks
    }
}

#[test]
fn a_cancel_after_the_pin_leaves_the_source_pinned_until_the_read_notice() {
    let mut t = Pair::new(CancelFrees::Upstream);
    t.pin();
    t.route();
    // The read is in flight when the client goes: both sides keep their KV.
    t.cancel_both();
    assert!(t.pinned() > 0, "the source holds its KV past the cancel");
    assert!(
        t.reserved() > 0,
        "the decode holds its blocks while it loads"
    );
    assert!(t.ended.is_empty(), "{:?}", t.ended);
    // The load ends: the decode frees its blocks and its notice frees the
    // source; nothing decodes.
    t.d.handle_transfer_done(t.id, TransferResult::Completed, t.now);
    t.drain();
    assert_eq!((t.pinned(), t.reserved()), (0, 0));
    assert_eq!(
        t.d.capacity().active_blocks,
        0,
        "the cancelled request never runs"
    );
    assert_eq!(
        t.ended,
        [
            (Role::Source, None),
            (Role::Destination, Some(CancelReason::Client))
        ]
    );
    assert!(t.p.is_drained() && t.d.is_drained());
}

#[test]
fn a_decode_cancelled_before_its_load_releases_the_source_at_once() {
    let mut t = Pair::new(CancelFrees::Upstream);
    t.pin();
    // The decode request is routed but not yet loading (it has not heard
    // that the source is ready).
    let dst = WorkerRequest::HandoffDestination {
        id: t.id,
        request: t.request.clone(),
        source: P,
        ready: None,
    };
    t.d.handle_request(dst, t.now).unwrap();
    t.drain();
    assert_eq!(t.reserved(), 0, "routed, not yet reserving");
    t.cancel_both();
    assert_eq!(t.pinned(), 0, "the release frees the source at once");
    assert_eq!(
        t.ended,
        [
            (Role::Source, Some(CancelReason::PeerAborted)),
            (Role::Destination, Some(CancelReason::Client))
        ]
    );
}

#[test]
fn a_cancel_of_a_pinned_source_alone_waits_for_its_lease() {
    let mut t = Pair::new(CancelFrees::Upstream);
    t.pin();
    // No decode was ever sent (a proxy that gave up first): the abort is
    // ignored and the KV waits for the lease (`VLLM_NIXL_ABORT_REQUEST_TIMEOUT`).
    t.p.cancel(t.id, CancelReason::Client, t.now);
    t.drain();
    assert!(t.pinned() > 0);
    let deadline = t.p.poll_timeout().expect("the lease is armed");
    t.now = deadline;
    t.p.handle_timeout(deadline);
    t.drain();
    assert_eq!(t.pinned(), 0);
    assert_eq!(t.ended, [(Role::Source, Some(CancelReason::LeaseExpired))]);
}

#[test]
fn the_immediate_rule_frees_both_sides_at_the_cancel() {
    let mut t = Pair::new(CancelFrees::Immediately);
    t.pin();
    t.route();
    t.cancel_both();
    assert_eq!((t.pinned(), t.reserved()), (0, 0));
    assert_eq!(
        t.ended,
        [
            (Role::Source, Some(CancelReason::Client)),
            (Role::Destination, Some(CancelReason::Client))
        ]
    );
}

#[test]
fn a_decode_routed_after_the_cancel_is_told_and_never_decodes() {
    let mut t = Pair::new(CancelFrees::Upstream);
    t.pin();
    // The client goes before the decode's route reaches D (it raced the
    // cancel): only the source hears of it, and keeps its KV.
    t.p.cancel(t.id, CancelReason::Client, t.now);
    t.route();
    // D reserved and started reading; the abandoned source told it of the
    // cancel, so it keeps its blocks only until its load ends.
    assert!(t.pinned() > 0 && t.reserved() > 0);
    t.d.handle_transfer_done(t.id, TransferResult::Completed, t.now);
    t.drain();
    assert_eq!((t.pinned(), t.reserved()), (0, 0));
    assert_eq!(
        t.d.capacity().active_blocks,
        0,
        "the cancelled request never runs"
    );
    assert_eq!(
        t.ended,
        [
            (Role::Source, None),
            (Role::Destination, Some(CancelReason::Client))
        ]
    );
}
