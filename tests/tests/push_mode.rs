//! vLLM's NIXL push mode (`NixlPushConnector`, vLLM PR #35264;
//! `vllm/distributed/kv_transfer/kv_connector/v1/nixl/push_scheduler.py` and
//! `push_worker.py`) on the real vLLM cores, through replay: the decode
//! engine allocates and registers its blocks while the prefill runs
//! (`NixlPushConnectorScheduler.update_state_after_alloc`), a prefill that
//! finishes first waits pinned for the registration (`_push_writer_loop`
//! keeps it in `_push_finished_blocks`), the prefill engine writes and frees
//! its blocks when the write completes (`get_transfer_results`), and a
//! registration nothing fulfils ends at `push_registration_timeout`.

use handoff_core::{
    Backend, CancelReason, DestinationEventKind as DE, Duration, FailureReason, HandoffPolicy,
    LifecycleEvent, RequestId, RoleState, SourceEventKind as SE, SourceState, Transcript,
};
use handoff_deployment::EngineSpec;
use handoff_replay::{DeploymentConfig, Replay, Report};
use handoff_workload::TraceItem;

/// Request `id` with its own 512-token blocks (`id * 100 + b`).
fn item(id: u64, at_ms: u64, prompt: u32, output: u32) -> TraceItem {
    let hashes: Vec<u64> = (0..u64::from(prompt.div_ceil(512)))
        .map(|b| id * 100 + b)
        .collect();
    handoff_tests::parity::item(id, at_ms, prompt, output, &hashes)
}

/// One prefill and one decode vLLM worker, the decode holding
/// `decode_kv_tokens`, with `policy`.
fn run(
    policy: HandoffPolicy,
    decode_kv_tokens: u64,
    reservation_ttl: Option<Duration>,
    items: Vec<TraceItem>,
) -> (Report, Transcript) {
    let mut cfg = DeploymentConfig {
        backend: Backend::Vllm,
        policy,
        prefill_workers: 1,
        decode_workers: 1,
        transcript: true,
        ..DeploymentConfig::default()
    };
    if let Some(ttl) = reservation_ttl {
        cfg.handoff.reservation_ttl = ttl;
    }
    let spec = |kv_tokens| EngineSpec {
        backend: Backend::Vllm,
        kv_tokens,
        ..EngineSpec::default()
    };
    let specs = [spec(1 << 18), spec(decode_kv_tokens)];
    let (report, transcript) = Replay::new(cfg, items.into_iter(), |w, _| {
        handoff_deployment::make_core(&specs[w.0 as usize]).expect("valid spec")
    })
    .expect("the cores publish at the deployment's block size")
    .run();
    (report, transcript.expect("asked for"))
}

/// The source role's facts of request `r`, in order, with the state each
/// left.
fn source_facts(t: &Transcript, r: u64) -> Vec<(LifecycleEvent, RoleState)> {
    t.iter()
        .find(|(_, rec)| rec.request == Some(RequestId(r)))
        .map(|(_, rec)| rec.source.iter().map(|l| (l.event, l.from)).collect())
        .unwrap_or_default()
}

fn position(facts: &[(LifecycleEvent, RoleState)], e: SE) -> Option<usize> {
    facts
        .iter()
        .position(|(x, _)| *x == LifecycleEvent::Source(e))
}

/// Idle decode, busy prefill: the second request's prefill queues behind
/// the first (one 8K prompt fills vLLM's 8,192-token pass), so its decode's
/// registration reaches the prefill engine before the prefill finishes and
/// is kept until it does (destination memory first; upstream it waits in
/// `_pending_d_registrations`); the prefill writes as it pins. Pull pins
/// first and is read afterwards.
#[test]
fn push_registers_the_destination_before_the_prefill_finishes() {
    let items = || vec![item(0, 0, 8192, 8), item(1, 0, 8192, 8)];
    let (r, t) = run(HandoffPolicy::Push, 1 << 18, None, items());
    assert_eq!(r.completed_requests, 2, "{:?}", r.lifecycle);
    assert_eq!(r.config.policy, "push");
    let s = source_facts(&t, 1);
    let reserved = position(&s, SE::DestinationReserved).expect("registered");
    let pinned = position(&s, SE::PrefillPinned).expect("pinned");
    assert!(reserved < pinned, "{s:?}");
    assert_eq!(s[reserved].1, RoleState::Source(SourceState::Computing));
    // The write's completion frees the source (`finished_sending`).
    assert_eq!(
        s.last().map(|x| x.0),
        Some(LifecycleEvent::Source(SE::ReaderCompleted)),
        "{s:?}"
    );

    let (_, t) = run(HandoffPolicy::SourceFirst, 1 << 18, None, items());
    let s = source_facts(&t, 1);
    assert!(position(&s, SE::PrefillPinned) < position(&s, SE::DestinationReserved));
}

/// Decode full: the prefill finishes first and waits pinned (under its
/// lease, renewed by the decode's heartbeats) until the decode can
/// allocate and register; then it writes and both requests complete.
#[test]
fn a_prefill_that_finishes_first_waits_pinned_for_the_registration() {
    let items = vec![item(0, 0, 4096, 400), item(1, 50, 4096, 16)];
    let (r, t) = run(HandoffPolicy::Push, 6 * 1024, None, items);
    assert_eq!(r.completed_requests, 2, "{:?}", r.lifecycle);
    assert_eq!(r.lifecycle.lease_expiries, 0);
    let s = source_facts(&t, 1);
    let reserved = position(&s, SE::DestinationReserved).expect("registered");
    assert!(position(&s, SE::PrefillPinned) < Some(reserved), "{s:?}");
    assert_eq!(s[reserved].1, RoleState::Source(SourceState::Pinned));
    assert!(t.workers().all(|(_, f)| f.drained));
}

/// A registration nothing fulfils in time: the decode's reservation ends
/// at its deadline (`push_registration_timeout` upstream, where the
/// watchdog drops the registration and the request waits for its client;
/// here the request fails `reservation-expired`) and every worker drains.
#[test]
fn an_unfulfilled_registration_ends_at_its_deadline() {
    // The second request's decode cannot allocate for 400 output tokens of
    // the first; its reservation deadline is 200 ms.
    let items = vec![item(0, 0, 4096, 400), item(1, 50, 4096, 16)];
    let (r, t) = run(
        HandoffPolicy::Push,
        6 * 1024,
        Some(Duration::from_millis(200)),
        items,
    );
    assert_eq!(r.completed_requests, 1, "{:?}", r.lifecycle);
    assert_eq!(
        r.lifecycle
            .failure_reasons
            .get(&FailureReason::Handoff(CancelReason::ReservationExpired)),
        Some(&1),
        "{:?}",
        r.lifecycle
    );
    let d = t
        .iter()
        .find(|(_, rec)| rec.request == Some(RequestId(1)))
        .map(|(_, rec)| rec.destination.clone())
        .unwrap_or_default();
    assert!(
        d.iter()
            .any(|l| l.event == LifecycleEvent::Destination(DE::ReservationExpired)),
        "{d:?}"
    );
    assert!(t.workers().all(|(_, f)| f.drained));
}

/// A registration that arrives while the step finishing the prefill runs
/// waits for that step's end: the role moved at the step's start, but the
/// prefill engine cannot write KV its pass has not computed (upstream the
/// finished blocks reach the writer with the next step's metadata,
/// `NixlPushConnectorScheduler.build_connector_meta`). The source's
/// transitions stay in order and its pinned block-time is positive.
#[test]
fn a_registration_during_the_pinning_step_waits_for_the_step_to_end() {
    let (r, t) = run(
        HandoffPolicy::Push,
        1 << 18,
        None,
        vec![item(0, 0, 4096, 8)],
    );
    assert_eq!(r.completed_requests, 1, "{:?}", r.lifecycle);
    let lines = t
        .iter()
        .find(|(_, rec)| rec.request == Some(RequestId(0)))
        .map(|(_, rec)| rec.source.clone())
        .unwrap_or_default();
    let events: Vec<_> = lines.iter().map(|l| l.event).collect();
    assert_eq!(
        events,
        [
            SE::Start,
            SE::PrefillPinned,
            SE::DestinationReserved,
            SE::ReaderCompleted
        ]
        .map(LifecycleEvent::Source),
        "{lines:?}"
    );
    for w in lines.windows(2) {
        assert_eq!(w[0].to, w[1].from, "{lines:?}");
    }
    let prefill = r
        .workers
        .iter()
        .find(|w| w.pool == "prefill" && w.steps > 0);
    assert!(
        prefill.is_some_and(|w| w.pinned_block_seconds > 0.0),
        "{:?}",
        r.workers
    );
}
