//! Throughput of the built-in tokenizer on the prompts of issue 42 (the
//! `" ,"` prompt that used to be quadratic, ordinary prose, long whitespace
//! runs, multi-byte text), and of a whole `/v1/completions` body parse.
//! Run with `cargo run --release -p handoff-serve --example tokenize_bench`;
//! figures are in `docs/perf/tokenizer-2026-12-06.md`.

use handoff_serve::openai::{parse, Endpoint, Limits};
use handoff_serve::openai::{tokenize, Tokenizer};
use std::time::Instant;

/// Seconds per call of `f`, the best of five rounds of `reps` calls.
fn best(reps: u32, mut f: impl FnMut() -> usize) -> f64 {
    let mut best = f64::INFINITY;
    let mut sink = 0usize;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..reps {
            sink = sink.wrapping_add(f());
        }
        best = best.min(t.elapsed().as_secs_f64() / f64::from(reps));
    }
    assert!(sink > 0);
    best
}

fn main() {
    let cases = [
        ("' ,' x 320k (640 KB)", " ,".repeat(320_000)),
        (
            "prose (640 KB)",
            "The quick brown fox jumps over the lazy dog. ".repeat(14_223),
        ),
        ("tabs and spaces (640 KB)", " \t".repeat(320_000)),
        ("multi-byte (640 KB)", "ünïcödé wörds 🙂 ".repeat(26_667)),
    ];
    println!("| text | bytes | tokens | ms per call | MB/s |");
    println!("|---|---|---|---|---|");
    for (name, text) in &cases {
        let tokens = tokenize(text).len();
        let s = best(5, || tokenize(text).len());
        println!(
            "| {name} | {} | {tokens} | {:.2} | {:.0} |",
            text.len(),
            s * 1e3,
            text.len() as f64 / s / 1e6
        );
    }
    let limits = Limits {
        model: "m".into(),
        max_model_len: 1 << 20,
        tokenizer: Tokenizer::Builtin,
        loras: Default::default(),
    };
    let body = serde_json::json!({"model": "m", "prompt": " ,".repeat(320_000), "max_tokens": 4})
        .to_string();
    let s = best(5, || {
        usize::from(parse(Endpoint::Completions, body.as_bytes(), &limits).is_ok())
    });
    println!(
        "\nwhole body parse, 640 KB ' ,' prompt, max_model_len 2^20 (accepted): {:.2} ms",
        s * 1e3
    );
    for (cap, how) in [
        (32_768u32, "refused after cutting 32,768 pieces"),
        (4_096, "refused by its byte length, nothing cut"),
    ] {
        let capped = Limits {
            max_model_len: cap,
            ..limits.clone()
        };
        let s = best(50, || {
            usize::from(parse(Endpoint::Completions, body.as_bytes(), &capped).is_err())
        });
        println!(
            "whole body parse, same body, max_model_len {cap} ({how}): {:.3} ms",
            s * 1e3
        );
    }
}
