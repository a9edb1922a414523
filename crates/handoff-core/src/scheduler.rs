//! The contract between the lifecycle and a backend scheduler core.
//!
//! A core owns every physical page of one worker. The lifecycle never touches
//! pages: it applies [`SchedulerCommand`]s and reads back outcomes, step
//! output, capacity snapshots and KV events.

use crate::ids::{DestinationReservationId, HandoffId, RequestId, SourceLeaseId};
use crate::kv::{KvCapacitySnapshot, KvEvent};
use crate::policy::Capabilities;
use crate::request::Request;
use crate::time::{Duration, Instant};

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

/// A command to a scheduler core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SchedulerCommand {
    /// An ordinary request: prefill then decode on this worker.
    Submit(Request),
    /// Prefill only; at its terminal step the request moves atomically into
    /// held-prefill ownership keyed by `id` and a [`PrefillPinned`] is
    /// reported (DEP invariant 6).
    SubmitHandoffPrefill {
        /// The handoff attempt.
        id: HandoffId,
        /// The request to prefill.
        request: Request,
    },
    /// Reserve destination capacity for `request`, all or nothing. A core
    /// that reserves inside its own scheduling loop (vLLM) answers
    /// [`CommandOutcome::Queued`] and grants it in a later `step`.
    ReserveDestination {
        /// The handoff attempt.
        id: HandoffId,
        /// The request whose KV will arrive. On `Unavailable`/`Unsupported`
        /// it is handed back in the outcome.
        request: Request,
    },
    /// Incoming KV is valid: publish it and queue the request to decode.
    ActivateDestination {
        /// The handoff attempt.
        id: HandoffId,
    },
    /// The reader finished (or the lease expired): do the deferred free.
    ReleaseSource {
        /// The handoff attempt.
        id: HandoffId,
    },
    /// Abandon a handoff prefill, computing or held; frees exactly once.
    CancelSource {
        /// The handoff attempt.
        id: HandoffId,
    },
    /// Destination of a D→P snapshot push (a reversed handoff): reserve
    /// room for `tokens` of `session`'s KV in the snapshot store, all or
    /// nothing. `Reserved` or `Unavailable(None)` / `Unsupported(None)`.
    ReserveSnapshot {
        /// The push attempt.
        id: HandoffId,
        /// The session.
        session: crate::ids::SessionId,
        /// Tokens to receive.
        tokens: u64,
    },
    /// The push's KV landed: the reservation becomes the session's snapshot.
    IngestSnapshot {
        /// The push attempt.
        id: HandoffId,
    },
    /// Abandon a snapshot reservation (the push failed or was aborted).
    CancelSnapshot {
        /// The push attempt.
        id: HandoffId,
    },
    /// Source of a D→P push: the push under the slot lock `lock` ended.
    FinishPush {
        /// The session.
        session: crate::ids::SessionId,
        /// The slot lock (the push's source lease).
        lock: SourceLeaseId,
        /// How it ended.
        result: crate::session::PushResult,
    },
    /// Evict `session`'s slot as a capacity eviction would, now or once it
    /// is idle and unlocked (a forced "not resident"; the seed's §8 smoke
    /// test). `Noop` on a core without sessions.
    EvictSession {
        /// The session.
        session: crate::ids::SessionId,
    },
    /// The client closed `session`: free its session slot (after a running
    /// turn) and any snapshot of it, aborting a push in flight. `Noop` on a
    /// core without sessions or holding nothing of it.
    ReleaseSession {
        /// The session.
        session: crate::ids::SessionId,
    },
    /// Abandon a reservation: unpublished pages are freed without Removed
    /// events and any locked prefix is unlocked. Once activated, abort the
    /// request decoding from it instead (a client abort): its blocks are
    /// freed as a finished request's are, and it reports no
    /// `RequestFinished`.
    CancelDestination {
        /// The handoff attempt.
        id: HandoffId,
    },
}

/// What a reservation took.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct ReservationSummary {
    /// The core's handle for the reservation.
    pub reservation: Option<DestinationReservationId>,
    /// Fresh physical blocks allocated for incoming KV (counted as reserved).
    pub physical_blocks: u64,
    /// Prompt tokens already cached on the destination (reused prefix).
    pub matched_prefix_tokens: u64,
    /// Tokens whose KV must be transferred (page-aligned delta).
    pub transfer_tokens: u64,
    /// Blocks whose KV must be transferred.
    pub transfer_blocks: u64,
    /// Whether a request slot was taken (SGLang).
    pub request_slot: bool,
    /// Admission-only decode headroom promised (SGLang), not physical.
    pub decode_headroom_tokens: u64,
}

/// The result of applying a [`SchedulerCommand`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommandOutcome {
    /// The request was queued.
    Submitted,
    /// The reservation holds.
    Reserved(ReservationSummary),
    /// Not enough capacity now; nothing was held. The request comes back so
    /// the caller can retry without cloning it.
    Unavailable(Option<Request>),
    /// The backend cannot do this at all; retrying is pointless.
    Unsupported(Option<Request>),
    /// The core took the reservation into its own scheduling queue: a later
    /// `step` reports the grant in [`StepOutput::reserved`] (or, once, that a
    /// pass could not grant it, in [`StepOutput::unavailable`]); until then
    /// nothing is held. vLLM allocates remote-KV requests only inside
    /// `Scheduler.schedule`'s waiting loop (`vllm/v1/core/sched/scheduler.py`),
    /// so its core answers this.
    Queued,
    /// The command took effect.
    Applied,
    /// Nothing to do (unknown or already-ended id): idempotent cleanup.
    Noop,
}

/// A completed prefill moved into held ownership (one atomic transition).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefillPinned {
    /// The handoff attempt.
    pub id: HandoffId,
    /// The request.
    pub request: RequestId,
    /// The core's handle for the held blocks.
    pub lease: SourceLeaseId,
    /// Blocks now counted as pinned.
    pub blocks: u64,
    /// Prompt tokens whose KV is held.
    pub tokens: u64,
}

/// KV of a handoff prefill's finished chunk, ready to stream to its
/// destination while later chunks compute (SGLang `disaggregation/prefill.py`
/// `send_kv_chunk`, called for every chunk a chunked prefill finishes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvChunk {
    /// The handoff attempt.
    pub id: HandoffId,
    /// Prompt tokens whose KV is now complete, from the start of the prompt
    /// (cumulative, whole pages; the final partial page waits for the last
    /// chunk, whose KV goes with the transfer itself).
    pub ready_tokens: u64,
    /// The KV was complete before the step's first pass (a cached prefix,
    /// SGLang's early send): it is ready at the step's start, not at the
    /// end of the pass that reported it.
    pub before_pass: bool,
}

/// Tokens a request emitted in a step call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TokenEmission {
    /// The request.
    pub request: RequestId,
    /// Tokens emitted, one per step the call covered.
    pub tokens: u32,
    /// Whether the first of them is the request's first output token.
    pub first: bool,
}

/// What one `step` call did. Buffers are reused across calls, so a steady
/// decode step allocates nothing.
#[derive(Clone, Debug, Default)]
pub struct StepOutput {
    /// Forward passes the call covered (0 when there was nothing to run).
    pub steps: u64,
    /// Modelled time of all passes together.
    pub duration: Duration,
    /// Modelled time of the first pass.
    pub first_step: Duration,
    /// Modelled time of the last pass.
    pub last_step: Duration,
    /// Every pass's modelled time, in order, when the call covered more
    /// than one (empty for one pass: `first_step` says it). Pass times are
    /// not linear in the pass index (the decode fit is quadratic in KV
    /// use, and a first pass may prefill), so token times are only exact
    /// from these.
    pub passes: Vec<Duration>,
    /// Prefill tokens computed (after prefix-cache hits).
    pub prefill_tokens: u64,
    /// Tokens emitted per request.
    pub tokens: Vec<TokenEmission>,
    /// Requests whose first output token was sampled by their prefill
    /// worker and arrived with the KV: streamed at the start of the call,
    /// before its first pass, without a forward pass here. SGLang PD decode
    /// does this (`disaggregation/decode.py`:
    /// `DecodeTransferQueue._commit_transfer_to_req` appends the prefill's
    /// output id, `get_next_disagg_decode_batch_to_run` streams it through
    /// `process_batch_result_prebuilt` before merging the request into the
    /// running batch). vLLM never fills it: its P/D prefill's token is
    /// discarded and decode samples the first token itself.
    pub shipped_first_tokens: Vec<RequestId>,
    /// Requests that finished (output complete) and freed their KV.
    pub finished: Vec<RequestId>,
    /// How many of the first `finished` entries ended at the start of the
    /// call, by their shipped first token alone (one-token requests); the
    /// rest end with the call. All of them when `steps == 0`.
    pub finished_at_start: usize,
    /// Handoff prefills that completed into held ownership.
    pub pinned: Vec<PrefillPinned>,
    /// Handoff prefills that finished a chunk but not their prompt (cores
    /// that stream KV per chunk; vLLM's NIXL reads the whole prompt once).
    pub kv_chunks: Vec<KvChunk>,
    /// Requests preempted (vLLM recompute) or retracted (SGLang).
    pub preempted: Vec<RequestId>,
    /// Queued destination reservations ([`CommandOutcome::Queued`]) granted
    /// by this call's first pass, in grant order.
    pub reserved: Vec<(HandoffId, ReservationSummary)>,
    /// Queued destination reservations this call left ungranted, each
    /// reported once (the first call that could not grant it).
    pub unavailable: Vec<HandoffId>,
}

impl StepOutput {
    /// Empties the buffers, keeping their capacity.
    pub fn clear(&mut self) {
        self.steps = 0;
        self.duration = Duration::ZERO;
        self.first_step = Duration::ZERO;
        self.last_step = Duration::ZERO;
        self.passes.clear();
        self.prefill_tokens = 0;
        self.tokens.clear();
        self.shipped_first_tokens.clear();
        self.finished.clear();
        self.finished_at_start = 0;
        self.pinned.clear();
        self.kv_chunks.clear();
        self.preempted.clear();
        self.reserved.clear();
        self.unavailable.clear();
    }

    /// Whether the step produced nothing but its passes' shape and tokens
    /// (KV events aside, which the core keeps apart): what
    /// [`SchedulerCore::quiet_floor`] calls quiet.
    pub fn is_quiet(&self) -> bool {
        self.shipped_first_tokens.is_empty()
            && self.finished.is_empty()
            && self.pinned.is_empty()
            && self.kv_chunks.is_empty()
            && self.preempted.is_empty()
            && self.reserved.is_empty()
            && self.unavailable.is_empty()
    }
}

/// A backend scheduler core: one worker's physical KV and batch.
///
/// Sans-IO: `now` is an argument and nothing reads a clock or sleeps.
pub trait SchedulerCore {
    /// What the backend supports and its lifecycle constants.
    fn capabilities(&self) -> Capabilities;

    /// Applies a command at `now`. Never panics on a bad id: unknown or ended
    /// ids answer [`CommandOutcome::Noop`].
    fn apply(&mut self, cmd: SchedulerCommand, now: Instant) -> CommandOutcome;

    /// Runs one forward pass starting at `now` and then, while the batch's
    /// composition cannot change (no request finishes, no block allocation
    /// can fail, no waiting request could be admitted), further passes that
    /// end by `horizon` (nothing can reach the worker before it, so no
    /// observer can tell the passes apart from single ones). Pass
    /// `horizon <= now` for exactly one pass. `out` is cleared first. With no runnable work, `out.steps == 0`;
    /// a call may still grant queued reservations then (a pass that
    /// schedules no token takes no time), and `shipped_first_tokens` and the
    /// requests they finished may be non-empty.
    fn step(&mut self, now: Instant, horizon: Instant, out: &mut StepOutput);

    /// Physical occupancy and admission quantities now.
    fn capacity(&self) -> KvCapacitySnapshot;

    /// Blocks neither referenced nor cached, counted by the allocator itself
    /// rather than derived from [`KvCapacitySnapshot`]'s categories, so a
    /// checker can test `free + cached + used == total` as an equation
    /// between two independent counts. `None` (the default) when the core
    /// has no separate count.
    fn free_blocks(&self) -> Option<u64> {
        None
    }

    /// Moves pending KV events into `out` (appending).
    fn drain_kv_events(&mut self, out: &mut Vec<KvEvent>);

    /// Takes back the hash buffer of one of its KV events once consumed
    /// (`Worker::recycle`), to reuse its capacity; only capacity, so no
    /// output may depend on it. Cores that keep no spares drop it (the
    /// default).
    fn recycle_kv_hashes(&mut self, hashes: Vec<u64>) {
        let _ = hashes;
    }

    /// Moves pending session events into `out` (appending), in order. Cores
    /// without a session layer have none (the default).
    fn drain_session_events(&mut self, out: &mut Vec<crate::session::SessionEvent>) {
        let _ = out;
    }

    /// The held source `id` is about to be freed early (its lease ran out,
    /// or it was cancelled) while a reader may still read it: from now on
    /// the core notes the first time it gives one of those blocks to
    /// another owner, for [`SchedulerCore::drain_reused`]. Called before
    /// the `ReleaseSource`/`CancelSource` that frees them. What it
    /// remembers is bounded by the pool (one entry per block). Cores that
    /// do not track block reuse ignore it (the default), and their stale
    /// reads count as not reused.
    fn watch_released(&mut self, id: HandoffId) {
        let _ = id;
    }

    /// Moves into `out` (appending) the watched sources
    /// ([`SchedulerCore::watch_released`]) one of whose blocks was
    /// reallocated since the last call, each once.
    fn drain_reused(&mut self, out: &mut Vec<HandoffId>) {
        let _ = out;
    }

    /// No runnable work (nothing running or waiting to run).
    fn is_empty(&self) -> bool;

    /// Empty and no retained ownership: no held source, no reservation.
    fn is_drained(&self) -> bool;

    /// How long after the step in progress ends the core is sure to stay
    /// quiet if nothing reaches it, for the state the last operation left
    /// (a driver asks again after every input). The engine lets another
    /// host's run of passes go past such a step end (see `engine`'s module
    /// docs). The default, zero, promises nothing.
    fn quiet_floor(&mut self) -> QuietFloor {
        QuietFloor::default()
    }

    /// Passes this core timed at the edge of a clamping step-time profile
    /// because they lay past its grid: (prefill lookups, decode lookups).
    /// The default, none, is right for a model without a grid.
    fn beyond_grid_passes(&self) -> (u64, u64) {
        (0, 0)
    }
}

/// [`SchedulerCore::quiet_floor`]'s answer, as durations from the end of the
/// step in progress, each at least the one before: until `next` the core
/// releases nothing at all (its next step, which runs a pass, ends no
/// earlier); until `pass` every step it takes releases only a pass's shape
/// and tokens (no finish, pin, preemption, grant, first token from a
/// prefill, KV or session event); until `kv` that and KV events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuietFloor {
    /// Nothing released before it.
    pub next: Duration,
    /// Nothing but pass shapes and tokens before it.
    pub pass: Duration,
    /// Nothing but pass shapes, tokens and KV events before it.
    pub kv: Duration,
}

impl QuietFloor {
    /// Only the next step's own length is vouched for.
    pub fn next_only(next: Duration) -> Self {
        QuietFloor {
            next,
            pass: next,
            kv: next,
        }
    }
}

/// A scheduler core of any backend, sendable to a worker thread.
pub type CoreBox = Box<dyn SchedulerCore + Send>;

/// Lets drivers hold cores of different backends behind one type.
impl<T: SchedulerCore + ?Sized> SchedulerCore for Box<T> {
    fn capabilities(&self) -> Capabilities {
        (**self).capabilities()
    }
    fn apply(&mut self, cmd: SchedulerCommand, now: Instant) -> CommandOutcome {
        (**self).apply(cmd, now)
    }
    fn step(&mut self, now: Instant, horizon: Instant, out: &mut StepOutput) {
        (**self).step(now, horizon, out)
    }
    fn capacity(&self) -> KvCapacitySnapshot {
        (**self).capacity()
    }
    fn free_blocks(&self) -> Option<u64> {
        (**self).free_blocks()
    }
    fn drain_kv_events(&mut self, out: &mut Vec<KvEvent>) {
        (**self).drain_kv_events(out)
    }
    fn recycle_kv_hashes(&mut self, hashes: Vec<u64>) {
        (**self).recycle_kv_hashes(hashes)
    }
    fn drain_session_events(&mut self, out: &mut Vec<crate::session::SessionEvent>) {
        (**self).drain_session_events(out)
    }
    fn watch_released(&mut self, id: HandoffId) {
        (**self).watch_released(id)
    }
    fn drain_reused(&mut self, out: &mut Vec<HandoffId>) {
        (**self).drain_reused(out)
    }
    fn is_empty(&self) -> bool {
        (**self).is_empty()
    }
    fn is_drained(&self) -> bool {
        (**self).is_drained()
    }
    fn quiet_floor(&mut self) -> QuietFloor {
        (**self).quiet_floor()
    }
    fn beyond_grid_passes(&self) -> (u64, u64) {
        (**self).beyond_grid_passes()
    }
}
