//! Parsing one Mooncake JSON line into raw, still-unvalidated field values.
//!
//! A hand-written serde visitor instead of `serde_json::Value`: hash ids go
//! straight into a reused `Vec<u64>` (8 bytes each rather than a 32-byte
//! `Value`), unknown keys are skipped without being built, and every field
//! keeps whatever type it arrived with so validation can say precisely what
//! was wrong with which field. serde_json's recursion limit keeps deeply
//! nested junk from exhausting the stack.

use crate::error::TraceField;
use core::fmt;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// A JSON value in a scalar position, kept as it arrived.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Scalar {
    /// An integer `>= 0`.
    Uint(u64),
    /// A negative integer.
    Neg,
    /// A number with a fraction or exponent (or beyond u64).
    Float(f64),
    /// A string.
    Str(String),
    /// `null`.
    Null,
    /// A bool, array or object.
    Other,
}

/// How `hash_ids` turned out; the ids themselves are in [`RawRecord::ids`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HashIds {
    /// An array of non-negative integers.
    List,
    /// An array with a bad element at this index.
    BadElement(usize),
    /// Not an array.
    NotArray,
}

/// The fields of one line, before validation. Reused across lines.
#[derive(Debug, Default)]
pub(crate) struct RawRecord {
    pub is_object: bool,
    pub duplicate: Option<TraceField>,
    pub timestamp: Option<Scalar>,
    pub input_length: Option<Scalar>,
    pub output_length: Option<Scalar>,
    pub hash_ids: Option<HashIds>,
    pub ids: Vec<u64>,
    pub session_id: Option<Scalar>,
    pub delay: Option<Scalar>,
    pub lora_name: Option<Scalar>,
}

impl RawRecord {
    fn reset(&mut self) {
        self.is_object = false;
        self.duplicate = None;
        self.timestamp = None;
        self.input_length = None;
        self.output_length = None;
        self.hash_ids = None;
        self.ids.clear();
        self.session_id = None;
        self.delay = None;
        self.lora_name = None;
    }
}

/// Parses `bytes` (one line) into `raw`. `Err` carries serde_json's
/// description of a syntax error, without its "at line 1" suffix.
pub(crate) fn parse_record(bytes: &[u8], raw: &mut RawRecord) -> Result<(), String> {
    raw.reset();
    let mut de = serde_json::Deserializer::from_slice(bytes);
    TopSeed(raw).deserialize(&mut de).map_err(describe)?;
    de.end().map_err(describe)
}

fn describe(e: serde_json::Error) -> String {
    let column = e.column();
    let full = e.to_string();
    let msg = match full.rsplit_once(" at line ") {
        Some((m, _)) => m,
        None => full.as_str(),
    };
    format!("{msg} at column {column}")
}

struct TopSeed<'a>(&'a mut RawRecord);

impl<'de> DeserializeSeed<'de> for TopSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(TopVisitor(self.0))
    }
}

struct TopVisitor<'a>(&'a mut RawRecord);

fn put<'de, A: MapAccess<'de>>(
    slot: &mut Option<Scalar>,
    duplicate: &mut Option<TraceField>,
    field: TraceField,
    map: &mut A,
) -> Result<(), A::Error> {
    let v: Scalar = map.next_value()?;
    if slot.is_some() {
        duplicate.get_or_insert(field);
    } else {
        *slot = Some(v);
    }
    Ok(())
}

impl<'de> Visitor<'de> for TopVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let raw = self.0;
        raw.is_object = true;
        while let Some(key) = map.next_key::<Key>()? {
            let dup = &mut raw.duplicate;
            match key {
                Key::Timestamp => put(&mut raw.timestamp, dup, TraceField::Timestamp, &mut map)?,
                Key::InputLength => put(
                    &mut raw.input_length,
                    dup,
                    TraceField::InputLength,
                    &mut map,
                )?,
                Key::OutputLength => put(
                    &mut raw.output_length,
                    dup,
                    TraceField::OutputLength,
                    &mut map,
                )?,
                Key::SessionId => put(&mut raw.session_id, dup, TraceField::SessionId, &mut map)?,
                Key::Delay => put(&mut raw.delay, dup, TraceField::Delay, &mut map)?,
                Key::LoraName => put(&mut raw.lora_name, dup, TraceField::LoraName, &mut map)?,
                Key::HashIds => {
                    if raw.hash_ids.is_some() {
                        dup.get_or_insert(TraceField::HashIds);
                        map.next_value::<IgnoredAny>()?;
                    } else {
                        let outcome = map.next_value_seed(HashIdsSeed(&mut raw.ids))?;
                        raw.hash_ids = Some(outcome);
                    }
                }
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
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

enum Key {
    Timestamp,
    InputLength,
    OutputLength,
    HashIds,
    SessionId,
    Delay,
    LoraName,
    Other,
}

impl<'de> de::Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(match v {
                    "timestamp" => Key::Timestamp,
                    "input_length" => Key::InputLength,
                    "output_length" => Key::OutputLength,
                    "hash_ids" => Key::HashIds,
                    "session_id" => Key::SessionId,
                    "delay" => Key::Delay,
                    "lora_name" => Key::LoraName,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_identifier(KeyVisitor)
    }
}

impl<'de> de::Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Scalar, D::Error> {
        d.deserialize_any(ScalarVisitor)
    }
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Scalar, E> {
        Ok(Scalar::Other)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
        Ok(match u64::try_from(v) {
            Ok(u) => Scalar::Uint(u),
            Err(_) => Scalar::Neg,
        })
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
        Ok(Scalar::Uint(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
        Ok(Scalar::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
        Ok(Scalar::Str(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Scalar, E> {
        Ok(Scalar::Str(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Scalar, E> {
        Ok(Scalar::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Scalar, E> {
        Ok(Scalar::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }
}

struct HashIdsSeed<'a>(&'a mut Vec<u64>);

impl<'de> DeserializeSeed<'de> for HashIdsSeed<'_> {
    type Value = HashIds;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<HashIds, D::Error> {
        d.deserialize_any(HashIdsVisitor(self.0))
    }
}

struct HashIdsVisitor<'a>(&'a mut Vec<u64>);

impl<'de> Visitor<'de> for HashIdsVisitor<'_> {
    type Value = HashIds;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of integers")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<HashIds, A::Error> {
        let ids = self.0;
        ids.clear();
        let mut bad = None;
        let mut index = 0usize;
        while let Some(s) = seq.next_element::<Scalar>()? {
            match s {
                Scalar::Uint(v) if bad.is_none() => ids.push(v),
                _ => {
                    bad.get_or_insert(index);
                }
            }
            index += 1;
        }
        Ok(match bad {
            Some(i) => HashIds::BadElement(i),
            None => HashIds::List,
        })
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<HashIds, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(HashIds::NotArray)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<HashIds, E> {
        Ok(HashIds::NotArray)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<HashIds, E> {
        Ok(HashIds::NotArray)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<HashIds, E> {
        Ok(HashIds::NotArray)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<HashIds, E> {
        Ok(HashIds::NotArray)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<HashIds, E> {
        Ok(HashIds::NotArray)
    }
    fn visit_unit<E: de::Error>(self) -> Result<HashIds, E> {
        Ok(HashIds::NotArray)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> (Result<(), String>, RawRecord) {
        let mut raw = RawRecord::default();
        let r = parse_record(s.as_bytes(), &mut raw);
        (r, raw)
    }

    #[test]
    fn keeps_fields_as_they_arrived() {
        let (r, raw) = parse(
            r#"{"timestamp": 1.5, "input_length": -3, "output_length": "x", "hash_ids": [1, 2], "extra": {"a": [1]}, "session_id": null}"#,
        );
        r.unwrap();
        assert!(raw.is_object);
        assert_eq!(raw.timestamp, Some(Scalar::Float(1.5)));
        assert_eq!(raw.input_length, Some(Scalar::Neg));
        assert_eq!(raw.output_length, Some(Scalar::Str("x".into())));
        assert_eq!(raw.hash_ids, Some(HashIds::List));
        assert_eq!(raw.ids, vec![1, 2]);
        assert_eq!(raw.session_id, Some(Scalar::Null));
        assert_eq!(raw.delay, None);
    }

    #[test]
    fn reports_bad_elements_duplicates_and_shapes() {
        let (r, raw) = parse(r#"{"hash_ids": [1, -2, 3.5], "timestamp": 1, "timestamp": 2}"#);
        r.unwrap();
        assert_eq!(raw.hash_ids, Some(HashIds::BadElement(1)));
        assert_eq!(raw.duplicate, Some(TraceField::Timestamp));
        let (r, raw) = parse("[1, 2]");
        r.unwrap();
        assert!(!raw.is_object);
        let (r, raw) = parse(r#"{"hash_ids": {"a": 1}}"#);
        r.unwrap();
        assert_eq!(raw.hash_ids, Some(HashIds::NotArray));
    }

    #[test]
    fn syntax_errors_name_the_column() {
        let (r, _) = parse(r#"{"timestamp": }"#);
        let msg = r.unwrap_err();
        assert!(msg.ends_with("at column 15"), "{msg}");
        let (r, _) = parse(r#"{"timestamp": 1} trailing"#);
        assert!(r.is_err());
        // Deep nesting is skipped iteratively (serde_json's ignore path),
        // so it can neither overflow the stack nor pass as a record.
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let (r, raw) = parse(&deep);
        r.unwrap();
        assert!(!raw.is_object);
        let deep_field = format!(
            "{{\"session_id\": {}{}}}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let (r, raw) = parse(&deep_field);
        r.unwrap();
        assert_eq!(raw.session_id, Some(Scalar::Other));
        let (r, _) = parse(&"[".repeat(100_000));
        assert!(r.is_err());
    }
}
