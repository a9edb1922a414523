//! Typed errors of the observed-run readers: every refusal names the file,
//! where in it (a plain file's line and field, a bench file's record, array
//! and element) and what is wrong.

use crate::file::FileError;
use std::fmt;
use std::path::PathBuf;

/// A field of a plain per-request file (a JSONL key or a CSV column).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlainField {
    /// `id`.
    Id,
    /// `arrival` (s).
    Arrival,
    /// `first_token` (s).
    FirstToken,
    /// `last_token` (s).
    LastToken,
    /// `input_tokens`.
    InputTokens,
    /// `output_tokens`.
    OutputTokens,
    /// `queued` (s).
    Queued,
    /// `scheduled` (s).
    Scheduled,
    /// `hash_ids`.
    HashIds,
    /// `token_ids`.
    TokenIds,
}

impl PlainField {
    /// Every field, in the order the docs list them.
    pub const ALL: [PlainField; 10] = [
        PlainField::Id,
        PlainField::Arrival,
        PlainField::FirstToken,
        PlainField::LastToken,
        PlainField::InputTokens,
        PlainField::OutputTokens,
        PlainField::Queued,
        PlainField::Scheduled,
        PlainField::HashIds,
        PlainField::TokenIds,
    ];

    /// The key (and CSV column) name.
    pub const fn name(self) -> &'static str {
        match self {
            PlainField::Id => "id",
            PlainField::Arrival => "arrival",
            PlainField::FirstToken => "first_token",
            PlainField::LastToken => "last_token",
            PlainField::InputTokens => "input_tokens",
            PlainField::OutputTokens => "output_tokens",
            PlainField::Queued => "queued",
            PlainField::Scheduled => "scheduled",
            PlainField::HashIds => "hash_ids",
            PlainField::TokenIds => "token_ids",
        }
    }

    /// The field a key names, if any.
    pub fn from_name(name: &str) -> Option<PlainField> {
        PlainField::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// A per-request array of a bench result (vLLM's or SGLang's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BenchArray {
    /// `input_lens`: prompt tokens.
    InputLens,
    /// `output_lens`: generated tokens (0 for a failed request).
    OutputLens,
    /// `ttfts`: seconds from send to the first token.
    Ttfts,
    /// `itls`: per request, the seconds between streamed chunks.
    Itls,
    /// `start_times`: the client's `perf_counter` when it sent the request.
    StartTimes,
    /// `latencies` (vLLM): seconds from send to the last token.
    Latencies,
    /// `e2els`: the same under another name.
    E2els,
    /// `errors`: `""` for a request that succeeded.
    Errors,
}

impl BenchArray {
    /// The JSON key.
    pub const fn name(self) -> &'static str {
        match self {
            BenchArray::InputLens => "input_lens",
            BenchArray::OutputLens => "output_lens",
            BenchArray::Ttfts => "ttfts",
            BenchArray::Itls => "itls",
            BenchArray::StartTimes => "start_times",
            BenchArray::Latencies => "latencies",
            BenchArray::E2els => "e2els",
            BenchArray::Errors => "errors",
        }
    }
}

/// Where in the file a problem is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    /// The file as a whole.
    File,
    /// A plain file's line (1-based), and the field when one is at fault.
    Line {
        /// The line, counting from 1.
        line: u64,
        /// The field, if the problem is one field's.
        field: Option<PlainField>,
    },
    /// A plain CSV file's header row, and the column when one is at fault.
    Header {
        /// The column, if the problem is one column's.
        field: Option<PlainField>,
    },
    /// A bench file's result record: the JSON value at this line (1-based).
    Record {
        /// The line the record starts on.
        line: u64,
    },
    /// A bench file's per-request array, and the element when one is at fault.
    Array {
        /// The line the record starts on.
        line: u64,
        /// The array.
        array: BenchArray,
        /// The element (0-based request index), if one is at fault.
        index: Option<usize>,
    },
}

/// What is wrong.
#[derive(Clone, Debug, PartialEq)]
pub enum Problem {
    /// The JSON does not parse: serde_json's description with its column.
    Syntax(String),
    /// Expected a JSON object.
    NotAnObject,
    /// The file holds no record.
    Empty,
    /// `--format auto` could not tell the format from the content.
    Undetected,
    /// The record asked for is not in the file.
    NoSuchRecord {
        /// The record asked for (1-based).
        asked: usize,
        /// Records in the file.
        records: usize,
    },
    /// A required field or column is absent (or `null`).
    Missing,
    /// The bench result has no per-request arrays: it was saved without
    /// the flag that writes them.
    NoDetails {
        /// The flag that writes them (`--save-detailed`, `--output-details`).
        flag: &'static str,
    },
    /// The bench result has no per-request send times, so arrivals are
    /// unknown; nothing is reconstructed.
    NoArrivals {
        /// The format, in words.
        format: &'static str,
    },
    /// A per-request array's length differs from `input_lens`'.
    UnequalLength {
        /// Its length.
        len: usize,
        /// `input_lens`' length.
        expected: usize,
    },
    /// More requests than a run may have.
    TooManyRequests {
        /// The limit.
        max: usize,
    },
    /// Expected a number.
    ExpectedNumber,
    /// `NaN` or an infinity where a time belongs.
    NonFinite,
    /// A negative time.
    Negative,
    /// Expected a non-negative integer.
    ExpectedCount,
    /// A count that must be at least 1.
    Zero,
    /// A value over its bound.
    TooLarge {
        /// The largest accepted value.
        max: u64,
    },
    /// Expected an array.
    ExpectedArray,
    /// An array with more elements than it may have.
    TooManyElements {
        /// The limit.
        max: usize,
    },
    /// An array element is not what the array holds.
    BadElement {
        /// Its 0-based index.
        index: usize,
    },
    /// Expected a string.
    ExpectedString,
    /// Expected a string or a non-negative integer (`id`).
    ExpectedId,
    /// The first token came after the last.
    FirstAfterLast {
        /// First-token time (s from arrival for bench files, the file's
        /// clock for plain ones).
        first: f64,
        /// Last-token time, likewise.
        last: f64,
    },
    /// A time earlier than the arrival (or `scheduled` before `queued`).
    BeforeArrival {
        /// The time.
        at: f64,
        /// What it must not precede.
        floor: f64,
    },
    /// A key no plain file has (typos are errors, not ignored).
    UnknownKey(String),
    /// A CSV column no plain file has.
    UnknownColumn(String),
    /// A key or column given twice.
    Duplicate,
    /// A CSV row with a different number of fields than the header.
    FieldCount {
        /// Fields in the row.
        got: usize,
        /// Columns in the header.
        expected: usize,
    },
    /// More hash ids than the prompt has blocks, plus one.
    TooManyHashIds {
        /// Ids given.
        got: usize,
        /// `ceil(input_tokens / block_size) + 1`.
        max: u64,
    },
    /// More token ids than `input_tokens`.
    TooManyTokenIds {
        /// Ids given.
        got: usize,
        /// `input_tokens`.
        input_tokens: u32,
    },
    /// Both `hash_ids` and `token_ids` on one request.
    BothPrefixes,
    /// `hash_ids` on one request and `token_ids` on another: their id
    /// spaces would collide.
    MixedPrefixes {
        /// The line that used the other one first.
        other_line: u64,
    },
    /// The run spans more seconds than replay's clock holds.
    SpanTooLong {
        /// The longest span, in seconds.
        max_s: f64,
    },
}

/// Why an observed run was not read.
#[derive(Debug)]
pub enum ObservedError {
    /// The file could not be read at all (not a regular file, too large,
    /// not UTF-8, I/O).
    File(FileError),
    /// The file was read; its content is wrong here.
    At {
        /// The file (or the name given to the text).
        path: PathBuf,
        /// Where.
        at: Location,
        /// What.
        problem: Problem,
    },
}

impl ObservedError {
    /// The problem, when the content is at fault.
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            ObservedError::File(_) => None,
            ObservedError::At { problem, .. } => Some(problem),
        }
    }

    /// The location, when the content is at fault.
    pub fn location(&self) -> Option<Location> {
        match self {
            ObservedError::File(_) => None,
            ObservedError::At { at, .. } => Some(*at),
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Location::File => Ok(()),
            Location::Line { line, field: None } => write!(f, "line {line}: "),
            Location::Line {
                line,
                field: Some(field),
            } => write!(f, "line {line}: {}: ", field.name()),
            Location::Header { field: None } => f.write_str("header: "),
            Location::Header { field: Some(field) } => write!(f, "header: {}: ", field.name()),
            Location::Record { line } => write!(f, "record at line {line}: "),
            Location::Array {
                line,
                array,
                index: None,
            } => write!(f, "record at line {line}: {}: ", array.name()),
            Location::Array {
                line,
                array,
                index: Some(i),
            } => write!(f, "record at line {line}: {}[{i}]: ", array.name()),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Syntax(msg) => write!(f, "not JSON: {msg}"),
            Problem::NotAnObject => f.write_str("expected a JSON object"),
            Problem::Empty => f.write_str("no record in the file"),
            Problem::Undetected => f.write_str(
                "cannot tell the format (a vLLM bench JSON has `ttfts`, SGLang's \
                 `mean_e2e_latency_ms`, a plain file `arrival`); name it",
            ),
            Problem::NoSuchRecord { asked, records } => {
                write!(f, "record {asked} asked for; the file has {records}")
            }
            Problem::Missing => f.write_str("missing"),
            Problem::NoDetails { flag } => {
                write!(f, "no per-request arrays: the run was saved without {flag}")
            }
            Problem::NoArrivals { format } => write!(
                f,
                "missing: {format} has no per-request send times, so arrivals are unknown \
                 (nothing is reconstructed); give a plain file with `arrival`"
            ),
            Problem::UnequalLength { len, expected } => {
                write!(f, "{len} elements, but input_lens has {expected}")
            }
            Problem::TooManyRequests { max } => write!(f, "more than {max} requests"),
            Problem::ExpectedNumber => f.write_str("expected a number"),
            Problem::NonFinite => f.write_str("not a finite number"),
            Problem::Negative => f.write_str("negative"),
            Problem::ExpectedCount => f.write_str("expected a non-negative integer"),
            Problem::Zero => f.write_str("must be at least 1"),
            Problem::TooLarge { max } => write!(f, "must be at most {max}"),
            Problem::ExpectedArray => f.write_str("expected an array"),
            Problem::TooManyElements { max } => write!(f, "more than {max} elements"),
            Problem::BadElement { index } => write!(f, "element {index} is not valid here"),
            Problem::ExpectedString => f.write_str("expected a string"),
            Problem::ExpectedId => f.write_str("expected a string or a non-negative integer"),
            Problem::FirstAfterLast { first, last } => {
                write!(f, "first token at {first} s is after the last at {last} s")
            }
            Problem::BeforeArrival { at, floor } => {
                write!(f, "{at} s is before {floor} s")
            }
            Problem::UnknownKey(k) => {
                write!(f, "unknown key {k:?} (a plain file has {})", field_list())
            }
            Problem::UnknownColumn(c) => write!(
                f,
                "unknown column {c:?} (a plain file has {})",
                field_list()
            ),
            Problem::Duplicate => f.write_str("given more than once"),
            Problem::FieldCount { got, expected } => {
                write!(f, "{got} fields, but the header has {expected}")
            }
            Problem::TooManyHashIds { got, max } => write!(
                f,
                "{got} hash ids, more than the prompt's blocks plus one ({max})"
            ),
            Problem::TooManyTokenIds { got, input_tokens } => write!(
                f,
                "{got} token ids, more than input_tokens ({input_tokens})"
            ),
            Problem::BothPrefixes => f.write_str("both hash_ids and token_ids; give one"),
            Problem::MixedPrefixes { other_line } => write!(
                f,
                "line {other_line} gave the other of hash_ids and token_ids; a file uses one"
            ),
            Problem::SpanTooLong { max_s } => {
                write!(f, "the run spans more than {max_s} s")
            }
        }
    }
}

fn field_list() -> String {
    let names: Vec<&str> = PlainField::ALL.iter().map(|f| f.name()).collect();
    names.join(", ")
}

impl fmt::Display for ObservedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ObservedError::File(e) => write!(f, "{e}"),
            ObservedError::At { path, at, problem } => {
                write!(f, "{}: {at}{problem}", path.display())
            }
        }
    }
}

impl std::error::Error for ObservedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ObservedError::File(e) => Some(e),
            ObservedError::At { .. } => None,
        }
    }
}

impl From<FileError> for ObservedError {
    fn from(e: FileError) -> Self {
        ObservedError::File(e)
    }
}
