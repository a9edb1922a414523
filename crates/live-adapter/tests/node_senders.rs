//! A wall-clock node takes work, cancels and clocks only from its
//! frontend: a peer (another engine's rank on the side channel) that sends
//! them is ignored and counted, while the frontend's are served.

use handoff_core::{
    Generation, HandoffConfig, HandoffPolicy, Instant, Request, RequestId, WorkerEvent, WorkerId,
    WorkerRequest,
};
use handoff_deployment::{make_core, EngineSpec};
use handoff_engine::TransferModel;
use handoff_live_adapter::{NodeConfig, WallClock, WorkerNode};
use handoff_transport::{ChannelNet, Frame, Incoming, Transport, FRONTEND};
use std::time::Duration;

fn request(id: u64) -> Request {
    Request {
        id: RequestId(id),
        prompt_tokens: 64,
        max_output_tokens: 4,
        prefix_hashes: Vec::new(),
        hash_block_tokens: 16,
        session: None,
        arrival: Instant::ZERO,
        lora: None,
    }
}

/// Whether the frontend hears `id` finish within `wait`.
fn finishes(fe: &impl Transport, id: RequestId, wait: Duration) -> bool {
    let deadline = std::time::Instant::now() + wait;
    while let Ok(inc) = fe.incoming().recv_deadline(deadline) {
        if let Incoming::Frame {
            frame: Frame::Event(WorkerEvent::RequestFinished { request, .. }),
            ..
        } = inc
        {
            if request == id {
                return true;
            }
        }
    }
    false
}

#[test]
fn work_cancels_and_clocks_count_only_from_the_frontend() {
    let net = ChannelNet::new();
    let fe = net.endpoint(FRONTEND, Generation(0));
    let intruder = net.endpoint(WorkerId(9), Generation(0));
    let ep = net.endpoint(WorkerId(1), Generation(0));
    let cfg = NodeConfig {
        id: WorkerId(1),
        generation: Generation(0),
        policy: HandoffPolicy::SourceFirst,
        handoff: HandoffConfig::default(),
        frontend: FRONTEND,
        transfer: TransferModel::default(),
    };
    let core = make_core(&EngineSpec::default()).expect("a core");
    let node = WorkerNode::new(cfg, core, ep, WallClock::start(1.0));
    let run = std::thread::spawn(move || node.run().0);
    let to = WorkerId(1);
    let req = |id| Frame::Request(WorkerRequest::Ordinary(request(id)));
    intruder.send(to, req(1)).unwrap();
    intruder
        .send(
            to,
            Frame::Clock {
                origin_unix_nanos: 0,
                speed_micros: u64::MAX,
            },
        )
        .unwrap();
    assert!(
        !finishes(&fe, RequestId(1), Duration::from_millis(500)),
        "a peer's request was served"
    );
    fe.send(to, req(2)).unwrap();
    assert!(
        finishes(&fe, RequestId(2), Duration::from_secs(10)),
        "the frontend's request is served on the frontend's clock"
    );
    fe.close();
    let stats = run.join().expect("no panic");
    assert_eq!(stats.foreign_frames, 2);
}
