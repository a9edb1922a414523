//! Step-time profile files (`--perf profile:FILE`): JSON read into a checked
//! [`handoff_perf::PerfProfile`].
//!
//! The format (times in ms; `ms[i][j]` is the time at the first axis's
//! `i`-th point and the second axis's `j`-th; `profiles/README.md` has an
//! annotated example):
//!
//! ```json
//! {
//!   "name": "qwen3-4b-a100-sglang",
//!   "description": "what ran (optional)",
//!   "source": "where the measurements come from",
//!   "derivation": "how the tables were made from them (optional)",
//!   "pass_overhead_ms": 7.2,
//!   "prefill": { "new_tokens": [1, 1024], "cached_tokens": [0, 4096],
//!                "ms": [[11.4, 11.5], [40.9, 51.6]] },
//!   "decode": { "batch": [1, 64], "context_tokens": [1024, 65536],
//!               "ms": [[7.9, 12.0], [8.4, 16.3]] }
//! }
//! ```
//!
//! Unknown keys are refused. Syntax errors name the line and column;
//! table errors name the table, field and cell ([`ProfileError`]).

use handoff_perf::PerfProfile;
use handoff_perf::PerfTable;
use handoff_perf::ProfileError;
use handoff_perf::TableKind;
use serde::Deserialize;
use std::io::Read;
use std::path::Path;

/// Largest profile file read (checked before reading).
pub const MAX_PROFILE_BYTES: u64 = 1 << 20;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    name: String,
    #[serde(default)]
    #[allow(dead_code)]
    description: String,
    source: String,
    #[serde(default)]
    #[allow(dead_code)]
    derivation: String,
    pass_overhead_ms: f64,
    prefill: PrefillFile,
    decode: DecodeFile,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PrefillFile {
    new_tokens: Vec<f64>,
    cached_tokens: Vec<f64>,
    ms: Vec<Vec<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecodeFile {
    batch: Vec<f64>,
    context_tokens: Vec<f64>,
    ms: Vec<Vec<f64>>,
}

/// Why a profile file was refused.
#[derive(Debug)]
pub enum ProfileFileErrorKind {
    /// The file could not be read.
    Io(std::io::Error),
    /// The file is larger than [`MAX_PROFILE_BYTES`].
    TooLarge {
        /// Its size in bytes.
        bytes: u64,
    },
    /// Not JSON of the documented shape, at a 1-based line and column.
    Syntax {
        /// Line.
        line: usize,
        /// Column.
        column: usize,
        /// serde_json's description.
        message: String,
    },
    /// Well-formed, but a table or field is invalid.
    Invalid(ProfileError),
}

/// A refused profile file, with its path.
#[derive(Debug)]
pub struct ProfileFileError {
    /// The file, as given.
    pub path: String,
    /// What is wrong.
    pub kind: ProfileFileErrorKind,
}

impl std::fmt::Display for ProfileFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            ProfileFileErrorKind::Io(e) => write!(f, "{}: {e}", self.path),
            ProfileFileErrorKind::TooLarge { bytes } => write!(
                f,
                "{}: {bytes} bytes, more than the {MAX_PROFILE_BYTES} a profile may have",
                self.path
            ),
            ProfileFileErrorKind::Syntax {
                line,
                column,
                message,
            } => write!(f, "{}:{line}:{column}: {message}", self.path),
            ProfileFileErrorKind::Invalid(e) => write!(f, "{}: {e}", self.path),
        }
    }
}

impl std::error::Error for ProfileFileError {}

/// Reads and checks the profile at `path`.
pub fn load(path: &Path) -> Result<PerfProfile, ProfileFileError> {
    let shown = path.display().to_string();
    let err = |kind| ProfileFileError {
        path: shown.clone(),
        kind,
    };
    let file = std::fs::File::open(path).map_err(|e| err(ProfileFileErrorKind::Io(e)))?;
    let bytes = file
        .metadata()
        .map_err(|e| err(ProfileFileErrorKind::Io(e)))?
        .len();
    if bytes > MAX_PROFILE_BYTES {
        return Err(err(ProfileFileErrorKind::TooLarge { bytes }));
    }
    let mut text = String::new();
    file.take(MAX_PROFILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| err(ProfileFileErrorKind::Io(e)))?;
    if text.len() as u64 > MAX_PROFILE_BYTES {
        return Err(err(ProfileFileErrorKind::TooLarge {
            bytes: text.len() as u64,
        }));
    }
    parse(&text, &shown)
}

/// Parses and checks a profile's text; `origin` names it in errors.
pub fn parse(text: &str, origin: &str) -> Result<PerfProfile, ProfileFileError> {
    let err = |kind| ProfileFileError {
        path: origin.to_string(),
        kind,
    };
    if text.len() as u64 > MAX_PROFILE_BYTES {
        return Err(err(ProfileFileErrorKind::TooLarge {
            bytes: text.len() as u64,
        }));
    }
    let f: File = serde_json::from_str(text).map_err(|e| {
        err(ProfileFileErrorKind::Syntax {
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })
    })?;
    let invalid = |e| err(ProfileFileErrorKind::Invalid(e));
    let prefill = PerfTable::new(
        TableKind::Prefill,
        ("new_tokens", "cached_tokens"),
        f.prefill.new_tokens,
        f.prefill.cached_tokens,
        &f.prefill.ms,
    )
    .map_err(invalid)?;
    let decode = PerfTable::new(
        TableKind::Decode,
        ("batch", "context_tokens"),
        f.decode.batch,
        f.decode.context_tokens,
        &f.decode.ms,
    )
    .map_err(invalid)?;
    PerfProfile::new(f.name, f.source, prefill, decode, f.pass_overhead_ms).map_err(invalid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_perf::ProfileErrorKind;

    const OK: &str = r#"{
  "name": "t", "source": "s", "pass_overhead_ms": 5,
  "prefill": {"new_tokens": [1, 100], "cached_tokens": [0], "ms": [[10], [20]]},
  "decode": {"batch": [1], "context_tokens": [0, 1000], "ms": [[6, 9]]}
}"#;

    #[test]
    fn parses_the_documented_shape() {
        let p = parse(OK, "t.json").unwrap();
        assert_eq!(p.name(), "t");
        assert_eq!(p.prefill_table().at(50.5, 0.0), 15.0);
        assert_eq!(p.pass_overhead_ms(), 5.0);
    }

    #[test]
    fn errors_are_located() {
        let bad = OK.replace("\"ms\": [[10], [20]]", "\"ms\": [[10], [20,]]");
        let e = parse(&bad, "t.json").unwrap_err();
        assert!(
            matches!(e.kind, ProfileFileErrorKind::Syntax { line: 3, .. }),
            "{e}"
        );
        assert!(e.to_string().starts_with("t.json:3:"), "{e}");
        let e = parse(&OK.replace("\"source\"", "\"sauce\""), "t.json").unwrap_err();
        assert!(e.to_string().contains("sauce"), "{e}");
        let e = parse(&OK.replace("[[6, 9]]", "[[6, 4]]"), "t.json").unwrap_err();
        match &e.kind {
            ProfileFileErrorKind::Invalid(p) => {
                assert_eq!(p.table, Some(TableKind::Decode));
                assert_eq!(p.kind, ProfileErrorKind::Decreasing { row: 0, col: 1 });
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            e.to_string(),
            "t.json: decode.ms: [0][1] is below the value before it (tables must be non-decreasing)"
        );
        let e = parse(
            &OK.replace("\"pass_overhead_ms\": 5", "\"pass_overhead_ms\": 7"),
            "t.json",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.json: pass_overhead_ms: must be a finite time between 0 and the smallest table value"
        );
    }

    #[test]
    fn oversized_text_is_refused_before_parsing() {
        let big = " ".repeat(MAX_PROFILE_BYTES as usize + 1);
        assert!(matches!(
            parse(&big, "big").unwrap_err().kind,
            ProfileFileErrorKind::TooLarge { .. }
        ));
    }
}
