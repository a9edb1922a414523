//! Trace reading and generation throughput.
//!
//! Reads `$TRACE` (default: the Mooncake conversation trace under
//! /work/shared/traces when present, else a written synthetic workload of
//! the same size), then times the synthetic and session generators.
//!
//! Run: `cargo bench -p handoff-workload --bench read_trace`

use handoff_workload::{
    generate_sessions, write_trace, ReaderOptions, SessionConfig, SyntheticConfig,
    SyntheticWorkload, TraceItem, TraceReader,
};
use std::io::{BufReader, Cursor};
use std::time::Instant;

fn main() {
    let path = std::env::var("TRACE")
        .unwrap_or_else(|_| "/work/shared/traces/conversation_trace.jsonl".to_string());
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(_) => {
            let items: Vec<TraceItem> = SyntheticWorkload::new(SyntheticConfig {
                requests: 12_000,
                ..SyntheticConfig::default()
            })
            .collect();
            let mut buf = Vec::new();
            write_trace(&mut buf, &items).expect("in-memory write");
            println!("{path} not readable; using a 12,000-request synthetic trace");
            buf
        }
    };
    let rounds = 5;
    let mut records = 0u64;
    let t = Instant::now();
    for _ in 0..rounds {
        let reader = TraceReader::new(
            BufReader::new(Cursor::new(&bytes[..])),
            ReaderOptions::new(path.as_str()),
        );
        for item in reader {
            if let Err(e) = item {
                eprintln!("{e}");
                std::process::exit(1);
            }
            records += 1;
        }
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "read {}: {} records/round, {:.2} M records/s, {:.0} MB/s",
        path,
        records / rounds,
        records as f64 / secs / 1e6,
        (bytes.len() * rounds as usize) as f64 / secs / 1e6
    );

    let t = Instant::now();
    let n = SyntheticWorkload::new(SyntheticConfig::default()).count();
    println!(
        "synthetic default ({n} requests): {:.2} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let t = Instant::now();
    let s = generate_sessions(&SessionConfig::default());
    println!(
        "sessions default ({} requests): {:.2} ms",
        s.len(),
        t.elapsed().as_secs_f64() * 1e3
    );
}
