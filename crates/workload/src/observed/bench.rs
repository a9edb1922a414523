//! What vLLM's and SGLang's serving benchmarks share: one JSON result per
//! run (a file of several when results were appended), whose per-request
//! details are parallel arrays indexed by request.
//!
//! Both clients (SGLang's `bench_serving.py` began as a copy of vLLM's
//! `benchmark_serving.py`) time a request from `st = time.perf_counter()`
//! just before the HTTP send: `ttft` is the first streamed chunk's time
//! minus `st`, `itl` the gaps between later chunks (so `ttft + sum(itl)`
//! is the last chunk's time minus `st`), and a failed request keeps `ttft`
//! 0, an empty `itl`, an `error` text (possibly empty) and 0 output tokens
//! in `output_lens`. A request is therefore taken as failed when its
//! `errors` entry is a non-empty string or its `output_lens` entry is 0;
//! failed requests are skipped and counted.

use super::error::{BenchArray, Location, ObservedError, Problem};
use super::json::{pick_record, python_to_strict, ArrayOf, ItlSum, Num, Text};
use super::plain::tokens;
use super::{ObservedRequest, Row, MAX_REQUESTS};
use serde::Deserialize;
use std::path::Path;

/// Per-request arrays, of at most [`MAX_REQUESTS`] elements each.
type Arr<T> = Option<ArrayOf<T, MAX_REQUESTS>>;

/// The keys of a result record the readers use; others are skipped unread.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct BenchRecord {
    input_lens: Arr<Num>,
    output_lens: Arr<Num>,
    ttfts: Arr<Num>,
    itls: Arr<ItlSum>,
    start_times: Arr<Num>,
    latencies: Arr<Num>,
    e2els: Arr<Num>,
    errors: Arr<Text>,
}

/// How one benchmark's result differs from the other's.
pub(crate) struct Flavour {
    /// The result, in words (messages).
    pub name: &'static str,
    /// The flag that writes the per-request arrays.
    pub details_flag: &'static str,
}

/// Reads the `pick`-th (1-based; the last when `None`) result record of
/// `text` as `flavour`'s: its successful requests in file order and how
/// many failed.
pub(crate) fn read(
    text: &str,
    path: &Path,
    pick: Option<usize>,
    flavour: &Flavour,
) -> Result<(Vec<Row>, usize), ObservedError> {
    let at = |at, problem| ObservedError::At {
        path: path.to_path_buf(),
        at,
        problem,
    };
    let strict = python_to_strict(text);
    let (span, records) =
        pick_record(&strict, pick).map_err(|m| at(Location::File, Problem::Syntax(m)))?;
    let Some(span) = span else {
        let p = match pick {
            Some(asked) => Problem::NoSuchRecord { asked, records },
            None => Problem::Empty,
        };
        return Err(at(Location::File, p));
    };
    let line = span.line;
    let body = &strict[span.start..span.end];
    // serde's derived struct would also take an array of its fields.
    if !body.starts_with('{') {
        return Err(at(Location::Record { line }, Problem::NotAnObject));
    }
    let record: BenchRecord = serde_json::from_str(body).map_err(|e| {
        // The record parsed once already: what is left is a duplicate key.
        let full = e.to_string();
        let msg = full.split(" at line ").next().unwrap_or(&full).to_owned();
        at(Location::Record { line }, Problem::Syntax(msg))
    })?;
    requests(&record, flavour, line).map_err(|(loc, p)| at(loc, p))
}

type Fail = (Location, Problem);

/// The elements of `arr`, checked to be an array of `len` elements.
fn elements<T>(
    arr: &Arr<T>,
    array: BenchArray,
    line: u64,
    len: Option<usize>,
) -> Result<Option<&[T]>, Fail> {
    let loc = Location::Array {
        line,
        array,
        index: None,
    };
    let items = match arr {
        None => return Ok(None),
        Some(ArrayOf::List(items)) => items.as_slice(),
        Some(ArrayOf::TooMany) => {
            return Err((loc, Problem::TooManyRequests { max: MAX_REQUESTS }))
        }
        Some(ArrayOf::NotArray) => return Err((loc, Problem::ExpectedArray)),
    };
    match len {
        Some(expected) if items.len() != expected => Err((
            loc,
            Problem::UnequalLength {
                len: items.len(),
                expected,
            },
        )),
        _ => Ok(Some(items)),
    }
}

/// A time in seconds (finite, non-negative).
fn seconds(v: Num) -> Result<f64, Problem> {
    match v {
        Num::Uint(u) => Ok(u as f64),
        Num::Float(x) if x < 0.0 => Err(Problem::Negative),
        Num::Float(x) => Ok(x),
        Num::NonFinite => Err(Problem::NonFinite),
        Num::Null => Err(Problem::Missing),
        Num::NotNumber => Err(Problem::ExpectedNumber),
    }
}

/// Where a request's last-token time comes from.
#[derive(Clone, Copy)]
enum Last<'a> {
    /// `latencies` or `e2els`: seconds from send to the last token.
    Latency(BenchArray, &'a [Num]),
    /// `ttft + sum(itls)`.
    Itls(&'a [ItlSum]),
}

/// The checked arrays of one record, all of one length.
struct Columns<'a> {
    inputs: &'a [Num],
    outputs: &'a [Num],
    ttfts: &'a [Num],
    starts: &'a [Num],
    errors: Option<&'a [Text]>,
    last: Last<'a>,
}

fn columns<'a>(r: &'a BenchRecord, flavour: &Flavour, line: u64) -> Result<Columns<'a>, Fail> {
    let whole = |array| Location::Array {
        line,
        array,
        index: None,
    };
    let Some(inputs) = elements(&r.input_lens, BenchArray::InputLens, line, None)? else {
        return Err(match r.ttfts {
            None => {
                let flag = flavour.details_flag;
                (Location::Record { line }, Problem::NoDetails { flag })
            }
            Some(_) => (whole(BenchArray::InputLens), Problem::Missing),
        });
    };
    let n = Some(inputs.len());
    let required = |arr: &'a Arr<Num>, array| {
        elements(arr, array, line, n)?.ok_or((whole(array), Problem::Missing))
    };
    let outputs = required(&r.output_lens, BenchArray::OutputLens)?;
    let ttfts = required(&r.ttfts, BenchArray::Ttfts)?;
    let starts = elements(&r.start_times, BenchArray::StartTimes, line, n)?.ok_or((
        whole(BenchArray::StartTimes),
        Problem::NoArrivals {
            format: flavour.name,
        },
    ))?;
    let errors = elements(&r.errors, BenchArray::Errors, line, n)?;
    // The last token's time: `latencies` (or `e2els`) when written, else
    // `ttft + sum(itls)`, the same instant (module docs).
    let last = if let Some(l) = elements(&r.latencies, BenchArray::Latencies, line, n)? {
        Last::Latency(BenchArray::Latencies, l)
    } else if let Some(l) = elements(&r.e2els, BenchArray::E2els, line, n)? {
        Last::Latency(BenchArray::E2els, l)
    } else {
        let itls = elements(&r.itls, BenchArray::Itls, line, n)?;
        Last::Itls(itls.ok_or((whole(BenchArray::Itls), Problem::Missing))?)
    };
    Ok(Columns {
        inputs,
        outputs,
        ttfts,
        starts,
        errors,
        last,
    })
}

fn requests(r: &BenchRecord, flavour: &Flavour, line: u64) -> Result<(Vec<Row>, usize), Fail> {
    let c = columns(r, flavour, line)?;
    let mut rows = Vec::with_capacity(c.inputs.len());
    let mut failed = 0;
    for i in 0..c.inputs.len() {
        match request(&c, i, line)? {
            Some(request) => rows.push(Row {
                request,
                tokens: None,
            }),
            None => failed += 1,
        }
    }
    Ok((rows, failed))
}

/// Request `i`, or `None` when it failed.
fn request(c: &Columns<'_>, i: usize, line: u64) -> Result<Option<ObservedRequest>, Fail> {
    let here = |array| Location::Array {
        line,
        array,
        index: Some(i),
    };
    let error = match c.errors.map(|e| &e[i]) {
        None | Some(Text::Null) => false,
        Some(Text::Str(s)) => !s.is_empty(),
        Some(_) => return Err((here(BenchArray::Errors), Problem::ExpectedString)),
    };
    if error || c.outputs[i] == Num::Uint(0) {
        return Ok(None);
    }
    let input_tokens = tokens(c.inputs[i]).map_err(|p| (here(BenchArray::InputLens), p))?;
    let output_tokens = tokens(c.outputs[i]).map_err(|p| (here(BenchArray::OutputLens), p))?;
    let arrival_s = seconds(c.starts[i]).map_err(|p| (here(BenchArray::StartTimes), p))?;
    let ttft = seconds(c.ttfts[i]).map_err(|p| (here(BenchArray::Ttfts), p))?;
    let last = match c.last {
        Last::Latency(array, l) => seconds(l[i]).map_err(|p| (here(array), p))?,
        Last::Itls(itls) => match itls[i] {
            ItlSum::Sum(s) => ttft + s,
            ItlSum::Bad { index, .. } => {
                return Err((here(BenchArray::Itls), Problem::BadElement { index }))
            }
            ItlSum::NotArray => return Err((here(BenchArray::Itls), Problem::ExpectedArray)),
        },
    };
    if ttft > last {
        let p = Problem::FirstAfterLast { first: ttft, last };
        return Err((here(BenchArray::Ttfts), p));
    }
    Ok(Some(ObservedRequest {
        id: i.to_string(),
        arrival_s,
        input_tokens,
        output_tokens,
        ttft_ms: ttft * 1000.0,
        e2e_ms: last * 1000.0,
        queue_ms: None,
        hash_ids: None,
    }))
}
