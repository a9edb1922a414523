//! # custom-router-example
//!
//! A downstream routing policy run in a handoff-mocker replay, as a team
//! building a router would try theirs: implement
//! [`handoff_router::RoutingPolicy`], wrap a factory in a
//! [`handoff_router::CustomPolicy`], and put it in the configuration's
//! `router` field as [`RouterMode::Custom`]. The same configuration drives
//! replay, virtual-clock live, wall-clock live and serve.
//!
//! The policy here, [`LeastBooked`], sends a request to the worker with the
//! fewest booked blocks (prompt blocks in the prefill pool, prompt + output
//! in the decode pool), breaking ties by the most published prefix overlap
//! with the request, then by the lowest id. It counts its calls so the
//! binary can prove it was used.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use handoff_core::{Instant, Request, WorkerId};
use handoff_replay::{make_core, DeploymentConfig, EngineSpec, Replay, Report, RequestRecord};
use handoff_router::{
    CustomPolicy, PoolRole, RouterMode, RouterView, RoutingChoice, RoutingPolicy,
};
use handoff_workload::{SyntheticConfig, SyntheticWorkload};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Selections a policy made, per pool.
#[derive(Debug, Default)]
pub struct Calls {
    /// In the prefill pool (or an aggregated pool, whose role is decode).
    pub prefill: AtomicU64,
    /// In the decode pool.
    pub decode: AtomicU64,
}

impl Calls {
    fn count(&self, role: PoolRole) {
        match role {
            PoolRole::Prefill => &self.prefill,
            PoolRole::Decode => &self.decode,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    /// Both pools together.
    pub fn total(&self) -> u64 {
        self.prefill.load(Ordering::Relaxed) + self.decode.load(Ordering::Relaxed)
    }
}

/// Fewest booked blocks, then most published overlap, then lowest id.
#[derive(Debug)]
pub struct LeastBooked {
    role: PoolRole,
    calls: Arc<Calls>,
}

impl RoutingPolicy for LeastBooked {
    fn select(
        &mut self,
        _request: &Request,
        view: &mut RouterView<'_>,
        _now: Instant,
    ) -> Option<RoutingChoice> {
        self.calls.count(self.role);
        let candidates: Vec<(WorkerId, u64)> = view
            .loads()
            .map(|(w, load)| (w, load.booked_blocks))
            .collect();
        let mut best: Option<(u64, u32, WorkerId)> = None;
        for (w, booked) in candidates {
            let overlap = view.overlap_blocks(w);
            // Fewer booked blocks wins; then more overlap; the earlier
            // (lower) id stays on a full tie.
            let better = best.is_none_or(|(b, o, _)| booked < b || (booked == b && overlap > o));
            if better {
                best = Some((booked, overlap, w));
            }
        }
        best.map(|(_, _, w)| RoutingChoice::worker(w))
    }
}

impl LeastBooked {
    /// The policy as a router mode, counting its calls in `calls`.
    pub fn mode(calls: Arc<Calls>) -> RouterMode {
        RouterMode::Custom(CustomPolicy::new("least-booked", move |role| {
            Box::new(LeastBooked {
                role,
                calls: calls.clone(),
            })
        }))
    }
}

/// The last selectable worker, always (a policy whose use is easy to see in
/// the per-request records).
#[derive(Debug)]
pub struct Last;

impl RoutingPolicy for Last {
    fn select(
        &mut self,
        _: &Request,
        view: &mut RouterView<'_>,
        _: Instant,
    ) -> Option<RoutingChoice> {
        view.workers().next_back().map(RoutingChoice::worker)
    }
}

/// A replay of `requests` requests of the embedded synthetic workload
/// (seed 42, Poisson arrivals at 16/s) on vLLM cores, 2 prefill + 2 decode
/// workers, source-first, routed by `router`: the report and every
/// request's record.
pub fn replay(requests: u64, router: RouterMode) -> (Report, Vec<RequestRecord>) {
    let cfg = DeploymentConfig {
        router,
        ..DeploymentConfig::default()
    };
    let spec = EngineSpec::default();
    let items = SyntheticWorkload::new(SyntheticConfig {
        requests,
        ..SyntheticConfig::default()
    });
    let records = Rc::new(RefCell::new(Vec::new()));
    let sink = records.clone();
    let (report, _) = Replay::new(cfg, items, |_, _| {
        make_core(&spec).expect("the default engine is valid")
    })
    .expect("the cores publish at the deployment's block size")
    .with_request_sink(Box::new(move |r: &RequestRecord| {
        sink.borrow_mut().push(r.clone())
    }))
    .run();
    let records = records.take();
    (report, records)
}
