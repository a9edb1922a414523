//! Who an engine is across processes: its engine id, the scheduler ids
//! its ranks speak as on the transport, and the request ids it issues.
//!
//! vLLM names each engine's KV-transfer identity by its `engine_id`
//! (`vllm/config/kv_transfer.py`, `KVTransferConfig.engine_id`, a UUID
//! unless given) with `_dp{rank}` after it for a data-parallel rank
//! (`run_engine_core` in `vllm/v1/engine/core.py`), and the decode engine
//! learns it from `kv_transfer_params.remote_engine_id`. Here an engine id
//! is a number below [`MAX_ENGINE`]: `--engine-id` given as such a number
//! is used as is, any other text is hashed to one, and without the flag
//! the number is derived from the host and port the engine serves on, so
//! two engines on different hosts (or ports) get different ids without
//! configuration. Rank `r` of engine `e` speaks as scheduler
//! `e·MAX_DP + r`, so a decode engine knows which scheduler to expect at
//! the other end of `remote_host:remote_port` from the params alone (and
//! checks it in the transport's hello).

use handoff_core::{DpRank, RequestId, WorkerId, WorkerWithDpRank};

/// Engine ids are below this (24 bits: with [`MAX_DP`] ranks each, every
/// scheduler id stays below the transport's frontend id).
pub const MAX_ENGINE: u32 = 1 << 24;

/// Ranks one engine process runs, at most.
pub const MAX_DP: u16 = 64;

/// FNV-1a, 32 bits: stable across builds and platforms.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// The engine number `--engine-id TEXT` names: a decimal below
/// [`MAX_ENGINE`] as is, anything else hashed into that range.
pub fn engine_number(text: &str) -> u32 {
    match text.parse::<u32>() {
        Ok(n) if n < MAX_ENGINE && !text.starts_with('+') => n,
        _ => fnv1a(text.as_bytes()) % MAX_ENGINE,
    }
}

/// The default engine id of an engine whose HTTP server is `host:port`.
pub fn default_engine_id(host: &str, port: u16) -> String {
    (fnv1a(format!("{host}:{port}").as_bytes()) % MAX_ENGINE).to_string()
}

/// One engine's identities; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodIds {
    /// The engine number.
    pub engine: u32,
    /// Its ranks.
    pub dp_size: u16,
}

impl PodIds {
    /// The scheduler rank `r` of engine `engine` speaks as.
    pub fn scheduler_of(engine: u32, rank: DpRank) -> WorkerId {
        WorkerId(engine * u32::from(MAX_DP) + u32::from(rank.0))
    }

    /// This engine's rank `r`'s scheduler id.
    pub fn scheduler(&self, r: usize) -> WorkerId {
        Self::scheduler_of(self.engine, DpRank(r as u16))
    }

    /// The local rank index of scheduler `w`, if it is one of this
    /// engine's.
    pub fn rank_of(&self, w: WorkerId) -> Option<usize> {
        let base = self.engine * u32::from(MAX_DP);
        let r = w.0.checked_sub(base)?;
        (r < u32::from(self.dp_size)).then_some(r as usize)
    }

    /// What `remote_engine_id` says for rank `r` (`N`, or `N_dpR` when
    /// the engine runs several ranks).
    pub fn engine_id(&self, r: usize) -> crate::vllm::kv_transfer::EngineId {
        crate::vllm::kv_transfer::EngineId {
            at: WorkerWithDpRank {
                worker: WorkerId(self.engine),
                dp_rank: DpRank(r as u16),
            },
            ranked: self.dp_size > 1,
        }
    }

    /// The first request id this engine issues: request ids of different
    /// engines never meet on one decode engine (it holds its own requests
    /// and the prefills' it decodes).
    pub fn first_request(&self) -> RequestId {
        RequestId(u64::from(self.engine) << 32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_kept_and_text_is_hashed_into_range() {
        assert_eq!(engine_number("7"), 7);
        assert_eq!(engine_number("16777215"), MAX_ENGINE - 1);
        for t in ["16777216", "prefill-0", "+7", "", "a.b-c"] {
            assert!(engine_number(t) < MAX_ENGINE, "{t}");
        }
        assert_ne!(engine_number("prefill-0"), engine_number("prefill-1"));
        assert_ne!(
            default_engine_id("10.0.0.1", 8000),
            default_engine_id("10.0.0.2", 8000)
        );
        assert_ne!(
            default_engine_id("10.0.0.1", 8000),
            default_engine_id("10.0.0.1", 8001)
        );
    }

    #[test]
    fn ranks_map_to_disjoint_schedulers_below_the_frontend() {
        let a = PodIds {
            engine: MAX_ENGINE - 1,
            dp_size: MAX_DP,
        };
        let top = a.scheduler(usize::from(MAX_DP) - 1);
        assert!(top.0 < handoff_transport::FRONTEND.0);
        assert_eq!(a.rank_of(top), Some(usize::from(MAX_DP) - 1));
        let b = PodIds {
            engine: 3,
            dp_size: 2,
        };
        assert_eq!(b.rank_of(b.scheduler(1)), Some(1));
        assert_eq!(b.rank_of(WorkerId(3 * 64 + 2)), None);
        assert_eq!(b.rank_of(WorkerId(2)), None);
        assert_eq!(b.engine_id(1).to_string(), "3_dp1");
        let e = b.engine_id(1);
        assert_eq!(
            PodIds::scheduler_of(e.at.worker.0, e.at.dp_rank),
            b.scheduler(1)
        );
        assert!(a.first_request().0 > b.first_request().0 + u64::from(u32::MAX));
    }
}
