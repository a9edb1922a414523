//! [`FakeCore`]: a deliberately simple scheduler core for lifecycle tests. It owns a pool of
//! blocks, models no prefix cache, and panics on a double release or a
//! release of something it never held, so a lifecycle bug fails the test
//! that caused it.
//!
//! Semantics: every pass takes all waiting prefills (if their blocks fit) and
//! finishes them, and advances every running request by one token. A pass
//! lasts `pass` (1 ms by default).

use crate::accounting::{Holding, Ledger};
use crate::ids::{DestinationReservationId, HandoffId, RequestId, SourceLeaseId};
use crate::kv::{KvCapacitySnapshot, KvEvent, KvEventData, KvEventIds};
use crate::policy::{Backend, Capabilities};
use crate::request::Request;
use crate::scheduler::{
    CommandOutcome, PrefillPinned, ReservationSummary, SchedulerCommand, SchedulerCore, StepOutput,
    TokenEmission,
};
use crate::time::{Duration, Instant};
use std::collections::{BTreeMap, VecDeque};

#[derive(Debug)]
struct Running {
    id: RequestId,
    /// The destination it was activated from, if any.
    handoff: Option<HandoffId>,
    blocks: u64,
    remaining: u32,
    emitted: bool,
}

#[derive(Debug)]
struct Waiting {
    request: Request,
    handoff: Option<HandoffId>,
    blocks: Option<u64>,
}

/// The fake core; see the module docs.
#[derive(Debug)]
pub struct FakeCore {
    caps: Capabilities,
    total: u64,
    free: u64,
    pass: Duration,
    waiting: VecDeque<Waiting>,
    running: Vec<Running>,
    held: BTreeMap<HandoffId, u64>,
    reserved: BTreeMap<HandoffId, (Request, u64)>,
    ledger: Ledger,
    next_lease: u64,
    kv_ids: KvEventIds,
    kv: Vec<KvEvent>,
}

impl FakeCore {
    /// A core of `total` blocks of `block_size` tokens imitating `backend`.
    pub fn new(backend: Backend, total: u64, block_size: u32) -> Self {
        FakeCore {
            caps: Capabilities {
                backend,
                destination_reservation: backend != Backend::TrtLlm,
                source_lease_ttl: Duration::from_secs(10),
                block_size,
                event_block_tokens: block_size,
            },
            total,
            free: total,
            pass: Duration::from_millis(1),
            waiting: VecDeque::new(),
            running: Vec::new(),
            held: BTreeMap::new(),
            reserved: BTreeMap::new(),
            ledger: Ledger::new(),
            next_lease: 0,
            kv_ids: KvEventIds::default(),
            kv: Vec::new(),
        }
    }

    /// Sets the source lease lifetime reported in the capabilities.
    pub fn with_lease_ttl(mut self, ttl: Duration) -> Self {
        self.caps.source_lease_ttl = ttl;
        self
    }

    /// Sets how long each pass takes (1 ms unless set).
    pub fn with_pass(mut self, pass: Duration) -> Self {
        self.pass = pass;
        self
    }

    /// The exactly-once ledger of held sources and reservations.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    fn blocks_of(&self, r: &Request) -> u64 {
        Request::blocks_for(
            u64::from(r.prompt_tokens) + u64::from(r.max_output_tokens),
            self.caps.block_size,
        )
    }

    fn take(&mut self, n: u64) -> bool {
        if n <= self.free {
            self.free -= n;
            true
        } else {
            false
        }
    }

    fn give(&mut self, n: u64) {
        self.free += n;
        assert!(
            self.free <= self.total,
            "fake core: freed more blocks than exist (double free)"
        );
    }

    fn end(&mut self, id: HandoffId, what: Holding) {
        if let Err(e) = self.ledger.end(id, what) {
            panic!("fake core: {e}");
        }
    }
}

/// The longer commands of [`FakeCore`]'s `apply`.
impl FakeCore {
    /// `ReserveDestination`: takes the request's blocks, or reports no room.
    fn reserve(&mut self, id: HandoffId, request: Request) -> CommandOutcome {
        if !self.caps.destination_reservation {
            return CommandOutcome::Unsupported(Some(request));
        }
        if self.reserved.contains_key(&id) {
            panic!("fake core: reservation {id} requested twice");
        }
        let need = self.blocks_of(&request);
        if !self.take(need) {
            return CommandOutcome::Unavailable(Some(request));
        }
        if let Err(e) = self.ledger.open(id, Holding::DestinationReservation) {
            panic!("fake core: {e}");
        }
        let tokens = u64::from(request.prompt_tokens);
        self.reserved.insert(id, (request, need));
        CommandOutcome::Reserved(ReservationSummary {
            reservation: Some(DestinationReservationId(id.sequence())),
            physical_blocks: need,
            matched_prefix_tokens: 0,
            transfer_tokens: tokens,
            transfer_blocks: Request::blocks_for(tokens, self.caps.block_size),
            request_slot: false,
            decode_headroom_tokens: 0,
        })
    }

    /// `ActivateDestination`: the reservation becomes a running request.
    fn activate(&mut self, id: HandoffId) -> CommandOutcome {
        match self.reserved.remove(&id) {
            Some((request, blocks)) => {
                self.end(id, Holding::DestinationReservation);
                let id_ = self.kv_ids.next_id();
                self.kv.push(KvEvent {
                    event_id: id_,
                    data: KvEventData::Stored {
                        parent_hash: None,
                        block_hashes: vec![request.id.0],
                    },
                });
                self.running.push(Running {
                    id: request.id,
                    handoff: Some(id),
                    blocks,
                    remaining: request.max_output_tokens.max(1),
                    emitted: false,
                });
                CommandOutcome::Applied
            }
            None => panic!("fake core: activation of {id} without a reservation"),
        }
    }

    /// `CancelDestination`: frees the reservation, or aborts the request
    /// decoding from it once activated.
    fn cancel_destination(&mut self, id: HandoffId) -> CommandOutcome {
        match self.reserved.remove(&id) {
            Some((_, blocks)) => {
                self.end(id, Holding::DestinationReservation);
                self.give(blocks);
                CommandOutcome::Applied
            }
            None => {
                // Activated: abort the request it is decoding.
                match self.running.iter().position(|r| r.handoff == Some(id)) {
                    Some(i) => {
                        let r = self.running.swap_remove(i);
                        self.give(r.blocks);
                        CommandOutcome::Applied
                    }
                    None => panic!(
                        "fake core: cancel of reservation {id} that is neither held nor active (double free?)"
                    ),
                }
            }
        }
    }
}

impl SchedulerCore for FakeCore {
    fn capabilities(&self) -> Capabilities {
        self.caps
    }

    fn apply(&mut self, cmd: SchedulerCommand, _now: Instant) -> CommandOutcome {
        match cmd {
            SchedulerCommand::Submit(request) => {
                self.waiting.push_back(Waiting {
                    request,
                    handoff: None,
                    blocks: None,
                });
                CommandOutcome::Submitted
            }
            SchedulerCommand::SubmitHandoffPrefill { id, request } => {
                self.waiting.push_back(Waiting {
                    request,
                    handoff: Some(id),
                    blocks: None,
                });
                CommandOutcome::Submitted
            }
            SchedulerCommand::ReserveDestination { id, request } => self.reserve(id, request),
            SchedulerCommand::ActivateDestination { id } => self.activate(id),
            SchedulerCommand::ReleaseSource { id } => match self.held.remove(&id) {
                Some(blocks) => {
                    self.end(id, Holding::SourceLease);
                    self.give(blocks);
                    CommandOutcome::Applied
                }
                None => panic!("fake core: release of {id} which is not held (double release?)"),
            },
            SchedulerCommand::CancelSource { id } => {
                if let Some(blocks) = self.held.remove(&id) {
                    self.end(id, Holding::SourceLease);
                    self.give(blocks);
                    return CommandOutcome::Applied;
                }
                let before = self.waiting.len();
                self.waiting.retain(|w| w.handoff != Some(id));
                if self.waiting.len() == before {
                    panic!("fake core: cancel of source {id} that is neither computing nor held");
                }
                CommandOutcome::Applied
            }
            SchedulerCommand::ReleaseSession { .. }
            | SchedulerCommand::EvictSession { .. }
            | SchedulerCommand::IngestSnapshot { .. }
            | SchedulerCommand::CancelSnapshot { .. }
            | SchedulerCommand::FinishPush { .. } => CommandOutcome::Noop,
            SchedulerCommand::ReserveSnapshot { .. } => CommandOutcome::Unsupported(None),
            SchedulerCommand::CancelDestination { id } => self.cancel_destination(id),
        }
    }

    fn step(&mut self, now: Instant, _horizon: Instant, out: &mut StepOutput) {
        let _ = now;
        out.clear();
        if self.waiting.is_empty() && self.running.is_empty() {
            return;
        }
        out.steps = 1;
        out.duration = self.pass;
        out.first_step = self.pass;
        out.last_step = self.pass;
        let mut still = VecDeque::new();
        while let Some(mut w) = self.waiting.pop_front() {
            let need =
                Request::blocks_for(u64::from(w.request.prompt_tokens), self.caps.block_size);
            if w.blocks.is_none() && self.take(need) {
                w.blocks = Some(need);
            }
            let Some(blocks) = w.blocks else {
                still.push_back(w);
                continue;
            };
            out.prefill_tokens += u64::from(w.request.prompt_tokens);
            match w.handoff {
                Some(id) => {
                    self.next_lease += 1;
                    if let Err(e) = self.ledger.open(id, Holding::SourceLease) {
                        panic!("fake core: {e}");
                    }
                    self.held.insert(id, blocks);
                    out.pinned.push(PrefillPinned {
                        id,
                        request: w.request.id,
                        lease: SourceLeaseId(self.next_lease),
                        blocks,
                        tokens: u64::from(w.request.prompt_tokens),
                    });
                }
                None => {
                    out.tokens.push(TokenEmission {
                        request: w.request.id,
                        tokens: 1,
                        first: true,
                    });
                    let remaining = w.request.max_output_tokens.max(1) - 1;
                    self.running.push(Running {
                        id: w.request.id,
                        handoff: None,
                        blocks,
                        remaining,
                        emitted: true,
                    });
                }
            }
        }
        self.waiting = still;
        let mut i = 0;
        while i < self.running.len() {
            let r = &mut self.running[i];
            if r.remaining == 0 {
                let (id, blocks) = (r.id, r.blocks);
                self.running.swap_remove(i);
                self.give(blocks);
                out.finished.push(id);
                continue;
            }
            if !(out.tokens.iter().any(|t| t.request == r.id)) {
                out.tokens.push(TokenEmission {
                    request: r.id,
                    tokens: 1,
                    first: !r.emitted,
                });
                r.emitted = true;
                r.remaining -= 1;
            }
            i += 1;
        }
    }

    fn capacity(&self) -> KvCapacitySnapshot {
        let pinned: u64 = self.held.values().sum();
        let reserved: u64 = self.reserved.values().map(|(_, b)| *b).sum();
        KvCapacitySnapshot {
            total_blocks: self.total,
            active_blocks: self.total - self.free - pinned - reserved,
            pinned_source_blocks: pinned,
            reserved_destination_blocks: reserved,
            running_requests: self.running.len() as u64,
            waiting_requests: self.waiting.len() as u64,
            ..Default::default()
        }
    }

    fn drain_kv_events(&mut self, out: &mut Vec<KvEvent>) {
        out.append(&mut self.kv);
    }

    fn is_empty(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    fn is_drained(&self) -> bool {
        self.is_empty() && self.held.is_empty() && self.reserved.is_empty()
    }
}
