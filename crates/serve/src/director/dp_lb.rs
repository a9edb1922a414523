//! Which data-parallel rank of a worker takes a request its listener got,
//! as each engine's own front decides (sans-IO: the engine thread feeds it
//! rank loads and asks).
//!
//! - vLLM (`DPLBAsyncMPClient.get_core_engine_for_request`,
//!   `vllm/v1/engine/core_client.py`): the rank with the lowest
//!   `waiting * 4 + running` from the coordinator's last published counts,
//!   the first such rank on ties; the chosen rank's waiting count is raised
//!   at once so requests between two publications spread
//!   ([`RankPicker::refresh`] is the publication).
//! - SGLang (`DataParallelController`,
//!   `python/sglang/srt/managers/data_parallel_controller.py`): by its
//!   `--load-balance-method` ([`LoadBalanceMethod`]), whose `auto` resolves
//!   per engine (`python/sglang/srt/server_args.py`,
//!   `ServerArgs._handle_load_balance_method`): a prefill engine sends a
//!   leg to rank `bootstrap_room % dp_size` (`follow_bootstrap_room`;
//!   [`DpLayout::room_rank`]), a decode engine round-robins its legs over
//!   its ranks (`round_robin_scheduler`), as does an engine outside PD.
//! - vLLM with an `X-data-parallel-rank` header ([`RankRule::Pinned`]):
//!   `DPLBAsyncMPClient.get_core_engine_for_request` sends a request whose
//!   `data_parallel_rank` is set to that engine and skips the scoring, so
//!   the rank's local waiting count is not raised either.

use handoff_core::{DpLayout, DpRank, KvCapacitySnapshot, WorkerId, WorkerWithDpRank};

/// SGLang's `--load-balance-method` (`LoadBalanceMethod` in
/// `data_parallel_controller.py`), for the rank a leg takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LoadBalanceMethod {
    /// Resolved per engine: `follow_bootstrap_room` on a prefill engine,
    /// `round_robin` on a decode engine (SGLang PR #16110).
    #[default]
    Auto,
    /// `round_robin_scheduler`. On a prefill engine SGLang reads it as
    /// `follow_bootstrap_room` (its backward compatibility).
    RoundRobin,
    /// `follow_bootstrap_room_scheduler`: rank `bootstrap_room % dp_size`.
    FollowBootstrapRoom,
    /// `total_requests_scheduler`: the rank with the fewest requests
    /// (waiting and running), counted at once.
    TotalRequests,
}

impl LoadBalanceMethod {
    /// SGLang's name.
    pub fn name(self) -> &'static str {
        match self {
            LoadBalanceMethod::Auto => "auto",
            LoadBalanceMethod::RoundRobin => "round_robin",
            LoadBalanceMethod::FollowBootstrapRoom => "follow_bootstrap_room",
            LoadBalanceMethod::TotalRequests => "total_requests",
        }
    }

    /// What an engine of this side runs (`ServerArgs.
    /// _handle_load_balance_method`): `auto` by side, and `round_robin`
    /// read as `follow_bootstrap_room` on a prefill engine.
    pub fn resolved(self, prefill: bool) -> LoadBalanceMethod {
        match (self, prefill) {
            (LoadBalanceMethod::Auto | LoadBalanceMethod::RoundRobin, true) => {
                LoadBalanceMethod::FollowBootstrapRoom
            }
            (LoadBalanceMethod::Auto, false) => LoadBalanceMethod::RoundRobin,
            (m, _) => m,
        }
    }

    /// The rule a PD leg with `room` picks its rank by on a `prefill` (or
    /// decode) engine.
    pub fn leg_rule(self, prefill: bool, room: u64) -> RankRule {
        match self.resolved(prefill) {
            LoadBalanceMethod::FollowBootstrapRoom => RankRule::Room(room),
            LoadBalanceMethod::TotalRequests => RankRule::FewestRequests,
            _ => RankRule::RoundRobin,
        }
    }
}

/// How a request picks its rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RankRule {
    /// vLLM's least `waiting * 4 + running`.
    LeastLoaded,
    /// SGLang's round robin (a decode leg, or a request without a
    /// bootstrap room).
    RoundRobin,
    /// SGLang's `total_requests`: the fewest waiting plus running.
    FewestRequests,
    /// SGLang's PD rank of this `bootstrap_room`.
    Room(u64),
    /// vLLM's `data_parallel_rank` named by the client (the
    /// `X-data-parallel-rank` header), checked against the rank count by
    /// the listener; a rank the worker does not have picks nothing.
    Pinned(DpRank),
}

/// Per-rank counts and per-worker cursors; see the module docs.
#[derive(Clone, Debug)]
pub struct RankPicker {
    dp: DpLayout,
    /// `[waiting, running]` per scheduler, as last published plus the
    /// requests sent since.
    counts: Vec<[u64; 2]>,
    /// The next round-robin rank, per worker.
    next: Vec<u16>,
    /// Requests each scheduler took from its worker's listener.
    taken: Vec<u64>,
}

impl RankPicker {
    /// A picker for `schedulers` schedulers laid out by `dp`.
    pub fn new(dp: DpLayout, schedulers: usize) -> Self {
        RankPicker {
            dp,
            counts: vec![[0, 0]; schedulers],
            next: vec![0; schedulers / usize::from(dp.dp_size())],
            taken: vec![0; schedulers],
        }
    }

    /// Scheduler `s`'s published load (vLLM's coordinator publication).
    pub fn refresh(&mut self, s: usize, c: &KvCapacitySnapshot) {
        if let Some(x) = self.counts.get_mut(s) {
            *x = [c.waiting_requests, c.running_requests];
        }
    }

    /// The scheduler of `worker` that takes a request by `rule`, counted;
    /// `None` for a worker this deployment does not have.
    pub fn pick(&mut self, worker: WorkerId, rule: RankRule) -> Option<WorkerId> {
        let n = self.dp.dp_size();
        let rank = match rule {
            RankRule::Room(room) => self.dp.room_rank(room),
            RankRule::Pinned(rank) => rank,
            RankRule::RoundRobin => {
                let next = self.next.get_mut(worker.0 as usize)?;
                let r = *next;
                *next = (r + 1) % n;
                DpRank(r)
            }
            RankRule::LeastLoaded | RankRule::FewestRequests => {
                let weight = if rule == RankRule::LeastLoaded { 4 } else { 1 };
                let mut best = (u64::MAX, DpRank(0));
                for (r, s) in self.dp.schedulers(worker).enumerate() {
                    let [waiting, running] = *self.counts.get(s.0 as usize)?;
                    let score = waiting.saturating_mul(weight).saturating_add(running);
                    if score < best.0 {
                        best = (score, DpRank(r as u16));
                    }
                }
                best.1
            }
        };
        let s = self.dp.scheduler(WorkerWithDpRank {
            worker,
            dp_rank: rank,
        })?;
        let i = s.0 as usize;
        let count = self.counts.get_mut(i)?;
        if !matches!(rule, RankRule::Pinned(_)) {
            count[0] += 1;
        }
        self.taken[i] += 1;
        Some(s)
    }

    /// Scheduler `s` refused the request [`RankPicker::pick`] just gave it
    /// by `rule` (a decode naming a prefill it cannot attach): it is not
    /// counted.
    pub fn refused(&mut self, s: WorkerId, rule: RankRule) {
        let i = s.0 as usize;
        if let (Some(c), Some(t)) = (self.counts.get_mut(i), self.taken.get_mut(i)) {
            if !matches!(rule, RankRule::Pinned(_)) {
                c[0] = c[0].saturating_sub(1);
            }
            *t = t.saturating_sub(1);
        }
    }

    /// Requests scheduler `s` took from its worker's listener.
    pub fn taken(&self, s: usize) -> u64 {
        self.taken.get(s).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_follows_the_room_on_prefill_and_round_robins_decode_legs() {
        // `ServerArgs._handle_load_balance_method` (SGLang PR #16110).
        let mut p = picker();
        let auto = LoadBalanceMethod::Auto;
        let legs = [7u64, 9, 4, 5];
        let prefill: Vec<_> = legs
            .iter()
            .map(|&room| p.pick(WorkerId(0), auto.leg_rule(true, room)))
            .collect();
        let decode: Vec<_> = legs
            .iter()
            .map(|&room| p.pick(WorkerId(1), auto.leg_rule(false, room)))
            .collect();
        let s = |n: u32| Some(WorkerId(n));
        assert_eq!(prefill, [s(1), s(1), s(0), s(1)], "room % 2 on worker 0");
        assert_eq!(decode, [s(2), s(3), s(2), s(3)], "round robin on worker 1");
        // `round_robin` on a prefill engine is SGLang's legacy spelling of
        // `follow_bootstrap_room`; other methods hold on both sides.
        let rr = LoadBalanceMethod::RoundRobin;
        assert_eq!(rr.leg_rule(true, 7), RankRule::Room(7));
        assert_eq!(rr.leg_rule(false, 7), RankRule::RoundRobin);
        let room = LoadBalanceMethod::FollowBootstrapRoom;
        assert_eq!(room.leg_rule(false, 7), RankRule::Room(7));
        let total = LoadBalanceMethod::TotalRequests;
        assert_eq!(total.leg_rule(true, 7), RankRule::FewestRequests);
    }

    #[test]
    fn total_requests_takes_the_rank_with_the_fewest_and_counts_it() {
        let mut p = picker();
        let load = |waiting, running| KvCapacitySnapshot {
            waiting_requests: waiting,
            running_requests: running,
            ..KvCapacitySnapshot::default()
        };
        p.refresh(0, &load(1, 0));
        p.refresh(1, &load(0, 3));
        // 1 < 3 (where vLLM's waiting * 4 would pick rank 1), then 2 < 3, a
        // tie at 3 (the first rank), then 4 > 3.
        let picks: Vec<_> = (0..4)
            .map(|_| p.pick(WorkerId(0), RankRule::FewestRequests))
            .collect();
        let s = |n: u32| Some(WorkerId(n));
        assert_eq!(picks, [s(0), s(0), s(0), s(1)]);
    }

    fn picker() -> RankPicker {
        RankPicker::new(DpLayout::new(2).unwrap(), 4)
    }

    #[test]
    fn rooms_go_to_room_mod_size_of_the_named_worker() {
        let mut p = picker();
        assert_eq!(p.pick(WorkerId(1), RankRule::Room(7)), Some(WorkerId(3)));
        assert_eq!(p.pick(WorkerId(1), RankRule::Room(4)), Some(WorkerId(2)));
        assert_eq!(p.pick(WorkerId(0), RankRule::Room(9)), Some(WorkerId(1)));
        assert_eq!((p.taken(1), p.taken(2), p.taken(3)), (1, 1, 1));
        p.refused(WorkerId(3), RankRule::Room(7));
        assert_eq!(p.taken(3), 0);
        assert_eq!(p.pick(WorkerId(2), RankRule::Room(0)), None, "no worker 2");
    }

    #[test]
    fn least_loaded_scores_waiting_four_times_running_and_counts_at_once() {
        let mut p = picker();
        let load = |waiting, running| KvCapacitySnapshot {
            waiting_requests: waiting,
            running_requests: running,
            ..KvCapacitySnapshot::default()
        };
        p.refresh(0, &load(1, 0));
        p.refresh(1, &load(0, 3));
        // 4 vs 3: rank 1, which now counts one waiting more (7).
        assert_eq!(
            p.pick(WorkerId(0), RankRule::LeastLoaded),
            Some(WorkerId(1))
        );
        assert_eq!(
            p.pick(WorkerId(0), RankRule::LeastLoaded),
            Some(WorkerId(0))
        );
        // 8 vs 7.
        assert_eq!(
            p.pick(WorkerId(0), RankRule::LeastLoaded),
            Some(WorkerId(1))
        );
        // A publication replaces the local counts; ties go to rank 0.
        p.refresh(0, &load(0, 0));
        p.refresh(1, &load(0, 0));
        assert_eq!(
            p.pick(WorkerId(0), RankRule::LeastLoaded),
            Some(WorkerId(0))
        );
    }

    #[test]
    fn a_pinned_rank_is_taken_whatever_the_load_and_not_scored() {
        let mut p = picker();
        let busy = KvCapacitySnapshot {
            waiting_requests: 9,
            ..KvCapacitySnapshot::default()
        };
        p.refresh(3, &busy);
        assert_eq!(
            p.pick(WorkerId(1), RankRule::Pinned(DpRank(1))),
            Some(WorkerId(3))
        );
        assert_eq!(p.taken(3), 1);
        // Its waiting count stayed as published: 9 * 4 against rank 0's 0.
        assert_eq!(
            p.pick(WorkerId(1), RankRule::LeastLoaded),
            Some(WorkerId(2))
        );
        p.refused(WorkerId(3), RankRule::Pinned(DpRank(1)));
        assert_eq!(p.taken(3), 0);
        assert_eq!(p.pick(WorkerId(1), RankRule::Pinned(DpRank(2))), None);
    }

    #[test]
    fn round_robin_cycles_each_worker_on_its_own() {
        let mut p = picker();
        let got: Vec<u32> = (0..3)
            .map(|_| p.pick(WorkerId(1), RankRule::RoundRobin).unwrap().0)
            .collect();
        assert_eq!(got, [2, 3, 2]);
        assert_eq!(p.pick(WorkerId(0), RankRule::RoundRobin), Some(WorkerId(0)));
    }

    #[test]
    fn one_rank_is_always_the_worker() {
        let mut p = RankPicker::new(DpLayout::SINGLE, 3);
        for rule in [
            RankRule::LeastLoaded,
            RankRule::RoundRobin,
            RankRule::Room(5),
        ] {
            assert_eq!(p.pick(WorkerId(2), rule), Some(WorkerId(2)));
        }
    }
}
