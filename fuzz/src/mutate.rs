//! Byte-level mutations shared by every target: bit flips, byte insert,
//! delete and duplicate, splicing with another corpus input, truncation,
//! dictionary tokens, and replacing numbers with extremes (as text for the
//! JSON reader, as fixed-width and varint integers for the binary codec).

use crate::rng::Rng;

/// Numbers a text decoder should be tried with in place of any number it
/// finds: zero, negatives, the signed and unsigned 32- and 64-bit edges and
/// one past them, float extremes, and things that are not JSON numbers at
/// all.
pub const TEXT_NUMBERS: &[&str] = &[
    "0",
    "-0",
    "-1",
    "1",
    "2147483647",
    "2147483648",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "18446744073709",
    "18446744073710",
    "18446744073709.551615",
    "18446744073709.5517",
    "-9223372036854775808",
    "1e308",
    "-1e308",
    "1e309",
    "1e-324",
    "2.5e-7",
    "4.9e-324",
    "0.0",
    "-0.0",
    "0.5",
    "1.0",
    "NaN",
    "Infinity",
    "-Infinity",
    "1e",
    "0x10",
    "01",
    "\"1\"",
    "null",
    "true",
    "[]",
    "{}",
];

/// A random text-number replacement.
pub fn text_number(rng: &mut Rng) -> &'static str {
    TEXT_NUMBERS[rng.below(TEXT_NUMBERS.len())]
}

/// Replaces one run of number characters (`0-9 - + . e E`) in `buf` with an
/// extreme; false if there is none.
pub fn replace_text_number(rng: &mut Rng, buf: &mut Vec<u8>) -> bool {
    let starts: Vec<usize> = (0..buf.len())
        .filter(|&i| {
            (buf[i].is_ascii_digit() || buf[i] == b'-') && (i == 0 || !is_number_byte(buf[i - 1]))
        })
        .collect();
    if starts.is_empty() {
        return false;
    }
    let start = *rng.pick(&starts);
    let mut end = start + 1;
    while end < buf.len() && is_number_byte(buf[end]) {
        end += 1;
    }
    let with = text_number(rng).as_bytes();
    buf.splice(start..end, with.iter().copied());
    true
}

fn is_number_byte(b: u8) -> bool {
    b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E')
}

/// Integer bytes a binary decoder should see: bincode varint markers
/// (251 = u16 follows, 252 = u32, 253 = u64, 254 = u128, 255 = invalid)
/// followed by all-ones or zero payloads, and fixed-width extremes in both
/// byte orders.
pub fn binary_number(rng: &mut Rng) -> Vec<u8> {
    let v = rng.interesting_u64();
    match rng.below(9) {
        0 => vec![251, 0xff, 0xff],
        1 => vec![252, 0xff, 0xff, 0xff, 0xff],
        2 => {
            let mut b = vec![253];
            b.extend_from_slice(&v.to_le_bytes());
            b
        }
        3 => {
            let mut b = vec![254];
            b.extend_from_slice(&u128::from(v).wrapping_mul(u128::MAX / 3).to_le_bytes());
            b
        }
        4 => vec![*rng.pick(&[250u8, 251, 252, 253, 254, 255])],
        5 => v.to_le_bytes()[..rng.range(1, 8)].to_vec(),
        6 => v.to_be_bytes()[8 - rng.range(1, 8)..].to_vec(),
        7 => (v as u32).to_be_bytes().to_vec(),
        _ => vec![(v & 0xff) as u8],
    }
}

/// Applies one random generic mutation to `buf`, drawing on `others` (the
/// corpus) for splices and on `dict` for tokens. `text` selects textual
/// (true) or binary (false) number replacement. Keeps `buf` at most
/// `max_len` bytes.
pub fn mutate(
    rng: &mut Rng,
    buf: &mut Vec<u8>,
    others: &[Vec<u8>],
    dict: &[&[u8]],
    text: bool,
    max_len: usize,
) {
    let n = buf.len();
    match rng.below(14) {
        // Flip one bit.
        0 if n > 0 => {
            let i = rng.below(n);
            buf[i] ^= 1 << rng.below(8);
        }
        // Overwrite a byte.
        1 if n > 0 => {
            let i = rng.below(n);
            buf[i] = rng.next_u64() as u8;
        }
        // Small arithmetic on a byte.
        2 if n > 0 => {
            let i = rng.below(n);
            let d = rng.range(1, 35) as u8;
            buf[i] = if rng.coin() {
                buf[i].wrapping_add(d)
            } else {
                buf[i].wrapping_sub(d)
            };
        }
        // Insert random bytes.
        3 => {
            let at = rng.below(n + 1);
            let k = rng.range(1, 4);
            let bytes: Vec<u8> = (0..k).map(|_| rng.next_u64() as u8).collect();
            buf.splice(at..at, bytes);
        }
        // Delete a range.
        4 if n > 0 => {
            let at = rng.below(n);
            let k = rng.range(1, 16.min(n - at));
            buf.drain(at..at + k);
        }
        // Duplicate a range somewhere else.
        5 if n > 0 => {
            let at = rng.below(n);
            let k = rng.range(1, 64.min(n - at));
            let chunk = buf[at..at + k].to_vec();
            let to = rng.below(n + 1);
            buf.splice(to..to, chunk);
        }
        // Splice: our head, another input's tail.
        6 if !others.is_empty() => {
            let other = rng.pick(others);
            let cut = rng.below(n + 1);
            let from = rng.below(other.len() + 1);
            buf.truncate(cut);
            buf.extend_from_slice(&other[from..]);
        }
        // Insert a chunk of another input.
        7 if !others.is_empty() => {
            let other = rng.pick(others);
            if !other.is_empty() {
                let a = rng.below(other.len());
                let b = rng.range(a + 1, other.len());
                let to = rng.below(n + 1);
                buf.splice(to..to, other[a..b].iter().copied());
            }
        }
        // Truncate.
        8 if n > 0 => {
            buf.truncate(rng.below(n));
        }
        // Insert a dictionary token.
        9 if !dict.is_empty() => {
            let tok = rng.pick(dict);
            let to = rng.below(n + 1);
            buf.splice(to..to, tok.iter().copied());
        }
        // Overwrite with a dictionary token.
        10 if !dict.is_empty() && n > 0 => {
            let tok = rng.pick(dict);
            let at = rng.below(n);
            let end = (at + tok.len()).min(n);
            buf.splice(at..end, tok.iter().copied());
        }
        // Replace a number with an extreme.
        11 | 12 => {
            if text {
                if !replace_text_number(rng, buf) {
                    let to = rng.below(n + 1);
                    buf.splice(to..to, text_number(rng).bytes());
                }
            } else {
                let num = binary_number(rng);
                let at = rng.below(n + 1);
                let end = if rng.coin() {
                    (at + num.len()).min(n)
                } else {
                    at
                };
                buf.splice(at..end, num);
            }
        }
        // Swap two bytes.
        _ if n > 1 => {
            let a = rng.below(n);
            let b = rng.below(n);
            buf.swap(a, b);
        }
        _ => buf.push(rng.next_u64() as u8),
    }
    buf.truncate(max_len);
}

/// Hex dump for failure reports: offset, 16 bytes in hex, then ASCII.
pub fn hex_dump(bytes: &[u8], limit: usize) -> String {
    let mut out = String::new();
    for (row, chunk) in bytes[..bytes.len().min(limit)].chunks(16).enumerate() {
        out.push_str(&format!("{:08x}  ", row * 16));
        for i in 0..16 {
            match chunk.get(i) {
                Some(b) => out.push_str(&format!("{b:02x} ")),
                None => out.push_str("   "),
            }
        }
        out.push(' ');
        out.extend(chunk.iter().map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            }
        }));
        out.push('\n');
    }
    if bytes.len() > limit {
        out.push_str(&format!("... {} more bytes\n", bytes.len() - limit));
    }
    out
}

/// FNV-1a, for naming saved inputs, seeding per-input choices and hashing
/// outcome kinds.
pub fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_respect_the_length_cap() {
        let mut rng = Rng::new(3);
        let others = vec![b"abcdef".to_vec(), vec![0; 100]];
        let dict: &[&[u8]] = &[b"{", b"\"hash_ids\""];
        let mut buf = b"{\"timestamp\": 12}".to_vec();
        for _ in 0..10_000 {
            let text = rng.coin();
            mutate(&mut rng, &mut buf, &others, dict, text, 64);
            assert!(buf.len() <= 64);
        }
    }

    #[test]
    fn text_numbers_are_replaced_whole() {
        let mut rng = Rng::new(5);
        let mut buf = b"{\"a\": 12.5e3}".to_vec();
        assert!(replace_text_number(&mut rng, &mut buf));
        let s = String::from_utf8(buf).unwrap();
        let v = s.trim_start_matches("{\"a\": ").trim_end_matches('}');
        assert!(TEXT_NUMBERS.contains(&v), "{s}");
        assert!(!replace_text_number(&mut rng, &mut b"{}".to_vec()));
    }

    #[test]
    fn hex_dump_shows_offsets_and_ascii() {
        let d = hex_dump(b"{\"a\":1}\n", 64);
        assert!(d.starts_with("00000000  7b 22 61"), "{d}");
        assert!(d.contains("{\"a\":1}."), "{d}");
    }
}
