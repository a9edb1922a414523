//! Deterministic simulation testing (`handoff_tests::dst`): generated
//! schedules on the real vLLM and SGLang cores break no rule, and the
//! checker catches each kind of broken input fed to it by hand, so it
//! cannot pass silently. `cargo xtask dst --schedules N --seed S` runs many
//! more in release; `tests/dst_regressions.rs` holds the shrunk schedules
//! that once failed.

use handoff_core::{
    CancelReason, DestinationEventKind as DE, DestinationState as DS, HandoffId, Instant, KvEvent,
    KvEventData, LifecycleEvent, OwnershipDelta, Request, RequestId, Role, RoleState,
    SourceEventKind as SE, SourceState as SS, Transition, WorkerEvent, WorkerId, WorkerRequest,
};
use handoff_engine::Route;
use handoff_router::Pool;
use handoff_tests::dst::{self, Checker, Kind, ServingView};
use std::collections::{BTreeMap, BTreeSet};

#[test]
fn two_hundred_schedules_break_no_rule() {
    let sum = dst::run_many(1, 200, |_, _| {});
    let report: String = sum
        .failing
        .iter()
        .take(5)
        .map(|(seed, vs)| {
            format!(
                "seed {seed}:\n{}",
                vs.iter().map(|v| format!("  {v}\n")).collect::<String>()
            )
        })
        .collect();
    assert!(sum.failing.is_empty(), "{report}");
    // The schedules reach the hard paths, so "no violation" means something.
    let p = sum.paths;
    assert!(sum.faulted > 100, "faulted {}", sum.faulted);
    assert!(sum.faults.kills > 0 && sum.faults.partitions > 0 && sum.faults.cancels > 0);
    assert!(sum.faults.facts_dropped > 0 && sum.faults.facts_duplicated > 0);
    assert!(sum.faults.transfers_failed > 0);
    for (name, n) in [
        ("lease expiries", p.lease_expiries),
        ("reservation expiries", p.reservation_expiries),
        ("client cancels", p.client_cancels),
        ("peer aborts", p.peer_aborts),
        ("peer lost", p.peer_lost),
        ("transfer failures", p.transfer_failures),
        ("failed KV loads", p.kv_load_failures),
        ("stale reads", p.stale_reads),
        ("reservation waits", p.reservation_waits),
        ("requests finished", p.finished),
    ] {
        assert!(n > 0, "no schedule reached {name}: {p:?}");
    }
}

const SRC: WorkerId = WorkerId(0);
const DST: WorkerId = WorkerId(1);
const ID: HandoffId = HandoffId(7);
const R: RequestId = RequestId(0);

fn checker() -> Checker {
    Checker::new(vec![Pool::Prefill, Pool::Decode], 16, vec![R])
}

fn tr(
    w: WorkerId,
    role: Role,
    event: LifecycleEvent,
    from: RoleState,
    to: RoleState,
) -> WorkerEvent {
    WorkerEvent::Transition(Transition {
        id: ID,
        request: R,
        worker: w,
        role,
        event,
        from,
        to,
        delta: OwnershipDelta::NONE,
        at: Instant::ZERO,
    })
}

fn ended(role: Role, reason: Option<CancelReason>) -> WorkerEvent {
    WorkerEvent::RoleEnded {
        id: ID,
        request: R,
        role,
        reason,
        at: Instant::ZERO,
    }
}

fn kinds(c: &Checker) -> BTreeSet<Kind> {
    c.violations().iter().map(|v| v.kind).collect()
}

#[test]
fn a_double_role_end_is_caught() {
    let mut c = checker();
    let src = |s| RoleState::Source(s);
    c.event(
        SRC,
        &tr(
            SRC,
            Role::Source,
            LifecycleEvent::Source(SE::Start),
            src(SS::NotStarted),
            src(SS::Computing),
        ),
        Instant::ZERO,
    );
    c.event(
        SRC,
        &tr(
            SRC,
            Role::Source,
            LifecycleEvent::Source(SE::Cancelled),
            src(SS::Computing),
            src(SS::Released),
        ),
        Instant::ZERO,
    );
    c.event(
        SRC,
        &ended(Role::Source, Some(CancelReason::Client)),
        Instant::ZERO,
    );
    assert!(c.violations().is_empty(), "{:?}", c.violations());
    c.event(
        SRC,
        &ended(Role::Source, Some(CancelReason::Client)),
        Instant::ZERO,
    );
    assert_eq!(kinds(&c), BTreeSet::from([Kind::RoleEnd]));
    // And a transition after Released.
    c.event(
        SRC,
        &tr(
            SRC,
            Role::Source,
            LifecycleEvent::Source(SE::PrefillPinned),
            src(SS::Computing),
            src(SS::Pinned),
        ),
        Instant::ZERO,
    );
    assert!(kinds(&c).contains(&Kind::Transition));
}

#[test]
fn a_lease_opened_twice_is_caught() {
    let mut c = checker();
    let src = |s| RoleState::Source(s);
    for (from, to, ev) in [
        (SS::NotStarted, SS::Computing, SE::Start),
        (SS::Computing, SS::Pinned, SE::PrefillPinned),
        // Breaks the chain: Pinned again from Computing.
        (SS::Computing, SS::Pinned, SE::PrefillPinned),
    ] {
        c.event(
            SRC,
            &tr(
                SRC,
                Role::Source,
                LifecycleEvent::Source(ev),
                src(from),
                src(to),
            ),
            Instant::ZERO,
        );
    }
    let k = kinds(&c);
    assert!(
        k.contains(&Kind::Transition) && k.contains(&Kind::Ledger),
        "{k:?}"
    );
}

fn request() -> Request {
    Request {
        id: R,
        prompt_tokens: 64,
        max_output_tokens: 4,
        prefix_hashes: vec![42],
        hash_block_tokens: 512,
        session: None,
        arrival: Instant::ZERO,
        lora: None,
    }
}

fn reserve(c: &mut Checker) {
    let dst = |s| RoleState::Destination(s);
    c.routed(&Route {
        to: DST,
        request: WorkerRequest::HandoffDestination {
            id: ID,
            request: request(),
            source: SRC,
            ready: None,
        },
        delay: handoff_core::Duration::ZERO,
    });
    for (from, to, ev) in [
        (DS::NotRouted, DS::Reserving, DE::Routed),
        (DS::Reserving, DS::Reserved, DE::Reserved),
    ] {
        c.event(
            DST,
            &tr(
                DST,
                Role::Destination,
                LifecycleEvent::Destination(ev),
                dst(from),
                dst(to),
            ),
            Instant::ZERO,
        );
    }
}

fn stored(c: &mut Checker) {
    let mut hashes = Vec::new();
    request().block_hashes(16, &mut hashes);
    c.event(
        DST,
        &WorkerEvent::Kv {
            event: KvEvent {
                event_id: 0,
                data: KvEventData::Stored {
                    parent_hash: None,
                    block_hashes: hashes,
                },
            },
            at: Instant::ZERO,
        },
        Instant::ZERO,
    );
}

#[test]
fn stored_before_activation_is_caught_and_after_is_not() {
    let mut c = checker();
    reserve(&mut c);
    stored(&mut c);
    assert_eq!(kinds(&c), BTreeSet::from([Kind::StoredBeforeActivation]));

    let mut c = checker();
    reserve(&mut c);
    c.event(
        DST,
        &tr(
            DST,
            Role::Destination,
            LifecycleEvent::Destination(DE::ReceiveCompleted),
            RoleState::Destination(DS::Reserved),
            RoleState::Destination(DS::Active),
        ),
        Instant::ZERO,
    );
    stored(&mut c);
    assert!(c.violations().is_empty(), "{:?}", c.violations());
}

#[test]
fn a_transfer_before_the_reservation_is_caught() {
    let transfer = WorkerEvent::StartTransfer {
        id: ID,
        request: R,
        source: SRC,
        destination: DST,
        tokens: 64,
        blocks: 4,
        at: Instant::ZERO,
    };
    let mut c = checker();
    c.event(SRC, &transfer, Instant::ZERO);
    assert_eq!(kinds(&c), BTreeSet::from([Kind::TransferBeforeReservation]));

    let mut c = checker();
    reserve(&mut c);
    c.event(SRC, &transfer, Instant::ZERO);
    assert!(c.violations().is_empty(), "{:?}", c.violations());
    c.event(SRC, &transfer, Instant::ZERO);
    assert_eq!(kinds(&c), BTreeSet::from([Kind::TransferBeforeReservation]));
}

/// A serving director's state, set by hand.
#[derive(Default)]
struct View {
    in_flight: BTreeSet<RequestId>,
    prefill: BTreeMap<RequestId, WorkerId>,
    decode: BTreeMap<RequestId, WorkerId>,
}

impl ServingView for View {
    fn migrated(&self, _r: RequestId) -> bool {
        // The synthetic inputs never migrate.
        false
    }

    fn in_flight(&self, r: RequestId) -> bool {
        self.in_flight.contains(&r)
    }
    fn booked(&self, pool: Pool, r: RequestId) -> Option<WorkerId> {
        match pool {
            Pool::Decode => self.decode.get(&r).copied(),
            _ => self.prefill.get(&r).copied(),
        }
    }
    fn live_bookings(&self, pool: Pool) -> usize {
        match pool {
            Pool::Decode => self.decode.len(),
            _ => self.prefill.len(),
        }
    }
    fn audit(&self) -> Result<(), String> {
        Ok(())
    }
    fn out_of_order_kv_events(&self) -> u64 {
        0
    }
}

#[test]
fn a_request_failed_then_finished_and_a_double_release_are_caught() {
    let mut c = checker();
    let mut v = View::default();
    v.in_flight.insert(R);
    v.prefill.insert(R, SRC);
    v.decode.insert(R, DST);
    c.arrived(&v, true);
    // The destination ends early: the request fails, its decode booking
    // comes off (by its trigger).
    let e = ended(Role::Destination, Some(CancelReason::Client));
    let call = c.event_call(DST, &e);
    v.in_flight.remove(&R);
    v.decode.remove(&R);
    c.judge_event(&v, call);
    assert!(c.violations().is_empty(), "{:?}", c.violations());
    // ... and yet its decode finishes.
    let e = WorkerEvent::RequestFinished {
        request: R,
        at: Instant::ZERO,
    };
    let call = c.event_call(DST, &e);
    c.judge_event(&v, call);
    assert_eq!(kinds(&c), BTreeSet::from([Kind::Terminal, Kind::Booking]));
}

#[test]
fn a_booking_released_by_the_wrong_event_is_caught() {
    let mut c = checker();
    let mut v = View::default();
    v.in_flight.insert(R);
    v.prefill.insert(R, SRC);
    c.arrived(&v, true);
    // A KV event is no reason to drop the prefill booking.
    let e = WorkerEvent::PrefillPinned {
        id: ID,
        request: R,
        blocks: 4,
        tokens: 64,
        at: Instant::ZERO,
    };
    let call = c.event_call(SRC, &e);
    v.prefill.remove(&R);
    c.judge_event(&v, call);
    assert_eq!(kinds(&c), BTreeSet::from([Kind::Booking]));
}

#[test]
fn schedules_round_trip_through_their_text() {
    for seed in 0..50 {
        let s = dst::Schedule::new(seed);
        let back =
            dst::Schedule::from_text(&s.deployment(), &s.cfg.faults.to_string(), &s.trace_jsonl())
                .expect("parses");
        assert_eq!(back.deployment(), s.deployment());
        assert_eq!(back.cfg.faults, s.cfg.faults);
        assert_eq!(back.items, s.items);
        assert_eq!(back.specs, s.specs);
    }
}

/// The source of [`ID`] started, pinned at 0 and renewed at `renewed_s`
/// (if any), then ended for `reason` at `end_s`; its destination then
/// reports a stale read. Returns the checker.
fn stale_read_after(
    terms: handoff_tests::dst::LeaseTerms,
    renewed_s: Option<u64>,
    reason: CancelReason,
    end_s: u64,
) -> Checker {
    let mut c = checker().with_lease_terms(terms);
    let src = |s| RoleState::Source(s);
    let at = |s: u64| Instant::from_millis(s * 1_000);
    let mut moves = vec![
        (SE::Start, SS::NotStarted, SS::Computing, 0),
        (SE::PrefillPinned, SS::Computing, SS::Pinned, 0),
    ];
    if let Some(r) = renewed_s {
        moves.push((SE::LeaseRenewed, SS::Pinned, SS::Pinned, r));
    }
    let end = match reason {
        CancelReason::LeaseExpired => SE::LeaseExpired,
        _ => SE::Cancelled,
    };
    moves.push((end, SS::Pinned, SS::Released, end_s));
    for (ev, from, to, t) in moves {
        let mut e = tr(
            SRC,
            Role::Source,
            LifecycleEvent::Source(ev),
            src(from),
            src(to),
        );
        if let WorkerEvent::Transition(tt) = &mut e {
            tt.at = at(t);
        }
        c.event(SRC, &e, at(t));
    }
    c.event(SRC, &ended(Role::Source, Some(reason)), at(end_s));
    let stale = WorkerEvent::StaleRead {
        id: ID,
        request: R,
        reused: true,
        at: at(end_s + 1),
    };
    c.event(DST, &stale, at(end_s + 1));
    c
}

#[test]
fn a_stale_read_only_follows_a_real_lease_expiry() {
    let terms = handoff_tests::dst::LeaseTerms {
        ttl: Some(handoff_core::Duration::from_secs(10)),
        extension: Some(handoff_core::Duration::from_secs(5)),
    };
    let flagged = |c: &Checker| kinds(c).contains(&Kind::ReadOfReleasedSource);
    // The lease ran its term, the last heartbeat came more than one
    // extension before: a real expiry.
    let ok = stale_read_after(terms, Some(4), CancelReason::LeaseExpired, 10);
    assert!(!flagged(&ok), "{:?}", ok.violations());
    // A heartbeat arrived within the extension: the expiry was premature.
    assert!(flagged(&stale_read_after(
        terms,
        Some(9),
        CancelReason::LeaseExpired,
        10
    )));
    // Before the lease's own term.
    assert!(flagged(&stale_read_after(
        terms,
        None,
        CancelReason::LeaseExpired,
        3
    )));
    // A source cancelled (not expired) must never be read to completion.
    assert!(flagged(&stale_read_after(
        terms,
        None,
        CancelReason::Client,
        20
    )));
}
