//! Real engine runs, read per request: what a `validate` compares a replay
//! against.
//!
//! Three formats ([`ObservedFormat`]) become one [`ObservedRun`]:
//! - vLLM's `vllm bench serve --save-result --save-detailed` JSON
//!   ([`vllm_bench`]);
//! - SGLang's `bench_serving --output-file F --output-details` JSONL
//!   ([`sglang_bench`]; it saves no arrival times, so it is refused unless a
//!   result carries `start_times`);
//! - a plain per-request JSONL or CSV ([`plain`]).
//!
//! Every file is read through [`crate::file`] (a regular file of at most
//! [`FileKind::RealRun`]'s bytes); a run has at most [`MAX_REQUESTS`]
//! requests of at most [`MAX_TOKENS`] tokens each, every array is bounded
//! while it is parsed, and every refusal is an [`ObservedError`] naming the
//! file and where in it.
//!
//! # Into a replay
//!
//! [`ObservedRun::trace_items`] gives the requests as the [`TraceItem`]s a
//! replay consumes, built as [`crate::TraceReader`] builds a Mooncake line's
//! (`timestamp` -> arrival, `input_length`, `output_length`, `hash_ids`):
//! item `i` is `requests[i]` with `RequestId(i)`, arriving at
//! `arrival_s - requests[0].arrival_s`, its `hash_ids` (or none: every block
//! unique to the request) covering `block_size` tokens each. A caller
//! matches replay results back to requests by that index.

mod bench;
pub mod error;
pub mod hashes;
mod json;
pub mod plain;
pub mod sglang_bench;
pub mod vllm_bench;

pub use error::{BenchArray, Location, ObservedError, PlainField, Problem};
pub use hashes::BlockNumbering;

use crate::file::{self, FileKind};
use crate::item::TraceItem;
use handoff_core::{Instant, Request, RequestId};
use std::path::Path;

/// Most requests a run may have.
pub const MAX_REQUESTS: usize = 1_000_000;
/// Most tokens (input or output) one request may have.
pub const MAX_TOKENS: usize = 1_000_000;
/// Longest span of arrivals, in seconds (replay's nanosecond clock holds
/// 584 years; a run is far shorter).
pub const MAX_SPAN_S: f64 = 1e9;

/// The format of an observed run's file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ObservedFormat {
    /// Tell by content (see [`detect`]).
    #[default]
    Auto,
    /// `vllm bench serve --save-result --save-detailed` JSON.
    VllmBench,
    /// `python -m sglang.bench_serving --output-details` JSONL.
    SglangBench,
    /// Plain per-request JSONL or CSV.
    Plain,
}

impl ObservedFormat {
    /// Every format, `Auto` first.
    pub const ALL: [ObservedFormat; 4] = [
        ObservedFormat::Auto,
        ObservedFormat::VllmBench,
        ObservedFormat::SglangBench,
        ObservedFormat::Plain,
    ];

    /// Stable lower-case name (the command line, reports).
    pub const fn name(self) -> &'static str {
        match self {
            ObservedFormat::Auto => "auto",
            ObservedFormat::VllmBench => "vllm",
            ObservedFormat::SglangBench => "sglang",
            ObservedFormat::Plain => "plain",
        }
    }
}

impl std::fmt::Display for ObservedFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A format name that is none of [`ObservedFormat::ALL`]'s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownFormat(pub String);

impl std::fmt::Display for UnknownFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unknown observed-run format {:?} (auto, vllm, sglang, plain)",
            self.0
        )
    }
}

impl std::error::Error for UnknownFormat {}

impl std::str::FromStr for ObservedFormat {
    type Err = UnknownFormat;
    fn from_str(s: &str) -> Result<Self, UnknownFormat> {
        ObservedFormat::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| UnknownFormat(s.to_owned()))
    }
}

/// One request of a real run.
#[derive(Clone, Debug, PartialEq)]
pub struct ObservedRequest {
    /// As the file names it, or its 0-based index in the file.
    pub id: String,
    /// When it reached the server (s, the run's own clock).
    pub arrival_s: f64,
    /// Prompt tokens.
    pub input_tokens: u32,
    /// Generated tokens.
    pub output_tokens: u32,
    /// First token - arrival (ms).
    pub ttft_ms: f64,
    /// Last token - arrival (ms).
    pub e2e_ms: f64,
    /// Scheduled - arrival (or - queued), when the file has it (ms).
    pub queue_ms: Option<f64>,
    /// Prefix block ids of `block_size` tokens each, chained (a block's id
    /// depends on every token before it).
    pub hash_ids: Option<Vec<u64>>,
}

impl ObservedRequest {
    /// Time per output token after the first: `(e2e - ttft) / (output - 1)`
    /// (ms); `None` for one output token or fewer.
    pub fn tpot_ms(&self) -> Option<f64> {
        (self.output_tokens > 1)
            .then(|| (self.e2e_ms - self.ttft_ms) / f64::from(self.output_tokens - 1))
    }
}

/// A real run, read.
#[derive(Clone, Debug, PartialEq)]
pub struct ObservedRun {
    /// The format it was read as (never `Auto`).
    pub format: ObservedFormat,
    /// Tokens per hash id.
    pub block_size: u32,
    /// Its successful requests by arrival (stable: file order among equal
    /// arrivals).
    pub requests: Vec<ObservedRequest>,
    /// A bench file's failed requests, skipped.
    pub skipped_failed: usize,
}

/// How to read a file: [`read_observed`]'s arguments, plus which result of
/// a bench file of several.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObservedOptions {
    /// The format.
    pub format: ObservedFormat,
    /// Tokens per hash id (at least 1; 0 counts as 1).
    pub block_size: u32,
    /// A bench file's result to read, 1-based; the last when `None`.
    pub record: Option<usize>,
}

/// One request as a reader yields it, before the run is sorted.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    pub request: ObservedRequest,
    /// Token ids still to be numbered into `hash_ids`.
    pub tokens: Option<Vec<u32>>,
}

/// Reads the run at `path` in `format`, hash ids of `block_size` tokens.
pub fn read_observed(
    path: &Path,
    format: ObservedFormat,
    block_size: u32,
) -> Result<ObservedRun, ObservedError> {
    let options = ObservedOptions {
        format,
        block_size,
        record: None,
    };
    read_observed_with(path, &options)
}

/// Reads the run at `path` as `options` say.
pub fn read_observed_with(
    path: &Path,
    options: &ObservedOptions,
) -> Result<ObservedRun, ObservedError> {
    let text = file::read_to_string("--real", path, FileKind::RealRun)?;
    parse_observed(path, &text, options)
}

/// Reads a run from `text`; `path` names it in errors and, for
/// [`ObservedFormat::Auto`], its extension counts (`.csv` is plain).
pub fn parse_observed(
    path: &Path,
    text: &str,
    options: &ObservedOptions,
) -> Result<ObservedRun, ObservedError> {
    let format = match options.format {
        ObservedFormat::Auto => detect(path, text)?,
        f => f,
    };
    let block_size = options.block_size.max(1);
    let (rows, skipped_failed) = match format {
        ObservedFormat::VllmBench => vllm_bench::read(text, path, options.record)?,
        ObservedFormat::SglangBench => sglang_bench::read(text, path, options.record)?,
        _ => (plain::read(text, path, block_size)?, 0),
    };
    let requests = finish(rows, block_size).map_err(|problem| ObservedError::At {
        path: path.to_path_buf(),
        at: Location::File,
        problem,
    })?;
    Ok(ObservedRun {
        format,
        block_size,
        requests,
        skipped_failed,
    })
}

/// The format `text` (named `path`) is in: a `.csv` name is plain; else
/// the first JSON record decides: `arrival` -> plain, SGLang's summary keys
/// (`mean_e2e_latency_ms`, `total_output_tokens_retokenized`) -> SGLang,
/// `ttfts`, `input_lens` or `endpoint_type` -> vLLM; a first line that is
/// not JSON but names `arrival` is a plain CSV header.
pub fn detect(path: &Path, text: &str) -> Result<ObservedFormat, ObservedError> {
    let is_csv = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    if is_csv {
        return Ok(ObservedFormat::Plain);
    }
    let body = text.trim_start_matches('\u{feff}').trim_start();
    let undetected = || ObservedError::At {
        path: path.to_path_buf(),
        at: Location::File,
        problem: Problem::Undetected,
    };
    if !body.starts_with('{') {
        let header = body.lines().next().unwrap_or("");
        return if header
            .split(',')
            .any(|c| c.trim().trim_matches('"') == "arrival")
        {
            Ok(ObservedFormat::Plain)
        } else {
            Err(undetected())
        };
    }
    let strict = json::python_to_strict(body);
    let mut stream = serde_json::Deserializer::from_str(&strict).into_iter::<Probe>();
    let Some(Ok(probe)) = stream.next() else {
        return Err(undetected());
    };
    let has = |k: &Option<serde::de::IgnoredAny>| k.is_some();
    if has(&probe.arrival) {
        Ok(ObservedFormat::Plain)
    } else if has(&probe.mean_e2e_latency_ms) || has(&probe.total_output_tokens_retokenized) {
        Ok(ObservedFormat::SglangBench)
    } else if has(&probe.ttfts) || has(&probe.input_lens) || has(&probe.endpoint_type) {
        Ok(ObservedFormat::VllmBench)
    } else {
        Err(undetected())
    }
}

/// The keys [`detect`] looks at; others are skipped unread.
#[derive(serde::Deserialize)]
struct Probe {
    arrival: Option<serde::de::IgnoredAny>,
    mean_e2e_latency_ms: Option<serde::de::IgnoredAny>,
    total_output_tokens_retokenized: Option<serde::de::IgnoredAny>,
    ttfts: Option<serde::de::IgnoredAny>,
    input_lens: Option<serde::de::IgnoredAny>,
    endpoint_type: Option<serde::de::IgnoredAny>,
}

/// Sorts rows by arrival (stable), numbers token ids into hash ids in that
/// order (ids dense from 0, first seen first) and checks the span.
fn finish(mut rows: Vec<Row>, block_size: u32) -> Result<Vec<ObservedRequest>, Problem> {
    rows.sort_by(|a, b| a.request.arrival_s.total_cmp(&b.request.arrival_s));
    if let (Some(first), Some(last)) = (rows.first(), rows.last()) {
        if last.request.arrival_s - first.request.arrival_s > MAX_SPAN_S {
            return Err(Problem::SpanTooLong { max_s: MAX_SPAN_S });
        }
    }
    let mut numbering = BlockNumbering::new(block_size);
    Ok(rows
        .into_iter()
        .map(|row| {
            let mut request = row.request;
            if let Some(tokens) = row.tokens {
                request.hash_ids = Some(numbering.number(&tokens));
            }
            request
        })
        .collect())
}

impl ObservedRun {
    /// The requests as replay's workload items (module docs): item `i` is
    /// `requests[i]`, `RequestId(i)`, arriving `arrival_s -
    /// requests[0].arrival_s` after the first.
    pub fn trace_items(&self) -> Vec<TraceItem> {
        let first = self.requests.first().map_or(0.0, |r| r.arrival_s);
        self.requests
            .iter()
            .enumerate()
            .map(|(i, r)| {
                // Non-negative and within MAX_SPAN_S for a run read here;
                // `as` saturates for one built by hand.
                let nanos = ((r.arrival_s - first) * 1e9).round().max(0.0) as u64;
                TraceItem {
                    request: Request {
                        id: RequestId(i as u64),
                        prompt_tokens: r.input_tokens,
                        max_output_tokens: r.output_tokens,
                        prefix_hashes: r.hash_ids.clone().unwrap_or_default(),
                        hash_block_tokens: self.block_size.max(1),
                        session: None,
                        arrival: Instant(nanos),
                        lora: None,
                    },
                    turn: None,
                    delay: None,
                }
            })
            .collect()
    }
}
