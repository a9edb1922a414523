//! Typed trace errors that say where the input went wrong.

use core::fmt;
use std::sync::Arc;

/// The longest LoRA adapter name a trace record may carry, in bytes
/// (`crate::lora::MAX_NAME_BYTES`).
pub const MAX_ADAPTER_NAME_BYTES: usize = 256;

/// The part of a trace line an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TraceField {
    /// The raw line (length, encoding).
    Line,
    /// JSON syntax.
    Json,
    /// The record as a whole (not an object).
    Record,
    /// `timestamp`.
    Timestamp,
    /// `input_length`.
    InputLength,
    /// `output_length`.
    OutputLength,
    /// `hash_ids`.
    HashIds,
    /// `session_id`.
    SessionId,
    /// `delay`.
    Delay,
    /// `lora_name`: the LoRA adapter the request runs on.
    LoraName,
    /// The header row of a CSV trace.
    Header,
    /// `TIMESTAMP` of an Azure LLM inference trace (CSV).
    AzureTimestamp,
    /// `ContextTokens` of an Azure trace: prompt tokens.
    ContextTokens,
    /// `GeneratedTokens` of an Azure trace: tokens to generate.
    GeneratedTokens,
    /// Reading the underlying stream failed.
    Io,
}

impl TraceField {
    /// The name used in messages: the JSON key for record fields.
    pub fn name(self) -> &'static str {
        match self {
            TraceField::Line => "line",
            TraceField::Json => "json",
            TraceField::Record => "record",
            TraceField::Timestamp => "timestamp",
            TraceField::InputLength => "input_length",
            TraceField::OutputLength => "output_length",
            TraceField::HashIds => "hash_ids",
            TraceField::SessionId => "session_id",
            TraceField::Delay => "delay",
            TraceField::LoraName => "lora_name",
            TraceField::Header => "header",
            TraceField::AzureTimestamp => "TIMESTAMP",
            TraceField::ContextTokens => "ContextTokens",
            TraceField::GeneratedTokens => "GeneratedTokens",
            TraceField::Io => "io",
        }
    }
}

impl fmt::Display for TraceField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What is wrong with a field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The line exceeds the reader's byte limit.
    TooLong {
        /// The limit in bytes.
        limit: usize,
    },
    /// The line exceeds the limit and has no end within a bounded skip
    /// past it: the input is not a file of lines; always fatal.
    Endless {
        /// The limit in bytes.
        limit: usize,
    },
    /// The JSON does not parse; serde_json's description.
    Syntax(String),
    /// The line is valid JSON but not an object.
    NotAnObject,
    /// A required field is absent.
    Missing,
    /// A field appears twice in one object.
    Duplicate,
    /// Expected an integer `>= 0`.
    ExpectedNonNegativeInteger,
    /// Expected a finite number `>= 0`.
    ExpectedNonNegativeNumber,
    /// Expected a string or a non-negative integer.
    ExpectedStringOrInteger,
    /// Expected an array.
    ExpectedArray,
    /// Expected an adapter name: a non-empty string of at most
    /// [`MAX_ADAPTER_NAME_BYTES`] bytes, or `null`.
    ExpectedAdapterName,
    /// An array element is not a non-negative 64-bit integer.
    BadElement {
        /// Zero-based position of the first bad element.
        index: usize,
    },
    /// The value is larger than the model can represent.
    TooLarge {
        /// The largest accepted value.
        max: u64,
    },
    /// The value must be at least 1.
    Zero,
    /// More hash ids than the prompt has trace blocks, plus one.
    TooManyHashIds {
        /// Ids present.
        got: usize,
        /// `ceil(input_length / block) + 1`.
        max: u64,
        /// Tokens per hash id (the trace block size, 512 for Mooncake).
        block: u32,
    },
    /// A CSV header lacks a column the format needs.
    MissingColumn {
        /// The column's name.
        column: &'static str,
    },
    /// A CSV row has fewer fields than its header.
    MissingField,
    /// Not a date-time of the form `YYYY-MM-DD HH:MM:SS[.fraction][Z|+HH:MM]`
    /// nor a number of seconds.
    BadTimestamp,
    /// The timestamp is earlier than the previous record's.
    Decreasing {
        /// This record's timestamp in nanoseconds.
        nanos: u64,
        /// The previous record's timestamp in nanoseconds.
        previous_nanos: u64,
        /// The previous record's line.
        previous_line: u64,
    },
    /// A CSV row is earlier than the first row (arrivals count from it).
    BeforeFirst {
        /// The first row's line.
        first_line: u64,
    },
    /// The stream failed; the I/O error's description.
    Io(String),
}

/// Milliseconds with up to six decimals, exact for whole nanoseconds.
pub(crate) struct Millis(pub u64);

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.0 / 1_000_000;
        let mut frac = self.0 % 1_000_000;
        if frac == 0 {
            return write!(f, "{whole}");
        }
        let mut digits = 6;
        while frac.is_multiple_of(10) {
            frac /= 10;
            digits -= 1;
        }
        write!(f, "{whole}.{frac:0digits$}")
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::TooLong { limit } => write!(f, "longer than {limit} bytes"),
            Problem::Endless { limit } => write!(
                f,
                "longer than {limit} bytes with no line end in {} times that: not a file of lines",
                crate::line::SKIP_FACTOR
            ),
            Problem::Syntax(msg) => write!(f, "{msg}"),
            Problem::NotAnObject => f.write_str("expected a JSON object"),
            Problem::Missing => f.write_str("missing"),
            Problem::Duplicate => f.write_str("appears more than once"),
            Problem::ExpectedNonNegativeInteger => f.write_str("expected a non-negative integer"),
            Problem::ExpectedNonNegativeNumber => f.write_str("expected a non-negative number"),
            Problem::ExpectedStringOrInteger => {
                f.write_str("expected a string or a non-negative integer")
            }
            Problem::ExpectedArray => f.write_str("expected an array of integers"),
            Problem::ExpectedAdapterName => write!(
                f,
                "expected an adapter name (a non-empty string of at most {} bytes) or null",
                MAX_ADAPTER_NAME_BYTES
            ),
            Problem::BadElement { index } => {
                write!(f, "element {index}: expected a non-negative 64-bit integer")
            }
            Problem::TooLarge { max } => write!(f, "must be at most {max}"),
            Problem::Zero => f.write_str("must be at least 1"),
            Problem::TooManyHashIds { got, max, block } => write!(
                f,
                "{got} ids but ceil(input_length / {block}) + 1 = {max} at most"
            ),
            Problem::MissingColumn { column } => write!(f, "no {column} column"),
            Problem::MissingField => f.write_str("fewer fields than the header names"),
            Problem::BadTimestamp => f.write_str(
                "expected a date-time like 2023-11-16 18:15:46.6805900 (optionally with Z or +HH:MM) or a number of seconds",
            ),
            Problem::Decreasing {
                nanos,
                previous_nanos,
                previous_line,
            } => write!(
                f,
                "{} ms is earlier than {} ms on line {previous_line} (timestamps must not decrease)",
                Millis(*nanos),
                Millis(*previous_nanos)
            ),
            Problem::BeforeFirst { first_line } => write!(
                f,
                "earlier than the first row (line {first_line}); timestamps must not decrease"
            ),
            Problem::Io(msg) => write!(f, "{msg}"),
        }
    }
}

/// A malformed or unreadable trace line. Displays as
/// `FILE:LINE: FIELD: problem`, e.g.
/// `trace.jsonl:17: input_length: expected a non-negative integer`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceError {
    source_name: Arc<str>,
    line: u64,
    field: TraceField,
    problem: Problem,
}

impl TraceError {
    pub(crate) fn new(
        source_name: Arc<str>,
        line: u64,
        field: TraceField,
        problem: Problem,
    ) -> Self {
        TraceError {
            source_name,
            line,
            field,
            problem,
        }
    }

    /// The name the reader was given for its input (usually a file name).
    pub fn source_name(&self) -> &str {
        &self.source_name
    }

    /// One-based line number.
    pub fn line(&self) -> u64 {
        self.line
    }

    /// The field at fault.
    pub fn field(&self) -> TraceField {
        self.field
    }

    /// What is wrong.
    pub fn problem(&self) -> &Problem {
        &self.problem
    }
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {}: {}",
            self.source_name, self.line, self.field, self.problem
        )
    }
}

impl std::error::Error for TraceError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_file_line_field_problem() {
        let e = TraceError::new(
            Arc::from("trace.jsonl"),
            17,
            TraceField::InputLength,
            Problem::ExpectedNonNegativeInteger,
        );
        assert_eq!(
            e.to_string(),
            "trace.jsonl:17: input_length: expected a non-negative integer"
        );
    }

    #[test]
    fn millis_are_exact() {
        assert_eq!(Millis(0).to_string(), "0");
        assert_eq!(Millis(1_500_000).to_string(), "1.5");
        assert_eq!(Millis(1_000_001).to_string(), "1.000001");
        assert_eq!(Millis(12_000_000).to_string(), "12");
        assert_eq!(Millis(u64::MAX).to_string(), "18446744073709.551615");
    }
}
