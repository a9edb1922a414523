//! Scenario 1: vLLM stranded source (and SGLang's gate in the same
//! situation). vLLM's push mode strands the same way: the decode's
//! registration waits for room while the prefill's finished blocks wait for
//! the registration.

use super::checks::{end, Checks};
use super::harness::{chunks, request, Flavour, Lab, View, D, P};
use handoff_core::{
    Backend, DestinationEventKind as DE, DestinationState, Instant, RequestId, RoleState,
    SourceEventKind as SE, SourceState as SS,
};
use serde_json::{json, Value};

/// Decode holds one 4K request; a second handoff arrives while it runs.
pub(super) fn stranded(f: Flavour) -> Value {
    let mut lab = Lab::new(f, 6 * 1024);
    lab.submit_ordinary(D, request(100, 4096, 400, &chunks(1000, 8)));
    lab.run_until(|e| e.cap(D).running_requests > 0);
    let r = request(1, 4096, 16, &chunks(1, 8));
    lab.watch(&r);
    lab.arrive(r);
    // Let the lifecycle move as far as it can while decode is full.
    lab.run_until(|e| {
        e.d().saw_event(DE::Unavailable)
            && (e.d().saw_event(SE::PrefillPinned) || f.backend == Backend::Sglang)
    });
    // Any move out of Reserving (the Unavailable self-transition included).
    let reserving = RoleState::Destination(DestinationState::Reserving);
    lab.run_until(|e| e.now() >= Instant::from_millis(500) || e.d().saw(|t| t.from == reserving));
    let prefill = lab.d().frontend.prefill_router().load(P);
    let during = json!({
        "prefill_pinned_blocks": lab.cap(P).pinned_source_blocks,
        "prefill_compute_booked_tokens": prefill.map_or(0, |l| l.booked_prefill_tokens),
        "prefill_request_booked_blocks": prefill.map_or(0, |l| l.booked_blocks),
        "prefill_dispatched": lab.d().saw_source_move(SE::DestinationReserved, SS::NotStarted, SS::Computing) || lab.d().saw_source_move(SE::Start, SS::NotStarted, SS::Computing),
        "destination_reservation_unavailable": lab.d().saw_event(DE::Unavailable),
        "decode_reserved_blocks": lab.cap(D).reserved_destination_blocks,
    });
    lab.run_until(|e| e.d().activated.contains(&RequestId(1)));
    let at_activation = json!({
        "decode_stored_blocks_before_activation": lab.d().stored_before_activation,
        "source_still_pinned_at_activation_blocks": lab.cap(P).pinned_source_blocks,
    });
    lab.run_out();
    json!({
        "scenario": "stranded-source",
        "backend": f.name(),
        "while_decode_full": during,
        "at_activation": at_activation,
        "stored_blocks_after_activation": lab.d().stored_at_or_after_activation,
        "end": lab.end(),
        "transitions": lab.d().log,
    })
}

/// The checks of scenario 1 on one backend's observations `o`.
pub(super) fn judge(o: &Value) -> Checks {
    let mut c = Checks::default();
    let b = o["backend"].as_str().unwrap_or_default();
    let w = &o["while_decode_full"];
    c.eq(
        "decode refuses the reservation while full",
        true,
        w["destination_reservation_unavailable"].clone(),
    );
    if b == "sglang" {
        c.eq(
            "prefill is not dispatched before a destination reservation",
            false,
            w["prefill_dispatched"].clone(),
        );
        c.eq(
            "prefill pinned blocks while decode is full",
            0,
            w["prefill_pinned_blocks"].clone(),
        );
    } else {
        c.positive(
            "prefill KV pinned (stranded) while decode is full, blocks",
            &w["prefill_pinned_blocks"],
        );
        c.eq(
            "prefill compute booking released at the pin, tokens",
            0,
            w["prefill_compute_booked_tokens"].clone(),
        );
        c.positive(
            "prefill request ownership still booked, blocks",
            &w["prefill_request_booked_blocks"],
        );
        if b == "vllm-push" {
            // Push: the prefill engine frees its blocks when its write
            // completes, before the completion notice activates the decode
            // (`nixl/push_worker.py`, `get_transfer_results`).
            c.eq(
                "source freed by its write's completion before the destination activates, blocks",
                0,
                o["at_activation"]["source_still_pinned_at_activation_blocks"].clone(),
            );
        } else {
            c.positive(
                "source still pinned when the destination activates, blocks",
                &o["at_activation"]["source_still_pinned_at_activation_blocks"],
            );
        }
    }
    c.eq(
        "decode publishes no handoff blocks before activation",
        0,
        o["at_activation"]["decode_stored_blocks_before_activation"].clone(),
    );
    if b == "sglang" {
        // SGLang's default decode chunk cache publishes nothing.
        c.eq(
            "decode publishes nothing (SGLang chunk cache)",
            0,
            o["stored_blocks_after_activation"].clone(),
        );
    } else {
        c.positive(
            "decode publishes the handoff blocks from activation on",
            &o["stored_blocks_after_activation"],
        );
    }
    end(&mut c, &o["end"]);
    c
}
