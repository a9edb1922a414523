//! Which prefill scheduler a decode leg's bootstrap fields name, before the
//! prefill leg came: what lets the decode leg reserve on arrival.
//!
//! SGLang's decode engine resolves the prefill from the leg alone
//! (`python/sglang/srt/disaggregation/decode.py`,
//! `DecodePreallocQueue.add` and `_resolve_prefill_dp_rank`): the prefill
//! server's info, fetched once per `bootstrap_host:bootstrap_port` from its
//! bootstrap server and cached (`CommonKVManager.try_ensure_parallel_info`,
//! `prefill_info_table`), gives its DP size; with one rank, or under
//! `follow_bootstrap_room`, the rank is `bootstrap_room % dp_size`. Under
//! any other prefill load-balance method the rank is only known once the
//! prefill leg registered it with the bootstrap server
//! (`CommonKVSender._register_prefill_dp_rank`, `query_prefill_dp_ranks`),
//! so such a decode leg waits (`pending_reqs`).
//!
//! Here the deployment's workers share one process and no bootstrap
//! server: the prefill worker a `bootstrap_host:bootstrap_port` names is
//! the only prefill worker when there is one, else the one whose listener
//! got a prefill leg with that host and port before (as SGLang caches the
//! address's info after its first fetch); two prefill workers seen under
//! one address name neither.

use crate::director::dp_lb::LoadBalanceMethod;
use crate::director::dp_lb::RankRule;
use crate::sglang::bootstrap::RoomKey;
use handoff_core::{DpLayout, WorkerId, WorkerWithDpRank};
use std::collections::BTreeMap;

/// Most bootstrap addresses remembered; past it, new ones are not learned
/// (their decode legs wait for their partners, as before).
pub const MAX_ADDRESSES: usize = 4096;

/// Resolves decode legs' prefill schedulers; see the module docs.
#[derive(Clone, Debug)]
pub struct PrefillResolver {
    /// Prefill workers (listeners), ids `0..prefill_workers`.
    prefill_workers: u32,
    dp: DpLayout,
    method: LoadBalanceMethod,
    /// The prefill worker each address named (`None`: more than one).
    learned: BTreeMap<(String, Option<u16>), Option<WorkerId>>,
}

impl PrefillResolver {
    /// A resolver for `prefill_workers` prefill workers of `dp` ranks each,
    /// whose prefill engines pick ranks by `method`.
    pub fn new(prefill_workers: u32, dp: DpLayout, method: LoadBalanceMethod) -> Self {
        PrefillResolver {
            prefill_workers,
            dp,
            method,
            learned: BTreeMap::new(),
        }
    }

    /// A prefill leg for `key` came to prefill worker `listener`.
    pub fn learn(&mut self, key: &RoomKey, listener: WorkerId) {
        let addr = (key.host.clone(), key.port);
        let full = self.learned.len() >= MAX_ADDRESSES;
        match self.learned.get_mut(&addr) {
            Some(seen) if *seen != Some(listener) => *seen = None,
            Some(_) => {}
            None if !full => {
                self.learned.insert(addr, Some(listener));
            }
            None => {}
        }
    }

    /// The prefill scheduler a decode leg for `key` reserves for, if its
    /// worker and rank are known now.
    pub fn resolve(&self, key: &RoomKey) -> Option<WorkerId> {
        let worker = match self.prefill_workers {
            1 => WorkerId(0),
            _ => (*self.learned.get(&(key.host.clone(), key.port))?)?,
        };
        let rank = match (self.method.leg_rule(true, key.room), self.dp.dp_size()) {
            (RankRule::Room(room), _) => self.dp.room_rank(room),
            (_, 1) => handoff_core::DpRank(0),
            _ => return None,
        };
        self.dp.scheduler(WorkerWithDpRank {
            worker,
            dp_rank: rank,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(host: &str, port: Option<u16>, room: u64) -> RoomKey {
        RoomKey {
            host: host.into(),
            port,
            room,
        }
    }

    #[test]
    fn one_prefill_worker_resolves_at_once_by_room() {
        let dp2 = DpLayout::new(2).expect("2 ranks");
        let r = PrefillResolver::new(1, dp2, LoadBalanceMethod::Auto);
        // _resolve_prefill_dp_rank: room % dp_size under follow_bootstrap_room.
        assert_eq!(r.resolve(&key("h", Some(8998), 7)), Some(WorkerId(1)));
        assert_eq!(r.resolve(&key("h", None, 8)), Some(WorkerId(0)));
        // total_requests: the rank is known only once the prefill leg
        // registered it (query_prefill_dp_ranks), so the decode waits.
        let r = PrefillResolver::new(1, dp2, LoadBalanceMethod::TotalRequests);
        assert_eq!(r.resolve(&key("h", Some(8998), 7)), None);
        let r = PrefillResolver::new(1, DpLayout::SINGLE, LoadBalanceMethod::TotalRequests);
        assert_eq!(r.resolve(&key("h", Some(8998), 7)), Some(WorkerId(0)));
    }

    #[test]
    fn several_prefill_workers_resolve_once_their_address_was_seen() {
        let mut r = PrefillResolver::new(2, DpLayout::SINGLE, LoadBalanceMethod::Auto);
        let (a, b) = (
            key("10.0.0.1", Some(8998), 3),
            key("10.0.0.2", Some(8998), 4),
        );
        assert_eq!(r.resolve(&a), None);
        r.learn(&a, WorkerId(0));
        r.learn(&b, WorkerId(1));
        assert_eq!(r.resolve(&a), Some(WorkerId(0)));
        assert_eq!(
            r.resolve(&key("10.0.0.2", Some(8998), 9)),
            Some(WorkerId(1))
        );
        // One address, two workers: it names neither any more.
        r.learn(&a, WorkerId(1));
        assert_eq!(r.resolve(&a), None);
        r.learn(&a, WorkerId(0));
        assert_eq!(r.resolve(&a), None);
    }
}
