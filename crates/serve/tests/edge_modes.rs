//! The engine edge is one for both serve modes: the in-process deployment
//! (`serve`) and one engine per process (`serve --engine`) show the same
//! live gauges and count the same totals.
//!
//! - Under load (20 long requests), `/metrics`' running, waiting and KV
//!   usage are live (the running batch fills, KV usage is above zero) and
//!   equal `/debug/workers`' capacity read around them while it holds
//!   still, in both modes.
//! - After the load, the token and request counters equal what the clients
//!   received, in both modes.
//! - One PD workload through vLLM's two proxy calls ends with equal totals
//!   on one process's per-worker listeners and on a prefill and a decode
//!   engine process; the prefill engine's summary counts its answered pins
//!   as finished.

mod common;

use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_router::Pool;
use handoff_serve::ServeConfig;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;

/// Requests of the load.
const LOAD: usize = 20;
/// Output tokens each generates: long enough to sample mid-run.
const LONG: u32 = 160;

/// One engine process on loopback (as `tests/pods.rs` starts them).
use common::pod::Pod;

impl Pod {
    /// The `role` engine: aggregated alone, or one of a prefill/decode pair.
    fn start(role: Pool) -> Pod {
        let serve = if role == Pool::Aggregated {
            common::loopback(aggregated(), vec![EngineSpec::default()])
        } else {
            common::loopback_pd(DeploymentConfig::default(), EngineSpec::default())
        };
        Pod::run(common::pod::config(serve, role))
    }
}

fn aggregated() -> DeploymentConfig {
    DeploymentConfig {
        prefill_workers: 1,
        decode_workers: 0,
        ..DeploymentConfig::default()
    }
}

fn get_json(to: SocketAddr, path: &str) -> Value {
    let (status, body) = common::call(to, "GET", path, "");
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|_| panic!("json: {body}"))
}

fn metrics(to: SocketAddr) -> String {
    let (status, body) = common::call(to, "GET", "/metrics", "");
    assert_eq!(status, 200, "/metrics: {body}");
    body
}

/// The sum of `name`'s samples over every label set.
fn sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Running, waiting and KV usage of every worker, summed.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Load {
    running: f64,
    waiting: f64,
    usage: f64,
}

fn view_load(v: &Value) -> Load {
    let ws = v["workers"].as_array().cloned().unwrap_or_default();
    let f = |w: &Value, k: &str| w["capacity"][k].as_f64().unwrap_or(0.0);
    let mut l = Load {
        running: 0.0,
        waiting: 0.0,
        usage: 0.0,
    };
    for w in &ws {
        l.running += f(w, "running_requests");
        l.waiting += f(w, "waiting_requests");
        let used = f(w, "active_blocks")
            + f(w, "pinned_source_blocks")
            + f(w, "reserved_destination_blocks");
        let total = f(w, "total_blocks");
        if total > 0.0 {
            l.usage += used / total;
        }
    }
    l
}

fn metrics_load(text: &str) -> Load {
    Load {
        running: sum(text, "vllm:num_requests_running"),
        waiting: sum(text, "vllm:num_requests_waiting"),
        usage: sum(text, "vllm:kv_cache_usage_perc"),
    }
}

/// What the clients of a load got.
#[derive(Debug, Default)]
struct Got {
    ok: u64,
    prompt: u64,
    completion: u64,
}

/// Sends [`LOAD`] long requests to `to` at once; while they run, samples
/// `/debug/workers`, `/metrics`, `/debug/workers` and checks the gauges
/// against the view whenever the view held still around the scrape.
/// Returns the clients' totals and the fullest batch seen.
fn load_and_sample(to: SocketAddr) -> (Got, Load) {
    let clients: Vec<_> = (0..LOAD)
        .map(|i| {
            let body = json!({"model": "m", "prompt": format!("request {i} of a long load"),
                              "max_tokens": LONG, "ignore_eos": true});
            std::thread::spawn(move || {
                common::call(to, "POST", "/v1/completions", &body.to_string())
            })
        })
        .collect();
    let mut fullest = Load {
        running: 0.0,
        waiting: 0.0,
        usage: 0.0,
    };
    let mut agreed = 0;
    while !clients.iter().all(|c| c.is_finished()) {
        let before = view_load(&get_json(to, "/debug/workers"));
        let m = metrics_load(&metrics(to));
        let after = view_load(&get_json(to, "/debug/workers"));
        if before == after && before.running + before.waiting > 0.0 {
            // The gauges are set from the same snapshot as the view.
            assert_eq!(m.running, before.running, "{m:?} vs {before:?}");
            assert_eq!(m.waiting, before.waiting, "{m:?} vs {before:?}");
            assert!((m.usage - before.usage).abs() < 1e-9, "{m:?} vs {before:?}");
            agreed += 1;
            if m.running > fullest.running {
                fullest = m;
            }
        }
        std::thread::sleep(Duration::from_millis(15));
    }
    assert!(agreed > 0, "the view never held still under load");
    let mut got = Got::default();
    for c in clients {
        let (status, text) = c.join().expect("answered");
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).expect("json");
        got.ok += 1;
        got.prompt += v["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
        got.completion += v["usage"]["completion_tokens"].as_u64().unwrap_or(0);
    }
    (got, fullest)
}

/// The gauges were live and the counters equal what the clients got.
fn check_load(to: SocketAddr, got: &Got, fullest: Load) {
    assert!(
        fullest.running >= 2.0,
        "the batch never filled: {fullest:?}"
    );
    assert!(fullest.usage > 0.0, "no KV in use under load: {fullest:?}");
    let text = metrics(to);
    assert_eq!(got.completion, u64::from(LONG) * LOAD as u64);
    assert_eq!(
        sum(&text, "vllm:generation_tokens_total"),
        got.completion as f64
    );
    assert_eq!(sum(&text, "vllm:prompt_tokens_total"), got.prompt as f64);
    assert_eq!(sum(&text, "vllm:request_success_total"), got.ok as f64);
    assert_eq!(sum(&text, "vllm:handoff_requests_failed_total"), 0.0);
    // Idle again: the gauges say so.
    common::wait_drained(to);
    let idle = metrics_load(&metrics(to));
    assert_eq!((idle.running, idle.waiting), (0.0, 0.0), "{idle:?}");
}

#[test]
fn in_process_gauges_are_live_and_counters_match_the_clients() {
    let (l, server) = common::start(common::loopback(aggregated(), vec![EngineSpec::default()]));
    let (got, fullest) = load_and_sample(l.http);
    check_load(l.http, &got, fullest);
    server.stop();
}

#[test]
fn engine_process_gauges_are_live_and_counters_match_the_clients() {
    let a = Pod::start(Pool::Aggregated);
    let (got, fullest) = load_and_sample(a.l.http);
    check_load(a.l.http, &got, fullest);
    let s = a.stop();
    assert_eq!((s.finished, s.failed.len()), (LOAD as u64, 0), "{s:?}");
}

/// Totals of one or more engines' `/metrics`.
#[derive(Debug, Default, PartialEq)]
struct Totals {
    success: f64,
    failed: f64,
    prompt: f64,
    generated: f64,
}

fn totals(engines: &[SocketAddr]) -> Totals {
    let mut t = Totals::default();
    for e in engines {
        let text = metrics(*e);
        t.success += sum(&text, "vllm:request_success_total");
        t.failed += sum(&text, "vllm:handoff_requests_failed_total");
        t.prompt += sum(&text, "vllm:prompt_tokens_total");
        t.generated += sum(&text, "vllm:generation_tokens_total");
    }
    t
}

/// Requests of the PD workload.
const PD: usize = 6;

/// vLLM's proxy: each request prefilled on `prefill` (`do_remote_decode`,
/// one token) then decoded on `decode` with the returned params. Returns
/// what the proxy received from both.
fn proxy(prefill: SocketAddr, decode: SocketAddr) -> Got {
    let mut got = Got::default();
    for i in 0..PD {
        let prompt = format!("a disaggregated request, number {i}, with its prompt");
        let body = json!({"model": "m", "prompt": prompt, "max_tokens": 1,
                          "kv_transfer_params": {"do_remote_decode": true}});
        let (status, text) = common::call(prefill, "POST", "/v1/completions", &body.to_string());
        assert_eq!(status, 200, "{text}");
        let p: Value = serde_json::from_str(&text).expect("json");
        let body = json!({"model": "m", "prompt": prompt, "max_tokens": 5 + i, "ignore_eos": true,
                          "kv_transfer_params": p["kv_transfer_params"].clone()});
        let (status, text) = common::call(decode, "POST", "/v1/completions", &body.to_string());
        assert_eq!(status, 200, "{text}");
        let d: Value = serde_json::from_str(&text).expect("json");
        got.ok += 2;
        got.prompt += p["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
        got.completion += p["usage"]["completion_tokens"].as_u64().unwrap_or(0)
            + d["usage"]["completion_tokens"].as_u64().unwrap_or(0);
    }
    got
}

#[test]
fn one_pd_workload_counts_alike_in_one_process_and_in_two_engine_processes() {
    let (l, server) = common::start(ServeConfig {
        worker_http: common::worker_listeners(2),
        ..common::loopback_pd(DeploymentConfig::default(), EngineSpec::default())
    });
    let w = common::worker_addrs(&l);
    let one_got = proxy(w[0], w[1]);
    common::wait_drained(l.http);
    let one = totals(&[l.http]);
    server.stop();

    let p = Pod::start(Pool::Prefill);
    let d = Pod::start(Pool::Decode);
    let two_got = proxy(p.l.http, d.l.http);
    common::wait_drained(p.l.http);
    common::wait_drained(d.l.http);
    let two = totals(&[p.l.http, d.l.http]);
    let (ps, ds) = (p.stop(), d.stop());

    let want = Totals {
        success: one_got.ok as f64,
        failed: 0.0,
        prompt: one_got.prompt as f64,
        generated: one_got.completion as f64,
    };
    assert_eq!(one, want, "one process");
    assert_eq!(
        (two_got.ok, two_got.prompt, two_got.completion),
        (one_got.ok, one_got.prompt, one_got.completion)
    );
    assert_eq!(two, one, "two engine processes");
    // A pinned prefill answered with its params is a finished request.
    assert_eq!((ps.finished, ds.finished), (PD as u64, PD as u64));
    assert!(
        ps.failed.is_empty() && ds.failed.is_empty(),
        "{ps:?} {ds:?}"
    );
}
