//! `python -m sglang.bench_serving --output-file F --output-details`
//! results.
//!
//! `python/sglang/bench_serving.py`, `benchmark()`: each run appends one
//! JSON line (`json.dumps(result | result_details)`) to the output file, so
//! a file holds one result per run; the last is read unless another is
//! asked for. Python writes `"request_rate": Infinity` for the default
//! rate; such tokens are accepted (and refused only where a per-request
//! time belongs). With `--output-details`, `result_details` adds the
//! per-request arrays `input_lens`, `output_lens` (0 for a failure),
//! `ttfts` (s), `itls` (s lists), `generated_texts` and `errors`, in the
//! same sense as vLLM's ([`super::vllm_bench`]); `e2e_ms = ttft + sum(itls)`.
//!
//! SGLang's `RequestFuncOutput` keeps no send time, so its results carry no
//! per-request arrival: a result without `start_times` is refused with
//! [`super::Problem::NoArrivals`] naming that array (nothing is
//! reconstructed from `request_rate`, whose Poisson draws are not saved).
//! A result that does carry `start_times` (a patched client's; seconds on
//! one clock) is read like vLLM's.

use super::bench::{self, Flavour};
use super::error::ObservedError;
use super::Row;
use std::path::Path;

const SGLANG: Flavour = Flavour {
    name: "SGLang's bench_serving output (its requests keep no send time)",
    details_flag: "--output-details",
};

/// The successful requests of the `pick`-th result (the last when `None`)
/// in file order, and how many failed.
pub(crate) fn read(
    text: &str,
    path: &Path,
    pick: Option<usize>,
) -> Result<(Vec<Row>, usize), ObservedError> {
    bench::read(text, path, pick, &SGLANG)
}
