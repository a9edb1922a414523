//! The Mooncake JSONL trace reader ([`handoff_workload::TraceReader`]) under attack.
//!
//! Each input is a byte stream of one or more lines, read four ways:
//! 1. strict, default line limit, from a slice: every `next()` is measured
//!    by the counting allocator and every record and error checked;
//! 2. skipping bad lines with a small line limit (48, 200 or 4096 bytes,
//!    chosen by the input's hash), so the over-long-line path runs and the
//!    kept errors are checked too;
//! 3. strict again through a `BufReader` of 1–64 bytes over a source that
//!    returns short reads and `Interrupted` errors: the outcome must equal
//!    (1) exactly, as a socket or pipe must not change what a file says;
//! 4. the records (1) accepted, written back with [`write_trace`] and read
//!    again: they must come back the same, times up to the rounding the
//!    writer documents.
//!
//! Checks: no panic; every error is located (its `Display` is
//! `fuzz.jsonl:LINE: FIELD: problem`, LINE is the line the reader had just
//! consumed as the harness counts it, FIELD fits the problem, a JSON syntax
//! error names a column inside the line, and the details (line limit,
//! earlier timestamp's line, hash-id count) agree with the input);
//! accepted records obey the reader's documented rules (positive lengths,
//! hash-id cap, dense ids, non-decreasing arrivals, a turn exactly when a
//! session); and no `next()` allocates more than [`ALLOC_PER_BYTE`] ×
//! (longest line it consumed, capped at the line limit) + [`ALLOC_CONST`].

use crate::alloc::{measure, Usage};
use crate::engine::{Sig, Target};
use crate::mutate::{fnv, mutate, TEXT_NUMBERS};
use crate::rng::Rng;
use handoff_workload::{
    write_trace, Problem, ReaderOptions, TraceError, TraceField, TraceItem, TraceReader,
};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Read};
use std::rc::Rc;

/// Bytes one `next()` may allocate per byte of the longest line it
/// consumed (capped at the reader's line limit). Where it goes: the line
/// buffer (< 2× the line, from doubling); `hash_ids` as `u64`s (a 2-byte
/// `1,` becomes 8 bytes: 4×, < 8× with doubling, counted twice across a
/// moving `realloc`: < 12×); the request's copy of them (4×); a `String`
/// session id or a string where a number belongs (< 2×). Sum: < 20×.
pub const ALLOC_PER_BYTE: usize = 24;

/// Bytes one `next()` may allocate regardless of line length: serde_json's
/// error message and scratch, the kept-errors list of skip mode (16
/// errors), and the session-turn table doubling. That table grows with the
/// sessions seen so far, not with the line: at 17 bytes a slot and at
/// least ~80 bytes a session line, it stays under this for inputs up to
/// about 64 KiB of session lines (the mutator's `--max-len` is 4 KiB by
/// default; the rare generated big inputs are single lines).
pub const ALLOC_CONST: usize = 64 << 10;

const NAME: &str = "fuzz.jsonl";

const SEEDS: &str = include_str!("../../seeds/trace.jsonl");

const KEYS: &[&str] = &[
    "timestamp",
    "input_length",
    "output_length",
    "hash_ids",
    "session_id",
    "delay",
    "extra",
];

const DICT: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\"",
    b"\\",
    b"\\u",
    b"\\ud800",
    b"\\u0000",
    b"\n",
    b"\r\n",
    b"\r",
    b" ",
    b"\t",
    b"\x0c",
    b"\0",
    b"\xff",
    b"\xc3\xa9",
    b"\xed\xa0\x80",
    b"null",
    b"true",
    b"false",
    b"\"timestamp\": ",
    b"\"input_length\": ",
    b"\"output_length\": ",
    b"\"hash_ids\": ",
    b"\"session_id\": ",
    b"\"delay\": ",
    b"\"hash_ids\": [",
    b"[[[[[[[[[[[[[[[[",
    b"]]]]]]]]]]]]]]]]",
    b"{\"a\":{\"a\":{\"a\":",
];

/// Measurements over the run.
#[derive(Default)]
struct Stats {
    inputs: u64,
    calls: u64,
    records: u64,
    errors: u64,
    kinds: BTreeMap<String, u64>,
    max_peak: usize,
    max_peak_line: usize,
    /// Highest peak among calls whose longest line was at most 4 KiB.
    max_small_peak: (usize, usize),
    max_ratio: f64,
    max_ratio_at: (usize, usize),
    max_requested: usize,
    longest_input: usize,
}

/// The trace-reader target.
#[derive(Default)]
pub struct TraceTarget {
    stats: Stats,
}

/// A slice as a `BufRead` whose read position the harness can see while
/// the reader owns it.
struct Tracked<'a> {
    data: &'a [u8],
    pos: Rc<Cell<usize>>,
}

impl Read for Tracked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.fill_buf()?.read(buf)?;
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for Tracked<'_> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        Ok(&self.data[self.pos.get()..])
    }
    fn consume(&mut self, n: usize) {
        self.pos.set(self.pos.get() + n);
    }
}

/// A source that hands out 1..=`max` bytes a read and now and then fails
/// with `Interrupted`, as sockets and pipes may.
pub struct Chunky<'a> {
    data: &'a [u8],
    pos: usize,
    rng: Rng,
    max: usize,
}

impl<'a> Chunky<'a> {
    /// Reads `data` in random pieces of at most `max` bytes.
    pub fn new(data: &'a [u8], rng: Rng, max: usize) -> Self {
        Chunky {
            data,
            pos: 0,
            rng,
            max: max.max(1),
        }
    }
}

impl Read for Chunky<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.rng.one_in(7) {
            return Err(io::ErrorKind::Interrupted.into());
        }
        let n = self
            .rng
            .range(1, self.max)
            .min(buf.len())
            .min(self.data.len() - self.pos);
        buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// Lines the reader has consumed once it has read `upto` bytes: every
/// newline, plus a final line without one.
fn lines_through(input: &[u8], upto: usize) -> u64 {
    let newlines = input[..upto].iter().filter(|&&b| b == b'\n').count() as u64;
    newlines + u64::from(upto > 0 && input[upto - 1] != b'\n')
}

/// The content of one-based line `n`, without newline and trailing `\r`.
fn line_text(input: &[u8], n: u64) -> &[u8] {
    let line = input
        .split(|&b| b == b'\n')
        .nth(n.saturating_sub(1) as usize)
        .unwrap_or(&[]);
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn longest_line(chunk: &[u8]) -> usize {
    chunk
        .split(|&b| b == b'\n')
        .map(<[u8]>::len)
        .max()
        .unwrap_or(0)
}

/// `Problem`'s variant name; for syntax errors serde_json's message with
/// numbers blanked and the column cut off.
fn problem_kind(p: &Problem) -> String {
    match p {
        Problem::Syntax(msg) => {
            let msg = msg.rsplit_once(" at column ").map_or(msg.as_str(), |m| m.0);
            let mut out = String::from("Syntax(");
            let mut last_digit = false;
            for c in msg.chars().take(60) {
                if c.is_ascii_digit() {
                    if !last_digit {
                        out.push('N');
                    }
                    last_digit = true;
                } else {
                    out.push(c);
                    last_digit = false;
                }
            }
            out.push(')');
            out
        }
        other => {
            let d = format!("{other:?}");
            d.split(|c: char| !c.is_alphanumeric())
                .next()
                .unwrap_or("")
                .to_string()
        }
    }
}

/// Whether `field` is one a problem of this kind may be reported against.
fn fits(field: TraceField, p: &Problem) -> bool {
    use TraceField as F;
    match p {
        Problem::TooLong { .. } | Problem::Endless { .. } => field == F::Line,
        Problem::Syntax(_) => field == F::Json,
        Problem::NotAnObject => field == F::Record,
        Problem::Io(_) => field == F::Io,
        Problem::Decreasing { .. } | Problem::BeforeFirst { .. } => {
            matches!(field, F::Timestamp | F::AzureTimestamp)
        }
        // Azure CSV problems (this harness feeds Mooncake JSONL, so they
        // should not occur; if they do, they must name CSV fields).
        Problem::MissingColumn { .. } => field == F::Header,
        Problem::MissingField | Problem::BadTimestamp => {
            matches!(
                field,
                F::AzureTimestamp | F::ContextTokens | F::GeneratedTokens | F::Header
            )
        }
        Problem::TooManyHashIds { .. } | Problem::ExpectedArray | Problem::BadElement { .. } => {
            field == F::HashIds
        }
        Problem::ExpectedStringOrInteger => field == F::SessionId,
        Problem::ExpectedAdapterName => field == F::LoraName,
        Problem::ExpectedNonNegativeNumber => matches!(field, F::Timestamp | F::Delay),
        Problem::ExpectedNonNegativeInteger | Problem::Zero => {
            matches!(field, F::InputLength | F::OutputLength)
        }
        Problem::TooLarge { .. } => matches!(
            field,
            F::Timestamp | F::Delay | F::InputLength | F::OutputLength
        ),
        Problem::Missing | Problem::Duplicate => !matches!(field, F::Line | F::Json | F::Io),
    }
}

/// Checks that `e` says where it is: the right line, a field that fits the
/// problem, and for a syntax error a column inside the line.
fn check_located(e: &TraceError, input: &[u8], want_line: Option<u64>, lines: u64) {
    check!(e.source_name() == NAME, "error names {:?}", e.source_name());
    if let Some(want) = want_line {
        check!(
            e.line() == want,
            "error on line {} but the reader had consumed {want} lines: {e}",
            e.line()
        );
    }
    check!(
        e.line() >= 1 && e.line() <= lines,
        "error line {} outside 1..={lines}: {e}",
        e.line()
    );
    check!(
        fits(e.field(), e.problem()),
        "field {} does not fit problem {:?}",
        e.field(),
        e.problem()
    );
    let text = e.to_string();
    let prefix = format!("{NAME}:{}: {}: ", e.line(), e.field().name());
    check!(
        text.starts_with(&prefix) && text.len() > prefix.len(),
        "error text {text:?} does not start with {prefix:?}"
    );
    // The details agree with the line they name.
    match e.problem() {
        Problem::Syntax(msg) => {
            let col = msg
                .rsplit_once(" at column ")
                .and_then(|(_, c)| c.parse::<usize>().ok());
            let len = line_text(input, e.line()).len();
            check!(
                col.is_some_and(|c| c >= 1 && c <= len + 1),
                "syntax error without a column inside the {len}-byte line: {e}"
            );
        }
        Problem::TooLong { limit } | Problem::Endless { limit } => {
            // The limit counts a trailing `\r`; only the newline is excluded.
            let raw = input.split(|&b| b == b'\n').nth(e.line() as usize - 1);
            check!(
                raw.is_some_and(|l| l.len() > *limit),
                "line reported longer than {limit} bytes is not: {e}"
            );
        }
        Problem::Decreasing {
            nanos,
            previous_nanos,
            previous_line,
        } => check!(
            nanos < previous_nanos && *previous_line >= 1 && *previous_line < e.line(),
            "decreasing timestamp with inconsistent details: {e}"
        ),
        Problem::TooManyHashIds { got, max, .. } => {
            check!(*got as u64 > *max, "{got} hash ids reported as over {max}")
        }
        _ => {}
    }
}

fn check_item(item: &TraceItem, index: u64, last: &mut Option<u64>) {
    let r = &item.request;
    check!(
        r.prompt_tokens >= 1 && r.max_output_tokens >= 1,
        "zero length accepted: {item:?}"
    );
    check!(
        r.prefix_hashes.len() as u64 <= u64::from(r.prompt_tokens).div_ceil(512) + 1,
        "too many hash ids accepted: {item:?}"
    );
    check!(
        r.hash_block_tokens == 512,
        "block size {}",
        r.hash_block_tokens
    );
    check!(
        item.turn.is_some() == r.session.is_some(),
        "turn without session or session without turn: {item:?}"
    );
    check!(r.id.0 == index, "id {} for the record #{index}", r.id.0);
    if let Some(prev) = *last {
        check!(r.arrival.0 >= prev, "arrival went back: {item:?}");
    }
    *last = Some(r.arrival.0);
}

/// What the reader accepted, written back with [`write_trace`] and read
/// again, must come back: the same lengths, hash ids, sessions, turns, and
/// times equal up to the rounding the writer documents (a decimal
/// millisecond value goes through an `f64`, exact to ~15 significant
/// digits).
fn rewrite(read: &[Result<TraceItem, TraceError>]) {
    let items: Vec<TraceItem> = read
        .iter()
        .filter_map(|r| r.as_ref().ok().cloned())
        .collect();
    if items.is_empty() {
        return;
    }
    let mut text = Vec::new();
    if let Err(e) = write_trace(&mut text, &items) {
        check!(false, "accepted records do not write: {e}");
    }
    let back: Vec<_> = TraceReader::new(&text[..], ReaderOptions::new(NAME)).collect();
    check!(
        back.len() == items.len(),
        "{} records written, {} read back",
        items.len(),
        back.len()
    );
    let close = |a: u64, b: u64| a.abs_diff(b) <= 1 + a.max(b) / (1 << 50);
    for (a, b) in items.iter().zip(&back) {
        let b = match b {
            Ok(b) => b,
            Err(e) => {
                check!(
                    false,
                    "the writer's own line is refused: {e}\n{}",
                    String::from_utf8_lossy(&text)
                );
                unreachable!()
            }
        };
        let (ra, rb) = (&a.request, &b.request);
        check!(
            (
                ra.id,
                ra.prompt_tokens,
                ra.max_output_tokens,
                &ra.prefix_hashes,
                ra.session,
                a.turn
            ) == (
                rb.id,
                rb.prompt_tokens,
                rb.max_output_tokens,
                &rb.prefix_hashes,
                rb.session,
                b.turn
            ),
            "record changed through the writer: {a:?} -> {b:?}"
        );
        check!(
            close(ra.arrival.0, rb.arrival.0),
            "arrival {} -> {}",
            ra.arrival.0,
            rb.arrival.0
        );
        let nanos = |d: Option<handoff_core::Duration>| d.map(|d| d.as_nanos() as u64);
        check!(
            match (nanos(a.delay), nanos(b.delay)) {
                (Some(x), Some(y)) => close(x, y),
                (x, y) => x == y,
            },
            "delay {:?} -> {:?}",
            a.delay,
            b.delay
        );
    }
}

impl TraceTarget {
    fn note(&mut self, kind: String, sig: &mut Sig) {
        sig.add(&kind);
        *self.stats.kinds.entry(kind).or_default() += 1;
    }

    fn account(&mut self, usage: Usage, line: usize) {
        let s = &mut self.stats;
        s.calls += 1;
        if usage.peak > s.max_peak {
            s.max_peak = usage.peak;
            s.max_peak_line = line;
        }
        if line <= 4096 && usage.peak > s.max_small_peak.0 {
            s.max_small_peak = (usage.peak, line);
        }
        s.max_requested = s.max_requested.max(usage.requested);
        if line >= 64 {
            let ratio = usage.peak as f64 / line as f64;
            if ratio > s.max_ratio {
                s.max_ratio = ratio;
                s.max_ratio_at = (usage.peak, line);
            }
        }
    }

    /// Reads `input` with `opts`, checking as it goes; returns what the
    /// reader yielded.
    fn read(
        &mut self,
        input: &[u8],
        opts: ReaderOptions,
        sig: &mut Sig,
    ) -> Vec<Result<TraceItem, TraceError>> {
        let total_lines = lines_through(input, input.len());
        let pos = Rc::new(Cell::new(0));
        let src = Tracked {
            data: input,
            pos: Rc::clone(&pos),
        };
        let skip = opts.skip_bad_lines;
        let limit = opts.max_line_bytes;
        let mut reader = TraceReader::new(src, opts);
        let mut out = Vec::new();
        let mut last = None;
        let mut records = 0;
        loop {
            let before = pos.get();
            let (next, usage) = measure(|| reader.next());
            let after = pos.get();
            let line = longest_line(&input[before..after]).min(limit);
            self.account(usage, line);
            let bound = ALLOC_PER_BYTE * line + ALLOC_CONST;
            check!(
                usage.peak <= bound,
                "one next() allocated {} bytes (peak) for a longest line of {line} bytes; bound {bound}",
                usage.peak
            );
            let Some(res) = next else {
                if !out.iter().any(Result::is_err) {
                    check!(
                        after == input.len(),
                        "reader ended at byte {after} of {}",
                        input.len()
                    );
                }
                break;
            };
            match &res {
                Ok(item) => {
                    check_item(item, records, &mut last);
                    records += 1;
                    self.stats.records += 1;
                    let kind = format!(
                        "ok{}{}",
                        if item.request.session.is_some() {
                            " +session"
                        } else {
                            ""
                        },
                        if item.delay.is_some() { " +delay" } else { "" },
                    );
                    self.note(kind, sig);
                }
                Err(e) => {
                    check!(!skip, "skip mode yielded an error from a slice: {e}");
                    check_located(e, input, Some(lines_through(input, after)), total_lines);
                    self.stats.errors += 1;
                    let kind = format!("{}: {}", e.field(), problem_kind(e.problem()));
                    self.note(kind, sig);
                }
            }
            out.push(res);
        }
        let stats = reader.stats();
        if skip {
            check!(
                stats.lines == total_lines,
                "{} lines counted of {total_lines}",
                stats.lines
            );
            check!(
                stats.records + stats.blank_lines + stats.bad_lines == stats.lines,
                "skip-mode counts do not add up: {stats:?}"
            );
            let mut prev = 0;
            for e in reader.errors() {
                check_located(e, input, None, total_lines);
                check!(e.line() > prev, "kept errors out of order");
                prev = e.line();
                let kind = format!("skipped {}: {}", e.field(), problem_kind(e.problem()));
                self.note(kind, sig);
            }
            check!(
                reader.errors().len() as u64 == stats.bad_lines.min(16),
                "kept {} errors of {} bad lines",
                reader.errors().len(),
                stats.bad_lines
            );
        } else {
            let failed = u64::from(out.iter().any(Result::is_err));
            check!(
                stats.records + stats.blank_lines + failed == stats.lines,
                "strict counts do not add up: {stats:?}"
            );
        }
        out
    }
}

fn gen_string(rng: &mut Rng) -> String {
    match rng.below(8) {
        0 => "\"s1\"".into(),
        1 => "\"caf\\u00e9\"".into(),
        2 => "\"\\ud800\"".into(),
        3 => "\"\\x\"".into(),
        4 => "\"tab\there\"".into(),
        5 => format!("\"{}\"", "a".repeat(rng.range(0, 300))),
        6 => "\"\"".into(),
        _ => format!("\"{}\"", rng.next_u64()),
    }
}

fn gen_value(rng: &mut Rng, depth: usize) -> String {
    match rng.below(if depth > 2 { 4 } else { 7 }) {
        0 => TEXT_NUMBERS[rng.below(TEXT_NUMBERS.len())].to_string(),
        1 => rng.interesting_u64().to_string(),
        2 => format!("{}", (rng.next_u64() as f64) / 1e6),
        3 => gen_string(rng),
        4 => {
            let n = rng.below(6);
            let items: Vec<String> = (0..n)
                .map(|_| {
                    if rng.one_in(4) {
                        gen_value(rng, depth + 1)
                    } else {
                        rng.below(1000).to_string()
                    }
                })
                .collect();
            format!("[{}]", items.join(", "))
        }
        5 => {
            let n = rng.below(3);
            let items: Vec<String> = (0..n)
                .map(|_| format!("\"{}\": {}", rng.pick(KEYS), gen_value(rng, depth + 1)))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
        _ => ["null", "true", "false"][rng.below(3)].to_string(),
    }
}

/// A plausible record: mostly the right keys with mostly sensible values,
/// some of them extreme or of the wrong type.
fn gen_record(rng: &mut Rng) -> String {
    let mut fields = Vec::new();
    for key in KEYS {
        if rng.one_in(6) {
            continue;
        }
        let value = if rng.one_in(3) {
            gen_value(rng, 0)
        } else {
            match *key {
                "timestamp" | "delay" => format!("{}", rng.below(100_000)),
                "input_length" => format!("{}", rng.range(1, 20_000)),
                "output_length" => format!("{}", rng.range(1, 2000)),
                "hash_ids" => {
                    let n = rng.below(12);
                    let ids: Vec<String> = (0..n).map(|i| i.to_string()).collect();
                    format!("[{}]", ids.join(", "))
                }
                "session_id" => gen_string(rng),
                _ => gen_value(rng, 1),
            }
        };
        fields.push(format!("\"{key}\": {value}"));
        if rng.one_in(20) {
            fields.push(format!("\"{key}\": {}", gen_value(rng, 0)));
        }
    }
    if rng.coin() {
        let n = fields.len();
        for i in 0..n {
            fields.swap(i, rng.below(n));
        }
    }
    format!("{{{}}}", fields.join(", "))
}

/// A line far longer than the mutator's cap: many hash ids, or a long
/// string, to exercise allocation bounds on big inputs.
fn gen_big(rng: &mut Rng) -> Vec<u8> {
    let n = rng.range(10_000, 200_000);
    match rng.below(3) {
        0 => {
            let ids: Vec<String> = (0..n).map(|i| (i % 1000).to_string()).collect();
            let prompt = if rng.coin() { n * 512 } else { n };
            format!(
                "{{\"timestamp\": 1, \"input_length\": {prompt}, \"output_length\": 1, \"hash_ids\": [{}]}}\n",
                ids.join(",")
            )
            .into_bytes()
        }
        1 => format!(
            "{{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [], \"session_id\": \"{}\"}}\n",
            "\\u00e9".repeat(n / 4)
        )
        .into_bytes(),
        _ => {
            let mut v = "[".repeat(n).into_bytes();
            v.push(b'\n');
            v
        }
    }
}

impl Target for TraceTarget {
    fn name(&self) -> &'static str {
        "trace"
    }

    fn seeds(&mut self) -> Vec<Vec<u8>> {
        let mut seeds: Vec<Vec<u8>> = SEEDS
            .split_inclusive('\n')
            .map(|l| l.as_bytes().to_vec())
            .collect();
        // The whole file (sessions across lines, a decreasing timestamp) and
        // a line without its newline.
        seeds.push(SEEDS.as_bytes().to_vec());
        seeds.push(SEEDS.lines().next().unwrap_or("").as_bytes().to_vec());
        seeds.push(Vec::new());
        seeds
    }

    fn generate(&mut self, rng: &mut Rng) -> Vec<u8> {
        match rng.below(40) {
            0 => {
                if rng.one_in(50) {
                    return gen_big(rng);
                }
                (0..rng.below(256)).map(|_| rng.next_u64() as u8).collect()
            }
            _ => {
                let n = rng.range(1, 4);
                let mut out = String::new();
                for _ in 0..n {
                    out.push_str(&gen_record(rng));
                    out.push_str(if rng.one_in(8) { "\r\n" } else { "\n" });
                }
                out.into_bytes()
            }
        }
    }

    fn mutate(&mut self, rng: &mut Rng, buf: &mut Vec<u8>, corpus: &[Vec<u8>], max_len: usize) {
        match rng.below(6) {
            // Line-level: swap, duplicate or drop a line, or add a record.
            0 => {
                let mut lines: Vec<Vec<u8>> = buf
                    .split_inclusive(|&b| b == b'\n')
                    .map(<[u8]>::to_vec)
                    .collect();
                let n = lines.len();
                match rng.below(4) {
                    0 if n > 1 => lines.swap(rng.below(n), rng.below(n)),
                    1 if n > 0 => {
                        let l = lines[rng.below(n)].clone();
                        lines.insert(rng.below(n + 1), l);
                    }
                    2 if n > 1 => {
                        lines.remove(rng.below(n));
                    }
                    _ => {
                        let mut rec = gen_record(rng).into_bytes();
                        rec.push(b'\n');
                        lines.insert(rng.below(n + 1), rec);
                    }
                }
                *buf = lines.concat();
                buf.truncate(max_len);
            }
            // Replace the value after a known key with another value.
            1 => {
                let key = format!("\"{}\"", rng.pick(KEYS));
                let Some(at) = find(buf, key.as_bytes()) else {
                    return mutate(rng, buf, corpus, DICT, true, max_len);
                };
                let mut start = at + key.len();
                while start < buf.len() && matches!(buf[start], b' ' | b':') {
                    start += 1;
                }
                let end = value_end(buf, start);
                buf.splice(start..end, gen_value(rng, 0).into_bytes());
                buf.truncate(max_len);
            }
            _ => mutate(rng, buf, corpus, DICT, true, max_len),
        }
    }

    fn run(&mut self, input: &[u8]) -> Vec<u64> {
        let mut rng = Rng::new(fnv(input));
        let s = &mut self.stats;
        s.inputs += 1;
        s.longest_input = s.longest_input.max(input.len());
        let mut sig = Sig::default();
        let strict = self.read(input, ReaderOptions::new(NAME), &mut sig);
        let mut skipping = ReaderOptions::new(NAME).skipping_bad_lines();
        skipping.max_line_bytes = *rng.pick(&[48, 200, 4096]);
        self.read(input, skipping, &mut sig);
        let cap = rng.range(1, 64);
        let max = rng.range(1, 80);
        let chunked: Vec<_> = TraceReader::new(
            BufReader::with_capacity(cap, Chunky::new(input, rng.clone(), max)),
            ReaderOptions::new(NAME),
        )
        .collect();
        check!(
            chunked == strict,
            "reading through a {cap}-byte buffer in pieces of <= {max} bytes changed the outcome"
        );
        rewrite(&strict);
        sig.finish()
    }

    fn summary(&self) -> String {
        let s = &self.stats;
        let mut out = format!(
            "  inputs {} (longest {} bytes), next() calls {}, records {}, errors {}\n",
            s.inputs, s.longest_input, s.calls, s.records, s.errors
        );
        out.push_str(&format!(
            "  max allocation in one next(): {} bytes peak (longest line {} bytes); {} bytes requested\n",
            s.max_peak, s.max_peak_line, s.max_requested
        ));
        out.push_str(&format!(
            "  max allocation in one next() with lines <= 4 KiB: {} bytes peak (longest line {} bytes)\n",
            s.max_small_peak.0, s.max_small_peak.1
        ));
        out.push_str(&format!(
            "  worst peak per line byte (lines >= 64 bytes): {:.2} ({} bytes for {}); bound {ALLOC_PER_BYTE} x line + {ALLOC_CONST}\n",
            s.max_ratio, s.max_ratio_at.0, s.max_ratio_at.1
        ));
        out.push_str(&format!("  outcome kinds ({}):\n", s.kinds.len()));
        for (k, n) in &s.kinds {
            out.push_str(&format!("    {n:>9}  {k}\n"));
        }
        out
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Where the JSON value starting at `start` ends, roughly: at the first
/// `,` `}` `]` or newline outside brackets and strings.
fn value_end(buf: &[u8], start: usize) -> usize {
    let mut depth = 0i32;
    let mut in_str = false;
    let mut i = start;
    while i < buf.len() {
        let b = buf[i];
        if in_str {
            match b {
                b'\\' => i += 1,
                b'"' => in_str = false,
                b'\n' => return i,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_str = true,
                b'[' | b'{' => depth += 1,
                b']' | b'}' if depth == 0 => return i,
                b']' | b'}' => depth -= 1,
                b',' | b'\n' if depth == 0 => return i,
                _ => {}
            }
        }
        i += 1;
    }
    buf.len().min(i)
}

#[cfg(test)]
mod tests;
