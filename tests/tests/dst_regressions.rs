//! Schedules that once broke a DST rule, shrunk (`cargo xtask dst` printed
//! them; the handcrafted ones pin a timing the generator hit rarely). Each
//! names the bug it caught; each failed before its fix and must pass now.

use handoff_tests::dst::{self, assert_passes, Schedule};

/// Every prefill worker is down when the request arrives: it reached no
/// worker, so nothing would ever report it. It was left in flight (failed
/// only as `unfinished` at the end of the run); it fails at arrival now.
#[test]
fn a_request_no_pool_can_take_fails_at_arrival() {
    let deployment = "seed=8 backend=vllm policy=destination-first prefill=1 decode=3 router=random router_block=16 page=16 prefill_kv=65536 decode_kv=2048 max_running=2 max_batched=1024 lease_ns=533000000 reservation_ns=525000000 renew_ns=0 early_ns=100000000 tombstones=4 transfer=fixed:3000000 latency_ns=1134000 multi_step=false";
    let plan = "
seed 8
kill 0 at 15481291108ns
drop 0
duplicate 0
delay 0 max 14079us
transfer-fail 0";
    let trace = r#"
{"timestamp": 18075, "input_length": 446, "output_length": 55, "hash_ids": [1000]}"#;
    assert_passes(deployment, plan, trace);
}

/// Destination-first, the only decode worker is down when the request
/// arrives: the frontend had booked a prefill worker, found no decode
/// worker and routed nothing, leaking the prefill booking (and the request
/// stayed in flight). Now the booking is released and the request fails.
#[test]
fn destination_first_with_no_decode_worker_releases_its_prefill_booking() {
    let deployment = "seed=1 backend=sglang policy=destination-first prefill=1 decode=1 router=round-robin router_block=64 page=16 prefill_kv=65536 decode_kv=16384 max_running=16 max_batched=4096 lease_ns=10000000000 reservation_ns=10000000000 renew_ns=0 early_ns=30000000000 tombstones=65536 transfer=fixed:5000000 latency_ns=2000000 multi_step=true";
    let plan = "
seed 1
kill 1 at 10ms";
    let trace = r#"
{"timestamp": 20, "input_length": 500, "output_length": 20, "hash_ids": [1]}"#;
    assert_passes(deployment, plan, trace);
}

/// A decode worker dies: the frontend's lost-request cleanup released every
/// booking of its requests, including the prefill booking on a live worker
/// whose source still held the KV (the source's own end then released
/// nothing). Now it releases only bookings on the lost worker.
#[test]
fn a_lost_decode_worker_does_not_release_bookings_on_live_workers() {
    let deployment = "seed=2 backend=sglang policy=destination-first prefill=2 decode=2 router=power-of-two router_block=64 page=1 prefill_kv=16384 decode_kv=4096 max_running=2 max_batched=256 lease_ns=135000000 reservation_ns=127000000 renew_ns=0 early_ns=5000000 tombstones=65536 transfer=contention:2000000:131072:5000000000.0 latency_ns=617000 multi_step=true";
    let plan = "
seed 2
kill 3 at 9280168ns
drop 0
duplicate 0
delay 0 max 5976us
transfer-fail 0";
    let trace = r#"
{"timestamp": 0, "input_length": 421, "output_length": 7, "hash_ids": [1000000]}
{"timestamp": 8, "input_length": 556, "output_length": 3, "hash_ids": [1000300, 1000301]}"#;
    assert_passes(deployment, plan, trace);
}

/// A client cancel reaches an active destination: the role ended (the
/// request failed, its decode booking came off) but the core kept decoding
/// it to the end, so it also finished and its booking was released again.
/// Now the cancel aborts the decode in the core.
#[test]
fn a_client_cancel_aborts_the_decode_of_an_active_destination() {
    let deployment = "seed=5 backend=vllm policy=source-first prefill=3 decode=1 router=least-loaded router_block=16 page=16 prefill_kv=65536 decode_kv=4096 max_running=4 max_batched=256 lease_ns=140000000 reservation_ns=124000000 renew_ns=0 early_ns=30000000000 tombstones=65536 transfer=bytes:2000000:131072:5000000000.0 latency_ns=718000 multi_step=false";
    let plan = "
seed 5
cancel 1 at 8055410454ns
drop 0
duplicate 0
delay 0 max 8956us
transfer-fail 0";
    let trace = r#"
{"timestamp": 5165, "input_length": 214, "output_length": 135, "hash_ids": [0]}
{"timestamp": 5888, "input_length": 453, "output_length": 130, "hash_ids": [0]}
{"timestamp": 5961, "input_length": 85, "output_length": 31, "hash_ids": [1000]}
{"timestamp": 6143, "input_length": 210, "output_length": 35, "hash_ids": [0]}
{"timestamp": 6519, "input_length": 505, "output_length": 39, "hash_ids": [1003100]}
{"timestamp": 7351, "input_length": 76, "output_length": 54, "hash_ids": [1000]}"#;
    assert_passes(deployment, plan, trace);
}

/// A source's lease runs out after its destination was routed (here the
/// reader's completion was cut by a partition): the report failed the
/// request at once, yet the destination had activated and decoded it to
/// the end. Now a source ending early fails its request only when no
/// destination was routed; otherwise the destination decides.
#[test]
fn a_source_ending_early_after_its_destination_was_routed_leaves_the_fate_to_it() {
    let deployment = "seed=13 backend=vllm policy=source-first prefill=3 decode=2 router=least-loaded router_block=16 page=16 prefill_kv=65536 decode_kv=1024 max_running=64 max_batched=4096 lease_ns=2035000000 reservation_ns=10009000000 renew_ns=147000000 early_ns=5000000 tombstones=4 transfer=contention:1000000:131072:5000000000.0 latency_ns=672000 multi_step=true";
    let plan = "
seed 13
partition 3 1 from 22352141ns to 33660320ns
drop 0
duplicate 0
delay 0 max 6157us
transfer-fail 0";
    let trace = r#"
{"timestamp": 0, "input_length": 983, "output_length": 11, "hash_ids": [0, 1000001]}
{"timestamp": 0, "input_length": 253, "output_length": 197, "hash_ids": [0]}"#;
    assert_passes(deployment, plan, trace);
}

/// The decode worker restarts while the destination request is on its way
/// (between the prefill's pin and the frontend hop's end): the request
/// failed with the lost worker, but the engine delivered it to the new
/// incarnation, which decoded it to the end. Now a request sent to an
/// incarnation that died is undeliverable, as a fact in flight is.
#[test]
fn a_request_on_its_way_to_a_worker_that_restarts_is_lost_with_it() {
    let deployment = "seed=1 backend=vllm policy=source-first prefill=1 decode=1 router=round-robin router_block=16 page=16 prefill_kv=65536 decode_kv=16384 max_running=16 max_batched=4096 lease_ns=10000000000 reservation_ns=10000000000 renew_ns=0 early_ns=30000000000 tombstones=65536 transfer=fixed:5000000 latency_ns=2000000 multi_step=true";
    let plan = "
seed 1
restart 1 at 25ms";
    let trace = r#"
{"timestamp": 0, "input_length": 500, "output_length": 20, "hash_ids": [1]}"#;
    assert_passes(deployment, plan, trace);
}

/// The prefill worker dies after its request's destination activated: the
/// destination took its peer's loss (or abort, or restart) as a reason to
/// end, failing a request whose KV had already arrived. Now an active
/// destination ignores its peer's fate and decodes the request to the end.
#[test]
fn an_active_destination_outlives_its_source() {
    for (backend, policy, block) in [
        ("vllm", "source-first", 16),
        ("sglang", "destination-first", 64),
    ] {
        let deployment = "seed=1 backend=vllm policy=source-first prefill=1 decode=1 router=round-robin router_block=16 page=16 prefill_kv=65536 decode_kv=16384 max_running=16 max_batched=4096 lease_ns=10000000000 reservation_ns=10000000000 renew_ns=0 early_ns=30000000000 tombstones=65536 transfer=fixed:5000000 latency_ns=2000000 multi_step=true"
            .replace("backend=vllm", &format!("backend={backend}"))
            .replace("policy=source-first", &format!("policy={policy}"))
            .replace("router_block=16", &format!("router_block={block}"));
        let s = Schedule::from_text(
            &deployment,
            "seed 1; kill 0 at 40ms",
            r#"{"timestamp": 0, "input_length": 500, "output_length": 200, "hash_ids": [1]}"#,
        )
        .expect("parses");
        let o = dst::check(&s);
        assert!(o.violations.is_empty(), "{backend}: {:?}", o.violations);
        assert_eq!(o.faults.kills, 1, "{backend}");
        assert_eq!(
            (o.paths.finished, o.paths.failed),
            (1, 0),
            "{backend}: {:?}",
            o.paths
        );
    }
}

/// A client cancel in the fault plan reached no worker: the serving
/// director did not implement `Director::cancel`, so `--faults "cancel R at
/// T"` was silently ignored. Now it cancels every routed role of the
/// request.
#[test]
fn a_client_cancel_in_the_plan_reaches_the_workers() {
    let s = Schedule::from_text("seed=1 backend=vllm policy=source-first prefill=1 decode=1 router=round-robin router_block=16 page=16 prefill_kv=65536 decode_kv=16384 max_running=16 max_batched=4096 lease_ns=10000000000 reservation_ns=10000000000 renew_ns=0 early_ns=30000000000 tombstones=65536 transfer=fixed:5000000 latency_ns=2000000 multi_step=true", "seed 1; cancel 0 at 100ms", r#"{"timestamp": 0, "input_length": 500, "output_length": 200, "hash_ids": [1]}"#)
        .expect("parses");
    let o = dst::check(&s);
    assert!(o.violations.is_empty(), "{:?}", o.violations);
    assert_eq!(o.faults.cancels, 1);
    assert_eq!(o.paths.client_cancels, 1, "{:?}", o.paths);
    assert_eq!((o.paths.finished, o.paths.failed), (0, 1), "{:?}", o.paths);
}

/// A client cancel ended a pinned source before its reader started: the
/// read must fail, not complete as a stale read (only a lease expiry is
/// silent, as vLLM's reader cannot tell it).
#[test]
fn dst_schedule_9533() {
    let deployment = "seed=9533 backend=sglang policy=source-first prefill=1 decode=1 router=kv router_block=64 page=16 prefill_kv=16384 decode_kv=65536 max_running=64 max_batched=1024 lease_ns=521000000 reservation_ns=2001000000 renew_ns=174000000 early_ns=5000000 tombstones=65536 transfer=fixed:30000000 latency_ns=1132000 multi_step=false decode_radix=true kv_load_failure=fail stale_read=complete heartbeat=none";
    let plan = "
seed 9533
cancel 1 at 64999010ns
drop 0
duplicate 0
delay 0 max 8223us
transfer-fail 0";
    let trace = r#"
{"timestamp": 0, "input_length": 1340, "output_length": 49, "hash_ids": [2000, 1000001, 1000002]}
{"timestamp": 0, "input_length": 442, "output_length": 15, "hash_ids": [1000200]}
{"timestamp": 0, "input_length": 669, "output_length": 241, "hash_ids": [0, 1]}"#;
    handoff_tests::dst::assert_passes(deployment, plan, trace);
}

/// A cancel of a request recomputing on its decode worker after a failed
/// load (its attempt gone) must not fail it there: the decode it runs
/// keeps its booking until the worker is lost.
#[test]
fn dst_schedule_7002() {
    let deployment = "seed=7002 backend=vllm policy=source-first prefill=1 decode=2 router=least-loaded router_block=16 page=16 prefill_kv=8192 decode_kv=1024 max_running=4 max_batched=4096 lease_ns=2013000000 reservation_ns=61000000 renew_ns=0 early_ns=5000000 tombstones=65536 transfer=bytes:3000000:131072:5000000000.0 latency_ns=1030000 multi_step=true decode_radix=false kv_load_failure=recompute stale_read=complete heartbeat=335500000:1342000000 cancel_frees=upstream";
    let plan = "
seed 7002
partition 0 2 from 25219468ns to 97762524ns
cancel 1 at 156204527ns
kill 2 at 275760592ns
drop 0
duplicate 0
delay 0 max 9803us
transfer-fail 0.023392058685109695";
    let trace = r#"
{"timestamp": 0, "input_length": 16, "output_length": 258, "hash_ids": [0]}
{"timestamp": 0, "input_length": 231, "output_length": 208, "hash_ids": [0]}"#;
    handoff_tests::dst::assert_passes(deployment, plan, trace);
}

/// A prefill that pinned while its decode worker was down, cancelled
/// before that worker came back: no decode is routed to it then (its
/// booking would outlive the request).
#[test]
fn dst_schedule_9440() {
    let deployment = "seed=9440 backend=vllm policy=source-first prefill=2 decode=1 router=round-robin router_block=16 page=16 prefill_kv=8192 decode_kv=16384 max_running=2 max_batched=1024 lease_ns=10018000000 reservation_ns=10007000000 renew_ns=0 early_ns=100000000 tombstones=65536 transfer=fixed:29000000 latency_ns=1729000 multi_step=true decode_radix=false kv_load_failure=recompute stale_read=fail heartbeat=1669666666:6678666666 cancel_frees=upstream";
    let plan = "
seed 9440
kill 2 at 25537792ns
cancel 0 at 26499581ns
restart 2 at 49786564ns
restart 2 at 51155712ns
drop 0
duplicate 0
delay 0 max 5441us
transfer-fail 0";
    let trace = r#"
{"timestamp": 3, "input_length": 164, "output_length": 6, "hash_ids": [1000]}"#;
    handoff_tests::dst::assert_passes(deployment, plan, trace);
}
