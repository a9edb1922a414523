//! DEP scenario 2 driven only through the public API: two SGLang workers,
//! a destination gate, and exactly-once accounting.

use handoff_core::accounting::{check_identity, Holding, Ledger};
use handoff_core::{
    Backend, CommandOutcome, Duration, HandoffId, Instant, KvEvent, KvEventData, Request,
    RequestId, SchedulerCommand, SchedulerCore, StepOutput,
};
use handoff_sched_sglang::{SglangConfig, SglangCore};

fn request(id: u64, prompt: u32, out: u32, chunks: &[u64]) -> Request {
    Request {
        id: RequestId(id),
        prompt_tokens: prompt,
        max_output_tokens: out,
        prefix_hashes: chunks.to_vec(),
        hash_block_tokens: 512,
        session: None,
        arrival: Instant::ZERO,
        lora: None,
    }
}

struct Worker {
    core: SglangCore,
    now: Instant,
    out: StepOutput,
    events: Vec<KvEvent>,
}

impl Worker {
    /// A worker; `decode_radix` runs a decode server in the DEP's
    /// locked-prefix mode (`--disaggregation-decode-enable-radix-cache`).
    fn new(pages: u64, page: u32, decode_radix: bool) -> Self {
        let cfg = SglangConfig {
            total_pages: pages,
            disaggregation_decode_enable_radix_cache: decode_radix,
            ..SglangConfig::with_page_size(page)
        };
        Worker {
            core: SglangCore::with_config(cfg).expect("valid"),
            now: Instant::ZERO,
            out: StepOutput::default(),
            events: Vec::new(),
        }
    }

    fn apply(&mut self, cmd: SchedulerCommand) -> CommandOutcome {
        let o = self.core.apply(cmd, self.now);
        check_identity(&self.core.capacity()).expect("identity");
        self.core.drain_kv_events(&mut self.events);
        o
    }

    fn step(&mut self) -> u64 {
        self.step_until(Instant::MAX)
    }

    fn step_until(&mut self, horizon: Instant) -> u64 {
        self.core.step(self.now, horizon, &mut self.out);
        check_identity(&self.core.capacity()).expect("identity");
        self.core.drain_kv_events(&mut self.events);
        self.now = self.now + self.out.duration;
        self.out.steps
    }
}

#[test]
fn destination_gate_then_handoff_then_release() {
    let mut ledger = Ledger::new();
    let mut decode = Worker::new(16_384 / 16, 16, true);
    let mut prefill = Worker::new(65_536 / 16, 16, false);
    let caps = decode.core.capabilities();
    assert_eq!(caps.backend, Backend::Sglang);
    assert!(caps.destination_reservation);
    assert_eq!(caps.source_lease_ttl, Duration::from_secs(300));
    assert_eq!(caps.block_size, 16);

    // Decode is full of long requests.
    for i in 0..6 {
        decode.apply(SchedulerCommand::Submit(request(i, 2000, 200, &[i])));
    }
    for _ in 0..2 {
        let now = decode.now;
        assert_eq!(decode.step_until(now), 1);
    }
    assert_eq!(decode.core.capacity().running_requests, 6);
    let id = HandoffId(42);
    let handoff = request(100, 3000, 20, &[7, 8, 9, 10, 11, 12]);
    let before = decode.core.capacity();
    let back = match decode.apply(SchedulerCommand::ReserveDestination {
        id,
        request: handoff.clone(),
    }) {
        CommandOutcome::Unavailable(Some(r)) => r,
        other => panic!("expected Unavailable, got {other:?}"),
    };
    assert_eq!(back, handoff);
    assert_eq!(decode.core.capacity(), before, "nothing held");

    while decode.step() > 0 {}
    let summary = match decode.apply(SchedulerCommand::ReserveDestination { id, request: back }) {
        CommandOutcome::Reserved(s) => s,
        other => panic!("expected Reserved, got {other:?}"),
    };
    ledger.open(id, Holding::DestinationReservation).unwrap();
    assert_eq!(summary.physical_blocks, 3000u64.div_ceil(16));
    assert_eq!(summary.decode_headroom_tokens, 512);
    let cap = decode.core.capacity();
    assert_eq!(cap.reserved_destination_blocks, summary.physical_blocks);
    assert_eq!(cap.kv_used_blocks(), summary.physical_blocks);

    assert_eq!(
        prefill.apply(SchedulerCommand::SubmitHandoffPrefill {
            id,
            request: handoff
        }),
        CommandOutcome::Submitted
    );
    let mut pinned = None;
    while prefill.step() > 0 {
        if let Some(p) = prefill.out.pinned.first() {
            pinned = Some(*p);
            ledger.open(p.id, Holding::SourceLease).unwrap();
        }
        assert!(prefill.out.tokens.is_empty());
    }
    let pinned = pinned.expect("the prefill pinned");
    assert_eq!(pinned.blocks, 3000u64.div_ceil(16));
    assert_eq!(prefill.core.capacity().pinned_source_blocks, pinned.blocks);

    let seen = decode.events.len();
    assert_eq!(
        decode.apply(SchedulerCommand::ActivateDestination { id }),
        CommandOutcome::Applied
    );
    ledger.end(id, Holding::DestinationReservation).unwrap();
    let stored: usize = decode.events[seen..]
        .iter()
        .map(|e| match &e.data {
            KvEventData::Stored { block_hashes, .. } => block_hashes.len(),
            _ => 0,
        })
        .sum();
    assert_eq!(stored, 3000 / 64, "full 64-token event blocks");
    assert_eq!(
        prefill.apply(SchedulerCommand::ReleaseSource { id }),
        CommandOutcome::Applied
    );
    ledger.end(id, Holding::SourceLease).unwrap();
    assert_eq!(
        prefill.apply(SchedulerCommand::ReleaseSource { id }),
        CommandOutcome::Noop
    );

    // The prefill's token arrives with the KV and is streamed first; decode
    // generates the other 19.
    let mut tokens = 0;
    let mut shipped = 0;
    while decode.step() > 0 {
        shipped += decode.out.shipped_first_tokens.len();
        tokens += decode
            .out
            .tokens
            .iter()
            .filter(|e| e.request == RequestId(100))
            .map(|e| e.tokens)
            .sum::<u32>();
    }
    assert_eq!((shipped, tokens), (1, 19));
    assert!(decode.core.is_drained() && prefill.core.is_drained());
    ledger.check_drained().unwrap();
    for w in [&decode, &prefill] {
        let cap = w.core.capacity();
        assert_eq!(cap.kv_used_blocks(), 0);
        assert_eq!(cap.free_request_slots, cap.total_request_slots);
    }
}

#[test]
fn invalid_configs_are_typed_errors() {
    let cfg = SglangConfig {
        event_block_tokens: 50,
        ..SglangConfig::with_page_size(16)
    };
    assert!(SglangCore::with_config(cfg).is_err());
}
