//! Rows of the Azure LLM inference trace (CSV), as published in Azure's
//! `AzurePublicDataset` (`AzureLLMInferenceTrace_{code,conv}.csv`, 2023 and
//! 2024):
//!
//! ```text
//! TIMESTAMP,ContextTokens,GeneratedTokens
//! 2023-11-16 18:15:46.6805900,4808,10
//! ```
//!
//! | column | meaning |
//! | --- | --- |
//! | `TIMESTAMP` | arrival, as a date-time (`YYYY-MM-DD HH:MM:SS[.fraction]`, an optional `T` instead of the space, an optional `Z` or `±HH:MM` offset) or a number of seconds |
//! | `ContextTokens` | prompt tokens, at least 1 |
//! | `GeneratedTokens` | tokens to generate, at least 1 |
//!
//! The header names the columns (case-insensitively, in any order; other
//! columns are ignored). Arrivals are relative to the first accepted row,
//! so the first request arrives at 0. The trace carries no block hashes:
//! no two requests share a prefix (every block hash is salted with the
//! request id), which is what the trace can say about them.

use crate::error::{Problem, TraceField};

/// Where the three columns are in a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Columns {
    timestamp: usize,
    context: usize,
    generated: usize,
    /// Fields a row needs at least.
    width: usize,
}

/// A parsed row: absolute arrival in nanoseconds (of the Unix epoch for a
/// date-time, of zero for seconds), prompt and output tokens.
pub(crate) type Row = (i128, u32, u32);

fn fields(line: &str) -> impl Iterator<Item = &str> {
    line.split(',').map(|f| f.trim().trim_matches('"').trim())
}

/// Reads the header row.
pub(crate) fn parse_header(line: &str) -> Result<Columns, (TraceField, Problem)> {
    let line = line.trim_start_matches('\u{feff}');
    let (mut t, mut c, mut g) = (None, None, None);
    for (i, f) in fields(line).enumerate() {
        match f.to_ascii_lowercase().as_str() {
            "timestamp" => t = t.or(Some(i)),
            "contexttokens" => c = c.or(Some(i)),
            "generatedtokens" => g = g.or(Some(i)),
            _ => {}
        }
    }
    let missing = |column| (TraceField::Header, Problem::MissingColumn { column });
    let timestamp = t.ok_or_else(|| missing("TIMESTAMP"))?;
    let context = c.ok_or_else(|| missing("ContextTokens"))?;
    let generated = g.ok_or_else(|| missing("GeneratedTokens"))?;
    Ok(Columns {
        timestamp,
        context,
        generated,
        width: timestamp.max(context).max(generated) + 1,
    })
}

/// Reads one data row.
pub(crate) fn parse_row(line: &str, cols: &Columns) -> Result<Row, (TraceField, Problem)> {
    let mut got: [&str; 3] = [""; 3];
    let mut n = 0;
    for (i, f) in fields(line).enumerate() {
        n = i + 1;
        if i == cols.timestamp {
            got[0] = f;
        } else if i == cols.context {
            got[1] = f;
        } else if i == cols.generated {
            got[2] = f;
        }
    }
    if n < cols.width {
        let field = if n <= cols.timestamp {
            TraceField::AzureTimestamp
        } else if n <= cols.context {
            TraceField::ContextTokens
        } else {
            TraceField::GeneratedTokens
        };
        return Err((field, Problem::MissingField));
    }
    let at = parse_timestamp(got[0]).ok_or((TraceField::AzureTimestamp, Problem::BadTimestamp))?;
    let tokens = |s: &str, field| -> Result<u32, (TraceField, Problem)> {
        if s.is_empty() {
            return Err((field, Problem::Missing));
        }
        let v: u64 = s
            .parse()
            .map_err(|_| (field, Problem::ExpectedNonNegativeInteger))?;
        match v {
            0 => Err((field, Problem::Zero)),
            v => u32::try_from(v).map_err(|_| {
                (
                    field,
                    Problem::TooLarge {
                        max: u64::from(u32::MAX),
                    },
                )
            }),
        }
    };
    Ok((
        at,
        tokens(got[1], TraceField::ContextTokens)?,
        tokens(got[2], TraceField::GeneratedTokens)?,
    ))
}

/// Days from 1970-01-01 to `y-m-d` (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn digits(s: &str, n: usize) -> Option<i64> {
    (s.len() == n && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// Nanoseconds of a date-time since the Unix epoch (UTC), or of a number
/// of seconds since zero.
pub(crate) fn parse_timestamp(s: &str) -> Option<i128> {
    if let Ok(secs) = s.parse::<f64>() {
        return (0.0..1e10)
            .contains(&secs)
            .then(|| (secs * 1e9).round() as i128);
    }
    let b = s.as_bytes();
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b' ' | b'T') {
        return None;
    }
    let y = digits(s.get(0..4)?, 4)?;
    let mo = digits(s.get(5..7)?, 2)?;
    let d = digits(s.get(8..10)?, 2)?;
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let h = digits(s.get(11..13)?, 2)?;
    let mi = digits(s.get(14..16)?, 2)?;
    let sec = digits(s.get(17..19)?, 2)?;
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = s.get(19..)?;
    let mut frac_ns: i128 = 0;
    if let Some(r) = rest.strip_prefix('.') {
        let end = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
        let (frac, after) = r.split_at(end);
        if frac.is_empty() {
            return None;
        }
        // Nanosecond precision; further digits are dropped.
        for (i, c) in frac.bytes().take(9).enumerate() {
            frac_ns += i128::from(c - b'0') * 10i128.pow(8 - i as u32);
        }
        rest = after;
    }
    let offset_s: i64 = match rest {
        "" | "Z" => 0,
        o if o.len() == 6 && o.is_ascii() && o.get(3..4) == Some(":") => {
            let sign = match o.get(..1)? {
                "+" => 1,
                "-" => -1,
                _ => return None,
            };
            let hh = digits(o.get(1..3)?, 2)?;
            let mm = digits(o.get(4..6)?, 2)?;
            sign * (hh * 3600 + mm * 60)
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset_s;
    Some(i128::from(secs) * 1_000_000_000 + frac_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_times_and_seconds() {
        let a = parse_timestamp("2023-11-16 18:15:46.6805900").unwrap();
        let b = parse_timestamp("2023-11-16T18:15:47Z").unwrap();
        assert_eq!(b - a, 319_410_000);
        // 1700158546 s is 2023-11-16 18:15:46 UTC.
        assert_eq!(a, 1_700_158_546_680_590_000);
        assert_eq!(
            parse_timestamp("2023-11-16 19:15:46.6805900+01:00"),
            Some(a)
        );
        assert_eq!(parse_timestamp("1970-01-01 00:00:00"), Some(0));
        assert_eq!(parse_timestamp("2.5"), Some(2_500_000_000));
        for bad in [
            "",
            "yesterday",
            "2023-13-01 00:00:00",
            "2023-11-16 18:15",
            "-1",
        ] {
            assert_eq!(parse_timestamp(bad), None, "{bad}");
        }
    }

    #[test]
    fn header_finds_columns_in_any_order() {
        let c = parse_header("\u{feff}GeneratedTokens, timestamp ,ContextTokens,extra").unwrap();
        assert_eq!(parse_row("7,0.5,100,x", &c).unwrap(), (500_000_000, 100, 7));
        assert_eq!(
            parse_header("TIMESTAMP,ContextTokens").unwrap_err(),
            (
                TraceField::Header,
                Problem::MissingColumn {
                    column: "GeneratedTokens"
                }
            )
        );
        assert_eq!(
            parse_row("7,0.5", &c).unwrap_err(),
            (TraceField::ContextTokens, Problem::MissingField)
        );
    }
}
