//! `vllm bench serve --save-result --save-detailed` results.
//!
//! `vllm/benchmarks/serve.py`, `benchmark()` builds the result dict and
//! `main()` writes it with `json.dump` (one object; `--append-result` adds
//! further objects, one a line, and the last is read unless another is
//! asked for). Without `--save-detailed`, `main()` deletes the per-request
//! arrays (`input_lens`, `output_lens`, `start_times`, `ttfts`, `itls`,
//! `generated_texts`, `errors`): such a file is refused
//! ([`super::Problem::NoDetails`]).
//!
//! The arrays, one element per request in send order:
//!
//! | key | unit | read as |
//! | --- | --- | --- |
//! | `input_lens` | tokens | `input_tokens` (`RequestFuncOutput.prompt_len`) |
//! | `output_lens` | tokens | `output_tokens` (`calculate_metrics`' actual output lengths; 0 for a failure) |
//! | `start_times` | s, `time.perf_counter()` | `arrival_s`: when the client sent it (`vllm/benchmarks/lib/endpoint_request_func.py`, `st = time.perf_counter()`); one clock for the run |
//! | `ttfts` | s | `ttft_ms` |
//! | `latencies` (or `e2els`) | s | `e2e_ms`, when present |
//! | `itls` | s lists | `e2e_ms = ttft + sum(itls)` when neither is present |
//! | `errors` | text | a non-empty one marks a failure |
//!
//! `queue_times` (newer vLLM) is the client's own wait for a
//! `--max-concurrency` slot before `start_time`, not the server's queue:
//! it is not read, and `queue_ms` is `None`. Files from vLLM versions that
//! wrote no `start_times` are refused: their arrivals are unknown and
//! nothing is reconstructed ([`super::Problem::NoArrivals`]).

use super::bench::{self, Flavour};
use super::error::ObservedError;
use super::Row;
use std::path::Path;

const VLLM: Flavour = Flavour {
    name: "a vLLM bench result without `start_times` (written by vLLM before it saved them)",
    details_flag: "--save-detailed",
};

/// The successful requests of the `pick`-th result (the last when `None`)
/// in file order, and how many failed.
pub(crate) fn read(
    text: &str,
    path: &Path,
    pick: Option<usize>,
) -> Result<(Vec<Row>, usize), ObservedError> {
    bench::read(text, path, pick, &VLLM)
}
