//! The plain per-request file: JSONL (one object per line) or CSV (a
//! header row, then one row per request), the same fields either way.
//!
//! | field | required | meaning |
//! | --- | --- | --- |
//! | `arrival` | yes | seconds, when the request reached the server |
//! | `first_token` | yes | seconds, when its first token came out |
//! | `last_token` | yes | seconds, when its last token came out |
//! | `input_tokens` | yes | prompt tokens, 1..=1,000,000 |
//! | `output_tokens` | yes | generated tokens, 1..=1,000,000 |
//! | `id` | no | a string or a non-negative integer; the 0-based record index when absent |
//! | `queued` | no | seconds, when the engine queued it |
//! | `scheduled` | no | seconds, when the engine first scheduled it |
//! | `hash_ids` | no | prefix block ids of `block_size` tokens each (JSON array; CSV: space-separated) |
//! | `token_ids` | no | the prompt's token ids (u32), numbered into chained block ids ([`super::hashes`]) |
//!
//! All times are on one clock (any origin). Rules, each a located error:
//! `arrival <= first_token <= last_token`; `scheduled >= queued` (or
//! `arrival` when no `queued`); times finite and non-negative; unknown keys
//! or columns are errors (a typo must not silently drop a field); `null` or
//! an empty CSV cell means absent; one file uses `hash_ids` or `token_ids`,
//! not both. CSV cells hold no commas (none of these fields needs one), so
//! a row is split at every comma; surrounding quotes are dropped.

use super::error::{Location, ObservedError, PlainField, Problem};
use super::json::{describe, ArrayOf, Num, Text};
use super::{ObservedRequest, Row, MAX_REQUESTS, MAX_TOKENS};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use std::fmt;
use std::path::Path;

/// The fields of one record before validation.
#[derive(Debug, Default)]
struct RawRow {
    id: Option<Text>,
    arrival: Option<Num>,
    first_token: Option<Num>,
    last_token: Option<Num>,
    input_tokens: Option<Num>,
    output_tokens: Option<Num>,
    queued: Option<Num>,
    scheduled: Option<Num>,
    hash_ids: Option<ArrayOf<Num, MAX_TOKENS>>,
    token_ids: Option<ArrayOf<Num, MAX_TOKENS>>,
    duplicate: Option<PlainField>,
    unknown: Option<String>,
    is_object: bool,
}

impl RawRow {
    fn has(&self, f: PlainField) -> bool {
        match f {
            PlainField::Id => self.id.is_some(),
            PlainField::Arrival => self.arrival.is_some(),
            PlainField::FirstToken => self.first_token.is_some(),
            PlainField::LastToken => self.last_token.is_some(),
            PlainField::InputTokens => self.input_tokens.is_some(),
            PlainField::OutputTokens => self.output_tokens.is_some(),
            PlainField::Queued => self.queued.is_some(),
            PlainField::Scheduled => self.scheduled.is_some(),
            PlainField::HashIds => self.hash_ids.is_some(),
            PlainField::TokenIds => self.token_ids.is_some(),
        }
    }

    fn num_slot(&mut self, f: PlainField) -> Option<&mut Option<Num>> {
        Some(match f {
            PlainField::Arrival => &mut self.arrival,
            PlainField::FirstToken => &mut self.first_token,
            PlainField::LastToken => &mut self.last_token,
            PlainField::InputTokens => &mut self.input_tokens,
            PlainField::OutputTokens => &mut self.output_tokens,
            PlainField::Queued => &mut self.queued,
            PlainField::Scheduled => &mut self.scheduled,
            PlainField::Id | PlainField::HashIds | PlainField::TokenIds => return None,
        })
    }
}

/// Reads the plain file `text` (JSONL when its first record opens with
/// `{`, CSV otherwise) into rows in file order.
pub(crate) fn read(text: &str, path: &Path, block_size: u32) -> Result<Vec<Row>, ObservedError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let at = |at, problem| ObservedError::At {
        path: path.to_path_buf(),
        at,
        problem,
    };
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i as u64 + 1, l))
        .filter(|(_, l)| !l.trim().is_empty())
        .peekable();
    let Some(&(_, first)) = lines.peek() else {
        return Err(at(Location::File, Problem::Empty));
    };
    let csv = !first.trim_start().starts_with('{');
    let columns = if csv {
        let (_, header) = lines.next().unwrap_or((1, ""));
        Some(parse_header(header).map_err(|(field, p)| at(Location::Header { field }, p))?)
    } else {
        None
    };
    let mut rows = Vec::new();
    let mut prefixes = Prefixes::default();
    for (line, body) in lines {
        if rows.len() == MAX_REQUESTS {
            let p = Problem::TooManyRequests { max: MAX_REQUESTS };
            return Err(at(Location::Line { line, field: None }, p));
        }
        let raw = match &columns {
            Some(cols) => csv_row(body, cols),
            None => json_row(body),
        };
        let index = rows.len();
        let row = raw
            .and_then(|raw| validate(&raw, index, line, block_size, &mut prefixes))
            .map_err(|(field, p)| at(Location::Line { line, field }, p))?;
        rows.push(row);
    }
    if rows.is_empty() {
        return Err(at(Location::File, Problem::Empty));
    }
    Ok(rows)
}

type Fail = (Option<PlainField>, Problem);

fn parse_header(line: &str) -> Result<Vec<PlainField>, Fail> {
    let mut cols: Vec<PlainField> = Vec::new();
    for name in cells(line) {
        let f = PlainField::from_name(name).ok_or((None, Problem::UnknownColumn(name.into())))?;
        if cols.contains(&f) {
            return Err((Some(f), Problem::Duplicate));
        }
        cols.push(f);
    }
    for f in REQUIRED {
        if !cols.contains(&f) {
            return Err((Some(f), Problem::Missing));
        }
    }
    Ok(cols)
}

const REQUIRED: [PlainField; 5] = [
    PlainField::Arrival,
    PlainField::FirstToken,
    PlainField::LastToken,
    PlainField::InputTokens,
    PlainField::OutputTokens,
];

fn cells(line: &str) -> impl Iterator<Item = &str> {
    line.split(',').map(|c| c.trim().trim_matches('"').trim())
}

fn csv_row(line: &str, cols: &[PlainField]) -> Result<RawRow, Fail> {
    let got = cells(line).count();
    if got != cols.len() {
        let expected = cols.len();
        return Err((None, Problem::FieldCount { got, expected }));
    }
    let mut raw = RawRow {
        is_object: true,
        ..RawRow::default()
    };
    for (&f, cell) in cols.iter().zip(cells(line)) {
        if cell.is_empty() {
            continue;
        }
        match f {
            PlainField::Id => raw.id = Some(Text::Str(cell.to_owned())),
            PlainField::HashIds | PlainField::TokenIds => {
                let ids = cell.split_whitespace().map(Num::from_cell);
                let list = if ids.clone().count() > MAX_TOKENS {
                    ArrayOf::TooMany
                } else {
                    ArrayOf::List(ids.collect())
                };
                if f == PlainField::HashIds {
                    raw.hash_ids = Some(list);
                } else {
                    raw.token_ids = Some(list);
                }
            }
            _ => {
                if let Some(slot) = raw.num_slot(f) {
                    *slot = Some(Num::from_cell(cell));
                }
            }
        }
    }
    Ok(raw)
}

fn json_row(line: &str) -> Result<RawRow, Fail> {
    let mut raw = RawRow::default();
    let mut de = serde_json::Deserializer::from_str(line);
    let parsed = de
        .deserialize_any(RowVisitor(&mut raw))
        .and_then(|()| de.end());
    if let Err(e) = parsed {
        // The line is located by the caller; the column is the line's.
        let msg = describe(&e);
        let msg = match msg.split_once(" at line 1 column ") {
            Some((m, c)) => format!("{m} at column {c}"),
            None => msg,
        };
        return Err((None, Problem::Syntax(msg)));
    }
    if !raw.is_object {
        return Err((None, Problem::NotAnObject));
    }
    Ok(raw)
}

struct RowVisitor<'a>(&'a mut RawRow);

impl<'de> Visitor<'de> for RowVisitor<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let raw = self.0;
        raw.is_object = true;
        while let Some(key) = map.next_key::<String>()? {
            let Some(f) = PlainField::from_name(&key) else {
                raw.unknown.get_or_insert(key);
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            if raw.has(f) {
                raw.duplicate.get_or_insert(f);
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            match f {
                PlainField::Id => raw.id = Some(map.next_value()?),
                PlainField::HashIds => raw.hash_ids = Some(map.next_value()?),
                PlainField::TokenIds => raw.token_ids = Some(map.next_value()?),
                _ => {
                    let v: Num = map.next_value()?;
                    if let Some(slot) = raw.num_slot(f) {
                        *slot = Some(v);
                    }
                }
            }
        }
        Ok(())
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

/// The first lines that used `hash_ids` and `token_ids`.
#[derive(Default)]
struct Prefixes {
    hash_ids: Option<u64>,
    token_ids: Option<u64>,
}

/// A time in seconds: finite and non-negative; `None` when absent.
fn seconds(v: Option<Num>, f: PlainField) -> Result<Option<f64>, Fail> {
    match v {
        None | Some(Num::Null) => Ok(None),
        Some(Num::Uint(u)) => Ok(Some(u as f64)),
        Some(Num::Float(x)) if x < 0.0 => Err((Some(f), Problem::Negative)),
        Some(Num::Float(x)) => Ok(Some(x)),
        Some(Num::NonFinite) => Err((Some(f), Problem::NonFinite)),
        Some(Num::NotNumber) => Err((Some(f), Problem::ExpectedNumber)),
    }
}

fn required_seconds(v: Option<Num>, f: PlainField) -> Result<f64, Fail> {
    seconds(v, f)?.ok_or((Some(f), Problem::Missing))
}

/// A token count in `1..=MAX_TOKENS`.
pub(crate) fn tokens(v: Num) -> Result<u32, Problem> {
    match v {
        Num::Uint(0) => Err(Problem::Zero),
        Num::Uint(n) if n > MAX_TOKENS as u64 => Err(Problem::TooLarge {
            max: MAX_TOKENS as u64,
        }),
        Num::Uint(n) => Ok(n as u32),
        Num::Null => Err(Problem::Missing),
        _ => Err(Problem::ExpectedCount),
    }
}

fn required_tokens(v: Option<Num>, f: PlainField) -> Result<u32, Fail> {
    tokens(v.unwrap_or(Num::Null)).map_err(|p| (Some(f), p))
}

fn validate(
    raw: &RawRow,
    index: usize,
    line: u64,
    block_size: u32,
    prefixes: &mut Prefixes,
) -> Result<Row, Fail> {
    if let Some(k) = &raw.unknown {
        return Err((None, Problem::UnknownKey(k.clone())));
    }
    if let Some(f) = raw.duplicate {
        return Err((Some(f), Problem::Duplicate));
    }
    let id = match &raw.id {
        None | Some(Text::Null) => index.to_string(),
        Some(Text::Str(s)) => s.clone(),
        Some(Text::Uint(n)) => n.to_string(),
        Some(Text::Other) => return Err((Some(PlainField::Id), Problem::ExpectedId)),
    };
    let arrival = required_seconds(raw.arrival, PlainField::Arrival)?;
    let first = required_seconds(raw.first_token, PlainField::FirstToken)?;
    let last = required_seconds(raw.last_token, PlainField::LastToken)?;
    let input_tokens = required_tokens(raw.input_tokens, PlainField::InputTokens)?;
    let output_tokens = required_tokens(raw.output_tokens, PlainField::OutputTokens)?;
    let queued = seconds(raw.queued, PlainField::Queued)?;
    let scheduled = seconds(raw.scheduled, PlainField::Scheduled)?;
    if first < arrival {
        let p = Problem::BeforeArrival {
            at: first,
            floor: arrival,
        };
        return Err((Some(PlainField::FirstToken), p));
    }
    if last < first {
        let p = Problem::FirstAfterLast { first, last };
        return Err((Some(PlainField::LastToken), p));
    }
    let floor = queued.unwrap_or(arrival);
    let queue_ms = match scheduled {
        Some(s) if s < floor => {
            let p = Problem::BeforeArrival { at: s, floor };
            return Err((Some(PlainField::Scheduled), p));
        }
        Some(s) => Some((s - floor) * 1000.0),
        None => None,
    };
    let (hash_ids, tokens) = prefix(raw, input_tokens, block_size, line, prefixes)?;
    Ok(Row {
        request: ObservedRequest {
            id,
            arrival_s: arrival,
            input_tokens,
            output_tokens,
            ttft_ms: (first - arrival) * 1000.0,
            e2e_ms: (last - arrival) * 1000.0,
            queue_ms,
            hash_ids,
        },
        tokens,
    })
}

type Prefix = (Option<Vec<u64>>, Option<Vec<u32>>);

fn prefix(
    raw: &RawRow,
    input_tokens: u32,
    block_size: u32,
    line: u64,
    prefixes: &mut Prefixes,
) -> Result<Prefix, Fail> {
    let ids = |list: &ArrayOf<Num, MAX_TOKENS>, f: PlainField, max: u64| {
        let items = match list {
            ArrayOf::List(items) => items,
            ArrayOf::TooMany => {
                let p = Problem::TooManyElements { max: MAX_TOKENS };
                return Err((Some(f), p));
            }
            ArrayOf::NotArray => return Err((Some(f), Problem::ExpectedArray)),
        };
        let mut out = Vec::with_capacity(items.len());
        for (index, v) in items.iter().enumerate() {
            match *v {
                Num::Uint(n) if n <= max => out.push(n),
                _ => return Err((Some(f), Problem::BadElement { index })),
            }
        }
        Ok(out)
    };
    match (&raw.hash_ids, &raw.token_ids) {
        (Some(_), Some(_)) => Err((Some(PlainField::TokenIds), Problem::BothPrefixes)),
        (Some(list), None) => {
            if let Some(other_line) = prefixes.token_ids {
                let p = Problem::MixedPrefixes { other_line };
                return Err((Some(PlainField::HashIds), p));
            }
            prefixes.hash_ids.get_or_insert(line);
            let got = ids(list, PlainField::HashIds, u64::MAX)?;
            let max = u64::from(input_tokens).div_ceil(u64::from(block_size.max(1))) + 1;
            if got.len() as u64 > max {
                let p = Problem::TooManyHashIds {
                    got: got.len(),
                    max,
                };
                return Err((Some(PlainField::HashIds), p));
            }
            Ok((Some(got), None))
        }
        (None, Some(list)) => {
            if let Some(other_line) = prefixes.hash_ids {
                let p = Problem::MixedPrefixes { other_line };
                return Err((Some(PlainField::TokenIds), p));
            }
            prefixes.token_ids.get_or_insert(line);
            let got = ids(list, PlainField::TokenIds, u64::from(u32::MAX))?;
            if got.len() > input_tokens as usize {
                let p = Problem::TooManyTokenIds {
                    got: got.len(),
                    input_tokens,
                };
                return Err((Some(PlainField::TokenIds), p));
            }
            Ok((None, Some(got.into_iter().map(|t| t as u32).collect())))
        }
        (None, None) => Ok((None, None)),
    }
}
