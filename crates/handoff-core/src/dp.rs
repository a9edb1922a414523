//! Attention data parallelism: a serving worker split into `dp_size`
//! ranks, each an independent scheduler with its own KV pool and batch,
//! sharing the worker's process and listener.
//!
//! Every other part of this crate names a scheduler by [`WorkerId`]: one
//! `Worker`, one core, one host. With ranks, that id is the *rank's*
//! scheduler, and [`DpLayout`] maps it to the address routers use,
//! [`WorkerWithDpRank`] (Dynamo's `WorkerWithDpRank { worker_id, dp_rank }`
//! in `lib/kv-router/src/protocols.rs`, the key of its indexer and of its
//! per-rank load). The mapping is `scheduler = worker · dp_size + rank`, so
//! with `dp_size` 1 (the default) a scheduler's id is its worker's and
//! nothing anywhere changes.
//!
//! A layout also says how a worker's ranks step ([`DpCoupling`]): each on
//! its own (attention DP of a dense model), or together, one forward pass
//! at a time (attention DP under an MoE layer with expert parallelism).

use crate::ids::WorkerId;
use core::fmt;

/// One data-parallel rank of a worker (SGLang's `dp_rank`, vLLM's
/// `data_parallel_rank`), below its [`DpLayout::dp_size`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct DpRank(pub u16);

/// A worker and one of its ranks: what a router books and what a KV event
/// is attributed to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkerWithDpRank {
    /// The worker: its listener, its name, its position in the deployment.
    pub worker: WorkerId,
    /// The rank inside it.
    pub dp_rank: DpRank,
}

impl fmt::Display for WorkerWithDpRank {
    /// `w3/dp1`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/dp{}", self.worker, self.dp_rank.0)
    }
}

/// The largest `--dp-size` accepted: enough for any attention-DP
/// deployment (DeepSeek's largest published one runs 32 ranks), small
/// enough that `workers × dp_size` scheduler ids stay dense.
pub const MAX_DP_SIZE: u16 = 256;

/// How the ranks of one worker step relative to each other.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DpCoupling {
    /// Each rank steps whenever it has work, as its own engine (a dense
    /// model under attention DP: nothing but the listener is shared).
    #[default]
    Independent,
    /// The ranks run every forward pass together (an MoE model with expert
    /// parallelism: the experts' all-to-all joins every rank in each
    /// layer). While any rank has work, all step at once; a pass of the
    /// group lasts as long as its slowest rank's, and a rank with nothing
    /// to run executes a dummy batch for it. vLLM: `DPEngineCoreProc`
    /// (`vllm/v1/engine/core.py`): `run_busy_loop` calls
    /// `execute_dummy_batch` on an engine with no local requests while the
    /// wave is running, and `_has_global_unfinished_reqs` all-reduces
    /// whether any rank still has work; the GPU model runner pads every
    /// rank's batch to the largest across DP (`coordinate_batch_across_dp`
    /// in `vllm/v1/worker/dp_utils.py`, `get_dp_padding`). SGLang:
    /// `prepare_mlp_sync_batch_raw` (`managers/scheduler_dp_attn_mixin.py`)
    /// gathers every rank's batch and has a rank without one run
    /// `get_idle_batch()` (`ForwardMode.IDLE`) while another runs.
    Lockstep,
}

/// How many ranks every worker of a deployment has, the mapping between
/// rank schedulers and their addresses, and how the ranks step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DpLayout {
    dp_size: u16,
    coupling: DpCoupling,
}

/// A `dp_size` outside `1..=MAX_DP_SIZE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DpSizeError(pub u64);

impl fmt::Display for DpSizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "dp size {} is outside 1..={MAX_DP_SIZE}", self.0)
    }
}

impl Default for DpLayout {
    fn default() -> Self {
        DpLayout::SINGLE
    }
}

impl DpLayout {
    /// One rank per worker: scheduler ids are worker ids.
    pub const SINGLE: DpLayout = DpLayout {
        dp_size: 1,
        coupling: DpCoupling::Independent,
    };

    /// `dp_size` independent ranks per worker, or why not.
    pub fn new(dp_size: u64) -> Result<DpLayout, DpSizeError> {
        match u16::try_from(dp_size) {
            Ok(n) if (1..=MAX_DP_SIZE).contains(&n) => Ok(DpLayout {
                dp_size: n,
                coupling: DpCoupling::Independent,
            }),
            _ => Err(DpSizeError(dp_size)),
        }
    }

    /// This layout with its ranks stepping as `coupling` says.
    pub fn with_coupling(self, coupling: DpCoupling) -> DpLayout {
        DpLayout { coupling, ..self }
    }

    /// How the ranks step, as set.
    pub fn coupling(self) -> DpCoupling {
        self.coupling
    }

    /// Whether a worker's ranks step together: [`DpCoupling::Lockstep`]
    /// with more than one rank (a lone rank has no one to wait for).
    pub fn is_lockstep(self) -> bool {
        self.coupling == DpCoupling::Lockstep && self.is_split()
    }

    /// The rank schedulers stepping together with scheduler `s`, rank 0
    /// first: all of its worker's when [`DpLayout::is_lockstep`], else
    /// `s` alone.
    pub fn group(self, s: WorkerId) -> core::ops::RangeInclusive<u32> {
        if !self.is_lockstep() {
            return s.0..=s.0;
        }
        let n = u32::from(self.dp_size);
        let first = s.0 - s.0 % n;
        first..=first.saturating_add(n - 1)
    }

    /// Ranks per worker.
    pub fn dp_size(self) -> u16 {
        self.dp_size
    }

    /// Whether workers have more than one rank (names and reports then
    /// say which).
    pub fn is_split(self) -> bool {
        self.dp_size > 1
    }

    /// The scheduler of `at`. `None` when the rank is out of range or the
    /// id would not fit.
    pub fn scheduler(self, at: WorkerWithDpRank) -> Option<WorkerId> {
        if at.dp_rank.0 >= self.dp_size {
            return None;
        }
        at.worker
            .0
            .checked_mul(u32::from(self.dp_size))?
            .checked_add(u32::from(at.dp_rank.0))
            .map(WorkerId)
    }

    /// The address of scheduler `s`.
    pub fn address(self, s: WorkerId) -> WorkerWithDpRank {
        let n = u32::from(self.dp_size);
        WorkerWithDpRank {
            worker: WorkerId(s.0 / n),
            dp_rank: DpRank((s.0 % n) as u16),
        }
    }

    /// The schedulers of `worker`, rank 0 first (empty if their ids would
    /// not fit).
    pub fn schedulers(self, worker: WorkerId) -> impl Iterator<Item = WorkerId> {
        let n = u32::from(self.dp_size);
        let first = worker.0.checked_mul(n);
        (0..n).filter_map(move |r| first.and_then(|f| f.checked_add(r)).map(WorkerId))
    }

    /// The rank SGLang's data-parallel controller sends a PD request of
    /// `bootstrap_room` to: `room % dp_size`, on both the prefill and the
    /// decode worker (`follow_bootstrap_room_scheduler`, the PD default, in
    /// `python/sglang/srt/managers/data_parallel_controller.py`; sgl-router's
    /// `pd_router.rs` picks the prefill rank the same way).
    pub fn room_rank(self, bootstrap_room: u64) -> DpRank {
        DpRank((bootstrap_room % u64::from(self.dp_size)) as u16)
    }

    /// How reports, metrics and logs name scheduler `s`: its worker's name
    /// (`w3`) with one rank, `w3/dp1` with several.
    pub fn name(self, s: WorkerId) -> String {
        if self.is_split() {
            self.address(s).to_string()
        } else {
            s.to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_rank_schedulers_are_their_workers() {
        let l = DpLayout::SINGLE;
        for w in [0, 1, 7, u32::MAX] {
            let at = l.address(WorkerId(w));
            assert_eq!(at.worker, WorkerId(w));
            assert_eq!(at.dp_rank, DpRank(0));
            assert_eq!(l.scheduler(at), Some(WorkerId(w)));
            assert_eq!(l.name(WorkerId(w)), format!("w{w}"));
        }
    }

    #[test]
    fn ranks_round_trip_and_are_named() {
        let l = DpLayout::new(4).unwrap();
        for s in 0..40 {
            let at = l.address(WorkerId(s));
            assert_eq!(l.scheduler(at), Some(WorkerId(s)));
        }
        let at = WorkerWithDpRank {
            worker: WorkerId(3),
            dp_rank: DpRank(1),
        };
        assert_eq!(l.scheduler(at), Some(WorkerId(13)));
        assert_eq!(l.name(WorkerId(13)), "w3/dp1");
        let of3: Vec<u32> = l.schedulers(WorkerId(3)).map(|w| w.0).collect();
        assert_eq!(of3, [12, 13, 14, 15]);
        assert_eq!(
            l.scheduler(WorkerWithDpRank {
                dp_rank: DpRank(4),
                ..at
            }),
            None,
            "rank out of range"
        );
        assert_eq!(
            l.scheduler(WorkerWithDpRank {
                worker: WorkerId(u32::MAX),
                dp_rank: DpRank(0)
            }),
            None,
            "overflow"
        );
    }

    #[test]
    fn sizes_are_range_checked() {
        assert_eq!(DpLayout::new(0), Err(DpSizeError(0)));
        assert_eq!(DpLayout::new(257), Err(DpSizeError(257)));
        assert_eq!(DpLayout::new(1 << 40), Err(DpSizeError(1 << 40)));
        assert_eq!(DpLayout::new(256).map(DpLayout::dp_size), Ok(256));
        assert_eq!(DpLayout::new(1), Ok(DpLayout::SINGLE));
    }

    #[test]
    fn coupling_defaults_independent_and_groups_lockstep_ranks() {
        let l = DpLayout::new(4).unwrap();
        assert_eq!(l.coupling(), DpCoupling::Independent);
        assert!(!l.is_lockstep());
        assert_eq!(l.group(WorkerId(13)), 13..=13);
        let c = l.with_coupling(DpCoupling::Lockstep);
        assert!(c.is_lockstep());
        assert_eq!(c.dp_size(), 4);
        assert_eq!(c.group(WorkerId(13)), 12..=15);
        assert_eq!(c.group(WorkerId(12)), 12..=15);
        assert_ne!(c, l, "the coupling is part of the layout");
        // One rank has nobody to wait for.
        let one = DpLayout::SINGLE.with_coupling(DpCoupling::Lockstep);
        assert!(!one.is_lockstep());
        assert_eq!(one.group(WorkerId(3)), 3..=3);
        // The last ids do not overflow.
        assert_eq!(l.group(WorkerId(u32::MAX)), u32::MAX..=u32::MAX);
        assert_eq!(c.group(WorkerId(u32::MAX)), u32::MAX - 3..=u32::MAX);
    }

    #[test]
    fn room_rank_is_room_mod_size() {
        let l = DpLayout::new(3).unwrap();
        assert_eq!(l.room_rank(0), DpRank(0));
        assert_eq!(l.room_rank(7), DpRank(1));
        assert_eq!(l.room_rank(u64::MAX), DpRank((u64::MAX % 3) as u16));
        assert_eq!(DpLayout::SINGLE.room_rank(12345), DpRank(0));
    }
}
