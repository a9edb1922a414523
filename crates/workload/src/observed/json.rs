//! JSON plumbing the readers share: Python's non-standard number tokens,
//! picking one result record out of a file of several, and values kept as
//! they arrived so validation can say what was wrong with which element.
//!
//! Arrays are read through [`ArrayOf`], which keeps at most its bound of
//! elements and skips the rest without storing them, so no array can grow
//! memory past the bound whatever the file holds.

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// What replaces Python's bare `NaN` (same length, so columns stay true).
const NAN_MARK: &str = "\"N\"";
/// What replaces `Infinity`.
const INF_MARK: &str = "\"Infini\"";
/// What replaces `-Infinity`.
const NEG_INF_MARK: &str = "\"-Infini\"";

/// `text` with Python's `NaN`, `Infinity` and `-Infinity` tokens (which
/// `json.dumps` writes by default, `allow_nan=True`: SGLang's
/// `"request_rate": Infinity`) turned into string markers of the same
/// length outside strings, so serde_json parses the file and a marker in a
/// number's place reads as [`Num::NonFinite`].
pub(crate) fn python_to_strict(text: &str) -> Cow<'_, str> {
    if !text.contains("NaN") && !text.contains("Infinity") {
        return Cow::Borrowed(text);
    }
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            i += 1;
            continue;
        }
        let rest = &bytes[i..];
        let swap = if rest.starts_with(b"NaN") {
            Some(("NaN".len(), NAN_MARK))
        } else if rest.starts_with(b"-Infinity") {
            Some(("-Infinity".len(), NEG_INF_MARK))
        } else if rest.starts_with(b"Infinity") {
            Some(("Infinity".len(), INF_MARK))
        } else {
            None
        };
        match swap {
            Some((len, mark)) => {
                out.push_str(&text[copied..i]);
                out.push_str(mark);
                i += len;
                copied = i;
            }
            None => {
                in_string = b == b'"';
                i += 1;
            }
        }
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// serde_json's description of a syntax error, with its line and column.
pub(crate) fn describe(e: &serde_json::Error) -> String {
    let full = e.to_string();
    let msg = match full.rsplit_once(" at line ") {
        Some((m, _)) => m,
        None => full.as_str(),
    };
    format!("{msg} at line {} column {}", e.line(), e.column())
}

/// One JSON value of a file of several (JSONL, or `--append-result`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecordSpan {
    /// Byte range of the value.
    pub start: usize,
    /// End of the value (exclusive).
    pub end: usize,
    /// The line (1-based) it starts on.
    pub line: u64,
}

/// Where the values of `text` are: the `pick`-th (1-based), or the last
/// when `pick` is `None`, and how many there are. `Err` is a syntax error's
/// description.
pub(crate) fn pick_record(
    text: &str,
    pick: Option<usize>,
) -> Result<(Option<RecordSpan>, usize), String> {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<IgnoredAny>();
    let mut count = 0usize;
    let mut chosen = None;
    loop {
        let before = stream.byte_offset();
        match stream.next() {
            None => break,
            Some(Err(e)) => return Err(describe(&e)),
            Some(Ok(_)) => {
                count += 1;
                let end = stream.byte_offset();
                let skipped = text[before..end].len() - text[before..end].trim_start().len();
                let start = before + skipped;
                if pick.is_none() || pick == Some(count) {
                    let line = 1 + text[..start].bytes().filter(|&b| b == b'\n').count() as u64;
                    chosen = Some(RecordSpan { start, end, line });
                }
            }
        }
    }
    Ok((chosen, count))
}

/// A JSON value in a number's place, as it arrived.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Num {
    /// An integer `>= 0`.
    Uint(u64),
    /// Any other number (a fraction, a negative integer).
    Float(f64),
    /// `NaN` or an infinity (Python's tokens, or a CSV cell).
    NonFinite,
    /// `null` (or an empty CSV cell).
    Null,
    /// A string, bool, array or object.
    NotNumber,
}

impl Num {
    /// A CSV cell's number.
    pub(crate) fn from_cell(cell: &str) -> Num {
        if cell.is_empty() {
            return Num::Null;
        }
        if let Ok(v) = cell.parse::<u64>() {
            return Num::Uint(v);
        }
        match cell.parse::<f64>() {
            Ok(v) if v.is_finite() => Num::Float(v),
            Ok(_) => Num::NonFinite,
            Err(_) => Num::NotNumber,
        }
    }
}

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Num, D::Error> {
        d.deserialize_any(NumVisitor)
    }
}

struct NumVisitor;

impl<'de> Visitor<'de> for NumVisitor {
    type Value = Num;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Num, E> {
        Ok(Num::NotNumber)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Num, E> {
        Ok(match u64::try_from(v) {
            Ok(u) => Num::Uint(u),
            Err(_) => Num::Float(v as f64),
        })
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Num, E> {
        Ok(Num::Uint(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Num, E> {
        Ok(if v.is_finite() {
            Num::Float(v)
        } else {
            Num::NonFinite
        })
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Num, E> {
        let marks = [&NAN_MARK[1..2], &INF_MARK[1..7], &NEG_INF_MARK[1..8]];
        Ok(if marks.contains(&v) {
            Num::NonFinite
        } else {
            Num::NotNumber
        })
    }
    fn visit_unit<E: de::Error>(self) -> Result<Num, E> {
        Ok(Num::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Num, E> {
        Ok(Num::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Num, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Num::NotNumber)
    }
    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Num, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Num::NotNumber)
    }
}

/// A JSON value in an array's place: at most `MAX` elements kept.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ArrayOf<T, const MAX: usize> {
    /// An array of at most `MAX` elements.
    List(Vec<T>),
    /// An array of more than `MAX` elements (none kept).
    TooMany,
    /// Not an array.
    NotArray,
}

impl<'de, T: Deserialize<'de>, const MAX: usize> Deserialize<'de> for ArrayOf<T, MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ArrayVisitor::<T, MAX>(std::marker::PhantomData))
    }
}

struct ArrayVisitor<T, const MAX: usize>(std::marker::PhantomData<T>);

impl<'de, T: Deserialize<'de>, const MAX: usize> Visitor<'de> for ArrayVisitor<T, MAX> {
    type Value = ArrayOf<T, MAX>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while items.len() < MAX {
            match seq.next_element::<T>()? {
                Some(v) => items.push(v),
                None => return Ok(ArrayOf::List(items)),
            }
        }
        if seq.next_element::<IgnoredAny>()?.is_none() {
            return Ok(ArrayOf::List(items));
        }
        drop(items);
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(ArrayOf::TooMany)
    }
    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(ArrayOf::NotArray)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(ArrayOf::NotArray)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(ArrayOf::NotArray)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(ArrayOf::NotArray)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(ArrayOf::NotArray)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(ArrayOf::NotArray)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(ArrayOf::NotArray)
    }
}

/// One request's `itls` entry, summed as it is read (never stored).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum ItlSum {
    /// Every element finite and non-negative: their sum (s).
    Sum(f64),
    /// The first element that is not.
    Bad {
        /// Its index within the request's list.
        index: usize,
    },
    /// Not an array.
    NotArray,
}

impl<'de> Deserialize<'de> for ItlSum {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ItlSum, D::Error> {
        d.deserialize_any(ItlVisitor)
    }
}

struct ItlVisitor;

impl<'de> Visitor<'de> for ItlVisitor {
    type Value = ItlSum;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ItlSum, A::Error> {
        let mut sum = 0.0;
        let mut bad = None;
        let mut index = 0usize;
        while let Some(num) = seq.next_element::<Num>()? {
            match num {
                Num::Uint(v) if bad.is_none() => sum += v as f64,
                Num::Float(v) if bad.is_none() && v >= 0.0 => sum += v,
                _ => {
                    bad.get_or_insert(ItlSum::Bad { index });
                }
            }
            index += 1;
        }
        Ok(bad.unwrap_or(ItlSum::Sum(sum)))
    }
    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<ItlSum, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(ItlSum::NotArray)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<ItlSum, E> {
        Ok(ItlSum::NotArray)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<ItlSum, E> {
        Ok(ItlSum::NotArray)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<ItlSum, E> {
        Ok(ItlSum::NotArray)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<ItlSum, E> {
        Ok(ItlSum::NotArray)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<ItlSum, E> {
        Ok(ItlSum::NotArray)
    }
    fn visit_unit<E: de::Error>(self) -> Result<ItlSum, E> {
        Ok(ItlSum::NotArray)
    }
}

/// A JSON value in a string's place (`errors`, `id`), as it arrived.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Text {
    /// A string.
    Str(String),
    /// An integer `>= 0` (an `id`).
    Uint(u64),
    /// `null`.
    Null,
    /// Anything else.
    Other,
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Text, D::Error> {
        d.deserialize_any(TextVisitor)
    }
}

struct TextVisitor;

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Text;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Text, E> {
        Ok(Text::Str(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Text, E> {
        Ok(Text::Str(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Text, E> {
        Ok(Text::Uint(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Text, E> {
        Ok(u64::try_from(v).map_or(Text::Other, Text::Uint))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Text, E> {
        Ok(Text::Other)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Text, E> {
        Ok(Text::Other)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Text, E> {
        Ok(Text::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Text, E> {
        Ok(Text::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Text, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Text::Other)
    }
    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Text, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Text::Other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_tokens_become_same_length_markers_outside_strings() {
        let text = r#"{"a": NaN, "b": [Infinity, -Infinity], "c": "NaN Infinity"}"#;
        let strict = python_to_strict(text);
        assert_eq!(strict.len(), text.len());
        let v: serde_json::Value = serde_json::from_str(&strict).unwrap();
        assert_eq!(v["a"], "N");
        assert_eq!(v["c"], "NaN Infinity");
        let b: Vec<Num> = serde_json::from_value(v["b"].clone()).unwrap();
        assert_eq!(b, vec![Num::NonFinite, Num::NonFinite]);
        // An escaped quote does not end the string.
        let text = r#"{"c": "x\"NaN", "d": NaN}"#;
        let v: serde_json::Value = serde_json::from_str(&python_to_strict(text)).unwrap();
        assert_eq!(v["c"], "x\"NaN");
        assert_eq!(v["d"], "N");
    }

    #[test]
    fn records_are_picked_last_or_by_number() {
        let text = "{\"a\": 1}\n\n{\"a\": 2}\n{\"a\":\n 3}\n";
        let (last, n) = pick_record(text, None).unwrap();
        assert_eq!(n, 3);
        let last = last.unwrap();
        assert_eq!(last.line, 4);
        assert_eq!(&text[last.start..last.end], "{\"a\":\n 3}");
        let (second, _) = pick_record(text, Some(2)).unwrap();
        assert_eq!(second.unwrap().line, 3);
        assert_eq!(pick_record(text, Some(4)).unwrap().0, None);
        assert!(pick_record("{\"a\": }", None)
            .unwrap_err()
            .contains("line 1 column"));
    }

    #[test]
    fn arrays_keep_at_most_their_bound() {
        let a: ArrayOf<Num, 3> = serde_json::from_str("[1, 2, 3]").unwrap();
        assert_eq!(
            a,
            ArrayOf::List(vec![Num::Uint(1), Num::Uint(2), Num::Uint(3)])
        );
        let a: ArrayOf<Num, 3> = serde_json::from_str("[1, 2, 3, 4]").unwrap();
        assert_eq!(a, ArrayOf::TooMany);
        let a: ArrayOf<Num, 3> = serde_json::from_str("{\"x\": 1}").unwrap();
        assert_eq!(a, ArrayOf::NotArray);
        let s: ItlSum = serde_json::from_str("[0.5, 0.25, -1, 2]").unwrap();
        assert_eq!(s, ItlSum::Bad { index: 2 });
        let s: ItlSum = serde_json::from_str("[0.5, 0.25]").unwrap();
        assert_eq!(s, ItlSum::Sum(0.75));
    }
}
