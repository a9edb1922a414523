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
//!   `python/sglang/srt/managers/data_parallel_controller.py`): a PD leg
//!   goes to rank `bootstrap_room % dp_size` on both sides
//!   (`follow_bootstrap_room_scheduler`; [`DpLayout::room_rank`]); any
//!   other request round-robins over the ranks (`round_robin_scheduler`).
//! - vLLM with an `X-data-parallel-rank` header ([`RankRule::Pinned`]):
//!   `DPLBAsyncMPClient.get_core_engine_for_request` sends a request whose
//!   `data_parallel_rank` is set to that engine and skips the scoring, so
//!   the rank's local waiting count is not raised either.

use handoff_core::{DpLayout, DpRank, KvCapacitySnapshot, WorkerId, WorkerWithDpRank};

/// How a request picks its rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RankRule {
    /// vLLM's least `waiting * 4 + running`.
    LeastLoaded,
    /// SGLang's round robin (a request without a bootstrap room).
    RoundRobin,
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
            RankRule::LeastLoaded => {
                let mut best = (u64::MAX, DpRank(0));
                for (r, s) in self.dp.schedulers(worker).enumerate() {
                    let [waiting, running] = *self.counts.get(s.0 as usize)?;
                    let score = waiting.saturating_mul(4).saturating_add(running);
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
