use super::*;
use handoff_core::session::SessionEvent;

fn frontend() -> Frontend {
    let cfg = FrontendConfig {
        policy: HandoffPolicy::DestinationFirst,
        aggregated: false,
        mode: RouterMode::RoundRobin,
        block_size: 64,
        seed: 1,
        kv: crate::KvKnobs::default(),
        hop: Duration::ZERO,
        disabled_delay: Duration::ZERO,
    };
    let workers = [
        (WorkerId(0), Pool::Prefill),
        (WorkerId(1), Pool::Decode),
        (WorkerId(2), Pool::Decode),
    ];
    let mut f = Frontend::new(cfg, &workers);
    f.set_sessions(SessionRouting {
        rebalance_threshold: 0,
    });
    f
}

fn turn(id: u64) -> Request {
    Request {
        id: RequestId(id),
        prompt_tokens: 1000 * id as u32,
        max_output_tokens: 4,
        prefix_hashes: vec![1, 2],
        hash_block_tokens: 512,
        session: Some(SessionId(5)),
        arrival: Instant::ZERO,
        lora: None,
    }
}

fn finish(f: &mut Frontend, w: WorkerId, r: u64) {
    let e = WorkerEvent::RequestFinished {
        request: RequestId(r),
        at: Instant::ZERO,
    };
    f.on_event(w, Pool::Decode, &e, Instant::ZERO);
}

#[test]
fn turns_go_direct_while_resident_and_reseed_after_an_eviction() {
    let mut f = frontend();
    let seed = f.arrive(turn(1), Instant::ZERO);
    assert_eq!(f.last_session_route(), Some(SessionRoute::Seed));
    let d = match &seed[..] {
        [(WorkerId(0), WorkerRequest::HandoffSource { .. }), (d, WorkerRequest::HandoffDestination { .. })] => {
            *d
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(f.session_worker(SessionId(5)), Some(d));
    finish(&mut f, d, 1);

    let direct = f.arrive(turn(2), Instant::ZERO);
    assert_eq!(f.last_session_route(), Some(SessionRoute::Direct));
    assert!(matches!(&direct[..], [(w, WorkerRequest::Ordinary(_))] if *w == d));
    let booked = f.decode_router().and_then(|r| r.booking(RequestId(2)));
    assert_eq!(
        booked.map(|b| b.worker),
        Some(d),
        "direct turns book decode load"
    );
    finish(&mut f, d, 2);
    assert_eq!(f.decode_router().map(|r| r.live_bookings()), Some(0));

    // Another worker's eviction report does not move the session.
    let evicted = |reason| WorkerEvent::Session {
        event: SessionEvent::SlotEvicted {
            session: SessionId(5),
            turn: RequestId(2),
            tokens: 9,
            reason,
        },
        at: Instant::ZERO,
    };
    let other = if d == WorkerId(1) {
        WorkerId(2)
    } else {
        WorkerId(1)
    };
    f.on_event(
        other,
        Pool::Decode,
        &evicted(SlotEvictReason::Capacity),
        Instant::ZERO,
    );
    assert_eq!(f.session_worker(SessionId(5)), Some(d));
    f.on_event(
        d,
        Pool::Decode,
        &evicted(SlotEvictReason::Replaced),
        Instant::ZERO,
    );
    assert_eq!(
        f.session_worker(SessionId(5)),
        Some(d),
        "a replaced slot lives on"
    );
    f.on_event(
        d,
        Pool::Decode,
        &evicted(SlotEvictReason::Capacity),
        Instant::ZERO,
    );
    assert_eq!(f.session_worker(SessionId(5)), None);

    let reseed = f.arrive(turn(3), Instant::ZERO);
    assert_eq!(
        f.last_session_route(),
        Some(SessionRoute::Reseed(ReseedCause::Capacity))
    );
    assert_eq!(reseed.len(), 2);
    let now_at = f.session_worker(SessionId(5)).expect("resident again");

    let closes = f.close_session(SessionId(5));
    assert_eq!(
        closes,
        vec![
            (now_at, WorkerRequest::CloseSession(SessionId(5))),
            (WorkerId(0), WorkerRequest::CloseSession(SessionId(5)))
        ]
    );
    assert_eq!(f.session_worker(SessionId(5)), None);
}

/// A slot eviction reported after a newer turn of the session was placed
/// on the same worker is the older slot's: the newer turn builds its own
/// slot there, so the session stays (and a close still reaches that
/// worker). Only the placed turn's own slot going takes the session off.
#[test]
fn an_older_slots_eviction_keeps_a_newer_placement_on_the_same_worker() {
    let mut f = frontend();
    let d = f.arrive(turn(1), Instant::ZERO)[1].0;
    finish(&mut f, d, 1);
    let evicted = |turn| WorkerEvent::Session {
        event: SessionEvent::SlotEvicted {
            session: SessionId(5),
            turn: RequestId(turn),
            tokens: 9,
            reason: SlotEvictReason::Capacity,
        },
        at: Instant::ZERO,
    };
    // Turn 2 goes direct; turn 1's slot is evicted before turn 2 admits.
    f.arrive(turn(2), Instant::ZERO);
    assert_eq!(f.last_session_route(), Some(SessionRoute::Direct));
    f.on_event(d, Pool::Decode, &evicted(1), Instant::ZERO);
    assert_eq!(f.session_worker(SessionId(5)), Some(d), "turn 2 is placed");
    finish(&mut f, d, 2);
    f.arrive(turn(3), Instant::ZERO);
    assert_eq!(f.last_session_route(), Some(SessionRoute::Direct));
    finish(&mut f, d, 3);
    // Turn 3's own slot going takes the session off `d`.
    f.on_event(d, Pool::Decode, &evicted(3), Instant::ZERO);
    assert_eq!(f.session_worker(SessionId(5)), None);
    // A reseed placed on `d` survives the eviction of turn 3's slot
    // reported late, and the close reaches `d`.
    let reseed = f.arrive(turn(4), Instant::ZERO);
    assert_eq!(
        f.last_session_route(),
        Some(SessionRoute::Reseed(ReseedCause::Capacity))
    );
    let to = reseed[1].0;
    f.on_event(to, Pool::Decode, &evicted(3), Instant::ZERO);
    assert_eq!(f.session_worker(SessionId(5)), Some(to));
    assert!(f
        .close_session(SessionId(5))
        .contains(&(to, WorkerRequest::CloseSession(SessionId(5)))));
}

#[test]
fn a_lost_worker_reseeds_its_sessions_and_rebalance_moves_hot_ones() {
    let mut f = frontend();
    let seed = f.arrive(turn(1), Instant::ZERO);
    let d = seed[1].0;
    f.worker_lost(d);
    f.arrive(turn(2), Instant::ZERO);
    assert_eq!(
        f.last_session_route(),
        Some(SessionRoute::Reseed(ReseedCause::WorkerDown))
    );

    let mut f = frontend();
    f.set_sessions(SessionRouting {
        rebalance_threshold: 1,
    });
    let d = f.arrive(turn(1), Instant::ZERO)[1].0;
    // Turn 1 is still booked on `d`: one more than the other worker.
    let routes = f.arrive(turn(2), Instant::ZERO);
    assert_eq!(
        f.last_session_route(),
        Some(SessionRoute::Reseed(ReseedCause::Rebalance))
    );
    let to = f.session_worker(SessionId(5)).unwrap();
    assert_ne!(to, d);
    assert!(routes.contains(&(d, WorkerRequest::CloseSession(SessionId(5)))));
}

#[test]
fn sessions_are_ignored_without_destination_first() {
    let mut cfgd = frontend();
    cfgd.sessions.routing = None;
    cfgd.arrive(turn(1), Instant::ZERO);
    assert_eq!(cfgd.last_session_route(), None);
    assert!(cfgd.close_session(SessionId(5)).is_empty());
}
