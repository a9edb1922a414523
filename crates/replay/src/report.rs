//! What a replay measured: request latencies in the shape of Dynamo's replay
//! report, plus the lifecycle figures this project exists for (stranding,
//! reservation waits, transfers, held and reserved block-time per worker).

use crate::metrics::{Histogram, Summary};
use crate::sim::ReplayConfig;
use handoff_core::engine::Undeliverable;
use handoff_core::fasthash::FastMap;
use handoff_core::fault::FaultCounts;
use handoff_core::host::HostFinal;
use handoff_core::{
    Duration, HandoffId, Instant, KvCapacitySnapshot, Request, RequestError, RequestId,
    WorkerEvent, WorkerId, WorkerRequest,
};
use router::Pool;
use serde::Serialize;
use std::collections::BTreeMap;

/// The replay's configuration as reported.
#[derive(Clone, Debug, Serialize)]
pub struct ReportConfig {
    /// Engine imitated.
    pub backend: &'static str,
    /// Handoff ordering.
    pub policy: &'static str,
    /// Prefill (or aggregated) workers.
    pub prefill_workers: u32,
    /// Decode workers (0 = aggregated).
    pub decode_workers: u32,
    /// Router mode.
    pub router: &'static str,
    /// Router seed.
    pub seed: u64,
}

/// Lifecycle figures, aggregated over handoffs.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Lifecycle {
    /// Handoff attempts that pinned a source.
    pub handoffs_pinned: u64,
    /// Handoff attempts whose destination activated.
    pub handoffs_activated: u64,
    /// Source pinned → source released (stranding), ms.
    pub source_pinned_ms: Summary,
    /// Destination routed → reserved, ms.
    pub reservation_wait_ms: Summary,
    /// Transfer start → completion, ms.
    pub transfer_ms: Summary,
    /// Destination reserved → activated, ms.
    pub reservation_to_activation_ms: Summary,
    /// Roles that ended early, by reason.
    pub early_ends: BTreeMap<&'static str, u64>,
    /// Source leases that expired.
    pub lease_expiries: u64,
    /// Destination reservations that expired.
    pub reservation_expiries: u64,
    /// Roles still alive when the event queue ran dry (torn down).
    pub unresolved_at_teardown: u64,
    /// Facts dropped by workers (stale, duplicate peers, unknown).
    pub dropped_facts: u64,
    /// Requests a worker refused.
    pub refused_requests: u64,
    /// vLLM preemptions / SGLang retractions.
    pub preemptions: u64,
    /// Failed requests by the reason their handoff (or delivery) ended;
    /// requests still unfinished when the run ended count as `unfinished`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub failure_reasons: BTreeMap<&'static str, u64>,
    /// Requests routed to a worker that was down when they reached it.
    #[serde(skip_serializing_if = "is_zero")]
    pub undeliverable_requests: u64,
    /// Faults the engine injected (omitted when none were).
    #[serde(skip_serializing_if = "FaultCounts::injected_nothing")]
    pub faults: FaultCounts,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One worker's figures.
#[derive(Clone, Debug, Serialize)]
pub struct WorkerReport {
    /// Worker id.
    pub worker: u32,
    /// Its pool.
    pub pool: &'static str,
    /// Forward passes.
    pub steps: u64,
    /// Prefill tokens computed.
    pub prefill_tokens: u64,
    /// Most blocks pinned at once.
    pub peak_pinned_blocks: u64,
    /// Most blocks reserved at once.
    pub peak_reserved_blocks: u64,
    /// Integral of pinned blocks over time (block·seconds).
    pub pinned_block_seconds: f64,
    /// Integral of reserved blocks over time (block·seconds).
    pub reserved_block_seconds: f64,
    /// Whether it ended drained.
    pub drained: bool,
    /// Final used blocks (should be 0).
    pub final_kv_used_blocks: u64,
}

/// The replay report. Field names follow Dynamo's replay report where one
/// exists; the `lifecycle` and `workers` sections are this project's.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// What ran.
    pub config: ReportConfig,
    /// Requests that arrived.
    pub num_requests: u64,
    /// Requests that produced all their output.
    pub completed_requests: u64,
    /// Requests that ended without output (failed handoff).
    pub failed_requests: u64,
    /// Output tokens produced.
    pub total_output_tokens: u64,
    /// Simulated seconds from first arrival to last event.
    pub duration_s: f64,
    /// Completed requests per simulated second.
    pub request_throughput_rps: f64,
    /// Output tokens per simulated second.
    pub output_token_throughput_tps: f64,
    /// Time to first token.
    pub ttft_ms: Summary,
    /// Time per output token after the first, per request.
    pub tpot_ms: Summary,
    /// Inter-token latency over all tokens (histogram, ±1.6%).
    pub itl_ms: Summary,
    /// End-to-end latency.
    pub e2e_latency_ms: Summary,
    /// Handoff lifecycle.
    pub lifecycle: Lifecycle,
    /// Per worker.
    pub workers: Vec<WorkerReport>,
}

#[derive(Clone, Copy, Debug, Default)]
struct ReqRec {
    arrival: Instant,
    first: Option<Instant>,
    last: Option<Instant>,
    tokens: u64,
    pinned_at: Option<Instant>,
    routed_at: Option<Instant>,
    reserved_at: Option<Instant>,
    /// The frontend routed a destination for it: its fate is the
    /// destination's from then on.
    has_destination: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct StepShape {
    start: Instant,
    steps: u64,
    first: Duration,
    last: Duration,
    /// End of the first pass and of the last, computed once per step: every
    /// request of a stable batch gets `steps` tokens.
    end_first: Instant,
    end_last: Instant,
    /// Growth of the pass time per pass, in nanoseconds.
    slope: f64,
}

impl StepShape {
    fn new(start: Instant, steps: u64, first: Duration, last: Duration) -> StepShape {
        let f = first.as_nanos() as f64;
        let l = last.as_nanos() as f64;
        let slope = if steps > 1 {
            (l - f) / (steps - 1) as f64
        } else {
            0.0
        };
        let mut shape = StepShape {
            start,
            steps,
            first,
            last,
            slope,
            ..StepShape::default()
        };
        shape.end_first = shape.end_of(1);
        shape.end_last = shape.end_of(steps.max(1));
        shape
    }

    /// End of pass `j` (1-based): passes grow linearly from first to last.
    fn end_of(&self, j: u64) -> Instant {
        let f = self.first.as_nanos() as f64;
        let jf = j as f64;
        let ns = jf * f + self.slope * jf * (jf - 1.0) / 2.0;
        Instant(self.start.0 + ns.round() as u64)
    }

    /// Duration of pass `j` (1-based), in nanoseconds. Runs once per token
    /// of a batch whose pass time grows, so it reuses the step's slope.
    fn pass(&self, j: u64) -> u64 {
        (self.first.as_nanos() as f64 + self.slope * (j - 1) as f64).round() as u64
    }
}

#[derive(Clone, Debug, Default)]
struct WorkerAcc {
    steps: u64,
    prefill_tokens: u64,
    shape: StepShape,
    pinned: i64,
    reserved: i64,
    peak_pinned: i64,
    peak_reserved: i64,
    pinned_ns: f64,
    reserved_ns: f64,
    last_change: Instant,
}

impl WorkerAcc {
    fn advance(&mut self, at: Instant) {
        if at > self.last_change {
            let dt = (at - self.last_change).as_nanos() as f64;
            self.pinned_ns += self.pinned as f64 * dt;
            self.reserved_ns += self.reserved as f64 * dt;
            self.last_change = at;
        }
    }
}

/// Folds worker events into a [`Report`].
pub struct Recorder {
    config: ReportConfig,
    reqs: FastMap<RequestId, ReqRec>,
    workers: BTreeMap<WorkerId, WorkerAcc>,
    transfers: FastMap<HandoffId, Instant>,
    first_arrival: Option<Instant>,
    last_finish: Instant,
    num_requests: u64,
    completed: u64,
    failed: u64,
    output_tokens: u64,
    ttft: Vec<f64>,
    tpot: Vec<f64>,
    e2e: Vec<f64>,
    itl: Histogram,
    pinned_ms: Vec<f64>,
    wait_ms: Vec<f64>,
    transfer_ms: Vec<f64>,
    activation_ms: Vec<f64>,
    life: Lifecycle,
    /// Roles torn down at the end.
    pub unresolved_teardown: u64,
    /// Faults the engine injected.
    pub faults: FaultCounts,
}

fn ms(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

impl Recorder {
    /// A recorder for `cfg`'s workers.
    pub fn new(cfg: &ReplayConfig, workers: impl Iterator<Item = (WorkerId, Pool)>) -> Self {
        Recorder {
            config: ReportConfig {
                backend: cfg.backend.name(),
                policy: if cfg.decode_workers == 0 {
                    "aggregated"
                } else {
                    cfg.policy.name()
                },
                prefill_workers: cfg.prefill_workers,
                decode_workers: cfg.decode_workers,
                router: cfg.router.name(),
                seed: cfg.seed,
            },
            reqs: FastMap::default(),
            workers: workers.map(|(w, _)| (w, WorkerAcc::default())).collect(),
            transfers: FastMap::default(),
            first_arrival: None,
            last_finish: Instant::ZERO,
            num_requests: 0,
            completed: 0,
            failed: 0,
            output_tokens: 0,
            ttft: Vec::new(),
            tpot: Vec::new(),
            e2e: Vec::new(),
            itl: Histogram::default(),
            pinned_ms: Vec::new(),
            wait_ms: Vec::new(),
            transfer_ms: Vec::new(),
            activation_ms: Vec::new(),
            life: Lifecycle::default(),
            unresolved_teardown: 0,
            faults: FaultCounts::default(),
        }
    }

    /// A request arrived.
    pub fn arrival(&mut self, r: &Request) {
        self.num_requests += 1;
        self.first_arrival.get_or_insert(r.arrival);
        self.reqs.insert(
            r.id,
            ReqRec {
                arrival: r.arrival,
                ..Default::default()
            },
        );
    }

    /// Request `r` failed for `reason` (its worker was lost, say); a
    /// request already finished or failed is left alone.
    pub fn fail(&mut self, r: RequestId, reason: &'static str) {
        if self.reqs.remove(&r).is_some() {
            self.failed += 1;
            *self.life.failure_reasons.entry(reason).or_default() += 1;
        }
    }

    /// Requests that arrived and have neither finished nor failed.
    pub fn in_flight(&self) -> usize {
        self.reqs.len()
    }

    /// Whether `request` arrived and has neither finished nor failed.
    pub fn is_in_flight(&self, request: RequestId) -> bool {
        self.reqs.contains_key(&request)
    }

    /// The frontend routed a destination role for `r`. From then on a
    /// source that ends early no longer fails the request by itself: the
    /// destination ends too (its peer's abort or loss, its own timer) and
    /// fails it then, or, having activated, decodes it to the end.
    pub fn destination_routed(&mut self, r: RequestId) {
        if let Some(rec) = self.reqs.get_mut(&r) {
            rec.has_destination = true;
        }
    }

    /// A worker refused a request.
    pub fn refused(&mut self, _e: RequestError) {
        self.life.refused_requests += 1;
    }

    /// A request could not be handed to its worker (the worker was down, or
    /// died and restarted while the request was on its way): the request
    /// fails.
    pub fn undeliverable(&mut self, request: &WorkerRequest, why: Undeliverable) {
        self.life.undeliverable_requests += 1;
        let rid = match request {
            WorkerRequest::Ordinary(r)
            | WorkerRequest::HandoffSource { request: r, .. }
            | WorkerRequest::HandoffDestination { request: r, .. } => r.id,
        };
        if self.reqs.remove(&rid).is_some() {
            self.failed += 1;
            let reason = match why {
                Undeliverable::WorkerDown => "worker-down",
                Undeliverable::WorkerRestarted => "worker-restarted",
            };
            *self.life.failure_reasons.entry(reason).or_default() += 1;
        }
    }

    /// A transfer started.
    pub fn transfer_started(&mut self, id: HandoffId, _tokens: u64, at: Instant) {
        self.transfers.insert(id, at);
    }

    /// A transfer completed.
    pub fn transfer_done(&mut self, id: HandoffId, at: Instant) {
        if let Some(s) = self.transfers.remove(&id) {
            self.transfer_ms.push(ms(at - s));
        }
    }

    /// Folds one worker event.
    pub fn event(&mut self, w: WorkerId, pool: Pool, e: &WorkerEvent) {
        match e {
            WorkerEvent::Step {
                start,
                steps,
                first_step,
                last_step,
                prefill_tokens,
                ..
            } => {
                if let Some(acc) = self.workers.get_mut(&w) {
                    acc.steps += steps;
                    acc.prefill_tokens += prefill_tokens;
                    acc.shape = StepShape::new(*start, *steps, *first_step, *last_step);
                }
            }
            WorkerEvent::Tokens {
                request,
                tokens,
                first,
            } if pool != Pool::Prefill => {
                let Some(shape) = self.workers.get(&w).map(|a| a.shape) else {
                    return;
                };
                let Some(rec) = self.reqs.get_mut(request) else {
                    return;
                };
                let k = u64::from(*tokens);
                if k == 0 {
                    return;
                }
                let e1 = shape.end_first;
                if *first || rec.first.is_none() {
                    rec.first = Some(e1);
                } else if let Some(last) = rec.last {
                    self.itl.record_n((e1 - last).as_nanos() as u64, 1);
                }
                if k > 1 {
                    if shape.first == shape.last {
                        self.itl.record_n(shape.first.as_nanos() as u64, k - 1);
                    } else {
                        for j in 2..=k {
                            self.itl.record_n(shape.pass(j), 1);
                        }
                    }
                }
                rec.last = Some(if k == shape.steps {
                    shape.end_last
                } else {
                    shape.end_of(k)
                });
                rec.tokens += k;
            }
            WorkerEvent::RequestFinished { request, at } if pool != Pool::Prefill => {
                if let Some(rec) = self.reqs.remove(request) {
                    self.last_finish = self.last_finish.max(*at);
                    self.completed += 1;
                    self.output_tokens += rec.tokens;
                    self.e2e.push(ms(*at - rec.arrival));
                    if let Some(f) = rec.first {
                        self.ttft.push(ms(f - rec.arrival));
                        if rec.tokens > 1 {
                            if let Some(l) = rec.last {
                                self.tpot.push(ms(l - f) / (rec.tokens - 1) as f64);
                            }
                        }
                    }
                }
            }
            WorkerEvent::Preempted { .. } => self.life.preemptions += 1,
            WorkerEvent::Dropped { .. } => self.life.dropped_facts += 1,
            WorkerEvent::Transition(t) => {
                if let Some(acc) = self.workers.get_mut(&w) {
                    acc.advance(t.at);
                    acc.pinned += t.delta.pinned;
                    acc.reserved += t.delta.reserved;
                    acc.peak_pinned = acc.peak_pinned.max(acc.pinned);
                    acc.peak_reserved = acc.peak_reserved.max(acc.reserved);
                }
                let Some(rec) = self.reqs.get_mut(&t.request) else {
                    return;
                };
                use handoff_core::{
                    DestinationEventKind as DE, DestinationState as DS, LifecycleEvent as E,
                    RoleState as St, SourceEventKind as SE, SourceState as SS,
                };
                match (t.event, t.to) {
                    (E::Source(SE::PrefillPinned), _) => {
                        rec.pinned_at = Some(t.at);
                        self.life.handoffs_pinned += 1;
                    }
                    (_, St::Source(SS::Released)) => {
                        if let Some(p) = rec.pinned_at.take() {
                            self.pinned_ms.push(ms(t.at - p));
                        }
                    }
                    (E::Destination(DE::Routed), _) => rec.routed_at = Some(t.at),
                    (E::Destination(DE::Reserved), _) => {
                        rec.reserved_at = Some(t.at);
                        if let Some(r) = rec.routed_at {
                            self.wait_ms.push(ms(t.at - r));
                        }
                    }
                    (E::Destination(DE::ReceiveCompleted), St::Destination(DS::Active)) => {
                        self.life.handoffs_activated += 1;
                        if let Some(r) = rec.reserved_at {
                            self.activation_ms.push(ms(t.at - r));
                        }
                    }
                    _ => {}
                }
            }
            WorkerEvent::RoleEnded {
                request,
                role,
                reason: Some(reason),
                ..
            } => {
                *self.life.early_ends.entry(reason.name()).or_default() += 1;
                match reason {
                    handoff_core::CancelReason::LeaseExpired => self.life.lease_expiries += 1,
                    handoff_core::CancelReason::ReservationExpired => {
                        self.life.reservation_expiries += 1
                    }
                    _ => {}
                }
                // A destination ending early ends the request: nothing
                // retries a failed handoff. So does a source ending early
                // before a destination was routed (it leaves none to fail);
                // after that the destination decides (a source whose lease
                // ran out after its reader activated, say, fails nothing).
                let decided = match role {
                    handoff_core::Role::Destination => true,
                    handoff_core::Role::Source => self
                        .reqs
                        .get(request)
                        .is_some_and(|rec| !rec.has_destination),
                };
                if decided && self.reqs.remove(request).is_some() {
                    self.failed += 1;
                    *self.life.failure_reasons.entry(reason.name()).or_default() += 1;
                }
            }
            _ => {}
        }
    }

    /// The report at `end`.
    pub fn finish(
        mut self,
        end: Instant,
        workers: impl Iterator<Item = (HostFinal, Pool)>,
    ) -> Report {
        let start = self.first_arrival.unwrap_or(Instant::ZERO);
        // Throughput is over the serving span, first arrival to last
        // completion, not to the last (possibly idle) timer.
        let duration_s = (self.last_finish.max(start) - start).as_secs_f64();
        let per_s = |n: u64| {
            if duration_s > 0.0 {
                round3(n as f64 / duration_s)
            } else {
                0.0
            }
        };
        let mut out = Vec::new();
        for (w, pool) in workers {
            let acc = self.workers.entry(w.worker).or_default();
            acc.advance(end);
            let cap: KvCapacitySnapshot = w.capacity;
            out.push(WorkerReport {
                worker: w.worker.0,
                pool: pool.name(),
                steps: acc.steps,
                prefill_tokens: acc.prefill_tokens,
                peak_pinned_blocks: acc.peak_pinned.max(0) as u64,
                peak_reserved_blocks: acc.peak_reserved.max(0) as u64,
                pinned_block_seconds: round3(acc.pinned_ns / 1e9),
                reserved_block_seconds: round3(acc.reserved_ns / 1e9),
                drained: w.drained,
                final_kv_used_blocks: cap.kv_used_blocks(),
            });
        }
        // Requests never finished (torn down mid-flight) count as failed.
        self.failed += self.reqs.len() as u64;
        if !self.reqs.is_empty() {
            *self.life.failure_reasons.entry("unfinished").or_default() += self.reqs.len() as u64;
        }
        let mut life = self.life;
        life.unresolved_at_teardown = self.unresolved_teardown;
        life.faults = self.faults;
        life.source_pinned_ms = Summary::exact(&mut self.pinned_ms);
        life.reservation_wait_ms = Summary::exact(&mut self.wait_ms);
        life.transfer_ms = Summary::exact(&mut self.transfer_ms);
        life.reservation_to_activation_ms = Summary::exact(&mut self.activation_ms);
        Report {
            config: self.config,
            num_requests: self.num_requests,
            completed_requests: self.completed,
            failed_requests: self.failed,
            total_output_tokens: self.output_tokens,
            duration_s: round3(duration_s),
            request_throughput_rps: per_s(self.completed),
            output_token_throughput_tps: per_s(self.output_tokens),
            ttft_ms: Summary::exact(&mut self.ttft),
            tpot_ms: Summary::exact(&mut self.tpot),
            itl_ms: self.itl.summary(),
            e2e_latency_ms: Summary::exact(&mut self.e2e),
            lifecycle: life,
            workers: out,
        }
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
