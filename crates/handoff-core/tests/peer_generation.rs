//! A worker takes a peer it has not heard of to be at its first
//! generation: no hello is needed for a later, newer generation of that
//! peer to void the attempts with it.

use handoff_core::testing::FakeCore;
use handoff_core::{
    Backend, DestinationEventKind, Generation, HandoffConfig, HandoffIdGen, HandoffPolicy, Instant,
    LifecycleEvent, Request, RequestId, Worker, WorkerEvent, WorkerId, WorkerRequest,
};

fn cancellations(w: &mut Worker<FakeCore>) -> usize {
    let mut n = 0;
    while let Some(ev) = w.poll_event() {
        if let WorkerEvent::Transition(t) = ev {
            if t.event == LifecycleEvent::Destination(DestinationEventKind::Cancelled) {
                n += 1;
            }
        }
    }
    n
}

#[test]
fn an_unheard_peer_is_at_its_first_generation() {
    let source = WorkerId(0);
    let mut w = Worker::new(
        WorkerId(1),
        Generation::FIRST,
        HandoffPolicy::DestinationFirst,
        HandoffConfig::default(),
        FakeCore::new(Backend::Sglang, 4096, 16),
    );
    let id = HandoffIdGen::new(source, Generation::FIRST).next_id();
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
    let dest = WorkerRequest::HandoffDestination {
        id,
        request,
        source,
        ready: None,
    };
    w.handle_request(dest, Instant::ZERO).unwrap();
    assert_eq!(cancellations(&mut w), 0);
    // A newer generation voids the attempt, though no hello came before.
    w.handle_peer_generation(source, Generation::FIRST.next(), Instant::ZERO);
    assert_eq!(cancellations(&mut w), 1);
}
