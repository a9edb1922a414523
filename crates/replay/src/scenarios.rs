//! The DEP's test scenarios 1–5, run on the real backend cores through
//! [`Worker`]s, reporting what was observed as JSON (`handoff-mocker
//! scenario NAME`). A small lab drives one prefill and one decode worker on a
//! virtual clock; it can hold transfers, cut the link and restart a worker
//! so each scenario can look at the state in the middle of a handoff.

use crate::engines::{make_core, EngineSpec};
use handoff_core::{
    Backend, CancelReason, CoreBox, DestinationEventKind as DE, DestinationState, Duration,
    Generation, HandoffConfig, HandoffId, Instant, KvEventData, LifecycleEvent, MsgBody, Request,
    RequestId, ReservationSummary, Role, RoleState, SourceEventKind as SE, SourceState as SS,
    Transition, Worker, WorkerEvent, WorkerId, WorkerRequest,
};
use router::{Frontend, FrontendConfig, Pool, RouterMode};
use serde_json::{json, Value};

const P: WorkerId = WorkerId(0);
const D: WorkerId = WorkerId(1);

/// Names accepted by [`run`].
pub const NAMES: [&str; 5] = [
    "stranded-source",
    "destination-gate",
    "router-parity",
    "no-false-overlap",
    "failure-matrix",
];

struct Lab {
    w: [Worker<CoreBox>; 2],
    spec: [EngineSpec; 2],
    fe: Frontend,
    now: Instant,
    hold_transfers: bool,
    link_up: bool,
    transfers: Vec<(WorkerId, HandoffId)>,
    /// Every transition as text, for the scenario's JSON.
    log: Vec<String>,
    /// The same transitions, typed, for the scenarios' predicates.
    seen: Vec<Transition>,
    activated: Vec<RequestId>,
    stored_before_activation: u64,
    stored_at_or_after_activation: u64,
    summaries: Vec<(RequestId, ReservationSummary)>,
    pinned: Vec<RequestId>,
    finished: Vec<RequestId>,
    /// Block hashes of the handoff under observation.
    watch: std::collections::HashSet<u64>,
    /// Decode router booking and decode reservation at the moment the
    /// frontend routed the decode side (before the worker saw it).
    at_routing: Option<(u64, u64)>,
    /// While set, requests for the decode worker wait in `held_routes`.
    hold_routing: bool,
    held_routes: Vec<WorkerRequest>,
}

fn request(id: u64, prompt: u32, output: u32, hashes: &[u64]) -> Request {
    Request {
        id: RequestId(id),
        prompt_tokens: prompt,
        max_output_tokens: output,
        prefix_hashes: hashes.to_vec(),
        hash_block_tokens: 512,
        session: None,
        arrival: Instant::ZERO,
    }
}

fn chunks(base: u64, n: u64) -> Vec<u64> {
    (0..n).map(|i| base + i).collect()
}

impl Lab {
    fn new(backend: Backend, decode_kv_tokens: u64) -> Lab {
        let spec = |kv| EngineSpec {
            backend,
            kv_tokens: kv,
            block_size: 16,
            source_lease_ttl: Some(Duration::from_secs(30)),
            ..EngineSpec::default()
        };
        let specs = [spec(1 << 18), spec(decode_kv_tokens)];
        let policy = backend.native_policy();
        let handoff = HandoffConfig {
            reservation_ttl: Duration::from_secs(30),
            ..HandoffConfig::default()
        };
        let mk = |i: usize, id| {
            let core = make_core(&specs[i]).expect("scenario engines are valid");
            Worker::new(id, Generation(0), policy, handoff, core)
        };
        let fe = Frontend::new(
            FrontendConfig {
                policy,
                aggregated: false,
                mode: RouterMode::KvAware,
                block_size: specs[0].event_block_tokens(),
                seed: 0,
                hop: Duration::ZERO,
                disabled_delay: Duration::ZERO,
            },
            &[(P, Pool::Prefill), (D, Pool::Decode)],
        );
        Lab {
            w: [mk(0, P), mk(1, D)],
            spec: specs,
            fe,
            now: Instant::ZERO,
            hold_transfers: false,
            link_up: true,
            transfers: Vec::new(),
            log: Vec::new(),
            seen: Vec::new(),
            activated: Vec::new(),
            stored_before_activation: 0,
            stored_at_or_after_activation: 0,
            summaries: Vec::new(),
            pinned: Vec::new(),
            finished: Vec::new(),
            watch: Default::default(),
            at_routing: None,
            hold_routing: false,
            held_routes: Vec::new(),
        }
    }

    /// Counts Stored events for `r`'s blocks only.
    fn watch(&mut self, r: &Request) {
        let mut h = Vec::new();
        r.block_hashes(self.spec[1].event_block_tokens(), &mut h);
        self.watch = h.into_iter().collect();
    }

    fn note_routing(&mut self) {
        if self.at_routing.is_none() {
            let booked = self
                .fe
                .decode_router()
                .and_then(|d| d.load(D))
                .map_or(0, |l| l.booked_blocks);
            self.at_routing = Some((booked, self.cap(D).reserved_destination_blocks));
        }
    }

    fn deliver(&mut self, to: WorkerId, req: WorkerRequest) {
        if to == D && self.hold_routing && matches!(req, WorkerRequest::HandoffDestination { .. }) {
            self.held_routes.push(req);
            return;
        }
        let now = self.now;
        let _ = self.w[to.0 as usize].handle_request(req, now);
    }

    fn arrive(&mut self, r: Request) {
        let now = self.now;
        for (to, req) in self.fe.arrive(r, now) {
            if to == D {
                self.note_routing();
            }
            self.deliver(to, req);
        }
    }

    fn submit_ordinary(&mut self, to: WorkerId, r: Request) {
        self.deliver(to, WorkerRequest::Ordinary(r));
    }

    /// Moves outputs around until nothing moves; returns whether anything did.
    fn drain(&mut self) -> bool {
        let mut moved = false;
        loop {
            let mut any = false;
            for i in 0..2 {
                let me = WorkerId(i as u32);
                while let Some(t) = self.w[i].poll_transmit() {
                    any = true;
                    if let MsgBody::DestinationReserved { summary } = t.msg.body {
                        let rid = self.w[i].core().capacity().running_requests;
                        let _ = rid;
                        self.summaries
                            .push((RequestId(t.msg.id.sequence()), summary));
                    }
                    if self.link_up {
                        let now = self.now;
                        self.w[t.to.0 as usize].handle_message(me, t.msg, now);
                    }
                }
                while let Some(e) = self.w[i].poll_event() {
                    any = true;
                    self.observe(me, &e);
                    let pool = if i == 0 { Pool::Prefill } else { Pool::Decode };
                    let now = self.now;
                    for (to, req, _) in self.fe.on_event(me, pool, &e, now) {
                        if to == D {
                            self.note_routing();
                        }
                        self.deliver(to, req);
                    }
                }
            }
            if !self.hold_transfers {
                for (owner, id) in std::mem::take(&mut self.transfers) {
                    any = true;
                    let now = self.now;
                    let ok = self.link_up;
                    self.w[owner.0 as usize].handle_transfer_done(id, ok, now);
                }
            }
            if !any {
                return moved;
            }
            moved = true;
        }
    }

    fn observe(&mut self, w: WorkerId, e: &WorkerEvent) {
        match e {
            WorkerEvent::Transition(t) => {
                self.log.push(format!(
                    "{} {} {} {} -> {} [{}]",
                    t.worker,
                    t.role.name(),
                    t.event,
                    t.from,
                    t.to,
                    t.delta
                ));
                self.seen.push(*t);
                if t.to == RoleState::Destination(DestinationState::Active) {
                    self.activated.push(t.request);
                }
            }
            WorkerEvent::StartTransfer { id, .. } => self.transfers.push((w, *id)),
            WorkerEvent::PrefillPinned { request, .. } => self.pinned.push(*request),
            WorkerEvent::RequestFinished { request, .. } => self.finished.push(*request),
            WorkerEvent::Kv { event, .. } if w == D => {
                if let KvEventData::Stored { block_hashes, .. } = &event.data {
                    let n = block_hashes
                        .iter()
                        .filter(|h| self.watch.contains(h))
                        .count() as u64;
                    // Activation is the only way handoff KV becomes valid on
                    // decode; anything stored before it would be false overlap.
                    if self.activated.is_empty() {
                        self.stored_before_activation += n;
                    } else {
                        self.stored_at_or_after_activation += n;
                    }
                }
            }
            _ => {}
        }
    }

    /// One round: drain, then step every worker with work; with nothing to
    /// step, jump to the next timer. `false` when nothing is left to do.
    fn round(&mut self) -> bool {
        let moved = self.drain();
        let now = self.now;
        let mut end = None;
        for i in 0..2 {
            if let Some(e) = self.w[i].step(now, now) {
                end = Some(end.map_or(e, |x: Instant| x.max(e)));
            }
        }
        if let Some(e) = end {
            self.now = e;
            return true;
        }
        if moved {
            return true;
        }
        let next = self.w.iter().filter_map(|w| w.poll_timeout()).min();
        match next {
            Some(t) if t > now => {
                self.now = t;
                for w in &mut self.w {
                    w.handle_timeout(t);
                }
                true
            }
            Some(t) => {
                for w in &mut self.w {
                    w.handle_timeout(t);
                }
                self.drain()
            }
            None => false,
        }
    }

    fn run_until(&mut self, mut stop: impl FnMut(&Lab) -> bool) -> bool {
        for _ in 0..200_000 {
            self.drain();
            if stop(self) {
                return true;
            }
            if !self.round() {
                return stop(self);
            }
        }
        false
    }

    /// Whether some transition so far satisfies `pred`.
    fn saw(&self, pred: impl Fn(&Transition) -> bool) -> bool {
        self.seen.iter().any(pred)
    }

    /// Whether some transition so far was caused by `event`.
    fn saw_event(&self, event: impl Into<LifecycleEvent>) -> bool {
        let event = event.into();
        self.saw(|t| t.event == event)
    }

    /// Whether `event` moved a source role from `from` to `to`.
    fn saw_source_move(&self, event: SE, from: SS, to: SS) -> bool {
        self.saw(|t| {
            t.event == LifecycleEvent::Source(event)
                && t.from == RoleState::Source(from)
                && t.to == RoleState::Source(to)
        })
    }

    fn cap(&self, w: WorkerId) -> handoff_core::KvCapacitySnapshot {
        self.w[w.0 as usize].capacity()
    }

    fn drained(&self) -> Value {
        json!({
            "prefill": { "drained": self.w[0].is_drained(), "kv_used_blocks": self.cap(P).kv_used_blocks() },
            "decode": { "drained": self.w[1].is_drained(), "kv_used_blocks": self.cap(D).kv_used_blocks() },
        })
    }

    fn restart(&mut self, w: WorkerId) {
        let now = self.now;
        let core = make_core(&self.spec[w.0 as usize]).expect("valid");
        self.w[w.0 as usize].restart(core, now);
        let gen = self.w[w.0 as usize].generation();
        let other = 1 - w.0 as usize;
        self.w[other].handle_peer_generation(w, gen, now);
    }

    fn lose_link(&mut self) {
        self.link_up = false;
        let now = self.now;
        self.w[0].handle_peer_lost(D, now);
        self.w[1].handle_peer_lost(P, now);
    }
}

/// Decode holds one 4K request; a second handoff arrives while it runs.
fn stranded(backend: Backend) -> Value {
    let mut lab = Lab::new(backend, 6 * 1024);
    lab.submit_ordinary(D, request(100, 4096, 400, &chunks(1000, 8)));
    lab.run_until(|l| l.cap(D).running_requests > 0);
    let r = request(1, 4096, 16, &chunks(1, 8));
    lab.watch(&r);
    lab.arrive(r);
    // Let the lifecycle move as far as it can while decode is full.
    lab.run_until(|l| {
        l.saw_event(DE::Unavailable)
            && (l.saw_event(SE::PrefillPinned) || backend == Backend::Sglang)
    });
    // Any move out of Reserving (the Unavailable self-transition included).
    let reserving = RoleState::Destination(DestinationState::Reserving);
    lab.run_until(|l| l.now >= Instant::from_millis(500) || l.saw(|t| t.from == reserving));
    let during = json!({
        "prefill_pinned_blocks": lab.cap(P).pinned_source_blocks,
        "prefill_compute_booked_tokens": lab.fe.prefill_router().load(P).map_or(0, |l| l.booked_prefill_tokens),
        "prefill_request_booked_blocks": lab.fe.prefill_router().load(P).map_or(0, |l| l.booked_blocks),
        "prefill_dispatched": lab.saw_source_move(SE::DestinationReserved, SS::NotStarted, SS::Computing) || lab.saw_source_move(SE::Start, SS::NotStarted, SS::Computing),
        "destination_reservation_unavailable": lab.saw_event(DE::Unavailable),
        "decode_reserved_blocks": lab.cap(D).reserved_destination_blocks,
    });
    lab.run_until(|l| l.activated.contains(&RequestId(1)));
    let at_activation = json!({
        "decode_stored_blocks_before_activation": lab.stored_before_activation,
        "source_still_pinned_at_activation_blocks": lab.cap(P).pinned_source_blocks,
    });
    lab.run_until(|l| l.w[0].is_drained() && l.w[1].is_drained());
    json!({
        "scenario": "stranded-source",
        "backend": backend.name(),
        "while_decode_full": during,
        "at_activation": at_activation,
        "stored_blocks_after_activation": lab.stored_at_or_after_activation,
        "end": lab.drained(),
        "transitions": lab.log,
    })
}

/// Zero, partial and full destination-prefix hits after decode learned a prefix.
fn gate(backend: Backend) -> Value {
    let mut lab = Lab::new(backend, 1 << 16);
    let mut hits = Vec::new();
    let prefix = chunks(500, 4);
    let cases = [
        ("zero", request(1, 2048, 4, &prefix)),
        (
            "partial",
            request(2, 3072, 4, &[prefix.clone(), chunks(600, 2)].concat()),
        ),
        ("full", request(3, 2048, 4, &prefix)),
    ];
    for (name, r) in cases {
        let id = r.id;
        lab.arrive(r);
        lab.run_until(|l| l.finished.contains(&id) && l.w[0].is_drained());
        if let Some((_, s)) = lab.summaries.last() {
            hits.push(json!({
                "hit": name,
                "matched_prefix_tokens": s.matched_prefix_tokens,
                "physical_blocks": s.physical_blocks,
                "transfer_tokens": s.transfer_tokens,
                "request_slot": s.request_slot,
                "decode_headroom_tokens": s.decode_headroom_tokens,
            }));
        }
    }
    json!({ "scenario": "destination-gate", "backend": backend.name(), "reservations": hits, "end": lab.drained() })
}

/// Router booking vs physical occupancy along one handoff.
fn router_parity(backend: Backend) -> Value {
    let mut lab = Lab::new(backend, 1 << 16);
    lab.hold_transfers = true;
    let r = request(1, 2048, 8, &chunks(700, 4));
    lab.arrive(r);
    let mut points = Vec::new();
    let sample = |l: &Lab, at: &str| {
        let dl = l.fe.decode_router().and_then(|d| d.load(D));
        let c = l.cap(D);
        json!({
            "point": at,
            "decode_router_booked_blocks": dl.map_or(0, |x| x.booked_blocks),
            "decode_reserved_blocks": c.reserved_destination_blocks,
            "decode_active_blocks": c.active_blocks,
            "decode_kv_used_blocks": c.kv_used_blocks(),
        })
    };
    lab.run_until(|l| l.saw_event(DE::Routed));
    let (booked, reserved) = lab.at_routing.unwrap_or_default();
    points.push(json!({
        "point": "routed",
        "decode_router_booked_blocks": booked,
        "decode_reserved_blocks": reserved,
    }));
    lab.run_until(|l| l.cap(D).reserved_destination_blocks > 0);
    points.push(sample(&lab, "reserved"));
    lab.hold_transfers = false;
    lab.run_until(|l| !l.activated.is_empty());
    points.push(sample(&lab, "activated"));
    lab.run_until(|l| l.w[0].is_drained() && l.w[1].is_drained());
    points.push(sample(&lab, "completed"));
    json!({ "scenario": "router-parity", "backend": backend.name(), "points": points, "end": lab.drained() })
}

/// Overlap a router sees on decode for a request's prefix, before and after activation.
fn no_false_overlap(backend: Backend) -> Value {
    let mut lab = Lab::new(backend, 1 << 16);
    lab.hold_transfers = true;
    let r = request(1, 2048, 8, &chunks(800, 4));
    lab.watch(&r);
    lab.arrive(r.clone());
    lab.run_until(|l| l.cap(D).reserved_destination_blocks > 0);
    let overlap = |l: &mut Lab| {
        l.fe.decode_router_mut()
            .map_or(0, |d| d.overlap_blocks(D, &r))
    };
    let during = overlap(&mut lab);
    lab.hold_transfers = false;
    lab.run_until(|l| !l.activated.is_empty());
    lab.drain();
    let after = overlap(&mut lab);
    lab.run_until(|l| l.w[0].is_drained() && l.w[1].is_drained());
    json!({
        "scenario": "no-false-overlap",
        "backend": backend.name(),
        "decode_overlap_blocks_while_reserved": during,
        "decode_stored_blocks_before_activation": lab.stored_before_activation,
        "decode_overlap_blocks_after_activation": after,
        "end": lab.drained(),
    })
}

/// Cancel, lose the link, or restart an owner at each lifecycle point.
fn failure_matrix(backend: Backend) -> Value {
    type Point = (&'static str, u64, bool, fn(&Lab) -> bool);
    let points: [Point; 6] = [
        ("before-decode-routing", 1 << 16, false, |l| {
            l.saw_event(SE::Start) && !l.saw(|t| t.role == Role::Destination)
        }),
        ("after-booking-before-reservation", 6 * 1024, false, |l| {
            l.saw_event(DE::Routed) && l.saw_event(DE::Unavailable)
        }),
        ("after-reservation", 1 << 16, true, |l| {
            l.saw_event(DE::Reserved)
        }),
        ("while-source-pinned", 1 << 16, true, |l| {
            l.saw_event(SE::PrefillPinned)
        }),
        ("after-receive-before-reader", 1 << 16, false, |l| {
            l.saw_event(DE::ReceiveCompleted) || l.saw_event(SE::ReaderCompleted)
        }),
        ("during-transfer", 1 << 16, true, |l| {
            !l.transfers.is_empty()
        }),
    ];
    let mut rows = Vec::new();
    for (point, decode_kv, hold, reached) in points {
        for fault in [
            "cancel",
            "lose-channel",
            "restart-prefill",
            "restart-decode",
        ] {
            let mut lab = Lab::new(backend, decode_kv);
            lab.hold_transfers = hold;
            lab.hold_routing = point == "before-decode-routing";
            if decode_kv < 1 << 16 {
                // No room for the handoff until this long request finishes.
                lab.submit_ordinary(D, request(100, 4096, 400, &chunks(2000, 8)));
                lab.run_until(|l| l.cap(D).running_requests > 0);
            }
            lab.arrive(request(1, 4096, 8, &chunks(3000, 8)));
            let got_there = lab.run_until(reached);
            match fault {
                "cancel" => {
                    let now = lab.now;
                    let hid = handoff_core::HandoffIdGen::new(router::FRONTEND_ID, Generation(0))
                        .next_id();
                    for w in &mut lab.w {
                        w.cancel(hid, CancelReason::Client, now);
                    }
                }
                "lose-channel" => lab.lose_link(),
                "restart-prefill" => lab.restart(P),
                _ => lab.restart(D),
            }
            lab.hold_transfers = false;
            lab.hold_routing = false;
            // A cancelled request is never routed; otherwise the frontend's
            // routing goes out late, after the fault.
            for req in std::mem::take(&mut lab.held_routes) {
                if fault != "cancel" {
                    lab.deliver(D, req);
                }
            }
            // Only the filler request may still run; every handoff ownership
            // must come back without help from the peer.
            lab.run_until(|l| {
                l.w[0].live_handoffs() == 0 && l.w[1].live_handoffs() == 0 && l.transfers.is_empty()
            });
            lab.run_until(|l| l.w[0].is_drained() && l.w[1].is_drained());
            rows.push(json!({
                "point": point,
                "fault": fault,
                "reached": got_there,
                "prefill_drained": lab.w[0].is_drained(),
                "decode_drained": lab.w[1].is_drained(),
                "prefill_kv_used_blocks": lab.cap(P).kv_used_blocks(),
                "decode_kv_used_blocks": lab.cap(D).kv_used_blocks(),
            }));
        }
    }
    json!({ "scenario": "failure-matrix", "backend": backend.name(), "cases": rows })
}

/// Runs scenario `name` for vLLM and SGLang; `None` for an unknown name.
pub fn run(name: &str) -> Option<Value> {
    let f: fn(Backend) -> Value = match name {
        "stranded-source" => stranded,
        "destination-gate" => gate,
        "router-parity" => router_parity,
        "no-false-overlap" => no_false_overlap,
        "failure-matrix" => failure_matrix,
        _ => return None,
    };
    Some(json!([f(Backend::Vllm), f(Backend::Sglang)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stranded_source_differs_by_backend() {
        let v = run("stranded-source").expect("known");
        let (vllm, sglang) = (&v[0], &v[1]);
        // vLLM: prefill finished and pinned while decode was full; its compute
        // booking dropped, its request booking stayed.
        assert!(
            vllm["while_decode_full"]["prefill_pinned_blocks"].as_u64() > Some(0),
            "{vllm}"
        );
        assert_eq!(
            vllm["while_decode_full"]["prefill_compute_booked_tokens"], 0,
            "{vllm}"
        );
        assert!(
            vllm["while_decode_full"]["prefill_request_booked_blocks"].as_u64() > Some(0),
            "{vllm}"
        );
        assert_eq!(
            vllm["while_decode_full"]["destination_reservation_unavailable"],
            true
        );
        // SGLang: nothing dispatched, nothing pinned while decode was full.
        assert_eq!(
            sglang["while_decode_full"]["prefill_dispatched"], false,
            "{sglang}"
        );
        assert_eq!(sglang["while_decode_full"]["prefill_pinned_blocks"], 0);
        for b in [vllm, sglang] {
            assert_eq!(
                b["at_activation"]["decode_stored_blocks_before_activation"], 0,
                "{b}"
            );
            assert!(
                b["stored_blocks_after_activation"].as_u64() > Some(0),
                "{b}"
            );
            assert_eq!(b["end"]["prefill"]["drained"], true, "{b}");
            assert_eq!(b["end"]["decode"]["drained"], true, "{b}");
        }
    }

    #[test]
    fn destination_gate_hits() {
        let v = run("destination-gate").expect("known");
        let s = &v[1]["reservations"];
        assert_eq!(s[0]["matched_prefix_tokens"], 0, "{s}");
        assert!(s[1]["matched_prefix_tokens"].as_u64() > Some(0), "{s}");
        assert_eq!(
            s[2]["physical_blocks"], 0,
            "full hit reserves no delta pages: {s}"
        );
        assert_eq!(s[2]["request_slot"], true, "{s}");
        assert!(s[2]["decode_headroom_tokens"].as_u64() > Some(0), "{s}");
    }

    #[test]
    fn router_booking_precedes_and_outlives_reservation() {
        for b in run("router-parity")
            .expect("known")
            .as_array()
            .expect("array")
        {
            let p = &b["points"];
            assert!(
                p[0]["decode_router_booked_blocks"].as_u64() > Some(0),
                "{b}"
            );
            assert_eq!(p[0]["decode_reserved_blocks"], 0, "{b}");
            assert!(p[1]["decode_reserved_blocks"].as_u64() > Some(0), "{b}");
            assert_eq!(p[2]["decode_reserved_blocks"], 0, "{b}");
            assert!(p[2]["decode_active_blocks"].as_u64() > Some(0), "{b}");
            assert_eq!(p[3]["decode_router_booked_blocks"], 0, "{b}");
            assert_eq!(p[3]["decode_kv_used_blocks"], 0, "{b}");
        }
    }

    #[test]
    fn reservation_is_not_overlap() {
        for b in run("no-false-overlap")
            .expect("known")
            .as_array()
            .expect("array")
        {
            assert_eq!(b["decode_overlap_blocks_while_reserved"], 0, "{b}");
            assert!(
                b["decode_overlap_blocks_after_activation"].as_u64() > Some(0),
                "{b}"
            );
        }
    }

    #[test]
    fn failure_matrix_returns_everything() {
        for b in run("failure-matrix")
            .expect("known")
            .as_array()
            .expect("array")
        {
            for c in b["cases"].as_array().expect("cases") {
                assert_eq!(c["reached"], true, "{c}");
                assert_eq!(c["prefill_drained"], true, "{b}: {c}");
                assert_eq!(c["decode_drained"], true, "{b}: {c}");
            }
        }
    }
}
