//! An elastic replay: the planner called on the virtual clock, its
//! decisions turned into scale events, and the window traffic it sees.
//!
//! The planner runs between instants: the engine runs every instant up to
//! the tick ([`Engine::advance_to`]), the planner reads a
//! [`FleetSnapshot`] taken then, and its decision is applied at the tick
//! before the engine goes on. Nothing in it reads a clock, so an elastic
//! replay is as deterministic as any other.

use handoff_core::{CoreBox, Duration, Instant};
use handoff_engine::scale::{Phase, ScalePool};
use handoff_engine::{Director, Engine, Fault, LocalHosts};
use handoff_planner::{
    Decision, FleetSnapshot, Planner, PlannerPool, WindowTraffic, WorkerPhase, WorkerSnapshot,
};
use handoff_serving::RequestRecord;
use handoff_workload::TraceItem;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

/// What the window since the last tick saw: arrivals as the director pulls
/// them from the workload, ends as the recorder reports them.
#[derive(Debug, Default)]
pub(crate) struct Traffic {
    /// Whether to keep arrivals (only with a planner).
    pub(crate) keep: bool,
    /// `(arrival, prompt tokens, output tokens)` pulled, not yet counted.
    pulled: VecDeque<(Instant, u32, u32)>,
    pulled_total: u64,
    finished_total: u64,
    exhausted: bool,
    finished: u64,
    ttft_sum: f64,
    ttft_n: u64,
    tpot_sum: f64,
    tpot_n: u64,
}

impl Traffic {
    /// A request ended.
    pub(crate) fn finish(&mut self, r: &RequestRecord) {
        self.finished_total += 1;
        self.finished += 1;
        if let Some(t) = r.ttft_ms {
            self.ttft_sum += t;
            self.ttft_n += 1;
        }
        if let Some(t) = r.tpot_ms {
            self.tpot_sum += t;
            self.tpot_n += 1;
        }
    }

    /// The window ending at `now` (arrivals up to `now`), which it clears.
    fn window(&mut self, now: Instant, length: Duration) -> WindowTraffic {
        let mut w = WindowTraffic {
            length,
            finished: std::mem::take(&mut self.finished),
            mean_ttft_ms: (self.ttft_n > 0).then(|| self.ttft_sum / self.ttft_n as f64),
            mean_tpot_ms: (self.tpot_n > 0).then(|| self.tpot_sum / self.tpot_n as f64),
            ..WindowTraffic::default()
        };
        (self.ttft_sum, self.ttft_n, self.tpot_sum, self.tpot_n) = (0.0, 0, 0.0, 0);
        while let Some(&(at, i, o)) = self.pulled.front() {
            if at > now {
                break;
            }
            self.pulled.pop_front();
            w.arrivals += 1;
            w.input_tokens += u64::from(i);
            w.output_tokens += u64::from(o);
        }
        w
    }

    /// Every request pulled has ended and the workload has no more.
    fn idle(&self) -> bool {
        self.exhausted && self.pulled_total == self.finished_total
    }
}

/// The workload, with each item the director pulls noted in [`Traffic`].
pub struct Counted<I> {
    pub(crate) inner: I,
    pub(crate) traffic: Rc<RefCell<Traffic>>,
}

impl<I: Iterator<Item = TraceItem>> Iterator for Counted<I> {
    type Item = TraceItem;
    fn next(&mut self) -> Option<TraceItem> {
        let item = self.inner.next();
        let mut t = self.traffic.borrow_mut();
        match &item {
            Some(it) => {
                t.pulled_total += 1;
                if t.keep {
                    let r = &it.request;
                    t.pulled
                        .push_back((r.arrival, r.prompt_tokens, r.max_output_tokens));
                }
            }
            None => t.exhausted = true,
        }
        item
    }
}

fn pool_of(p: ScalePool) -> PlannerPool {
    match p {
        ScalePool::Prefill => PlannerPool::Prefill,
        ScalePool::Decode => PlannerPool::Decode,
    }
}

fn scale_pool(p: PlannerPool) -> ScalePool {
    match p {
        PlannerPool::Prefill => ScalePool::Prefill,
        PlannerPool::Decode => ScalePool::Decode,
    }
}

/// The fleet at `now` as a planner sees it.
pub(crate) fn snapshot<D: Director>(
    engine: &Engine<LocalHosts<'_, CoreBox>, D>,
    window: WindowTraffic,
) -> FleetSnapshot {
    let fleet = engine.fleet();
    let hosts = engine.port().hosts();
    let mut ceiling = [0u32; 2];
    let mut workers = Vec::new();
    for m in &fleet.fleet().members {
        let k = match m.pool {
            ScalePool::Prefill => 0,
            ScalePool::Decode => 1,
        };
        ceiling[k] += 1;
        let phase = match fleet.phase(m.worker) {
            Phase::Provisioning => WorkerPhase::Provisioning,
            Phase::Ready => WorkerPhase::Ready,
            Phase::Draining => WorkerPhase::Draining,
            Phase::Absent | Phase::Gone => continue,
        };
        let cap = hosts
            .get(m.worker.0 as usize)
            .map(|h| h.worker().capacity())
            .unwrap_or_default();
        workers.push(WorkerSnapshot {
            worker: m.worker,
            pool: pool_of(m.pool),
            phase,
            running: cap.running_requests,
            waiting: cap.waiting_requests,
            kv_used_blocks: cap.kv_used_blocks(),
            kv_total_blocks: cap.total_blocks,
        });
    }
    FleetSnapshot {
        now: engine.now(),
        workers,
        window,
        ceiling,
    }
}

/// The scale events that take the fleet of `s` to `d`: a pool below its
/// target provisions workers; one above drains its least-loaded ready
/// workers (ties: the highest id), then cancels provisioning ones. A pool
/// keeps at least one worker, so requests always have somewhere to go.
pub(crate) fn events(s: &FleetSnapshot, d: &Decision) -> Vec<Fault> {
    let mut out = Vec::new();
    for (pool, target) in [
        (PlannerPool::Prefill, d.prefill_target),
        (PlannerPool::Decode, d.decode_target),
    ] {
        let target = target.clamp(1, s.ceiling(pool).max(1));
        let size = s.size(pool);
        if target > size {
            for _ in size..target {
                out.push(Fault::ScaleUp {
                    pool: scale_pool(pool),
                });
            }
            continue;
        }
        let mut excess = size - target;
        let mut ready: Vec<&WorkerSnapshot> = s
            .workers
            .iter()
            .filter(|w| w.pool == pool && w.phase == WorkerPhase::Ready)
            .collect();
        ready.sort_by_key(|w| (w.load(), std::cmp::Reverse(w.worker)));
        // Cancel provisioning workers first: they serve nothing yet.
        let provisioning = s
            .workers
            .iter()
            .rev()
            .filter(|w| w.pool == pool && w.phase == WorkerPhase::Provisioning);
        for w in provisioning {
            if excess == 0 {
                break;
            }
            out.push(Fault::Remove { worker: w.worker });
            excess -= 1;
        }
        for w in ready.iter().take(excess as usize) {
            out.push(Fault::Drain { worker: w.worker });
        }
    }
    out
}

/// Runs `engine` until nothing is left to happen, with `planner` called at
/// each tick it asks for (every `interval` when it asks for none later
/// than now); [`Engine::run`] then finishes the run.
pub(crate) fn run<D: Director>(
    engine: &mut Engine<LocalHosts<'_, CoreBox>, D>,
    planner: &mut dyn Planner,
    interval: Duration,
    traffic: &Rc<RefCell<Traffic>>,
) {
    let step = interval.max(Duration::from_millis(1));
    let mut last = engine.now();
    let mut tick = last + step;
    let mut last_call = false;
    loop {
        engine.advance_to(tick);
        let now = engine.now();
        let window = traffic.borrow_mut().window(now, now.saturating_since(last));
        last = now;
        let snap = snapshot(engine, window);
        let decision = planner.tick(&snap);
        let evs = events(&snap, &decision);
        let injected = !evs.is_empty();
        for f in evs {
            engine.inject_fault(f);
        }
        if last_call {
            break;
        }
        // One more tick once nothing is left to happen (the workload done
        // and nothing in flight, or nothing the planner changed), so the
        // planner sees the fleet idle; then the run ends.
        let idle = traffic.borrow().idle();
        last_call = engine.next_event_at().is_none() && (idle || !injected);
        tick = if decision.next_tick > now {
            decision.next_tick
        } else {
            now + step
        };
    }
}
