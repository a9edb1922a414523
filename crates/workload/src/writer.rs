//! Serialises workloads back to Mooncake JSONL, so a generated workload can
//! be saved, inspected and replayed through the same [`crate::TraceReader`].

use crate::error::Millis;
use crate::item::TraceItem;
use handoff_core::request::TRACE_HASH_BLOCK_TOKENS;
use std::io::{self, Write};

/// Writes [`TraceItem`]s as Mooncake JSONL lines, in the key order and
/// spacing of the published traces:
/// `{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1]}`
/// followed by `"session_id"` (integer), `"lora_name"` (string) and
/// `"delay"` (ms) when present.
///
/// Times are written in milliseconds with as many decimals (up to six) as
/// needed to be exact in nanoseconds; the reader rounds them back to the
/// same nanosecond while the value has at most ~15 significant digits
/// (that is, for any trace shorter than ~30 years at microsecond detail).
/// Request ids are not written: the reader renumbers in line order.
pub struct TraceWriter<W> {
    out: W,
    lines: u64,
}

impl<W: Write> TraceWriter<W> {
    /// A writer appending to `out`. Wrap files in a `BufWriter`.
    pub fn new(out: W) -> Self {
        TraceWriter { out, lines: 0 }
    }

    /// Writes one line. Fails with `InvalidInput` when the request's hash
    /// blocks are not the format's 512 tokens.
    pub fn write(&mut self, item: &TraceItem) -> io::Result<()> {
        let r = &item.request;
        if r.hash_block_tokens != TRACE_HASH_BLOCK_TOKENS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "request {} has {}-token hash blocks; Mooncake JSONL needs {}",
                    r.id, r.hash_block_tokens, TRACE_HASH_BLOCK_TOKENS
                ),
            ));
        }
        write!(
            self.out,
            "{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": {}, \"hash_ids\": [",
            Millis(r.arrival.as_nanos()),
            r.prompt_tokens,
            r.max_output_tokens
        )?;
        for (i, h) in r.prefix_hashes.iter().enumerate() {
            if i > 0 {
                self.out.write_all(b", ")?;
            }
            write!(self.out, "{h}")?;
        }
        self.out.write_all(b"]")?;
        if let Some(s) = r.session {
            write!(self.out, ", \"session_id\": {}", s.0)?;
        }
        if let Some(l) = &r.lora {
            write!(
                self.out,
                ", \"lora_name\": {}",
                serde_json::Value::from(l.name.as_str())
            )?;
        }
        if let Some(d) = item.delay {
            let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
            write!(self.out, ", \"delay\": {}", Millis(nanos))?;
        }
        self.out.write_all(b"}\n")?;
        self.lines += 1;
        Ok(())
    }

    /// Lines written so far.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// Flushes and returns the inner writer.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Writes every item of `items` to `out`; returns the number of lines.
pub fn write_trace<'a, W: Write>(
    out: W,
    items: impl IntoIterator<Item = &'a TraceItem>,
) -> io::Result<u64> {
    let mut w = TraceWriter::new(out);
    for item in items {
        w.write(item)?;
    }
    let n = w.lines();
    w.into_inner()?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::{ReaderOptions, TraceReader};
    use handoff_core::{Duration, Instant, Request, RequestId, SessionId};

    fn item(
        id: u64,
        arrival: Instant,
        session: Option<(u64, u32)>,
        delay: Option<Duration>,
    ) -> TraceItem {
        TraceItem {
            request: Request {
                id: RequestId(id),
                prompt_tokens: 1100,
                max_output_tokens: 7,
                prefix_hashes: vec![3, 4, u64::MAX],
                hash_block_tokens: 512,
                session: session.map(|(s, _)| SessionId(s)),
                arrival,
                lora: None,
            },
            turn: session.map(|(_, t)| t),
            delay,
        }
    }

    #[test]
    fn writes_the_mooncake_shape() {
        let mut buf = Vec::new();
        write_trace(
            &mut buf,
            &[
                item(0, Instant::from_millis(12), None, None),
                item(
                    1,
                    Instant(12_345_678),
                    Some((5, 0)),
                    Some(Duration::from_micros(1500)),
                ),
            ],
        )
        .unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert_eq!(
            text,
            "{\"timestamp\": 12, \"input_length\": 1100, \"output_length\": 7, \"hash_ids\": [3, 4, 18446744073709551615]}\n\
             {\"timestamp\": 12.345678, \"input_length\": 1100, \"output_length\": 7, \"hash_ids\": [3, 4, 18446744073709551615], \"session_id\": 5, \"delay\": 1.5}\n"
        );
    }

    #[test]
    fn round_trips_through_the_reader() {
        let items = vec![
            item(0, Instant(0), None, None),
            item(1, Instant(1_000), Some((2, 0)), None),
            item(
                2,
                Instant(987_654_321_123),
                Some((2, 1)),
                Some(Duration::from_nanos(1)),
            ),
            item(3, Instant(987_654_321_123), None, None),
        ];
        let mut buf = Vec::new();
        write_trace(&mut buf, &items).unwrap();
        let back: Vec<TraceItem> = TraceReader::new(&buf[..], ReaderOptions::default())
            .map(Result::unwrap)
            .collect();
        assert_eq!(back, items);
    }

    #[test]
    fn refuses_foreign_hash_block_sizes() {
        let mut it = item(0, Instant(0), None, None);
        it.request.hash_block_tokens = 16;
        let err = TraceWriter::new(Vec::new()).write(&it).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }
}
