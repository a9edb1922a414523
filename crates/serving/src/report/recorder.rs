//! The [`Recorder`]: fed only worker events and host finals, it builds the [`Report`].

use super::details::*;
use super::records::*;
use super::samples::Samples;
use super::sections::*;
use super::units::*;
use crate::metrics::{Accuracy, Coalesced, Histogram};
use crate::per_worker::{PerWorker, MAX_DENSE};
use crate::request_table::RequestTable;
use crate::timeline::Series;
use handoff_core::fasthash::FastMap;
use handoff_core::host::HostFinal;
use handoff_core::FailureReason;
use handoff_core::{
    HandoffId, Instant, KvCapacitySnapshot, Request, RequestError, RequestId, Role, TokenEmission,
    WorkerEvent, WorkerId,
};
use handoff_deployment::DeploymentConfig;
use handoff_engine::fault::FaultCounts;
use handoff_engine::Undeliverable;
use handoff_router::Pool;
use std::collections::BTreeMap;

/// Folds worker events into a [`Report`].
pub struct Recorder {
    /// Maps each scheduler to its (worker, rank) row.
    pub(super) dp: handoff_core::DpLayout,
    pub(super) config: ReportConfig,
    pub(super) reqs: RequestTable<ReqRec>,
    pub(super) workers: PerWorker<WorkerAcc>,
    /// Each worker's last step, by worker id (ids are small and dense):
    /// the per-token path reads it without a tree walk; larger ids use
    /// `sparse_shapes`.
    pub(super) shapes: Vec<StepShape>,
    pub(super) sparse_shapes: BTreeMap<WorkerId, StepShape>,
    pub(super) pools: BTreeMap<WorkerId, Pool>,
    pub(super) transfers: FastMap<HandoffId, (RequestId, Instant)>,
    pub(super) first_arrival: Option<Instant>,
    pub(super) last_arrival: Instant,
    pub(super) last_finish: Instant,
    pub(super) num_requests: u64,
    pub(super) completed: u64,
    pub(super) failed: u64,
    pub(super) input_tokens: u64,
    pub(super) arrived_prompt_tokens: u64,
    pub(super) output_tokens: u64,
    pub(super) ttft: Samples,
    pub(super) ttst: Samples,
    pub(super) tpot: Samples,
    pub(super) e2e: Samples,
    pub(super) itl: Histogram,
    pub(super) pinned_ms: Samples,
    pub(super) wait_ms: Samples,
    pub(super) transfer_ms: Samples,
    pub(super) activation_ms: Samples,
    pub(super) life: Lifecycle,
    pub(super) sink: Option<RequestSink>,
    pub(super) timelines: Option<BTreeMap<WorkerId, Series>>,
    pub(super) details: Option<Details>,
    /// What the report judges and sizes the run by, if asked.
    pub(super) sizing: Option<handoff_deployment::ReportSizing>,
    /// Requests meeting each SLO target, with `--slo`.
    pub(super) slo: Option<super::slo::SloTracker>,
    /// An elastic run's stranded KV and SLO windows (`scale_costs.rs`).
    pub(super) scale: Option<super::ScaleCosts>,
    /// Roles torn down at the end.
    pub unresolved_teardown: u64,
    /// Faults the engine injected.
    pub faults: FaultCounts,
}

impl Recorder {
    /// A recorder for `cfg`'s workers.
    pub fn new(cfg: &DeploymentConfig, workers: impl Iterator<Item = (WorkerId, Pool)>) -> Self {
        let workers: Vec<(WorkerId, Pool)> = workers.collect();
        Recorder {
            dp: cfg.dp,
            config: ReportConfig::of(cfg, &workers),
            reqs: RequestTable::default(),
            workers: workers.iter().map(|(w, _)| *w).collect(),
            shapes: {
                let n = workers
                    .iter()
                    .filter(|(w, _)| w.0 < MAX_DENSE)
                    .map(|(w, _)| w.0 as usize + 1)
                    .max()
                    .unwrap_or(0);
                vec![StepShape::default(); n]
            },
            sparse_shapes: BTreeMap::new(),
            pools: workers.iter().copied().collect(),
            transfers: FastMap::default(),
            first_arrival: None,
            last_arrival: Instant::ZERO,
            last_finish: Instant::ZERO,
            num_requests: 0,
            completed: 0,
            failed: 0,
            input_tokens: 0,
            arrived_prompt_tokens: 0,
            output_tokens: 0,
            ttft: Samples::default(),
            ttst: Samples::default(),
            tpot: Samples::default(),
            e2e: Samples::default(),
            itl: Histogram::default(),
            pinned_ms: Samples::default(),
            wait_ms: Samples::default(),
            transfer_ms: Samples::default(),
            activation_ms: Samples::default(),
            life: Lifecycle::default(),
            sink: None,
            timelines: None,
            details: None,
            sizing: cfg.sizing.clone(),
            slo: cfg
                .sizing
                .as_ref()
                .and_then(|z| z.slo.as_ref())
                .map(super::slo::SloTracker::new),
            scale: (!cfg.faults.fleet.is_empty())
                .then(|| super::ScaleCosts::new(super::DEFAULT_SLO_WINDOW)),
            unresolved_teardown: 0,
            faults: FaultCounts::default(),
        }
    }

    /// Hands every request's [`RequestRecord`] to `sink` when it ends (in
    /// the order requests end, which the inputs fix).
    pub fn set_request_sink(&mut self, sink: RequestSink) {
        self.sink = Some(sink);
    }

    /// Keeps what the HTML report draws ([`Details`]): CDFs at the end, and
    /// timelines of the capacity reports handed to [`Recorder::capacity`],
    /// at most `points` per worker.
    pub fn keep_details(&mut self, points: usize) {
        self.timelines = Some(
            self.workers
                .keys()
                .map(|w| (w, Series::new(points)))
                .collect(),
        );
        self.details = Some(Details::default());
    }

    /// Worker `w`'s capacity report at `at` (a driver that can read its
    /// hosts hands these over; the recorder never reads a worker). Kept
    /// only with [`Recorder::keep_details`].
    pub fn capacity(&mut self, w: WorkerId, at: Instant, snapshot: &KvCapacitySnapshot) {
        if let Some(s) = self.timelines.as_mut().and_then(|t| t.get_mut(&w)) {
            s.observe(at, snapshot);
        }
    }

    /// The session fields of in-flight request `r` (a session run's
    /// director keeps them current).
    pub fn set_session(&mut self, r: RequestId, fields: crate::session_log::SessionFields) {
        if let Some(rec) = self.reqs.get_mut(r) {
            rec.cold.session = Some(fields);
        }
    }

    /// A request arrived.
    pub fn arrival(&mut self, r: &Request) {
        self.num_requests += 1;
        if let Some(c) = self.scale.as_mut() {
            c.arrived(r.arrival);
        }
        self.arrived_prompt_tokens += u64::from(r.prompt_tokens);
        self.first_arrival.get_or_insert(r.arrival);
        self.last_arrival = self.last_arrival.max(r.arrival);
        self.reqs.insert(
            r.id,
            ReqRec {
                tok: TokenRec::default(),
                cold: Box::new(ColdRec {
                    arrival: r.arrival,
                    input: r.prompt_tokens,
                    lora: r.lora.as_ref().map(|l| l.name.clone()),
                    ..Default::default()
                }),
            },
        );
    }

    /// The request ended as it did: counted, and handed to the sink.
    pub(super) fn end(
        &mut self,
        id: RequestId,
        rec: &ReqRec,
        reason: Option<FailureReason>,
        at: Instant,
    ) {
        match reason {
            None => self.completed += 1,
            Some(r) => {
                self.failed += 1;
                *self.life.failure_reasons.entry(r).or_default() += 1;
            }
        }
        let bits = self.slo.as_mut().map(|t| {
            let first = rec.tok.first();
            let sample = super::slo::SloSample {
                ttft_ms: first.map(|f| ms(f - rec.cold.arrival)),
                tpot_ms: match (first, rec.tok.last()) {
                    (Some(f), Some(l)) if rec.tok.tokens > 1 => {
                        Some(ms(l - f) / (rec.tok.tokens - 1) as f64)
                    }
                    (Some(_), _) => Some(0.0),
                    _ => None,
                },
                e2e_ms: reason.is_none().then(|| ms(at - rec.cold.arrival)),
            };
            t.judge(&sample, reason.is_none(), rec.tok.tokens)
        });
        if let (Some(c), Some(t), Some(b)) = (self.scale.as_mut(), self.slo.as_ref(), bits) {
            if reason.is_none() && t.all_met(b) {
                c.good(rec.cold.arrival, rec.tok.tokens);
            }
        }
        let Some(sink) = self.sink.as_mut() else {
            return;
        };
        let since = |t: Option<Instant>, from: Option<Instant>| match (t, from) {
            (Some(t), Some(f)) => Some(round3(ms(t - f))),
            _ => None,
        };
        let tpot = match (rec.tok.first(), rec.tok.last()) {
            (Some(f), Some(l)) if rec.tok.tokens > 1 => {
                Some(round3(ms(l - f) / (rec.tok.tokens - 1) as f64))
            }
            _ => None,
        };
        let dp = self.dp;
        let split = dp.is_split();
        let record = RequestRecord {
            id: id.0,
            outcome: if reason.is_none() {
                "completed"
            } else {
                "failed"
            },
            failure_reason: reason,
            arrival_ms: at_ms(rec.cold.arrival),
            end_ms: at_ms(at),
            input_tokens: rec.cold.input,
            lora_name: rec.cold.lora.clone(),
            output_tokens: rec.tok.tokens,
            ttft_ms: since(rec.tok.first(), Some(rec.cold.arrival)),
            ttst_ms: since(rec.tok.second(), rec.tok.first()),
            tpot_ms: tpot,
            e2e_ms: reason.is_none().then(|| round3(ms(at - rec.cold.arrival))),
            prefill_worker: rec.tok.prefill_worker().map(|w| dp.address(w).worker.0),
            prefill_dp_rank: split
                .then(|| rec.tok.prefill_worker().map(|w| dp.address(w).dp_rank.0))
                .flatten(),
            decode_worker: rec.tok.decode_worker().map(|w| dp.address(w).worker.0),
            decode_dp_rank: split
                .then(|| rec.tok.decode_worker().map(|w| dp.address(w).dp_rank.0))
                .flatten(),
            handoff: HandoffTimes {
                pinned_ms: rec.cold.pinned_at.map(at_ms),
                routed_ms: rec.cold.routed_at.map(at_ms),
                reserved_ms: rec.cold.reserved_at.map(at_ms),
                transfer_start_ms: rec.cold.transfer_start.map(at_ms),
                transfer_end_ms: rec.cold.transfer_end.map(at_ms),
                activated_ms: rec.cold.activated_at.map(at_ms),
                source_released_ms: rec.cold.released_at.map(at_ms),
                source_pinned_for_ms: since(rec.cold.released_at, rec.cold.pinned_at),
            },
            stale_kv: rec.cold.stale_kv,
            session: rec.cold.session,
            slo: self.slo.as_ref().zip(bits).map(|(t, b)| t.verdicts(b)),
        };
        sink(&record);
    }

    /// Request `r` failed for `reason` (its worker was lost, say); a
    /// request already finished or failed is left alone.
    pub fn fail(&mut self, r: RequestId, reason: FailureReason) {
        self.fail_at(r, reason, None);
    }

    /// [`Recorder::fail`] at a known model time (for its record).
    pub fn fail_at(&mut self, r: RequestId, reason: FailureReason, at: Option<Instant>) {
        if let Some(rec) = self.reqs.remove(r) {
            let at = at.unwrap_or(self.last_finish.max(rec.cold.arrival));
            self.end(r, &rec, Some(reason), at);
        }
    }

    /// From now on, folds every per-request latency series (TTFT, TTST,
    /// TPOT, end-to-end, the handoff phases) into a histogram as ITL is,
    /// instead of keeping each value: the recorder's memory then stays
    /// flat however many requests end (`serve`, which runs until stopped).
    /// The report says so in `latency_accuracy`.
    pub fn fold_latencies(&mut self) {
        for s in [
            &mut self.ttft,
            &mut self.ttst,
            &mut self.tpot,
            &mut self.e2e,
            &mut self.pinned_ms,
            &mut self.wait_ms,
            &mut self.transfer_ms,
            &mut self.activation_ms,
        ] {
            s.fold();
        }
    }

    /// Requests that arrived and have neither finished nor failed.
    pub fn in_flight(&self) -> usize {
        self.reqs.len()
    }

    /// Whether `request` arrived and has neither finished nor failed.
    pub fn is_in_flight(&self, request: RequestId) -> bool {
        self.reqs.contains(request)
    }

    /// A worker refused a request.
    pub fn refused(&mut self, _e: RequestError) {
        self.life.refused_requests += 1;
    }

    /// A request could not be handed to its worker (the worker was down);
    /// the director decides what becomes of the request.
    pub fn undeliverable(&mut self, _why: Undeliverable) {
        self.life.undeliverable_requests += 1;
    }

    /// Request `r` was routed again as a new attempt (its worker was lost):
    /// its output so far is discarded, since the new attempt produces it
    /// all again; its arrival and prompt stand, so its latencies include
    /// the loss and its input tokens count once.
    pub fn migrated(&mut self, r: RequestId) {
        self.life.migrated_requests += 1;
        if let Some(rec) = self.reqs.get_mut(r) {
            let (arrival, input) = (rec.cold.arrival, rec.cold.input);
            *rec = ReqRec {
                tok: TokenRec::default(),
                cold: Box::new(ColdRec {
                    arrival,
                    input,
                    ..Default::default()
                }),
            };
        }
    }

    /// A transfer started.
    pub fn transfer_started(&mut self, id: HandoffId, request: RequestId, at: Instant) {
        self.transfers.insert(id, (request, at));
        if let Some(rec) = self.reqs.get_mut(request) {
            rec.cold.transfer_start = Some(at);
        }
    }

    /// A transfer completed.
    pub fn transfer_done(&mut self, id: HandoffId, at: Instant) {
        if let Some((r, s)) = self.transfers.remove(&id) {
            self.transfer_ms.push(ms(at - s));
            if let Some(rec) = self.reqs.get_mut(r) {
                rec.cold.transfer_end = Some(at);
            }
        }
    }

    /// Worker `w`'s last step (a worker's `Step` comes before its tokens).
    pub(super) fn shape_mut(&mut self, w: WorkerId) -> &mut StepShape {
        match self.shapes.get_mut(w.0 as usize) {
            Some(s) => s,
            None => self.sparse_shapes.entry(w).or_default(),
        }
    }

    /// Folds one worker event. `stale` marks an event of a voided attempt
    /// (one a migration replaced): it counts toward the workers' and the
    /// lifecycle's figures, not toward its request's.
    pub fn event(&mut self, w: WorkerId, pool: Pool, e: &WorkerEvent, stale: bool) {
        match e {
            WorkerEvent::Step {
                start,
                steps,
                first_step,
                duration,
                passes,
                prefill_tokens,
                ..
            } => {
                if let Some(acc) = self.workers.get_mut(w) {
                    acc.steps += steps;
                    acc.prefill_tokens += prefill_tokens;
                    self.shape_mut(w)
                        .set(*start, *steps, *first_step, *duration, passes);
                }
            }
            WorkerEvent::Tokens { emissions } if pool != Pool::Prefill => {
                self.on_tokens(w, pool, emissions)
            }
            // SGLang PD decode streams the prefill's token when the request
            // joins its batch: the first token, with no pass of its own.
            WorkerEvent::FirstTokenFromPrefill { request, at } if pool != Pool::Prefill => {
                if let Some(rec) = self.reqs.get_mut(*request) {
                    rec.tok.set_decode_worker(w);
                    rec.tok.set_first(Some(*at));
                    rec.tok.set_second(None);
                    rec.tok.set_last(Some(*at));
                    rec.tok.tokens += 1;
                }
            }
            WorkerEvent::RequestFinished { request, at } if pool != Pool::Prefill => {
                self.on_finished(*request, *at)
            }
            WorkerEvent::StaleRead {
                request, reused, ..
            } => {
                self.life.stale_reads.add(*reused);
                if let Some(rec) = self.reqs.get_mut(*request).filter(|_| !stale) {
                    rec.cold.stale_kv = Some(super::StaleKv::of(*reused));
                }
            }
            WorkerEvent::Preempted { .. } => self.life.preemptions += 1,
            WorkerEvent::Dropped { .. } => self.life.dropped_facts += 1,
            WorkerEvent::Transition(t) => self.on_transition(w, t, stale),
            WorkerEvent::RoleEnded {
                request,
                reason: Some(reason),
                at,
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
                // What becomes of the request (migration or failure) is the
                // director's decision: it calls `fail` or `migrated`.
                let _ = (request, at);
            }
            _ => {}
        }
    }

    /// Tokens a prefill worker emitted for requests it serves whole (a
    /// proxy's plain request, `Serving::arrive_local`): counted as an
    /// aggregated worker's (it prefilled them and decodes them), which
    /// [`Recorder::event`] does not do for a prefill worker's.
    pub fn local_tokens(&mut self, w: WorkerId, emissions: &[TokenEmission]) {
        self.on_tokens(w, Pool::Aggregated, emissions);
    }

    /// The finish of a request a prefill worker served whole (see
    /// [`Recorder::local_tokens`]): it completes as any request does.
    pub fn local_finished(&mut self, request: RequestId, at: Instant) {
        self.on_finished(request, at);
    }

    /// A decode (or aggregated) worker's tokens: the requests' token
    /// stamps and the inter-token latencies of the step that emitted them.
    fn on_tokens(&mut self, w: WorkerId, pool: Pool, emissions: &[TokenEmission]) {
        let shape = match self.shapes.get(w.0 as usize) {
            Some(s) => s,
            None => match self.sparse_shapes.get(&w) {
                Some(s) => s,
                None => return,
            },
        };
        self.reqs
            .warm(emissions.iter().map(|e| e.request), |r| r.tok.tokens);
        let mut whole_runs = 0;
        let mut itl = Coalesced::default();
        for em in emissions {
            whole_runs += u64::from(record_tokens(
                &mut self.reqs,
                &mut self.itl,
                &mut itl,
                w,
                pool,
                shape,
                em,
            ));
        }
        itl.flush(&mut self.itl);
        // Requests that took every pass of a run share its
        // inter-token latencies: recorded once per pass for all of
        // them, not once per token.
        if whole_runs > 0 {
            for &ns in shape.later_passes(shape.steps) {
                self.itl.record_n(ns, whole_runs);
            }
        }
    }

    /// A request's last token: its latencies, then its record.
    fn on_finished(&mut self, request: RequestId, at: Instant) {
        if let Some(rec) = self.reqs.remove(request) {
            self.last_finish = self.last_finish.max(at);
            self.output_tokens += rec.tok.tokens;
            self.input_tokens += u64::from(rec.cold.input);
            self.e2e.push(ms(at - rec.cold.arrival));
            if let Some(f) = rec.tok.first() {
                self.ttft.push(ms(f - rec.cold.arrival));
                if let Some(s) = rec.tok.second() {
                    self.ttst.push(ms(s - f));
                }
                if rec.tok.tokens > 1 {
                    if let Some(l) = rec.tok.last() {
                        self.tpot.push(ms(l - f) / (rec.tok.tokens - 1) as f64);
                    }
                }
            }
            self.end(request, &rec, None, at);
        }
    }

    /// A role's transition: the worker's held and reserved block-time, and
    /// the request's handoff phase stamps (not for a voided attempt's).
    fn on_transition(&mut self, w: WorkerId, t: &handoff_core::Transition, stale: bool) {
        if let Some(c) = self.scale.as_mut() {
            c.transition(w, t.at, t.delta);
        }
        if let Some(acc) = self.workers.get_mut(w) {
            acc.advance(t.at);
            acc.pinned += t.delta.pinned;
            acc.reserved += t.delta.reserved;
            acc.peak_pinned = acc.peak_pinned.max(acc.pinned);
            acc.peak_reserved = acc.peak_reserved.max(acc.reserved);
        }
        if stale {
            return;
        }
        let Some(rec) = self.reqs.get_mut(t.request) else {
            return;
        };
        use handoff_core::{
            DestinationEventKind as DE, DestinationState as DS, LifecycleEvent as E,
            RoleState as St, SourceEventKind as SE, SourceState as SS,
        };
        match (t.event, t.to) {
            (E::Source(SE::PrefillPinned), _) => {
                rec.cold.pinned_at = Some(t.at);
                rec.tok.set_prefill_worker(t.worker);
                self.life.handoffs_pinned += 1;
            }
            (_, St::Source(SS::Released)) => {
                rec.cold.released_at = Some(t.at);
                if let Some(p) = rec.cold.pinned_at {
                    self.pinned_ms.push(ms(t.at - p));
                }
            }
            (E::Destination(DE::Routed), _) => {
                rec.cold.routed_at = Some(t.at);
                rec.tok.set_decode_worker(t.worker);
            }
            (E::Destination(DE::Reserved), _) => {
                rec.cold.reserved_at = Some(t.at);
                if let Some(r) = rec.cold.routed_at {
                    self.wait_ms.push(ms(t.at - r));
                }
            }
            (E::Destination(DE::ReceiveCompleted), St::Destination(DS::Active)) => {
                self.life.handoffs_activated += 1;
                rec.cold.activated_at = Some(t.at);
                if let Some(r) = rec.cold.reserved_at {
                    self.activation_ms.push(ms(t.at - r));
                }
            }
            _ => {}
        }
        // The source role lives on the prefill worker.
        if t.role == Role::Source {
            rec.tok.note_prefill_worker(t.worker);
        }
    }

    /// The report at `end`.
    pub fn finish(self, end: Instant, workers: impl Iterator<Item = (HostFinal, Pool)>) -> Report {
        self.finish_detailed(end, workers).0
    }

    /// Each worker's report at `end`, in `workers`' order, and the prompt
    /// tokens the prefill (or aggregated) workers computed.
    fn worker_reports(
        &mut self,
        end: Instant,
        workers: impl Iterator<Item = (HostFinal, Pool)>,
    ) -> (Vec<WorkerReport>, u64) {
        let mut out = Vec::new();
        let mut computed_prefill = 0u64;
        for (w, pool) in workers {
            let acc = self.workers.entry(w.worker);
            acc.advance(end);
            if pool != Pool::Decode {
                computed_prefill += acc.prefill_tokens;
            }
            let cap: KvCapacitySnapshot = w.capacity;
            let at = self.dp.address(w.worker);
            out.push(WorkerReport {
                worker: at.worker.0,
                dp_rank: self.dp.is_split().then_some(at.dp_rank.0),
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
        (out, computed_prefill)
    }

    /// What the HTML report draws, if asked; every latency and phase
    /// vector is sorted by now.
    fn take_details(&mut self) -> Option<Details> {
        self.details.take().map(|mut d| {
            // Every vector above is sorted now.
            d.latency_cdfs = vec![
                ("TTFT", self.ttft.cdf(CDF_POINTS)),
                ("TTST", self.ttst.cdf(CDF_POINTS)),
                ("TPOT", self.tpot.cdf(CDF_POINTS)),
                ("ITL", self.itl.cdf(CDF_POINTS)),
                ("E2E", self.e2e.cdf(CDF_POINTS)),
            ];
            d.phase_cdfs = vec![
                ("source pinned (stranded)", self.pinned_ms.cdf(CDF_POINTS)),
                ("reservation wait", self.wait_ms.cdf(CDF_POINTS)),
                ("transfer", self.transfer_ms.cdf(CDF_POINTS)),
                ("reserved -> activated", self.activation_ms.cdf(CDF_POINTS)),
            ];
            let pools = &self.pools;
            d.timelines = self
                .timelines
                .take()
                .unwrap_or_default()
                .into_iter()
                .map(|(w, s)| (w, pools.get(&w).map_or("decode", |p| p.name()), s))
                .collect();
            d
        })
    }

    /// The report at `end`, and the [`Details`] kept (with
    /// [`Recorder::keep_details`]).
    pub fn finish_detailed(
        mut self,
        end: Instant,
        workers: impl Iterator<Item = (HostFinal, Pool)>,
    ) -> (Report, Option<Details>) {
        let workers: Vec<(HostFinal, Pool)> = workers.collect();
        if let Some(b) = self.config.perf_beyond_grid.as_mut() {
            b.settle(workers.iter().map(|(f, _)| f.beyond_grid_passes));
        }
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
        let (out, computed_prefill) = self.worker_reports(end, workers.into_iter());
        // Requests never finished (torn down mid-flight) count as failed,
        // in id order.
        let left = self.reqs.drain_sorted();
        for (r, rec) in left {
            self.end(r, &rec, Some(FailureReason::Unfinished), end);
        }
        let reuse = if self.arrived_prompt_tokens == 0 {
            0.0
        } else {
            (1.0 - computed_prefill as f64 / self.arrived_prompt_tokens as f64).clamp(0.0, 1.0)
        };
        let flat = FlatLatencies {
            ttft: self.ttft.distribution(),
            ttst: self.ttst.distribution(),
            tpot: self.tpot.distribution(),
            itl: self.itl.distribution(),
            e2e_latency: self.e2e.distribution(),
        };
        let source_pinned_ms = self.pinned_ms.summary();
        let reservation_wait_ms = self.wait_ms.summary();
        let transfer_ms = self.transfer_ms.summary();
        let reservation_to_activation_ms = self.activation_ms.summary();
        let details = self.take_details();
        let mut life = std::mem::take(&mut self.life);
        life.unresolved_at_teardown = self.unresolved_teardown;
        life.faults = self.faults;
        life.source_pinned_ms = source_pinned_ms;
        life.reservation_wait_ms = reservation_wait_ms;
        life.transfer_ms = transfer_ms;
        life.reservation_to_activation_ms = reservation_to_activation_ms;
        let (slo, sizing) = (self.slo.take(), self.sizing.take());
        let span_ms = (self.last_arrival.max(start) - start).as_secs_f64() * 1e3;
        let report = Report {
            config: self.config,
            num_requests: self.num_requests,
            completed_requests: self.completed,
            failed_requests: self.failed,
            total_input_tokens: self.input_tokens,
            total_output_tokens: self.output_tokens,
            duration_s: round3(duration_s),
            duration_ms: round3(duration_s * 1e3),
            request_throughput_rps: per_s(self.completed),
            input_throughput_tok_s: per_s(self.input_tokens),
            output_token_throughput_tps: per_s(self.output_tokens),
            output_throughput_tok_s: per_s(self.output_tokens),
            total_throughput_tok_s: per_s(self.input_tokens + self.output_tokens),
            prefix_cache_reused_ratio: round6(reuse),
            ttft_ms: flat.ttft.summary(),
            ttst_ms: flat.ttst.summary(),
            tpot_ms: flat.tpot.summary(),
            itl_ms: flat.itl.summary(),
            e2e_latency_ms: flat.e2e_latency.summary(),
            latency_accuracy: if self.e2e.is_folded() {
                Accuracy::FOLDED
            } else {
                Accuracy::REPORTED
            },
            flat,
            lifecycle: life,
            workers: out,
            sessions: None,
            slo: None,
            sizing: None,
            scaling: None,
            warnings: super::RunWarning::steady(span_ms, flat.e2e_latency.summary().p50)
                .into_iter()
                .collect(),
        };
        (with_sizing(report, slo, sizing, duration_s), details)
    }
}

/// `report` with the SLO and sizing sections, when asked for.
fn with_sizing(
    mut report: Report,
    slo: Option<super::slo::SloTracker>,
    sizing: Option<handoff_deployment::ReportSizing>,
    duration_s: f64,
) -> Report {
    report.slo = slo.map(|t| t.report(report.num_requests, duration_s));
    report.sizing = sizing.map(|z| {
        let schedulers = report.workers.len() as u64;
        let decode = report
            .workers
            .iter()
            .filter(|w| w.pool == handoff_router::Pool::Decode.name())
            .count() as u64;
        super::slo::sizing_report(
            &z,
            (schedulers, decode),
            report.output_throughput_tok_s,
            report.flat.tpot.mean,
            report.slo.as_ref(),
        )
    });
    report
}

/// One request's tokens of the step `shape`: its first, second and last
/// token times, its count, and the latencies between its tokens. Returns
/// whether it took every pass of a multi-pass step, leaving the latencies
/// within the step for the caller to record for all such requests at once.
pub(super) fn record_tokens(
    reqs: &mut RequestTable<ReqRec>,
    itl: &mut Histogram,
    pending: &mut Coalesced,
    w: WorkerId,
    pool: Pool,
    shape: &StepShape,
    em: &TokenEmission,
) -> bool {
    let Some(rec) = reqs.get_mut(em.request) else {
        return false;
    };
    let k = u64::from(em.tokens);
    if k == 0 {
        return false;
    }
    rec.tok.set_decode_worker(w);
    if pool == Pool::Aggregated {
        rec.tok.note_prefill_worker(w);
    }
    // A step's tokens come from its first passes: a request in a step
    // takes part from the first pass on.
    let e1 = shape.end_first;
    if em.first || rec.tok.first().is_none() {
        rec.tok.set_first(Some(e1));
        rec.tok
            .set_second(if k > 1 { shape.end_of(2) } else { None });
    } else {
        if rec.tok.second().is_none() {
            rec.tok.set_second(Some(e1));
        }
        if let Some(last) = rec.tok.last() {
            pending.push(itl, (e1 - last).as_nanos() as u64);
        }
    }
    rec.tok.set_last(Some(if k >= shape.steps {
        shape.end_last
    } else {
        shape.end_of(k).unwrap_or(shape.end_last)
    }));
    rec.tok.tokens += k;
    if k > 1 {
        if k >= shape.steps {
            return true;
        }
        for &ns in shape.later_passes(k) {
            pending.push(itl, ns);
        }
    }
    false
}
