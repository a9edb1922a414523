//! A test driver that checks every invariant after every operation: the
//! block identity, the core's internal counters, the KV event stream, and
//! exactly-once ownership through a [`Ledger`].

use crate::{SglangConfig, SglangCore};
use handoff_core::accounting::{check_identity, Holding, Ledger};
use handoff_core::{
    CommandOutcome, Duration, HandoffId, Instant, KvCapacitySnapshot, KvEvent, KvEventData,
    PrefillPinned, Request, RequestId, SchedulerCommand, SchedulerCore, StepOutput,
};
use handoff_perf::FixedPerf;
use std::collections::{BTreeMap, HashSet};

/// Timing that is easy to reason about.
pub(crate) fn fixed_perf() -> FixedPerf {
    FixedPerf {
        prefill_base: Duration::from_millis(10),
        per_prefill_token: Duration::from_micros(1),
        decode: Duration::from_millis(5),
    }
}

/// A request whose prompt content is `chunks` (one hash per 64 tokens).
pub(crate) fn req(id: u64, prompt: u32, max_out: u32, chunks: &[u64]) -> Request {
    Request {
        id: RequestId(id),
        prompt_tokens: prompt,
        max_output_tokens: max_out,
        prefix_hashes: chunks.to_vec(),
        hash_block_tokens: 64,
        session: None,
        arrival: Instant::ZERO,
        lora: None,
    }
}

/// What the client saw of one request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) tokens: u64,
    pub(crate) first_at: Option<Instant>,
    pub(crate) finished_at: Option<Instant>,
    pub(crate) preempted: u32,
}

pub(crate) struct Harness {
    pub(crate) core: SglangCore<FixedPerf>,
    pub(crate) now: Instant,
    pub(crate) out: StepOutput,
    pub(crate) ledger: Ledger,
    pub(crate) events: Vec<KvEvent>,
    pub(crate) cached: HashSet<u64>,
    pub(crate) last_event_id: Option<u64>,
    pub(crate) seen: BTreeMap<RequestId, Seen>,
    pub(crate) pinned: Vec<PrefillPinned>,
    pub(crate) passes: u64,
}

impl Harness {
    pub(crate) fn new(cfg: SglangConfig) -> Self {
        let core = SglangCore::new(cfg, fixed_perf()).expect("valid config");
        let mut h = Harness {
            core,
            now: Instant::ZERO,
            out: StepOutput::default(),
            ledger: Ledger::new(),
            events: Vec::new(),
            cached: HashSet::new(),
            last_event_id: None,
            seen: BTreeMap::new(),
            pinned: Vec::new(),
            passes: 0,
        };
        h.check();
        h
    }

    pub(crate) fn cap(&self) -> KvCapacitySnapshot {
        self.core.capacity()
    }

    /// Every invariant, after every operation.
    pub(crate) fn check(&mut self) {
        let cap = self.core.capacity();
        check_identity(&cap).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            cap.free_blocks() + cap.cached_blocks + cap.kv_used_blocks(),
            cap.total_blocks
        );
        assert!(cap.free_request_slots <= cap.total_request_slots);
        self.core
            .check_consistency()
            .unwrap_or_else(|e| panic!("core inconsistent: {e}"));
        let mut fresh = Vec::new();
        self.core.drain_kv_events(&mut fresh);
        for ev in &fresh {
            if let Some(last) = self.last_event_id {
                assert!(ev.event_id > last, "event ids must increase");
            }
            self.last_event_id = Some(ev.event_id);
            match &ev.data {
                KvEventData::Stored {
                    parent_hash,
                    block_hashes,
                } => {
                    if let Some(p) = parent_hash {
                        assert!(self.cached.contains(p), "Stored under an unknown parent");
                    }
                    for h in block_hashes {
                        assert!(self.cached.insert(*h), "hash {h} stored twice");
                    }
                }
                KvEventData::Removed { block_hashes } => {
                    for h in block_hashes {
                        assert!(self.cached.remove(h), "hash {h} removed but not stored");
                    }
                }
                KvEventData::Cleared => self.cached.clear(),
            }
        }
        self.events.extend(fresh);
        assert_eq!(self.cached.len(), self.core.radix.len(), "index vs events");
        for h in &self.cached {
            assert!(self.core.radix.contains(*h));
        }
    }

    pub(crate) fn apply(&mut self, cmd: SchedulerCommand) -> CommandOutcome {
        let before = self.core.capacity();
        let kind = match &cmd {
            SchedulerCommand::ActivateDestination { id } => Some((*id, 'a')),
            SchedulerCommand::CancelDestination { id } => Some((*id, 'd')),
            SchedulerCommand::ReleaseSource { id } => Some((*id, 'r')),
            SchedulerCommand::CancelSource { id } => Some((*id, 'c')),
            SchedulerCommand::ReserveDestination { id, .. } => Some((*id, 'v')),
            _ => None,
        };
        let outcome = self.core.apply(cmd, self.now);
        match (kind, &outcome) {
            (Some((id, 'v')), CommandOutcome::Reserved(_)) => {
                self.ledger
                    .open(id, Holding::DestinationReservation)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            (Some((id, 'a')), CommandOutcome::Applied) => {
                self.ledger
                    .end(id, Holding::DestinationReservation)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            // A cancel after activation aborts the request: no reservation
            // is left to end.
            (Some((id, 'd')), CommandOutcome::Applied)
                if self.ledger.is_open(id, Holding::DestinationReservation) =>
            {
                self.ledger
                    .end(id, Holding::DestinationReservation)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            (Some((id, 'r')), CommandOutcome::Applied) => {
                self.ledger
                    .end(id, Holding::SourceLease)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            (Some((id, 'c')), CommandOutcome::Applied)
                if self.ledger.is_open(id, Holding::SourceLease) =>
            {
                self.ledger
                    .end(id, Holding::SourceLease)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            (_, CommandOutcome::Unavailable(_) | CommandOutcome::Unsupported(_)) => {
                assert_eq!(self.core.capacity(), before, "a refusal must hold nothing");
            }
            _ => {}
        }
        self.check();
        outcome
    }

    pub(crate) fn submit(&mut self, r: Request) {
        let id = r.id;
        assert_eq!(
            self.apply(SchedulerCommand::Submit(r)),
            CommandOutcome::Submitted
        );
        self.seen.entry(id).or_default();
    }

    pub(crate) fn reserve(&mut self, id: HandoffId, r: Request) -> CommandOutcome {
        self.apply(SchedulerCommand::ReserveDestination { id, request: r })
    }

    /// One `step` call with the given horizon; returns passes run.
    pub(crate) fn step_until(&mut self, horizon: Instant) -> u64 {
        let now = self.now;
        self.core.step(now, horizon, &mut self.out);
        let out = std::mem::take(&mut self.out);
        let end = now + out.duration;
        for r in &out.shipped_first_tokens {
            let s = self.seen.entry(*r).or_default();
            assert_eq!(s.tokens, 0, "a shipped token is the first of {r:?}");
            s.first_at = Some(now);
            s.tokens = 1;
        }
        let mut ids = HashSet::new();
        for e in &out.tokens {
            assert!(ids.insert(e.request), "one emission per request per call");
            assert!(e.tokens >= 1);
            let s = self.seen.entry(e.request).or_default();
            assert_eq!(e.first, s.tokens == 0, "first flag of {:?}", e.request);
            if e.first {
                // Only a call's first pass can emit a first token.
                s.first_at = Some(now + out.first_step);
            }
            s.tokens += u64::from(e.tokens);
            assert!(s.finished_at.is_none(), "tokens after finish");
        }
        for (i, r) in out.finished.iter().enumerate() {
            let s = self.seen.entry(*r).or_default();
            assert!(s.finished_at.is_none(), "finished twice");
            s.finished_at = Some(if i < out.finished_at_start { now } else { end });
        }
        for r in &out.preempted {
            self.seen.entry(*r).or_default().preempted += 1;
        }
        for p in &out.pinned {
            self.ledger
                .open(p.id, Holding::SourceLease)
                .unwrap_or_else(|e| panic!("{e}"));
            self.pinned.push(*p);
        }
        if out.steps > 0 {
            assert_eq!(
                out.steps == 1,
                out.first_step == out.duration,
                "one pass means one duration"
            );
        } else {
            assert!(out.tokens.is_empty());
            assert_eq!(out.finished.len(), out.finished_at_start);
        }
        self.passes += out.steps;
        self.now = end;
        self.out = out;
        self.check();
        self.out.steps
    }

    /// One pass.
    pub(crate) fn step(&mut self) -> u64 {
        let now = self.now;
        self.step_until(now)
    }

    /// Steps (single passes) until nothing runs; returns passes.
    pub(crate) fn run_idle(&mut self, limit: u64) -> u64 {
        let mut n = 0;
        for _ in 0..limit {
            let s = self.step();
            if s == 0 {
                return n;
            }
            n += s;
        }
        panic!("did not go idle within {limit} calls");
    }

    pub(crate) fn tokens_of(&self, id: u64) -> u64 {
        self.seen.get(&RequestId(id)).map_or(0, |s| s.tokens)
    }

    pub(crate) fn finished(&self, id: u64) -> bool {
        self.seen
            .get(&RequestId(id))
            .is_some_and(|s| s.finished_at.is_some())
    }

    /// Everything ended exactly once and no page is owned.
    pub(crate) fn assert_drained(&self) {
        assert!(self.core.is_drained());
        self.ledger
            .check_drained()
            .unwrap_or_else(|e| panic!("{e}"));
        let cap = self.cap();
        assert_eq!(cap.kv_used_blocks(), 0, "{cap:?}");
        assert_eq!(cap.free_request_slots, cap.total_request_slots);
        assert_eq!(cap.decode_headroom_tokens, 0);
        assert_eq!(self.core.seqs.len(), 0);
    }

    pub(crate) fn stored_hashes(&self) -> Vec<u64> {
        self.events
            .iter()
            .filter_map(|e| match &e.data {
                KvEventData::Stored { block_hashes, .. } => Some(block_hashes.clone()),
                _ => None,
            })
            .flatten()
            .collect()
    }
}
