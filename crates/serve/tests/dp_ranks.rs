//! Serve with attention data-parallel ranks (`--dp-size 2`): an SGLang
//! PD deployment of one prefill and one decode worker, each worker's two
//! ranks behind the worker's one listener. A pair of legs lands on rank
//! `bootstrap_room % 2` of the prefill worker (SGLang's
//! `follow_bootstrap_room_scheduler`) and decode legs round-robin over the
//! decode worker's ranks (`auto` on a decode engine); the info endpoints, `/metrics`,
//! `/debug/workers`, the ZMQ batches (`data_parallel_rank`) and Dynamo's
//! `RouterEvent` lines (`dp_rank`) all speak per rank; the report has a
//! row per rank and every rank ends drained. A vLLM deployment's
//! `kv_transfer_params` name the prefill's rank as vLLM's per-rank engine
//! id (`0_dp0`), which the decode call must give back, and an
//! `X-data-parallel-rank` header pins a vLLM request to that rank of the
//! worker it is sent to (a rank out of range, or not a number, is a 400).

mod common;

use common::{Server, Shared};
use handoff_core::{Backend, DpLayout, HandoffConfig};
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_kv_events::RouterEventWriter;
use handoff_serve::ServeConfig;
use serde_json::{json, Value};
use std::net::SocketAddr;

struct Running {
    http: SocketAddr,
    workers: Vec<SocketAddr>,
    replay: Vec<String>,
    jsonl: Shared,
    server: Server,
}

/// One prefill and one decode worker of `backend`, two ranks each.
fn start(backend: Backend) -> Running {
    let spec = EngineSpec {
        backend,
        block_size: 16,
        max_running: EngineSpec::default_max_running(backend, 16_384 * 16),
        ..EngineSpec::default()
    };
    let cfg = DeploymentConfig {
        backend,
        policy: backend.native_policy(),
        prefill_workers: 1,
        decode_workers: 1,
        dp: DpLayout::new(2).expect("in range"),
        block_size: spec.event_block_tokens(),
        handoff: HandoffConfig::for_backend(backend),
        ..DeploymentConfig::default()
    };
    // One publisher and one replay socket per rank.
    let jsonl = Shared::default();
    let (l, server, ep) = common::start_with_kv(4, |ep| ServeConfig {
        kv: Some(ep),
        kv_jsonl: Some(RouterEventWriter::new(Box::new(jsonl.clone()))),
        worker_http: common::worker_listeners(2),
        ..common::loopback(cfg.clone(), vec![spec.clone(); 4])
    });
    Running {
        http: l.http,
        workers: common::worker_addrs(&l),
        replay: ep.replay,
        jsonl,
        server,
    }
}

fn body(room: u64, i: u64) -> String {
    // Long enough for whole pages, which the prefill ranks cache and publish.
    let words: Vec<String> = (0..160).map(|k| format!("w{i}x{k}")).collect();
    json!({
        "model": "m", "max_tokens": 4, "ignore_eos": true,
        "prompt": words.join(" "),
        "bootstrap_host": "127.0.0.1", "bootstrap_port": 8998, "bootstrap_room": room,
    })
    .to_string()
}

/// Both legs of room `room`, at once.
fn pair(s: &Running, room: u64, i: u64) {
    let (p, d) = (s.workers[0], s.workers[1]);
    let b = body(room, i);
    let b2 = b.clone();
    let t = std::thread::spawn(move || common::call(p, "POST", "/v1/completions", &b2));
    let (ds, db) = common::call(d, "POST", "/v1/completions", &b);
    let (ps, pb) = t.join().expect("prefill leg");
    assert_eq!((ps, ds), (200, 200), "{pb} / {db}");
}

fn get(to: SocketAddr, path: &str) -> Value {
    let (status, body) = common::call(to, "GET", path, "");
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).expect("json")
}

/// The `data_parallel_rank` of every batch scheduler `replay` published.
async fn batch_ranks(replay: &str) -> Vec<u64> {
    common::replay_batches(replay)
        .await
        .iter()
        .map(|batch| batch.as_array().expect("batch")[2].as_u64().expect("rank"))
        .collect()
}

#[test]
fn legs_land_on_room_mod_dp_size_and_everything_is_per_rank() {
    let s = start(Backend::Sglang);
    // Rooms 4, 6, 8 → rank 0; 7 → rank 1.
    for (i, room) in [4u64, 7, 6, 8].into_iter().enumerate() {
        pair(&s, room, i as u64);
    }
    let v = common::wait_drained(s.http);
    let taken: Vec<(u64, u64, u64)> = v["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| {
            (
                w["worker"].as_u64().unwrap(),
                w["dp_rank"].as_u64().unwrap(),
                w["listener_requests"].as_u64().unwrap(),
            )
        })
        .collect();
    // Prefill legs by room; decode legs round robin, as SGLang's `auto`
    // resolves on a decode engine (`ServerArgs._handle_load_balance_method`).
    assert_eq!(taken, [(0, 0, 3), (0, 1, 1), (1, 0, 2), (1, 1, 2)]);

    // The worker listeners answer per rank.
    for (w, mode) in [(0, "prefill"), (1, "decode")] {
        let info = get(s.workers[w], "/server_info");
        assert_eq!(info["dp_size"], 2);
        assert_eq!(info["disaggregation_mode"], mode);
        // As SGLang's `auto` resolves per engine: the prefill follows the
        // room, the decode round-robins.
        let method = if w == 0 {
            "follow_bootstrap_room"
        } else {
            "round_robin"
        };
        assert_eq!(info["load_balance_method"], method);
        let states = info["internal_states"].as_array().expect("states");
        assert_eq!(states.len(), 2);
        assert_eq!(
            (states[0]["dp_rank"].as_u64(), states[1]["dp_rank"].as_u64()),
            (Some(0), Some(1))
        );
        let load = get(s.workers[w], "/get_load");
        assert_eq!(load.as_array().map(Vec::len), Some(2));
        let loads = get(s.workers[w], "/v1/loads");
        assert_eq!(loads["dp_rank_count"], 2);
        assert_eq!(loads["loads"][1]["dp_rank"], 1);
        let (status, text) = common::call(s.workers[w], "GET", "/metrics", "");
        assert_eq!(status, 200);
        for rank in 0..2 {
            assert!(
                text.contains(&format!("engine=\"{rank}\",dp_rank=\"{rank}\"")),
                "worker {w} /metrics labels rank {rank} as its engine: {text}"
            );
        }
    }
    // The front speaks for the deployment as one rank; its /metrics
    // labels each scheduler by worker and rank.
    assert_eq!(get(s.http, "/server_info")["dp_size"], 1);
    let (_, text) = common::call(s.http, "GET", "/metrics", "");
    assert!(
        text.contains("engine=\"1\",dp_rank=\"1\",role=\"decode\""),
        "{text}"
    );

    // Each rank publishes its own ZMQ stream, stamped with its rank; the
    // prefill ranks both stored blocks.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    for (sched, replay) in s.replay.iter().enumerate() {
        let ranks = rt.block_on(batch_ranks(replay));
        assert!(
            ranks.iter().all(|r| *r == (sched % 2) as u64),
            "scheduler {sched}: {ranks:?}"
        );
        if sched < 2 {
            assert!(!ranks.is_empty(), "prefill rank {sched} published");
        }
    }
    let report = s.server.stop();
    assert_eq!(report.completed_requests, 4);
    assert_eq!(report.failed_requests, 0);
    assert_eq!(report.config.dp_size, 2);
    let rows: Vec<(u32, Option<u16>, bool)> = report
        .workers
        .iter()
        .map(|w| {
            (
                w.worker,
                w.dp_rank,
                w.drained && w.final_kv_used_blocks == 0,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (0, Some(0), true),
            (0, Some(1), true),
            (1, Some(0), true),
            (1, Some(1), true)
        ]
    );
    // Dynamo's RouterEvents name the worker and the rank.
    let text = s.jsonl.text();
    let mut seen = std::collections::BTreeSet::new();
    for line in text.lines() {
        let e: Value = serde_json::from_str(line).expect("json line");
        seen.insert((
            e["worker_id"].as_u64().unwrap(),
            e["event"]["dp_rank"].as_u64().unwrap(),
        ));
    }
    assert!(seen.contains(&(0, 0)) && seen.contains(&(0, 1)), "{seen:?}");
}

#[test]
fn vllm_kv_transfer_params_name_the_prefill_rank() {
    let s = start(Backend::Vllm);
    let post = |w: usize, b: &Value| -> (u16, Value) {
        let (status, text) = common::call(s.workers[w], "POST", "/v1/completions", &b.to_string());
        (
            status,
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("json: {text}")),
        )
    };
    let words: Vec<String> = (0..80).map(|k| format!("v{k}")).collect();
    let prompt = words.join(" ");
    let (status, v) = post(
        0,
        &json!({"model": "m", "prompt": prompt, "max_tokens": 1,
                "kv_transfer_params": {"do_remote_decode": true}}),
    );
    assert_eq!(status, 200, "{v}");
    let p = v["kv_transfer_params"].clone();
    // Both ranks idle: vLLM's balancer takes the first.
    assert_eq!(p["remote_engine_id"], "0_dp0", "{p}");
    let decode = |params: &Value| {
        json!({"model": "m", "prompt": prompt, "max_tokens": 3, "ignore_eos": true,
               "kv_transfer_params": params})
    };
    // The other rank does not hold it.
    let mut wrong = p.clone();
    wrong["remote_engine_id"] = json!("0_dp1");
    let (status, v) = post(1, &decode(&wrong));
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["param"], "kv_transfer_params");
    let (status, v) = post(1, &decode(&p));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 3);
    let d = common::wait_drained(s.http);
    let took: Vec<u64> = d["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| w["listener_requests"].as_u64().unwrap())
        .collect();
    assert_eq!(took, [1, 0, 1, 0], "{d}");
    let r = s.server.stop();
    assert_eq!((r.completed_requests, r.failed_requests), (1, 0));
}

/// The `listener_requests` of every rank, in (worker, rank) order, once
/// all is drained and the engine has published all four ranks.
fn taken(http: SocketAddr) -> Vec<u64> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let d = common::wait_drained(http);
        let rows = d["workers"].as_array().cloned().unwrap_or_default();
        if rows.len() == 4 {
            return rows
                .iter()
                .map(|w| w["listener_requests"].as_u64().unwrap())
                .collect();
        }
        assert!(std::time::Instant::now() < deadline, "{d}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn vllm_x_data_parallel_rank_pins_the_rank_and_bad_values_are_400s() {
    let s = start(Backend::Vllm);
    let post = |w: usize, rank: Option<&str>, b: &Value| -> (u16, Value) {
        let headers: Vec<(&str, &str)> = rank
            .map(|r| vec![("X-data-parallel-rank", r)])
            .unwrap_or_default();
        let (status, text) = common::call_with(
            s.workers[w],
            "POST",
            "/v1/completions",
            &headers,
            &b.to_string(),
        );
        (
            status,
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("json: {text}")),
        )
    };
    let words: Vec<String> = (0..80).map(|k| format!("p{k}")).collect();
    let prompt = words.join(" ");
    let plain = json!({"model": "m", "prompt": prompt, "max_tokens": 2, "ignore_eos": true});

    // Bad values first: nothing reaches a rank.
    for (bad, message) in [
        ("2", "data_parallel_rank 2 is out of range [0, 2)."),
        ("-1", "data_parallel_rank -1 is out of range [0, 2)."),
        (
            "one",
            "Invalid X-data-parallel-rank header: must be an integer, got 'one'",
        ),
        (
            "1.0",
            "Invalid X-data-parallel-rank header: must be an integer, got '1.0'",
        ),
    ] {
        for w in [0, 1] {
            let (status, v) = post(w, Some(bad), &plain);
            assert_eq!(status, 400, "{bad}: {v}");
            assert_eq!(v["error"]["message"], message, "{v}");
            assert_eq!(v["error"]["param"], "X-data-parallel-rank", "{v}");
            assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        }
    }
    assert_eq!(taken(s.http), [0; 4]);

    // Idle ranks: the balancer alone would take rank 0 every time.
    for _ in 0..3 {
        let (status, v) = post(0, Some("1"), &plain);
        assert_eq!(status, 200, "{v}");
    }
    for r in ["1", "0"] {
        let (status, v) = post(1, Some(r), &plain);
        assert_eq!(status, 200, "{v}");
    }
    let (status, v) = post(1, None, &plain);
    assert_eq!(status, 200, "{v}");
    assert_eq!(taken(s.http), [0, 3, 2, 1]);

    // A pinned prefill names its rank's engine; the decode pinned to rank
    // 1 of the decode worker attaches there.
    let (status, v) = post(
        0,
        Some("1"),
        &json!({"model": "m", "prompt": prompt, "max_tokens": 1,
                "kv_transfer_params": {"do_remote_decode": true}}),
    );
    assert_eq!(status, 200, "{v}");
    let p = v["kv_transfer_params"].clone();
    assert_eq!(p["remote_engine_id"], "0_dp1", "{p}");
    let (status, v) = post(
        1,
        Some("1"),
        &json!({"model": "m", "prompt": prompt, "max_tokens": 3, "ignore_eos": true,
                "kv_transfer_params": p}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 3);
    assert_eq!(taken(s.http), [0, 4, 2, 2]);
    let r = s.server.stop();
    assert_eq!((r.completed_requests, r.failed_requests), (7, 0));
}

#[test]
fn sglang_ignores_the_vllm_header() {
    let s = start(Backend::Sglang);
    for room in [4u64, 6] {
        let b = body(room, room);
        let (p, d) = (s.workers[0], s.workers[1]);
        let b2 = b.clone();
        let t = std::thread::spawn(move || {
            common::call_with(
                p,
                "POST",
                "/v1/completions",
                &[("X-data-parallel-rank", "1")],
                &b2,
            )
        });
        let (ds, db) = common::call_with(
            d,
            "POST",
            "/v1/completions",
            &[("X-data-parallel-rank", "9")],
            &b,
        );
        let (ps, pb) = t.join().expect("prefill leg");
        assert_eq!((ps, ds), (200, 200), "{pb} / {db}");
    }
    // Both rooms are even: rank 0 on the prefill worker, round robin on
    // the decode worker, whatever the header.
    assert_eq!(taken(s.http), [2, 0, 1, 1]);
    let r = s.server.stop();
    assert_eq!((r.completed_requests, r.failed_requests), (2, 0));
}
