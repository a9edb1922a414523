//! Scenario 5: Cancel, lose the channel or restart an owner at every phase.

use super::checks::Checks;
use super::harness::{chunks, request, Flavour, Lab, LabEngine, View, D, P};
use handoff_core::{DestinationEventKind as DE, Instant, RequestId, Role, SourceEventKind as SE};
use handoff_engine::{Fault, FaultPlan};
use serde_json::{json, Value};

/// The faults of the failure matrix, by name.
const FAULTS: [&str; 4] = [
    "cancel",
    "lose-channel",
    "restart-prefill",
    "restart-decode",
];

/// The fault plan for `fault` at `at`: a client cancel of the handoff's
/// request, the prefill–decode link cut for good, or a restart of an owner.
fn fault_plan(fault: &str, at: Instant) -> FaultPlan {
    let fault = match fault {
        "cancel" => Fault::Cancel {
            request: RequestId(1),
        },
        "lose-channel" => Fault::Partition {
            a: P,
            b: D,
            until: Instant::MAX,
        },
        "restart-prefill" => Fault::Restart { worker: P },
        _ => Fault::Restart { worker: D },
    };
    let mut plan = FaultPlan::none();
    plan.push(at, fault);
    plan
}

/// Cancel, lose the link, or restart an owner at each lifecycle point: run
/// to the point, inject the fault plan there, run out, read the books.
pub(super) fn failure_matrix(f: Flavour) -> Value {
    // A point holds while the handoff is in that phase, not merely after
    // it passed through it; the fault lands in the phase.
    type Point = (&'static str, u64, fn(&LabEngine) -> bool);
    let points: [Point; 6] = [
        ("before-decode-routing", 1 << 16, |e| {
            e.d().saw_event(SE::Start) && !e.d().saw(|t| t.role == Role::Destination)
        }),
        ("after-booking-before-reservation", 6 * 1024, |e| {
            e.d().saw_event(DE::Routed)
                && e.d().saw_event(DE::Unavailable)
                && e.cap(D).reserved_destination_blocks == 0
        }),
        ("after-reservation", 1 << 16, |e| {
            e.d().saw_event(DE::Reserved) && e.cap(D).reserved_destination_blocks > 0
        }),
        ("while-source-pinned", 1 << 16, |e| {
            e.d().saw_event(SE::PrefillPinned) && e.cap(P).pinned_source_blocks > 0
        }),
        ("after-receive-before-reader", 1 << 16, |e| {
            // One end has finished with the transfer; the other has not
            // heard yet.
            e.d().saw_event(DE::ReceiveCompleted) != e.d().saw_event(SE::ReaderCompleted)
        }),
        ("during-transfer", 1 << 16, |e| !e.d().transfers.is_empty()),
    ];
    let load = |r: &handoff_router::Router, w| r.load(w).map_or(0, |l| l.booked_blocks);
    let mut rows = Vec::new();
    for (point, decode_kv, reached) in points {
        for fault in FAULTS {
            let mut lab = Lab::new(f, decode_kv);
            if decode_kv < 1 << 16 {
                // No room for the handoff until this long request finishes.
                lab.submit_ordinary(D, request(100, 4096, 400, &chunks(2000, 8)));
                lab.run_until(|e| e.cap(D).running_requests > 0);
            }
            lab.arrive(request(1, 4096, 8, &chunks(3000, 8)));
            let got_there = lab.run_until(reached);
            let plan = fault_plan(fault, lab.engine.now());
            lab.inject(&plan);
            // Every handoff ownership must come back with no help from the
            // peer beyond what the fault tells it (a new generation, a lost
            // link): timers and local cleanup only. The filler finishes.
            lab.run_out();
            // The plan's text: its seed, then the timed fault.
            let plan_text = plan.to_string();
            rows.push(json!({
                "point": point,
                "fault": fault,
                "plan": plan_text.lines().nth(1).unwrap_or_default(),
                "reached": got_there,
                "prefill_drained": lab.host(P).is_drained(),
                "decode_drained": lab.host(D).is_drained(),
                "prefill_kv_used_blocks": lab.cap(P).kv_used_blocks(),
                "decode_kv_used_blocks": lab.cap(D).kv_used_blocks(),
                "prefill_live_handoffs": lab.host(P).worker().live_handoffs(),
                "decode_live_handoffs": lab.host(D).worker().live_handoffs(),
                "prefill_router_booked_blocks": load(lab.d().frontend.prefill_router(), P),
                "decode_router_booked_blocks": lab.d().frontend.decode_router().map_or(0, |r| load(r, D)),
            }));
        }
    }
    json!({ "scenario": "failure-matrix", "backend": f.name(), "cases": rows })
}

/// The checks of scenario 5 on one backend's observations `o`.
pub(super) fn judge(o: &Value) -> Checks {
    let mut c = Checks::default();
    let cases = o["cases"].as_array().cloned().unwrap_or_default();
    c.eq("cases (6 points x 4 faults)", 24, cases.len());
    for k in &cases {
        let name = format!(
            "{} / {}",
            k["point"].as_str().unwrap_or("?"),
            k["fault"].as_str().unwrap_or("?")
        );
        let clean = k["reached"] == true
            && k["prefill_drained"] == true
            && k["decode_drained"] == true
            && [
                "prefill_kv_used_blocks",
                "decode_kv_used_blocks",
                "prefill_live_handoffs",
                "decode_live_handoffs",
                "prefill_router_booked_blocks",
                "decode_router_booked_blocks",
            ]
            .iter()
            .all(|f| k[*f] == 0);
        c.holds(
            format!("{name}: phase reached, everything returned exactly once"),
            "reached; both drained; 0 KV, live handoffs and router bookings",
            k.clone(),
            clean,
        );
    }
    c
}
