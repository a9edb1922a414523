//! Streaming reader for Mooncake JSONL traces and Azure LLM inference CSV
//! traces ([`TraceFormat`]; the CSV columns are described in
//! [`crate::azure`]).
//!
//! One JSON object per line, as published with Mooncake's FAST'25 traces
//! (kvcache-ai/Mooncake `FAST25-release/traces/`) and consumed by Dynamo's
//! mocker replay (`timestamp`, `input_length`, `output_length`, `hash_ids`),
//! plus the session fields of multi-turn traces (`session_id`, `delay`):
//!
//! | field | type | meaning |
//! | --- | --- | --- |
//! | `timestamp` | ms, integer or float, required | open-loop send time |
//! | `input_length` | integer 1..=u32::MAX, required | prompt tokens |
//! | `output_length` | integer 1..=u32::MAX, required | tokens to generate |
//! | `hash_ids` | array of u64, required | one id per 512-token prompt block |
//! | `session_id` | string or integer, optional | the session this is a turn of |
//! | `delay` | ms, integer or float, optional | think-time before this turn |
//! | `lora_name` | string, optional | the LoRA adapter it runs on ([`crate::lora`]) |
//!
//! Unknown keys are ignored; `null` for an optional key means absent.
//!
//! Each hash id covers [`ReaderOptions::hash_block_tokens`] prompt tokens
//! (512 in Mooncake's traces; `--trace-block-size` on the command line).
//!
//! Validation rules (each violation is a [`TraceError`] naming the line):
//! - `hash_ids.len() <= ceil(input_length / B) + 1` for that block size `B`.
//!   Mooncake traces have exactly `ceil(input_length / 512)` ids; one spare
//!   id is tolerated for
//!   traces whose generator rounds differently. Fewer ids are fine: the
//!   blocks past them get request-salted content hashes and never share.
//! - timestamps never decrease from one accepted record to the next.
//! - a line longer than [`ReaderOptions::max_line_bytes`] is rejected
//!   without being buffered.
//!
//! Request ids are dense in accepted-record order, starting at
//! [`ReaderOptions::first_request_id`]; turn indexes count earlier accepted
//! records of the same session.

use crate::azure::{self, Columns};
use crate::error::{Problem, TraceError, TraceField};
use crate::item::{session_id_from_str, TraceItem};
use crate::line::{read_bounded_line, LineRead};
use crate::record::{parse_record, HashIds, RawRecord, Scalar};
use handoff_core::request::TRACE_HASH_BLOCK_TOKENS;
use handoff_core::{Duration, Instant, Request, RequestId, SessionId};
use std::collections::HashMap;
use std::io::BufRead;
use std::sync::Arc;

/// Default line limit: far above any real record (a 190K-token Mooncake
/// prompt is a 2.6 KB line) and small enough to bound memory.
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 << 20;

/// The format of a trace file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TraceFormat {
    /// Mooncake JSONL: one JSON object per line (the module docs' table).
    #[default]
    Mooncake,
    /// Azure LLM inference trace CSV: a header naming `TIMESTAMP`,
    /// `ContextTokens` and `GeneratedTokens`, then one row per request.
    AzureCsv,
}

impl TraceFormat {
    /// The format a file name suggests: `.csv` is Azure CSV, anything else
    /// Mooncake JSONL.
    pub fn from_path(path: &std::path::Path) -> TraceFormat {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("csv") => TraceFormat::AzureCsv,
            _ => TraceFormat::Mooncake,
        }
    }

    /// Stable lower-case name (reports, the command line).
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Mooncake => "mooncake",
            TraceFormat::AzureCsv => "azure",
        }
    }
}

/// How a [`TraceReader`] treats its input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReaderOptions {
    /// The name errors report (usually the file name).
    pub source_name: String,
    /// Count and skip malformed lines instead of stopping at the first.
    /// I/O errors always stop the reader.
    pub skip_bad_lines: bool,
    /// Longest accepted line in bytes, newline excluded.
    pub max_line_bytes: usize,
    /// How many skipped-line errors to keep for reporting.
    pub kept_errors: usize,
    /// Id of the first accepted record.
    pub first_request_id: u64,
    /// What the input is.
    pub format: TraceFormat,
    /// Prompt tokens each trace hash id covers (Mooncake: 512). Becomes the
    /// requests' [`Request::hash_block_tokens`].
    pub hash_block_tokens: u32,
}

impl ReaderOptions {
    /// Strict defaults for input named `source_name`.
    pub fn new(source_name: impl Into<String>) -> Self {
        ReaderOptions {
            source_name: source_name.into(),
            skip_bad_lines: false,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            kept_errors: 16,
            first_request_id: 0,
            format: TraceFormat::Mooncake,
            hash_block_tokens: TRACE_HASH_BLOCK_TOKENS,
        }
    }

    /// The same options reading `format`.
    pub fn with_format(mut self, format: TraceFormat) -> Self {
        self.format = format;
        self
    }

    /// The same options with hash ids covering `tokens` prompt tokens each
    /// (at least 1).
    pub fn with_hash_block_tokens(mut self, tokens: u32) -> Self {
        self.hash_block_tokens = tokens.max(1);
        self
    }

    /// The same options with `skip_bad_lines` set.
    pub fn skipping_bad_lines(mut self) -> Self {
        self.skip_bad_lines = true;
        self
    }
}

impl Default for ReaderOptions {
    fn default() -> Self {
        ReaderOptions::new("trace")
    }
}

/// Counts of what the reader has seen so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReaderStats {
    /// Lines read, including blank and bad ones.
    pub lines: u64,
    /// Records yielded.
    pub records: u64,
    /// Lines holding only whitespace (skipped silently).
    pub blank_lines: u64,
    /// Malformed lines skipped (only with `skip_bad_lines`).
    pub bad_lines: u64,
}

/// Iterates a trace (Mooncake JSONL or Azure CSV) one line at a time, yielding
/// `Result<TraceItem, TraceError>`.
///
/// Strict mode yields the first error and then ends. With
/// `skip_bad_lines`, malformed lines are counted in [`TraceReader::stats`]
/// and the first few kept in [`TraceReader::errors`]; only an I/O error is
/// yielded (and ends the stream).
pub struct TraceReader<R> {
    input: R,
    options: ReaderOptions,
    name: Arc<str>,
    line: Vec<u8>,
    raw: RawRecord,
    line_no: u64,
    next_id: u64,
    last_timestamp: Option<(u64, u64)>,
    turns: HashMap<SessionId, u32>,
    /// The adapters `lora_name` named so far.
    loras: crate::lora::LoraNames,
    /// Azure CSV: the header's columns, once read.
    columns: Option<Columns>,
    /// Azure CSV: the first row's absolute time in nanoseconds, and its line.
    base: Option<(i128, u64)>,
    stats: ReaderStats,
    errors: Vec<TraceError>,
    done: bool,
}

impl<R: BufRead> TraceReader<R> {
    /// A reader over `input`.
    pub fn new(input: R, options: ReaderOptions) -> Self {
        let name: Arc<str> = Arc::from(options.source_name.as_str());
        TraceReader {
            input,
            next_id: options.first_request_id,
            options,
            name,
            line: Vec::new(),
            raw: RawRecord::default(),
            line_no: 0,
            last_timestamp: None,
            turns: HashMap::new(),
            loras: crate::lora::LoraNames::default(),
            columns: None,
            base: None,
            stats: ReaderStats::default(),
            errors: Vec::new(),
            done: false,
        }
    }

    /// Counts so far.
    pub fn stats(&self) -> ReaderStats {
        self.stats
    }

    /// The first [`ReaderOptions::kept_errors`] skipped-line errors.
    pub fn errors(&self) -> &[TraceError] {
        &self.errors
    }

    fn error(&self, field: TraceField, problem: Problem) -> TraceError {
        TraceError::new(self.name.clone(), self.line_no, field, problem)
    }

    /// The line's record, or `None` for a CSV header.
    fn parse_line(&mut self) -> Result<Option<TraceItem>, (TraceField, Problem)> {
        match self.options.format {
            TraceFormat::Mooncake => self.parse_mooncake().map(Some),
            TraceFormat::AzureCsv => self.parse_azure(),
        }
    }

    fn parse_azure(&mut self) -> Result<Option<TraceItem>, (TraceField, Problem)> {
        let text = std::str::from_utf8(&self.line)
            .map_err(|e| (TraceField::Line, Problem::Syntax(format!("not UTF-8: {e}"))))?;
        let Some(cols) = self.columns else {
            self.columns = Some(azure::parse_header(text)?);
            return Ok(None);
        };
        let (at, input, output) = azure::parse_row(text, &cols)?;
        let line = self.line_no;
        let (base, first_line) = *self.base.get_or_insert((at, line));
        let Ok(arrival) = u64::try_from(at - base) else {
            return Err((
                TraceField::AzureTimestamp,
                Problem::BeforeFirst { first_line },
            ));
        };
        self.accept(
            arrival,
            input,
            output,
            Vec::new(),
            None,
            None,
            TraceField::AzureTimestamp,
        )
        .map(Some)
    }

    fn parse_mooncake(&mut self) -> Result<TraceItem, (TraceField, Problem)> {
        parse_record(&self.line, &mut self.raw)
            .map_err(|msg| (TraceField::Json, Problem::Syntax(msg)))?;
        let raw = &self.raw;
        if !raw.is_object {
            return Err((TraceField::Record, Problem::NotAnObject));
        }
        if let Some(field) = raw.duplicate {
            return Err((field, Problem::Duplicate));
        }
        let arrival = millis_to_nanos(required(&raw.timestamp, TraceField::Timestamp)?)
            .map_err(|p| (TraceField::Timestamp, p))?;
        let input = token_count(required(&raw.input_length, TraceField::InputLength)?)
            .map_err(|p| (TraceField::InputLength, p))?;
        let output = token_count(required(&raw.output_length, TraceField::OutputLength)?)
            .map_err(|p| (TraceField::OutputLength, p))?;
        match raw.hash_ids {
            None => return Err((TraceField::HashIds, Problem::Missing)),
            Some(HashIds::NotArray) => return Err((TraceField::HashIds, Problem::ExpectedArray)),
            Some(HashIds::BadElement(index)) => {
                return Err((TraceField::HashIds, Problem::BadElement { index }))
            }
            Some(HashIds::List) => {}
        }
        let block = self.options.hash_block_tokens.max(1);
        let max_ids = u64::from(input).div_ceil(u64::from(block)) + 1;
        if raw.ids.len() as u64 > max_ids {
            return Err((
                TraceField::HashIds,
                Problem::TooManyHashIds {
                    got: raw.ids.len(),
                    max: max_ids,
                    block,
                },
            ));
        }
        let session = match &raw.session_id {
            None | Some(Scalar::Null) => None,
            Some(Scalar::Uint(v)) => Some(SessionId(*v)),
            Some(Scalar::Str(s)) => Some(session_id_from_str(s)),
            Some(_) => return Err((TraceField::SessionId, Problem::ExpectedStringOrInteger)),
        };
        let delay = match &raw.delay {
            None | Some(Scalar::Null) => None,
            Some(s) => Some(Duration::from_nanos(
                millis_to_nanos(s).map_err(|p| (TraceField::Delay, p))?,
            )),
        };
        let lora = crate::lora::name(raw.lora_name.as_ref())
            .map_err(|p| (TraceField::LoraName, p))?
            .map(str::to_string);
        let ids = self.raw.ids.clone();
        let mut item = self.accept(
            arrival,
            input,
            output,
            ids,
            session,
            delay,
            TraceField::Timestamp,
        )?;
        item.request.lora = lora.map(|n| self.loras.adapter(n));
        Ok(item)
    }

    /// Checks a parsed record's arrival against the previous one and, if it
    /// holds, turns the record into the next item.
    #[allow(clippy::too_many_arguments)]
    fn accept(
        &mut self,
        arrival: u64,
        input: u32,
        output: u32,
        prefix_hashes: Vec<u64>,
        session: Option<SessionId>,
        delay: Option<Duration>,
        time_field: TraceField,
    ) -> Result<TraceItem, (TraceField, Problem)> {
        if let Some((previous_nanos, previous_line)) = self.last_timestamp {
            if arrival < previous_nanos {
                return Err((
                    time_field,
                    Problem::Decreasing {
                        nanos: arrival,
                        previous_nanos,
                        previous_line,
                    },
                ));
            }
        }

        // Only an accepted record advances ids, turn counters and the
        // timestamp floor, so skipping a bad line leaves no trace of it.
        self.last_timestamp = Some((arrival, self.line_no));
        let turn = session.map(|sid| {
            let counter = self.turns.entry(sid).or_insert(0);
            let turn = *counter;
            *counter = counter.saturating_add(1);
            turn
        });
        let id = RequestId(self.next_id);
        self.next_id = self.next_id.wrapping_add(1);
        Ok(TraceItem {
            request: Request {
                id,
                prompt_tokens: input,
                max_output_tokens: output,
                prefix_hashes,
                hash_block_tokens: self.options.hash_block_tokens.max(1),
                session,
                arrival: Instant(arrival),
                lora: None,
            },
            turn,
            delay,
        })
    }
}

fn required(slot: &Option<Scalar>, field: TraceField) -> Result<&Scalar, (TraceField, Problem)> {
    match slot {
        None | Some(Scalar::Null) => Err((field, Problem::Missing)),
        Some(s) => Ok(s),
    }
}

/// Milliseconds (integer or float) to whole nanoseconds, rounding floats to
/// the nearest nanosecond.
fn millis_to_nanos(s: &Scalar) -> Result<u64, Problem> {
    const MAX_MS: u64 = u64::MAX / 1_000_000;
    match *s {
        Scalar::Uint(ms) => ms
            .checked_mul(1_000_000)
            .ok_or(Problem::TooLarge { max: MAX_MS }),
        Scalar::Float(ms) if ms >= 0.0 && ms.is_finite() => {
            let nanos = (ms * 1e6).round();
            // 2^64 is exactly representable; anything at or above it overflows.
            if nanos >= 18_446_744_073_709_551_616.0 {
                Err(Problem::TooLarge { max: MAX_MS })
            } else {
                Ok(nanos as u64)
            }
        }
        _ => Err(Problem::ExpectedNonNegativeNumber),
    }
}

fn token_count(s: &Scalar) -> Result<u32, Problem> {
    match *s {
        Scalar::Uint(0) => Err(Problem::Zero),
        Scalar::Uint(v) => u32::try_from(v).map_err(|_| Problem::TooLarge {
            max: u64::from(u32::MAX),
        }),
        _ => Err(Problem::ExpectedNonNegativeInteger),
    }
}

/// The UTF-8 byte order mark.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<TraceItem, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let status = match read_bounded_line(
                &mut self.input,
                &mut self.line,
                self.options.max_line_bytes,
            ) {
                Ok(s) => s,
                Err(e) => {
                    self.done = true;
                    self.line_no += 1;
                    return Some(Err(self.error(TraceField::Io, Problem::Io(e.to_string()))));
                }
            };
            let outcome = match status {
                LineRead::Eof => {
                    self.done = true;
                    return None;
                }
                // Skipping on would read without end: fatal.
                LineRead::Endless => {
                    self.done = true;
                    self.line_no += 1;
                    self.stats.lines += 1;
                    let limit = self.options.max_line_bytes;
                    return Some(Err(self.error(TraceField::Line, Problem::Endless { limit })));
                }
                LineRead::TooLong => {
                    self.line_no += 1;
                    self.stats.lines += 1;
                    Err((
                        TraceField::Line,
                        Problem::TooLong {
                            limit: self.options.max_line_bytes,
                        },
                    ))
                }
                LineRead::Line => {
                    self.line_no += 1;
                    self.stats.lines += 1;
                    // A UTF-8 byte order mark opens the file, not the
                    // first record (editors on Windows write one).
                    if self.line_no == 1 && self.line.starts_with(UTF8_BOM) {
                        self.line.drain(..UTF8_BOM.len());
                    }
                    if self.line.iter().all(u8::is_ascii_whitespace) {
                        self.stats.blank_lines += 1;
                        continue;
                    }
                    self.parse_line()
                }
            };
            match outcome {
                Ok(Some(item)) => {
                    self.stats.records += 1;
                    return Some(Ok(item));
                }
                // A CSV header: no record.
                Ok(None) => {}
                Err((field, problem)) => {
                    let err = self.error(field, problem);
                    // A bad header leaves nothing readable: always fatal.
                    if self.options.skip_bad_lines && field != TraceField::Header {
                        self.stats.bad_lines += 1;
                        if self.errors.len() < self.options.kept_errors {
                            self.errors.push(err);
                        }
                    } else {
                        self.done = true;
                        return Some(Err(err));
                    }
                }
            }
        }
        None
    }
}

impl<R: BufRead> std::iter::FusedIterator for TraceReader<R> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(
        text: &str,
        options: ReaderOptions,
    ) -> (
        Vec<Result<TraceItem, TraceError>>,
        ReaderStats,
        Vec<TraceError>,
    ) {
        let mut r = TraceReader::new(text.as_bytes(), options);
        let items: Vec<_> = r.by_ref().collect();
        (items, r.stats(), r.errors().to_vec())
    }

    fn first_error(text: &str) -> String {
        let (items, _, _) = read_all(text, ReaderOptions::new("trace.jsonl"));
        match items.into_iter().find_map(Result::err) {
            Some(e) => e.to_string(),
            None => panic!("no error for {text:?}"),
        }
    }

    const VALID: &str =
        r#"{"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [7, 8]}"#;

    #[test]
    fn reads_mooncake_records() {
        let text = format!(
            "{VALID}\n\n{}\n",
            r#"{"timestamp": 2.5, "input_length": 512, "output_length": 3, "hash_ids": [7], "session_id": "s1", "delay": 100}"#
        );
        let (items, stats, _) = read_all(&text, ReaderOptions::default());
        let items: Vec<TraceItem> = items.into_iter().map(Result::unwrap).collect();
        assert_eq!(items.len(), 2);
        let a = &items[0].request;
        assert_eq!(a.id, RequestId(0));
        assert_eq!((a.prompt_tokens, a.max_output_tokens), (1000, 10));
        assert_eq!(a.prefix_hashes, vec![7, 8]);
        assert_eq!(a.hash_block_tokens, 512);
        assert_eq!(a.arrival, Instant::ZERO);
        assert_eq!(
            (a.session, items[0].turn, items[0].delay),
            (None, None, None)
        );
        let b = &items[1];
        assert_eq!(b.request.id, RequestId(1));
        assert_eq!(b.request.arrival, Instant(2_500_000));
        assert_eq!(b.request.session, Some(session_id_from_str("s1")));
        assert_eq!(b.turn, Some(0));
        assert_eq!(b.delay, Some(Duration::from_millis(100)));
        assert_eq!(
            stats,
            ReaderStats {
                lines: 3,
                records: 2,
                blank_lines: 1,
                bad_lines: 0
            }
        );
    }

    #[test]
    fn counts_turns_per_session() {
        let text = [
            r#"{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [], "session_id": 9}"#,
            r#"{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [], "session_id": "9"}"#,
            r#"{"timestamp": 2, "input_length": 5, "output_length": 1, "hash_ids": [], "session_id": 9, "delay": 0.25}"#,
        ]
        .join("\n");
        let (items, _, _) = read_all(&text, ReaderOptions::default());
        let items: Vec<TraceItem> = items.into_iter().map(Result::unwrap).collect();
        assert_eq!(items[0].request.session, Some(SessionId(9)));
        assert_eq!(items[0].turn, Some(0));
        assert_ne!(items[1].request.session, Some(SessionId(9)));
        assert_eq!(items[1].turn, Some(0));
        assert_eq!(items[2].turn, Some(1));
        assert_eq!(items[2].delay, Some(Duration::from_micros(250)));
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let cases = [
            (
                r#"{"timestamp": 0, "input_length": -1, "output_length": 1, "hash_ids": []}"#,
                "trace.jsonl:2: input_length: expected a non-negative integer",
            ),
            (
                r#"{"timestamp": 0, "input_length": 1.5, "output_length": 1, "hash_ids": []}"#,
                "trace.jsonl:2: input_length: expected a non-negative integer",
            ),
            (
                r#"{"timestamp": 0, "input_length": 4294967296, "output_length": 1, "hash_ids": []}"#,
                "trace.jsonl:2: input_length: must be at most 4294967295",
            ),
            (
                r#"{"timestamp": 0, "input_length": 1, "output_length": 0, "hash_ids": []}"#,
                "trace.jsonl:2: output_length: must be at least 1",
            ),
            (
                r#"{"input_length": 1, "output_length": 1, "hash_ids": []}"#,
                "trace.jsonl:2: timestamp: missing",
            ),
            (
                r#"{"timestamp": "0", "input_length": 1, "output_length": 1, "hash_ids": []}"#,
                "trace.jsonl:2: timestamp: expected a non-negative number",
            ),
            (
                r#"{"timestamp": 0, "input_length": 1, "output_length": 1}"#,
                "trace.jsonl:2: hash_ids: missing",
            ),
            (
                r#"{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": 5}"#,
                "trace.jsonl:2: hash_ids: expected an array of integers",
            ),
            (
                r#"{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1, "a"]}"#,
                "trace.jsonl:2: hash_ids: element 1: expected a non-negative 64-bit integer",
            ),
            (
                r#"{"timestamp": 0, "input_length": 513, "output_length": 1, "hash_ids": [1, 2, 3, 4]}"#,
                "trace.jsonl:2: hash_ids: 4 ids but ceil(input_length / 512) + 1 = 3 at most",
            ),
            (
                r#"{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [], "session_id": true}"#,
                "trace.jsonl:2: session_id: expected a string or a non-negative integer",
            ),
            (
                r#"{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [], "delay": -5}"#,
                "trace.jsonl:2: delay: expected a non-negative number",
            ),
            (
                r#"{"timestamp": 0, "timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": []}"#,
                "trace.jsonl:2: timestamp: appears more than once",
            ),
            ("[1, 2]", "trace.jsonl:2: record: expected a JSON object"),
            (
                r#"{"timestamp": 18446744073709552, "input_length": 1, "output_length": 1, "hash_ids": []}"#,
                "trace.jsonl:2: timestamp: must be at most 18446744073709",
            ),
        ];
        for (line, want) in cases {
            assert_eq!(first_error(&format!("{VALID}\n{line}\n")), want, "{line}");
        }
        let syntax = first_error(&format!("{VALID}\n{{\"timestamp\": }}\n"));
        assert!(
            syntax.starts_with("trace.jsonl:2: json: expected value at column"),
            "{syntax}"
        );
    }

    #[test]
    fn exact_hash_id_bound_is_accepted() {
        let line =
            r#"{"timestamp": 0, "input_length": 513, "output_length": 1, "hash_ids": [1, 2, 3]}"#;
        let (items, _, _) = read_all(line, ReaderOptions::default());
        assert!(items[0].is_ok());
    }

    #[test]
    fn decreasing_timestamp_names_both_lines() {
        let text = [
            r#"{"timestamp": 1500, "input_length": 1, "output_length": 1, "hash_ids": []}"#,
            r#"{"timestamp": 1200.5, "input_length": 1, "output_length": 1, "hash_ids": []}"#,
        ]
        .join("\n");
        assert_eq!(
            first_error(&text),
            "trace.jsonl:2: timestamp: 1200.5 ms is earlier than 1500 ms on line 1 (timestamps must not decrease)"
        );
    }

    #[test]
    fn strict_mode_stops_after_the_first_error() {
        let text = format!("{VALID}\nnot json\n{VALID}\n");
        let (items, _, _) = read_all(&text, ReaderOptions::default());
        assert_eq!(items.len(), 2);
        assert!(items[0].is_ok());
        assert!(items[1].is_err());
    }

    #[test]
    fn skip_mode_counts_and_keeps_errors() {
        let mut opts = ReaderOptions::new("t").skipping_bad_lines();
        opts.kept_errors = 2;
        opts.max_line_bytes = 200;
        let long = format!("{{\"x\": \"{}\"}}", "a".repeat(300));
        let earlier = r#"{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": []}"#;
        let later = r#"{"timestamp": 5, "input_length": 1, "output_length": 1, "hash_ids": []}"#;
        let text = format!("{later}\nbad\n{long}\n{earlier}\n{later}\n");
        let (items, stats, errors) = read_all(&text, opts);
        let items: Vec<TraceItem> = items.into_iter().map(Result::unwrap).collect();
        assert_eq!(items.len(), 2);
        // Ids stay dense across skipped lines.
        assert_eq!(items[1].request.id, RequestId(1));
        assert_eq!(stats.bad_lines, 3);
        assert_eq!(errors.len(), 2);
        assert_eq!(errors[0].line(), 2);
        assert_eq!(errors[1].to_string(), "t:3: line: longer than 200 bytes");
    }

    #[test]
    fn a_byte_order_mark_opens_the_file_not_the_record() {
        let line = r#"{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": []}"#;
        let (items, stats, _) = read_all(
            &format!("\u{feff}{line}\n{line}\n"),
            ReaderOptions::new("t"),
        );
        assert!(items.iter().all(Result::is_ok), "{items:?}");
        assert_eq!(stats.records, 2);
        // Only the file's first line may carry one.
        let (items, _, _) = read_all(
            &format!("{line}\n\u{feff}{line}\n"),
            ReaderOptions::new("t"),
        );
        assert!(items[1].is_err());
    }

    #[test]
    fn io_errors_end_the_stream() {
        struct Failing;
        impl std::io::Read for Failing {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("disk on fire"))
            }
        }
        let opts = ReaderOptions::new("f").skipping_bad_lines();
        let mut r = TraceReader::new(std::io::BufReader::new(Failing), opts);
        let e = r.next().unwrap().unwrap_err();
        assert_eq!(e.to_string(), "f:1: io: disk on fire");
        assert!(r.next().is_none());
    }

    #[test]
    fn reads_azure_csv() {
        let text = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
            2023-11-16 18:15:46.6805900,4808,10\n\
            2023-11-16 18:15:50.0000000,1000,200\n";
        let opts = ReaderOptions::new("azure.csv").with_format(TraceFormat::AzureCsv);
        let (items, stats, _) = read_all(text, opts);
        let items: Vec<TraceItem> = items.into_iter().map(Result::unwrap).collect();
        assert_eq!(items.len(), 2);
        assert_eq!(stats.records, 2);
        let (a, b) = (&items[0].request, &items[1].request);
        assert_eq!((a.id, a.arrival), (RequestId(0), Instant::ZERO));
        assert_eq!((a.prompt_tokens, a.max_output_tokens), (4808, 10));
        assert!(a.prefix_hashes.is_empty());
        assert_eq!(b.arrival, Instant(3_319_410_000));
        assert_eq!(
            TraceFormat::from_path("x/t.CSV".as_ref()),
            TraceFormat::AzureCsv
        );
        assert_eq!(
            TraceFormat::from_path("t.jsonl".as_ref()),
            TraceFormat::Mooncake
        );
    }

    #[test]
    fn azure_errors_name_line_and_column() {
        let opts = || ReaderOptions::new("a.csv").with_format(TraceFormat::AzureCsv);
        let first = |text: &str, o: ReaderOptions| {
            let (items, _, _) = read_all(text, o);
            items
                .into_iter()
                .find_map(Result::err)
                .map(|e| e.to_string())
        };
        let head = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
        assert_eq!(
            first(&format!("{head}1.0,5,0\n"), opts()).as_deref(),
            Some("a.csv:2: GeneratedTokens: must be at least 1")
        );
        assert_eq!(
            first(&format!("{head}noon,5,1\n"), opts()).unwrap(),
            format!("a.csv:2: TIMESTAMP: {}", Problem::BadTimestamp)
        );
        assert_eq!(
            first(&format!("{head}5,1,1\n4,1,1\n"), opts()).as_deref(),
            Some("a.csv:3: TIMESTAMP: earlier than the first row (line 2); timestamps must not decrease")
        );
        assert_eq!(
            first(&format!("{head}5,1,1\n7,1,1\n6,1,1\n"), opts()).as_deref(),
            Some("a.csv:4: TIMESTAMP: 1000 ms is earlier than 2000 ms on line 3 (timestamps must not decrease)")
        );
        // A bad header is fatal even when skipping bad lines.
        let (items, _, _) = read_all("time,in,out\n1,1,1\n", opts().skipping_bad_lines());
        assert_eq!(
            items[0].as_ref().unwrap_err().to_string(),
            "a.csv:1: header: no TIMESTAMP column"
        );
    }

    #[test]
    fn trace_block_size_scales_the_hash_id_bound() {
        let line = r#"{"timestamp": 0, "input_length": 64, "output_length": 1, "hash_ids": [1, 2, 3, 4, 5]}"#;
        let (items, _, _) = read_all(line, ReaderOptions::default().with_hash_block_tokens(16));
        let r = &items[0].as_ref().unwrap().request;
        assert_eq!(r.hash_block_tokens, 16);
        let (items, _, _) = read_all(line, ReaderOptions::new("t").with_hash_block_tokens(32));
        assert_eq!(
            items[0].as_ref().unwrap_err().to_string(),
            "t:1: hash_ids: 5 ids but ceil(input_length / 32) + 1 = 3 at most"
        );
    }

    #[test]
    fn first_request_id_offsets_ids() {
        let opts = ReaderOptions {
            first_request_id: 100,
            ..ReaderOptions::default()
        };
        let (items, _, _) = read_all(VALID, opts);
        assert_eq!(items[0].as_ref().unwrap().request.id, RequestId(100));
    }
}
