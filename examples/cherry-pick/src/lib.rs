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

use handoff_core::scheduler::ReservationSummary;
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

/// Both workers' cores and roles of the one handoff, on the run's clock.
struct Pair<'l> {
    prefill: VllmCore,
    decode: VllmCore,
    src: SourceHandoff,
    dst: DestinationHandoff,
    id: handoff_core::HandoffId,
    request: Request,
    lease_ttl: Duration,
    out: StepOutput,
    o: Outcome,
    now: Instant,
    log: &'l mut dyn FnMut(String),
}

impl Pair<'_> {
    fn capacity(&mut self, who: &str, what: &str, cap: &KvCapacitySnapshot, at: Instant) {
        (self.log)(format!(
            "{:>9.3} ms  {who:<11} {what}: {}",
            ms(at),
            cap_line(cap)
        ));
    }

    /// Step 1: the source starts and dispatches the prefill.
    fn start(&mut self) -> Result<(), String> {
        let a = source(&mut self.src, SourceEvent::Start, self.now, self.log)?;
        expect(
            a.iter().any(|a| a == SourceAction::DispatchPrefill),
            "DispatchPrefill",
        )?;
        let outcome = self.prefill.apply(
            SchedulerCommand::SubmitHandoffPrefill {
                id: self.id,
                request: self.request.clone(),
            },
            self.now,
        );
        (self.log)(format!(
            "{:>9.3} ms  prefill     SubmitHandoffPrefill: {outcome:?}",
            ms(self.now)
        ));
        expect(outcome == CommandOutcome::Submitted, "Submitted")
    }

    /// Step 2: the prefill core steps until the prefill pins; the source
    /// announces its blocks.
    fn pin(&mut self) -> Result<SourceReady, String> {
        let pinned = loop {
            self.prefill.step(self.now, self.now, &mut self.out);
            expect(self.out.steps > 0, "a prefill pass")?;
            self.now = self.now + self.out.duration;
            (self.log)(format!(
                "{:>9.3} ms  prefill     pass: {} prefill tokens",
                ms(self.now),
                self.out.prefill_tokens
            ));
            if let Some(p) = self.out.pinned.iter().find(|p| p.id == self.id) {
                break *p;
            }
        };
        let lease = SourceLease {
            id: pinned.lease,
            blocks: pinned.blocks,
            tokens: pinned.tokens,
            deadline: self.now + self.lease_ttl,
        };
        let a = source(
            &mut self.src,
            SourceEvent::PrefillPinned { lease },
            self.now,
            self.log,
        )?;
        let ready = a
            .iter()
            .find_map(|a| match a {
                SourceAction::AnnounceReady { blocks, tokens } => {
                    Some(SourceReady { blocks, tokens })
                }
                _ => None,
            })
            .ok_or("expected AnnounceReady")?;
        let cap = self.prefill.capacity();
        self.capacity("prefill", "capacity", &cap, self.now);
        self.o.pinned_blocks = cap.pinned_source_blocks;
        Ok(ready)
    }

    /// Step 3: the host's router picks the decode worker; the announcement
    /// reaches it one hop later and it queues a reservation, which the
    /// decode core grants.
    fn reserve(&mut self, ready: SourceReady) -> Result<ReservationSummary, String> {
        self.now = self.now + HOP;
        let routed = DestinationEvent::Routed {
            source: PREFILL,
            ready: Some(ready),
        };
        let a = destination(&mut self.dst, routed, self.now, self.log)?;
        expect(
            a.iter().any(|a| a == DestinationAction::QueueReservation),
            "QueueReservation",
        )?;
        let outcome = self.decode.apply(
            SchedulerCommand::ReserveDestination {
                id: self.id,
                request: self.request.clone(),
            },
            self.now,
        );
        (self.log)(format!(
            "{:>9.3} ms  decode      ReserveDestination: {outcome:?}",
            ms(self.now)
        ));
        let summary = match outcome {
            CommandOutcome::Reserved(s) => s,
            CommandOutcome::Queued => {
                // vLLM grants in its scheduling loop: the next step.
                self.decode.step(self.now, self.now, &mut self.out);
                self.now = self.now + self.out.duration;
                let id = self.id;
                self.out
                    .reserved
                    .iter()
                    .find(|(g, _)| *g == id)
                    .map(|(_, s)| *s)
                    .ok_or("the decode core did not grant the reservation")?
            }
            other => return Err(format!("reservation refused: {other:?}")),
        };
        let reserved = DestinationEvent::Reserved { summary };
        let a = destination(&mut self.dst, reserved, self.now, self.log)?;
        let cap = self.decode.capacity();
        self.capacity("decode", "capacity", &cap, self.now);
        self.o.reserved_blocks = cap.reserved_destination_blocks;
        expect(
            a.iter().any(|a| a == DestinationAction::StartTransfer),
            "StartTransfer",
        )?;
        if a.iter()
            .any(|a| matches!(a, DestinationAction::SendDestinationReserved { .. }))
        {
            let event = SourceEvent::DestinationReserved { summary };
            source(&mut self.src, event, self.now + HOP, self.log)?;
        }
        Ok(summary)
    }

    /// Step 4: the reader pulls the KV (modelled here as 10 µs per block); the
    /// prefill blocks stay pinned until it is done, then the destination
    /// activates and the source releases.
    fn read(&mut self, summary: ReservationSummary) -> Result<(), String> {
        self.now = self.now + Duration::from_micros(10 * summary.transfer_blocks.max(1));
        let cap = self.prefill.capacity();
        self.capacity("prefill", "capacity while reading", &cap, self.now);
        expect(
            cap.pinned_source_blocks == self.o.pinned_blocks,
            "the source blocks pinned until the reader completes",
        )?;
        let a = destination(
            &mut self.dst,
            DestinationEvent::ReceiveCompleted,
            self.now,
            self.log,
        )?;
        for action in a.iter() {
            match action {
                DestinationAction::ActivateDestination => self.activate()?,
                DestinationAction::SendReaderCompleted => self.release()?,
                _ => {}
            }
        }
        Ok(())
    }

    fn activate(&mut self) -> Result<(), String> {
        let outcome = self.decode.apply(
            SchedulerCommand::ActivateDestination { id: self.id },
            self.now,
        );
        (self.log)(format!(
            "{:>9.3} ms  decode      ActivateDestination: {outcome:?}",
            ms(self.now)
        ));
        expect(outcome == CommandOutcome::Applied, "Applied")?;
        let cap = self.decode.capacity();
        self.capacity("decode", "capacity", &cap, self.now);
        self.o.reserved_after_activation = cap.reserved_destination_blocks;
        self.o.active_after_activation = cap.active_blocks;
        Ok(())
    }

    fn release(&mut self) -> Result<(), String> {
        let at = self.now + HOP;
        let sa = source(&mut self.src, SourceEvent::ReaderCompleted, at, self.log)?;
        expect(
            sa.iter().any(|a| a == SourceAction::ReleaseSource),
            "ReleaseSource",
        )?;
        let outcome = self
            .prefill
            .apply(SchedulerCommand::ReleaseSource { id: self.id }, at);
        (self.log)(format!(
            "{:>9.3} ms  prefill     ReleaseSource: {outcome:?}",
            ms(at)
        ));
        expect(outcome == CommandOutcome::Applied, "Applied")?;
        let cap = self.prefill.capacity();
        self.capacity("prefill", "capacity", &cap, at);
        self.o.pinned_after_release = cap.pinned_source_blocks;
        Ok(())
    }

    /// Step 5: decode to the end; both cores should then be drained.
    fn decode_to_end(&mut self) -> Result<(), String> {
        let mut passes = 0u64;
        let finished = loop {
            self.decode.step(self.now, self.now, &mut self.out);
            if self.out.steps == 0 && self.out.finished.is_empty() {
                return Err("the decode core stopped before the request finished".into());
            }
            self.now = self.now + self.out.duration;
            passes += self.out.steps;
            let rid = self.request.id;
            self.o.tokens += self
                .out
                .tokens
                .iter()
                .filter(|t| t.request == rid)
                .map(|t| u64::from(t.tokens))
                .sum::<u64>();
            if self.out.finished.contains(&rid) {
                break self.now;
            }
            if passes > 1_000_000 {
                return Err("decode never finished".into());
            }
        };
        (self.log)(format!(
            "{:>9.3} ms  decode      {passes} passes, {} tokens, finished",
            ms(finished),
            self.o.tokens
        ));
        destination(
            &mut self.dst,
            DestinationEvent::Finished,
            finished,
            self.log,
        )?;
        self.o.finished_at = finished;
        let mut events: (Vec<KvEvent>, Vec<KvEvent>) = (Vec::new(), Vec::new());
        self.prefill.drain_kv_events(&mut events.0);
        self.decode.drain_kv_events(&mut events.1);
        self.o.kv_events = (events.0.len(), events.1.len());
        (self.log)(format!(
            "{:>9.3} ms  end         prefill {}; decode {}; KV events prefill {} decode {}",
            ms(self.now),
            cap_line(&self.prefill.capacity()),
            cap_line(&self.decode.capacity()),
            self.o.kv_events.0,
            self.o.kv_events.1
        ));
        self.o.drained = self.prefill.is_drained() && self.decode.is_drained();
        Ok(())
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
    let prefill = VllmCore::new(vllm);
    let caps = prefill.capabilities();
    let handoff = HandoffConfig::for_backend(Backend::Vllm);
    let policy = HandoffPolicy::SourceFirst;
    let id = HandoffIdGen::new(PREFILL, Generation(0)).next_id();
    log(format!(
        "handoff {id}: {} prompt tokens, {} output tokens, source-first, two vLLM cores of {} {}-token blocks",
        prompt_tokens, output_tokens, vllm.num_blocks, caps.block_size
    ));
    let mut pair = Pair {
        prefill,
        decode: VllmCore::new(vllm),
        src: SourceHandoff::new(id, policy, caps.source_lease_ttl),
        dst: DestinationHandoff::new(id, policy, handoff.reservation_ttl),
        id,
        request: Request {
            id: RequestId(1),
            prompt_tokens,
            max_output_tokens: output_tokens,
            prefix_hashes: vec![0xc0ffee, 0xbeef],
            hash_block_tokens: 512,
            session: None,
            arrival: Instant::ZERO,
            lora: None,
        },
        lease_ttl: caps.source_lease_ttl,
        out: StepOutput::default(),
        o: Outcome::default(),
        now: Instant::ZERO,
        log,
    };
    pair.start()?;
    let ready = pair.pin()?;
    let summary = pair.reserve(ready)?;
    pair.read(summary)?;
    pair.decode_to_end()?;
    Ok(pair.o)
}
