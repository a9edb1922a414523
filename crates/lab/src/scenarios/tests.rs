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
    // SGLang's decode runs its default chunk cache: no decode events.
    assert_eq!(sglang["stored_blocks_after_activation"], 0, "{sglang}");
    assert!(
        vllm["stored_blocks_after_activation"].as_u64() > Some(0),
        "{vllm}"
    );
    for b in [vllm, sglang] {
        assert_eq!(
            b["at_activation"]["decode_stored_blocks_before_activation"], 0,
            "{b}"
        );
        assert_eq!(b["end"]["prefill"]["drained"], true, "{b}");
        assert_eq!(b["end"]["decode"]["drained"], true, "{b}");
    }
}

/// vLLM's push mode (`nixl/push_scheduler.py`, `NixlPushConnectorScheduler`):
/// the prefill runs without waiting for the decode and its finished blocks
/// stay pinned while the decode, full, cannot allocate the blocks it would
/// register; once the write lands the prefill engine has already freed
/// them (`push_worker.py`, `get_transfer_results`), unlike pull, where the
/// source outlives the destination's activation.
#[test]
fn push_strands_the_source_until_the_registration_and_frees_it_at_the_write() {
    let v = run("stranded-source").expect("known");
    let (pull, push) = (&v[0], &v[2]);
    assert_eq!(push["backend"], "vllm-push");
    let w = &push["while_decode_full"];
    assert!(w["prefill_pinned_blocks"].as_u64() > Some(0), "{push}");
    assert_eq!(w["destination_reservation_unavailable"], true, "{push}");
    assert_eq!(w["decode_reserved_blocks"], 0, "{push}");
    assert_eq!(
        push["at_activation"]["source_still_pinned_at_activation_blocks"], 0,
        "{push}"
    );
    assert!(
        pull["at_activation"]["source_still_pinned_at_activation_blocks"].as_u64() > Some(0),
        "{pull}"
    );
    assert_eq!(push["end"]["prefill"]["drained"], true, "{push}");
    assert_eq!(push["end"]["decode"]["drained"], true, "{push}");
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
            for k in [
                "prefill_kv_used_blocks",
                "decode_kv_used_blocks",
                "prefill_live_handoffs",
                "decode_live_handoffs",
            ] {
                assert_eq!(c[k], 0, "{k}: {b}: {c}");
            }
        }
    }
}
