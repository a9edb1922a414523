//! # cherry-pick-example
//!
//! What a larger mocker (Dynamo's `lib/mocker`, say) takes from
//! handoff-mocker when it keeps its own event loop, clock and routing: only
//! the handoff lifecycle's role machines (`handoff-core`'s
//! [`SourceHandoff`] and [`DestinationHandoff`]) and a backend's scheduler
//! core (`handoff-sched-vllm`'s [`VllmCore`]). No engine, replay, router or
//! serving crate is involved: [`run`] drives one source-first (vLLM NIXL
//! style) prefill→decode handoff by hand, turning each role's actions into
//! scheduler commands and each scheduler outcome into a role fact, on its
//! own clock of plain [`Instant`]s.
//!
//! The steps, as [`run`] reports them:
//!
//! 1. the source role starts and asks for the prefill
//!    (`SubmitHandoffPrefill` on the prefill core);
//! 2. the prefill core steps until the prefill pins: its blocks are now
//!    `pinned_source_blocks`, held for the reader;
//! 3. the destination role is routed with the source's announcement and
//!    queues a reservation (`ReserveDestination` on the decode core, granted
//!    by the core's next step): `reserved_destination_blocks`;
//! 4. the reader pulls the KV; on completion the destination activates
//!    (`ActivateDestination`: the blocks become active decode blocks) and
//!    tells the source, which releases its pinned blocks (`ReleaseSource`);
//! 5. the decode core decodes to the end, and both cores are drained.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use handoff_core::{
    ActionList, Backend, CommandOutcome, DestinationAction, DestinationEvent, DestinationHandoff,
    Duration, Generation, HandoffConfig, HandoffIdGen, HandoffPolicy, Instant, KvCapacitySnapshot,
    KvEvent, Request, RequestId, SchedulerCommand, SchedulerCore, SourceAction, SourceEvent,
    SourceHandoff, SourceLease, SourceReady, StepOutput, Verdict, WorkerId,
};
use handoff_sched_vllm::{VllmConfig, VllmCore};

/// The prefill worker (it mints the attempt's id).
pub const PREFILL: WorkerId = WorkerId(0);
/// The decode worker.
pub const DECODE: WorkerId = WorkerId(1);
/// One-way latency of a control message between the workers.
pub const HOP: Duration = Duration::from_micros(500);

/// What the run observed, for checks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Prefill core's blocks pinned for the reader once the prefill pinned.
    pub pinned_blocks: u64,
    /// Prefill core's pinned blocks after the source released.
    pub pinned_after_release: u64,
    /// Decode core's reserved blocks once the reservation was granted.
    pub reserved_blocks: u64,
    /// Decode core's reserved blocks after activation.
    pub reserved_after_activation: u64,
    /// Decode core's active blocks after activation.
    pub active_after_activation: u64,
    /// Output tokens the decode core emitted.
    pub tokens: u64,
    /// KV events the two cores published (prefill, decode).
    pub kv_events: (usize, usize),
    /// When the request finished, on the run's clock.
    pub finished_at: Instant,
    /// Both cores drained at the end.
    pub drained: bool,
}

fn ms(t: Instant) -> f64 {
    t.as_nanos() as f64 / 1e6
}

fn cap_line(c: &KvCapacitySnapshot) -> String {
    format!(
        "total {} active {} pinned {} reserved {} cached {} running {} waiting {}",
        c.total_blocks,
        c.active_blocks,
        c.pinned_source_blocks,
        c.reserved_destination_blocks,
        c.cached_blocks,
        c.running_requests,
        c.waiting_requests
    )
}

/// Feeds `event` to the source role and returns its actions; any other
/// verdict is an error.
fn source(
    src: &mut SourceHandoff,
    event: SourceEvent,
    now: Instant,
    log: &mut dyn FnMut(String),
) -> Result<ActionList<SourceAction>, String> {
    match src.handle(event, now) {
        Ok(Verdict::Applied {
            from, to, actions, ..
        }) => {
            let list: Vec<SourceAction> = actions.iter().collect();
            log(format!(
                "{:>9.3} ms  source      {event:?}: {from:?} -> {to:?}, actions {list:?}",
                ms(now)
            ));
            Ok(actions)
        }
        other => Err(format!("source: {event:?} gave {other:?}")),
    }
}

/// As [`source`], for the destination role.
fn destination(
    dst: &mut DestinationHandoff,
    event: DestinationEvent,
    now: Instant,
    log: &mut dyn FnMut(String),
) -> Result<ActionList<DestinationAction>, String> {
    match dst.handle(event, now) {
        Ok(Verdict::Applied {
            from, to, actions, ..
        }) => {
            let list: Vec<DestinationAction> = actions.iter().collect();
            log(format!(
                "{:>9.3} ms  destination {event:?}: {from:?} -> {to:?}, actions {list:?}",
                ms(now)
            ));
            Ok(actions)
        }
        other => Err(format!("destination: {event:?} gave {other:?}")),
    }
}

fn expect(ok: bool, what: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(format!("expected {what}"))
    }
}

/// Runs one source-first handoff of a `prompt_tokens`-token prompt
/// generating `output_tokens`, logging every lifecycle step and capacity
/// snapshot through `log`.
pub fn run(
    prompt_tokens: u32,
    output_tokens: u32,
    log: &mut dyn FnMut(String),
) -> Result<Outcome, String> {
    let vllm = VllmConfig {
        num_blocks: 4096,
        block_size: 16,
        ..VllmConfig::default()
    };
    let cfg_blocks = vllm.num_blocks;
    let mut prefill = VllmCore::new(vllm);
    let mut decode = VllmCore::new(vllm);
    let caps = prefill.capabilities();
    let handoff = HandoffConfig::for_backend(Backend::Vllm);
    let policy = HandoffPolicy::SourceFirst;
    let mut ids = HandoffIdGen::new(PREFILL, Generation(0));
    let id = ids.next_id();
    let request = Request {
        id: RequestId(1),
        prompt_tokens,
        max_output_tokens: output_tokens,
        prefix_hashes: vec![0xc0ffee, 0xbeef],
        hash_block_tokens: 512,
        session: None,
        arrival: Instant::ZERO,
    };
    let mut src = SourceHandoff::new(id, policy, caps.source_lease_ttl);
    let mut dst = DestinationHandoff::new(id, policy, handoff.reservation_ttl);
    let mut out = StepOutput::default();
    let mut events: (Vec<KvEvent>, Vec<KvEvent>) = (Vec::new(), Vec::new());
    let mut o = Outcome::default();
    let mut now = Instant::ZERO;
    log(format!(
        "handoff {id}: {} prompt tokens, {} output tokens, source-first, two vLLM cores of {} {}-token blocks",
        prompt_tokens, output_tokens, cfg_blocks, caps.block_size
    ));

    // 1. The source starts: dispatch the prefill.
    let a = source(&mut src, SourceEvent::Start, now, log)?;
    expect(
        a.iter().any(|a| a == SourceAction::DispatchPrefill),
        "DispatchPrefill",
    )?;
    let outcome = prefill.apply(
        SchedulerCommand::SubmitHandoffPrefill {
            id,
            request: request.clone(),
        },
        now,
    );
    log(format!(
        "{:>9.3} ms  prefill     SubmitHandoffPrefill: {outcome:?}",
        ms(now)
    ));
    expect(outcome == CommandOutcome::Submitted, "Submitted")?;

    // 2. Step the prefill core until the prefill pins.
    let pinned = loop {
        prefill.step(now, now, &mut out);
        expect(out.steps > 0, "a prefill pass")?;
        now = now + out.duration;
        log(format!(
            "{:>9.3} ms  prefill     pass: {} prefill tokens",
            ms(now),
            out.prefill_tokens
        ));
        if let Some(p) = out.pinned.iter().find(|p| p.id == id) {
            break *p;
        }
    };
    let lease = SourceLease {
        id: pinned.lease,
        blocks: pinned.blocks,
        tokens: pinned.tokens,
        deadline: now + caps.source_lease_ttl,
    };
    let a = source(&mut src, SourceEvent::PrefillPinned { lease }, now, log)?;
    let ready = a
        .iter()
        .find_map(|a| match a {
            SourceAction::AnnounceReady { blocks, tokens } => Some(SourceReady { blocks, tokens }),
            _ => None,
        })
        .ok_or("expected AnnounceReady")?;
    let cap = prefill.capacity();
    log(format!(
        "{:>9.3} ms  prefill     capacity: {}",
        ms(now),
        cap_line(&cap)
    ));
    o.pinned_blocks = cap.pinned_source_blocks;

    // 3. The host's router picks the decode worker; the announcement
    // reaches it one hop later and it queues a reservation.
    now = now + HOP;
    let a = destination(
        &mut dst,
        DestinationEvent::Routed {
            source: PREFILL,
            ready: Some(ready),
        },
        now,
        log,
    )?;
    expect(
        a.iter().any(|a| a == DestinationAction::QueueReservation),
        "QueueReservation",
    )?;
    let outcome = decode.apply(
        SchedulerCommand::ReserveDestination {
            id,
            request: request.clone(),
        },
        now,
    );
    log(format!(
        "{:>9.3} ms  decode      ReserveDestination: {outcome:?}",
        ms(now)
    ));
    let summary = match outcome {
        CommandOutcome::Reserved(s) => s,
        CommandOutcome::Queued => {
            // vLLM grants in its scheduling loop: the next step.
            decode.step(now, now, &mut out);
            now = now + out.duration;
            out.reserved
                .iter()
                .find(|(g, _)| *g == id)
                .map(|(_, s)| *s)
                .ok_or("the decode core did not grant the reservation")?
        }
        other => return Err(format!("reservation refused: {other:?}")),
    };
    let a = destination(&mut dst, DestinationEvent::Reserved { summary }, now, log)?;
    let cap = decode.capacity();
    log(format!(
        "{:>9.3} ms  decode      capacity: {}",
        ms(now),
        cap_line(&cap)
    ));
    o.reserved_blocks = cap.reserved_destination_blocks;
    expect(
        a.iter().any(|a| a == DestinationAction::StartTransfer),
        "StartTransfer",
    )?;
    if a.iter()
        .any(|a| matches!(a, DestinationAction::SendDestinationReserved { .. }))
    {
        source(
            &mut src,
            SourceEvent::DestinationReserved { summary },
            now + HOP,
            log,
        )?;
    }

    // 4. The reader pulls the KV (modelled here as 10 µs per block); the
    // prefill blocks stay pinned until it is done.
    now = now + Duration::from_micros(10 * summary.transfer_blocks.max(1));
    let cap = prefill.capacity();
    log(format!(
        "{:>9.3} ms  prefill     capacity while reading: {}",
        ms(now),
        cap_line(&cap)
    ));
    expect(
        cap.pinned_source_blocks == o.pinned_blocks,
        "the source blocks pinned until the reader completes",
    )?;
    let a = destination(&mut dst, DestinationEvent::ReceiveCompleted, now, log)?;
    for action in a.iter() {
        match action {
            DestinationAction::ActivateDestination => {
                let outcome = decode.apply(SchedulerCommand::ActivateDestination { id }, now);
                log(format!(
                    "{:>9.3} ms  decode      ActivateDestination: {outcome:?}",
                    ms(now)
                ));
                expect(outcome == CommandOutcome::Applied, "Applied")?;
                let cap = decode.capacity();
                log(format!(
                    "{:>9.3} ms  decode      capacity: {}",
                    ms(now),
                    cap_line(&cap)
                ));
                o.reserved_after_activation = cap.reserved_destination_blocks;
                o.active_after_activation = cap.active_blocks;
            }
            DestinationAction::SendReaderCompleted => {
                let at = now + HOP;
                let sa = source(&mut src, SourceEvent::ReaderCompleted, at, log)?;
                expect(
                    sa.iter().any(|a| a == SourceAction::ReleaseSource),
                    "ReleaseSource",
                )?;
                let outcome = prefill.apply(SchedulerCommand::ReleaseSource { id }, at);
                log(format!(
                    "{:>9.3} ms  prefill     ReleaseSource: {outcome:?}",
                    ms(at)
                ));
                expect(outcome == CommandOutcome::Applied, "Applied")?;
                let cap = prefill.capacity();
                log(format!(
                    "{:>9.3} ms  prefill     capacity: {}",
                    ms(at),
                    cap_line(&cap)
                ));
                o.pinned_after_release = cap.pinned_source_blocks;
            }
            _ => {}
        }
    }

    // 5. Decode to the end.
    let mut passes = 0u64;
    let finished = loop {
        decode.step(now, now, &mut out);
        if out.steps == 0 && out.finished.is_empty() {
            return Err("the decode core stopped before the request finished".into());
        }
        now = now + out.duration;
        passes += out.steps;
        o.tokens += out
            .tokens
            .iter()
            .filter(|t| t.request == request.id)
            .map(|t| u64::from(t.tokens))
            .sum::<u64>();
        if out.finished.contains(&request.id) {
            break now;
        }
        if passes > 1_000_000 {
            return Err("decode never finished".into());
        }
    };
    log(format!(
        "{:>9.3} ms  decode      {passes} passes, {} tokens, finished",
        ms(finished),
        o.tokens
    ));
    destination(&mut dst, DestinationEvent::Finished, finished, log)?;
    o.finished_at = finished;

    prefill.drain_kv_events(&mut events.0);
    decode.drain_kv_events(&mut events.1);
    o.kv_events = (events.0.len(), events.1.len());
    log(format!(
        "{:>9.3} ms  end         prefill {}; decode {}; KV events prefill {} decode {}",
        ms(now),
        cap_line(&prefill.capacity()),
        cap_line(&decode.capacity()),
        o.kv_events.0,
        o.kv_events.1
    ));
    o.drained = prefill.is_drained() && decode.is_drained();
    Ok(o)
}
