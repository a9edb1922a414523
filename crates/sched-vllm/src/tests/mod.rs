//! Scenario, equivalence and property tests. They drive the core through
//! [`SchedulerCore`] only, and after every operation check the public block
//! identity ([`check_identity`]), the exactly-once [`Ledger`] and a full
//! internal audit (every reference accounted for by exactly one owner).

mod fit_hits;
mod generated;
mod lazy_pool;
mod lifecycle;
mod lora;
mod multistep;
mod recompute;
mod state_machine;
mod waiting_loop;

use crate::block_pool::Owner;
use crate::core::VllmCore;
use crate::sequence::{Kind, Phase};
use crate::VllmConfig;
use handoff_core::accounting::{check_identity, Holding, Ledger};
use handoff_core::{
    CommandOutcome, Duration, HandoffId, Instant, KvCapacitySnapshot, KvEvent, KvEventData,
    Request, RequestId, SchedulerCommand, SchedulerCore, StepOutput,
};
use handoff_perf::FixedPerf;
use handoff_perf::PerfModel;
use std::collections::{BTreeMap, BTreeSet};

/// Tokens each entry of a test request's `prefix_hashes` covers: one block.
pub(crate) const HBT: u32 = 16;

/// A request whose prompt blocks have the content hashes `content` (one per
/// 16-token block; blocks past it are unique to the request).
pub(crate) fn req(id: u64, prompt: u32, max_out: u32, content: &[u64]) -> Request {
    Request {
        id: RequestId(id),
        prompt_tokens: prompt,
        max_output_tokens: max_out,
        prefix_hashes: content.to_vec(),
        hash_block_tokens: HBT,
        session: None,
        arrival: Instant::ZERO,
        lora: None,
    }
}

/// `n` distinct content hashes starting at `seed`.
pub(crate) fn content(seed: u64, n: usize) -> Vec<u64> {
    (0..n as u64).map(|i| seed * 1_000_003 + i).collect()
}

pub(crate) fn fixed_perf() -> FixedPerf {
    FixedPerf {
        prefill_base: Duration::from_millis(10),
        per_prefill_token: Duration::from_micros(20),
        decode: Duration::from_millis(5),
    }
}

pub(crate) fn cfg(num_blocks: u64) -> VllmConfig {
    VllmConfig::with_blocks(num_blocks)
}

impl<P: PerfModel> VllmCore<P> {
    /// Recounts every reference from the requests' block tables and checks
    /// it against the pool, plus the queue/phase/owner invariants.
    pub(crate) fn audit(&self) -> Result<(), String> {
        self.pool.audit()?;
        let mut expected: BTreeMap<(u32, usize), u32> = BTreeMap::new();
        let mut reachable: BTreeMap<u32, &'static str> = BTreeMap::new();
        let mut reach = |s: u32, why: &'static str| -> Result<(), String> {
            match reachable.insert(s, why) {
                Some(prev) => Err(format!("slot {s} is both {prev} and {why}")),
                None => Ok(()),
            }
        };
        for &s in &self.running {
            reach(s, "running")?;
            if self.seqs.get(s).phase != Phase::Running {
                return Err(format!(
                    "running slot {s} has phase {:?}",
                    self.seqs.get(s).phase
                ));
            }
        }
        let (mut awaiting_kv, mut unreported) = (0, 0);
        for (&s, skipped) in self
            .waiting
            .iter()
            .map(|s| (s, false))
            .chain(self.skipped.iter().map(|s| (s, true)))
        {
            reach(s, if skipped { "skipped" } else { "waiting" })?;
            let seq = self.seqs.get(s);
            match (seq.phase, skipped) {
                (Phase::Waiting, false) => {}
                // In the skipped queue: granted destinations (waiting for
                // their KV, or activated) and requests passed over for
                // max_loras, destinations among them ungranted.
                (Phase::Waiting, true) if seq.prebuilt || seq.lora != 0 => {}
                (Phase::Reserved, true) => awaiting_kv += 1,
                (Phase::Queued, skipped) if !skipped || seq.lora != 0 => {
                    unreported += usize::from(!seq.reported_unavailable)
                }
                (other, _) => {
                    return Err(format!(
                        "queued slot {s} (skipped {skipped}) has phase {other:?}"
                    ))
                }
            }
            if matches!(seq.phase, Phase::Queued | Phase::Reserved) {
                match seq.kind {
                    Kind::Destination(id) if self.destinations.get(&id) == Some(&s) => {}
                    other => return Err(format!("waiting destination {s} is {other:?}")),
                }
            }
        }
        if (awaiting_kv, unreported) != (self.awaiting_kv, self.unreported) {
            return Err(format!(
                "counters awaiting_kv/unreported {}/{} vs recount {awaiting_kv}/{unreported}",
                self.awaiting_kv, self.unreported
            ));
        }
        for (&id, &s) in self.sources.iter() {
            let seq = self.seqs.get(s);
            if seq.kind != Kind::Source(id) {
                return Err(format!("source {id} maps to {:?}", seq.kind));
            }
            if seq.phase == Phase::Held {
                reach(s, "held")?;
                if seq.owner != Owner::Pinned {
                    return Err(format!("held {id} owns as {:?}", seq.owner));
                }
            }
        }
        for (&id, &s) in self.destinations.iter() {
            let seq = self.seqs.get(s);
            let ok = match seq.phase {
                Phase::Reserved => seq.owner == Owner::Reserved,
                Phase::Queued => seq.blocks.is_empty(),
                _ => false,
            };
            if !ok || seq.kind != Kind::Destination(id) {
                return Err(format!("reservation {id}: {:?}/{:?}", seq.phase, seq.owner));
            }
        }
        if self.running.len() > self.cfg.max_num_seqs as usize {
            return Err("running batch above max_num_seqs".into());
        }
        for (s, seq) in self.seqs.live() {
            if !reachable.contains_key(&s) {
                return Err(format!("slot {s} ({:?}) is live but unreachable", seq.id));
            }
            let expect_owner = match seq.phase {
                Phase::Held => Owner::Pinned,
                Phase::Reserved => Owner::Reserved,
                _ => Owner::Active,
            };
            if seq.owner != expect_owner && seq.phase != Phase::Queued {
                return Err(format!(
                    "{:?} in {:?} owns as {:?}",
                    seq.id, seq.phase, seq.owner
                ));
            }
            for &b in &seq.blocks {
                *expected.entry((b, seq.owner as usize)).or_default() += 1;
            }
            let want_blocks = match seq.phase {
                // A prebuilt prompt (an activated destination, or one whose
                // tail it recomputes under `kv_recompute_threshold`, which
                // may take several chunks) holds its whole prompt's blocks
                // until its prefill completes.
                Phase::Waiting | Phase::Running if seq.prebuilt => {
                    self.blocks_for(u64::from(seq.prompt))
                }
                Phase::Reserved => self.blocks_for(u64::from(seq.prompt)),
                Phase::Queued => 0,
                Phase::Held => self.blocks_for(u64::from(seq.prompt)),
                _ => self.blocks_for(seq.computed),
            };
            if seq.blocks.len() as u64 != want_blocks {
                return Err(format!(
                    "{:?} in {:?} holds {} blocks for {} computed tokens",
                    seq.id,
                    seq.phase,
                    seq.blocks.len(),
                    seq.computed
                ));
            }
            if self.cfg.enable_prefix_caching {
                if seq.hashes.len() < seq.published as usize {
                    return Err(format!("{:?} published past its hashes", seq.id));
                }
                for i in 0..seq.published as usize {
                    if self.pool.hash_at(seq.blocks[i]) != Some(seq.hashes[i]) {
                        return Err(format!("{:?} block {i} is not the published hash", seq.id));
                    }
                }
            }
        }
        // Blocks never allocated have no entry and no references.
        for b in 0..self.pool.materialised() as u32 {
            for owner in [Owner::Active, Owner::Pinned, Owner::Reserved] {
                let want = expected.get(&(b, owner as usize)).copied().unwrap_or(0);
                if self.pool.refs(b, owner) != want {
                    return Err(format!(
                        "block {b}: {:?} refs {} but tables hold {want}",
                        owner,
                        self.pool.refs(b, owner)
                    ));
                }
            }
        }
        Ok(())
    }

    /// Every piece of state, maps sorted: equal fingerprints mean equal
    /// cores.
    pub(crate) fn fingerprint(&self) -> String {
        let mut sources: Vec<_> = self.sources.iter().collect();
        sources.sort();
        let mut dests: Vec<_> = self.destinations.iter().collect();
        dests.sort();
        let live: Vec<_> = self
            .seqs
            .live()
            .map(|(i, s)| format!("{i}:{s:?}"))
            .collect();
        format!(
            "pool[{}] events{:?} seqs{:?} running{:?} waiting{:?} skipped{:?} sources{:?} dests{:?} lease{} res{} cap{:?}",
            self.pool.fingerprint(),
            self.events.pending(),
            live,
            self.running,
            self.waiting,
            self.skipped,
            sources,
            dests,
            self.next_lease,
            self.next_reservation,
            self.capacity()
        )
    }
}

/// Drives one core, checking accounting after every operation.
pub(crate) struct Harness<P: PerfModel> {
    pub(crate) core: VllmCore<P>,
    pub(crate) now: Instant,
    pub(crate) out: StepOutput,
    pub(crate) ledger: Ledger,
    /// Handoff prefills submitted and not yet pinned or cancelled.
    pub(crate) computing: BTreeSet<HandoffId>,
    /// Everything the core has emitted, in order.
    pub(crate) events: Vec<KvEvent>,
    pub(crate) tokens: BTreeMap<RequestId, u64>,
    pub(crate) firsts: BTreeMap<RequestId, u32>,
    /// When each first token was sampled (end of the call's first pass).
    pub(crate) first_at: Vec<(RequestId, Instant)>,
    pub(crate) finished: Vec<(RequestId, Instant)>,
    pub(crate) preempted: Vec<RequestId>,
    /// Destinations the core queued and has not granted or forgotten.
    pub(crate) queued: BTreeSet<HandoffId>,
    /// Grants, with the start of the call that granted them.
    pub(crate) granted: Vec<(HandoffId, Instant)>,
    /// Queued destinations reported as not granted, in report order.
    pub(crate) refused: Vec<HandoffId>,
    pub(crate) passes: u64,
}

impl Harness<FixedPerf> {
    pub(crate) fn fixed(cfg: VllmConfig) -> Self {
        Harness::new(VllmCore::with_perf(cfg, fixed_perf()))
    }
}

impl<P: PerfModel> Harness<P> {
    pub(crate) fn new(core: VllmCore<P>) -> Self {
        let h = Harness {
            core,
            now: Instant::ZERO,
            out: StepOutput::default(),
            ledger: Ledger::new(),
            computing: BTreeSet::new(),
            events: Vec::new(),
            tokens: BTreeMap::new(),
            firsts: BTreeMap::new(),
            first_at: Vec::new(),
            finished: Vec::new(),
            preempted: Vec::new(),
            queued: BTreeSet::new(),
            granted: Vec::new(),
            refused: Vec::new(),
            passes: 0,
        };
        h.check();
        h
    }

    pub(crate) fn check(&self) {
        let cap = self.core.capacity();
        check_identity(&cap).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            cap.free_blocks() + cap.cached_blocks + cap.kv_used_blocks(),
            cap.total_blocks
        );
        self.core.audit().unwrap_or_else(|e| panic!("audit: {e}"));
    }

    pub(crate) fn cap(&self) -> KvCapacitySnapshot {
        self.core.capacity()
    }

    /// Applies `cmd`, keeps the ledger, checks accounting.
    pub(crate) fn apply(&mut self, cmd: SchedulerCommand) -> CommandOutcome {
        let (id, kind) = match &cmd {
            SchedulerCommand::Submit(_)
            | SchedulerCommand::ReleaseSession { .. }
            | SchedulerCommand::EvictSession { .. }
            | SchedulerCommand::ReserveSnapshot { .. }
            | SchedulerCommand::IngestSnapshot { .. }
            | SchedulerCommand::CancelSnapshot { .. }
            | SchedulerCommand::FinishPush { .. } => (None, 0),
            SchedulerCommand::SubmitHandoffPrefill { id, .. } => (Some(*id), 1),
            SchedulerCommand::ReserveDestination { id, .. } => (Some(*id), 2),
            SchedulerCommand::ActivateDestination { id } => (Some(*id), 3),
            SchedulerCommand::ReleaseSource { id } => (Some(*id), 4),
            SchedulerCommand::CancelSource { id } => (Some(*id), 5),
            SchedulerCommand::CancelDestination { id } => (Some(*id), 6),
        };
        let outcome = self.core.apply(cmd, self.now);
        let ledger = match (id, kind, &outcome) {
            (Some(id), 1, CommandOutcome::Submitted) => {
                assert!(self.computing.insert(id), "{id} submitted twice");
                Ok(())
            }
            (Some(id), 2, CommandOutcome::Queued) => {
                assert!(self.queued.insert(id), "{id} queued twice");
                Ok(())
            }
            (Some(id), 3, CommandOutcome::Applied) => {
                self.ledger.end(id, Holding::DestinationReservation)
            }
            // A cancel after activation aborts the request: no reservation
            // is left to end.
            (Some(id), 6, CommandOutcome::Applied)
                if self.ledger.is_open(id, Holding::DestinationReservation) =>
            {
                self.ledger.end(id, Holding::DestinationReservation)
            }
            (Some(id), 6, CommandOutcome::Applied) if self.queued.remove(&id) => Ok(()),
            (Some(id), 4, CommandOutcome::Applied) => self.ledger.end(id, Holding::SourceLease),
            (Some(id), 5, CommandOutcome::Applied) => {
                if self.computing.remove(&id) {
                    Ok(())
                } else {
                    self.ledger.end(id, Holding::SourceLease)
                }
            }
            _ => Ok(()),
        };
        ledger.unwrap_or_else(|e| panic!("ledger: {e}"));
        self.check();
        outcome
    }

    /// One `step` call from `now` to `horizon`; advances `now` by its
    /// duration and records what it emitted.
    pub(crate) fn step_to(&mut self, horizon: Instant) -> u64 {
        let start = self.now;
        self.core.step(start, horizon, &mut self.out);
        let end = start + self.out.duration;
        self.passes += self.out.steps;
        for t in &self.out.tokens {
            assert!(t.tokens > 0);
            *self.tokens.entry(t.request).or_default() += u64::from(t.tokens);
            if t.first {
                *self.firsts.entry(t.request).or_default() += 1;
                self.first_at.push((t.request, start + self.out.first_step));
            }
        }
        for p in &self.out.pinned {
            assert!(
                self.computing.remove(&p.id),
                "{} pinned but not computing",
                p.id
            );
            self.ledger
                .open(p.id, Holding::SourceLease)
                .unwrap_or_else(|e| panic!("ledger: {e}"));
        }
        for &r in &self.out.finished {
            self.finished.push((r, end));
        }
        for &(id, sum) in &self.out.reserved {
            assert!(self.queued.remove(&id), "{id} granted but not queued");
            // Every fresh block is read into, unless the pull was below
            // `kv_recompute_threshold` and nothing is read.
            assert!(
                sum.transfer_blocks == sum.physical_blocks
                    || (sum.transfer_blocks, sum.transfer_tokens) == (0, 0),
                "{sum:?}"
            );
            self.ledger
                .open(id, Holding::DestinationReservation)
                .unwrap_or_else(|e| panic!("ledger: {e}"));
            self.granted.push((id, start));
        }
        for id in &self.out.unavailable {
            assert!(self.queued.contains(id), "{id} refused but not queued");
            assert!(!self.refused.contains(id), "{id} refused twice");
        }
        self.refused.extend_from_slice(&self.out.unavailable);
        self.preempted.extend_from_slice(&self.out.preempted);
        self.core.drain_kv_events(&mut self.events);
        self.now = end;
        self.check();
        self.out.steps
    }

    /// Exactly one pass.
    pub(crate) fn step(&mut self) -> u64 {
        let now = self.now;
        self.step_to(now)
    }

    /// Steps one pass at a time until no runnable work is left (or nothing
    /// can run); returns passes taken.
    pub(crate) fn run_idle(&mut self) -> u64 {
        for n in 0..1_000_000 {
            if self.core.is_empty() || self.step() == 0 {
                return n;
            }
        }
        panic!("core never went idle");
    }

    /// Queues a destination reservation and runs one pass (the waiting loop
    /// is where vLLM grants it); answers `Reserved` with the grant,
    /// `Unavailable(None)` when that pass could not grant it, or the
    /// command's own refusal.
    pub(crate) fn reserve(&mut self, id: HandoffId, request: Request) -> CommandOutcome {
        match self.apply(SchedulerCommand::ReserveDestination { id, request }) {
            CommandOutcome::Queued => {}
            other => return other,
        }
        self.step();
        if let Some(&(_, sum)) = self.out.reserved.iter().find(|(g, _)| *g == id) {
            CommandOutcome::Reserved(sum)
        } else if self.out.unavailable.contains(&id) {
            CommandOutcome::Unavailable(None)
        } else {
            CommandOutcome::Queued
        }
    }

    /// Events drained since the last call.
    pub(crate) fn take_events(&mut self) -> Vec<KvEvent> {
        self.core.drain_kv_events(&mut self.events);
        std::mem::take(&mut self.events)
    }
}

/// All hashes named by `Stored` events, in order.
pub(crate) fn stored_hashes(events: &[KvEvent]) -> Vec<u64> {
    events
        .iter()
        .flat_map(|e| match &e.data {
            KvEventData::Stored { block_hashes, .. } => block_hashes.clone(),
            _ => Vec::new(),
        })
        .collect()
}

/// All hashes named by `Removed` events, in order.
pub(crate) fn removed_hashes(events: &[KvEvent]) -> Vec<u64> {
    events
        .iter()
        .flat_map(|e| match &e.data {
            KvEventData::Removed { block_hashes } => block_hashes.clone(),
            _ => Vec::new(),
        })
        .collect()
}

/// Block hashes of `r` at 16 tokens per block.
pub(crate) fn hashes_of(r: &Request) -> Vec<u64> {
    let mut v = Vec::new();
    r.block_hashes(16, &mut v);
    v
}
