//! Runs the seed's §9 experiment (E1 / E3 / E4 / E4-ablate) on the default
//! session trace and prints its table and verdicts.
//!
//! `cargo run --release -p handoff-experiments --example e4 -- [--decode-kv-tokens N]
//! [--prefill-kv-tokens N] [--max-sessions N] [--store-kv-tokens N]
//! [--delta-tokens N] [--tail-tolerance N] [--seed-timings] [--bytes] [--shared-links]
//! [--rebalance N] [--json]`

use handoff_experiments::{run_experiment, KvcConfig, Timings};
use handoff_workload::{generate_sessions, SessionConfig};

fn main() {
    let mut cfg = KvcConfig::default();
    let mut json = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |name: &str| -> u64 {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} needs a number"))
        };
        match a.as_str() {
            "--decode-kv-tokens" => cfg.decode_kv_tokens = num(&a),
            "--prefill-kv-tokens" => cfg.prefill_kv_tokens = num(&a),
            "--max-sessions" => cfg.sync.max_sessions = num(&a) as usize,
            "--store-kv-tokens" => cfg.sync.store_kv_tokens = num(&a),
            "--delta-tokens" => cfg.sync.delta_tokens = num(&a),
            "--tail-tolerance" => cfg.sync.tail_tolerance = num(&a),
            "--rebalance" => cfg.rebalance_threshold = num(&a) as u32,
            "--seed-timings" => cfg.timings = Timings::seed(),
            "--bytes" => {
                cfg.timings.transfer = Timings::seed().transfer;
            }
            "--shared-links" => cfg.timings.duplex = false,
            "--json" => json = true,
            other => panic!("unknown argument {other}"),
        }
    }
    let items = generate_sessions(&SessionConfig::default());
    let started = std::time::Instant::now();
    let out = run_experiment(&cfg, &items).expect("valid configuration");
    let wall = started.elapsed();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&out.report).expect("serialisable")
        );
    } else {
        print!("{}", out.report.table());
        println!("wall time {:.3} s for 4 runs", wall.as_secs_f64());
    }
    for o in &out.outputs {
        if let Err(e) = &o.check {
            eprintln!("{}: accounting check failed: {e}", o.summary.label);
            std::process::exit(1);
        }
    }
}
