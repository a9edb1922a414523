//! Deserialising a `Vec` without trusting its claimed length.
//!
//! serde's own `Vec` visitor pre-sizes the vector from the length the input
//! claims, capped at 1 MiB (`serde::__private::size_hint::cautious`), and
//! bincode checks its byte limit against decoded primitives, not against
//! that claim. So a wire frame of a dozen bytes whose vector claims 2^20
//! elements costs a 1 MiB allocation before decoding fails, and a claim
//! nested inside another (a `Kv` event in a `HostReply`) costs 2 MiB. The
//! fields that cross the wire use [`deserialize`] instead, which pre-sizes
//! for at most [`PREALLOC_BYTES`] and grows with the elements that actually
//! arrive, so memory follows the bytes received.

use core::fmt;
use core::marker::PhantomData;
use serde::de::{Deserialize, Deserializer, SeqAccess, Visitor};

/// Most bytes of elements reserved up front on the strength of a claimed
/// length alone.
pub(crate) const PREALLOC_BYTES: usize = 4096;

/// `#[serde(deserialize_with = "handoff_core::serde_vec::deserialize")]`
/// for a `Vec<T>` field: the same data as serde's `Vec` impl accepts, with
/// the pre-sizing capped at [`PREALLOC_BYTES`].
pub fn deserialize<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Bounded<T>(PhantomData<T>);

    impl<'de, T: Deserialize<'de>> Visitor<'de> for Bounded<T> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a sequence")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let most = PREALLOC_BYTES / core::mem::size_of::<T>().max(1);
            let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(most));
            while let Some(x) = seq.next_element()? {
                v.push(x);
            }
            Ok(v)
        }
    }

    d.deserialize_seq(Bounded(PhantomData))
}

/// `#[serde(deserialize_with = "handoff_core::serde_vec::deserialize_string")]`
/// for a `String` field that crosses the wire: text formats read it as a
/// string; binary ones (bincode writes a string as its length and bytes,
/// as it writes a byte sequence) read it byte by byte, pre-sized for at
/// most [`PREALLOC_BYTES`], so a claimed length costs no memory the bytes
/// do not bring.
pub fn deserialize_string<'de, D>(d: D) -> Result<String, D::Error>
where
    D: Deserializer<'de>,
{
    struct Text;

    impl<'de> Visitor<'de> for Text {
        type Value = String;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a UTF-8 string")
        }

        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_owned())
        }

        fn visit_string<E: serde::de::Error>(self, v: String) -> Result<String, E> {
            Ok(v)
        }

        fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<String, E> {
            core::str::from_utf8(v)
                .map(str::to_owned)
                .map_err(|_| E::invalid_value(serde::de::Unexpected::Bytes(v), &self))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<String, A::Error> {
            let mut v: Vec<u8> =
                Vec::with_capacity(seq.size_hint().unwrap_or(0).min(PREALLOC_BYTES));
            while let Some(b) = seq.next_element::<u8>()? {
                v.push(b);
            }
            String::from_utf8(v).map_err(|e| {
                serde::de::Error::invalid_value(serde::de::Unexpected::Bytes(e.as_bytes()), &self)
            })
        }
    }

    if d.is_human_readable() {
        d.deserialize_string(Text)
    } else {
        d.deserialize_seq(Text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::value::{Error, SeqDeserializer};

    /// A sequence whose size hint lies.
    struct Lying(std::vec::IntoIter<u64>);

    impl<'de> SeqAccess<'de> for Lying {
        type Error = Error;
        fn next_element_seed<S: serde::de::DeserializeSeed<'de>>(
            &mut self,
            seed: S,
        ) -> Result<Option<S::Value>, Error> {
            match self.0.next() {
                Some(v) => seed
                    .deserialize(serde::de::value::U64Deserializer::<Error>::new(v))
                    .map(Some),
                None => Ok(None),
            }
        }
        fn size_hint(&self) -> Option<usize> {
            Some(usize::MAX)
        }
    }

    struct LyingDe(Vec<u64>);

    impl<'de> Deserializer<'de> for LyingDe {
        type Error = Error;
        fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
            v.visit_seq(Lying(self.0.into_iter()))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple
            tuple_struct map struct enum identifier ignored_any
        }
    }

    #[test]
    fn a_claimed_length_reserves_at_most_the_cap() {
        let v: Vec<u64> = deserialize(LyingDe(vec![1, 2, 3])).unwrap();
        assert_eq!(v, [1, 2, 3]);
        assert_eq!(v.capacity(), PREALLOC_BYTES / 8);
    }

    #[test]
    fn reads_what_serde_reads() {
        let d = SeqDeserializer::<_, Error>::new(vec![5u64, 6].into_iter());
        let v: Vec<u64> = deserialize(d).unwrap();
        assert_eq!(v, [5, 6]);
    }
}
