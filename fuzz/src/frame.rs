//! The transport frame decoder ([`handoff_transport::FrameReader`]) under attack,
//! as both transports use it.
//!
//! TCP: `tcp.rs` reads every connection with a `FrameReader<TcpStream>`:
//! `read_hello`, then `read_frame` until end of stream, `Bye`, an error, or
//! a second `Hello` (which it reports as
//! [`DecodeErrorKind::UnexpectedHello`] at the frame's offset). Each input
//! is decoded
//! 1. as a plain frame stream from a slice, every `read_frame` measured by
//!    the counting allocator and every frame and error checked;
//! 2. the way a TCP connection is served (handshake first, the `Hello` and
//!    `Bye` rules of `TcpEndpoint`'s reader loop, rebuilt here because that
//!    loop is private), which must agree with (1) frame for frame;
//! 3. as (1) again through a reader that returns short reads and
//!    `Interrupted`, as a socket does, which must give exactly (1).
//!
//! Channel: `channel.rs` moves typed [`Frame`] values through crossbeam
//! channels and never encodes or decodes, so there is no decoder to attack.
//! Its typed path is still exercised: every frame the decoder accepted is
//! sent through a [`ChannelNet`] pair and must arrive equal (or, for
//! `Hello`/`Bye`, be refused as a control frame).
//!
//! Checks: no panic; every error is located (it carries the stream offset of
//! the offending frame's length prefix, which is where the harness saw that
//! frame start, and its `Display` starts `at byte OFFSET: `), and its
//! details agree with the bytes (claimed length, bytes present, bytes used);
//! a `TrailingBytes` frame really decodes from its used prefix; accepted
//! frames re-encode and decode back equal; an over-size length costs no
//! allocation at all; and no `read_frame` allocates more than
//! [`ALLOC_PER_BYTE`] × (bytes it consumed) + [`ALLOC_CONST`], nor more
//! than [`ALLOC_ABSOLUTE`] in any case.

use crate::alloc::{measure, Usage};
use crate::engine::{Sig, Target};
use crate::frames::{detailed_name, every_frame, gen_frame};
use crate::mutate::{binary_number, fnv, mutate};
use crate::rng::Rng;
use crate::trace::Chunky;
use handoff_core::{Generation, WorkerId};
use handoff_transport::codec::HEADER_LEN;
use handoff_transport::{
    encode_frame, ChannelEndpoint, ChannelNet, DecodeError, DecodeErrorKind, Frame, FrameReader,
    Incoming, ReadError, SendError, Transport, MAX_FRAME,
};
use std::collections::BTreeMap;
use std::io::Read;

/// Bytes one `read_frame` may allocate per byte it consumed. Where they
/// go: the body buffer (< 2× the body, grown by doubling as bytes arrive);
/// the decoded frame, whose vectors hold a `u64` (8 bytes) per one-byte
/// varint (< 16× with doubling, < 24× across a moving `realloc`).
pub const ALLOC_PER_BYTE: usize = 32;

/// Bytes one `read_frame` may allocate however few it consumed: vectors
/// are pre-sized from at most 4 KiB of a claimed length
/// (`handoff_core::serde_vec`), a frame nests at most two
/// (`HostReply::outputs`, and the block hashes of a `Kv` event inside it),
/// and error strings are short; 64 KiB leaves room. (Before `serde_vec`,
/// serde's own pre-sizing let a 14-byte frame cost 1 MiB and a nested
/// claim 2 MiB: this harness's small-frame peak is how that showed.)
pub const ALLOC_CONST: usize = 64 << 10;

/// Bytes no `read_frame` may exceed, whatever it consumed: bincode's
/// limit caps the decoded primitives at [`MAX_FRAME`] bytes, so the body
/// buffer (< 2 × `MAX_FRAME`) and the decoded vectors (< 3 × `MAX_FRAME`
/// across a moving `realloc`) stay under this.
pub const ALLOC_ABSOLUTE: usize = 6 * MAX_FRAME;

type Decoded = Vec<Result<Frame, DecodeError>>;

/// Measurements over the run.
#[derive(Default)]
struct Stats {
    inputs: u64,
    calls: u64,
    frames: u64,
    errors: u64,
    non_canonical: u64,
    channel_sent: u64,
    kinds: BTreeMap<String, u64>,
    max_peak: usize,
    max_peak_consumed: usize,
    /// Highest peak among calls that consumed at most 4 KiB, with what
    /// they consumed: where a lying vector length shows.
    max_small_peak: (usize, usize),
    max_requested: usize,
    longest_input: usize,
}

/// The frame-decoder target.
pub struct FrameTarget {
    stats: Stats,
    _net: ChannelNet,
    a: ChannelEndpoint,
    b: ChannelEndpoint,
}

impl Default for FrameTarget {
    fn default() -> Self {
        let net = ChannelNet::new();
        let a = net.endpoint(WorkerId(1), Generation(0));
        let b = net.endpoint(WorkerId(2), Generation(0));
        while a.incoming().try_recv().is_ok() {}
        while b.incoming().try_recv().is_ok() {}
        FrameTarget {
            stats: Stats::default(),
            _net: net,
            a,
            b,
        }
    }
}

fn header(input: &[u8], at: usize) -> Option<u64> {
    let h = input.get(at..at + HEADER_LEN)?;
    Some(u64::from(u32::from_be_bytes([h[0], h[1], h[2], h[3]])))
}

/// The frames and the first error, the way any reader of a stream sees
/// them.
fn decode_all<R: Read>(r: R) -> Decoded {
    let mut r = FrameReader::new(r);
    let mut out = Vec::new();
    loop {
        match r.read_frame() {
            Ok(Some(f)) => out.push(Ok(f)),
            Ok(None) => return out,
            Err(ReadError::Decode(e)) => {
                out.push(Err(e));
                return out;
            }
            Err(ReadError::Io(e)) => {
                panic!("check failed: i/o error from an in-memory reader: {e}")
            }
        }
    }
}

/// bincode's complaint with numbers blanked, for the histogram.
fn reason_kind(reason: &str) -> String {
    let mut out = String::new();
    let mut last_digit = false;
    for c in reason.chars().take(120) {
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
    out
}

fn error_kind(e: &DecodeError, consumed: usize) -> String {
    match &e.kind {
        DecodeErrorKind::TooLarge { .. } => "TooLarge".into(),
        DecodeErrorKind::Truncated { .. } if consumed < HEADER_LEN => "Truncated (header)".into(),
        DecodeErrorKind::Truncated { .. } => "Truncated (body)".into(),
        DecodeErrorKind::BadBody { reason, .. } => format!("BadBody: {}", reason_kind(reason)),
        DecodeErrorKind::TrailingBytes { .. } => "TrailingBytes".into(),
        DecodeErrorKind::NotHello { .. } => "NotHello".into(),
        DecodeErrorKind::UnexpectedHello => "UnexpectedHello".into(),
    }
}

/// Checks that `e`, returned by a `read_frame` that started at `start`
/// and left the reader at `end`, says where and what: the offset of the
/// frame's prefix, and details that agree with the bytes.
fn check_located(e: &DecodeError, input: &[u8], start: usize, end: usize, usage: Usage) {
    check!(
        e.offset == start as u64,
        "error at offset {} but the frame started at {start}: {e}",
        e.offset
    );
    check!(start < input.len(), "error at the end of the stream: {e}");
    let text = e.to_string();
    let prefix = format!("at byte {start}: ");
    check!(
        text.starts_with(&prefix),
        "error text {text:?} lacks {prefix:?}"
    );
    let claimed = header(input, start);
    let body = (end - start).saturating_sub(HEADER_LEN) as u64;
    match &e.kind {
        DecodeErrorKind::TooLarge { len } => {
            check!(
                claimed == Some(*len) && *len > MAX_FRAME as u64,
                "TooLarge {len} vs prefix {claimed:?}"
            );
            check!(end == start + HEADER_LEN, "an over-size body was read");
            check!(
                usage.peak == 0,
                "refusing an over-size frame allocated {} bytes",
                usage.peak
            );
        }
        DecodeErrorKind::Truncated { expected, got } => {
            check!(
                end == input.len(),
                "truncation before the end of the stream"
            );
            check!(
                got < expected,
                "Truncated with got {got} >= expected {expected}"
            );
            // `expected` is 4 both for a cut header and for a cut 4-byte
            // body; what was consumed tells them apart.
            if end - start < HEADER_LEN {
                check!(
                    *expected == HEADER_LEN as u64 && *got == (end - start) as u64,
                    "header truncation miscounted: {e}"
                );
            } else {
                check!(
                    claimed == Some(*expected) && *got == body,
                    "body truncation miscounted: {e}"
                );
            }
        }
        DecodeErrorKind::BadBody { len, reason } => {
            check!(
                claimed == Some(*len) && body == *len,
                "BadBody length {len} vs prefix {claimed:?}, body {body}"
            );
            check!(!reason.is_empty(), "BadBody without a reason");
        }
        DecodeErrorKind::TrailingBytes { len, used } => {
            check!(
                claimed == Some(*len) && body == *len && used < len,
                "TrailingBytes {used}/{len} vs prefix {claimed:?}"
            );
            // The used prefix of the body must be a frame on its own.
            let body = &input[start + HEADER_LEN..start + HEADER_LEN + *used as usize];
            let mut alone = (*used as u32).to_be_bytes().to_vec();
            alone.extend_from_slice(body);
            let again = decode_all(&alone[..]);
            check!(
                matches!(again.as_slice(), [Ok(_)]),
                "the {used} bytes a TrailingBytes frame used do not decode alone: {again:?}"
            );
        }
        DecodeErrorKind::NotHello { .. } | DecodeErrorKind::UnexpectedHello => {
            check!(false, "read_frame returned a handshake error: {e}")
        }
    }
}

impl FrameTarget {
    fn note(&mut self, kind: String, sig: &mut Sig) {
        sig.add(&kind);
        *self.stats.kinds.entry(kind).or_default() += 1;
    }

    /// The frame re-encodes, and its encoding decodes to it.
    fn round_trip(&mut self, f: &Frame, body: &[u8], sig: &mut Sig) {
        let mut out = Vec::new();
        if let Err(e) = encode_frame(f, &mut out) {
            check!(false, "a decoded {} does not re-encode: {e}", f.name());
        }
        let back = decode_all(&out[..]);
        check!(
            back.len() == 1 && back[0].as_ref().ok() == Some(f),
            "re-encoded {} decodes to {back:?}",
            f.name()
        );
        if out[HEADER_LEN..] != *body {
            self.stats.non_canonical += 1;
            self.note(
                format!("ok {} (non-canonical bytes accepted)", f.name()),
                sig,
            );
        }
    }

    /// The channel transport moves the value unchanged, or refuses a
    /// control frame.
    fn channel(&mut self, f: &Frame) {
        self.stats.channel_sent += 1;
        match self.a.send(WorkerId(2), f.clone()) {
            Err(SendError::ControlFrame(name)) => {
                check!(
                    f.is_control() && name == f.name(),
                    "channel refused {} as control",
                    f.name()
                )
            }
            Ok(()) => {
                check!(!f.is_control(), "channel sent control frame {}", f.name());
                match self.b.incoming().try_recv() {
                    Ok(Incoming::Frame { from, frame }) => check!(
                        from == WorkerId(1) && frame == *f,
                        "channel delivered {} from {from} changed",
                        f.name()
                    ),
                    other => check!(false, "channel delivered {other:?}"),
                }
            }
            Err(e) => check!(false, "channel send failed: {e}"),
        }
    }

    /// (1): the measured, checked stream decode.
    fn stream(&mut self, input: &[u8], sig: &mut Sig) -> Decoded {
        let mut r = FrameReader::new(input);
        let mut out = Vec::new();
        loop {
            let start = r.offset() as usize;
            let (res, usage) = measure(|| r.read_frame());
            let end = r.offset() as usize;
            check!(
                r.frame_start() == start as u64,
                "frame_start {} != {start}",
                r.frame_start()
            );
            let consumed = end - start;
            let s = &mut self.stats;
            s.calls += 1;
            if usage.peak > s.max_peak {
                s.max_peak = usage.peak;
                s.max_peak_consumed = consumed;
            }
            if consumed <= 4096 && usage.peak > s.max_small_peak.0 {
                s.max_small_peak = (usage.peak, consumed);
            }
            s.max_requested = s.max_requested.max(usage.requested);
            let bound = (ALLOC_PER_BYTE * consumed + ALLOC_CONST).min(ALLOC_ABSOLUTE);
            check!(
                usage.peak <= bound,
                "one read_frame allocated {} bytes (peak) for {consumed} bytes; bound {bound}",
                usage.peak
            );
            match res {
                Ok(None) => {
                    check!(
                        start == input.len() && end == start,
                        "clean end at {start} of {}",
                        input.len()
                    );
                    return out;
                }
                Ok(Some(f)) => {
                    check!(consumed > HEADER_LEN, "a frame from {consumed} bytes");
                    check!(
                        header(input, start) == Some((consumed - HEADER_LEN) as u64),
                        "frame length disagrees with its prefix"
                    );
                    self.stats.frames += 1;
                    self.round_trip(&f, &input[start + HEADER_LEN..end], sig);
                    self.channel(&f);
                    self.note(format!("ok {}", detailed_name(&f)), sig);
                    out.push(Ok(f));
                }
                Err(ReadError::Decode(e)) => {
                    check_located(&e, input, start, end, usage);
                    self.stats.errors += 1;
                    self.note(error_kind(&e, consumed), sig);
                    out.push(Err(e));
                    return out;
                }
                Err(ReadError::Io(e)) => check!(false, "i/o error from a slice: {e}"),
            }
        }
    }

    /// (2): the connection as `TcpEndpoint` serves it, against (1).
    fn handshake(&mut self, input: &[u8], stream: &Decoded, sig: &mut Sig) {
        let mut r = FrameReader::new(input);
        match r.read_hello() {
            Ok((worker, generation, role)) => check!(
                stream.first()
                    == Some(&Ok(Frame::Hello {
                        worker,
                        generation,
                        role
                    })),
                "handshake accepted what the stream did not start with"
            ),
            Err(ReadError::Decode(e)) => {
                check!(e.offset == 0, "handshake error at {}: {e}", e.offset);
                check!(
                    e.to_string().starts_with("at byte 0: "),
                    "handshake error text {e}"
                );
                match (&e.kind, stream.first()) {
                    (DecodeErrorKind::NotHello { got }, Some(Ok(f))) => {
                        check!(
                            *got == f.name(),
                            "NotHello names {got}, stream has {}",
                            f.name()
                        )
                    }
                    (
                        DecodeErrorKind::Truncated {
                            expected: 4,
                            got: 0,
                        },
                        None,
                    ) => {
                        check!(input.is_empty(), "empty handshake on a non-empty stream")
                    }
                    (_, first) => check!(
                        first == Some(&Err(e.clone())),
                        "handshake error {e} vs stream {first:?}"
                    ),
                }
                self.note(format!("handshake: {}", error_kind(&e, input.len())), sig);
                return;
            }
            Err(ReadError::Io(e)) => check!(false, "i/o error from a slice: {e}"),
        }
        let mut i = 1;
        loop {
            let res = r.read_frame();
            match res {
                Ok(None) => {
                    check!(
                        stream.len() == i,
                        "connection ended after {i} frames, stream has {}",
                        stream.len()
                    );
                    self.note("handshake: end of stream".into(), sig);
                    return;
                }
                Ok(Some(Frame::Bye)) => {
                    check!(
                        stream.get(i) == Some(&Ok(Frame::Bye)),
                        "Bye where the stream has none"
                    );
                    self.note("handshake: Bye".into(), sig);
                    return;
                }
                Ok(Some(f @ Frame::Hello { .. })) => {
                    check!(
                        stream.get(i) == Some(&Ok(f)),
                        "second Hello where the stream has none"
                    );
                    // What tcp.rs reports for it.
                    let e = DecodeError {
                        offset: r.frame_start(),
                        kind: DecodeErrorKind::UnexpectedHello,
                    };
                    check!(
                        (e.offset as usize) < input.len(),
                        "UnexpectedHello past the end"
                    );
                    check!(
                        e.to_string() == format!("at byte {}: Hello after the handshake", e.offset),
                        "UnexpectedHello text {e}"
                    );
                    self.note("handshake: UnexpectedHello".into(), sig);
                    return;
                }
                Ok(Some(f)) => {
                    check!(
                        stream.get(i) == Some(&Ok(f)),
                        "connection and stream disagree at frame {i}"
                    );
                }
                Err(ReadError::Decode(e)) => {
                    check!(
                        stream.get(i) == Some(&Err(e)),
                        "connection and stream disagree at frame {i}"
                    );
                    return;
                }
                Err(ReadError::Io(e)) => check!(false, "i/o error from a slice: {e}"),
            }
            i += 1;
        }
    }
}

/// Ranges of the whole frames at the start of `buf` (walking the length
/// prefixes), and where the rest begins.
fn split(buf: &[u8]) -> (Vec<(usize, usize)>, usize) {
    let mut frames = Vec::new();
    let mut pos = 0;
    while let Some(len) = header(buf, pos) {
        let end = pos + HEADER_LEN + len as usize;
        if len as usize > MAX_FRAME || end > buf.len() {
            break;
        }
        frames.push((pos, end));
        pos = end;
    }
    (frames, pos)
}

fn encode(f: &Frame) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame(f, &mut out).expect("generated frames encode");
    out
}

/// bincode's varint encoding (the codec's `standard()` configuration).
fn varint(v: u64, out: &mut Vec<u8>) {
    if v < 251 {
        out.push(v as u8);
    } else if v <= u64::from(u16::MAX) {
        out.push(251);
        out.extend_from_slice(&(v as u16).to_le_bytes());
    } else if v <= u64::from(u32::MAX) {
        out.push(252);
        out.extend_from_slice(&(v as u32).to_le_bytes());
    } else {
        out.push(253);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// A `Request` frame with `n` prefix hashes, built by hand so that it can
/// be larger than the encoder allows: bodies near and over `MAX_FRAME`,
/// decoded sizes over bincode's limit, and lying length prefixes.
fn big_request(rng: &mut Rng) -> Vec<u8> {
    let n = rng.range(50_000, 700_000);
    let wide = rng.coin();
    // Frame::Request, WorkerRequest::Ordinary, id 1, prompt 1, max output 1.
    let mut body = vec![2, 0, 1, 1, 1];
    varint(n as u64, &mut body);
    for i in 0..n {
        varint(
            if wide {
                u64::MAX - i as u64
            } else {
                (i % 250) as u64
            },
            &mut body,
        );
    }
    // hash_block_tokens 512, no session, arrival 7, no LoRA adapter.
    varint(512, &mut body);
    body.extend_from_slice(&[0, 7, 0]);
    let len = if rng.one_in(4) {
        rng.range(body.len() / 2, body.len() * 2)
    } else {
        body.len()
    };
    let mut out = (len.min(u32::MAX as usize) as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

fn set_len(buf: &mut [u8], at: usize, len: u64) {
    buf[at..at + HEADER_LEN].copy_from_slice(&(len as u32).to_be_bytes());
}

impl Target for FrameTarget {
    fn name(&self) -> &'static str {
        "frame"
    }

    fn seeds(&mut self) -> Vec<Vec<u8>> {
        let frames = every_frame();
        let mut seeds: Vec<Vec<u8>> = frames.iter().map(encode).collect();
        // A whole connection: Hello, everything, Bye.
        seeds.push(frames.iter().flat_map(encode).collect());
        let hello = encode(&frames[0]);
        for f in &frames[1..] {
            let mut s = hello.clone();
            s.extend(encode(f));
            seeds.push(s);
        }
        seeds.push(Vec::new());
        seeds.push(vec![0, 0, 0, 0]);
        seeds.push((MAX_FRAME as u32 + 1).to_be_bytes().to_vec());
        seeds
    }

    fn generate(&mut self, rng: &mut Rng) -> Vec<u8> {
        match rng.below(60) {
            0 => big_request(rng),
            1 | 2 => (0..rng.below(64)).map(|_| rng.next_u64() as u8).collect(),
            _ => {
                let mut out = Vec::new();
                if rng.coin() {
                    out.extend(encode(&Frame::Hello {
                        worker: WorkerId(rng.below(8) as u32),
                        generation: Generation(rng.below(4) as u32),
                        role: handoff_transport::PeerRole::Any,
                    }));
                }
                for _ in 0..rng.range(1, 4) {
                    out.extend(encode(&gen_frame(rng)));
                }
                if rng.one_in(4) {
                    out.extend(encode(&Frame::Bye));
                }
                out
            }
        }
    }

    fn mutate(&mut self, rng: &mut Rng, buf: &mut Vec<u8>, corpus: &[Vec<u8>], max_len: usize) {
        let (frames, _) = split(buf);
        if frames.is_empty() || rng.one_in(4) {
            return mutate(rng, buf, corpus, &[], false, max_len);
        }
        let (start, end) = *rng.pick(&frames);
        let len = (end - start - HEADER_LEN) as u64;
        match rng.below(9) {
            // Length-prefix tampering.
            0 | 1 => {
                let lie = match rng.below(10) {
                    0 => 0,
                    1 => len.saturating_sub(1),
                    2 => len + 1,
                    3 => len + rng.range(2, 64) as u64,
                    4 => MAX_FRAME as u64,
                    5 => MAX_FRAME as u64 + 1,
                    6 => 0x8000_0000,
                    7 => u64::from(u32::MAX),
                    8 => rng.below(len as usize + 1) as u64,
                    _ => rng.next_u64() & 0xffff_ffff,
                };
                set_len(buf, start, lie);
            }
            // Mutate inside a body and fix its prefix, so the damage
            // reaches bincode instead of desynchronising the stream.
            2..=4 => {
                let mut body = buf[start + HEADER_LEN..end].to_vec();
                if rng.coin() {
                    let num = binary_number(rng);
                    let at = rng.below(body.len() + 1);
                    let to = if rng.coin() {
                        (at + num.len()).min(body.len())
                    } else {
                        at
                    };
                    body.splice(at..to, num);
                } else {
                    for _ in 0..rng.range(1, 3) {
                        mutate(rng, &mut body, &[], &[], false, max_len);
                    }
                }
                let mut framed = (body.len() as u32).to_be_bytes().to_vec();
                framed.extend(body);
                buf.splice(start..end, framed);
            }
            // Duplicate, drop or move a frame.
            5 => {
                let f = buf[start..end].to_vec();
                let (to, _) = *rng.pick(&frames);
                buf.splice(to..to, f);
            }
            6 => {
                buf.drain(start..end);
            }
            7 => {
                let (s2, e2) = *rng.pick(&frames);
                if s2 > end {
                    let second = buf[s2..e2].to_vec();
                    let first = buf[start..end].to_vec();
                    buf.splice(s2..e2, first);
                    buf.splice(start..end, second);
                }
            }
            // A new frame, or one from another input, at a frame boundary.
            _ => {
                let f = if rng.coin() || corpus.is_empty() {
                    encode(&gen_frame(rng))
                } else {
                    let other = rng.pick(corpus);
                    let (of, _) = split(other);
                    match of.get(rng.below(of.len().max(1))) {
                        Some(&(s, e)) => other[s..e].to_vec(),
                        None => encode(&Frame::Hello {
                            worker: WorkerId(1),
                            generation: Generation(0),
                            role: handoff_transport::PeerRole::Decode,
                        }),
                    }
                };
                let at = if rng.coin() { start } else { end };
                buf.splice(at..at, f);
            }
        }
        buf.truncate(max_len);
    }

    fn run(&mut self, input: &[u8]) -> Vec<u64> {
        let mut rng = Rng::new(fnv(input));
        self.stats.inputs += 1;
        self.stats.longest_input = self.stats.longest_input.max(input.len());
        let mut sig = Sig::default();
        let stream = self.stream(input, &mut sig);
        self.handshake(input, &stream, &mut sig);
        let max = rng.range(1, 97);
        let chunked = decode_all(Chunky::new(input, rng.clone(), max));
        check!(
            chunked == stream,
            "reading in pieces of <= {max} bytes changed the outcome"
        );
        sig.finish()
    }

    fn summary(&self) -> String {
        let s = &self.stats;
        let mut out = format!(
            "  inputs {} (longest {} bytes), read_frame calls {}, frames {}, errors {}\n",
            s.inputs, s.longest_input, s.calls, s.frames, s.errors
        );
        out.push_str(&format!(
            "  re-encoded differently (non-canonical input accepted): {}; frames through the channel transport: {}\n",
            s.non_canonical, s.channel_sent
        ));
        out.push_str(&format!(
            "  max allocation in one read_frame: {} bytes peak (for {} bytes consumed); {} bytes requested\n",
            s.max_peak, s.max_peak_consumed, s.max_requested
        ));
        out.push_str(&format!(
            "  max allocation in one read_frame of <= 4 KiB: {} bytes peak (for {} bytes consumed)\n",
            s.max_small_peak.0, s.max_small_peak.1
        ));
        out.push_str(&format!(
            "  bound: min({ALLOC_PER_BYTE} x consumed + {ALLOC_CONST}, {ALLOC_ABSOLUTE})\n"
        ));
        out.push_str(&format!("  outcome kinds ({}):\n", s.kinds.len()));
        for (k, n) in &s.kinds {
            out.push_str(&format!("    {n:>9}  {k}\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_core::{Instant, Request, RequestId, WorkerRequest};

    #[test]
    fn hand_built_request_matches_the_encoder() {
        let f = Frame::Request(WorkerRequest::Ordinary(Request {
            id: RequestId(1),
            prompt_tokens: 1,
            max_output_tokens: 1,
            prefix_hashes: vec![0, 1, u64::MAX],
            hash_block_tokens: 512,
            session: None,
            arrival: Instant(7),
            lora: None,
        }));
        let mut body = vec![2, 0, 1, 1, 1, 3, 0, 1];
        varint(u64::MAX, &mut body);
        varint(512, &mut body);
        body.extend_from_slice(&[0, 7, 0]);
        assert_eq!(encode(&f)[HEADER_LEN..], body[..]);
    }

    #[test]
    fn split_walks_prefixes() {
        let mut s = encode(&Frame::Bye);
        let one = s.len();
        s.extend(encode(&Frame::FinalQuery));
        s.extend([0, 0, 9]);
        let (frames, rest) = split(&s);
        assert_eq!(frames, vec![(0, one), (one, 2 * one)]);
        assert_eq!(rest, 2 * one);
    }

    #[test]
    fn seeds_pass_every_check() {
        let mut t = FrameTarget::default();
        for s in t.seeds() {
            t.run(&s);
        }
        assert!(t.stats.frames >= every_frame().len() as u64);
        assert!(t.stats.kinds.contains_key("TooLarge"));
    }
}
