//! Which ordering a handoff follows, and what a backend can do.

use crate::time::Duration;

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

/// The prefill→decode handoff ordering.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub enum HandoffPolicy {
    /// No handoff ownership: prefill completes and frees as an ordinary
    /// request, decode is submitted afterwards as an ordinary request. Kept so
    /// reports with and without the lifecycle can be compared (DEP inv. 11).
    Disabled,
    /// vLLM: prefill runs first and its KV stays pinned until a destination
    /// reserves and reads it.
    SourceFirst,
    /// SGLang: decode reserves a slot, pages, headroom and a locked prefix
    /// before prefill is dispatched.
    DestinationFirst,
    /// vLLM's NIXL push mode (`NixlPushConnector`, vLLM PR #35264;
    /// `vllm/distributed/kv_transfer/kv_connector/v1/nixl/push_scheduler.py`,
    /// `push_worker.py`; design in `docs/design/nixl_kv_push_connector.md`),
    /// not seed 002's session push. Both legs start at once: the prefill
    /// runs as in [`HandoffPolicy::SourceFirst`] while the decode allocates
    /// its blocks (`NixlPushConnectorScheduler.update_state_after_alloc`)
    /// and registers them with the prefill engine (a `PUSH_REG` NIXL
    /// notification, `NixlPushConnectorWorker._send_registration_to_p`).
    /// The prefill engine writes once it holds both its finished blocks
    /// (`request_finished`, pinned under the same `kv_lease_duration` lease
    /// as pull) and the registration, whichever came first
    /// (`_push_writer_loop`, `_handle_push_reg_notif`), and frees its
    /// blocks when the write completes (`get_transfer_results`,
    /// `finished_sending`); the completion notice activates the decode.
    Push,
}

impl HandoffPolicy {
    /// Stable lower-case name used in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            HandoffPolicy::Disabled => "disabled",
            HandoffPolicy::SourceFirst => "source-first",
            HandoffPolicy::DestinationFirst => "destination-first",
            HandoffPolicy::Push => "push",
        }
    }

    /// Whether the prefill is dispatched as the request arrives (not gated
    /// on a destination reservation).
    pub fn prefill_at_arrival(self) -> bool {
        matches!(self, HandoffPolicy::SourceFirst | HandoffPolicy::Push)
    }

    /// Whether the source moves the KV (writes) and tells its destination
    /// `ReceiveCompleted`; otherwise (source-first) the destination reads
    /// and tells its source `ReaderCompleted`.
    pub fn source_writes(self) -> bool {
        matches!(self, HandoffPolicy::DestinationFirst | HandoffPolicy::Push)
    }
}

/// vLLM's `transfer_mode` (`NixlPushConnectorScheduler._TRANSFER_MODE`,
/// returned in `kv_transfer_params` by `request_finished`): which way the
/// NIXL connector moves KV. `Pull` is [`HandoffPolicy::SourceFirst`],
/// `Push` is [`HandoffPolicy::Push`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KvTransferMode {
    /// `NixlConnector`: the decode engine reads (NIXL READ).
    #[default]
    Pull,
    /// `NixlPushConnector`: the prefill engine writes (NIXL WRITE).
    Push,
}

impl KvTransferMode {
    /// vLLM's name for it (`"pull"`, `"push"`).
    pub fn name(self) -> &'static str {
        match self {
            KvTransferMode::Pull => "pull",
            KvTransferMode::Push => "push",
        }
    }

    /// The mode a deployment of `policy` runs.
    pub fn of(policy: HandoffPolicy) -> Self {
        if policy == HandoffPolicy::Push {
            KvTransferMode::Push
        } else {
            KvTransferMode::Pull
        }
    }
}

/// The engine a scheduler core imitates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub enum Backend {
    /// vLLM v1.
    Vllm,
    /// SGLang.
    Sglang,
    /// TensorRT-LLM: has no destination reservation; refuses it.
    TrtLlm,
}

impl Backend {
    /// The ordering the real engine uses.
    pub fn native_policy(self) -> HandoffPolicy {
        match self {
            Backend::Vllm => HandoffPolicy::SourceFirst,
            Backend::Sglang => HandoffPolicy::DestinationFirst,
            Backend::TrtLlm => HandoffPolicy::Disabled,
        }
    }

    /// Stable lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Vllm => "vllm",
            Backend::Sglang => "sglang",
            Backend::TrtLlm => "trtllm",
        }
    }
}

/// What a scheduler core supports, and its lifecycle constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// The engine imitated.
    pub backend: Backend,
    /// Whether `ReserveDestination` can ever succeed. `false` makes every
    /// reservation a terminal `Unsupported`, never retried.
    pub destination_reservation: bool,
    /// How long a pinned source is held without a reader before it expires.
    pub source_lease_ttl: Duration,
    /// Tokens per KV block (vLLM block) or page (SGLang page).
    pub block_size: u32,
    /// Tokens one published KV event block covers, the unit routers must
    /// hash requests in: vLLM's block; SGLang's event block, a multiple of
    /// its page.
    pub event_block_tokens: u32,
}

/// What a destination's request does when its KV load failed as the
/// connector reports it ([`crate::CancelReason::KvLoadFailed`]: the
/// transfer failed, or a stale read under [`StaleReadPolicy::Fail`]):
/// vLLM's `kv_load_failure_policy` (`vllm/config/kv_transfer.py`,
/// `KVTransferConfig`, `Literal["recompute", "fail"]`, default `fail`;
/// applied by the decode scheduler, `vllm/v1/core/sched/scheduler.py`,
/// `_handle_invalid_blocks`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KvLoadFailurePolicy {
    /// The request fails with the load error.
    #[default]
    Fail,
    /// The decode worker computes the prompt itself from its first invalid
    /// block: upstream `_update_requests_with_invalid_blocks` truncates
    /// `num_computed_tokens` there, and a failed NIXL transfer marks every
    /// block it was loading invalid, so what stays valid is the decode
    /// worker's own cached prefix. Here the request goes on on the decode
    /// worker as an ordinary request, routed in the instant its
    /// destination ended: the destination's prefix hits go back to the
    /// decode worker's cache and the request's admission hits them again
    /// unless something evicted them first (`tests/tests/
    /// kv_load_recompute.rs`), computing the rest.
    Recompute,
}

/// What a source-first destination does with a read that found its
/// source's KV released ([`crate::TransferResult::SourceReleased`]).
/// Upstream has no such choice: a NIXL read of freed blocks is a read like
/// any other and the request succeeds. The mock marks it (the report's
/// stale reads, per request) either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum StaleReadPolicy {
    /// As vLLM: the read completes, the destination activates and decodes.
    #[default]
    Complete,
    /// Stricter than vLLM: the load fails
    /// ([`crate::CancelReason::KvLoadFailed`]) and the request follows
    /// [`KvLoadFailurePolicy`].
    Fail,
}

/// What a client's cancel does to KV a handoff still holds
/// (`--cancel-frees`). Upstream's rules are the default; they apply to vLLM's
/// orders (source-first pull and NIXL push) and only to a client's cancel
/// (a lost or restarted peer, a teardown, a peer's abort free at once as
/// before). SGLang frees at once either way: its `Scheduler.abort_request`
/// (`python/sglang/srt/managers/scheduler.py`) aborts the request's
/// `KVSender`/`KVReceiver` in the prefill bootstrap and inflight queues and
/// the decode prealloc and transfer queues, and the next poll of that queue
/// sees `KVPoll.Failed` and releases the KV (`disaggregation/prefill.py`
/// `process_disagg_prefill_inflight_queue`, `disaggregation/decode.py`
/// `pop_transferred`); holding a decode's pages until an in-flight write
/// drains is an opt-in there (`SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE`,
/// sgl-project/sglang PRs #35049, #35360).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CancelFrees {
    /// As vLLM: a prefill that already finished ignores the abort for its
    /// blocks, which stay until the decode's read notice or the lease
    /// (vllm-project/vllm PR #25067: `v1/core/sched/scheduler.py`
    /// `finish_requests` skips a request no longer in `self.requests`; the
    /// NIXL connector's `request_finished` had already answered
    /// `delay_free_blocks`); a decode whose KV load is in flight keeps its
    /// blocks until the load ends, then frees and lets the read's notice
    /// free the prefill (PR #32255); a decode cancelled before its load,
    /// or refusing the request, sends the prefill a notification-only
    /// release that frees it at once (PRs #41269, #57570).
    #[default]
    Upstream,
    /// The mock's earlier rule: a cancel frees the prefill's pinned KV and
    /// the decode's reservation at the cancel, and a read of that source
    /// fails.
    Immediately,
}

impl CancelFrees {
    /// The name the command line and the report use.
    pub fn name(self) -> &'static str {
        match self {
            CancelFrees::Upstream => "upstream",
            CancelFrees::Immediately => "immediately",
        }
    }
}

impl StaleReadPolicy {
    /// The name the command line and the report use.
    pub fn name(self) -> &'static str {
        match self {
            StaleReadPolicy::Complete => "complete",
            StaleReadPolicy::Fail => "fail",
        }
    }
}

impl KvLoadFailurePolicy {
    /// vLLM's name for it.
    pub fn name(self) -> &'static str {
        match self {
            KvLoadFailurePolicy::Fail => "fail",
            KvLoadFailurePolicy::Recompute => "recompute",
        }
    }
}

/// vLLM's source lease heartbeat (NIXL connector, upstream main: the
/// lease `kv_lease_duration`, 30 s by default, in `nixl/base_worker.py`;
/// `_send_heartbeats` and `_handle_heartbeat`): from the moment a decode
/// worker has a request whose KV it will read (`nixl/base_scheduler.py`,
/// `on_new_request`) until the read completes, it tells the prefill worker
/// every `lease / 6` that it still wants the blocks, and the prefill worker
/// extends their expiry to `max(expiry, now + lease * 2 / 3)`. A decode
/// worker that dies stops the heartbeats, so its source's KV is freed
/// within one extension instead of being stranded.
///
/// Modelled per handoff: the destination role sends its first heartbeat
/// `every` after it is routed, then every `every` while it waits, reserves
/// or receives, as [`crate::msg::MsgBody::LeaseRenewal`] facts that travel
/// (and can be lost) like any other. vLLM batches one engine's heartbeats
/// per tick; the first one of a request therefore comes up to one interval
/// sooner there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Heartbeat {
    /// Interval between a destination's heartbeats.
    pub every: Duration,
    /// How far past its arrival a heartbeat moves the source's expiry.
    pub extend: Duration,
}

impl Heartbeat {
    /// vLLM's default `kv_lease_duration` (30 s), whose heartbeat
    /// [`HandoffConfig::for_backend`] arms for vLLM.
    pub const VLLM_LEASE: Duration = Duration::from_secs(30);

    /// vLLM's heartbeat for a lease of `lease`, in vLLM's whole seconds
    /// (`kv_lease_duration: int`; `nixl/base_worker.py`, the worker's
    /// `__init__`): every `max(lease // 6, 1)` s, extending by
    /// `lease * 2 // 3` s. A lease under 2 s extends by nothing, as
    /// upstream (its heartbeats cannot hold it); a fraction of a second of
    /// `lease` is dropped first, as the integer option cannot carry one.
    pub fn for_lease(lease: Duration) -> Self {
        let secs = lease.as_secs();
        Heartbeat {
            every: Duration::from_secs((secs / 6).max(1)),
            extend: Duration::from_secs(secs.saturating_mul(2) / 3),
        }
    }

    /// The same fractions at nanosecond resolution (`lease / 6`, at least a
    /// millisecond, and `lease * 2 / 3`): for sub-second leases in tests,
    /// which vLLM's integer option cannot express.
    pub fn scaled(lease: Duration) -> Self {
        Heartbeat {
            every: (lease / 6).max(Duration::from_millis(1)),
            extend: lease / 3 * 2,
        }
    }
}

/// Lifecycle timing knobs shared by both roles of a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandoffConfig {
    /// A destination reservation not activated within this time expires and
    /// is cancelled locally (the owner guard of DEP "Failure and cleanup").
    /// [`HandoffConfig::NO_DEADLINE`] turns the guard off
    /// ([`HandoffConfig::for_backend`] does for vLLM).
    pub reservation_ttl: Duration,
    /// When set, each failed reservation attempt renews the source lease by
    /// this much; vLLM has no renewal, so the default is `None`.
    pub renew_source_lease: Option<Duration>,
    /// Facts for ids this worker has not seen yet (a peer's message raced the
    /// request) are buffered this long before being dropped as stale.
    pub early_fact_ttl: Duration,
    /// How many released ids are remembered to classify late facts as stale.
    pub tombstones: usize,
    /// What a request whose KV load failed does (the serving layer applies
    /// it: it decides requests' fates).
    pub kv_load_failure: KvLoadFailurePolicy,
    /// What a read of released source KV does (upstream: it completes).
    pub stale_read: StaleReadPolicy,
    /// Source-first destinations keep their source's lease alive with
    /// heartbeats (vLLM's NIXL lease); `None`: no heartbeats (SGLang, and
    /// vLLM before the lease, whose sources held a fixed abort timeout).
    pub heartbeat: Option<Heartbeat>,
    /// What a client's cancel frees, and when ([`CancelFrees`]).
    pub cancel_frees: CancelFrees,
}

impl HandoffConfig {
    /// A `reservation_ttl` that never expires: no timer is armed.
    pub const NO_DEADLINE: Duration = Duration::MAX;

    /// The defaults for a deployment of `backend`. vLLM (and the TRT-LLM
    /// refusal mode, which never reserves) has no decode-side deadline: a
    /// `WAITING_FOR_REMOTE_KVS` request waits in `Scheduler.waiting` until its
    /// KV arrives or it is aborted (`vllm/v1/core/sched/scheduler.py`); only
    /// the prefill side frees its delayed blocks when their lease runs out,
    /// which the decode side's heartbeats renew ([`Heartbeat`], for vLLM's
    /// default 30 s lease). SGLang keeps the 300 s guard and no heartbeat.
    pub fn for_backend(backend: Backend) -> Self {
        let mut c = HandoffConfig::default();
        if matches!(backend, Backend::Vllm | Backend::TrtLlm) {
            c.reservation_ttl = HandoffConfig::NO_DEADLINE;
        }
        if backend == Backend::Vllm {
            c.heartbeat = Some(Heartbeat::for_lease(Heartbeat::VLLM_LEASE));
        }
        c
    }

    /// Whether reservations expire at all.
    pub fn reservation_expires(&self) -> bool {
        self.reservation_ttl != HandoffConfig::NO_DEADLINE
    }
}

impl Default for HandoffConfig {
    fn default() -> Self {
        HandoffConfig {
            reservation_ttl: Duration::from_secs(300),
            renew_source_lease: None,
            early_fact_ttl: Duration::from_secs(30),
            tombstones: 1 << 16,
            kv_load_failure: KvLoadFailurePolicy::Fail,
            stale_read: StaleReadPolicy::Complete,
            heartbeat: None,
            cancel_frees: CancelFrees::Upstream,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeats_use_vllms_integer_seconds() {
        let hb = |s: u64, ms: u64| Heartbeat::for_lease(Duration::from_millis(s * 1_000 + ms));
        let secs = Duration::from_secs;
        // 30 // 6 = 5, 30 * 2 // 3 = 20.
        assert_eq!(
            hb(30, 0),
            Heartbeat {
                every: secs(5),
                extend: secs(20)
            }
        );
        // 10 // 6 = 1, 20 // 3 = 6 (not 6.67).
        assert_eq!(
            hb(10, 0),
            Heartbeat {
                every: secs(1),
                extend: secs(6)
            }
        );
        // 1 // 6 = 0, raised to 1; 2 // 3 = 0: nothing holds a 1 s lease.
        assert_eq!(
            hb(1, 0),
            Heartbeat {
                every: secs(1),
                extend: secs(0)
            }
        );
        // The option is an int: a fraction is dropped.
        assert_eq!(hb(7, 900), hb(7, 0));
        let s = Heartbeat::scaled(Duration::from_millis(600));
        assert_eq!(
            (s.every, s.extend),
            (Duration::from_millis(100), Duration::from_millis(400))
        );
    }
}
