//! Reading one line with a byte limit, so a hostile file cannot make the
//! reader allocate without bound.

use std::io::{self, BufRead};

/// What [`read_bounded_line`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LineRead {
    /// End of input; no bytes were read.
    Eof,
    /// A complete line (newline and a trailing `\r` stripped) is in the buffer.
    Line,
    /// The line exceeded the limit; it was consumed but not kept.
    TooLong,
    /// The line exceeded the limit and no newline came within
    /// [`SKIP_FACTOR`] times the limit: not a file of lines (`/dev/zero`,
    /// a binary); reading stopped there rather than skip without end.
    Endless,
}

/// How far past the limit an over-long line is still skipped to its end,
/// as a multiple of the limit (64 MB at the reader's 16 MB default).
pub const SKIP_FACTOR: usize = 4;

/// Reads the next line into `buf` (cleared first), keeping at most `max`
/// bytes. An over-long line is consumed up to its newline without being
/// stored, so the next call starts at the following line, if that newline
/// comes within [`SKIP_FACTOR`]` * max` bytes; otherwise reading stops
/// ([`LineRead::Endless`]), so a call reads a bounded number of bytes.
pub(crate) fn read_bounded_line<R: BufRead>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<LineRead> {
    buf.clear();
    let mut seen_any = false;
    let mut too_long = false;
    let mut skipped = 0usize;
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            if !seen_any {
                return Ok(LineRead::Eof);
            }
            break;
        }
        seen_any = true;
        let (chunk, found_newline) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], true),
            None => (available, false),
        };
        if too_long {
            skipped = skipped.saturating_add(chunk.len());
        } else if buf.len().saturating_add(chunk.len()) > max {
            too_long = true;
            buf.clear();
        } else {
            buf.extend_from_slice(chunk);
        }
        let used = chunk.len() + usize::from(found_newline);
        reader.consume(used);
        if !found_newline && skipped > max.saturating_mul(SKIP_FACTOR) {
            return Ok(LineRead::Endless);
        }
        if found_newline {
            break;
        }
    }
    if too_long {
        return Ok(LineRead::TooLong);
    }
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    Ok(LineRead::Line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufReader;

    #[test]
    fn splits_lines_and_bounds_length() {
        let data = b"short\r\nthis line is too long\nok\nlast-no-newline";
        // A tiny buffer forces lines to span several fill_buf calls.
        let mut r = BufReader::with_capacity(3, &data[..]);
        let mut buf = Vec::new();
        assert_eq!(
            read_bounded_line(&mut r, &mut buf, 8).unwrap(),
            LineRead::Line
        );
        assert_eq!(buf, b"short");
        assert_eq!(
            read_bounded_line(&mut r, &mut buf, 8).unwrap(),
            LineRead::TooLong
        );
        assert!(buf.is_empty());
        assert_eq!(
            read_bounded_line(&mut r, &mut buf, 8).unwrap(),
            LineRead::Line
        );
        assert_eq!(buf, b"ok");
        assert_eq!(
            read_bounded_line(&mut r, &mut buf, 100).unwrap(),
            LineRead::Line
        );
        assert_eq!(buf, b"last-no-newline");
        assert_eq!(
            read_bounded_line(&mut r, &mut buf, 8).unwrap(),
            LineRead::Eof
        );
    }

    /// An input with no newline at all (`/dev/zero`) stops a bounded way
    /// past the line limit, however long it is.
    #[test]
    fn an_endless_line_stops_reading() {
        let mut zeros = io::BufReader::with_capacity(64, io::repeat(0));
        let mut buf = Vec::new();
        assert_eq!(
            read_bounded_line(&mut zeros, &mut buf, 1000).unwrap(),
            LineRead::Endless
        );
        assert!(buf.is_empty());
        // A long line that ends within the skip bound is skipped as
        // before.
        let data = [vec![b'x'; 4500], b"\nok\n".to_vec()].concat();
        let mut r = io::BufReader::with_capacity(64, &data[..]);
        assert_eq!(
            read_bounded_line(&mut r, &mut buf, 1000).unwrap(),
            LineRead::TooLong
        );
        assert_eq!(
            read_bounded_line(&mut r, &mut buf, 1000).unwrap(),
            LineRead::Line
        );
        assert_eq!(buf, b"ok");
    }

    #[test]
    fn empty_line_is_a_line() {
        let mut r = &b"\n\n"[..];
        let mut buf = Vec::new();
        assert_eq!(
            read_bounded_line(&mut r, &mut buf, 8).unwrap(),
            LineRead::Line
        );
        assert!(buf.is_empty());
        assert_eq!(
            read_bounded_line(&mut r, &mut buf, 8).unwrap(),
            LineRead::Line
        );
        assert_eq!(
            read_bounded_line(&mut r, &mut buf, 8).unwrap(),
            LineRead::Eof
        );
    }
}
